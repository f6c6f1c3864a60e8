// force_saves (Note [Forced saves] in force_saves.h).
#include "passes/force_saves.h"
#include "fxremat/phases.h"

#include <set>

#include "src/facts_check.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

bool IsCollective(const Node& n) { return n.isCallFunction() && n.target().starts_with("_c10d_functional."); }

// The copy_ nodes at the tail of the graph (the reference walks back from the
// output and stops at the first other node).
template <typename Fn>
void ForEachTailCopy(const Graph& joint, Fn&& fn) {
  const auto& nodes = joint.nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node& n = *nodes[i];
    if (n.isOutput()) continue;
    if (!n.isCallFunction() || n.target() != "aten.copy_.default") break;
    fn(n);
  }
}

// A graph that runs an effectful op (a with_effects node, in it or in a
// subgraph it calls).
bool RunsEffects(const Graph& g, int depth = 0) {
  if (depth > kMaxSubgraphNesting) return false;  // the readers refuse deeper nesting
  for (const auto& up : g.nodes()) {
    if (up->isCallFunction() && up->target() == "higher_order.with_effects") return true;
    if (const Graph* sub = g.subgraphOf(*up); sub && RunsEffects(*sub, depth + 1)) return true;
  }
  return false;
}

// The reference's is_with_effects: with_effects, or an invoke_subgraph whose
// body has effects.
bool IsWithEffects(const Node& n) {
  if (!n.isCallFunction()) return false;
  if (n.target() == "higher_order.with_effects") return true;
  if (n.target() != "higher_order.invoke_subgraph" || n.args().empty() || !n.args()[0].is_node()) return false;
  const Graph* body = n.owningGraph()->subgraphOf(*n.args()[0].node);
  return body && RunsEffects(*body);
}

// force_save_effectful_ops: the leaf getitems of a forward with_effects are
// MUST_SAVE, so the effectful op never runs again in the backward.
template <typename Fn>
void ForEachEffectfulResult(const Node& n, Fn&& fn) {
  for (Node* user : n.users()) {
    if (!user->isGetItem()) continue;
    ForEachEffectfulResult(*user, fn);
    if (user->val().kind != ValueFacts::Kind::kTuple) fn(*user);
  }
}

bool IsForwardEffect(const Node& n) {
  return IsWithEffects(n) && !MustRecompute(n) && n.meta().partitioner_tag != PartitionerTag::kIsBackward;
}

// Note [Bodies that return their inputs] (src/classify.cpp): such a call stays
// in the forward. Its results are MUST_SAVE so that every partitioner and
// every objective agrees: a checkpoint region around the call tags them
// PREFER_RECOMPUTE, and the budget solver, which never saves a value tagged
// for recompute, then had no way to give the backward the call's results
// ("'invoke_subgraph_4' ... must run in the other graph": checkpoint around a
// nested_compile_region call under any budget, found by a bug hunt).
bool IsPinnedHop(const Node& n) {
  return n.meta().partitioner_tag == PartitionerTag::kIsForward && HopReturnsItsInputs(n);
}

// A node whose leaf results ForceSaves makes MUST_SAVE.
bool ResultsMustBeSaved(const Node& n) { return IsForwardEffect(n) || IsPinnedHop(n); }

}  // namespace

bool NeedsForcedSaves(const Graph& joint) {
  ScopedPhase phase("needs-forced-saves");
  for (const auto& up : joint.nodes())
    if (IsCollective(*up) && !MustRecompute(*up) && up->meta().recompute != Decision::kMustSave) return true;
  for (const auto& up : joint.nodes()) {
    if (!ResultsMustBeSaved(*up)) continue;
    bool unsaved = false;
    ForEachEffectfulResult(*up, [&](const Node& r) { unsaved = unsaved || r.meta().recompute != Decision::kMustSave; });
    if (unsaved) return true;
  }
  bool bw_copy = false;
  ForEachTailCopy(joint, [&](const Node& n) { bw_copy = bw_copy || n.meta().partitioner_tag == PartitionerTag::kMustBeInBackward; });
  return bw_copy;
}

Expected<bool> ForceSaves(Graph& joint) {
  bool changed = false;
  auto make_must_save = [&](Node& n) {
    if (n.meta().recompute == Decision::kMustSave) return;
    n.meta().recompute = Decision::kMustSave;
    changed = true;
  };
  for (const auto& up : joint.nodes())
    if (IsCollective(*up) && !MustRecompute(*up)) make_must_save(*up);
  for (const auto& up : joint.nodes())
    if (ResultsMustBeSaved(*up)) ForEachEffectfulResult(*up, [&](const Node& r) { make_must_save(const_cast<Node&>(r)); });
  std::set<const Node*> mutated_in_backward;
  std::vector<Node*> sources;
  ForEachTailCopy(joint, [&](const Node& n) {
    if (n.args().size() < 2 || !n.args()[0].is_node()) return;
    if (n.meta().partitioner_tag == PartitionerTag::kMustBeInBackward) mutated_in_backward.insert(n.args()[0].node);
    if (n.meta().partitioner_tag == PartitionerTag::kMustBeInForward && mutated_in_backward.count(n.args()[0].node) && n.args()[1].is_node())
      sources.push_back(n.args()[1].node);
  });
  for (Node* s : sources) make_must_save(*s);
  return changed;
}

}  // namespace fxremat
