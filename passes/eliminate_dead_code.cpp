// eliminate_dead_code (eliminate_dead_code.h).
#include "passes/eliminate_dead_code.h"
#include "fxremat/phases.h"

#include <set>
#include <string>

#include "fxremat/op_categories.h"

namespace fxremat {

std::vector<Node*> FindDeadCode(const Graph& graph) {
  ScopedPhase phase("find-dead-code");
  const size_t n = graph.size();
  std::vector<size_t> live_users(n, 0);
  for (const auto& up : graph.nodes()) live_users[up->index()] = up->users().size();
  std::vector<bool> dead(n, false);
  for (size_t i = n; i-- > 0;) {
    if (live_users[i] != 0) continue;  // first: the impurity test looks the target up by text
    const Node& node = *graph.nodes()[i];
    const bool removable = (node.isCallFunction() && !IsFxImpure(node, /*impure_random=*/false)) ||
                           node.op() == OpKind::kGetAttr;
    if (!removable) continue;
    dead[i] = true;
    for (const Node* input : node.inputs()) --live_users[input->index()];
  }
  std::vector<Node*> out;
  for (const auto& up : graph.nodes())
    if (dead[up->index()]) out.push_back(up.get());
  return out;
}

Expected<bool> EliminateDeadCode(Graph& graph) {
  std::vector<Node*> dead = FindDeadCode(graph);
  if (dead.empty()) return false;
  graph.eraseNodes(dead);
  std::set<std::string> read;
  for (const auto& up : graph.nodes())
    if (up->op() == OpKind::kGetAttr) read.insert(up->target());
  for (auto it = graph.constants().begin(); it != graph.constants().end();)
    it = read.count(it->first) ? std::next(it) : graph.constants().erase(it);
  for (auto it = graph.subgraphs().begin(); it != graph.subgraphs().end();)
    it = read.count(it->first) ? std::next(it) : graph.subgraphs().erase(it);
  return true;
}

}  // namespace fxremat
