"""Offload of saved values to host memory, and XLA optimization barriers.

The C++ pipeline (Note [Partition pipeline] in include/fxremat/pipeline.h) emits
forward/backward documents with nodes the joint graph lacks: transfers
(aten._to_copy to cpu and back, or xla.place_to_host / place_to_device) and
xla.optimization_barrier with its getitems. The drop-in partition_fn's builder makes
those nodes from the document entries (everything else is copied from the joint graph).
"""

from __future__ import annotations

import copy
import operator

import pytest
import torch
import torch.fx as fx

import fxremat
from fxremat import policies as P
from fxremat import xla_compat
from fxremat._partition import partition_document
from fxremat._partition_fn import build_modules
from fxremat.testing import programs


def _run(fw, bw, sig, primals, tangents):
    fw_out = list(fw(*primals))
    bw_in = [None] * sig["backward"]["num_inputs"]
    for s in sig["saved"]:
        bw_in[s["backward_input_index"]] = fw_out[s["forward_output_index"]]
    for t, v in zip(sig["tangents"], tangents):
        bw_in[t["backward_input_index"]] = v
    return fw_out[: sig["num_fwd_outputs"]], list(bw(*bw_in))


def _eager(fn, args):
    args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out = fn(*args)
    out.backward(torch.ones_like(out))
    return out, [a.grad for a in args]


# --------------------------------------------------------------------------------------
# The builder on hand-made documents (independent of the C++ passes)
# --------------------------------------------------------------------------------------


def _offload_by_hand(fw_doc, bw_doc, sig, value, host_target, device_target, device_kw):
    """Rewrites the documents as the offload pass does, for one saved value."""
    fw_doc, bw_doc, sig = copy.deepcopy(fw_doc), copy.deepcopy(bw_doc), copy.deepcopy(sig)
    host, dev = f"{value}_host", f"{value}_reload"
    nodes = fw_doc["nodes"]
    out = nodes[-1]
    at = max(i for i, e in enumerate(nodes[:-1]) if e["name"] == value or any(
        a == {"node": value} for a in e.get("args", []))) + 1
    kw = {"device": "cpu", "non_blocking": True} if device_kw else {}
    nodes.insert(at, {"name": host, "op": "call_function", "target": host_target, "args": [{"node": value}],
                      "kwargs": kw})
    out["args"][0] = [{"node": host} if a == {"node": value} and i >= sig["num_fwd_outputs"] else a
                      for i, a in enumerate(out["args"][0])]
    (entry,) = [s for s in sig["saved"] if s["name"] == value]
    entry.update(name=host, offloaded=True)
    bnodes = bw_doc["nodes"]
    for e in bnodes:
        if e["op"] == "placeholder" and e["name"] == value:
            e["name"] = e["target"] = host

    def rewire(a):
        if a == {"node": value}:
            return {"node": dev}
        if isinstance(a, list):
            return [rewire(x) for x in a]
        return a

    first = min(i for i, e in enumerate(bnodes) if any(rewire(a) != a for a in e.get("args", [])))
    for e in bnodes[first:]:
        e["args"] = rewire(e.get("args", []))
    bnodes.insert(first, {"name": dev, "op": "call_function", "target": device_target, "args": [{"node": host}],
                          "kwargs": kw})
    return fw_doc, bw_doc, sig


@pytest.mark.parametrize("target", ["torch", "xla"])
def test_builder_makes_the_pipeline_nodes(target):
    xla_compat.register_all()
    p = programs.build("fg_chain")
    joint = fxremat.export_joint(p.fn, *p.args)
    doc = joint.to_json()
    fw_doc, bw_doc, sig = partition_document(doc, "mincut", {})
    if target == "torch":
        fw_doc, bw_doc, sig = _offload_by_hand(fw_doc, bw_doc, sig, "mv", "aten._to_copy.default",
                                               "aten._to_copy.default", True)
    else:
        fw_doc, bw_doc, sig = _offload_by_hand(fw_doc, bw_doc, sig, "mv", "xla.place_to_host.default",
                                               "xla.place_to_device.default", False)
    fw, bw, sig2 = build_modules(joint.gm, joint.num_fwd_outputs, fw_doc, bw_doc, sig)
    host = fw.graph.find_nodes(op="call_function", target=torch.ops.aten._to_copy.default if target == "torch"
                               else torch.ops.xla.place_to_host.default)
    assert [n.name for n in host] == ["mv_host"]
    assert host[0].meta["val"].shape == (5,) and "stack_trace" not in host[0].meta
    if target == "torch":
        assert host[0].kwargs["device"] == torch.device("cpu")
    assert "mv_host" in [n.name for n in bw.graph.find_nodes(op="placeholder")]
    reload = [n for n in bw.graph.nodes if n.name == "mv_reload"]
    assert reload and reload[0].meta["val"].shape == (5,) and reload[0].meta.get("autograd_backward")
    outs, grads = _run(fw, bw, sig2, p.args, [torch.ones(7)])
    want, want_grads = _eager(p.fn, p.args)
    torch.testing.assert_close(outs[0], want)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)


def test_builder_makes_barriers_and_getitems():
    xla_compat.register_all()
    p = programs.build("fg_chain")
    joint = fxremat.export_joint(p.fn, *p.args)
    fw_doc, bw_doc, sig = partition_document(joint.to_json(), "mincut", {})
    bw_doc = copy.deepcopy(bw_doc)
    nodes = bw_doc["nodes"]
    first = next(i for i, e in enumerate(nodes) if e["op"] != "placeholder")
    saved = [s["name"] for s in sig["saved"]][:2]
    new = [{"name": "barrier", "op": "call_function", "target": "xla.optimization_barrier.default",
            "args": [[{"node": n} for n in saved]]}]
    new += [{"name": f"getitem_b{k}", "op": "call_function", "target": "_operator.getitem",
             "args": [{"node": "barrier"}, k]} for k in range(2)]

    def rewire(a):
        if isinstance(a, dict) and a.get("node") in saved:
            return {"node": f"getitem_b{saved.index(a['node'])}"}
        return [rewire(x) for x in a] if isinstance(a, list) else a

    for e in nodes[first:]:
        e["args"] = rewire(e.get("args", []))
    nodes[first:first] = new
    fw, bw, sig2 = build_modules(joint.gm, joint.num_fwd_outputs, fw_doc, bw_doc, sig)
    (b,) = bw.graph.find_nodes(op="call_function", target=torch.ops.xla.optimization_barrier.default)
    assert [u.target for u in b.users] == [operator.getitem] * 2
    assert isinstance(b.meta["val"], list) and len(b.meta["val"]) == 2
    outs, grads = _run(fw, bw, sig2, p.args, [torch.ones(7)])
    want, want_grads = _eager(p.fn, p.args)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w)
