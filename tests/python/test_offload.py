"""Offload of saved values to host memory, and XLA optimization barriers.

The C++ pipeline (Note [Partition pipeline] in include/fxremat/pipeline.h) emits
forward/backward documents with nodes the joint graph lacks: transfers
(prims.device_put to cpu and back, or xla.place_to_host / place_to_device) and
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
    """Rewrites the documents as the offload pass does (Note [Offload]), for one saved
    value: the forward returns `<value>_host`, the backward takes it and reloads it
    under the joint name."""
    fw_doc, bw_doc, sig = copy.deepcopy(fw_doc), copy.deepcopy(bw_doc), copy.deepcopy(sig)
    host = f"{value}_host"
    nodes = fw_doc["nodes"]
    out = nodes[-1]
    at = max(i for i, e in enumerate(nodes[:-1]) if e["name"] == value or any(
        a == {"node": value} for a in e.get("args", []))) + 1
    kw = {"device": "cpu", "non_blocking": True} if device_kw else {}
    nodes.insert(at, {"name": host, "op": "call_function", "target": host_target, "args": [{"node": value}],
                      "kwargs": kw})
    (entry,) = [s for s in sig["saved"] if s["name"] == value]
    entry.update(offloaded=True)
    out["args"][0][entry["forward_output_index"]] = {"node": host}
    bnodes = bw_doc["nodes"]
    for e in bnodes:
        if e["op"] == "placeholder" and e["name"] == value:
            e["name"] = e["target"] = host
    first = min(i for i, e in enumerate(bnodes) if {"node": value} in e.get("args", []))
    bnodes.insert(first, {"name": value, "op": "call_function", "target": device_target, "args": [{"node": host}],
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
    reload = [n for n in bw.graph.nodes if n.name == "mv"]
    assert reload[0].args[0].name == "mv_host"
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


# --------------------------------------------------------------------------------------
# The pipeline: seed 000's SimpleMLP and GPT-2 with names, offloaded
# --------------------------------------------------------------------------------------


class NamedMLP(torch.nn.Module):
    """Seed 000's SimpleMLP (fc1 128->64, sin, block(fc2 64->32, sin), fc3 32->10, sin)
    with the block's input and output named."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(128, 64)
        self.fc2 = torch.nn.Linear(64, 32)
        self.fc3 = torch.nn.Linear(32, 10)

    def forward(self, x):
        h1 = fxremat.checkpoint_name(torch.sin(self.fc1(x)), "h1")
        h2 = fxremat.checkpoint_name(self.block(h1), "h2")
        return torch.sin(self.fc3(h2))

    def block(self, x):
        return torch.sin(self.fc2(x))


MLP_POLICY = P.save_and_offload_only_these_names(names_which_can_be_saved=["h1"], names_which_can_be_offloaded=["h2"])


def _mlp():
    torch.manual_seed(0)
    return NamedMLP(), torch.randn(64, 128)


def _check_numerics(model, args, fw, bw, sig, tol=None):
    """forward then backward on real CPU tensors == eager."""
    tol = tol or {}
    params = [p.detach() for p in model.parameters()]
    nfo = sig["extract"]["num_outputs"]
    fw_out = list(fw(*params, *args))
    residuals = fw_out[nfo:]
    tangents = [torch.ones_like(o) for o in fw_out[:nfo]]
    grads = list(bw(*residuals, *tangents))
    model.zero_grad()
    want = model(*args)
    want.backward(torch.ones_like(want))
    torch.testing.assert_close(fw_out[0], want, **tol)
    for (name, p), g in zip(model.named_parameters(), grads):
        torch.testing.assert_close(g, p.grad, **tol, msg=lambda m: f"gradient of {name}: {m}")


def _by_name(graph):
    return {n.name: n for n in graph.nodes}


def _trains_like_eager(model, x, options, steps=1):
    """Trains ``model`` compiled by the fxremat backend with ``options`` against an
    eager copy, ``steps`` forward+backward passes; returns the last partition record."""
    import torch._dynamo

    torch._dynamo.reset()
    ref = copy.deepcopy(model)
    compiled = torch.compile(model, backend="fxremat", options=options)
    for _ in range(steps):
        for m in (model, ref):
            m.zero_grad()
        out = compiled(x)
        out.sum().backward()
        want = ref(x)
        want.sum().backward()
        torch.testing.assert_close(out, want)
        for (name, a), b in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, msg=lambda m: f"gradient of {name}: {m}")
    rec = fxremat.partition_records()[-1]
    torch._dynamo.reset()
    return rec


def test_mlp_offload_torch_target():
    model, x = _mlp()
    fw, bw, sig = fxremat.extract(model, x, policy=MLP_POLICY)
    saved = {tuple(s["names"]): s for s in sig["saved"] if s.get("names")}
    assert saved[("h1",)]["offloaded"] is False and saved[("h2",)]["offloaded"] is True
    assert sig["offloaded_bytes"] == 64 * 32 * 4
    # forward: h2 goes to cpu right after its last forward use
    copies = fw.graph.find_nodes(op="call_function", target=torch.ops.prims.device_put.default)
    assert len(copies) == 1
    (c,) = copies
    src = c.args[0]
    assert c.args[1] == torch.device("cpu") and c.kwargs.get("non_blocking") is True
    # Note [Offload]: the signature names the joint value, the slots hold <name>_host
    assert c.name == saved[("h2",)]["name"] + "_host" == sig["name_in_input_names"]["h2"]
    order = list(fw.graph.nodes)
    assert all(order.index(u) < order.index(c) for u in src.users if u is not c), "copied before a forward use"
    assert c.meta["val"].device == torch.device("cpu") and c.meta["val"].shape == (64, 32)
    # backward: the host copy comes in, is reloaded, and only the reload is used
    bw_nodes = _by_name(bw.graph)
    host = bw_nodes[c.name]
    assert host.op == "placeholder"
    (reload,) = host.users
    assert reload.target is torch.ops.prims.device_put.default
    border = list(bw.graph.nodes)
    assert border.index(reload) < min(border.index(u) for u in reload.users)
    # no annotation op is left (folded), and nothing else from the device copy of h2
    assert not fw.graph.find_nodes(op="call_function", target=torch.ops.fxremat.checkpoint_name.default)
    _check_numerics(model, [x], fw, bw, sig)


def test_mlp_offload_xla_target_with_barriers():
    xla_compat.register_all()
    model, x = _mlp()
    fw, bw, sig = fxremat.extract(model, x, policy=MLP_POLICY, offload_target="xla", barrier=True)
    assert len(fw.graph.find_nodes(op="call_function", target=torch.ops.xla.place_to_host.default)) == 1
    assert len(bw.graph.find_nodes(op="call_function", target=torch.ops.xla.place_to_device.default)) == 1
    assert not fw.graph.find_nodes(op="call_function", target=torch.ops.prims.device_put.default)
    barriers = bw.graph.find_nodes(op="call_function", target=torch.ops.xla.optimization_barrier.default)
    assert barriers, "the recomputed sin/addmm regions get barriers"
    for b in barriers:
        assert all(u.target is operator.getitem for u in b.users)
    _check_numerics(model, [x], fw, bw, sig)
    # without barrier=True there are none
    _, bw2, _ = fxremat.extract(model, x, policy=MLP_POLICY, offload_target="xla")
    assert not bw2.graph.find_nodes(op="call_function", target=torch.ops.xla.optimization_barrier.default)


@pytest.mark.parametrize("target", ["torch", "torch_async"])
def test_offload_through_fxremat_partition(target):
    """fxremat.partition (documents -> from_json) runs the emitted graphs too."""
    model, x = _mlp()
    joint = fxremat.export_joint(model, x)
    part = fxremat.partition(joint, policy="save_and_offload_only_these_names:save=h1;offload=h2",
                             offload_target=target)
    if target == "torch_async":
        targets = {str(n.target) for g in (part.forward, part.backward) for n in g.graph.nodes}
        assert {"fxremat.offload.default", "fxremat.reload.default", "fxremat.wait_tensor.default"} <= targets
    params = [p.detach() for p in model.parameters()]
    outs, grads = part.run([*params, x], [torch.ones(64, 10)])
    model.zero_grad()
    model(x).sum().backward()
    torch.testing.assert_close(outs[0], model(x))
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert part.signature["offloaded_bytes"] == 64 * 32 * 4


def test_gpt2_offload_mlp_activations():
    p = programs.build("gpt2_2l")
    model = p.fn
    names = programs.add_block_names(model)
    saved = [n for n in names if n.startswith("ln")]
    offloaded = [n for n in names if n.startswith("mlp")]
    policy = P.save_and_offload_only_these_names(names_which_can_be_saved=saved,
                                                 names_which_can_be_offloaded=offloaded)
    fw, bw, sig = fxremat.extract(model, *p.args, policy=policy)
    assert sorted(n for s in sig["saved"] if s.get("offloaded") for n in s["names"]) == offloaded
    assert sorted(n for s in sig["saved"] if not s.get("offloaded") for n in s.get("names", [])) == sorted(saved)
    to_cpu = [c for c in fw.graph.find_nodes(op="call_function", target=torch.ops.prims.device_put.default)
              if c.args[1] == torch.device("cpu")]
    assert len(to_cpu) == len(offloaded)
    _check_numerics(model, list(p.args), fw, bw, sig, tol=dict(rtol=1e-5, atol=1e-6))


def test_offload_name_annotation_offloads_without_a_policy():
    xla_compat.register_all()

    def f(x, w):
        h = xla_compat.offload_name(torch.sin(x @ w), "h")
        return (h * h).sum()

    args = (torch.randn(8, 4, requires_grad=True), torch.randn(4, 8, requires_grad=True))
    fw, bw, sig = fxremat.extract(f, *args)
    (h,) = [s for s in sig["saved"] if s["names"] == ["h"]]
    assert h["offloaded"] and h["decision"] == "PREFER_CPU_OFFLOAD" and sig["offloaded_bytes"] == 8 * 8 * 4
    outs = list(fw(*[a.detach() for a in args]))
    grads = bw(*outs[1:], torch.ones(()))
    want = f(*args)
    want.backward()
    torch.testing.assert_close(outs[0], want)
    for g, a in zip(grads, args):
        torch.testing.assert_close(g, a.grad)

    def on_input(x, w):
        return torch.sin(xla_compat.offload_name(x, "x") @ w).sum()

    with pytest.raises(ValueError, match=r"named 'x'.*cannot be honoured: it is an input of the graph"):
        fxremat.extract(on_input, *args)


@pytest.mark.usefixtures("fresh_compile_state")
def test_backend_options_offload_and_barrier():
    from fxremat._partition_fn import partition_records

    xla_compat.register_all()
    model, x = _mlp()
    _trains_like_eager(model, x, {"compiler": "aot_eager", "policy": MLP_POLICY, "offload_target": "xla",
                                  "barrier": True})
    (rec,) = partition_records()
    assert rec.signature["offloaded_bytes"] == 64 * 32 * 4


@pytest.mark.parametrize("policy", [
    "offload_dot_with_no_batch_dims",
    "save_and_offload_only_these_names:save=h1;offload=h2",
])
def test_offload_compiles_under_inductor(policy):
    """Every offload path compiles with the default Inductor compiler (the transfer is
    prims.device_put, which Inductor lowers) and trains like eager."""
    model, x = _mlp()
    rec = _trains_like_eager(model, x, {"policy": policy})
    assert rec.signature["offloaded_bytes"] > 0


def test_offload_name_compiles_under_inductor(fresh_compile_state):
    import torch._dynamo

    xla_compat.register_all()
    torch._dynamo.reset()

    def f(x, w):
        h = xla_compat.offload_name(torch.sin(x @ w), "h")
        return (h * h).sum()

    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    out = torch.compile(f, backend="fxremat")(x, w)
    gx, gw = torch.autograd.grad(out, (x, w))
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    want = f(x2, w2)
    wx, ww = torch.autograd.grad(want, (x2, w2))
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(gx, wx)
    torch.testing.assert_close(gw, ww)
    assert fxremat.partition_records()[-1].signature["offloaded_bytes"] == 8 * 16 * 4
    torch._dynamo.reset()


# --------------------------------------------------------------------------------------
# torch_async: transfers on a side stream (Note [Overlapped offload] in
# passes/emit_offload.h). On the CPU the ops copy synchronously, so the graphs run here.
# --------------------------------------------------------------------------------------


def test_mlp_offload_torch_async_target():
    model, x = _mlp()
    fw, bw, sig = fxremat.extract(model, x, policy=MLP_POLICY, offload_target="torch_async")
    (h2,) = [s for s in sig["saved"] if s.get("names") == ["h2"]]
    assert h2["offloaded"] and sig["offloaded_bytes"] == 64 * 32 * 4
    ops = torch.ops.fxremat
    order = list(fw.graph.nodes)
    (copy_,) = fw.graph.find_nodes(op="call_function", target=ops.offload.default)
    (wait,) = fw.graph.find_nodes(op="call_function", target=ops.wait_tensor.default)
    value = copy_.args[0]
    assert value.name == h2["name"] and wait.args == (copy_,) and wait.kwargs == {"keepalive": value}
    # the copy starts right after the value is computed, the wait comes after its last forward use
    assert order.index(copy_) == order.index(value) + 1
    assert all(order.index(u) < order.index(wait) for u in value.users if u is not wait and u is not copy_)
    assert wait.name == h2["name"] + "_host" and wait.meta["val"].device == torch.device("cpu")
    assert not fw.graph.find_nodes(op="call_function", target=torch.ops.prims.device_put.default)
    # backward: reload (no earlier than the first compute op), then the wait right before the first use
    (reload,) = bw.graph.find_nodes(op="call_function", target=ops.reload.default)
    (bwait,) = bw.graph.find_nodes(op="call_function", target=ops.wait_tensor.default)
    host = reload.args[0]
    assert host.op == "placeholder" and bwait.args == (reload,) and bwait.kwargs == {"keepalive": host}
    border = list(bw.graph.nodes)
    assert border.index(reload) < border.index(bwait) < min(border.index(u) for u in bwait.users)
    assert set(host.users) == {reload, bwait}
    _check_numerics(model, [x], fw, bw, sig)


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_torch_async_trains_like_eager(fresh_compile_state, compiler):
    """The side-stream ops run under the backend with either compiler (Inductor calls
    them as extern kernels) and training matches eager."""
    model, x = _mlp()
    rec = _trains_like_eager(model, x, {"compiler": compiler, "policy": MLP_POLICY, "offload_target": "torch_async"},
                             steps=2)
    assert rec.signature["offloaded_bytes"] == 64 * 32 * 4


def test_torch_async_through_the_cli(tmp_path, repo_root):
    """The CLI's documents name the ops, and its numeric check runs them."""
    import json
    import subprocess

    model, x = _mlp()
    joint = fxremat.export_joint(model, x)
    path = tmp_path / "mlp.json"
    joint.save(path)
    out = tmp_path / "out"
    subprocess.run([str(repo_root / "build" / "fxremat"), "partition", str(path), "-o", str(out), "--policy",
                    "save_and_offload_only_these_names:save=h1;offload=h2", "--offload-target", "torch_async"],
                   capture_output=True, text=True, check=True)
    cli_targets = {n.get("target") for g in ("forward", "backward")
                   for n in json.loads((out / f"{g}.json").read_text())["nodes"]}
    assert {"fxremat.offload.default", "fxremat.reload.default", "fxremat.wait_tensor.default"} <= cli_targets
    # the CLI's numeric check runs the side-stream ops too (as copies and the identity)
    verified = subprocess.run([str(repo_root / "build" / "fxremat"), "verify", str(path), str(out)],
                              capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("kind", ["slice", "expand", "transpose"])
def test_torch_async_moves_any_layout(fresh_compile_state, kind):
    """A saved value whose layout is not dense (a strided slice, an expand) moves
    synchronously, a dense one (a transpose) on the side stream; under Inductor, whose
    compiled code checks every extern kernel's strides, both train like eager."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(16, 16)
            self.l2 = torch.nn.Linear(8 if kind == "slice" else 16, 16)

        def forward(self, x):
            h = self.l1(x)
            v = {"slice": lambda: h[:, ::2], "expand": lambda: h[:1].expand(8, 16), "transpose": lambda: h.t()}[kind]()
            return self.l2(torch.sin(fxremat.checkpoint_name(v, "v")))

    torch.manual_seed(0)
    model, x = Model(), torch.randn(8 if kind != "transpose" else 16, 16)
    rec = _trains_like_eager(model, x, {"policy": "save_and_offload_only_these_names:save=;offload=v",
                                        "offload_target": "torch_async"})
    assert rec.signature["offloaded_bytes"] > 0


def test_wait_without_a_transfer_is_an_error():
    from fxremat import _offload_ops  # noqa: F401

    t = torch.empty(4)
    assert torch.ops.fxremat.wait_tensor.default(t) is t  # a CPU step's copy: nothing to wait for
    with pytest.raises(RuntimeError, match="no transfer pending"):
        _offload_ops._wait_tensor(torch.empty(4, device="meta"), None)


class _OffloadTaggedBlock(torch.nn.Module):
    """An embedding, then a Linear+ReLU under selective checkpointing whose policy
    function tags the addmm for CPU offload and the rest PREFER_RECOMPUTE."""

    def __init__(self, decision):
        super().__init__()
        self.decision = decision
        self.emb = torch.nn.Embedding(10, 16)
        self.lin = torch.nn.Linear(16, 16)

    def _block(self, h):
        return torch.relu(self.lin(h))

    def forward(self, ids):
        from functools import partial

        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        # A module-level policy function: one defined in forward breaks Dynamo's graph
        # there, and the region would run eagerly.
        context = partial(create_selective_checkpoint_contexts, partial(_offload_dots, self.decision))
        return checkpoint(self._block, self.emb(ids), use_reentrant=False, context_fn=context)


def _offload_dots(decision, ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    dots = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    return decision if op in dots else CheckpointPolicy.PREFER_RECOMPUTE


@pytest.mark.parametrize("decision", ["MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD"])
def test_offload_tags_under_the_default_partitioner(decision, fresh_compile_state):
    """The default partition saved a forward value only for its direct backward readers;
    an offload-tagged addmm that the backward reads only through the ReLU it recomputes
    was neither saved nor computable there ('primals_4' ... neither an input of the
    backward graph nor computable there; PyTorch's default_partition fails the same way).
    It is saved like MUST_SAVE, and offloaded."""
    from torch.utils.checkpoint import CheckpointPolicy

    torch.manual_seed(0)
    model = _OffloadTaggedBlock(getattr(CheckpointPolicy, decision))
    ids = torch.randint(0, 10, (2, 5))
    rec = _trains_like_eager(model, ids, {"compiler": "aot_eager", "partitioner": "default"}, steps=2)
    offloaded = [s for s in rec.signature["saved"] if s.get("offloaded")]
    assert [s["name"] for s in offloaded] == ["addmm"], rec.signature["saved"]
