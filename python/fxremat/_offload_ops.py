"""The ops of the ``torch_async`` offload target: transfers to host and back on a side
stream, overlapped with the compute (Note [Overlapped offload] in
``passes/emit_offload.h`` says where the partitioner puts them).

    h0 = fxremat.offload(v)                     # copy v to pinned host memory, on the side stream
    h  = fxremat.wait_tensor(h0, keepalive=v)   # the compute stream waits for that copy
    ...
    r  = fxremat.reload(h, device)              # copy back into a fresh device tensor, on the side stream
    v  = fxremat.wait_tensor(r, keepalive=h)    # the compute stream waits for it

torch 2.13's ``ao::offload`` / ``ao::reload`` / ``ao::wait_tensor``
(``torch/_functorch/_activation_offloading/offload_ops.py``) are the model; torch 2.11
lacks them, so fxremat defines its own with the same contract:

* the transfer's completion event is kept under the result's ``data_ptr()`` until its
  ``wait_tensor`` takes it (one wait per transfer);
* ``keepalive`` is the transfer's source: passing it to the wait keeps the source
  referenced until the compute stream has waited for the copy, so the caching allocator
  cannot hand its memory out while the side stream still reads it. Unlike ao's, the
  wait does not free the source's storage itself (``resize_(0)``): the source dies by
  reference count right after, as any value does, which stays correct when the source is
  a view or is also returned to the caller;
* host buffers are pinned (PyTorch's caching host allocator recycles them across steps)
  and laid out as ``torch.empty_like`` lays out a copy: the source's strides when they
  are non-overlapping and dense, else contiguous; the real ops and their fake
  implementations agree by construction. (The partitioner moves only dense values on
  the side stream, Note [Overlapped offload], so the device copy comes back with the
  layout it had.)

On a CPU tensor (no accelerator), ``offload`` and ``reload`` are plain copies and
``wait_tensor`` returns its argument: the graphs then run, and are checked, on CPU.
"""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_registered = False
_side_streams: dict[torch.device, torch.Stream] = {}
# data_ptr of a transfer's result -> (completion event, device whose compute stream waits)
_pending: dict[int, tuple[torch.Event, torch.device]] = {}


def _side_stream(device: torch.device) -> torch.Stream:
    stream = _side_streams.get(device)
    if stream is None:
        stream = _side_streams[device] = torch.Stream(device=device)
    return stream


def _transfer(dst: torch.Tensor, src: torch.Tensor, device: torch.device) -> None:
    """dst.copy_(src) on the device's side stream, after the work queued so far on its
    compute stream; the completion event is kept for wait_tensor."""
    compute = torch.accelerator.current_stream(device)
    side = _side_stream(device)
    side.wait_stream(compute)
    torch.accelerator.set_stream(side)
    try:
        dst.copy_(src, non_blocking=True)
        event = torch.Event(device=device)
        side.record_event(event)
    finally:
        torch.accelerator.set_stream(compute)
    if dst.numel() > 0:
        _pending[dst.data_ptr()] = (event, device)


def _offload(t: torch.Tensor) -> torch.Tensor:
    if t.device.type == "cpu":
        return torch.empty_like(t).copy_(t)
    host = torch.empty_like(t, device="cpu", pin_memory=True)
    _transfer(host, t, t.device)
    return host


def _reload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    device = torch.device(device)
    if device.type == "cpu":
        return torch.empty_like(t, device=device).copy_(t)
    # Allocated on the compute stream, which owns it from here on.
    out = torch.empty_like(t, device=device)
    _transfer(out, t, device)
    return out


def _wait_tensor(t: torch.Tensor, keepalive: torch.Tensor | None = None) -> torch.Tensor:
    if t.numel() == 0:
        return t
    entry = _pending.pop(t.data_ptr(), None)
    if entry is None:
        if t.device.type == "cpu" and (keepalive is None or keepalive.device.type == "cpu"):
            return t  # a CPU step's copy: already done
        raise RuntimeError(f"fxremat.wait_tensor: no transfer pending for a tensor at {t.data_ptr():#x}; every "
                           "wait_tensor must follow the fxremat.offload or fxremat.reload that made its argument")
    event, device = entry
    torch.accelerator.current_stream(device).wait_event(event)
    return t


def register() -> None:
    """Defines fxremat::offload, fxremat::reload and fxremat::wait_tensor unless they exist."""
    global _registered
    with _lock:
        if _registered:
            return
        try:
            torch.ops.fxremat.wait_tensor.default  # noqa: B018
            _registered = True
            return
        except (AttributeError, RuntimeError):
            pass

        @torch.library.custom_op("fxremat::offload", mutates_args=())
        def offload(t: torch.Tensor) -> torch.Tensor:
            return _offload(t)

        @offload.register_fake
        def _(t):
            return torch.empty_like(t, device="cpu")

        @torch.library.custom_op("fxremat::reload", mutates_args=())
        def reload(t: torch.Tensor, device: torch.device) -> torch.Tensor:
            return _reload(t, device)

        @reload.register_fake
        def _(t, device):
            return torch.empty_like(t, device=device)

        # The result aliases the argument (Tensor(a)), which custom_op does not allow:
        # defined through torch.library, as ao::wait_tensor is. One implementation for
        # every device: the offload's wait has a CPU tensor and a device keepalive.
        torch.library.define("fxremat::wait_tensor", "(Tensor(a) t, Tensor? keepalive=None) -> Tensor(a)")
        torch.library.impl("fxremat::wait_tensor", "CompositeExplicitAutograd", func=_wait_tensor)
        torch.library.register_fake("fxremat::wait_tensor", lambda t, keepalive=None: t)
        # Never dropped as dead code: its effect is the wait.
        from torch.fx.node import has_side_effect

        has_side_effect(torch.ops.fxremat.wait_tensor.default)
        _registered = True


register()
