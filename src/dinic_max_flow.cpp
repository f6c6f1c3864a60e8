// fxremat's own max flow: Dinic's algorithm on flat (CSR) arrays. Joint graphs
// give networks whose augmenting paths are short (source -> a banned forward
// value -> a few data edges -> a backward value -> sink), so Dinic needs few
// phases, and flat arrays avoid the per-vertex allocations of an adjacency
// list. The cut is read off the residual graph exactly as for the Boost
// algorithms (Note in max_flow.h), so all implementations agree.
#include <algorithm>

#include "src/max_flow.h"

namespace fxremat {

Expected<MinCut> DinicMinCut(const FlowNetwork& network, int32_t source, int32_t sink, int64_t infinite) {
  const int32_t n = network.numVertices();
  const int32_t m = network.numEdges();
  // Arc 2e is edge e, arc 2e+1 its reverse; arcs are grouped by tail vertex.
  std::vector<int32_t> start(static_cast<size_t>(n) + 1, 0);
  for (int32_t e = 0; e < m; ++e) {
    ++start[static_cast<size_t>(network.from(e)) + 1];
    ++start[static_cast<size_t>(network.to(e)) + 1];
  }
  for (int32_t v = 0; v < n; ++v) start[static_cast<size_t>(v) + 1] += start[static_cast<size_t>(v)];
  std::vector<int32_t> head(2 * static_cast<size_t>(m)), twin(2 * static_cast<size_t>(m));
  std::vector<int64_t> residual(2 * static_cast<size_t>(m));
  {
    std::vector<int32_t> fill(start.begin(), start.end() - 1);
    for (int32_t e = 0; e < m; ++e) {
      const int32_t u = network.from(e), v = network.to(e);
      const int32_t a = fill[static_cast<size_t>(u)]++, b = fill[static_cast<size_t>(v)]++;
      head[static_cast<size_t>(a)] = v;
      head[static_cast<size_t>(b)] = u;
      twin[static_cast<size_t>(a)] = b;
      twin[static_cast<size_t>(b)] = a;
      const int64_t c = network.capacity(e);
      residual[static_cast<size_t>(a)] = c == kInfiniteCapacity ? infinite : c;
      residual[static_cast<size_t>(b)] = 0;
    }
  }
  std::vector<int32_t> level(static_cast<size_t>(n)), queue(static_cast<size_t>(n)), current(static_cast<size_t>(n));
  std::vector<int32_t> path;  // arcs of the current DFS path
  int64_t flow = 0;
  while (true) {
    // BFS levels from the source over arcs with residual capacity.
    std::fill(level.begin(), level.end(), -1);
    int32_t qh = 0, qt = 0;
    queue[static_cast<size_t>(qt++)] = source;
    level[static_cast<size_t>(source)] = 0;
    while (qh < qt && level[static_cast<size_t>(sink)] < 0) {
      const int32_t v = queue[static_cast<size_t>(qh++)];
      for (int32_t a = start[static_cast<size_t>(v)]; a < start[static_cast<size_t>(v) + 1]; ++a) {
        const int32_t w = head[static_cast<size_t>(a)];
        if (residual[static_cast<size_t>(a)] > 0 && level[static_cast<size_t>(w)] < 0) {
          level[static_cast<size_t>(w)] = level[static_cast<size_t>(v)] + 1;
          queue[static_cast<size_t>(qt++)] = w;
        }
      }
    }
    if (level[static_cast<size_t>(sink)] < 0) break;
    std::copy(start.begin(), start.end() - 1, current.begin());
    // Blocking flow: iterative DFS with current-arc pointers.
    int32_t v = source;
    path.clear();
    while (true) {
      if (v == sink) {
        int64_t push = infinite;
        for (int32_t a : path) push = std::min(push, residual[static_cast<size_t>(a)]);
        for (int32_t a : path) {
          residual[static_cast<size_t>(a)] -= push;
          residual[static_cast<size_t>(twin[static_cast<size_t>(a)])] += push;
        }
        flow += push;
        // Restart from the tail of the first saturated arc.
        size_t keep = 0;
        while (keep < path.size() && residual[static_cast<size_t>(path[keep])] > 0) ++keep;
        v = keep == 0 ? source : head[static_cast<size_t>(path[keep - 1])];
        path.resize(keep);
        continue;
      }
      int32_t& a = current[static_cast<size_t>(v)];
      const int32_t end = start[static_cast<size_t>(v) + 1];
      while (a < end && (residual[static_cast<size_t>(a)] <= 0 ||
                         level[static_cast<size_t>(head[static_cast<size_t>(a)])] != level[static_cast<size_t>(v)] + 1))
        ++a;
      if (a < end) {
        path.push_back(a);
        v = head[static_cast<size_t>(a)];
        continue;
      }
      // Dead end: retreat and never enter v again in this phase.
      level[static_cast<size_t>(v)] = -1;
      if (path.empty()) break;
      const int32_t back = path.back();
      path.pop_back();
      v = head[static_cast<size_t>(twin[static_cast<size_t>(back)])];
      ++current[static_cast<size_t>(v)];
    }
  }
  // Sink side: vertices that reach the sink through arcs with residual capacity.
  std::vector<bool> reaches_sink(static_cast<size_t>(n), false);
  int32_t qh = 0, qt = 0;
  queue[static_cast<size_t>(qt++)] = sink;
  reaches_sink[static_cast<size_t>(sink)] = true;
  while (qh < qt) {
    const int32_t v = queue[static_cast<size_t>(qh++)];
    // An arc u->v has residual capacity iff residual[twin of (v->u)] > 0.
    for (int32_t b = start[static_cast<size_t>(v)]; b < start[static_cast<size_t>(v) + 1]; ++b) {
      const int32_t u = head[static_cast<size_t>(b)];
      if (!reaches_sink[static_cast<size_t>(u)] && residual[static_cast<size_t>(twin[static_cast<size_t>(b)])] > 0) {
        reaches_sink[static_cast<size_t>(u)] = true;
        queue[static_cast<size_t>(qt++)] = u;
      }
    }
  }
  MinCut cut;
  cut.value = flow;
  cut.source_side.resize(static_cast<size_t>(n));
  for (int32_t v = 0; v < n; ++v) cut.source_side[static_cast<size_t>(v)] = !reaches_sink[static_cast<size_t>(v)];
  return cut;
}

}  // namespace fxremat
