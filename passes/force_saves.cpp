// force_saves (Note [Forced saves] in force_saves.h).
#include "passes/force_saves.h"

#include <set>

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

}  // namespace

bool NeedsForcedSaves(const Graph& joint) {
  for (const auto& up : joint.nodes())
    if (IsCollective(*up) && !MustRecompute(*up) && up->meta().recompute != "MUST_SAVE") return true;
  bool bw_copy = false;
  ForEachTailCopy(joint, [&](const Node& n) { bw_copy = bw_copy || n.meta().partitioner_tag == "must_be_in_backward"; });
  return bw_copy;
}

Expected<bool> ForceSaves(Graph& joint) {
  bool changed = false;
  auto make_must_save = [&](Node& n) {
    if (n.meta().recompute == "MUST_SAVE") return;
    n.meta().recompute = "MUST_SAVE";
    changed = true;
  };
  for (const auto& up : joint.nodes())
    if (IsCollective(*up) && !MustRecompute(*up)) make_must_save(*up);
  std::set<const Node*> mutated_in_backward;
  std::vector<Node*> sources;
  ForEachTailCopy(joint, [&](const Node& n) {
    if (n.args().size() < 2 || !n.args()[0].is_node()) return;
    if (n.meta().partitioner_tag == "must_be_in_backward") mutated_in_backward.insert(n.args()[0].node);
    if (n.meta().partitioner_tag == "must_be_in_forward" && mutated_in_backward.count(n.args()[0].node) && n.args()[1].is_node())
      sources.push_back(n.args()[1].node);
  });
  for (Node* s : sources) make_must_save(*s);
  return changed;
}

}  // namespace fxremat
