"""torch.compile training with backend="fxremat": losses, saved bytes, partition time.

    .venv/bin/python tools/demo_compile.py                       # aot_eager, a few seconds
    .venv/bin/python tools/demo_compile.py --compiler inductor   # Inductor (about a minute on 2 cores, cold)
    .venv/bin/python tools/demo_compile.py --dump build/demo/compile

Trains the 2-layer GPT-2 of fxremat.testing.programs ("gpt2_2l": transformers config,
random weights, CPU) for a few SGD steps with torch.compile(backend="fxremat") next to
an eager copy with the same weights, and prints each step's losses, then what fxremat's
partition did: saved values and bytes, and where the partition time went.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compiler", default="aot_eager", choices=["inductor", "aot_eager", "eager"])
    ap.add_argument("--partitioner", default="mincut", choices=["mincut", "default"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dump", metavar="DIR", help="write each partition's graphs, signature and residual report here")
    args = ap.parse_args(argv)

    import torch

    import fxremat
    from fxremat.testing import programs

    program = programs.build("gpt2_2l")
    eager = program.fn
    model = copy.deepcopy(eager)
    options = {"compiler": args.compiler, "partitioner": args.partitioner}
    if args.dump:
        options["dump_dir"] = args.dump
    print(f"torch.compile(gpt2_2l, backend=\"fxremat\", options={options})")
    compiled = torch.compile(model, backend="fxremat", options=options)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, programs.VOCAB, (programs.BATCH, programs.SEQ), generator=gen)
    # every compile partitions (an AOTAutograd cache hit would skip the partition)
    with torch._functorch.config.patch(enable_autograd_cache=False):
        for step in range(args.steps):
            t0 = time.perf_counter()
            loss = compiled(ids)
            loss.backward()
            dt = time.perf_counter() - t0
            ref = eager(ids)
            ref.backward()
            worst = max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), eager.parameters()))
            note = " (includes compiling)" if step == 0 else ""
            print(f"step {step}: loss {loss.item():.6f}  eager {ref.item():.6f}  |loss diff| "
                  f"{abs(loss.item() - ref.item()):.1e}  max |grad diff| {worst:.1e}  {dt:.2f} s{note}")
            for opt in (opt_c, opt_e):
                opt.step()
                opt.zero_grad()

    for rec in fxremat.partition_records():
        sec = rec.seconds
        print(f"\npartition ({rec.partitioner}): joint graph {rec.joint_nodes} nodes -> forward {rec.forward_nodes}, "
              f"backward {rec.backward_nodes}")
        primals = {p["name"] for p in rec.signature["primals"]}
        acts = [s for s in rec.signature["saved"] if s["name"] not in primals]
        act_bytes = sum(s["bytes"] for s in acts)
        print(f"  saved for backward: {rec.num_saved} values, {rec.saved_bytes} bytes ({rec.saved_bytes / 2**20:.2f} MiB): "
              f"{len(acts)} activations {act_bytes} bytes, {rec.num_saved - len(acts)} inputs/parameters "
              f"{rec.saved_bytes - act_bytes} bytes")
        print("  partition time: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sec.items()))
        biggest = sorted(acts, key=lambda s: -s["bytes"])[:4]
        print("  largest saved activations: " + ", ".join(f"{s['name']} ({s['bytes']} B)" for s in biggest))
        if rec.dump_dir:
            print(f"  dumped to {rec.dump_dir} (residuals.txt: one line per saved value)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
