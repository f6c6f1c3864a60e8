"""Output safety (issue 12 item 3): the CLI writes everything or nothing, and never
replaces what is not a regular file."""

from __future__ import annotations

import os
import subprocess

import pytest


def _cli(repo_root):
    return str(repo_root / "build" / "fxremat")


def test_directory_in_the_way_fails_before_anything_is_replaced(repo_root, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "forward.json").write_text("old forward\n")
    (out / "backward.json").mkdir()  # in the way of the second file
    r = subprocess.run([_cli(repo_root), "partition", str(repo_root / "testdata" / "sin_mm.json.gz"), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "backward.json exists and is not a regular file" in r.stderr
    assert (out / "forward.json").read_text() == "old forward\n"
    assert sorted(os.listdir(out)) == ["backward.json", "forward.json"]
    assert not [p for p in tmp_path.iterdir() if "staging" in p.name]


@pytest.mark.parametrize("kind", ["device", "directory", "symlink"])
def test_print_refuses_a_destination_that_is_not_a_regular_file(kind, repo_root, tmp_path):
    if kind == "device":
        dest = "/dev/null"
    elif kind == "directory":
        dest = str(tmp_path / "d.json")
        os.mkdir(dest)
    else:
        (tmp_path / "real.json").write_text("keep\n")
        dest = str(tmp_path / "link.json")
        os.symlink(tmp_path / "real.json", dest)
    r = subprocess.run([_cli(repo_root), "print", str(repo_root / "testdata" / "sin_mm.json.gz"), "-o", dest],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "is not a regular file" in r.stderr
    if kind == "device":
        assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    if kind == "symlink":
        assert os.path.islink(dest) and (tmp_path / "real.json").read_text() == "keep\n"


def test_pareto_writes_its_front_and_plot_together_or_not_at_all(repo_root, tmp_path):
    """pareto's -o and --plot: a plot path in the way (a directory) or the same path
    named twice is refused before the solve, and neither file is written; where both
    can be written, both are."""
    graph = str(repo_root / "testdata" / "sin_mm.json.gz")
    (tmp_path / "plot.svg").mkdir()
    front, plot = tmp_path / "front.json", tmp_path / "plot.svg"
    r = subprocess.run([_cli(repo_root), "pareto", graph, "-o", str(front), "--plot", str(plot)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "plot.svg: exists and is not a regular file; nothing was written" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.svg"]
    same = tmp_path / "same.out"
    r = subprocess.run([_cli(repo_root), "pareto", graph, "-o", str(same), "--plot", str(tmp_path / "." / "same.out")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "named for two outputs; nothing was written" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.svg"]
    r = subprocess.run([_cli(repo_root), "pareto", graph, "-o", str(front), "--plot", str(tmp_path / "p.svg")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.json", "p.svg", "plot.svg"]
    assert '"fxremat.front"' in front.read_text() and (tmp_path / "p.svg").read_text().lstrip().startswith("<")
