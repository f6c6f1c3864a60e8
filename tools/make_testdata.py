#!/usr/bin/env python3
"""Regenerate every file in testdata/ (deterministically) from fxremat.testing.programs.

    .venv/bin/python tools/make_testdata.py            # write all
    .venv/bin/python tools/make_testdata.py --check    # fail if anything is out of date
    .venv/bin/python tools/make_testdata.py sin_mm     # only some programs

Each program is exported with fxremat.export_joint (Dynamo + AOTAutograd on fake
tensors), checked numerically against eager autograd on its seeded inputs, and saved as
testdata/NAME.json.gz. testdata/README.md lists what is there.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

try:
    import fxremat  # noqa: F401
except ImportError:  # not pip-installed (yet): use the source tree
    sys.path.insert(0, str(REPO / "python"))

import fxremat  # noqa: E402
from fxremat.testing import programs, testdata, verify  # noqa: E402


def _readme(rows: list[tuple[str, str, int, int, int]]) -> str:
    lines = [
        "# testdata",
        "",
        "Joint forward/backward graphs in the fxremat format (docs/format.md), one per",
        "program of `python/fxremat/testing/programs.py`. Generated, do not edit: run",
        "`.venv/bin/python tools/make_testdata.py` (deterministic; `--check` verifies).",
        "",
        "| file | program | nodes | primals | forward outputs |",
        "|---|---|---|---|---|",
    ]
    for name, desc, nodes, primals, nfo in rows:
        lines.append(f"| `{name}{testdata.SUFFIX}` | {desc} | {nodes} | {primals} | {nfo} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help="programs to regenerate (default: all)")
    ap.add_argument("--out", default=str(REPO / "testdata"), help="output directory")
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    ns = ap.parse_args(argv)

    all_names = programs.names()
    names = ns.names or all_names
    unknown = sorted(set(names) - set(all_names))
    if unknown:
        ap.error(f"unknown programs {unknown}; known: {all_names}")
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)

    failures = []
    rows = []
    for name in all_names:
        target = testdata.path_of(name, out)
        if name not in names:
            if target.exists():
                gm = fxremat.load(target)
                f = gm.meta["fxremat"]
                rows.append((name, programs.build(name).description, len(gm.graph.nodes),
                             len(f["input_paths"]), f["num_fwd_outputs"]))
            continue
        try:
            jg = testdata.export_program(name)
        except Exception as e:  # report exactly why, keep going
            failures.append(f"{name}: export failed: {type(e).__name__}: {e}")
            print(f"FAIL {name}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        report = verify.check_joint(jg.gm, programs.build(name))
        if not report.ok():
            failures.append(f"{name}: numeric check failed: {report.problems}")
            print(f"FAIL {name}: {report.problems}", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp) / target.name
            jg.save(tmp_path)
            data = tmp_path.read_bytes()
        nodes = len(jg.gm.graph.nodes)
        rows.append((name, programs.build(name).description, nodes, len(jg.input_paths), jg.num_fwd_outputs))
        if ns.check:
            if not target.exists() or target.read_bytes() != data:
                failures.append(f"{name}: {target} is out of date")
                print(f"STALE {target}", file=sys.stderr)
            else:
                print(f"ok    {target.name}")
            continue
        target.write_bytes(data)
        raw = len(gzip.decompress(data))
        print(f"wrote {target.relative_to(out.parent) if out.parent in target.parents else target}: "
              f"{len(data)} bytes ({raw} uncompressed), {nodes} nodes, "
              f"{report.compared_outputs} outputs + {report.compared_grads} grads checked")

    readme = _readme(rows)
    readme_path = out / "README.md"
    if ns.check:
        if not readme_path.exists() or readme_path.read_text() != readme:
            failures.append(f"{readme_path} is out of date")
    elif not ns.names:
        readme_path.write_text(readme)
    if failures:
        print("\n".join(["", "FAILED:"] + failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
