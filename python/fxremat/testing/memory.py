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
        live_after_forward = counter.live
        # The tangents arrive now, copied under the counter; only bw_in keeps them.
        arriving = [t.clone() if isinstance(t, torch.Tensor) else t for t in tangents]
        bw_in = partition.backward_inputs(primals, fw_out, arriving)
        user_outputs = fw_out[: sig["num_fwd_outputs"]]
        del fw_out, arriving
        grads = bw(bw_in)
        del bw_in
        peak = counter.peak
    del grads, user_outputs
    return MeasuredPeak(peak_bytes=peak, forward_peak_bytes=forward_peak, live_after_forward_bytes=live_after_forward)


def example_inputs(joint: fx.GraphModule, seed: int = 0) -> tuple[list, list]:
    """Seeded real inputs for a joint graph loaded by :func:`fxremat.load`:
    ``(primals, tangents)`` as :func:`fxremat.testing.verify.random_primals` and
    :func:`~fxremat.testing.verify.random_tangents` draw them."""
    from .verify import random_primals, random_tangents

    return random_primals(joint, seed=seed), random_tangents(joint, seed=seed + 1)


def pytorch_partition(joint: fx.GraphModule, fraction: float = 1.0,
                      static_lifetime_input_indices: Sequence[int] | None = None) -> Any:
    """PyTorch's ``min_cut_rematerialization_partition`` of (a copy of) ``joint`` at
    ``torch._functorch.config.activation_memory_budget = fraction``, as a
    :class:`fxremat.Partition` whose signature states AOTAutograd's positions
    (forward: user outputs, saved tensors, saved symints; backward: saved symints,
    saved tensors, tangents), so that :func:`measure_peak` and ``Partition.run``
    take it like fxremat's own."""
    from torch._functorch import config as fconfig
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .._partition import Partition

    facts = joint.meta["fxremat"]
    nfo = facts["num_fwd_outputs"]
    # A checkpointed graph makes PyTorch functionalize the RNG of recomputed random
    # ops, which needs the fake mode torch.compile has active.
    with fconfig.patch(activation_memory_budget=fraction), tracing(TracingContext(FakeTensorMode())):
        fw, bw = min_cut_rematerialization_partition(
            copy.deepcopy(joint), None, num_fwd_outputs=nfo,
            static_lifetime_input_indices=list(static_lifetime_input_indices or []))
    saved = fw.graph.output_node().args[0][nfo:]
    tensors = [n for n in saved if isinstance(n.meta.get("val"), torch.Tensor)]
    bw_order = [n for n in saved if n not in tensors] + tensors
    ntan = len(facts["tangent_outputs"])
    sig = {"num_fwd_outputs": nfo, "forward": {"num_outputs": nfo + len(saved)},
           "backward": {"num_inputs": len(saved) + ntan}, "primals": [],
           "saved": [{"forward_output_index": nfo + i, "backward_input_index": bw_order.index(n)}
                     for i, n in enumerate(saved)],
           "tangents": [{"backward_input_index": len(saved) + i} for i in range(ntan)]}
    return Partition(fw, bw, sig)


def measure_step_peak(step: Any, *args: Any) -> int:
    """The allocator's peak during ``step(*args)`` (a compiled training step: forward,
    loss and ``backward()``), above what was allocated before it, on CPU.

    Unlike :func:`measure_peak`, this sees every allocation, also those inside
    compiled code that no dispatch mode observes (Inductor's generated kernels and
    buffers): it reads the CPU allocator's alloc/free records through the profiler
    (``profile_memory=True``). It is the CPU counterpart of
    ``torch.cuda.max_memory_allocated()`` for validating the peak model's Inductor
    mode (Note [Inductor fusion in the peak model]). Tensors allocated before the
    step and freed during it count as negative (the peak is relative to the start).
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(*args)
    records = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                     if e.name() == "[memory]")
    live = peak = 0
    for _, delta in records:
        live += delta
        peak = max(peak, live)
    return peak
