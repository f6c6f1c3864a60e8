"""``xla::name_tensor`` without torch_xla.

``xla::name_tensor(Tensor t, str name) -> Tensor`` tags a tensor with a name: it returns a
copy of ``t`` (``clone``) and passes the gradient through unchanged. Graphs traced with
it (tests, or on a TPU machine where the op was defined) name ``xla.name_tensor.default``;
:func:`register` makes that op exist on a machine without torch_xla so such graphs load
and run. If the op is already registered (torch_xla or user code defined it), nothing is
done and the existing definition is used.
"""

from __future__ import annotations

import threading

import torch

QUALNAME = "xla::name_tensor"
_lock = threading.Lock()
_custom_op = None  # the torch.library.custom_op object, when we registered it


def is_registered() -> bool:
    """Whether ``torch.ops.xla.name_tensor.default`` resolves."""
    try:
        torch.ops.xla.name_tensor.default  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def register():
    """Register ``xla::name_tensor`` unless it exists; return its OpOverload."""
    global _custom_op
    with _lock:
        if not is_registered():

            @torch.library.custom_op(QUALNAME, mutates_args=())
            def name_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
                return t.clone()

            @name_tensor.register_fake
            def _(t: torch.Tensor, name: str) -> torch.Tensor:
                return torch.empty_like(t)

            def _backward(ctx, grad):
                return grad, None

            name_tensor.register_autograd(_backward)
            _custom_op = name_tensor
    return torch.ops.xla.name_tensor.default


def name_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """Call ``xla::name_tensor`` (registering it first when needed)."""
    return register()(t, name)
