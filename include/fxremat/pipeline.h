// The whole partitioning pipeline that the CLI, the Python extension and the
// benchmarks run: fold annotations, partition (with a policy), emit offload
// transfers and optimization barriers. One entry point so that every front end
// makes byte-identical graphs from the same request.
//
// Note [Partition pipeline]
// The stages, in order; each is a registered pass (fxremat/pass.h) except the
// partitioner itself:
//    1. fold-annotations        naming ops (fxremat::checkpoint_name,
//                               xla::name_tensor / offload_name) become value
//                               names and offload requests (ops kept with
//                               keep_annotations)
//    2. the partitioner         "mincut": Note [Min-cut preparation]
//                               (eliminate-dead-code, cse, protect-mutations,
//                               cleanup-recompute-tags, force-saves,
//                               apply-policy, check-mutation-demands), the
//                               solve, extraction with the saved values'
//                               order (passes/order_saved_values.h);
//                               "default": the reference's default partition
//    3. functionalize-rng       random ops recomputed in the backward replay
//                               the forward's draw (Note [Replaying random ops])
//    4. reorder-backward        the backward in the autograd engine's order
//                               (mincut; default only with checkpoint tags)
//    5. raise-getitems          both graphs: getitems after their producers
//    6. emit-offload            offloaded values to host and back (torch, xla)
//    7. insert-barriers         xla target with `barrier`: optimization barriers
//                               before recomputed regions
// The CLI, the Python extension and partition_fn all run exactly this, so they
// emit the same graphs.
#pragma once

#include <optional>
#include <string>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/partition_options.h"
#include "fxremat/peak_model.h"
#include "fxremat/policy.h"
#include "fxremat/status.h"

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
  // Step 8 (the step's peak, checked against the budget) inside RunPartition.
  // A caller that has other work for the emitted graphs meanwhile (the CLI
  // writes them: Note [Texts beside the graphs]) sets this false and calls
  // AttachStepPeak itself before it uses the signature.
  bool simulate_peak = true;
};

// Step 2 for "mincut" (Note [Partition pipeline]): on a copy of `joint`, the
// preparation stages the reference runs before its cut, in its order, each when
// it has work (eliminate-dead-code, cse, protect-mutations,
// cleanup-recompute-tags, force-saves, apply-policy, check-mutation-demands),
// then the solve and the extraction. MinCutPartition is this.
Expected<Partition> RunMinCutStages(const Graph& joint, const MinCutOptions& options);

// Validates the request (unknown partitioner, a policy or options with the
// default partitioner, barrier without the xla target: bad input) and runs the
// pipeline on a copy of `joint`.
Expected<Partition> RunPartition(const Graph& joint, const PartitionRequest& request);

// Step 8 of the pipeline: simulates the emitted graphs' step peak (Note [Peak
// model]) into p.signature.peak and fails, as an internal error, if it is over
// the budget the partition was solved for (Note [Peak budget]). Reads only
// the emitted graphs, so it may run beside a writer of them.
Status AttachStepPeak(Partition& p, const PartitionRequest& request);

// The graph the min cut (and the budget solver) cuts: `joint` after the
// preparation stages of RunMinCutStages, always a copy.
Expected<std::unique_ptr<Graph>> PrepareMinCutGraph(const Graph& joint, const MinCutOptions& options);

// The graph the budget solver works on: annotations folded, then the min
// cut's preparation stages (always a copy). Mincut only.
Expected<std::unique_ptr<Graph>> PrepareBudgetGraph(const Graph& joint, const PartitionRequest& request);

// The peak / recompute-cost front (Note [Peak budget] in
// passes/budget_partition.h): the candidates the budget solver weighs, then
// `points` budgets evenly spaced from the smallest peak to the min cut's, each
// solved. Mincut only.
Expected<std::vector<FrontPoint>> RunPeakFront(const Graph& joint, const PartitionRequest& request, int points);

}  // namespace fxremat
