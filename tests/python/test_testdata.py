"""Every file in testdata/ loads, and its joint graph agrees with eager autograd."""

from __future__ import annotations

import json

import pytest
import torch

import fxremat
from fxremat._format import _read_doc, dumps
from fxremat.testing import programs, testdata, verify

NAMES = programs.names()

# inputs whose gradient the joint graph leaves out (None): those without requires_grad
NO_GRAD = {
    "simple_mlp": {"args[0]"},
    "simple_mlp_ckpt": {"args[0]"},
    "sin_mm": {"args[1]"},
    "carry_x": set(),
    "name_tensor": set(),
    "fg_chain": set(),
    "predict_loss": set(),
    "mutated_counter": {"buffers['counter']"},
    "t5_shift_right": {"args[0]"},
    "gpt2_2l": {"args[0]"},
    "llama_2l": {"args[0]", "buffers['model.model.rotary_emb.inv_freq']"},
}


@pytest.fixture(scope="module")
def loaded():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = fxremat.load(testdata.path_of(name))
        return cache[name]

    return get


def test_testdata_is_complete(testdata_dir):
    assert set(NO_GRAD) == set(NAMES)
    files = sorted(p.name for p in testdata_dir.glob("*" + testdata.SUFFIX))
    assert files == sorted(f"{n}{testdata.SUFFIX}" for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_matches_eager(name, loaded):
    gm = loaded(name)
    facts = gm.meta["fxremat"]
    assert facts["kind"] == "joint"
    assert facts["name"] == name
    program = programs.build(name)
    report = verify.check_joint(gm, program, seed=1234)
    assert report.ok(), report.problems
    assert report.compared_outputs == facts["num_fwd_outputs"]
    assert report.compared_grads + report.none_grads == len(facts["input_paths"])
    outs = gm.graph.output_node().args[0]
    nfo = facts["num_fwd_outputs"]
    none = {p for p, g in zip(facts["input_paths"], outs[nfo:]) if g is None}
    assert none == NO_GRAD[name]
    roots = program.roots()
    for p in facts["input_paths"]:
        t = fxremat.resolve_path(p, roots)
        assert t.requires_grad == (p not in none)


@pytest.mark.parametrize("name", NAMES)
def test_resave_is_byte_identical(name, loaded, tmp_path):
    """load -> save reproduces the file exactly: nothing is lost or reordered."""
    out = tmp_path / f"{name}{testdata.SUFFIX}"
    fxremat.save(loaded(name), out)
    assert out.read_bytes() == testdata.path_of(name).read_bytes()


def test_check_joint_catches_a_wrong_graph(loaded):
    """The numeric comparison is real: a graph with sin swapped for cos fails it."""
    gm = fxremat.load(testdata.path_of("sin_mm"))
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.sin.default:
            n.target = torch.ops.aten.cos.default
    gm.recompile()
    report = verify.check_joint(gm, programs.build("sin_mm"))
    assert not report.ok()
    assert any("forward output 0" in p for p in report.problems)


def test_integer_inputs_have_value_range(loaded):
    for name in ("gpt2_2l", "llama_2l"):
        gm = loaded(name)
        ids = programs.build(name).args[0]
        ranges = [n.meta["value_range"] for n in gm.graph.nodes if "value_range" in n.meta]
        assert ranges == [(int(ids.min()), int(ids.max()) + 1)]
        assert 0 <= ranges[0][0] < ranges[0][1] <= programs.VOCAB


def _strip_stack_traces(doc):
    doc.pop("stack_traces", None)
    for n in doc["nodes"]:
        n.get("meta", {}).pop("stack_trace_index", None)
    return doc


@pytest.mark.parametrize("name", ["sin_mm", "carry_x", "simple_mlp_ckpt", "name_tensor"])
def test_testdata_is_up_to_date(name):
    """A fresh export equals the stored file (stack traces aside: they carry line numbers).
    On failure, run tools/make_testdata.py."""
    fresh = json.loads(dumps(testdata.export_program(name).to_json()))
    stored = _read_doc(testdata.path_of(name))
    assert _strip_stack_traces(fresh) == _strip_stack_traces(stored)
