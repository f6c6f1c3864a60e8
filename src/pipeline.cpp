// The partition pipeline (Note [Partition pipeline] in fxremat/pipeline.h).
#include "fxremat/pipeline.h"

#include <fmt/format.h>

#include "fxremat/pass.h"
#include "passes/default_partition.h"
#include "passes/min_cut_partition.h"
#include "src/partition_internal.h"

namespace fxremat {

Expected<OffloadTarget> OffloadTargetFromName(std::string_view name) {
  if (name == "torch") return OffloadTarget::kTorch;
  if (name == "xla") return OffloadTarget::kXla;
  return Status::BadInput(fmt::format("unknown offload target '{}' (torch or xla)", name));
}

std::string_view OffloadTargetName(OffloadTarget t) { return t == OffloadTarget::kXla ? "xla" : "torch"; }

Expected<Partition> RunPartition(const Graph& joint, const PartitionRequest& request) {
  if (request.partitioner != "mincut" && request.partitioner != "default")
    return Status::BadInput(fmt::format("unknown partitioner '{}' (available: mincut, default)", request.partitioner));
  if (request.partitioner == "default" && request.mincut.policy)
    return Status::BadInput("a policy needs the mincut partitioner: the default partition saves what the forward "
                            "computes and the backward uses, with no choice to constrain");
  if (request.barrier && request.offload_target != OffloadTarget::kXla)
    return Status::BadInput("--barrier inserts xla::optimization_barrier and needs the xla target (--offload-target xla)");

  PassOptions pass_options;
  pass_options.keep_annotations = request.keep_annotations;
  pass_options.offload_target = request.offload_target;
  // 1. The annotation ops are folded on a copy; graphs without any skip the copy.
  bool has_annotations = false;
  for (const auto& up : joint.nodes()) has_annotations = has_annotations || (up->isCallFunction() && IsAnnotationOp(up->target()));
  std::unique_ptr<Graph> folded;
  const Graph* g = &joint;
  if (has_annotations) {
    folded = CloneGraph(joint);
    FXREMAT_RETURN_IF_ERROR(RunGraphPass("fold-annotations", *folded, pass_options).status());
    g = folded.get();
  }

  // 2. The partitioner.
  Partition p;
  if (request.partitioner == "default") {
    // The default partition has no choice to make, but it honours
    // xla::offload_name: a saved value that carries the request is offloaded.
    // apply-policy (no policy) rejects requests that cannot be honoured.
    bool offload_requests = false;
    for (const auto& up : g->nodes()) offload_requests = offload_requests || up->meta().offload_requested;
    if (offload_requests) {
      if (!folded) {
        folded = CloneGraph(joint);
        g = folded.get();
      }
      FXREMAT_RETURN_IF_ERROR(RunGraphPass("apply-policy", *folded, pass_options).status());
    }
    FXREMAT_ASSIGN_OR_RETURN(p, DefaultPartition(*g));
    for (SavedValue& v : p.signature.saved)
      if (const Node* n = g->findNode(v.name); n && n->meta().offload_requested) v.offloaded = true;
  } else {
    FXREMAT_ASSIGN_OR_RETURN(p, MinCutPartition(*g, request.mincut));
  }
  // The order AOTAutograd's reference gives its graphs: the min cut always
  // mimics the autograd engine in the backward, the default partition when
  // checkpoint tags made it recompute; getitems follow their producers.
  FXREMAT_ASSIGN_OR_RETURN(bool has_recompute_tags, HasRecomputableOps(*g));
  // 3. and 4.
  if (request.partitioner == "mincut" || has_recompute_tags)
    FXREMAT_RETURN_IF_ERROR(RunGraphPass("reorder-backward", *p.backward, pass_options).status());
  FXREMAT_RETURN_IF_ERROR(RunGraphPass("raise-getitems", *p.forward, pass_options).status());
  FXREMAT_RETURN_IF_ERROR(RunGraphPass("raise-getitems", *p.backward, pass_options).status());
  // 5. and 6.
  FXREMAT_RETURN_IF_ERROR(RunPartitionPass("emit-offload", p, pass_options).status());
  if (request.barrier) FXREMAT_RETURN_IF_ERROR(RunPartitionPass("insert-barriers", p, pass_options).status());
  return p;
}

}  // namespace fxremat
