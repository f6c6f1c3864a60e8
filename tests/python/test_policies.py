"""Checkpoint policies (fxremat.policies): the Python objects, their JSON and text
forms, and what each policy kind saves, recomputes or offloads on small programs with
names (fxremat.checkpoint_name) and matrix products.
"""

from __future__ import annotations

import json

import pytest
import torch

import fxremat
from fxremat import policies as P

# --------------------------------------------------------------------------------------
# The objects: repr, JSON form, text form
# --------------------------------------------------------------------------------------


def test_every_kind_has_a_repr_and_a_json_form():
    cases = [
        (P.everything_saveable, "everything_saveable", {"policy": "everything_saveable"}),
        (P.nothing_saveable, "nothing_saveable", {"policy": "nothing_saveable"}),
        (P.dots_saveable, "dots_saveable", {"policy": "dots_saveable"}),
        (P.checkpoint_dots, "dots_saveable", {"policy": "dots_saveable"}),
        (P.dots_with_no_batch_dims_saveable, "dots_with_no_batch_dims_saveable",
         {"policy": "dots_with_no_batch_dims_saveable"}),
        (P.save_only_these_names("a", "b"), "save_only_these_names('a', 'b')",
         {"policy": "save_only_these_names", "names": ["a", "b"]}),
        (P.save_any_names_but_these("a"), "save_any_names_but_these('a')",
         {"policy": "save_any_names_but_these", "names": ["a"]}),
        (P.save_anything_except_these_names("a"), "save_anything_except_these_names('a')",
         {"policy": "save_anything_except_these_names", "names": ["a"]}),
        (P.save_and_offload_only_these_names(names_which_can_be_saved=["y"], names_which_can_be_offloaded=["z"]),
         "save_and_offload_only_these_names(names_which_can_be_saved=['y'], names_which_can_be_offloaded=['z'], "
         "offload_src='device', offload_dst='pinned_host')",
         {"policy": "save_and_offload_only_these_names", "names": ["y"], "offload_names": ["z"],
          "offload_src": "device", "offload_dst": "pinned_host"}),
        (P.offload_dot_with_no_batch_dims("device", "pinned_host"), "offload_dot_with_no_batch_dims('device', 'pinned_host')",
         {"policy": "offload_dot_with_no_batch_dims", "offload_src": "device", "offload_dst": "pinned_host"}),
        (P.save_ops(torch.ops.aten.mm, torch.ops.aten.addmm.default, "aten::bmm"),
         "save_ops('aten.mm', 'aten.addmm.default', 'aten.bmm')",
         {"policy": "save_ops", "ops": ["aten.mm", "aten.addmm.default", "aten.bmm"]}),
        (P.checkpoint_policy(by_name={"a": torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE},
                             by_op={torch.ops.aten.mm: "PREFER_RECOMPUTE"}, default="CheckpointPolicy.PREFER_SAVE"),
         "checkpoint_policy(by_name={'a': 'MUST_SAVE'}, by_op={'aten.mm': 'PREFER_RECOMPUTE'}, default='PREFER_SAVE')",
         {"policy": "checkpoint_policy", "by_name": {"a": "MUST_SAVE"}, "by_op": {"aten.mm": "PREFER_RECOMPUTE"},
          "default": "PREFER_SAVE"}),
    ]
    for policy, text, doc in cases:
        assert repr(policy) == text
        assert policy.to_json() == doc
        assert P.Policy.from_json(json.loads(json.dumps(doc))) == policy
        assert P.as_policy_json(policy) == doc


def test_composition():
    a, b = P.save_only_these_names("a"), P.dots_saveable
    both = a & b
    assert repr(both) == "all_of(save_only_these_names('a'), dots_saveable)"
    assert both.to_json() == {"policy": "all_of", "policies": [a.to_json(), b.to_json()]}
    assert (both & P.nothing_saveable) == P.all_of(a, b, P.nothing_saveable)  # flattened
    assert P.as_policy_json([a.to_json(), b.to_json()]) == both.to_json()  # a JSON list is all_of
    either = P.save_from_both_policies(a, b)
    assert repr(either) == "save_from_both_policies(save_only_these_names('a'), dots_saveable)"
    assert either.to_json()["policies"] == [a.to_json(), b.to_json()]
    with pytest.raises(ValueError, match="policy_2 must be a saveable/not-saveable policy"):
        P.save_from_both_policies(a, P.save_ops("aten.mm"))


def test_text_form():
    assert P.parse("save_only_these_names:attn_out,mlp_out") == P.save_only_these_names("attn_out", "mlp_out")
    assert P.parse("save_and_offload_only_these_names:save=y;offload=z") == P.save_and_offload_only_these_names(
        names_which_can_be_saved=["y"], names_which_can_be_offloaded=["z"])
    assert P.parse("offload_dot_with_no_batch_dims") == P.offload_dot_with_no_batch_dims()
    assert P.parse("offload_dot_with_no_batch_dims:device,pinned_host") == P.offload_dot_with_no_batch_dims()
    assert P.parse("save_ops:aten.mm,aten.addmm") == P.save_ops("aten.mm", "aten.addmm")
    assert P.parse("checkpoint_policy:a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE") == \
        P.checkpoint_policy(by_name={"a": "MUST_SAVE", "b": "PREFER_RECOMPUTE"}, by_op={"aten.mm": "MUST_SAVE"},
                            default="PREFER_RECOMPUTE")
    assert P.parse("save_from_both_policies:dots_saveable|save_only_these_names:a") == \
        P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("a"))
    assert P.parse("dots_saveable+save_only_these_names:a") == P.dots_saveable & P.save_only_these_names("a")
    # as_policy_json parses text with the C++ library when the extension has parse_policy
    assert P.as_policy_json("save_only_these_names:a,b") == P.save_only_these_names("a", "b").to_json()
    assert P.as_policy_json(None) is None
    assert P.as_policy_json('{"policy": "dots_saveable"}') == {"policy": "dots_saveable"}
    with pytest.raises(ValueError, match="unknown policy 'save_matmuls'"):
        P.as_policy_json("save_matmuls")


def test_bad_policies_are_rejected():
    with pytest.raises(ValueError, match=r"must be exclusive; both contain 'y'"):
        P.save_and_offload_only_these_names(names_which_can_be_saved=["x", "y"], names_which_can_be_offloaded=["y"])
    with pytest.raises(ValueError, match="offload_dst must be one of"):
        P.offload_dot_with_no_batch_dims("device", "disk")
    with pytest.raises(ValueError, match="unknown checkpoint decision 'SAVE'"):
        P.checkpoint_policy(by_name={"a": "SAVE"})
    with pytest.raises(ValueError, match="not an operator name"):
        P.save_ops("mm")
    with pytest.raises(TypeError, match="cannot run inside the C\\+\\+ partitioner"):
        P.as_policy_json(lambda ctx, op, *a, **k: None)
    with pytest.raises(ValueError, match=r"unknown policy field\(s\) \['name'\]"):
        P.as_policy_json({"policy": "save_only_these_names", "name": ["a"]})


# --------------------------------------------------------------------------------------
# checkpoint_name
# --------------------------------------------------------------------------------------


def test_checkpoint_name_is_an_identity_with_a_passthrough_gradient():
    x = torch.randn(5, requires_grad=True)
    y = fxremat.checkpoint_name(torch.sin(x), "a")
    assert torch.equal(y, torch.sin(x)) and y.data_ptr() != x.data_ptr()
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.cos(x))
    assert torch.ops.fxremat.checkpoint_name.default is not None
    with pytest.raises(TypeError, match="name must be a str"):
        fxremat.checkpoint_name(x, 3)


def test_checkpoint_name_compiles_fullgraph_and_traces():
    def f(x):
        return fxremat.checkpoint_name(torch.sin(x), "a") * 2

    x = torch.randn(5, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(f, backend="aot_eager", fullgraph=True)(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(x))
    joint = fxremat.export_joint(f, x)
    targets = [n.target for n in joint.gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.fxremat.checkpoint_name.default in targets
    # the format can name it, and reading it back resolves it
    gm = fxremat.from_json(fxremat.to_json(joint.gm))
    assert torch.ops.fxremat.checkpoint_name.default in [n.target for n in gm.graph.nodes]


# --------------------------------------------------------------------------------------
# What each kind saves (the C++ engine, through fxremat.saved_residuals)
# --------------------------------------------------------------------------------------


def prog(x, w1, w2):
    """a = x @ w1 (named), h = sin(a), b = h @ w2 (named), sum(cos(b)). The backward
    needs a (cos of it), h (w2's gradient), b (-sin of it), and the inputs."""
    a = fxremat.checkpoint_name(x @ w1, "a")
    h = torch.sin(a)
    b = fxremat.checkpoint_name(h @ w2, "b")
    return torch.cos(b).sum()


def _prog_args():
    torch.manual_seed(0)
    return (torch.randn(8, 16, requires_grad=True), torch.randn(16, 32, requires_grad=True),
            torch.randn(32, 32, requires_grad=True))


def batched(x, w):
    """mm (no batch dims: x @ w of a 3-D x is a view, mm, view), then bmm (batch dims)."""
    s = torch.sin(x @ w)
    return torch.sin(torch.bmm(s, s.transpose(1, 2))).sum()


def _batched_args():
    torch.manual_seed(0)
    return torch.randn(2, 4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)


ARGS = {"x", "w1", "w2"}


def _saved(fn, args, policy):
    """{what: "saved" | "offloaded"} of the saved values that are not arguments, and
    the arguments separately."""
    rs = fxremat.saved_residuals(fn, *args, policy=policy)
    values = {r.what: ("offloaded" if r.offloaded else "saved") for r in rs if r.kind != "argument"}
    assert len(values) == len([r for r in rs if r.kind != "argument"]), [r.key for r in rs]
    return values, {r.what for r in rs if r.kind == "argument"}


def _numerics(fn, args, policy):
    fw, bw, sig = fxremat.extract(fn, *args, policy=policy)
    nfo = sig["extract"]["num_outputs"]
    outs = list(fw(*[a.detach() for a in args]))
    grads = bw(*outs[nfo:], torch.ones(()))
    ref = [a.detach().clone().requires_grad_() for a in args]
    want = fn(*ref)
    want.backward()
    torch.testing.assert_close(outs[0], want)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r.grad)


@pytest.mark.parametrize("policy, expected", [
    # everything saveable: the backward's cos(a) and -sin(b) read forward values only, so
    # they are forward values too and are saved instead of a and b (as JAX saves them)
    (P.everything_saveable, {"sin": "saved", "cos": "saved", "neg": "saved"}),
    (P.nothing_saveable, {}),
    (P.dots_saveable, {"a": "saved", "b": "saved"}),
    (P.checkpoint_dots, {"a": "saved", "b": "saved"}),
    (P.dots_with_no_batch_dims_saveable, {"a": "saved", "b": "saved"}),
    (P.save_only_these_names("b"), {"b": "saved"}),
    (P.save_any_names_but_these("b"), {"a": "saved"}),
    (P.save_anything_except_these_names("a"), {"sin": "saved", "cos": "saved", "neg": "saved"}),
    (P.save_and_offload_only_these_names(names_which_can_be_saved=["a"], names_which_can_be_offloaded=["b"]),
     {"a": "saved", "b": "offloaded"}),
    (P.offload_dot_with_no_batch_dims("device", "pinned_host"), {"a": "offloaded", "b": "offloaded"}),
    (P.save_from_both_policies(P.save_only_these_names("a"), P.save_only_these_names("b")),
     {"a": "saved", "b": "saved"}),
    (P.save_ops(torch.ops.aten.mm), {"a": "saved", "b": "saved"}),
    (P.checkpoint_policy(by_name={"b": "MUST_SAVE"}, by_op={"aten.sin": "MUST_SAVE"}, default="PREFER_RECOMPUTE"),
     {"sin": "saved", "b": "saved"}),
    # all_of: a value is saveable if any policy says so (Note [Merging demands], rule 4)
    (P.nothing_saveable & P.save_only_these_names("b"), {"b": "saved"}),
    (P.save_only_these_names("a") & P.save_only_these_names("b"), {"a": "saved", "b": "saved"}),
    ("save_only_these_names:a+dots_saveable", {"a": "saved", "b": "saved"}),
], ids=lambda v: repr(v) if isinstance(v, (P.Policy, str)) else "")
def test_each_kind_on_a_named_program(policy, expected):
    values, args = _saved(prog, _prog_args(), policy)
    assert values == expected
    assert args == ARGS


def test_the_recomputed_graphs_compute_the_same_gradients():
    for policy in (P.nothing_saveable, P.save_only_these_names("b"),
                   P.save_and_offload_only_these_names(names_which_can_be_saved=["a"], names_which_can_be_offloaded=["b"])):
        _numerics(prog, _prog_args(), policy)


def test_dots_with_and_without_batch_dims():
    assert _saved(batched, _batched_args(), P.dots_saveable)[0] == {"mm": "saved", "bmm": "saved"}
    assert _saved(batched, _batched_args(), P.dots_with_no_batch_dims_saveable)[0] == {"mm": "saved"}
    assert _saved(batched, _batched_args(), P.offload_dot_with_no_batch_dims())[0] == {"mm": "offloaded"}


def test_signature_decisions_and_name_maps():
    fw, bw, sig = fxremat.extract(prog, *_prog_args(), policy=P.save_only_these_names("b"))
    (b,) = [s for s in sig["saved"] if s["names"] == ["b"]]
    assert b["decision"] == "PREFER_SAVE" and b["origin_op"] == "aten.mm.default" and not b["offloaded"]
    assert "test_policies.py" in b["origin_location"]
    assert sig["name_in_output_indices"] == {"b": b["forward_output_index"]}
    assert sig["name_in_input_indices"] == {"b": b["backward_input_index"]}
    assert sig["name_in_input_names"] == {"b": b["name"]}


# --------------------------------------------------------------------------------------
# Contradictions
# --------------------------------------------------------------------------------------


def test_must_save_and_must_recompute_on_one_value():
    policy = P.checkpoint_policy(by_name={"a": "MUST_SAVE"}) & P.checkpoint_policy(by_name={"a": "MUST_RECOMPUTE"})
    with pytest.raises(ValueError, match=r"contradictory demands on value 'mm' \(named 'a'\).*MUST_SAVE.*MUST_RECOMPUTE"):
        fxremat.extract(prog, *_prog_args(), policy=policy)


def test_must_recompute_a_random_op():
    """On the CPU the demand is honoured by replaying the draw (Note [Replaying random
    ops]): the backward recomputes the dropout from the state the forward saved, and
    the gradients are those of the forward that ran. (A device whose draw cannot be
    replayed refuses it: tests/golden/functionalize_rng.test, test_random_replay.py.)"""
    def dropout(x, w):
        return torch.nn.functional.dropout(x @ w, p=0.5, training=True).sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    fw, bw, sig = fxremat.extract(dropout, x.requires_grad_(), w.requires_grad_(),
                                  policy=P.checkpoint_policy(by_op={"aten.native_dropout": "MUST_RECOMPUTE"}))
    assert [s["rule"] for s in sig["saved"] if s["rule"].startswith("RNG state")] == ["RNG state of native_dropout"]
    assert any(n.target is torch.ops.higher_order.run_with_rng_state for n in bw.graph.nodes)
    x, w = x.detach(), w.detach()
    torch.manual_seed(0)
    outs = fw(x, w)
    grads = bw(*outs[1:], torch.ones(()))
    torch.manual_seed(0)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    want = dropout(xr, wr)
    want.backward()
    torch.testing.assert_close(outs[0], want.detach())
    torch.testing.assert_close(grads[0], xr.grad)
    torch.testing.assert_close(grads[1], wr.grad)


def test_offload_of_a_view_of_an_input():
    def f(x, w):
        xt = fxremat.checkpoint_name(x.t(), "xt")
        return torch.sin(xt @ w).sum()

    args = (torch.randn(8, 4, requires_grad=True), torch.randn(8, 8, requires_grad=True))
    policy = P.save_and_offload_only_these_names(names_which_can_be_saved=[], names_which_can_be_offloaded=["xt"])
    with pytest.raises(ValueError, match=r"named 'xt'.*PREFER_CPU_OFFLOAD.*cannot be honoured: it is a view of the input"):
        fxremat.extract(f, *args, policy=policy)


def test_overlapping_save_and_offload_names():
    with pytest.raises(ValueError, match="must be exclusive; both contain 'a'"):
        P.save_and_offload_only_these_names(names_which_can_be_saved=["a"], names_which_can_be_offloaded=["a", "b"])
    with pytest.raises(ValueError, match=r"the names should be exclusive, but 'a' is both in"):
        fxremat.extract(prog, *_prog_args(), policy="save_and_offload_only_these_names:save=a;offload=a,b")


class _Attention(torch.nn.Module):
    def __init__(self, d=32, h=4, dropout=0.0):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.h = h
        self.dropout = dropout

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout)
        return self.proj(o.transpose(1, 2).reshape(B, N, C))


class _Encoder(torch.nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.blocks = torch.nn.ModuleList([_Attention(dropout=dropout) for _ in range(2)])
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(self.norm(x))
        return x.sum()


def test_nothing_saveable_on_attention():
    """q, k, v (views from unbind) and the fused attention's outputs are recomputed
    under nothing_saveable: only the inputs are saved, as PyTorch's budget 0 saves them;
    with attention dropout the attention op is random and is replayed."""
    import copy

    from torch._functorch import config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    torch.manual_seed(0)
    joint = fxremat.export_joint(_Encoder(), torch.randn(2, 16, 32, requires_grad=True))
    part = fxremat.partition(joint, policy=P.nothing_saveable)
    saved = [s["name"] for s in part.signature["saved"]]
    assert all(s.startswith("primals_") for s in saved), saved
    with fconfig.patch(activation_memory_budget=0.0):
        fw, _ = min_cut_rematerialization_partition(copy.deepcopy(joint.gm), None,
                                                    num_fwd_outputs=joint.num_fwd_outputs)
    assert saved == [n.name for n in fw.graph.output_node().args[0][joint.num_fwd_outputs:]]

    torch.manual_seed(0)
    with_dropout = fxremat.export_joint(_Encoder(dropout=0.1), torch.randn(2, 16, 32, requires_grad=True))
    part = fxremat.partition(with_dropout, policy=P.nothing_saveable)
    # the attention op is random: recomputed by replaying its draw from the saved
    # generator state (Note [Replaying random ops]), so still only inputs and states
    rules = [s["rule"] for s in part.signature["saved"]]
    assert all(r == "input" or r.startswith("RNG state of ") for r in rules), rules
    assert any(r.startswith("RNG state of ") for r in rules), rules
    assert any(n.target is torch.ops.higher_order.run_with_rng_state for n in part.backward.graph.nodes)
    # and the replay is exact: the partition reproduces the joint graph run from the same seed
    from fxremat.testing.verify import random_primals, random_tangents

    primals = random_primals(with_dropout.gm, seed=1)
    tangents = random_tangents(with_dropout.gm, seed=1)
    torch.manual_seed(5)
    want = list(with_dropout.gm(*[p.clone() for p in primals], *tangents))
    torch.manual_seed(5)
    outs, grads = part.run([p.clone() for p in primals], tangents)
    for g, w in zip(outs + [g for g in grads if g is not None], [w for w in want if w is not None]):
        torch.testing.assert_close(g, w)
