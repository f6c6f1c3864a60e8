// The pass registry (fxremat/pass.h): one entry per pass, in pipeline order
// (Note [Partition pipeline] in fxremat/pipeline.h).
#include "fxremat/pass.h"

#include <fmt/format.h>

#include "fxremat/phases.h"

#include "passes/cleanup_recompute_tags.h"
#include "passes/cse.h"
#include "passes/eliminate_dead_code.h"
#include "passes/emit_offload.h"
#include "passes/fold_annotations.h"
#include "passes/force_saves.h"
#include "passes/functionalize_rng.h"
#include "passes/insert_barriers.h"
#include "passes/protect_mutations.h"
#include "passes/raise_getitems.h"
#include "passes/reorder_backward.h"

namespace fxremat {

namespace {

Expected<bool> RunApplyPolicy(Graph& g, const PassOptions& o) {
  FXREMAT_ASSIGN_OR_RETURN(std::vector<ValueDemand> decided, ApplyPolicy(g, o.policy));
  return !decided.empty();
}

Expected<bool> RunCheckMutationDemands(Graph& g, const PassOptions&) {
  FXREMAT_RETURN_IF_ERROR(CheckMutationDemands(g));
  return false;
}

}  // namespace

const std::vector<GraphPass>& GraphPasses() {
  static const std::vector<GraphPass> kPasses = {
      {"fold-annotations", "naming ops become value names (and offload requests)",
       [](Graph& g, const PassOptions& o) { return FoldAnnotations(g, {.keep_annotations = o.keep_annotations}); }},
      {"eliminate-dead-code", "values nothing uses go, as the reference's min cut removes them first",
       [](Graph& g, const PassOptions&) { return EliminateDeadCode(g); }},
      {"cse", "common subexpressions merged, as the reference's fx_graph_cse",
       [](Graph& g, const PassOptions& o) {
         return o.cse_duplicates ? MergeCommonSubexpressions(g, *o.cse_duplicates) : EliminateCommonSubexpressions(g);
       }},
      {"protect-mutations", "values that read overwritten inputs are marked never to recompute",
       [](Graph& g, const PassOptions&) { return ProtectMutations(g); }},
      {"cleanup-recompute-tags", "checkpoint-region boundaries become MUST_SAVE",
       [](Graph& g, const PassOptions& o) { return CleanupRecomputeTags(g, o.default_partition); }},
      {"force-saves", "collectives and backward-mutated copy sources become MUST_SAVE",
       [](Graph& g, const PassOptions&) { return ForceSaves(g); }},
      {"apply-policy", "policy, tags and annotations become one decision per value", RunApplyPolicy},
      {"check-mutation-demands", "a MUST_RECOMPUTE that would read overwritten data is an error",
       RunCheckMutationDemands},
      {"reorder-backward", "the backward in the autograd engine's order",
       [](Graph& g, const PassOptions&) { return ReorderBackward(g); }},
      {"raise-getitems", "getitems right after their producers",
       [](Graph& g, const PassOptions&) { return RaiseGetitems(g); }},
  };
  return kPasses;
}

const std::vector<PartitionPass>& PartitionPasses() {
  static const std::vector<PartitionPass> kPasses = {
      {"functionalize-rng", "random ops recomputed in the backward replay the forward's draw (saved RNG state)",
       [](Partition& p, const PassOptions&) { return FunctionalizeRng(p); }},
      {"emit-offload", "offloaded values copied to host after their last forward use, reloaded before the backward's",
       [](Partition& p, const PassOptions& o) { return EmitOffload(p, o.offload); }},
      {"insert-barriers", "inputs of recomputed regions pass an optimization barrier (xla)",
       [](Partition& p, const PassOptions&) { return InsertBarriers(p); }},
  };
  return kPasses;
}

const GraphPass* FindGraphPass(std::string_view name) {
  for (const GraphPass& p : GraphPasses())
    if (p.name == name) return &p;
  return nullptr;
}

const PartitionPass* FindPartitionPass(std::string_view name) {
  for (const PartitionPass& p : PartitionPasses())
    if (p.name == name) return &p;
  return nullptr;
}

Expected<bool> RunGraphPass(std::string_view name, Graph& graph, const PassOptions& options) {
  const GraphPass* pass = FindGraphPass(name);
  if (!pass) return Status::Internal(fmt::format("no graph pass named '{}'", name));
  ScopedPhase phase(pass->name);
  return pass->run(graph, options);
}

Expected<bool> RunPartitionPass(std::string_view name, Partition& partition, const PassOptions& options) {
  const PartitionPass* pass = FindPartitionPass(name);
  if (!pass) return Status::Internal(fmt::format("no partition pass named '{}'", name));
  ScopedPhase phase(pass->name);
  return pass->run(partition, options);
}

}  // namespace fxremat
