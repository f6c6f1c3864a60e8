"""torch_xla's naming, placement and barrier ops without torch_xla.

Graphs that fxremat partitions or emits may name these ops:

``xla::name_tensor(Tensor t, str name) -> Tensor``
    tags a tensor with a name (seed 001): returns a copy (``clone``), the gradient
    passes through unchanged;
``xla::offload_name(Tensor t, str name) -> Tensor``
    as ``name_tensor``, and asks for the value to be offloaded to host memory when it
    is saved;
``xla::place_to_host(Tensor t) -> Tensor`` / ``xla::place_to_device(Tensor t) -> Tensor``
    what the xla offload target emits (torch_xla's ``annotate_device_placement`` with
    ``"pinned_host"`` / ``"device"``); here plain copies;
``xla::optimization_barrier(Tensor[] tensors) -> Tensor[]``
    what ``barrier=True`` inserts before recomputed regions (``xm.optimization_barrier_``);
    here copies of its inputs.

:func:`register` (``name_tensor`` only, as before) and :func:`register_all` make these
ops exist on a machine without torch_xla, so that such graphs load and run. An op that
is already registered (torch_xla or user code defined it) is left alone and the existing
definition is used.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

QUALNAME = "xla::name_tensor"
OPS = ("name_tensor", "offload_name", "place_to_host", "place_to_device", "optimization_barrier")
_lock = threading.Lock()
_custom_ops: dict[str, object] = {}  # the torch.library.custom_op objects we registered
_overloads: dict[str, object] = {}  # name -> OpOverload, once resolved (a plain lookup, traceable by Dynamo)


def _resolves(name: str) -> bool:
    try:
        getattr(torch.ops.xla, name).default  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def is_registered(name: str = "name_tensor") -> bool:
    """Whether ``torch.ops.xla.<name>.default`` resolves."""
    return _resolves(name)


def _passthrough(ctx, grad):
    return grad, None


def _define_named(name: str) -> object:
    @torch.library.custom_op(f"xla::{name}", mutates_args=())
    def op(t: torch.Tensor, name: str) -> torch.Tensor:
        return t.clone()

    @op.register_fake
    def _(t: torch.Tensor, name: str) -> torch.Tensor:
        return torch.empty_like(t)

    op.register_autograd(_passthrough)
    return op


def _define_placement(name: str) -> object:
    @torch.library.custom_op(f"xla::{name}", mutates_args=())
    def op(t: torch.Tensor) -> torch.Tensor:
        return t.clone()

    @op.register_fake
    def _(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(t)

    op.register_autograd(lambda ctx, grad: grad)
    return op


def _define_barrier(name: str) -> object:
    @torch.library.custom_op(f"xla::{name}", mutates_args=())
    def op(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t.clone() for t in tensors]

    @op.register_fake
    def _(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [torch.empty_like(t) for t in tensors]

    return op


_DEFINERS: dict[str, Callable[[str], object]] = {
    "name_tensor": _define_named,
    "offload_name": _define_named,
    "place_to_host": _define_placement,
    "place_to_device": _define_placement,
    "optimization_barrier": _define_barrier,
}


def register_op(name: str):
    """Registers ``xla::<name>`` (one of :data:`OPS`) unless it exists; returns its
    OpOverload."""
    if name not in _DEFINERS:
        raise ValueError(f"fxremat.xla_compat: unknown op xla::{name} (known: {', '.join(OPS)})")
    with _lock:
        if name not in _custom_ops and not _resolves(name):
            _custom_ops[name] = _DEFINERS[name](name)
        _overloads[name] = getattr(torch.ops.xla, name).default
    return _overloads[name]


def _op(name: str):
    op = _overloads.get(name)
    return op if op is not None else register_op(name)


def register():
    """Register ``xla::name_tensor`` unless it exists; return its OpOverload."""
    return register_op("name_tensor")


def register_all() -> dict[str, object]:
    """Registers every op of :data:`OPS` that does not exist; returns ``{name: OpOverload}``."""
    return {name: register_op(name) for name in OPS}


def name_tensor(t: torch.Tensor, name: str) -> torch.Tensor:
    """Call ``xla::name_tensor`` (registering it first when needed; under
    ``torch.compile``, register it before compiling: :func:`register_all`)."""
    return _op("name_tensor")(t, name)


def offload_name(t: torch.Tensor, name: str) -> torch.Tensor:
    """Call ``xla::offload_name`` (registering it first when needed; under
    ``torch.compile``, register it before compiling: :func:`register_all`)."""
    return _op("offload_name")(t, name)
