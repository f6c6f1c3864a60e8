"""fxremat.extract: forward and backward graphs in the user's order, traced on fake tensors.

Each case runs the extracted forward then backward on real inputs and compares with
eager PyTorch: forward outputs and ``torch.autograd.grad`` with the same tangents
(tolerances: fxremat.testing.verify.tolerance, float32 rtol 1e-4 / atol 1e-5).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import fxremat
from fxremat.testing import programs, verify


def _flat_inputs(fn, args, kwargs):
    flat = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if isinstance(fn, torch.nn.Module):
        flat = list(fn.parameters()) + list(fn.buffers()) + flat
    return flat


def _close(got, want, what):
    rtol, atol = verify.tolerance(want.dtype)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")


def run_and_compare(fn, *args, seed=0, partitioner="mincut", **kwargs):
    """extract, run forward then backward, compare with eager; returns (fw, bw, sig)."""
    fw, bw, sig = fxremat.extract(fn, *args, partitioner=partitioner, **kwargs)
    flat = _flat_inputs(fn, args, kwargs)
    n = sig["extract"]["num_outputs"]
    with torch.no_grad():
        outs = list(fw(*[t.detach() for t in flat]))
    assert len(outs) == sig["forward"]["num_outputs"]
    eager = [x for x in pytree.tree_leaves(fn(*args, **kwargs)) if isinstance(x, torch.Tensor)]
    assert len(eager) == n, f"{n} forward outputs for {len(eager)} tensor outputs"
    for i, (g, w) in enumerate(zip(outs[:n], eager)):
        _close(g, w.detach(), f"output {i}")
    gen = torch.Generator().manual_seed(seed)
    tangents = [torch.randn(w.shape, generator=gen, dtype=w.dtype) if w.is_floating_point() else torch.zeros_like(w)
                for w in eager]
    with torch.no_grad():
        grads = list(bw(*outs[n:], *tangents))
    assert len(grads) == len(flat)
    needs = [t for t in flat if t.requires_grad]
    diff = [(w, t) for w, t in zip(eager, tangents) if w.requires_grad]
    want = iter(torch.autograd.grad([w for w, _ in diff], needs, [t for _, t in diff], allow_unused=True))
    for i, (t, g) in enumerate(zip(flat, grads)):
        if not t.requires_grad:
            assert g is None, f"gradient {i}: input does not require grad"
            continue
        w = next(want)
        if w is None:
            assert g is None or not g.any(), f"gradient {i}"
        else:
            _close(g, w, f"gradient {i}")
    return fw, bw, sig


def test_seed002_carry_x_placeholders_in_pytree_order_and_numerics():
    p = programs.build("carry_x")
    fw, bw, sig = run_and_compare(p.fn, *p.args)
    phs = fw.graph.find_nodes(op="placeholder")
    assert [n.meta["fxremat_path"] for n in phs] == [
        "args[0]['a']", "args[0]['b']", "args[1]['weights']", "args[1]['biases']"]
    # the signature states the same order, and outputs in output-pytree order
    assert [e["path"] for e in sig["primals"]] == [n.meta["fxremat_path"] for n in phs]
    assert [e["path"] for e in sig["forward_outputs"]] == ["[0]['a']", "[0]['b']", "[1]"]
    # backward: residuals, then one tangent per output in output order
    bw_in = [n.name for n in bw.graph.find_nodes(op="placeholder")]
    assert bw_in[len(sig["saved"]):] == ["tangents_1", "tangents_2", "tangents_3"]
    assert [t["forward_output_index"] for t in sig["tangents"]] == [0, 1, 2]
    for s in sig["saved"]:
        assert fw.graph.output_node().args[0][s["forward_output_index"]].name == s["name"]
        assert bw_in[s["backward_input_index"]] == s["name"]


def fn_4(a, w):
    """Seed 002: an output and a clone of it, through a rebinding."""
    a = a @ w
    w = a
    return a, w.clone()


def returns_input(x, w):
    return x, torch.sin(x @ w)


def returns_twice(x, w):
    y = x @ w
    return y, {"again": y}


def returns_view_of_input(x, w):
    return x.view(-1), x @ w


@pytest.mark.parametrize("fn", [fn_4, returns_input, returns_twice, returns_view_of_input])
def test_outputs_that_alias_inputs_or_each_other_are_kept(fn):
    torch.manual_seed(0)
    a = torch.randn(3, 3, requires_grad=True)
    w = torch.randn(3, 3, requires_grad=True)
    fw, bw, sig = run_and_compare(fn, a, w)
    assert sig["extract"]["num_outputs"] == 2
    assert [t["used"] for t in sig["tangents"]] == [True, True]
    outs = fw.graph.output_node().args[0]
    # no copy is added for tracing: the forward returns what the program returns
    assert not any(n.target is torch.ops.aten.clone.default for n in fw.graph.nodes if n.op == "call_function") \
        or fn is fn_4
    if fn is returns_input:
        assert outs[0].op == "placeholder" and outs[0].name == "primals_1"
    if fn is returns_twice:
        assert outs[0] is outs[1]


def test_output_without_grad_gets_an_unused_tangent_input():
    def f(x, w):
        return (x @ w).sum(), w.argmax()

    x = torch.randn(3, 3, requires_grad=True)
    fw, bw, sig = run_and_compare(f, x, torch.randn(3, 3))
    assert [t["used"] for t in sig["tangents"]] == [True, False]
    assert len(bw.graph.find_nodes(op="placeholder")) == len(sig["saved"]) + 2


def test_checkpoint_region_is_recomputed():
    p = programs.build("simple_mlp_ckpt")
    fw, bw, sig = run_and_compare(p.fn, *p.args)
    names = [n.meta.get("fxremat_path") for n in fw.graph.find_nodes(op="placeholder")]
    assert names[:2] == ["params['fc1.weight']", "params['fc1.bias']"] and names[-1] == "args[0]"
    # the checkpointed block (fc2, sin) runs again in the backward: its output is not saved
    recomputed = {n.target for n in bw.graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.addmm.default in recomputed and torch.ops.aten.sin.default in recomputed
    plain = fxremat.extract(programs.build("simple_mlp").fn, *p.args)[2]
    assert sig["saved_bytes"] < plain["saved_bytes"]


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
def test_module_and_pytree_programs(partitioner):
    for name in ("simple_mlp", "predict_loss", "sin_mm"):
        p = programs.build(name)
        run_and_compare(p.fn, *p.args, partitioner=partitioner)


def test_keyword_arguments_follow_positional_ones():
    def f(x, *, scale):
        return torch.sin(x) * scale["s"]

    x = torch.randn(4, requires_grad=True)
    s = torch.randn(4, requires_grad=True)
    fw, _, _ = run_and_compare(f, x, scale={"s": s})
    assert [n.meta["fxremat_path"] for n in fw.graph.find_nodes(op="placeholder")] == ["args[0]", "kwargs['scale']['s']"]


def test_traced_on_fake_tensors_only():
    """Meta tensors have no data: tracing them proves nothing real is computed."""
    p = programs.build("carry_x")
    meta_args = pytree.tree_map_only(
        torch.Tensor, lambda t: t.detach().to("meta").requires_grad_(t.requires_grad), p.args)
    fw, bw, sig = fxremat.extract(p.fn, *meta_args)
    assert all(n.meta["val"].device.type == "meta" for n in fw.graph.find_nodes(op="placeholder"))
    assert sig["saved_bytes"] == fxremat.extract(p.fn, *p.args)[2]["saved_bytes"]


def test_bad_policy_and_partitioner_are_errors():
    p = programs.build("sin_mm")
    with pytest.raises(ValueError, match="unknown policy 'save_matmuls'"):
        fxremat.extract(p.fn, *p.args, policy="save_matmuls")
    with pytest.raises(ValueError, match="unknown partitioner"):
        fxremat.extract(p.fn, *p.args, partitioner="greedy")
