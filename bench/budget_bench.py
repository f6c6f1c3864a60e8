#!/usr/bin/env python3
"""Peak-budget benchmark: fxremat's budget solver against PyTorch's
activation_memory_budget, side by side on the same joint graphs, in one run.

    .venv/bin/python bench/budget_bench.py [--quick] [--out docs/benchmarks_budget.md]

Corpus: transformers Llama (8 layers) and GPT-2 (12 layers) at CPU-sized dimensions and
a 4-layer Llama (bench/budget_models.py captures them; each also with the model's own
per-layer checkpointing), the seed programs' real models (testdata/gpt2_2l, llama_2l,
simple_mlp) and the first 40 random programs (testdata/random). Budgets 1.0, 0.9, ..., 0.0.

For every graph and budget, both partitioners' forward and backward GraphModules run on
the same seeded inputs under the storage counter (fxremat.testing.memory): the
**measured** peak above the inputs. fxremat's peak model (signature "peak") is reported
next to it. Recompute cost is priced for both by the same rule (Note [Peak budget]:
flops of matmul/conv/attention + 64 flops per byte moved, fxremat._C.recompute_cost on
each backward graph). Every fxremat point is verified numerically (fw+bw outputs and
gradients equal the joint graph's on the same inputs).

PyTorch's points use ``torch._functorch.config.activation_memory_budget`` (its knapsack
over saved bytes, default solver); the per-layer checkpointing point is PyTorch's min cut
of the checkpointed model's joint graph (what torch.compile runs for it).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import torch  # noqa: E402

import fxremat  # noqa: E402
from bench_common import git_state  # noqa: E402
from fxremat._format import to_json  # noqa: E402
from fxremat.testing import memory  # noqa: E402
from fxremat.testing.memory import example_inputs, measure_peak  # noqa: E402

FRACTIONS = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]


def static_indices(gm) -> list[int]:
    paths = gm.meta["fxremat"]["input_paths"]
    return [i for i, p in enumerate(paths) if p and (p.startswith("params[") or p.startswith("buffers["))]


def pytorch_partition(gm, fraction: float):
    """PyTorch's min cut at a budget fraction (fxremat.testing.memory.pytorch_partition),
    with fxremat's default static inputs; returns (Partition, seconds)."""
    t0 = time.perf_counter()
    part = memory.pytorch_partition(gm, fraction, static_indices(gm))
    return part, time.perf_counter() - t0


def cost_of(part) -> float:
    """The partition's recompute cost: the ops its backward runs again (in the forward
    too), priced as the solver prices them."""
    from fxremat._partition import _extension

    return float(_extension().recompute_cost(to_json(part.forward, kind="forward", constants="reference"),
                                             to_json(part.backward, kind="backward", constants="reference")))


def verify(part, joint, primals, tangents) -> bool:
    """fw+bw reproduce the joint graph's outputs and gradients on these inputs."""
    from fxremat.testing.verify import tolerance

    with torch.no_grad():  # the same random draws in both runs (a replayed random op redraws the same)
        torch.manual_seed(1234)
        want = list(joint(*[p.clone() if isinstance(p, torch.Tensor) else p for p in primals], *tangents))
        torch.manual_seed(1234)
        outs, grads = part.run([p.clone() if isinstance(p, torch.Tensor) else p for p in primals], tangents)
    got = list(outs) + list(grads)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            rtol, atol = tolerance(a.dtype)
            if not torch.allclose(a, b, rtol=rtol * 10, atol=atol * 10, equal_nan=True):
                return False
        elif (a is None) != (b is None):
            return False
    return True


def corpus(quick: bool) -> list[tuple[str, Path, Path | None]]:
    import budget_models

    out = []
    names = ["llama_4l_small"] if quick else ["llama_8l", "gpt2_12l", "llama_4l_small"]
    for name in names:
        out.append((name, budget_models.capture(name), budget_models.capture(name, ckpt=True)))
    for seed in ["gpt2_2l", "llama_2l", "simple_mlp"]:
        out.append((seed, REPO / "testdata" / f"{seed}.json.gz", None))
    randoms = sorted((REPO / "testdata" / "random").glob("random_*.json.gz"))[: 8 if quick else 40]
    out += [(p.name.removesuffix(".json.gz"), p, None) for p in randoms]
    return out


def mib(b: float) -> str:
    return f"{b / 2**20:.2f}" if b >= 2**20 else f"{b / 2**20:.5f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one small model and 8 random programs")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks_budget.md"))
    args = ap.parse_args()
    state = git_state()  # before the run: the code that is measured (edits during a run do not count)
    torch.manual_seed(0)
    rows = []       # per (graph, fraction)
    summary = []    # per graph
    for name, path, ckpt_path in corpus(args.quick):
        joint = fxremat.load(path)
        primals, tangents = example_inputs(joint)
        nodes = len(joint.graph.nodes)
        ckpt_peak = None
        if ckpt_path is not None:
            cj = fxremat.load(ckpt_path)
            cp, ct = example_inputs(cj)
            part, _ = pytorch_partition(cj, 1.0)
            ckpt_peak = measure_peak(part, cp, ct).peak_bytes
        t0 = time.perf_counter()
        front = fxremat.pareto(joint, points=20)
        front_s = time.perf_counter() - t0
        pt_half_s = None
        for f in FRACTIONS:
            t0 = time.perf_counter()
            ours = fxremat.partition(joint, options={"activation_memory_budget": f})
            ours_s = time.perf_counter() - t0
            m = measure_peak(ours, primals, tangents).peak_bytes
            ok = verify(ours, joint, primals, tangents)
            ours_cost = cost_of(ours)
            theirs, pt_s = pytorch_partition(joint, f)
            if f == 0.5:
                pt_half_s = pt_s
            tm = measure_peak(theirs, primals, tangents).peak_bytes
            their_cost = cost_of(theirs)
            # fxremat asked for PyTorch's measured peak as a byte budget: its cost there.
            at_cost = None
            if f < 1.0:
                try:
                    at = fxremat.partition(joint, options={"memory_budget_bytes": tm})
                    at_cost = cost_of(at)
                except ValueError:
                    at_cost = math.inf  # PyTorch's peak is below the smallest fxremat reaches
            rows.append(dict(graph=name, nodes=nodes, f=f, model=ours.signature["peak"]["bytes"], ours=m,
                             budget=ours.signature["peak"].get("budget_bytes"), ours_cost=ours_cost, ok=ok,
                             theirs=tm, their_cost=their_cost, at_cost=at_cost, ours_s=ours_s, pt_s=pt_s))
            print(f"{name:16} f={f:.1f} ours {mib(m):>8} MiB (model {mib(rows[-1]['model'])}, budget "
                  f"{mib(rows[-1]['budget'] or m)}) cost {ours_cost:.3g} {'ok' if ok else 'WRONG'} | pytorch "
                  f"{mib(tm):>8} MiB cost {their_cost:.3g} | {ours_s*1000:.0f} / {pt_s*1000:.0f} ms", flush=True)
        summary.append(dict(graph=name, nodes=nodes, ckpt=ckpt_peak, front_s=front_s, pt_half_s=pt_half_s,
                            smallest=min(p["peak_bytes"] for p in front)))
    write_doc(Path(args.out), rows, summary, args, state)
    return 0


def write_doc(out: Path, rows: list[dict], summary: list[dict], args, state: tuple[str, bool]) -> None:
    commit, dirty = state
    lines = ["# Peak-budget benchmark: fxremat against PyTorch's activation_memory_budget", "",
             f"Generated by `{' '.join([sys.executable.replace(str(REPO) + '/', ''), 'bench/budget_bench.py', *sys.argv[1:]])}` "
             f"on commit `{commit}`{' (with uncommitted changes)' if dirty else ' (clean)'}, CPU, torch {torch.__version__}; "
             "every figure below is measured by that script in that run (bench/budget_bench.py says how).", "",
             "Peaks are **measured**: bytes of live tensor storages above the inputs while the partition's "
             "forward and backward GraphModules run (fxremat.testing.memory), MiB. `model` is fxremat's "
             "simulated peak of the same partition (Note [Peak model]). Recompute cost: flops-equivalent, "
             "the same rule for both (Note [Peak budget]).", ""]
    # Targets
    pts = [r for r in rows]
    over = [r for r in pts if r["budget"] is not None and r["ours"] > r["budget"]]
    model_off = [r for r in pts if r["ours"] and abs(r["model"] - r["ours"]) > 0.05 * r["ours"]]
    wrong = [r for r in pts if not r["ok"]]
    frac_pts = [r for r in pts if r["f"] < 1.0]
    peak_le = [r for r in frac_pts if r["ours"] <= r["theirs"]]
    cost_le = [r for r in frac_pts if r["at_cost"] is not None and r["at_cost"] <= r["their_cost"] * 1.000001]
    lines += ["## Targets", "",
              "| target | result |", "|---|---|",
              f"| measured peak ≤ budget at every point | {len(pts) - len(over)} / {len(pts)} points |",
              f"| peak model within 5% of the measurement | {len(pts) - len(model_off)} / {len(pts)} points |",
              f"| every point verifies (fw+bw ≡ joint) | {len(pts) - len(wrong)} / {len(pts)} points |",
              f"| our measured peak ≤ PyTorch's at the same fraction (fractions < 1) | {len(peak_le)} / {len(frac_pts)} "
              f"({100 * len(peak_le) / max(1, len(frac_pts)):.1f}%) |",
              f"| fxremat given PyTorch's measured peak as its byte budget: recompute cost ≤ PyTorch's | {len(cost_le)} / {len(frac_pts)} "
              f"({100 * len(cost_le) / max(1, len(frac_pts)):.1f}%) |", ""]
    lines += ["## Budget 0.0 against per-layer checkpointing, and solve times", "",
              "| graph | nodes | fxremat budget 0.0 (MiB) | per-layer checkpointing, PyTorch min cut (MiB) | PyTorch budget 0.0 (MiB) | min cut (MiB) | fxremat 20-point front (s) | PyTorch budget 0.5 solve (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        r0 = next(r for r in rows if r["graph"] == s["graph"] and r["f"] == 0.0)
        r1 = next(r for r in rows if r["graph"] == s["graph"] and r["f"] == 1.0)
        lines.append(f"| {s['graph']} | {s['nodes']} | {mib(r0['ours'])} | {mib(s['ckpt']) if s['ckpt'] else '–'} | "
                     f"{mib(r0['theirs'])} | {mib(r1['ours'])} | {s['front_s']:.2f} | {s['pt_half_s']:.2f} |")
    lines += ["", "## Every point", "",
              "| graph | budget | fxremat peak (MiB) | model (MiB) | budget (MiB) | fxremat cost | verifies | PyTorch peak (MiB) | PyTorch cost | fxremat cost at PyTorch's peak | fxremat solve (ms) | PyTorch solve (ms) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['graph']} | {r['f']:.1f} | {mib(r['ours'])} | {mib(r['model'])} | "
                     f"{mib(r['budget']) if r['budget'] is not None else '–'} | {r['ours_cost']:.3g} | "
                     f"{'yes' if r['ok'] else 'NO'} | {mib(r['theirs'])} | {r['their_cost']:.3g} | "
                     f"{'–' if r['at_cost'] is None else format(r['at_cost'], '.3g')} | "
                     f"{r['ours_s']*1000:.0f} | {r['pt_s']*1000:.0f} |")
    bad = [r for r in frac_pts if r["ours"] > r["theirs"] or r not in cost_le]
    lines += ["", "## Points where fxremat is not ahead (a higher peak at the same fraction, or a higher cost at PyTorch's peak)", ""]
    if not bad:
        lines.append("None.")
    for r in bad:
        lines.append(f"- {r['graph']} at {r['f']:.1f}: peak {mib(r['ours'])} vs {mib(r['theirs'])} MiB; "
                     f"at PyTorch's peak our cost {r['at_cost']:.3g} vs {r['their_cost']:.3g}")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    sys.exit(main())
