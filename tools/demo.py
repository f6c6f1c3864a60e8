"""`make demo`, part 5: the Python path end to end on the seed 000 SimpleMLP.

Export the joint graph (fake tensors, nothing computed), partition it in C++,
load the forward and backward graphs back into PyTorch, run them on real inputs
and compare with eager autograd.
"""

from __future__ import annotations

import time

import torch

import fxremat
from fxremat._paths import resolve_path
from fxremat.testing import programs


def main() -> None:
    program = programs.build("simple_mlp")
    t0 = time.perf_counter()
    joint = fxremat.export_joint(program.fn, *program.args, name="simple_mlp")
    t1 = time.perf_counter()
    part = fxremat.partition(joint)
    t2 = time.perf_counter()
    print(f"exported {joint!r} in {t1 - t0:.2f} s; partitioned in {1e3 * (t2 - t1):.1f} ms")

    sig = part.signature
    print(f"saved for backward: {len(sig['saved'])} values, {sig['saved_bytes']} bytes")
    print(f"  {'value':<12} {'shape':<12} {'bytes':>7}  fw out  bw in")
    for s in sig["saved"]:
        print(f"  {s['name']:<12} {str(s['shape']):<12} {s['bytes']:>7}  {s['forward_output_index']:>6}  {s['backward_input_index']:>5}")
    print("primals:", ", ".join(f"{p['name']}={p['path']}" for p in sig["primals"]))

    # Real inputs in the recorded pytree order, and one tangent per forward output.
    primals = [resolve_path(p, program.roots()).detach() for p in joint.input_paths]
    torch.manual_seed(0)
    tangents = [torch.randn_like(primals[0][:, :10])]
    with torch.no_grad():
        outs, grads = part.run(primals, tangents)

    # Eager PyTorch on the same module and inputs.
    leaves = [resolve_path(p, program.roots()) for p in joint.input_paths]
    eager_out = program()
    eager_grads = torch.autograd.grad(eager_out, [t for t in leaves if t.requires_grad], grad_outputs=tangents)
    ours = [g for g in grads if g is not None]
    pairs = list(zip([outs[0], *ours], [eager_out, *eager_grads]))
    worst = max((a - b).abs().max().item() for a, b in pairs)
    # Equal up to float32 rounding, judged against each tensor's scale: the
    # partitioned graphs run the same ops, but BLAS may block a matmul or a
    # reduction differently from one call to the next, and a gradient summed
    # over the batch in another order moves by rounding relative to its largest
    # entries, not to each element (a fixed 1e-4 bound once failed a correct
    # run at 4e-4 on gradients up to ~15; a wrong partition is off by O(scale)).
    ok = all((a - b).abs().max().item() <= 1e-4 * max(1.0, b.abs().max().item()) for a, b in pairs)
    scale = max(b.abs().max().item() for _, b in pairs)
    print(f"forward+backward vs eager autograd: {len(ours) + 1} tensors, max abs error {worst:.2e} "
          f"(largest value {scale:.2e}): {'MATCH' if ok else 'MISMATCH'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
