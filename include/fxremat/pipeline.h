// The whole partitioning pipeline that the CLI, the Python extension and the
// benchmarks run: fold annotations, partition (with a policy), emit offload
// transfers and optimization barriers. One entry point so that every front end
// makes byte-identical graphs from the same request.
//
// Note [Partition pipeline]
//   1. FoldAnnotations (passes/fold_annotations): the names that
//      fxremat::checkpoint_name / xla::name_tensor / xla::offload_name give
//      become meta().names of the annotated value; offload_name also records an
//      offload request. The ops are removed unless keep_annotations.
//   2. The partitioner: "mincut" (CSE, recompute-tag cleanup, ApplyPolicy, the
//      min cut, extraction) or "default" (no policy allowed).
//   3. EmitOffload (passes/emit_offload): every saved value the policy offloads
//      is copied to host right after its last forward use and reloaded right
//      before its first backward use (target torch or xla).
//   4. InsertBarriers (passes/insert_barriers, target xla, `barrier`): the inputs
//      of every recomputed region in the backward pass through
//      xla::optimization_barrier.
#pragma once

#include <optional>
#include <string>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/policy.h"
#include "fxremat/status.h"
#include "passes/min_cut_partition.h"

namespace fxremat {

// "torch" / "xla"; unknown names are a bad-input error.
Expected<OffloadTarget> OffloadTargetFromName(std::string_view name);
std::string_view OffloadTargetName(OffloadTarget t);

struct PartitionRequest {
  std::string partitioner = "mincut";  // "mincut" or "default"
  MinCutOptions mincut;                // mincut only; holds the policy
  OffloadTarget offload_target = OffloadTarget::kTorch;
  bool barrier = false;                // xla target only
  bool keep_annotations = false;       // keep the naming ops in the emitted graphs
};

// Validates the request (unknown partitioner, a policy or options with the
// default partitioner, barrier without the xla target: bad input) and runs the
// pipeline on a copy of `joint`.
Expected<Partition> RunPartition(const Graph& joint, const PartitionRequest& request);

}  // namespace fxremat
