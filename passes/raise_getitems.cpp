// raise_getitems (raise_getitems.h).
#include "passes/raise_getitems.h"

#include <vector>

namespace fxremat {

Expected<bool> RaiseGetitems(Graph& graph) {
  const size_t n = graph.size();
  // The node order as a doubly linked list over node indices, so each move is O(1).
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<size_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  size_t head = n == 0 ? kNone : 0;
  bool moved = false;
  for (size_t k = n; k-- > 0;) {
    const Node& node = *graph.nodes()[k];
    if (!node.isGetItem() || node.inputs().size() != 1) continue;
    const Node& parent = *node.inputs()[0];
    if (parent.isPlaceholder()) continue;
    const size_t p = parent.index();
    if (next[p] == k) continue;  // already right after its producer
    // Unlink k, then link it after p.
    if (prev[k] != kNone) next[prev[k]] = next[k];
    else head = next[k];
    if (next[k] != kNone) prev[next[k]] = prev[k];
    prev[k] = p;
    next[k] = next[p];
    if (next[p] != kNone) prev[next[p]] = k;
    next[p] = k;
    moved = true;
  }
  if (!moved) return false;
  std::vector<Node*> order;
  order.reserve(n);
  bool same = true;
  for (size_t i = head; i != kNone; i = next[i]) {
    same = same && graph.nodes()[i]->index() == order.size();
    order.push_back(graph.nodes()[i].get());
  }
  if (same) return false;  // the moves put everything back where it was
  FXREMAT_RETURN_IF_ERROR(graph.reorderNodes(order));
  return true;
}

}  // namespace fxremat
