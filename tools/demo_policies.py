"""`make demo`, part 7: named values and checkpoint policies from Python.

Seed 003's program g(W, x) = sin(W @ x), three layers, names placed with
fxremat.checkpoint_name, and the residuals each JAX policy leaves (JAX's
print_saved_residuals, reproduced on fake tensors: nothing real is computed).
Then the same policy with offload, run for real: forward + backward on CPU with
the host copies, against eager autograd.
"""

from __future__ import annotations

import torch

import fxremat
from fxremat import policies as P


def g(W, x):
    return torch.sin(W @ x)


def f4(W1, W2, W3, x):
    x = fxremat.checkpoint_name(g(W1, x), "a")
    x = fxremat.checkpoint_name(g(W2, x), "b")
    x = fxremat.checkpoint_name(g(W3, x), "c")
    return x


def main() -> None:
    args = tuple(torch.ones(s, requires_grad=True) for s in ((5, 4), (6, 5), (7, 6), (4,)))
    for policy in (P.everything_saveable, P.save_only_these_names("a"),
                   P.save_and_offload_only_these_names(names_which_can_be_saved=["a"],
                                                       names_which_can_be_offloaded=["b"])):
        print(f"-- print_saved_residuals(f4, W1, W2, W3, x, policy={policy!r})")
        fxremat.print_saved_residuals(f4, *args, policy=policy)
        print()

    # The offload policy, executed: the forward copies 'b' to host memory, the
    # backward reloads it; outputs and gradients must equal eager autograd's.
    real = [torch.randn(a.shape, requires_grad=True) for a in args]
    policy = P.save_and_offload_only_these_names(names_which_can_be_saved=["a"], names_which_can_be_offloaded=["b"])
    fw, bw, sig = fxremat.extract(f4, *real, policy=policy)
    transfers = [n for n in fw.graph.nodes if n.target is torch.ops.prims.device_put.default]
    print(f"forward graph copies to host: {[str(n) for n in transfers]}")
    outs = fw(*[a.detach() for a in real])
    n_out = 1
    tangent = torch.randn_like(outs[0])
    grads = bw(*outs[n_out:], tangent)
    ref = f4(*real)
    ref.backward(tangent)
    worst = max([(outs[0] - ref).abs().max().item()] +
                [(gr - a.grad).abs().max().item() for gr, a in zip(grads, real)])
    print(f"forward+backward with offload vs eager: max abs error {worst:.1e}: {'OK' if worst < 1e-5 else 'MISMATCH'}")


if __name__ == "__main__":
    main()
