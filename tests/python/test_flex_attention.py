"""flex_attention and flex_attention_backward (issue 15, item 1) on the CPU.

torch 2.13 refuses FlexAttention's backward on the CPU in the Python function
(``torch.nn.attention.flex_attention._validate_device``), not in the higher-order ops:
their dense reference implementations run a backward on the CPU. So these tests lift
that check and run the programs under ``aot_eager`` (the HOPs' reference kernels);
Inductor's Triton templates, which need a GPU, are bench/gpu_flex_check.py's
(docs/benchmarks_gpu.md). What flex_attention brings that other HOPs did not: its
score_mod and mask_mod subgraphs return a single tensor (Note [Single-value outputs]),
and it takes its kernel options as a dict argument (format 1.6)."""

from __future__ import annotations

import copy
import subprocess
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._functorch.partitioners import min_cut_rematerialization_partition

import fxremat
from fxremat._partition_fn import clear_partition_records
from fxremat.testing.verify import capturing_backend, random_primals, random_tangents

fa = pytest.importorskip("torch.nn.attention.flex_attention")

SEQ = 64


@pytest.fixture(autouse=True)
def flex_backward_on_cpu(monkeypatch):
    monkeypatch.setattr(fa, "_validate_device", lambda *a: None)


class FlexBlock(torch.nn.Module):
    """Attention through flex_attention with a causal block mask and a learnable
    per-head bias in its score_mod (a captured parameter: its gradient comes out of
    flex_attention_backward), then an MLP."""

    def __init__(self, dim=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.fc = torch.nn.Linear(dim, dim)
        self.bias = torch.nn.Parameter(torch.randn(heads, SEQ) * 0.1)

    def forward(self, x, block_mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.bias

        def score_mod(score, bi, h, qi, kv):
            return score + bias[h, kv]

        o = fa.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, d))
        return (x + self.fc(F.gelu(x))).pow(2).mean()


def _causal(b, h, q, kv):
    return q >= kv


def _inputs():
    torch.manual_seed(0)
    model = FlexBlock()
    x = torch.randn(2, SEQ, 32, requires_grad=True)
    block_mask = fa.create_block_mask(_causal, B=None, H=None, Q_LEN=SEQ, KV_LEN=SEQ, device="cpu")
    return model, x, block_mask


def _step(model, x, block_mask):
    x = x.detach().clone().requires_grad_()
    loss = model(x, block_mask)
    loss.backward()
    strip = lambda n: n.removeprefix("_orig_mod.")  # noqa: E731
    return loss.detach(), x.grad, {strip(n): p.grad for n, p in model.named_parameters()}


def _assert_same(got, want):
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert got[2].keys() == want[2].keys()
    for k in want[2]:
        torch.testing.assert_close(got[2][k], want[2][k], msg=k)


@pytest.mark.usefixtures("fresh_compile_state")
@pytest.mark.parametrize("options", [{}, {"activation_memory_budget": 0.0}, {"activation_memory_budget": 0.5},
                                     {"policy": "dots_saveable"}], ids=["mincut", "budget_0.0", "budget_0.5",
                                                                         "dots_saveable"])
def test_backend_trains_like_eager_and_like_pytorch(options):
    model, x, block_mask = _inputs()
    want = _step(copy.deepcopy(model), x, block_mask)
    pytorch = _step(torch.compile(copy.deepcopy(model), backend="aot_eager"), x, block_mask)
    torch._dynamo.reset()
    clear_partition_records()
    got = _step(torch.compile(copy.deepcopy(model), backend="fxremat",
                              options={"compiler": "aot_eager", **options}), x, block_mask)
    _assert_same(got, want)
    _assert_same(got, pytorch)
    records = fxremat.partition_records()
    assert records and all(r.fallback is None for r in records), records


def _joint():
    model, x, block_mask = _inputs()
    joints, backend, _ = capturing_backend()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(model, backend=backend)(x, block_mask).backward()
    torch._dynamo.reset()
    (joint, kw), = joints
    targets = {n.target for n in joint.graph.nodes}
    assert {torch.ops.higher_order.flex_attention, torch.ops.higher_order.flex_attention_backward} <= targets
    return joint, kw


def _saved_names(fw, num_fwd_outputs):
    return sorted(n.name for n in fw.graph.output_node().args[0][num_fwd_outputs:])


def test_partition_fn_saves_what_pytorch_saves():
    """The same saved values as PyTorch's min cut (flex_attention is never
    recomputed: its output and logsumexp are saved), the HOPs in the graphs that run
    them, each with its subgraphs as submodules."""
    joint, kw = _joint()
    want_fw, _ = min_cut_rematerialization_partition(copy.deepcopy(joint), None, **kw)
    got_fw, got_bw = fxremat.partition_fn()(copy.deepcopy(joint), None, **kw)
    nfo = kw["num_fwd_outputs"]
    assert _saved_names(got_fw, nfo) == _saved_names(want_fw, nfo)
    fw_hops = [n for n in got_fw.graph.nodes if n.target is torch.ops.higher_order.flex_attention]
    bw_hops = [n for n in got_bw.graph.nodes if n.target is torch.ops.higher_order.flex_attention_backward]
    assert len(fw_hops) == 1 and len(bw_hops) == 1
    assert not any(n.target is torch.ops.higher_order.flex_attention for n in got_bw.graph.nodes)
    for gm, n in ((got_fw, fw_hops[0]), (got_bw, bw_hops[0])):
        subgraphs = [a for a in torch.fx.node.map_aggregate(n.args, lambda a: a) if isinstance(a, torch.fx.Node)
                     and a.op == "get_attr"]
        for a in subgraphs:
            assert isinstance(getattr(gm, a.target), torch.fx.GraphModule)
        # kernel options (a dict argument) pass through unchanged
        assert any(isinstance(a, dict) and "BACKEND" in a for a in n.args), n.args


def test_format_round_trip_and_cli(repo_root, tmp_path):
    """Format 1.6: the score_mod's single-value return and the kernel-options dict
    survive JSON and the text form; the loaded joint graph and its partition agree
    numerically; the CLI partitions it and verify says it cannot run the HOP (exit 2),
    never a silent pass."""
    joint, kw = _joint()
    path = tmp_path / "flex.json"
    fxremat.save(joint, path, num_fwd_outputs=kw["num_fwd_outputs"])
    loaded = fxremat.load(path)
    score = getattr(loaded, "sdpa_score0")
    assert isinstance(score.graph.output_node().args[0], torch.fx.Node)  # not a tuple
    flex = next(n for n in loaded.graph.nodes if n.target is torch.ops.higher_order.flex_attention)
    assert any(isinstance(a, dict) and a.get("BACKEND") == "AUTO" for a in flex.args)

    # Primals whose gradient the graph computes require grad, as in training: the
    # HOPs return None for the gradient of a captured tensor that does not.
    nfo = kw["num_fwd_outputs"]
    needs_grad = [o is not None for o in loaded.graph.output_node().args[0][nfo:]]
    primals = [p.requires_grad_() if g else p for p, g in zip(random_primals(loaded, seed=0), needs_grad)]
    tangents = random_tangents(loaded, seed=0)
    want = list(loaded(*[p.detach().clone().requires_grad_(p.requires_grad) for p in primals], *tangents))
    fw, grads = fxremat.partition(path).run([p.detach().clone().requires_grad_(p.requires_grad) for p in primals],
                                            tangents)
    got = fw + grads
    assert len(got) == len(want)
    bias = next(i for i, p in enumerate(primals) if tuple(p.shape) == (2, SEQ))  # FlexBlock.bias
    assert want[nfo + bias] is not None  # the captured parameter's gradient is compared
    for w, g in zip(want, got):
        if w is not None:
            torch.testing.assert_close(g, w)

    cli = str(repo_root / "build" / "fxremat")
    text = subprocess.run([cli, "print", str(path)], capture_output=True, text=True, check=True).stdout
    assert "torch.ops.higher_order.flex_attention(" in text
    assert "{'BACKEND': 'AUTO'" in text
    assert "\n    return add\n" in text  # the score_mod returns its tensor
    fxir = tmp_path / "flex.fxir"
    subprocess.run([cli, "print", str(path), "-o", str(fxir)], check=True, capture_output=True)
    back = tmp_path / "back.json"
    subprocess.run([cli, "print", str(fxir), "-o", str(back)], check=True, capture_output=True)
    again = subprocess.run([cli, "print", str(back)], capture_output=True, text=True, check=True).stdout
    assert again == text

    out = tmp_path / "out"
    subprocess.run([cli, "partition", str(path), "-o", str(out)], capture_output=True, text=True, check=True)
    verified = subprocess.run([cli, "verify", str(path), str(out)], capture_output=True, text=True)
    assert verified.returncode == 2, verified.stdout + verified.stderr
    assert "'higher_order.flex_attention' cannot be run here" in verified.stderr


class BufferBias(torch.nn.Module):
    """score_mod reads a registered buffer (an ALiBi-style bias, no gradient)."""

    def __init__(self, heads=2):
        super().__init__()
        self.register_buffer("alibi", torch.randn(heads, SEQ, SEQ))

    def forward(self, q, k, v):
        alibi = self.alibi
        return fa.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + alibi[h, qi, kv]).sum()


def test_peak_model_matches_the_measurement_with_a_captured_buffer(tmp_path):
    """flex_attention_backward returns None, not a tensor, for a captured tensor that
    does not require grad (its fake value shows one): the peak model charges nothing
    for it and equals the measured peak (it overstated it by the buffer's bytes)."""
    from fxremat.testing.memory import measure_peak

    q, k, v = [torch.randn(2, 2, SEQ, 16, requires_grad=True) for _ in range(3)]
    joints, backend, _ = capturing_backend()
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.compile(BufferBias(), backend=backend)(q, k, v).backward()
    torch._dynamo.reset()
    (joint, kw), = joints
    path = tmp_path / "buffer_bias.json"
    fxremat.save(joint, path, num_fwd_outputs=kw["num_fwd_outputs"])
    loaded = fxremat.load(path)
    nfo = loaded.meta["fxremat"]["num_fwd_outputs"]
    needs_grad = [o is not None for o in loaded.graph.output_node().args[0][nfo:]]
    primals = [p.requires_grad_() if g else p for p, g in zip(random_primals(loaded), needs_grad)]
    tangents = random_tangents(loaded)
    for options in (None, {"activation_memory_budget": 0.0}):
        part = fxremat.partition(loaded, options=options)
        assert part.signature["peak"]["bytes"] == measure_peak(part, primals, tangents).peak_bytes, options
