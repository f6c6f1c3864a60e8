// protect_mutations (Note [Mutated inputs] in protect_mutations.h).
#include "passes/protect_mutations.h"
#include "fxremat/phases.h"

#include <limits>
#include <vector>

#include <fmt/format.h>

#include "fxremat/partition.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

// The node whose storage `n` aliases: follows view ops back to their first
// tensor argument.
const Node* AliasRoot(const Node* n) {
  while (IsViewOp(*n)) {
    const Node* base = nullptr;
    for (const Argument& a : n->args())
      if (a.is_node()) { base = a.node; break; }
    if (!base) break;
    n = base;
  }
  return n;
}

// Calls fn(argument node) for every argument the op writes (schema `(a!)`).
template <typename Fn>
void ForEachWrittenArgument(const Node& n, Fn&& fn) {
  const OpInfo* info = n.opInfo();
  if (!info || !info->hasSchema()) return;
  const OpSchema& schema = info->schema;
  for (size_t i = 0; i < schema.arguments.size(); ++i) {
    if (!schema.arguments[i].is_write) continue;
    const Argument* a = nullptr;
    if (i < n.args().size() && !schema.arguments[i].kwarg_only) a = &n.args()[i];
    else a = n.kwarg(schema.arguments[i].name);
    if (a) a->forEachNode([&](Node* written) { fn(written); });
  }
}

bool InBackward(const JointClassification& c, const Node& n) { return c.in_tangents_closure[n.index()]; }

// For each alias root: the position of the last forward write (the size of the
// graph for a write after the forward), or -1 when none.
std::vector<int64_t> LastWrites(const Graph& joint, const JointClassification& c) {
  std::vector<int64_t> last(joint.size(), -1);
  const int64_t after_forward = static_cast<int64_t>(joint.size());
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.isPlaceholder() && n.meta().mutated) last[n.index()] = after_forward;
    if (!n.isCallFunction() || InBackward(c, n)) continue;
    ForEachWrittenArgument(n, [&](Node* written) {
      int64_t& slot = last[AliasRoot(written)->index()];
      if (slot != after_forward) slot = std::max<int64_t>(slot, static_cast<int64_t>(n.index()));
    });
  }
  return last;
}

// Forward nodes whose value the backward reads (directly, or through other
// forward nodes it would have to recompute): the most a partitioner could
// recompute there.
std::vector<bool> NeededByBackward(const Graph& joint, const JointClassification& c) {
  std::vector<bool> needed(joint.size(), false);
  for (Node* o : c.backward_outputs)
    if (o) needed[o->index()] = true;
  for (size_t i = joint.size(); i-- > 0;) {
    const Node& n = *joint.nodes()[i];
    if (n.isOutput()) continue;
    for (const Node* u : n.users())
      if (!u->isOutput() && (InBackward(c, *u) || needed[u->index()])) needed[i] = true;
  }
  return needed;
}

}  // namespace

bool HasForwardMutations(const Graph& joint) {
  ScopedPhase phase("has-forward-mutations");
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.isPlaceholder() && n.meta().mutated) return true;
    if (!n.isCallFunction() || MustBeInBackward(n) || n.meta().partitioner_tag == PartitionerTag::kIsBackward) continue;
    const OpInfo* info = n.opInfo();
    if (info && info->hasSchema() && info->schema.isMutable()) return true;
  }
  return false;
}

Expected<bool> ProtectMutations(Graph& joint) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  const std::vector<int64_t> last_write = LastWrites(joint, c);
  bool changed = false;
  for (const auto& up : joint.nodes()) {
    Node& n = *up;
    if (!n.isCallFunction() || InBackward(c, n) || IsViewOp(n) || n.val().is_sym()) continue;
    std::string reads;
    for (const Node* input : n.inputs()) {
      const Node* root = AliasRoot(input);
      if (last_write[root->index()] > static_cast<int64_t>(n.index())) { reads = root->name(); break; }
    }
    if (reads.empty() || n.meta().rare().reads_mutated == reads) continue;
    n.meta().mutableRare().reads_mutated = reads;
    changed = true;
  }
  return changed;
}

std::string DescribeMutation(const Graph& joint, const std::string& mutated) {
  const Node* root = joint.findNode(mutated);
  if (!root) return fmt::format("'{}' is mutated", mutated);
  if (root->isPlaceholder() && root->meta().mutated)
    return fmt::format("the program mutates the input '{}' (AOTAutograd writes its new value back after the forward)",
                       mutated);
  for (const auto& up : joint.nodes()) {
    bool writes = false;
    if (up->isCallFunction())
      ForEachWrittenArgument(*up, [&](Node* w) { writes = writes || AliasRoot(w) == root; });
    if (writes) return fmt::format("node '{}' ({}) overwrites '{}' in the forward", up->name(), up->target(), mutated);
  }
  return fmt::format("'{}' is mutated", mutated);
}

Status CheckMutationDemands(const Graph& joint) {
  bool any = false;
  for (const auto& up : joint.nodes()) any = any || !up->meta().rare().reads_mutated.empty();
  if (!any) return Status::Ok();
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  const std::vector<bool> needed = NeededByBackward(joint, c);
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.meta().rare().reads_mutated.empty() || n.meta().recompute != Decision::kMustRecompute || !needed[n.index()]) continue;
    return Status::BadInput(
        fmt::format("value '{}' is marked MUST_RECOMPUTE, but it reads '{}' before the forward overwrites it: {}. "
                    "Recomputed in the backward it would read the new data and give wrong gradients; save it "
                    "instead (Note [Mutated inputs])",
                    n.name(), n.meta().rare().reads_mutated, DescribeMutation(joint, n.meta().rare().reads_mutated)),
        fmt::format("node '{}'", n.name()));
  }
  return Status::Ok();
}

}  // namespace fxremat
