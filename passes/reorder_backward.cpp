// reorder_backward (Note [Autograd-engine order] in reorder_backward.h).
#include "passes/reorder_backward.h"

#include <algorithm>
#include <vector>

namespace fxremat {

Expected<bool> ReorderBackward(Graph& backward) {
  const size_t n = backward.size();
  const auto& nodes = backward.nodes();
  size_t first_bwd = n;
  for (const auto& up : nodes)
    if (up->isPlaceholder() && up->role() == PlaceholderRole::kTangent)
      for (const Node* user : up->users()) first_bwd = std::min(first_bwd, user->index());
  if (first_bwd == n) return false;

  std::vector<bool> placed(n, false);
  std::vector<Node*> order;
  order.reserve(n);
  for (const auto& up : nodes)
    if (up->isPlaceholder()) {
      order.push_back(up.get());
      placed[up->index()] = true;
    }
  std::vector<Node*> stack, found;
  std::vector<bool> in_found(n, false);
  auto insert = [&](Node* start) {
    stack.assign(1, start);
    found.clear();
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      if (in_found[node->index()] || placed[node->index()]) continue;
      in_found[node->index()] = true;
      found.push_back(node);
      for (Node* input : node->inputs()) stack.push_back(input);
    }
    std::sort(found.begin(), found.end(), [](const Node* a, const Node* b) { return a->index() < b->index(); });
    for (Node* node : found) {
      placed[node->index()] = true;
      order.push_back(node);
    }
  };
  for (size_t i = 0; i < first_bwd; ++i)
    if (nodes[i]->isCallFunction() && nodes[i]->target() == "aten.copy_.default") insert(nodes[i].get());
  for (size_t i = first_bwd; i < n; ++i) insert(nodes[i].get());

  std::vector<Node*> dropped;
  for (const auto& up : nodes)
    if (!placed[up->index()]) dropped.push_back(up.get());
  bool same = dropped.empty();
  for (size_t k = 0; same && k < order.size(); ++k) same = order[k]->index() == k;
  if (same) return false;
  // Dropped nodes are not inputs of placed ones (every input of a placed node
  // was placed first); erase them after moving them to the end.
  std::vector<Node*> full = order;
  Node* output = full.back();
  full.pop_back();
  full.insert(full.end(), dropped.begin(), dropped.end());
  full.push_back(output);
  if (!output->isOutput()) return Status::Internal("reorder_backward: the output node was not placed last");
  FXREMAT_RETURN_IF_ERROR(backward.reorderNodes(full));
  backward.eraseNodes(dropped);
  return true;
}

}  // namespace fxremat
