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
#pragma once

#include <cstdint>
#include <string>

#include "fxremat/partition.h"
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

// Simulates p.forward then p.backward (Note [Peak model]). Errors only for a
// partition whose graphs and signature disagree (an internal error).
Expected<PeakEstimate> SimulatePeak(const Partition& p);

// The bytes of the storage a fresh tensor with these facts occupies: its span
// under its strides (numel * item size when contiguous); 0 when empty.
int64_t StorageBytes(const TensorFacts& facts);

}  // namespace fxremat
