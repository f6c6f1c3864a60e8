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
#include "src/max_flow.h"

namespace fxremat {

// The reference's config knobs (torch._functorch.config), same names and
// defaults. Every field can be set from the CLI (`--config NAME=VALUE`) and
// from Python (`options={...}`).
struct MinCutOptions {
  // Views are never saved (infinite weight) and never banned from recompute.
  bool recompute_views = false;
  // Turns off every ban_recompute_* heuristic except ban_recompute_reductions.
  bool aggressive_recomputation = false;
  // Ban recomputing a fusible user that runs after an unfusible use of its input.
  bool ban_recompute_used_far_apart = true;
  // Ban recomputing the end of a fusible chain longer than 100 forward ops.
  bool ban_recompute_long_fusible_chains = true;
  // Ban recomputing a value that must be materialized in the backward anyway.
  bool ban_recompute_materialized_backward = true;
  // Only ops on the recomputable allowlist (and pointwise ops) may be recomputed.
  bool ban_recompute_not_in_allowlist = true;
  // Ban recomputing ops whose output is 4x smaller than their inputs.
  bool ban_recompute_reductions = true;
  // Static-lifetime inputs (parameters, buffers) cost nothing to save.
  bool treat_parameters_as_free_to_save = true;
  // Common-subexpression elimination before partitioning.
  bool cse = true;
  // Ban recomputing forward ops farther than this from the backward.
  int64_t max_dist_from_bw = 1000;
  // Only 1.0 (the min cut) and 0.0 (save only the inputs) are supported; the
  // budget search between them belongs to the memory-budget solver.
  double activation_memory_budget = 1.0;
  // Indices (among primals) of static-lifetime inputs. Unset: the primals whose
  // pytree path starts with params[ or buffers[, which is what torch.compile
  // passes for an nn.Module's parameters and buffers.
  std::optional<std::vector<int64_t>> static_lifetime_input_indices;
  // Which max-flow implementation solves the cut; all give the same cut. Dinic
  // (fxremat's own) is the default: bench/ measures it faster than Boost's
  // Boykov-Kolmogorov on joint graphs (docs/benchmarks.md).
  MaxFlowAlgorithm max_flow = MaxFlowAlgorithm::kDinic;
  // The checkpoint policy (policy.h); unset: only the nodes' recompute tags and
  // offload annotations constrain the cut.
  std::optional<PolicySpec> policy;
  // Note [Policy demands in the cut]: recomputing a PREFER_SAVE or
  // PREFER_CPU_OFFLOAD value costs prefer_save_factor times the cost of saving
  // it (> 1: saved whenever it is needed and can be saved, JAX's "saveable");
  // saving a PREFER_RECOMPUTE value costs prefer_recompute_factor times its
  // usual cost (large: saved only where it cannot be recomputed).
  double prefer_save_factor = 2.0;
  double prefer_recompute_factor = 1024.0;
};

// Sets one option by its functorch config name ("recompute_views", "true").
Status SetMinCutOption(MinCutOptions& options, const std::string& name, const std::string& value);

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

// The whole pass: CSE (options.cse), cleanup_recompute_tags, forced saves,
// SolveMinCut, then ExtractPartition. Falls back to the default partition when
// nothing in the graph depends on a tangent, as the reference does.
Expected<Partition> MinCutPartition(const Graph& joint, const MinCutOptions& options);

}  // namespace fxremat
