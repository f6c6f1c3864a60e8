// The peak model: the memory a training step's emitted forward and backward
// graphs reach, found by simulating them in their execution order. The memory
// budget (passes/budget_partition.h) bounds this number, and every partition
// reports it (signature "peak", the residual report).
//
// Note [Peak model]
// What is counted is the bytes of live tensor storages above the step's inputs,
// on the graphs' device, the way a storage counter sees them while the
// GraphModules run (fxremat.testing.memory measures exactly that on CPU):
//   * primals (parameters and user inputs) are the baseline: not counted, and
//     neither is a view of them;
//   * a node's fresh outputs are allocated when it runs (the peak is checked
//     then, with its inputs still alive) and a value dies after its last use
//     (FX's generated code drops each local after its last use, AOTAutograd
//     frees the saved tensors as the backward consumes them);
//   * views and in-place results share their base's storage (the schema's alias
//     annotations; aten._unsafe_view too, which PyTorch implements as a view,
//     and prims.device_put onto the device the tensor is on, which returns it);
//     a storage dies with the last value that refers to it;
//   * a multi-output op allocates one storage per item; an item nobody fetches
//     dies with the tuple, after the op's last getitem;
//   * the forward's user outputs live to the end of the step (the caller holds
//     them), the saved values until their last backward use, tangents from the
//     start of the backward to their last use, gradients to the end;
//   * tensors on another device than the graphs' main device (host copies of
//     offloaded values on an accelerator) count as host bytes, not peak bytes.
// Kernel workspaces (scratch memory inside one op) are not modelled.
//
// Note [Inductor fusion in the peak model]
// Inductor does not allocate every aten op's result: a pointwise op is lowered
// to a loop body that the kernels reading it inline, and is only written to
// memory ("realized") when something needs a buffer. With
// PeakModelKind::kInductor the model follows Inductor's lowering rules
// (torch/_inductor/graph.py, ir.py): the result of a pointwise op (tag
// pointwise, not random, not mutating, one tensor) is not allocated when
//   * it is not an output of its graph (saved values, user outputs and
//     gradients are buffers), and
//   * every user is a pointwise or reduction op, or a view whose own users
//     are (an extern kernel -- mm, convolution, attention, any op without
//     those tags -- reads a buffer), and
//   * with more than one user, it reads at most 4 storages (Inductor realizes
//     a reused loop body above config.realize_reads_threshold = 4).
// Such a value holds its inputs' storages instead of its own: they stay alive
// until its last reader has run. Reductions and everything else allocate as
// in the eager model. Validated against torch.cuda.max_memory_allocated()
// under Inductor in docs/benchmarks_gpu.md (bench/gpu_budget_bench.py).
#pragma once

#include <cstdint>
#include <string>

#include "fxremat/partition.h"
#include "fxremat/partition_options.h"
#include "fxremat/status.h"

namespace fxremat {

struct PeakEstimate {
  // The highest live bytes over the whole step, above the inputs.
  int64_t peak_bytes = 0;
  // The node running when the peak is first reached, and in which graph
  // ("forward" or "backward"; "backward" with an empty node: the tangents).
  std::string peak_node;
  std::string peak_graph;
  int64_t forward_peak_bytes = 0;
  int64_t backward_peak_bytes = 0;
  // Live at the end of the forward: the saved values and the user outputs.
  int64_t live_after_forward_bytes = 0;
  // Largest host-resident bytes (offloaded values on an accelerator step).
  int64_t host_peak_bytes = 0;
};

// One point of the peak / recompute-cost front (fxremat pareto; Note [Peak
// budget] in passes/budget_partition.h).
struct FrontPoint {
  int64_t peak_bytes = 0;
  double recompute_cost = 0;  // flops-equivalent recomputed in the backward
  int64_t saved_bytes = 0;
  std::string label;  // "min cut", "inputs only", "segments of <= N B", "budget 0.25"
};

// The device whose memory a step's peak counts: the first tensor value's
// device other than cpu, else "cpu" (then nothing is host memory).
std::string MainDevice(const Graph& g);

// Simulates p.forward then p.backward (Note [Peak model]). Errors only for a
// partition whose graphs and signature disagree (an internal error).
Expected<PeakEstimate> SimulatePeak(const Partition& p, PeakModelKind kind = PeakModelKind::kEager);

// The bytes of the storage a fresh tensor with these facts occupies: its span
// under its strides (numel * item size when contiguous); 0 when empty.
int64_t StorageBytes(const TensorFacts& facts);

}  // namespace fxremat
