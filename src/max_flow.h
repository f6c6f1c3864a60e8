// Max-flow / min-cut behind one small interface. Implementations: Boost.Graph's
// Boykov-Kolmogorov and push-relabel, and fxremat's own Dinic on flat arrays
// (dinic_max_flow.cpp), kept because it is the fastest of the three on joint graphs
// (docs/benchmarks_max_flow.md, bench/max_flow_bench.py). Capacities are
// non-negative int64; kInfiniteCapacity marks edges that can never be cut.
// Every implementation returns the same cut: the sink side is the set of
// vertices that can reach the sink in the residual graph of a maximum flow
// (the unique minimal sink side, as networkx.minimum_cut returns it), so
// results do not depend on the algorithm.
#pragma once

#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "fxremat/partition_options.h"
#include "fxremat/status.h"

namespace fxremat {

inline constexpr int64_t kInfiniteCapacity = std::numeric_limits<int64_t>::max();

class FlowNetwork {
 public:
  explicit FlowNetwork(int32_t num_vertices) : num_vertices_(num_vertices) {}
  // Adds a directed edge; returns its id. Parallel edges are allowed.
  int32_t addEdge(int32_t from, int32_t to, int64_t capacity);
  int32_t numVertices() const { return num_vertices_; }
  int32_t numEdges() const { return static_cast<int32_t>(from_.size()); }
  int32_t from(int32_t e) const { return from_[static_cast<size_t>(e)]; }
  int32_t to(int32_t e) const { return to_[static_cast<size_t>(e)]; }
  int64_t capacity(int32_t e) const { return capacity_[static_cast<size_t>(e)]; }

 private:
  int32_t num_vertices_;
  std::vector<int32_t> from_, to_;
  std::vector<int64_t> capacity_;
};

struct MinCut {
  int64_t value = 0;                 // sum of the capacities of the cut edges
  std::vector<bool> source_side;     // per vertex: cannot reach the sink in the residual graph
};

// Cuts `network` between source and sink. The caller guarantees there is no
// source→sink path made only of infinite edges (check with FindInfinitePath):
// then infinite capacities are replaced by a finite value larger than the sum
// of all finite ones, and no sum can overflow.
Expected<MinCut> SolveMinCut(const FlowNetwork& network, int32_t source, int32_t sink,
                             MaxFlowAlgorithm algorithm);

// A shortest source→sink path of infinite edges (edge ids), or empty if none:
// the reason a minimum cut would be infinite.
std::vector<int32_t> FindInfinitePath(const FlowNetwork& network, int32_t source, int32_t sink);

}  // namespace fxremat
