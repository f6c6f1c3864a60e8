// min_cut_partition: choose the saved values by a minimum cut, as
// functorch's min_cut_rematerialization_partition does (torch/_functorch/
// partitioners.py, torch 2.13), then extract forward and backward graphs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/policy.h"
#include "fxremat/status.h"
#include "fxremat/partition_options.h"

namespace fxremat {

// What the solver decided, for reports and tests.
struct MinCutSolution {
  std::vector<Node*> saved_values;   // joint-graph (post-CSE) nodes, in graph order
  std::vector<Node*> banned_nodes;   // banned from recomputation, in ban order
  int64_t cut_value = 0;             // total weight of the cut edges
  int64_t network_nodes = 0, network_edges = 0;
};

// The solver alone: builds the flow network over `joint` (already CSE'd and
// tag-cleaned, see MinCutPartition) and cuts it. An infinite minimum cut is a
// bad-input error that lists the infinite path from source to sink with the
// reason on each edge.
Expected<MinCutSolution> SolveMinCut(const Graph& joint, const MinCutOptions& options);
// The same with the joint's classification already made (one per pipeline run).
Expected<MinCutSolution> SolveMinCut(const Graph& joint, const JointClassification& classification,
                                     const MinCutOptions& options);

// Note [Region budgets]
// A joint graph may carry its own budget, as PyTorch's min cut reads it (torch
// 2.13), in increasing precedence over activation_memory_budget: the first
// node's legacy meta["memory_budget"] (MemoryBudgetMode), then the budget of
// torch.autograd.graph.region_activation_memory_budget on the nodes. All
// annotated nodes must agree, and the annotation must cover every forward op
// (call_function nodes the forward outputs need, and every call_function of the
// higher-order ops' subgraphs, nested ones included); otherwise bad input with
// PyTorch's message. The result is the fraction of Note [Peak budget];
// memory_budget_bytes, when given, still takes precedence over it.
Expected<MinCutOptions> ResolveRegionBudget(const Graph& prepared, const JointClassification& c,
                                            MinCutOptions options);

// The cut of a graph the min cut's preparation stages already ran on
// (RunMinCutStages, pipeline.h): the solve and the extraction. Falls back to
// the default partition when nothing depends on a tangent, as the reference.
// `classified`: ClassifyJoint(prepared), when the caller already has it
// (RunMinCutStages classifies while the CSE search runs: Note [Classified
// while searching] in src/pipeline.cpp).
Expected<Partition> CutPreparedGraph(const Graph& prepared, const MinCutOptions& options,
                                     std::optional<JointClassification> classified = std::nullopt);

// The whole pass: CSE (options.cse), cleanup_recompute_tags, forced saves,
// SolveMinCut, then ExtractPartition. Falls back to the default partition when
// nothing in the graph depends on a tangent, as the reference does.
Expected<Partition> MinCutPartition(const Graph& joint, const MinCutOptions& options);

}  // namespace fxremat
