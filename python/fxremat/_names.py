"""``fxremat.checkpoint_name``: give a forward value a name that policies can refer to.

    y = fxremat.checkpoint_name(torch.sin(x), "a")

The op ``fxremat::checkpoint_name(Tensor x, str name) -> Tensor`` is an identity (it
returns ``x.clone()``: a custom op may not return an alias of its input) whose gradient
is the incoming gradient. Graphs traced through it (eagerly through AOTAutograd, under
``torch.compile(fullgraph=True)``, by :func:`fxremat.export_joint` /
:func:`fxremat.extract`) contain ``fxremat.checkpoint_name.default``; the partitioner
folds it away (the clone disappears, the name stays on the value it annotated: Note
[Partition pipeline] in ``include/fxremat/pipeline.h``).

JAX's ``jax.ad_checkpoint.checkpoint_name`` is the model; the names are what
``save_only_these_names`` & co. (:mod:`fxremat.policies`) select.
"""

from __future__ import annotations

import threading

import torch

QUALNAME = "fxremat::checkpoint_name"
_lock = threading.Lock()
_custom_op = None


def _resolves() -> bool:
    try:
        torch.ops.fxremat.checkpoint_name.default  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def register():
    """Defines ``fxremat::checkpoint_name`` unless it exists; returns its OpOverload."""
    global _custom_op
    with _lock:
        if _custom_op is None and not _resolves():

            @torch.library.custom_op(QUALNAME, mutates_args=())
            def checkpoint_name_op(x: torch.Tensor, name: str) -> torch.Tensor:
                return x.clone()

            @checkpoint_name_op.register_fake
            def _(x: torch.Tensor, name: str) -> torch.Tensor:
                return torch.empty_like(x)

            def _setup(ctx, inputs, output):
                pass

            def _backward(ctx, grad):
                return grad, None

            checkpoint_name_op.register_autograd(_backward, setup_context=_setup)
            _custom_op = checkpoint_name_op
    return torch.ops.fxremat.checkpoint_name.default


_OP = register()


def checkpoint_name(x: torch.Tensor, name: str) -> torch.Tensor:
    """Names ``x`` for checkpoint policies; returns a tensor equal to ``x``.

    ``name`` must be a string (it becomes a constant of the traced graph). The returned
    tensor is a copy of ``x`` in eager mode; in a partitioned graph the copy is folded
    away and ``x`` itself carries the name.
    """
    if not isinstance(name, str):
        raise TypeError(f"fxremat.checkpoint_name: name must be a str, got {type(name).__name__}")
    return _OP(x, name)
