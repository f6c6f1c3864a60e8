"""Random ops a checkpoint region tags for recompute (Note [Replaying random ops] in
passes/functionalize_rng.h): recomputed in the backward from the generator state the
forward saved, as PyTorch's functionalize_rng_ops does. Issue 15, "What was seen":
``checkpoint(gn, x, preserve_rng_state=True, context_fn=...)`` whose SAC policy saves
only ``sigmoid``."""

from __future__ import annotations

import copy
import subprocess
import warnings
from functools import partial

import pytest
import torch
from torch._guards import TracingContext, detect_fake_mode, tracing
from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

import fxremat
from fxremat.testing.verify import capturing_backend

RUN_AND_SAVE = torch.ops.higher_order.run_and_save_rng_state
RUN_WITH = torch.ops.higher_order.run_with_rng_state


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.sigmoid.default else CheckpointPolicy.PREFER_RECOMPUTE


def _one_dropout(x):
    return torch.nn.functional.dropout(torch.sigmoid(x), 0.5, training=True).sin()


def _two_random_ops(x):
    """Two draws in one region (dropout, then rand_like noise), and a draw outside it."""
    y = torch.nn.functional.dropout(torch.sigmoid(x), 0.3, training=True)
    return (y * torch.rand_like(y)).cos()


PROGRAMS = {"one_dropout": _one_dropout, "two_random_ops": _two_random_ops}


def _checkpointed(gn):
    def f(x):
        y = checkpoint(gn, x, use_reentrant=False, preserve_rng_state=True,
                       context_fn=partial(create_selective_checkpoint_contexts, _policy))
        return torch.nn.functional.dropout(y, 0.2, training=True).sum()  # untagged: saved
    return f


def _step(fn, x, seed):
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    out = fn(x)
    out.backward()
    return out.detach(), x.grad


def _random_ops(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"
            and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]


@pytest.mark.usefixtures("fresh_compile_state")
@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("dynamic", [False, True])
def test_backend_replays_the_draw_like_eager(name, dynamic):
    """Under aot_eager the compiled step draws what eager draws (same seed, same
    order): output and gradient equal eager's, so the backward's replay used the
    forward's masks. No warning: the tag is honoured."""
    f = _checkpointed(PROGRAMS[name])
    x = torch.randn(16, 16)
    want = _step(f, x, seed=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = torch.compile(f, backend="fxremat", dynamic=dynamic, options={"compiler": "aot_eager"})
        got = _step(compiled, x, seed=3)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert not [w for w in caught if "is tagged" in str(w.message)], [str(w.message) for w in caught]
    sig = fxremat.partition_records()[-1].signature
    states = [s for s in sig["saved"] if s["rule"].startswith("RNG state of ")]
    tagged = 1 if name == "one_dropout" else 2
    assert len(states) == tagged, sig["saved"]
    assert all(s["dtype"] == "uint8" and s["shape"] == [5056] and s["bytes"] == 5056 for s in states)
    # the state comes before any saved symint, after the other version-checked tensors
    kinds = [s["kind"] for s in sorted(sig["saved"], key=lambda s: s["forward_output_index"])]
    assert kinds == sorted(kinds, key=lambda k: k != "tensor"), kinds
    # the untagged dropout outside the region is saved, never replayed
    assert any(s["rule"] == "random op (never replayed)" for s in sig["saved"]), sig["saved"]


@pytest.mark.usefixtures("fresh_compile_state")
def test_backend_under_inductor_equals_pytorch():
    """Under Inductor the joint graph already carries its RNG as values (Inductor's
    seeds: inductor_seeds / inductor_random): fxremat's step equals PyTorch's own
    compiled step, draw for draw."""
    f = _checkpointed(_two_random_ops)
    x = torch.randn(16, 16)
    torch._dynamo.reset()
    want = _step(torch.compile(f, backend="inductor"), x, seed=5)
    torch._dynamo.reset()
    got = _step(torch.compile(f, backend="fxremat"), x, seed=5)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


@pytest.mark.usefixtures("fresh_compile_state")
@pytest.mark.parametrize("policy", ["nothing_saveable", "dots_saveable"])
def test_a_policy_leaves_inductors_seeds_to_be_saved(policy):
    """Note [Inductor's seeds are not the program's] (src/policy.cpp): a policy does
    not class Inductor's seed op, prims.inductor_seeds(count, device); it is saved
    (48 bytes here), never replayed, so the step draws what PyTorch's own compiled step
    draws for the same manual_seed. Replayed through run_and_save_rng_state (before
    the Note) the forward drew other seeds and the loss differed (corpus `noise` under
    dots_saveable: 2.80 against PyTorch's 2.60). The backward uses the forward's
    mask: the gradient is that of the mask the forward's output shows."""
    x = torch.randn(16, 16)

    def step(backend, options=None):
        torch._dynamo.reset()
        compiled = torch.compile(_one_dropout, backend=backend, options=options)
        xg = x.clone().requires_grad_()
        torch.manual_seed(5)
        out = compiled(xg)
        out.backward(torch.ones_like(out))
        return out.detach(), xg

    want_out, want_x = step("inductor")
    out, xg = step("fxremat", {"policy": policy})
    torch.testing.assert_close(out, want_out)  # the same draws
    kept = (out != 0).float()  # y = sin(2 * sigmoid(x) * mask): 0 exactly where dropped
    assert 0 < kept.mean() < 1
    s = torch.sigmoid(x)
    torch.testing.assert_close(xg.grad, torch.cos(2 * s * kept) * kept * 2 * s * (1 - s))
    torch.testing.assert_close(xg.grad, want_x.grad)
    records = fxremat.partition_records()
    assert records and all(r.fallback is None for r in records), records
    saved = [v for r in records for v in r.signature["saved"]]
    assert not [v for v in saved if v["name"].startswith("rng_state_")], saved
    assert [v for v in saved if v["name"].startswith("inductor_seeds")], saved


def _joints(fn):
    joints, backend, _ = capturing_backend()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(fn, backend=backend)(torch.randn(16, 16, requires_grad=True)).backward()
    torch._dynamo.reset()
    return joints


def _run(fw, bw, primals, num_fwd_outputs, seed):
    torch.manual_seed(seed)
    outs = fw(*primals)
    user, saved = outs[:num_fwd_outputs], outs[num_fwd_outputs:]
    n_sym = sum(not isinstance(s, torch.Tensor) for s in saved)
    tensors, syms = saved[:len(saved) - n_sym], saved[len(saved) - n_sym:]
    torch.manual_seed(seed + 100)  # the backward must not depend on the generator's state
    grads = bw(*syms, *tensors, *[torch.ones_like(u) for u in user])
    return list(user), list(grads)


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("partitioner", ["mincut", "default"])
def test_partition_fn_replays_as_pytorch(name, partitioner):
    """partition_fn beside PyTorch's partitioner on the same joint graph: the same saved
    tensors but for naming (the states are PyTorch's rng_state outputs too), the same
    random ops recomputed through run_with_rng_state, and the same numbers when both
    partitions run from one seed."""
    reference = min_cut_rematerialization_partition if partitioner == "mincut" else default_partition
    for joint, kw in _joints(_checkpointed(PROGRAMS[name])):
        nfo = kw["num_fwd_outputs"]
        # PyTorch's replay reads the fake mode of the compile it runs in
        fake_mode = detect_fake_mode([n.meta.get("val") for n in joint.graph.find_nodes(op="placeholder")])
        with tracing(TracingContext(fake_mode)):
            want_fw, want_bw = reference(copy.deepcopy(joint), None, **kw)
        got_fw, got_bw = fxremat.partition_fn(partitioner)(copy.deepcopy(joint), None, **kw)
        for fw, bw in ((want_fw, want_bw), (got_fw, got_bw)):
            assert sum(n.target is RUN_AND_SAVE for n in fw.graph.nodes) == sum(
                n.target is RUN_WITH for n in bw.graph.nodes)
        assert sum(n.target is RUN_AND_SAVE for n in got_fw.graph.nodes) == \
            sum(n.target is RUN_AND_SAVE for n in want_fw.graph.nodes) > 0
        assert not _random_ops(got_bw) and not _random_ops(want_bw)  # nothing draws afresh

        def saved(fw):
            vals = [n.meta["val"] for n in fw.graph.output_node().args[0][nfo:]]
            return sorted((tuple(v.shape), str(v.dtype)) for v in vals if isinstance(v, torch.Tensor))

        assert saved(got_fw) == saved(want_fw)
        primals = [torch.randn(n.meta["val"].shape) for n in joint.graph.nodes
                   if n.op == "placeholder" and n.name.startswith("primals")]
        want = _run(want_fw, want_bw, primals, nfo, seed=11)
        got = _run(got_fw, got_bw, primals, nfo, seed=11)
        for g, w in zip(got[0] + got[1], want[0] + want[1]):
            if w is not None:
                torch.testing.assert_close(g, w)


def test_cli_partitions_and_verifies_the_replay(repo_root, tmp_path):
    """The joint graph through the format and the CLI: the emitted forward saves the
    state (run_and_save_rng_state), the backward replays (run_with_rng_state), and
    `fxremat verify` runs both and finds fw+bw equal to the joint graph."""
    cli = str(repo_root / "build" / "fxremat")
    for k, (joint, kw) in enumerate(_joints(_checkpointed(_two_random_ops))):
        path = tmp_path / f"joint_{k}.json"
        fxremat.save(joint, path, num_fwd_outputs=kw["num_fwd_outputs"])
        out = tmp_path / f"out_{k}"
        subprocess.run([cli, "partition", str(path), "-o", str(out)], capture_output=True, text=True, check=True)
        fw_text = subprocess.run([cli, "print", str(out / "forward.json")], capture_output=True, text=True,
                                 check=True).stdout
        bw_text = subprocess.run([cli, "print", str(out / "backward.json")], capture_output=True, text=True,
                                 check=True).stdout
        assert fw_text.count("torch.ops.higher_order.run_and_save_rng_state(") == 2, fw_text
        assert bw_text.count("torch.ops.higher_order.run_with_rng_state(") == 2, bw_text
        verified = subprocess.run([cli, "verify", str(path), str(out)], capture_output=True, text=True)
        assert verified.returncode == 0, verified.stdout + verified.stderr
        assert "PASSED" in verified.stdout


@pytest.mark.usefixtures("fresh_compile_state")
def test_a_peak_budget_replays_the_tagged_draw_and_prices_its_state():
    """Under a peak budget the solver honours the tag the same way: the dropout is
    recomputed by replay, the step equals eager's, and the simulated peak the budget
    bounds includes the saved state."""
    f = _checkpointed(_one_dropout)
    x = torch.randn(16, 16)
    want = _step(f, x, seed=7)
    got = _step(torch.compile(f, backend="fxremat", options={"compiler": "aot_eager", "activation_memory_budget": 0.5}),
                x, seed=7)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    sig = fxremat.partition_records()[-1].signature
    state = [s for s in sig["saved"] if s["rule"].startswith("RNG state of ")]
    assert len(state) == 1, sig["saved"]
    assert sig["peak"]["bytes"] <= sig["peak"]["budget_bytes"]
    assert sig["peak"]["bytes"] >= state[0]["bytes"]


XLA_DROPOUT = """# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
# op aten.native_dropout.default 'aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)' [core, nondeterministic_seeded]
# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]
# input primals_1 role=primal
# input tangents_1 role=tangent
def forward(self, primals_1: "f32[1024][1]xla:0 rg", tangents_1: "f32[1024][1]xla:0"):
    d: "(f32[1024][1]xla:0, b8[1024][1]xla:0)" = torch.ops.aten.native_dropout.default(primals_1, 0.5, True)  # recompute=PREFER_RECOMPUTE ac_graph_id=1
    out: "f32[1024][1]xla:0 rg" = d[0]  # recompute=PREFER_RECOMPUTE ac_graph_id=1
    mask: "b8[1024][1]xla:0" = d[1]  # recompute=PREFER_RECOMPUTE ac_graph_id=1
    m: "f32[1024][1]xla:0" = torch.ops.aten.mul.Tensor(tangents_1, mask)
    return (out, m)
"""


def test_a_draw_that_cannot_be_replayed_is_saved_with_a_warning(repo_root, tmp_path):
    """On a device whose generator state torch's replay ops cannot read (xla), the
    tagged dropout's mask is saved instead, and the CLI warns, naming the op and the
    device; the residual report gives the rule."""
    path = tmp_path / "xla_dropout.fxir"
    path.write_text(XLA_DROPOUT)
    cli = str(repo_root / "build" / "fxremat")
    done = subprocess.run([cli, "partition", str(path), "-o", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert ("fxremat: warning: 'mask' (aten.native_dropout.default) is tagged PREFER_RECOMPUTE but is saved: its "
            "device ('xla') has no generator state fxremat can replay (cpu, cuda)") in done.stderr, done.stderr
    report = subprocess.run([cli, "residuals", str(path)], capture_output=True, text=True, check=True).stdout
    assert "random op (never replayed)" in report
    assert "run_with_rng_state" not in (tmp_path / "out" / "backward.json").read_text()
