"""Mutation safety (issue 9, Note [Mutated inputs] in passes/protect_mutations.h).

A program that mutates an input (``counter.add_(1)`` on a buffer, BatchNorm's running
statistics) must get the gradients eager autograd gives under every partitioner, policy
and compiler: nothing that reads the old data is recomputed in the backward.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import fxremat
from fxremat import policies as P
from fxremat.testing import programs

# Every policy kind (P.KINDS), with arguments where it takes them.
POLICIES = {
    "everything_saveable": P.everything_saveable,
    "nothing_saveable": P.nothing_saveable,
    "dots_saveable": P.dots_saveable,
    "checkpoint_dots": P.checkpoint_dots,
    "dots_with_no_batch_dims_saveable": P.dots_with_no_batch_dims_saveable,
    "checkpoint_dots_with_no_batch_dims": P.parse("checkpoint_dots_with_no_batch_dims"),
    "save_only_these_names": P.save_only_these_names("nothing_has_this_name"),
    "save_any_names_but_these": P.save_any_names_but_these("nothing_has_this_name"),
    "save_anything_except_these_names": P.save_anything_except_these_names("nothing_has_this_name"),
    "save_and_offload_only_these_names": P.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=[], offload_src="device",
        offload_dst="pinned_host"),
    "offload_dot_with_no_batch_dims": P.offload_dot_with_no_batch_dims(),
    "save_from_both_policies": P.save_from_both_policies(P.nothing_saveable, P.dots_saveable),
    "all_of": P.nothing_saveable & P.save_only_these_names("nothing_has_this_name"),
    "save_ops": P.save_ops("aten.mm"),
    "checkpoint_policy": P.checkpoint_policy(default="PREFER_RECOMPUTE"),
}


def test_every_policy_kind_is_covered():
    assert {k for k in P.KINDS} <= set(POLICIES), sorted(set(P.KINDS) - set(POLICIES))


def _eager_grads(program, x):
    m = program.fn
    ref = type(m)()
    ref.load_state_dict(m.state_dict())
    xr = x.detach().clone().requires_grad_()
    ref(xr).backward()
    return ref, xr


@pytest.fixture(scope="module")
def counter_joint():
    program = programs.build("mutated_counter")
    return fxremat.export_joint(program.fn, *program.args, name="mutated_counter")


def _run_partition(part, joint, program):
    """Forward, AOTAutograd's write-back, backward (Partition.run), on fresh inputs;
    returns (gradients, the buffer after the step)."""
    roots = program.roots()
    primals = [fxremat.resolve_path(p, roots).detach().clone() for p in joint.input_paths]
    tangents = [torch.ones(())]
    _, grads = part.run(primals, tangents)
    counter = primals[joint.input_paths.index("buffers['counter']")]
    return dict(zip(joint.input_paths, grads)), counter


def _expected(program):
    m = program.fn
    ref = type(m)()
    ref.load_state_dict(m.state_dict())
    x = program.args[0].detach().clone().requires_grad_()
    ref(x).backward()
    grads = {f"params['{k}']": p.grad for k, p in ref.named_parameters()}
    grads["args[0]"] = x.grad
    return grads, ref.counter


def _check(grads, counter, program):
    want, want_counter = _expected(program)
    assert torch.equal(counter, want_counter)
    for path, g in want.items():
        torch.testing.assert_close(grads[path], g, msg=lambda m: f"{path}: {m}")


def test_joint_marks_the_mutated_buffer(counter_joint):
    doc = counter_joint.to_json()
    marked = [e for e in doc["nodes"] if e["op"] == "placeholder" and e.get("meta", {}).get("mutated")]
    assert [e["path"] for e in marked] == ["buffers['counter']"]
    assert marked[0]["meta"]["written_back_from"] == 0


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_partition_under_every_policy(kind, counter_joint):
    program = programs.build("mutated_counter")
    part = fxremat.partition(counter_joint, policy=POLICIES[kind])
    grads, counter = _run_partition(part, counter_joint, program)
    _check(grads, counter, program)


@pytest.mark.parametrize("partitioner, options", [
    ("mincut", {}), ("mincut", {"activation_memory_budget": 0.0}),
    ("mincut", {"activation_memory_budget": 0.0, "budget_objective": "saved"}), ("default", {})])
def test_partition_without_policy(partitioner, options, counter_joint):
    program = programs.build("mutated_counter")
    part = fxremat.partition(counter_joint, partitioner, options)
    grads, counter = _run_partition(part, counter_joint, program)
    _check(grads, counter, program)
    saved = {s["name"] for s in part.signature["saved"]}
    if options:
        assert "add" in saved  # read the old counter: saved, not recomputed


def test_the_check_can_fail(counter_joint):
    """PyTorch's min cut at budget 0 recomputes `add` from the written-back counter:
    the same run harness reports wrong gradients for it."""
    from torch._functorch import config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    program = programs.build("mutated_counter")
    ours = fxremat.partition(counter_joint, "mincut", {"activation_memory_budget": 0.0, "budget_objective": "saved"})
    from fxremat._format import from_json

    gm = from_json(counter_joint.to_json())
    with fconfig.patch(activation_memory_budget=0.0):
        fw, bw = min_cut_rematerialization_partition(gm, None, num_fwd_outputs=counter_joint.num_fwd_outputs)
    nfo = counter_joint.num_fwd_outputs
    n_saved = len(fw.graph.output_node().args[0]) - nfo
    sig = dict(ours.signature)
    sig["forward"] = {"num_outputs": nfo + n_saved}
    sig["backward"] = {"num_inputs": n_saved + 1}
    sig["saved"] = [{"forward_output_index": nfo + i, "backward_input_index": i} for i in range(n_saved)]
    sig["tangents"] = [{"backward_input_index": n_saved}]
    theirs = fxremat.Partition(fw, bw, sig)
    grads, _ = _run_partition(theirs, counter_joint, program)
    want, _ = _expected(program)
    assert not torch.allclose(grads["params['fc1.weight']"], want["params['fc1.weight']"])


def test_must_recompute_demand_is_refused(counter_joint):
    policy = P.checkpoint_policy(by_op={"aten.add": "MUST_RECOMPUTE"})
    with pytest.raises(ValueError, match=r"reads 'primals_5' before the forward overwrites it"):
        fxremat.partition(counter_joint, policy=policy)


# ---- through torch.compile ---------------------------------------------------------


class BatchNormNet(nn.Module):
    """BatchNorm in training: its running statistics are written in the forward."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return self.fc(h.mean((2, 3))).sum()


def _compile_step(cls, x, options):
    torch.manual_seed(0)
    m = cls()
    ref = cls()
    ref.load_state_dict(m.state_dict())
    xr = x.detach().clone().requires_grad_()
    ref(xr).backward()
    torch._dynamo.reset()
    xc = x.detach().clone().requires_grad_()
    torch.compile(m, backend="fxremat", options=options)(xc).backward()
    torch.testing.assert_close(xc.grad, xr.grad, rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda s: f"{name}: {s}")
    for (name, b), (_, c) in zip(m.named_buffers(), ref.named_buffers()):
        torch.testing.assert_close(b, c, msg=lambda s: f"{name}: {s}")


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_backend_aot_eager_every_policy(kind, fresh_compile_state):
    _compile_step(programs.MutatedCounter, torch.randn(4, 8),
                  {"compiler": "aot_eager", "policy": POLICIES[kind]})


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_backend_partitioners(partitioner, compiler, fresh_compile_state):
    _compile_step(programs.MutatedCounter, torch.randn(4, 8), {"compiler": compiler, "partitioner": partitioner})


@pytest.mark.parametrize("kind", ["nothing_saveable", "dots_saveable", "save_ops"])
def test_backend_inductor_policies(kind, fresh_compile_state):
    _compile_step(programs.MutatedCounter, torch.randn(4, 8), {"compiler": "inductor", "policy": POLICIES[kind]})


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize("kind", [None, "nothing_saveable", "budget 0"])
def test_batchnorm_running_stats(compiler, kind, fresh_compile_state):
    """BatchNorm reads its running stats before the forward overwrites them; at
    budget 0 its results (getitems of the multi-output op) are saved, never the tuple."""
    options = {"compiler": compiler}
    if kind == "budget 0":
        options["activation_memory_budget"] = 0.0
    elif kind:
        options["policy"] = POLICIES[kind]
    _compile_step(BatchNormNet, torch.randn(2, 3, 6, 6), options)


class ClonedThenMutated(nn.Module):
    """The backward needs a buffer's value from before the forward overwrites it: the
    user clones it (eager needs that), and Inductor's remove_noop_ops erases the clone
    before the partitioner runs (Note [Snapshots of mutated inputs])."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))
        self.register_buffer("s", torch.rand(8) + 1.0)

    def forward(self, x):
        g = self.w * self.s.clone()
        with torch.no_grad():
            self.s.mul_(3.0)
        return (g * x).sum()


class MocoQueue(nn.Module):
    """MoCo's negative keys: logits against a queue buffer, which the same forward then
    enqueues new keys into (a slice written in place). The matmul's backward needs the
    queue as it was."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 6)
        self.register_buffer("queue", nn.functional.normalize(torch.randn(6, 10), dim=0))

    def forward(self, x):
        q = nn.functional.normalize(self.enc(x), dim=1)
        logits = torch.einsum("nc,ck->nk", q, self.queue.clone().detach())
        with torch.no_grad():
            self.queue[:, : x.shape[0]] = q.detach().t()
        return torch.logsumexp(logits / 0.07, dim=1).mean()


@pytest.mark.parametrize("cls", [ClonedThenMutated, MocoQueue])
@pytest.mark.parametrize("options", [{"compiler": "inductor"}, {"compiler": "aot_eager"},
                                     {"compiler": "inductor", "activation_memory_budget": 0.0},
                                     {"compiler": "inductor", "partitioner": "default"},
                                     {"compiler": "inductor", "policy": POLICIES["nothing_saveable"]}],
                         ids=["inductor", "aot_eager", "inductor-budget0", "inductor-default", "inductor-nothing"])
def test_backward_reads_the_data_before_the_write(cls, options, fresh_compile_state):
    """Saved as it is, the mutated buffer would give the backward the new data (PyTorch's
    own Inductor compile of ClonedThenMutated gives grad(w) = 3x eager's)."""
    x = torch.randn(8) if cls is ClonedThenMutated else torch.randn(4, 8)
    _compile_step(cls, x, dict(options))


class InputReadAroundItsWrite(nn.Module):
    """A user input read through ``.clone()``, mutated in place, then read again: the
    backward needs both values. PyTorch's own aot_eager and Inductor compiles give
    ``l``'s gradients off by up to 11.5 on this model (torch 2.13, found by a hunt of
    torch.compile usage patterns); fxremat matches eager."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.l(x)
        z = h * y.clone() + y
        y.add_(1)
        return z.sin().sum() + (h * y).cos().sum()


@pytest.mark.parametrize("options", [{"compiler": "aot_eager"}, {"compiler": "inductor"},
                                     {"compiler": "aot_eager", "activation_memory_budget": 0.0},
                                     {"compiler": "aot_eager", "policy": POLICIES["nothing_saveable"]}],
                         ids=["aot_eager", "inductor", "aot_eager-budget0", "aot_eager-nothing"])
def test_input_read_before_and_after_its_write(options, fresh_compile_state):
    torch.manual_seed(0)
    m = InputReadAroundItsWrite()
    ref = InputReadAroundItsWrite()
    ref.load_state_dict(m.state_dict())
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    yr, yc = y.clone(), y.clone()
    ref(x, yr).backward()
    torch._dynamo.reset()
    torch.compile(m, backend="fxremat", options=options)(x, yc).backward()
    torch.testing.assert_close(yc, yr)
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda s: f"{name}: {s}")


# ---- through the CLI -----------------------------------------------------------------

# The CLI's text form of each policy kind (fxremat.policies.Policy.to_text).
@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_cli_partition_and_verify_every_policy(kind, repo_root, tmp_path):
    """`fxremat partition --policy-file` then `fxremat verify` (which writes the mutated
    buffer back between forward and backward, as AOTAutograd's epilogue does)."""
    cli_partition_and_verify(repo_root, repo_root / "testdata" / "mutated_counter.json.gz", POLICIES[kind], tmp_path)


def cli_partition_and_verify(repo_root, graph, policy, tmp_path):
    """`fxremat partition --policy-file` then `fxremat verify`: both succeed, verify passes."""
    import json
    import subprocess

    cli = repo_root / "build" / "fxremat"
    policy_file = tmp_path / "policy.json"
    policy_file.write_text(json.dumps(policy.to_json()))
    out = tmp_path / "out"
    r = subprocess.run([str(cli), "partition", str(graph), "-o", str(out), "--policy-file", str(policy_file)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(cli), "verify", str(graph), str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
def test_cli_snapshot_verifies(partitioner, repo_root, tmp_path):
    """Note [Snapshots of mutated inputs] through the CLI: the golden graph where the
    backward reads two inputs before the writes (an epilogue and an in-graph copy_ at
    the end); the partition saves copies, says so, and verifies against the joint
    graph, which reads the old data there."""
    import json
    import subprocess

    text = (repo_root / "tests" / "golden" / "protect_mutations.test").read_text()
    case = next(c for c in text.split("// -----") if "as AOTAutograd lays a joint graph out" in c)
    graph = tmp_path / "joint.fxir"
    graph.write_text("\n".join(l for l in case.splitlines() if l.strip() and not l.startswith("//")) + "\n")
    cli = repo_root / "build" / "fxremat"
    out = tmp_path / "out"
    r = subprocess.run([str(cli), "partition", str(graph), "-o", str(out), "--partitioner", partitioner],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    sig = json.loads((out / "signature.json").read_text())
    snapshots = sorted(s["name"] for s in sig["saved"] if s.get("snapshot"))
    assert "primals_1" in snapshots and len(snapshots) == 2, sig["saved"]
    assert sum("copy taken before the forward overwrites it" in n for n in sig["notes"]) == 2
    r = subprocess.run([str(cli), "verify", str(graph), str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
