// default_partition: the forward keeps the ops the user's forward ran; every
// forward value the backward reads is saved. Assumes a verified joint graph
// whose forward nodes carry partitioner_tag=is_forward, as AOTAutograd's joint
// trace sets it.
#include "passes/default_partition.h"

#include "passes/protect_mutations.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "fxremat/policy.h"
#include "passes/cleanup_recompute_tags.h"
#include "passes/force_saves.h"
#include "passes/min_cut_partition.h"
#include "passes/protect_mutations.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

bool IsMultiOutput(const Node& n) {
  if (n.users().empty()) return false;
  return std::all_of(n.users().begin(), n.users().end(), [](const Node* u) { return u->isGetItem(); });
}




}  // namespace

Expected<std::vector<Node*>> ChooseDefaultSavedValues(const Graph& joint) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  // The reference respects the original placement of ops rather than data
  // flow: the forward is every non-tangent node up to the last node tagged
  // is_forward (or a primal). A graph without any is_forward tag (not traced by
  // AOTAutograd's joint trace) falls back to data flow: the nodes the forward
  // outputs need.
  bool has_forward_tags = false;
  size_t last_forward = 0;
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.meta().partitioner_tag == PartitionerTag::kIsForward) has_forward_tags = true;
    if (n.meta().partitioner_tag == PartitionerTag::kIsForward || n.role() == PlaceholderRole::kPrimal ||
        n.role() == PlaceholderRole::kFwdRng)
      last_forward = n.index();
  }
  std::vector<bool> is_forward(joint.size(), false);
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.isOutput()) continue;
    if (has_forward_tags) {
      if (n.index() > last_forward) break;
      is_forward[n.index()] = n.role() != PlaceholderRole::kTangent;
    } else {
      is_forward[n.index()] = c.required_by_forward[n.index()];
    }
  }
  bool has_recomputable_ops = false;
  for (const auto& up : joint.nodes()) has_recomputable_ops = has_recomputable_ops || MustRecompute(*up);

  std::vector<Node*> saved_values, saved_syms;
  // Membership by node index: a search of the list per value was quadratic
  // (a third of `fxremat inspect`'s time at a million nodes).
  std::vector<uint8_t> listed(joint.size(), 0);  // bit 1: in saved_values, bit 2: in saved_syms
  auto add_unique = [&](std::vector<Node*>& list, Node* n) {
    const uint8_t bit = &list == &saved_values ? 1 : 2;
    if (listed[n->index()] & bit) return;
    listed[n->index()] |= bit;
    list.push_back(n);
  };
  for (const auto& up : joint.nodes()) {
    Node* n = up.get();
    if (!is_forward[n->index()] || (n->isCallFunction() && InDefaultPartitionSkippedOps(n->target()))) continue;
    if (n->op() == OpKind::kGetAttr) continue;
    if (IsSymNode(*n)) {
      // Symints are saved apart from tensors (Note [AOTAutograd runtime contract]).
      add_unique(saved_syms, n);
      continue;
    }
    // A multi-output op's tuple is never saved; its getitems are.
    if (IsMultiOutput(*n)) continue;
    // A CPU-offload tag (selective checkpointing's MUST/PREFER_CPU_OFFLOAD) is
    // a save to host memory: saved like MUST_SAVE, whatever reads it in the
    // backward (a region recomputed from it). Only direct readers counted
    // before, and a region recomputed from an offloaded addmm could not be
    // computed in the backward (PyTorch's default_partition fails the same way).
    if (n->meta().recompute == Decision::kMustSave || IsOffload(n->meta().recompute)) {
      add_unique(saved_values, n);
      continue;
    }
    if (IsImpure(*n)) {
      if (has_recomputable_ops)
        return Status::BadInput(fmt::format("cannot apply activation checkpointing to a graph with the "
                                            "side-effecting op {}", n->target()),
                                fmt::format("node '{}'", n->name()));
      add_unique(saved_values, n);
      continue;
    }
    if (!n->val().is_tensor() && n->isCallFunction())
      return Status::BadInput(fmt::format("forward value of kind other than tensor or symint cannot be saved "
                                          "(op {})", n->target()),
                              fmt::format("node '{}'", n->name()));
    std::vector<Node*> backward_usages;
    for (Node* user : n->users())
      if (!is_forward[user->index()]) backward_usages.push_back(user);
    if (std::all_of(backward_usages.begin(), backward_usages.end(), [](Node* u) { return IsSymNode(*u); })) {
      // Only sizes are needed in the backward: saving them is cheaper than the tensor.
      for (Node* u : backward_usages) add_unique(saved_syms, u);
      continue;
    }
    // Note [Mutated inputs]: a value that reads overwritten data is saved even
    // when tagged for recompute (CheckMutationDemands refused MUST_RECOMPUTE).
    // A random op (or one of its results) tagged for recompute is recomputed
    // only where its draw can be replayed (Note [Replaying random ops] in
    // passes/functionalize_rng.h); otherwise it is saved.
    const Node* tuple = n->isGetItem() && !n->args().empty() && n->args()[0].is_node() ? n->args()[0].node : nullptr;
    if (!MustRecompute(*n) || !n->meta().rare().reads_mutated.empty() || RandomOpMustBeSaved(*n) ||
        (tuple && MustBeInForward(*tuple)))  // Note [Bodies that return their inputs]
      add_unique(saved_values, n);
  }
  saved_syms.erase(std::remove_if(saved_syms.begin(), saved_syms.end(),
                                  [](Node* n) { return IsAssertOnlySymBool(*n); }),
                   saved_syms.end());
  saved_values.insert(saved_values.end(), saved_syms.begin(), saved_syms.end());
  return saved_values;
}

namespace {

// The reference's _is_functional_graph (functional_utils.py): the first
// mutating op other than a copy_ / set_ into a graph input, or nullptr.
const Node* FirstNonFunctionalNode(const Graph& joint) {
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (!n.isCallFunction()) continue;
    const std::string& t = n.target();
    if (t == "aten.copy_.default" || t == "aten.set_.source_Tensor" || t == "fsdp.copy_.default") {
      if (n.args().empty() || !n.args()[0].is_node() || !n.args()[0].node->isPlaceholder()) return &n;
      continue;
    }
    const OpInfo* info = n.opInfo();
    if (info && info->hasSchema() && info->schema.isMutable()) return &n;
  }
  return nullptr;
}

}  // namespace

Expected<Partition> DefaultPartition(const Graph& joint) {
  FXREMAT_ASSIGN_OR_RETURN(bool has_recomputable_ops, HasRecomputableOps(joint));
  if (has_recomputable_ops) {
    if (const Node* culprit = FirstNonFunctionalNode(joint)) {
      // As the reference: checkpointing a non-functional graph falls back to the min cut, with a warning.
      FXREMAT_ASSIGN_OR_RETURN(Partition p, MinCutPartition(joint, MinCutOptions{}));
      p.signature.notes.push_back(fmt::format(
          "the default partitioner cannot apply activation checkpointing to a graph that is not functional (node "
          "'{}', {}); the min-cut partitioner partitioned it, as PyTorch's default_partition falls back",
          culprit->name(), culprit->target()));
      return p;
    }
  }
  const bool has_mutations = HasForwardMutations(joint);
  const bool has_forced = NeedsForcedSaves(joint);
  if (!has_recomputable_ops && !has_forced && !has_mutations) {
    FXREMAT_ASSIGN_OR_RETURN(std::vector<Node*> saved, ChooseDefaultSavedValues(joint));
    return ExtractPartition(joint, saved, "default");
  }
  // Tags are fixed up on a copy: checkpoint-region inputs and region-to-region
  // boundaries become MUST_SAVE, as in the reference, and so do forced saves.
  std::unique_ptr<Graph> g = CloneGraph(joint);
  if (has_mutations && has_recomputable_ops) {
    // Only recompute tags can make the default partition recompute a value.
    FXREMAT_RETURN_IF_ERROR(ProtectMutations(*g).status());
    FXREMAT_RETURN_IF_ERROR(CheckMutationDemands(*g));
  }
  if (has_recomputable_ops) FXREMAT_RETURN_IF_ERROR(CleanupRecomputeTags(*g, /*is_default_partition=*/true).status());
  if (has_forced) FXREMAT_RETURN_IF_ERROR(ForceSaves(*g).status());
  FXREMAT_ASSIGN_OR_RETURN(std::vector<Node*> saved, ChooseDefaultSavedValues(*g));
  return ExtractPartition(*g, saved, "default");
}

}  // namespace fxremat
