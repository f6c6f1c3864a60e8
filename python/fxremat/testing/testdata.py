"""How ``testdata/`` is produced (shared by ``tools/make_testdata.py`` and the tests)."""

from __future__ import annotations

import os
import re
import site
import sysconfig
from pathlib import Path

from . import programs

SUFFIX = ".json.gz"
# python/fxremat/testing/testdata.py -> the repository root (in an editable install)
REPO_ROOT = Path(__file__).resolve().parents[3]
TESTDATA_DIR = REPO_ROOT / "testdata"

_FILE_RE = re.compile(r'File "([^"]+)"')


def _prefixes() -> list[tuple[str, str]]:
    out = []
    dirs = set()
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv without site.getsitepackages
        pass
    for key in ("purelib", "platlib"):
        dirs.add(sysconfig.get_paths()[key])
    for d in dirs:
        out.append((os.path.realpath(d) + os.sep, "<site-packages>/"))
        out.append((os.path.abspath(d) + os.sep, "<site-packages>/"))
    std = sysconfig.get_paths()["stdlib"]
    out.append((os.path.realpath(std) + os.sep, "<stdlib>/"))
    out.append((str(REPO_ROOT) + os.sep, ""))
    return sorted(set(out), key=lambda x: -len(x[0]))


def portable_stack_trace(st: str) -> str:
    """Machine-independent file names: repo-relative, ``<site-packages>/...``, ``<stdlib>/...``."""
    prefixes = _prefixes()

    def repl(m: re.Match) -> str:
        p = m.group(1)
        for prefix, replacement in prefixes:
            if p.startswith(prefix):
                return f'File "{replacement}{p[len(prefix):]}"'
        return m.group(0)

    return _FILE_RE.sub(repl, st)


def export_program(name: str):
    """Export program ``name`` as it is stored in ``testdata/NAME.json.gz``."""
    import fxremat

    p = programs.build(name)
    jg = fxremat.export_joint(p.fn, *p.args, name=name, **p.kwargs)
    for n in jg.gm.graph.nodes:
        st = n.meta.get("stack_trace")
        if st:
            n.meta["stack_trace"] = portable_stack_trace(st)
    return jg


def path_of(name: str, directory: os.PathLike | str | None = None) -> Path:
    return Path(directory or TESTDATA_DIR) / f"{name}{SUFFIX}"
