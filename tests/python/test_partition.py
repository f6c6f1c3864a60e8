"""Partitions of every testdata graph, run in PyTorch: forward then backward must
reproduce the joint graph's outputs and gradients on real inputs.

Two paths: the CLI writes forward.json / backward.json / signature.json and
``fxremat.load`` reads them back; and ``fxremat.partition`` goes through the C++
extension directly.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

import fxremat
from fxremat._paths import resolve_path
from fxremat.testing import programs, testdata, verify

NAMES = programs.names()


def _inputs(name: str, joint_gm, seed: int = 7):
    facts = joint_gm.meta["fxremat"]
    program = programs.build(name)
    primals = [resolve_path(p, program.roots()) for p in facts["input_paths"]]
    primals = [p.detach() if isinstance(p, torch.Tensor) else p for p in primals]
    return primals, verify.random_tangents(joint_gm, seed)


def _assert_same(got, want, what):
    if want is None:
        assert got is None, f"{what}: expected None"
        return
    assert got is not None, f"{what}: got None"
    assert got.shape == want.shape and got.dtype == want.dtype, what
    rtol, atol = verify.tolerance(want.dtype)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def _check(name: str, part: fxremat.Partition):
    joint = fxremat.load(testdata.path_of(name))
    primals, tangents = _inputs(name, joint)
    nfo = joint.meta["fxremat"]["num_fwd_outputs"]
    with torch.no_grad():
        want = list(joint(*primals, *tangents))
        outs, grads = part.run(primals, tangents)
    assert len(outs) == nfo and len(grads) == len(primals)
    for i, (g, w) in enumerate(zip(outs, want[:nfo])):
        _assert_same(g, w, f"{name}: forward output {i}")
    for i, (g, w) in enumerate(zip(grads, want[nfo:])):
        _assert_same(g, w, f"{name}: gradient {i}")


@pytest.fixture(scope="module")
def fxremat_cli(repo_root):
    cli = repo_root / "build" / "fxremat"
    assert cli.exists(), "build/fxremat is missing: run `make build`"
    return cli


@pytest.mark.parametrize("name", NAMES)
def test_cli_partition_loads_and_matches_joint(name, fxremat_cli, tmp_path):
    out = tmp_path / name
    subprocess.run([str(fxremat_cli), "partition", str(testdata.path_of(name)), "--partitioner", "mincut",
                    "-o", str(out)], check=True, capture_output=True)
    part = fxremat.Partition(
        forward=fxremat.load(out / "forward.json"),
        backward=fxremat.load(out / "backward.json"),
        signature=json.loads((out / "signature.json").read_text()),
    )
    assert part.forward.meta["fxremat"]["kind"] == "forward"
    assert part.backward.meta["fxremat"]["kind"] == "backward"
    _check(name, part)


@pytest.mark.parametrize("partitioner", ["default", "mincut"])
@pytest.mark.parametrize("name", NAMES)
def test_extension_partition_matches_joint(name, partitioner):
    part = fxremat.partition(testdata.path_of(name), partitioner=partitioner)
    sig = part.signature
    # The AOTAutograd runtime contract, position by position.
    n_tensors = sum(s["kind"] == "tensor" for s in sig["saved"])
    n_syms = len(sig["saved"]) - n_tensors
    for s in sig["saved"]:
        if s["kind"] == "tensor":
            assert sig["num_fwd_outputs"] <= s["forward_output_index"] < sig["num_fwd_outputs"] + n_tensors
            assert n_syms <= s["backward_input_index"] < n_syms + n_tensors
    assert [t["backward_input_index"] for t in sig["tangents"]] == list(
        range(len(sig["saved"]), len(sig["saved"]) + len(sig["tangents"])))
    assert sig["saved_bytes"] == sum(s["bytes"] for s in sig["saved"])
    _check(name, part)


@pytest.mark.parametrize("name", NAMES)
def test_default_partition_saves_what_functorch_saves(name):
    """Differential test: functorch's default_partition on the same joint graph
    saves the same values, in the same forward-output positions."""
    from torch._functorch.partitioners import default_partition

    joint = fxremat.load(testdata.path_of(name))
    nfo = joint.meta["fxremat"]["num_fwd_outputs"]
    ref_fw, ref_bw = default_partition(joint, None, num_fwd_outputs=nfo)
    ref_saved = [n.name for n in ref_fw.graph.output_node().args[0][nfo:]]
    ref_bw_inputs = [n.name for n in ref_bw.graph.find_nodes(op="placeholder")]
    # PyTorch keeps naming ops (xla::name_tensor) as clones; fxremat folds them away
    # unless asked to keep them, which is what makes the two comparable.
    part = fxremat.partition(testdata.path_of(name), partitioner="default", keep_annotations=True)
    ours = sorted(part.signature["saved"], key=lambda s: s["forward_output_index"])
    assert [s["name"] for s in ours] == ref_saved
    assert [n.name for n in part.backward.graph.find_nodes(op="placeholder")] == ref_bw_inputs


def test_partition_of_a_fresh_export_and_of_a_joint_graph_module():
    program = programs.build("sin_mm")
    joint = fxremat.export_joint(program.fn, *program.args, name="sin_mm")
    part = fxremat.partition(joint, partitioner="default")
    assert [s["name"] for s in part.signature["saved"]] == ["primals_1", "primals_2", "mm", "detach"]
    assert fxremat.partition(joint.gm, partitioner="default").signature == part.signature


def test_extension_errors_are_value_errors_naming_the_problem(tmp_path):
    with pytest.raises(ValueError, match="unknown partitioner 'nope'"):
        fxremat.partition(testdata.path_of("sin_mm"), partitioner="nope")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "fxremat.graph", "version": [1, 0], "kind": "plain", "nodes": [
        {"name": "output", "op": "output", "args": [[{"node": "ghost"}]]}]}))
    from fxremat._partition import _extension
    with pytest.raises(ValueError, match="'ghost', which is not a node of this graph"):
        _extension().partition(bad.read_text(), "default")


def test_mismatched_extension_says_how_to_rebuild(monkeypatch):
    from fxremat import _C
    from fxremat._partition import _extension

    monkeypatch.setattr(_C, "__version__", "0.0.0-stale")
    with pytest.raises(ImportError, match="make build"):
        _extension()


def test_text_form_through_the_extension():
    text = fxremat.to_text(testdata.path_of("sin_mm"))
    assert text.startswith("# fxremat.graph v1 kind=joint name='sin_mm'")
    assert "def forward(self, primals_1: \"f32[4, 4][4, 1]cpu rg" in text


@pytest.mark.parametrize("name", ["simple_mlp_ckpt", "name_tensor", "gpt2_2l"])
def test_inspect_reports_the_default_partition_the_cli_emits(name, repo_root, tmp_path):
    """`inspect`'s "saved for backward (default partition)" is what `partition
    --partitioner default` saves: the same pipeline (inspect's own extraction refused
    simple_mlp_ckpt, whose recompute tags the pipeline clears, and counted the
    name_tensor annotation's output where the emitted graphs save the input)."""
    import re

    cli = str(repo_root / "build" / "fxremat")
    graph = str(repo_root / "testdata" / f"{name}.json.gz")
    r = subprocess.run([cli, "inspect", graph], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = re.search(r"saved for backward \(default partition\): (\d+) values, (\d+) B", r.stdout)
    assert m, r.stdout
    r = subprocess.run([cli, "partition", "--partitioner", "default", graph, "-o", str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    saved = json.loads((tmp_path / "out" / "signature.json").read_text())["saved"]
    assert (len(saved), sum(s["bytes"] for s in saved)) == (int(m.group(1)), int(m.group(2)))
