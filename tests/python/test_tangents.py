"""Tangents AOTAutograd describes in other ways than one TangentAOTInput per output
(Note [Tangents without descriptors] in src/ir.cpp), and what fxremat says about a
random op the user asked to recompute (Note [Saved-value rules])."""

from __future__ import annotations

import gzip
import json
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch

import fxremat

REPO = Path(__file__).resolve().parents[2]


def _doc_without_tangent_facts() -> dict:
    """fg_chain's joint graph as an exporter without descriptors writes it: no
    joint.tangent_outputs and no requires_grad on any value."""
    doc = json.load(gzip.open(REPO / "testdata" / "fg_chain.json.gz"))
    del doc["joint"]["tangent_outputs"]
    for node in doc["nodes"]:
        val = (node.get("meta") or {}).get("val")
        if isinstance(val, dict) and val.get("kind") == "tensor":
            val["requires_grad"] = False
    return doc


def test_tangents_map_to_outputs_by_position(tmp_path):
    """One forward output, one tangent, nothing saying so: the tangent is that output's
    (rule 2 of the Note), and the partition is the one the descriptors give."""
    doc = _doc_without_tangent_facts()
    path = tmp_path / "no_tangent_facts.json"
    path.write_text(json.dumps(doc))
    got = fxremat.partition(path)
    want = fxremat.partition(REPO / "testdata" / "fg_chain.json.gz")
    assert [t["forward_output_index"] for t in got.signature["tangents"]] == [0]
    assert [s["name"] for s in got.signature["saved"]] == [s["name"] for s in want.signature["saved"]]


def test_a_tangent_no_output_matches_is_an_error_naming_it(tmp_path):
    doc = _doc_without_tangent_facts()
    doc["joint"]["num_fwd_outputs"] = 2  # two outputs now, and the tangent's shape matches neither
    for node in doc["nodes"]:
        if node["name"] == "tangents_1":
            node["meta"]["val"]["shape"] = [3, 3]
            node["meta"]["val"]["stride"] = [3, 1]
    for node in doc["nodes"]:
        if node["op"] == "output":
            outs = node["args"][0]
    doc["joint"]["output_paths"] = ["[0]", "[1]"]
    path = tmp_path / "unmatched.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"tangent 'tangents_1' matches no forward output"):
        fxremat.partition(path)
    assert len(outs) >= 2


def _eager_grads(model_cls, x, state):
    ref = model_cls()
    ref.load_state_dict(state)
    xr = x.detach().clone().requires_grad_()
    out = ref(xr)
    out.backward()
    return out.detach(), [p.grad for p in ref.parameters()], xr.grad


@pytest.mark.usefixtures("fresh_compile_state")
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_nested_compile_region_partitions_the_body(compiler):
    """torch.compiler.nested_compile_region: AOTAutograd hands the region body's joint
    graph, whose placeholders and output carry meta['desc'] = None, to the partitioner;
    its tangents map to the body's outputs by position, and fxremat partitions it. The
    outer graph calls the partitioned bodies through invoke_subgraph (Note [Higher-order
    ops]), and fxremat partitions it too: no fallback."""

    @torch.compiler.nested_compile_region
    def block(x, w):
        return torch.sin(x @ w).cos()

    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.ws = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(16, 16) / 4) for _ in range(3)])

        def forward(self, x):
            for w in self.ws:
                x = block(x, w)
            return x.sum()

    model = Blocks()
    x = torch.randn(8, 16, requires_grad=True)
    want_out, want_grads, want_x = _eager_grads(Blocks, x, model.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.compile(model, backend="fxremat", options={"compiler": compiler})(x)
        out.backward()
    torch.testing.assert_close(out, want_out)
    for p, g in zip(model.parameters(), want_grads):
        torch.testing.assert_close(p.grad, g)
    torch.testing.assert_close(x.grad, want_x)
    records = fxremat.partition_records()
    assert records and all(r.fallback is None for r in records), records
    bodies = [r for r in records if len(r.signature["tangents"]) == 1 and r.joint_nodes < 20]
    outer = [r for r in records if r not in bodies]
    assert bodies and outer, records


@pytest.mark.usefixtures("fresh_compile_state")
def test_subclass_tangents_under_a_sac_policy():
    """TwoTensor in and out of a checkpointed function under a SAC policy: the tangents
    are SubclassGetAttrAOTInput(base=TangentAOTInput(...), attr=...), one per inner
    tensor, and map to the matching inner tensor of the flattened output."""
    from torch.testing._internal.two_tensor import TwoTensor
    from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.sin.default else CheckpointPolicy.PREFER_RECOMPUTE

    def g(x):
        return (x.sin() * 2).cos() * x

    def f(x):
        return checkpoint(g, x, use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts, policy))

    a, b = torch.randn(8), torch.randn(8)
    xe = TwoTensor(a.clone(), b.clone()).requires_grad_()
    want = g(xe)
    want.sum().backward()
    x = TwoTensor(a.clone(), b.clone()).requires_grad_()
    got = torch.compile(f, backend="fxremat", options={"compiler": "aot_eager"})(x)
    got.sum().backward()
    torch.testing.assert_close(got.a, want.a)
    torch.testing.assert_close(got.b, want.b)
    torch.testing.assert_close(x.grad.a, xe.grad.a)
    torch.testing.assert_close(x.grad.b, xe.grad.b)
    rec = fxremat.partition_records()[-1]
    assert len(rec.signature["tangents"]) == 2


@pytest.mark.usefixtures("fresh_compile_state")
def test_tangents_match_outputs_by_dtype_and_shape(tmp_path):
    """BatchNorm in training mode: the forward outputs are the running statistics the
    step writes back (no tangents) and then the loss. Without descriptors, one tangent,
    seven floating outputs among them: rule 4 maps the scalar tangent to the scalar
    float output, as the descriptors do."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                                torch.nn.LazyLinear(2)).train()
    x = torch.randn(2, 3, 6, 6)
    model(x)  # materialise the lazy layer

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, x):
            return self.m(x).pow(2).mean()

    joint = fxremat.export_joint(Loss(), x)
    with_facts = fxremat.to_json(joint.gm, num_fwd_outputs=joint.num_fwd_outputs)
    want = with_facts["joint"]["tangent_outputs"]
    doc = json.loads(json.dumps(with_facts))
    del doc["joint"]["tangent_outputs"]
    for node in doc["nodes"]:
        val = (node.get("meta") or {}).get("val")
        if isinstance(val, dict) and val.get("kind") == "tensor":
            val["requires_grad"] = False
    path = tmp_path / "bn.json"
    path.write_text(json.dumps(doc))
    got = fxremat.partition(path)
    assert [t["forward_output_index"] for t in got.signature["tangents"]] == want
    assert joint.num_fwd_outputs > 1 + len(want)
