"""Issue 12: no reader or graph walk recurses on the input's size. A valid
1,000,000-node chain (s0 = sin(primals_1), s1 = sin(s0), ...; generated in a temporary
directory by tests/bad_inputs/make_large.py, never committed) loads and partitions
through the CLI; the same chain listed out of topological order is refused with exit
2 and a message naming where (it used to crash every subcommand by recursion).

The chain is written in the IR text form (85 MB; its JSON form is 220 MB and slower
to read); the JSON reader's order check has the 60,000-node case of
tests/bad_inputs/make_large.py (CTest cli_bad_inputs_large) and the reversed JSON
chain below.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

N = 1_000_000


@pytest.fixture(scope="module")
def chains(repo_root, tmp_path_factory):
    sys.path.insert(0, str(repo_root / "tests" / "bad_inputs"))
    try:
        import make_large
    finally:
        sys.path.pop(0)
    d = tmp_path_factory.mktemp("chain")
    make_large.write_chain_text(d / "chain.fxir", N)
    make_large.write_chain_text(d / "reversed.fxir", N, reverse=True)
    make_large.write_chain_json(d / "reversed.json", N, reverse=True)
    return d


def _cli(repo_root, *args):
    return subprocess.run([str(repo_root / "build" / "fxremat"), *map(str, args)], capture_output=True, text=True)


def test_million_node_chain_partitions(repo_root, chains, tmp_path):
    out = tmp_path / "out"
    r = _cli(repo_root, "partition", chains / "chain.fxir", "-o", out)
    assert r.returncode == 0, r.stderr
    # the whole chain runs in the forward; the backward needs its last value only
    assert f"forward {N + 2} nodes, backward 4 nodes; saved 1 values, 16 bytes" in r.stdout
    assert sorted(p.name for p in out.iterdir()) == ["backward.json", "forward.json", "signature.json"]


@pytest.mark.parametrize("name, message", [
    ("reversed.fxir", f"line 7, col 58: 's{N - 2}' is not defined before this use"),
    ("reversed.json", f"/nodes/2: node 's{N - 1}' uses 's{N - 2}' before it is defined "
                      "(nodes must be in topological order)"),
])
def test_million_node_chain_out_of_order_is_refused(repo_root, chains, tmp_path, name, message):
    r = _cli(repo_root, "partition", chains / name, "-o", tmp_path / "out")
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()
