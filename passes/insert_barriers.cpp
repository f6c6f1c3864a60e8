// insert_barriers: the backward's recomputed nodes (forward ops replayed there:
// call_function nodes that depend on no tangent but read a saved value) form
// connected regions; each region's saved inputs (placeholders, or their offload
// reloads) pass through one xla.optimization_barrier, and only the region reads
// the barrier's results. Assumes graphs as ExtractPartition/EmitOffload emit them.
#include "passes/insert_barriers.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "src/partition_internal.h"

namespace fxremat {

namespace {

constexpr const char* kBarrier = "xla.optimization_barrier.default";

bool IsSavedPlaceholder(const Node& n) { return n.isPlaceholder() && n.role() == PlaceholderRole::kSaved; }

// An offload reload (passes/emit_offload.cpp): a transfer of a saved placeholder.
bool IsReload(const Node& n) {
  return n.isCallFunction() &&
         (n.target() == "prims.device_put.default" || n.target() == "xla.place_to_device.default") &&
         n.inputs().size() == 1 && IsSavedPlaceholder(*n.inputs()[0]);
}

bool IsBarrierResult(const Node& n) {
  return n.isGetItem() && n.inputs().size() == 1 && n.inputs()[0]->target() == kBarrier;
}

// A value a region may read from outside: a saved value as the backward receives it.
bool IsRegionSource(const Node& n) { return IsSavedPlaceholder(n) || IsReload(n); }

size_t Find(std::vector<size_t>& parent, size_t i) {
  while (parent[i] != i) i = parent[i] = parent[parent[i]];
  return i;
}

// Moves `node` (which reads only placeholders) right before `anchor`, keeping its
// name, facts and uses.
Node* MoveBefore(Graph& g, Node* node, Node* anchor) {
  return ReplaceNode(g, node, anchor, node->target(), node->args(), node->kwargs());
}

}  // namespace

Expected<bool> InsertBarriers(Partition& p) {
  Graph& bw = *p.backward;
  const size_t n = bw.size();
  // Which nodes depend on a tangent, and which read a saved value.
  std::vector<bool> from_tangent(n, false), from_saved(n, false), recomputed(n, false);
  for (const auto& up : bw.nodes()) {
    const Node& node = *up;
    const size_t i = node.index();
    if (node.isPlaceholder()) {
      from_tangent[i] = node.role() == PlaceholderRole::kTangent || node.role() == PlaceholderRole::kBwdRng;
      from_saved[i] = node.role() == PlaceholderRole::kSaved;
      continue;
    }
    for (Node* input : node.inputs()) {
      from_tangent[i] = from_tangent[i] || from_tangent[input->index()];
      from_saved[i] = from_saved[i] || from_saved[input->index()];
    }
    recomputed[i] = node.isCallFunction() && !from_tangent[i] && from_saved[i] && !IsReload(node) &&
                    node.target() != kBarrier && !IsBarrierResult(node);
  }
  // Regions: connected components of recomputed nodes.
  std::vector<size_t> parent(n);
  std::iota(parent.begin(), parent.end(), size_t{0});
  for (const auto& up : bw.nodes())
    if (recomputed[up->index()])
      for (Node* input : up->inputs())
        if (recomputed[input->index()]) parent[Find(parent, up->index())] = Find(parent, input->index());
  // Per region (ordered by its first node): its nodes and its saved tensor inputs.
  struct Region {
    std::vector<Node*> nodes;
    std::vector<Node*> inputs;
  };
  std::vector<Region> regions;
  std::vector<int64_t> region_of_root(n, -1);
  for (const auto& up : bw.nodes()) {
    Node* node = up.get();
    if (!recomputed[node->index()]) continue;
    const size_t root = Find(parent, node->index());
    if (region_of_root[root] < 0) {
      region_of_root[root] = static_cast<int64_t>(regions.size());
      regions.emplace_back();
    }
    Region& r = regions[static_cast<size_t>(region_of_root[root])];
    r.nodes.push_back(node);
    for (Node* input : node->inputs())
      if (IsRegionSource(*input) && input->val().is_tensor() &&
          std::find(r.inputs.begin(), r.inputs.end(), input) == r.inputs.end())
        r.inputs.push_back(input);
  }
  bool changed = false;
  UniqueNames barrier_names(bw, "optimization_barrier");
  for (Region& r : regions) {
    if (r.inputs.empty()) continue;
    if (!changed) EnsureOpFacts(bw, kBarrier, "xla::optimization_barrier(Tensor[] tensors) -> Tensor[]", {});
    changed = true;
    Node* first = r.nodes.front();
    // A reload placed after the region's first node moves up: the barrier reads it.
    for (Node* input : std::vector<Node*>(r.inputs)) {
      if (input->index() < first->index()) continue;
      Node* moved = MoveBefore(bw, input, first);
      for (Region& other : regions) std::replace(other.inputs.begin(), other.inputs.end(), input, moved);
    }
    std::vector<Argument> list;
    ValueFacts facts;
    facts.kind = ValueFacts::Kind::kTuple;
    for (Node* input : r.inputs) {
      list.push_back(Argument::NodeRef(input));
      facts.items.push_back(input->val());
    }
    Node* barrier = bw.createNodeBefore(first, OpKind::kCallFunction, barrier_names.next(), kBarrier,
                                        {Argument::List(std::move(list))});
    barrier->val() = facts;
    std::vector<Node*> results;
    for (size_t k = 0; k < r.inputs.size(); ++k) {
      Node* item = bw.createNodeBefore(first, OpKind::kCallFunction, bw.uniqueName(r.inputs[k]->name() + "_barrier"),
                                       "_operator.getitem",
                                       {Argument::NodeRef(barrier), Argument::Int(static_cast<int64_t>(k))});
      item->val() = r.inputs[k]->val();
      results.push_back(item);
    }
    auto through_barrier = [&](Node* v) {
      for (size_t k = 0; k < r.inputs.size(); ++k)
        if (r.inputs[k] == v) return results[k];
      return v;
    };
    for (Node* node : r.nodes) {
      std::vector<Argument> args;
      for (const Argument& a : node->args()) args.push_back(a.mapNodes(through_barrier));
      Kwargs kwargs;
      for (const auto& [k, v] : node->kwargs()) kwargs.emplace_back(k, v.mapNodes(through_barrier));
      bw.setInputs(node, std::move(args), std::move(kwargs));
    }
  }
  if (!changed) return false;
  Status check = CheckSignature(*p.forward, bw, p.signature);
  if (!check.ok()) return Status::Internal("barriers broke the signature: " + check.ToString());
  return true;
}

}  // namespace fxremat
