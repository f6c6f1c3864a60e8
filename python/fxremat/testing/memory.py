"""Measured step peak: the runtime counterpart of the C++ peak model.

:func:`measure_peak` runs a partition's forward and backward GraphModules on real
inputs under a ``TorchDispatchMode`` that counts the bytes of every tensor storage
an op hands back, from the op that creates it until the last tensor referring to it
dies (weak-reference finalizers). The graphs run with FX's boxed calling convention,
as AOTAutograd runs them: each input is released after its last use. What is counted
is what Note [Peak model] (``include/fxremat/peak_model.h``) simulates:

* the primals (and constants) are the baseline, not counted, and views of them
  neither;
* the saved values live from the op that makes them to their last backward use;
* the tangents arrive at the start of the backward (copied in under the counter);
* the forward's user outputs and the gradients are held to the end.

Kernel scratch memory is invisible to both. On CPU this is the reference the model
is validated against (tests/python/test_peak_model.py, bench/budget_bench.py).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass
class MeasuredPeak:
    peak_bytes: int           # highest live bytes above the inputs, whole step
    forward_peak_bytes: int   # highest during the forward
    live_after_forward_bytes: int


class _StorageCounter(TorchDispatchMode):
    # Higher-order ops (PyTorch's run_and_save_rng_state / run_with_rng_state around
    # recomputed random ops) run below the counter; their results are counted.
    supports_higher_order_operators = True

    def __init__(self, baseline: set[int]):
        super().__init__()
        self.baseline = baseline
        self.storages: dict[int, list[int]] = {}  # data_ptr -> [bytes, live tensors]
        self.live = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        entry = self.storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self.storages[key]

    def track(self, t: Any) -> None:
        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        nbytes = st.nbytes()
        key = st.data_ptr()
        if nbytes == 0 or key in self.baseline:
            return
        entry = self.storages.get(key)
        if entry is None:
            entry = self.storages[key] = [nbytes, 0]
            self.live += nbytes
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(t, self._release, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            self.track(t)
        return out


def _boxed(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of ``gm`` that takes one list and clears it (AOTAutograd's boxed call),
    so that each input dies after its last use."""
    graph = copy.deepcopy(gm.graph)
    graph.set_codegen(fx.graph._BoxedCodeGen())
    boxed = fx.GraphModule(gm, graph)
    boxed.recompile()
    return boxed


def _baseline(tensors: Sequence[Any], modules: Sequence[torch.nn.Module]) -> set[int]:
    keys = set()
    for t in tensors:
        if isinstance(t, torch.Tensor):
            keys.add(t.untyped_storage().data_ptr())
    for m in modules:
        for value in list(m.parameters()) + list(m.buffers()) + [v for v in vars(m).values()
                                                                 if isinstance(v, torch.Tensor)]:
            keys.add(value.untyped_storage().data_ptr())
    return keys


def measure_peak(partition: Any, primals: Sequence[Any], tangents: Sequence[Any]) -> MeasuredPeak:
    """Runs ``partition`` (a :class:`fxremat.Partition`) once on ``primals`` and
    ``tangents`` and returns the storage bytes it held at its highest, above the
    inputs (Note [Peak model])."""
    sig = partition.signature
    fw = _boxed(partition.forward)
    bw = _boxed(partition.backward)
    counter = _StorageCounter(_baseline(primals, [partition.forward, partition.backward]))
    with torch.no_grad(), counter:
        fw_out = fw(list(primals))
        forward_peak = counter.peak
        for p in sig["primals"]:
            k = p.get("written_back_from")
            if k is not None:
                primals[p["forward_input_index"]].copy_(fw_out[k])
        bw_in: list[Any] = [None] * sig["backward"]["num_inputs"]
        for s in sig["saved"]:
            bw_in[s["backward_input_index"]] = fw_out[s["forward_output_index"]]
        user_outputs = fw_out[: sig["num_fwd_outputs"]]
        del fw_out
        live_after_forward = counter.live
        for t, value in zip(sig["tangents"], tangents):
            bw_in[t["backward_input_index"]] = value.clone() if isinstance(value, torch.Tensor) else value
        grads = bw(bw_in)
        del bw_in
        peak = counter.peak
    del grads, user_outputs
    return MeasuredPeak(peak_bytes=peak, forward_peak_bytes=forward_peak, live_after_forward_bytes=live_after_forward)


def example_inputs(joint: fx.GraphModule, seed: int = 0) -> tuple[list, list]:
    """Seeded real inputs for a joint graph loaded by :func:`fxremat.load`: floats
    standard normal, integers within the ranges ``fxremat verify`` draws from
    (:func:`fxremat.testing.verify.integer_input_ranges`), SymInts at their hint.
    Returns ``(primals, tangents)`` in placeholder order."""
    from .._format import derive_role
    from .verify import integer_input_ranges

    ranges = integer_input_ranges(joint)
    gen = torch.Generator().manual_seed(seed)
    primals, tangents = [], []
    for node in joint.graph.nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            shape = [int(s) for s in val.shape]
            if val.dtype.is_floating_point or val.dtype.is_complex:
                value = torch.randn(shape, generator=gen, dtype=val.dtype)
            elif val.dtype == torch.bool:
                value = torch.randint(0, 2, shape, generator=gen).bool()
            else:
                lo, hi = ranges.get(node.name, (0, 0))
                if hi <= lo:
                    lo, hi = 0, 2
                value = torch.randint(lo, hi, shape, generator=gen, dtype=val.dtype)
        elif isinstance(val, torch.SymInt):
            value = int(val.node.hint)
        else:
            value = val
        role = node.meta.get("fxremat_role") or derive_role(node.name, "joint")
        (tangents if role == "tangent" else primals).append(value)
    return primals, tangents
