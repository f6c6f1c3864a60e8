// Max-flow / min-cut through Boost.Graph (Boykov-Kolmogorov, push-relabel).
// The cut is read off the residual graph: the sink side is every vertex that
// can still reach the sink. That set is the same for every maximum flow, so
// both algorithms give the same cut as networkx's minimum_cut, which the
// reference uses and which reads its partition off the residual graph the
// same way.
#include "src/max_flow.h"

#include <deque>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/boykov_kolmogorov_max_flow.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>
#include <fmt/format.h>

namespace fxremat {

std::string_view MaxFlowAlgorithmName(MaxFlowAlgorithm algorithm) {
  switch (algorithm) {
    case MaxFlowAlgorithm::kBoykovKolmogorov: return "boykov_kolmogorov";
    case MaxFlowAlgorithm::kPushRelabel: return "push_relabel";
    case MaxFlowAlgorithm::kDinic: return "dinic";
  }
  return "?";
}

bool MaxFlowAlgorithmFromName(std::string_view name, MaxFlowAlgorithm& out) {
  for (MaxFlowAlgorithm a : {MaxFlowAlgorithm::kBoykovKolmogorov, MaxFlowAlgorithm::kPushRelabel, MaxFlowAlgorithm::kDinic}) {
    if (MaxFlowAlgorithmName(a) == name) {
      out = a;
      return true;
    }
  }
  return false;
}

int32_t FlowNetwork::addEdge(int32_t from, int32_t to, int64_t capacity) {
  from_.push_back(from);
  to_.push_back(to);
  capacity_.push_back(capacity);
  return static_cast<int32_t>(from_.size() - 1);
}

std::vector<int32_t> FindInfinitePath(const FlowNetwork& network, int32_t source, int32_t sink) {
  const int32_t n = network.numVertices();
  // Each vertex's infinite out-edges in insertion order, as one array sliced
  // by vertex (a vector per vertex cost an allocation each: 2 million of
  // them at a million nodes).
  std::vector<int32_t> first(static_cast<size_t>(n) + 1, 0);
  for (int32_t e = 0; e < network.numEdges(); ++e)
    if (network.capacity(e) == kInfiniteCapacity) ++first[static_cast<size_t>(network.from(e)) + 1];
  for (size_t v = 0; v < static_cast<size_t>(n); ++v) first[v + 1] += first[v];
  std::vector<int32_t> edges(static_cast<size_t>(first.back()));
  {
    std::vector<int32_t> next(first.begin(), first.end() - 1);
    for (int32_t e = 0; e < network.numEdges(); ++e)
      if (network.capacity(e) == kInfiniteCapacity) edges[static_cast<size_t>(next[static_cast<size_t>(network.from(e))]++)] = e;
  }
  // BFS in edge-insertion order, like the reference's _find_infinite_capacity_path.
  std::vector<int32_t> via(static_cast<size_t>(n), -1);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  std::deque<int32_t> queue{source};
  seen[static_cast<size_t>(source)] = true;
  while (!queue.empty()) {
    int32_t v = queue.front();
    queue.pop_front();
    for (int32_t k = first[static_cast<size_t>(v)]; k < first[static_cast<size_t>(v) + 1]; ++k) {
      const int32_t e = edges[static_cast<size_t>(k)];
      int32_t w = network.to(e);
      if (seen[static_cast<size_t>(w)]) continue;
      seen[static_cast<size_t>(w)] = true;
      via[static_cast<size_t>(w)] = e;
      if (w == sink) {
        std::vector<int32_t> path;
        for (int32_t x = sink; x != source; x = network.from(via[static_cast<size_t>(x)]))
          path.push_back(via[static_cast<size_t>(x)]);
        return {path.rbegin(), path.rend()};
      }
      queue.push_back(w);
    }
  }
  return {};
}

// dinic_max_flow.cpp
Expected<MinCut> DinicMinCut(const FlowNetwork& network, int32_t source, int32_t sink, int64_t infinite);

namespace {

using Traits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
struct EdgeProps {
  int64_t capacity = 0;
  int64_t residual = 0;
  Traits::edge_descriptor reverse;
};
using BoostGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS,
                                         boost::property<boost::vertex_index_t, int32_t>, EdgeProps>;

}  // namespace

Expected<MinCut> SolveMinCut(const FlowNetwork& network, int32_t source, int32_t sink,
                             MaxFlowAlgorithm algorithm) {
  const int32_t n = network.numVertices();
  if (source < 0 || source >= n || sink < 0 || sink >= n || source == sink)
    return Status::Internal("bad source or sink vertex");
  // Infinite edges become one more than the sum of the finite capacities: no
  // cut containing one can be minimal, and (without an all-infinite path) no
  // flow can exceed that sum, so nothing overflows.
  int64_t finite_sum = 0;
  for (int32_t e = 0; e < network.numEdges(); ++e) {
    int64_t c = network.capacity(e);
    if (c < 0) return Status::Internal(fmt::format("negative capacity on edge {}", e));
    if (c == kInfiniteCapacity) continue;
    if (finite_sum > std::numeric_limits<int64_t>::max() / 4 - c)
      return Status::BadInput("the graph's byte counts are too large to cut exactly (over 2^61 in total)");
    finite_sum += c;
  }
  const int64_t infinite = finite_sum + 1;
  if (algorithm == MaxFlowAlgorithm::kDinic) return DinicMinCut(network, source, sink, infinite);

  BoostGraph g(static_cast<size_t>(n));
  for (int32_t e = 0; e < network.numEdges(); ++e) {
    int64_t c = network.capacity(e);
    auto forward = boost::add_edge(static_cast<size_t>(network.from(e)), static_cast<size_t>(network.to(e)), g).first;
    auto backward = boost::add_edge(static_cast<size_t>(network.to(e)), static_cast<size_t>(network.from(e)), g).first;
    g[forward].capacity = c == kInfiniteCapacity ? infinite : c;
    g[backward].capacity = 0;
    g[forward].reverse = backward;
    g[backward].reverse = forward;
  }
  auto capacity = boost::get(&EdgeProps::capacity, g);
  auto residual = boost::get(&EdgeProps::residual, g);
  auto reverse = boost::get(&EdgeProps::reverse, g);
  auto index = boost::get(boost::vertex_index, g);
  int64_t flow = 0;
  if (algorithm == MaxFlowAlgorithm::kBoykovKolmogorov) {
    std::vector<boost::default_color_type> color(static_cast<size_t>(n));
    std::vector<Traits::edge_descriptor> pred(static_cast<size_t>(n));
    std::vector<int64_t> distance(static_cast<size_t>(n));
    flow = boost::boykov_kolmogorov_max_flow(
        g, capacity, residual, reverse, boost::make_iterator_property_map(pred.begin(), index),
        boost::make_iterator_property_map(color.begin(), index),
        boost::make_iterator_property_map(distance.begin(), index), index, static_cast<size_t>(source),
        static_cast<size_t>(sink));
  } else {
    flow = boost::push_relabel_max_flow(g, static_cast<size_t>(source), static_cast<size_t>(sink),
                                        boost::capacity_map(capacity).residual_capacity_map(residual).reverse_edge_map(reverse));
  }
  if (flow >= infinite) return Status::Internal("max flow reached the infinite capacity");

  // The sink side: vertices that can still reach the sink through edges with
  // residual capacity (a backwards search over those edges).
  std::vector<std::vector<int32_t>> residual_preds(static_cast<size_t>(n));
  for (size_t v = 0; v < static_cast<size_t>(n); ++v)
    for (auto [it, end] = boost::out_edges(v, g); it != end; ++it)
      if (g[*it].residual > 0) residual_preds[boost::target(*it, g)].push_back(static_cast<int32_t>(v));
  std::vector<bool> reaches_sink(static_cast<size_t>(n), false);
  std::deque<int32_t> queue{sink};
  reaches_sink[static_cast<size_t>(sink)] = true;
  while (!queue.empty()) {
    int32_t v = queue.front();
    queue.pop_front();
    for (int32_t u : residual_preds[static_cast<size_t>(v)]) {
      if (reaches_sink[static_cast<size_t>(u)]) continue;
      reaches_sink[static_cast<size_t>(u)] = true;
      queue.push_back(u);
    }
  }
  MinCut cut;
  cut.value = flow;
  cut.source_side.resize(static_cast<size_t>(n));
  for (size_t v = 0; v < static_cast<size_t>(n); ++v) cut.source_side[v] = !reaches_sink[v];
  return cut;
}

}  // namespace fxremat
