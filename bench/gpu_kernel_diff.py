"""Which kernels a partition adds to a training step: the per-kernel device times that
``bench/gpu_budget_bench.py --profile`` stores in its JSON, one configuration against
another (PyTorch's min cut by default), as a markdown table of the largest increases.

    python3 bench/gpu_kernel_diff.py docs/gpu_runs/run10_544107d.json fxremat_budget_0.0
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("json", type=Path)
    ap.add_argument("config")
    ap.add_argument("--base", default="pytorch_mincut")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    results = json.loads(args.json.read_text())["results"]
    base = results[args.base]["kernels"]["by_kernel"]
    other = results[args.config]["kernels"]["by_kernel"]
    zero = {"ms": 0.0, "calls": 0}
    rows = sorted(((other.get(n, zero)["ms"] - base.get(n, zero)["ms"], n) for n in set(base) | set(other)),
                  reverse=True)
    print(f"| kernel (first 120 characters) | {args.base}: ms (calls) per step | {args.config}: ms (calls) "
          "| added ms |")
    print("|---|---:|---:|---:|")
    for added, n in rows[:args.top]:
        b, o = base.get(n, zero), other.get(n, zero)
        print(f"| `{n[:120]}` | {b['ms']:.3f} ({b['calls']}) | {o['ms']:.3f} ({o['calls']}) | {added:+.3f} |")
    tb = sum(v["ms"] for v in base.values())
    to = sum(v["ms"] for v in other.values())
    print(f"\nThe {len(base)} and {len(other)} costliest kernels: {tb:.2f} and {to:.2f} ms per step "
          f"({to - tb:+.2f} ms).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
