// Integer input ranges (fxremat/input_ranges.h).
#include "fxremat/input_ranges.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace fxremat {

namespace {

// Note [Valid integer inputs]
// Random integers are only valid inputs where the graph allows any value. An
// integer input that reaches an index argument (embedding ids, class targets,
// gather/index_select/scatter indices, one_hot) is drawn from the range that
// op accepts, intersected with the recorded value_range of the example input
// (which may hold an ignore index such as -100 that only some ops accept). The
// values flow through ops that move them without arithmetic: views, copies,
// scatters into a buffer, masked_fill, where, cat.
struct IndexBound {
  int64_t low = std::numeric_limits<int64_t>::min();
  int64_t high = std::numeric_limits<int64_t>::max();  // exclusive
  bool any = false;
  void Intersect(int64_t lo, int64_t hi) {
    low = std::max(low, lo);
    high = std::min(high, hi);
    any = true;
  }
};

// The size of dimension `dim` (negative counts from the end) of a node's tensor value, or -1.
int64_t DimSize(const Argument& a, int64_t dim) {
  if (!a.is_node() || !a.node->val().is_tensor()) return -1;
  const auto& shape = a.node->val().tensor.shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return -1;
  return shape[static_cast<size_t>(dim)].hint;
}

int64_t IntArg(const Node& n, size_t i, int64_t fallback) {
  return i < n.args().size() && n.args()[i].kind == Argument::Kind::kInt ? n.args()[i].int_value : fallback;
}

IndexBound ValidIndexRange(const Graph& graph, const Node& input) {
  static const std::unordered_set<std::string_view> kCarriers = {
      "aten.clone", "aten.copy", "aten._to_copy", "aten.slice_scatter", "aten.select_scatter",
      "aten.diagonal_scatter", "aten.masked_fill", "aten.where", "aten.cat", "aten.stack", "aten.contiguous",
      "aten.reshape", "aten.lift_fresh_copy", "aten.index_put", "aten.flatten", "aten.repeat",
      "prims.convert_element_type"};
  IndexBound bound;
  std::vector<bool> carries(graph.size(), false);
  carries[input.index()] = true;
  auto carried = [&](const Argument& a) {
    bool c = false;
    a.forEachNode([&](Node* n) { c = c || carries[n->index()]; });
    return c;
  };
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    if (!n.isCallFunction()) continue;
    bool reads = false;
    for (const Node* in : n.inputs()) reads = reads || carries[in->index()];
    if (!reads) continue;
    const std::string_view t = n.target();
    const std::string_view packet = t.substr(0, t.rfind('.'));
    const OpInfo* info = n.opInfo();
    const bool alias = info && info->hasSchema() && info->schema.returnsAlias();
    if ((alias || kCarriers.count(packet)) && n.val().is_tensor() && DTypeIsIntegral(n.val().tensor.dtype))
      carries[n.index()] = true;
    const auto& args = n.args();
    auto arg_carried = [&](size_t i) { return i < args.size() && carried(args[i]); };
    if (packet == "aten.embedding" && arg_carried(1)) {
      if (int64_t v = DimSize(args[0], 0); v >= 0) bound.Intersect(0, v);
    } else if (packet == "aten.embedding_dense_backward" && arg_carried(1)) {
      bound.Intersect(0, IntArg(n, 2, std::numeric_limits<int64_t>::max()));
    } else if ((packet == "aten.nll_loss_forward" || packet == "aten.nll_loss2d_forward" ||
                packet == "aten.nll_loss_backward" || packet == "aten.nll_loss2d_backward") &&
               arg_carried(packet.find("backward") != std::string_view::npos ? 2 : 1)) {
      const size_t self = packet.find("backward") != std::string_view::npos ? 1 : 0;
      const int64_t rank = args[self].is_node() && args[self].node->val().is_tensor()
                               ? static_cast<int64_t>(args[self].node->val().tensor.shape.size()) : 0;
      if (int64_t c = DimSize(args[self], rank >= 2 ? 1 : 0); c >= 0) bound.Intersect(0, c);
    } else if ((packet == "aten.gather" || packet == "aten.index_select" || packet == "aten.scatter" ||
                packet == "aten.scatter_add" || packet == "aten.scatter_reduce") && arg_carried(2)) {
      if (int64_t v = DimSize(args[0], IntArg(n, 1, 0)); v >= 0) bound.Intersect(0, v);
    } else if (packet == "aten.index" && args.size() > 1 && args[1].kind == Argument::Kind::kList) {
      for (size_t k = 0; k < args[1].list.size(); ++k)
        if (carried(args[1].list[k]))
          if (int64_t v = DimSize(args[0], static_cast<int64_t>(k)); v >= 0) bound.Intersect(0, v);
    } else if (packet == "aten.one_hot" && arg_carried(0)) {
      if (int64_t c = IntArg(n, 1, -1); c > 0) bound.Intersect(0, c);
    }
  }
  return bound;
}

}  // namespace

std::pair<int64_t, int64_t> IntegerInputRange(const Node& node) {
  const IndexBound bound = ValidIndexRange(*node.owningGraph(), node);
  const auto& recorded = node.meta().rare().value_range;
  if (!bound.any) return recorded ? *recorded : std::pair<int64_t, int64_t>{0, 0};
  if (recorded) {
    const int64_t lo = std::max(bound.low, recorded->first), hi = std::min(bound.high, recorded->second);
    if (lo < hi) return {lo, hi};
  }
  return {bound.low, bound.high};
}

}  // namespace fxremat
