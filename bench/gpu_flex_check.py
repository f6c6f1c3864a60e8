"""flex_attention and its backward higher-order op through fxremat on a GPU (issue 15).

Not part of ``make test``: FlexAttention has no backward on CPU in torch 2.13 (its
``_validate_device`` refuses it), and Inductor lowers flex_attention to Triton templates
only on a GPU. tests/python/test_flex_attention.py covers the partition on CPU through
``aot_eager`` (the HOPs' dense reference implementation); this script is the same
program under the default Inductor compiler on CUDA. Run on a lent GPU machine:

    eval "$(bash bench/gpu_setup.sh)"
    python3 bench/gpu_flex_check.py --out $OUT --commit <sha>

A small transformer (two blocks; flex_attention with a causal block mask and a
learnable per-head bias in its score_mod, a captured parameter whose gradient flows
through flex_attention_backward's score-mod joint graph) trains one step per
configuration. Each configuration's loss and every gradient are compared with eager
(fp32; the flex kernels sum in another order, so the tolerance is 1e-3 of each
gradient's largest entry), and its saved set with PyTorch's: PyTorch's min cut under
Inductor is recorded by wrapping the partition function Inductor calls.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torch._dynamo
import torch._inductor.config
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402


class FlexBlock(torch.nn.Module):
    def __init__(self, dim: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)
        self.norm1 = torch.nn.LayerNorm(dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        # A learnable bias per head and key position: a captured tensor of score_mod.
        self.bias = torch.nn.Parameter(torch.randn(heads, seq) * 0.1)

    def forward(self, x, block_mask):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.bias

        def score_mod(score, bi, h, qi, kv):
            return score + bias[h, kv]

        o = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class FlexModel(torch.nn.Module):
    def __init__(self, dim=256, heads=4, seq=256, layers=2, vocab=512):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(FlexBlock(dim, heads, seq) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, ids, block_mask):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, block_mask)
        logits = self.head(x)
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def causal(b, h, q, kv):
    return q >= kv


CONFIGS = {
    # name -> (backend, options)
    "pytorch_inductor": ("inductor", None),
    "pytorch_aot_eager": ("aot_eager", None),
    "fxremat": ("fxremat", {}),
    "fxremat_aot_eager": ("fxremat", {"compiler": "aot_eager"}),
    "fxremat_budget_0.0": ("fxremat", {"activation_memory_budget": 0.0}),
    "fxremat_budget_0.5": ("fxremat", {"activation_memory_budget": 0.5}),
    "fxremat_dots_saveable": ("fxremat", {"policy": "dots_saveable"}),
    "fxremat_dynamic": ("fxremat", {}),
}

_PYTORCH_SAVED: list = []


def _record_pytorch_partitions():
    """Wraps the min cut Inductor calls so that its saved set can be compared."""
    import torch._inductor.compile_fx as cfx

    orig = getattr(cfx, "min_cut_rematerialization_partition", None)
    if orig is None:  # another torch: PyTorch's saved set is then not compared
        return

    @functools.wraps(orig)
    def wrapped(joint, inputs, *args, **kwargs):
        fw, bw = orig(joint, inputs, *args, **kwargs)
        nfo = kwargs.get("num_fwd_outputs")
        outs = list(fw.graph.find_nodes(op="output"))[0].args[0]
        saved = outs[nfo:] if nfo is not None else []
        _PYTORCH_SAVED.append(sorted(str(getattr(n, "name", n)) for n in saved))
        return fw, bw

    cfx.min_cut_rematerialization_partition = wrapped


def run_config(name, args, device, ids, block_mask, ref_grads, ref_loss):
    import fxremat

    backend, options = CONFIGS[name]
    torch.manual_seed(0)
    model = FlexModel(seq=args.seq).to(device)
    kwargs = {"backend": backend, "dynamic": name == "fxremat_dynamic"}
    if options is not None:
        kwargs["options"] = options
    fn = torch.compile(model, **kwargs)
    n0 = len(fxremat.partition_records())
    p0 = len(_PYTORCH_SAVED)
    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    loss = fn(ids, block_mask)
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    info = {"name": name, "compile_and_step_s": round(time.perf_counter() - t0, 1), "loss": float(loss),
            "loss_diff": abs(float(loss) - ref_loss)}
    if device.type == "cuda":
        info["peak_mib"] = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    worst = 0.0
    for n, p in model.named_parameters():
        g, r = p.grad, ref_grads[n]
        if g is None:
            raise AssertionError(f"{name}: no gradient for {n}")
        worst = max(worst, float((g - r).abs().max() / (r.abs().max() + 1e-12)))
    info["max_rel_grad_diff"] = worst
    info["grads_match"] = worst < 1e-3 and info["loss_diff"] < 1e-4
    recs = fxremat.partition_records()[n0:]
    if recs:
        info["fxremat_saved"] = [r.num_saved for r in recs]
        info["fxremat_saved_bytes"] = [r.saved_bytes for r in recs]
        info["fallback"] = [r.fallback for r in recs if r.fallback]
        saved_ops = []
        for r in recs:
            for s in r.signature.get("saved", []):
                saved_ops.append(s.get("name"))
        info["fxremat_saved_names"] = saved_ops
    if len(_PYTORCH_SAVED) > p0:
        info["pytorch_saved"] = [len(s) for s in _PYTORCH_SAVED[p0:]]
        info["pytorch_saved_names"] = [n for s in _PYTORCH_SAVED[p0:] for n in s]
    return info


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--deadline-s", type=float, default=240.0)
    args = ap.parse_args()
    t_start = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":  # the script's own check on a machine without a GPU (aot_eager only)
        import torch.nn.attention.flex_attention as fa

        fa._validate_device = lambda *a: None
    import fxremat.backend

    fxremat.backend.register()
    _record_pytorch_partitions()
    torch._dynamo.config.recompile_limit = 64
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    args.out.mkdir(parents=True, exist_ok=True)

    ids = torch.randint(0, 512, (2, args.seq), generator=torch.Generator().manual_seed(0)).to(device)
    block_mask = create_block_mask(causal, B=None, H=None, Q_LEN=args.seq, KV_LEN=args.seq, device=device)
    torch.manual_seed(0)
    ref = FlexModel(seq=args.seq).to(device)
    ref_loss_t = ref(ids, block_mask)  # eager: the HOPs' reference implementation
    ref_loss_t.backward()
    ref_loss = float(ref_loss_t)
    ref_grads = {n: p.grad.detach().clone() for n, p in ref.named_parameters()}
    env = {"commit": args.commit, "torch": torch.__version__,
           "device": torch.cuda.get_device_name() if device.type == "cuda" else "CPU", "eager_loss": ref_loss}
    print(json.dumps(env), flush=True)
    results = {}
    for name in args.configs.split(","):
        if time.perf_counter() - t_start > args.deadline_s:
            print(f"[skip] {name}: past the deadline", flush=True)
            continue
        backend, options = CONFIGS[name]
        if device.type == "cpu" and backend != "aot_eager" and (options or {}).get("compiler") != "aot_eager":
            continue  # Inductor lowers flex_attention's backward on a GPU only
        torch._dynamo.reset()
        try:
            info = run_config(name, args, device, ids, block_mask, ref_grads, ref_loss)
        except Exception as e:  # noqa: BLE001 -- a failed configuration is a result
            traceback.print_exc()
            info = {"name": name, "error": f"{type(e).__name__}: {e}"[:2000]}
        results[name] = info
        print(json.dumps(info), flush=True)
        (args.out / "gpu_flex.json").write_text(json.dumps({"env": env, "results": results}, indent=1))
    lines = ["# flex_attention on a GPU (issue 15)", "",
             f"Generated by `python3 bench/gpu_flex_check.py --out DIR --commit {args.commit}` on {env['device']}, "
             f"torch {env['torch']}. Eager loss {ref_loss:.6f}.", "",
             "| configuration | loss - eager | largest gradient difference (of max) | equal to eager | "
             "saved (fxremat) | saved (PyTorch min cut) | peak (MiB) | compile + step (s) |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for name, i in results.items():
        if "error" in i:
            lines.append(f"| {name} | failed: {i['error'][:200]} | | | | | | |")
            continue
        lines.append(f"| {name} | {i['loss_diff']:.1e} | {i['max_rel_grad_diff']:.1e} | {i['grads_match']} | "
                     f"{i.get('fxremat_saved', '–')} | {i.get('pytorch_saved', '–')} | {i.get('peak_mib', '–')} | "
                     f"{i['compile_and_step_s']} |")
    doc = "\n".join(lines) + "\n"
    (args.out / "gpu_flex.md").write_text(doc)
    print(doc)
    print(f"total {time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
