"""The peak budget (Note [Peak budget], docs/budget.md), measured: every budgeted
partition's measured peak (fxremat.testing.memory) is within its budget and the
partition reproduces the joint graph's outputs and gradients; budget 0 on a small
Llama reaches per-layer checkpointing's peak without annotations; the budget works
from the CLI, Python, partition_fn and the backend; the front comes out of one
command."""

from __future__ import annotations

import copy
import glob
import json
import os
import subprocess

import pytest
import torch

import fxremat
from fxremat.testing.memory import example_inputs, measure_peak, pytorch_partition
from fxremat.testing.verify import tolerance

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LLAMA = os.path.join(REPO, "testdata", "budget", "llama_4l.json.gz")
LLAMA_CKPT = os.path.join(REPO, "testdata", "budget", "llama_4l_ckpt.json.gz")
FILES = sorted(glob.glob(os.path.join(REPO, "testdata", "*.json.gz"))) + sorted(
    glob.glob(os.path.join(REPO, "testdata", "random", "*.json.gz")))[:20] + [LLAMA]


def _clone(values):
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _check_numerics(part, joint, primals, tangents):
    # The same random draws in both runs: random ops are never replayed, so the
    # forward draws them in the joint graph's order.
    with torch.no_grad():
        torch.manual_seed(1234)
        want = list(joint(*_clone(primals), *tangents))
        torch.manual_seed(1234)
        outs, grads = part.run(_clone(primals), tangents)
    got = list(outs) + list(grads)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if isinstance(b, torch.Tensor):
            rtol, atol = tolerance(b.dtype)
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert (a is None) == (b is None)


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.basename(p).removesuffix(".json.gz"))
def test_never_over_budget_measured(path):
    joint = fxremat.load(path)
    primals, tangents = example_inputs(joint)
    plain = fxremat.partition(joint).signature["peak"]["bytes"]
    for fraction in (0.0, 0.4, 0.8):
        part = fxremat.partition(joint, options={"activation_memory_budget": fraction})
        peak = part.signature["peak"]
        measured = measure_peak(part, primals, tangents).peak_bytes
        assert measured == peak["bytes"] <= peak["budget_bytes"] <= plain, (fraction, peak, measured)
        _check_numerics(part, joint, primals, tangents)


def test_budget_zero_matches_per_layer_checkpointing_without_annotations():
    """The model's own per-layer checkpointing (PyTorch's min cut of the checkpointed
    graph, what torch.compile runs for it) against fxremat at budget 0 on the plain
    graph: no higher measured peak; and both below PyTorch's own budget 0."""
    joint = fxremat.load(LLAMA)
    primals, tangents = example_inputs(joint)
    ours = fxremat.partition(joint, options={"activation_memory_budget": 0.0})
    ours_peak = measure_peak(ours, primals, tangents).peak_bytes
    ckpt = fxremat.load(LLAMA_CKPT)
    cp, ct = example_inputs(ckpt)
    ckpt_peak = measure_peak(pytorch_partition(ckpt, 1.0), cp, ct).peak_bytes
    theirs_zero = measure_peak(pytorch_partition(joint, 0.0), primals, tangents).peak_bytes
    mincut = measure_peak(fxremat.partition(joint), primals, tangents).peak_bytes
    assert ours_peak <= ckpt_peak < mincut, (ours_peak, ckpt_peak, mincut)
    assert ours_peak < theirs_zero, (ours_peak, theirs_zero)


def test_byte_budget_and_its_errors():
    joint = fxremat.load(LLAMA)
    smallest = fxremat.partition(joint, options={"activation_memory_budget": 0.0}).signature["peak"]["bytes"]
    part = fxremat.partition(joint, options={"memory_budget_bytes": smallest})
    assert part.signature["peak"]["bytes"] <= smallest == part.signature["peak"]["budget_bytes"]
    with pytest.raises(ValueError, match=rf"memory budget {smallest - 1} B is below the smallest peak fxremat "
                                         rf"reaches on this graph, {smallest} B above the inputs"):
        fxremat.partition(joint, options={"memory_budget_bytes": smallest - 1})
    with pytest.raises(ValueError, match=r"activation_memory_budget=1.5 is outside \[0, 1\]"):
        fxremat.partition(joint, options={"activation_memory_budget": 1.5})
    with pytest.raises(ValueError, match="budget_objective=saved .* supports activation_memory_budget 1.0 and 0.0 only"):
        fxremat.partition(joint, options={"activation_memory_budget": 0.5, "budget_objective": "saved"})


def test_cli_budget_pareto_and_verify(tmp_path):
    cli = os.path.join(REPO, "build", "fxremat")
    out = subprocess.run([cli, "partition", LLAMA, "--memory-budget", "4.5MiB", "-o", str(tmp_path / "p")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    sig = json.loads((tmp_path / "p" / "signature.json").read_text())
    assert sig["peak"]["budget_bytes"] == int(4.5 * 2**20) >= sig["peak"]["bytes"]
    assert "step peak (simulated)" in out.stdout
    ver = subprocess.run([cli, "verify", LLAMA, str(tmp_path / "p")], capture_output=True, text=True)
    assert ver.returncode == 0 and "PASSED" in ver.stdout, ver.stdout + ver.stderr
    bad = subprocess.run([cli, "partition", LLAMA, "--memory-budget", "1MiB", "-o", str(tmp_path / "q")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "below the smallest peak" in bad.stderr and not (tmp_path / "q").exists()
    bad_unit = subprocess.run([cli, "partition", LLAMA, "--memory-budget", "12 parsecs"], capture_output=True, text=True)
    assert bad_unit.returncode == 2 and "--memory-budget takes a byte size" in bad_unit.stderr
    front = subprocess.run([cli, "pareto", LLAMA, "--points", "5", "-o", str(tmp_path / "front.json"),
                            "--plot", str(tmp_path / "front.svg")], capture_output=True, text=True)
    assert front.returncode == 0, front.stderr
    points = json.loads((tmp_path / "front.json").read_text())["points"]
    budgets = [p for p in points if p["label"].startswith("budget")]
    assert len(budgets) == 5
    # the budget points go from the smallest peak to at most the min cut's (fraction 1.0
    # bounds the peak by the min cut's, and may find a partition under it that costs no
    # more), cost falling
    min_cut = next(p for p in points if p["label"] == "min cut")
    assert budgets[0]["peak_bytes"] == min(p["peak_bytes"] for p in points)
    assert budgets[-1]["peak_bytes"] <= min_cut["peak_bytes"]
    assert budgets[-1]["recompute_cost"] <= min_cut["recompute_cost"]
    assert all(a["peak_bytes"] <= b["peak_bytes"] for a, b in zip(budgets, budgets[1:]))
    assert (tmp_path / "front.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("path", [LLAMA] + FILES[-6:-1])
def test_the_threaded_front_is_the_single_threaded_one(path, tmp_path):
    """Note [Threads in the front]: the budgets solved by worker threads give exactly
    the front one thread gives (the threads share only an evaluation cache)."""
    cli = os.path.join(REPO, "build", "fxremat")
    fronts = []
    for threads in ("1", "4"):
        env = dict(os.environ, FXREMAT_THREADS=threads)
        out = tmp_path / f"front_{threads}.json"
        done = subprocess.run([cli, "pareto", path, "--points", "8", "-o", str(out)], capture_output=True, text=True,
                              env=env)
        assert done.returncode == 0, done.stderr
        fronts.append(out.read_text())
    assert fronts[0] == fronts[1]


@pytest.mark.parametrize("path", [LLAMA] + FILES[-3:-1])
def test_a_budget_solved_on_threads_is_the_single_threaded_one(path, tmp_path):
    """Note [Candidates on several threads]: the candidates evaluated on worker threads
    give one budget's partition byte for byte as one thread gives it."""
    cli = os.path.join(REPO, "build", "fxremat")
    outputs = []
    for threads in ("1", "4"):
        out = tmp_path / threads
        done = subprocess.run([cli, "partition", path, "--config", "activation_memory_budget=0.3", "-o", str(out)],
                              capture_output=True, text=True, env=dict(os.environ, FXREMAT_THREADS=threads))
        assert done.returncode == 0, done.stderr
        outputs.append([(out / name).read_bytes() for name in ("forward.json", "backward.json", "signature.json")])
    assert outputs[0] == outputs[1]


def test_python_pareto_matches_cli_and_plots(tmp_path):
    joint = fxremat.load(LLAMA)
    front = fxremat.pareto(joint, points=3, plot=tmp_path / "front.png")
    assert (tmp_path / "front.png").stat().st_size > 0
    cli = subprocess.run([os.path.join(REPO, "build", "fxremat"), "pareto", LLAMA, "--points", "3", "-o",
                          str(tmp_path / "f.json")], capture_output=True, text=True)
    assert cli.returncode == 0
    assert [(p["label"], p["peak_bytes"]) for p in front] == \
        [(p["label"], p["peak_bytes"]) for p in json.loads((tmp_path / "f.json").read_text())["points"]]


@pytest.mark.parametrize("cli_args,options", [
    (["--memory-budget", "10"], {"memory_budget_bytes": "10"}),
    (["--config", "budget_objective=saved"], {"budget_objective": "saved"}),
])
def test_pareto_refuses_a_single_budget(tmp_path, cli_args, options):
    # The front spans every budget: an option that fixes one would be ignored.
    # Exit 2 / ValueError, and no file written.
    out = tmp_path / "front.json"
    done = subprocess.run([os.path.join(REPO, "build", "fxremat"), "pareto", LLAMA, "-o", str(out), *cli_args],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "does not apply" in done.stderr, done.stderr
    assert not out.exists()
    with pytest.raises(ValueError, match="does not apply"):
        fxremat.pareto(fxremat.load(LLAMA), points=3, options=options)


def test_backend_pareto_dir_writes_each_graphs_front(fresh_compile_state, tmp_path):
    # One front per compiled joint graph (a graph break gives two), with the
    # partition's options but its budget; the step itself is partitioned at
    # the budget asked for and trains like eager.
    def f(x, w1, w2):
        h = torch.tanh(x @ w1).relu() @ w2
        torch._dynamo.graph_break()
        return torch.sin(h).sum()

    torch.manual_seed(0)
    args = [torch.randn(8, 16, requires_grad=True), torch.randn(16, 32, requires_grad=True),
            torch.randn(32, 16, requires_grad=True)]
    want = torch.autograd.grad(f(*args), args)
    options = {"compiler": "aot_eager", "activation_memory_budget": 0.5, "pareto_dir": str(tmp_path)}
    got = torch.autograd.grad(torch.compile(f, backend="fxremat", options=options)(*args), args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    records = fxremat.partition_records()
    assert len(records) == 2 and all(r.pareto_dir for r in records), records
    for r in records:
        front = json.loads(open(os.path.join(r.pareto_dir, "front.json")).read())["points"]
        assert [p["label"] for p in front if p["label"].startswith("budget ")] == \
            [f"budget {i / 19:.2f}" for i in range(20)]
        assert any(p["label"] == "min cut" for p in front)
        assert os.path.getsize(os.path.join(r.pareto_dir, "front.svg")) > 0
    with pytest.raises(ValueError, match="pareto_dir needs the mincut partitioner"):
        fxremat.partition_fn("default", pareto_dir=str(tmp_path))


def test_gpt2_trains_under_inductor_at_budget_0_3(fresh_compile_state):
    """A 2-layer GPT-2 trains 3 steps under torch.compile(backend="fxremat") at
    activation_memory_budget=0.3 with Inductor, equal to eager."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=2, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    eager = transformers.GPT2LMHeadModel(cfg)
    compiled_model = copy.deepcopy(eager)
    step = torch.compile(lambda m, ids: m(input_ids=ids, labels=ids, use_cache=False).loss, backend="fxremat",
                         options={"activation_memory_budget": 0.3})
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(compiled_model.parameters(), lr=0.1)
    for i in range(3):
        ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(i))
        le = eager(input_ids=ids, labels=ids, use_cache=False).loss
        lc = step(compiled_model, ids)
        torch.testing.assert_close(lc, le, rtol=1e-4, atol=1e-5)
        le.backward()
        lc.backward()
        for (n, pe), pc in zip(eager.named_parameters(), compiled_model.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-3, atol=1e-5, msg=n)
        opt_e.step(), opt_c.step(), opt_e.zero_grad(), opt_c.zero_grad()
    recs = [r for r in fxremat.partition_records() if r.signature and r.signature.get("peak", {}).get("budget_bytes")]
    assert recs, "no partition ran under the budget"
    assert all(r.signature["peak"]["bytes"] <= r.signature["peak"]["budget_bytes"] for r in recs)


def _cholesky_twice(x):
    h = torch.tanh(x)
    g = h.transpose(-1, -2) @ h + torch.eye(8)
    return torch.linalg.cholesky(g).sum() + torch.linalg.cholesky(g * 2).pow(2).sum()


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize("budget", [0.0, 0.5])
def test_effect_tokens_are_never_saved(compiler, budget, fresh_compile_state):
    """Note [Effect tokens are never saved]: linalg.cholesky checks its result through
    with_effects; the budget solver's saved sets named the token input (None at run
    time: AOTAutograd refused it) and an intermediate token (Inductor's unlift_tokens
    refused it)."""
    x = torch.randn(8, 8, requires_grad=True)
    _cholesky_twice(x).backward()
    want = x.grad.clone()
    x.grad = None
    torch.compile(_cholesky_twice, backend="fxremat",
                  options={"compiler": compiler, "activation_memory_budget": budget})(x).backward()
    torch.testing.assert_close(x.grad, want, rtol=1e-4, atol=1e-5)


class _PaddedChunkAttention(torch.nn.Module):
    """Attention within chunks of 4 over a sequence padded to a multiple of 4: under a
    dynamic sequence length the padded length is a symbol computed from the padded
    tensor (sym_size), and q, k and v are views of one projection."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.o = torch.nn.Linear(16, 16)

    def forward(self, x):
        s = x.shape[1]
        xp = torch.nn.functional.pad(x, (0, 0, 0, (-s) % 4))
        q, k, v = self.qkv(xp).unflatten(1, (xp.shape[1] // 4, 4)).chunk(3, -1)
        a = ((q @ k.transpose(-1, -2)).softmax(-1) @ v).flatten(1, 2)[:, :s]
        return (x + self.o(a)).pow(2).mean()


@pytest.mark.parametrize("budget", [0.0, 0.5])
def test_dynamic_views_of_one_saved_storage_keep_their_sizes(budget, fresh_compile_state):
    """Note [Saved values never alias each other]: a storage two saved views share is
    saved once, as its root, and the backward recomputes the views; their symbolic sizes
    go along as saved symints. Before, the backward needed the padded input for them and
    the budget's extraction failed ('t_8' ... cannot be computed from its inputs)."""
    torch.manual_seed(0)
    model = _PaddedChunkAttention()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 10, 16)
    ref(x).backward()
    compiled = torch.compile(model, backend="fxremat", dynamic=True,
                             options={"compiler": "aot_eager", "activation_memory_budget": budget})
    xd = x.clone()
    torch._dynamo.mark_dynamic(xd, 1)
    loss = compiled(xd)
    loss.backward()
    torch.testing.assert_close(loss, ref(x))
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
    saved = fxremat.partition_records()[-1].signature["saved"]
    assert any(s["kind"] == "symint" for s in saved)
