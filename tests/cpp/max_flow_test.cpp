// Both max-flow implementations give the same cut, and that cut is a true
// minimum (checked by brute force on small networks).
#include <catch2/catch.hpp>

#include <random>

#include "src/max_flow.h"

using namespace fxremat;

namespace {

FlowNetwork RandomNetwork(std::mt19937& rng, int32_t n, int32_t edges, bool with_infinite) {
  FlowNetwork net(n);
  std::uniform_int_distribution<int32_t> vertex(0, n - 1);
  std::uniform_int_distribution<int64_t> cap(0, 20);
  std::uniform_int_distribution<int> coin(0, 9);
  for (int32_t i = 0; i < edges; ++i) {
    int32_t a = vertex(rng), b = vertex(rng);
    if (a == b) continue;
    net.addEdge(a, b, with_infinite && coin(rng) == 0 ? kInfiniteCapacity : cap(rng));
  }
  return net;
}

int64_t CutValue(const FlowNetwork& net, const std::vector<bool>& source_side) {
  int64_t total = 0;
  for (int32_t e = 0; e < net.numEdges(); ++e)
    if (source_side[static_cast<size_t>(net.from(e))] && !source_side[static_cast<size_t>(net.to(e))]) {
      if (net.capacity(e) == kInfiniteCapacity) return kInfiniteCapacity;
      total += net.capacity(e);
    }
  return total;
}

}  // namespace

TEST_CASE("Boykov-Kolmogorov, push-relabel and Dinic agree, and match brute force") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    const int32_t n = 2 + static_cast<int32_t>(rng() % 9);
    FlowNetwork net = RandomNetwork(rng, n, n * 3, /*with_infinite=*/trial % 2 == 0);
    const int32_t source = 0, sink = n - 1;
    if (!FindInfinitePath(net, source, sink).empty()) continue;
    auto bk = SolveMinCut(net, source, sink, MaxFlowAlgorithm::kBoykovKolmogorov);
    auto pr = SolveMinCut(net, source, sink, MaxFlowAlgorithm::kPushRelabel);
    auto dinic = SolveMinCut(net, source, sink, MaxFlowAlgorithm::kDinic);
    REQUIRE(bk.ok());
    REQUIRE(pr.ok());
    REQUIRE(dinic.ok());
    INFO("trial " << trial);
    CHECK(bk->value == pr->value);
    CHECK(bk->value == dinic->value);
    CHECK(bk->source_side == pr->source_side);  // the same (minimal sink side) cut
    CHECK(bk->source_side == dinic->source_side);
    CHECK(CutValue(net, bk->source_side) == bk->value);
    CHECK(bk->source_side[source]);
    CHECK_FALSE(bk->source_side[sink]);
    // Brute force over every source side that holds the source and not the sink.
    int64_t best = kInfiniteCapacity;
    for (uint32_t mask = 0; mask < (1u << n); ++mask) {
      if (!(mask & 1u) || (mask >> sink) & 1u) continue;
      std::vector<bool> side(static_cast<size_t>(n));
      for (int32_t v = 0; v < n; ++v) side[static_cast<size_t>(v)] = (mask >> v) & 1u;
      best = std::min(best, CutValue(net, side));
    }
    CHECK(bk->value == best);
  }
}

TEST_CASE("the sink side is minimal: ties go to the source side, as networkx.minimum_cut") {
  // source -a(5)-> m -b(5)-> sink: both {a} and {b} are minimum cuts; the
  // minimal sink side is {sink}, so the cut is b.
  FlowNetwork net(3);
  net.addEdge(0, 1, 5);
  net.addEdge(1, 2, 5);
  for (auto algorithm : {MaxFlowAlgorithm::kBoykovKolmogorov, MaxFlowAlgorithm::kPushRelabel, MaxFlowAlgorithm::kDinic}) {
    auto cut = SolveMinCut(net, 0, 2, algorithm);
    REQUIRE(cut.ok());
    CHECK(cut->value == 5);
    CHECK(cut->source_side == std::vector<bool>{true, true, false});
  }
}

TEST_CASE("FindInfinitePath returns a shortest all-infinite path") {
  FlowNetwork net(4);
  int32_t e0 = net.addEdge(0, 1, kInfiniteCapacity);
  net.addEdge(1, 3, 7);
  int32_t e2 = net.addEdge(1, 2, kInfiniteCapacity);
  int32_t e3 = net.addEdge(2, 3, kInfiniteCapacity);
  CHECK(FindInfinitePath(net, 0, 3) == std::vector<int32_t>{e0, e2, e3});
  FlowNetwork finite(2);
  finite.addEdge(0, 1, 3);
  CHECK(FindInfinitePath(finite, 0, 1).empty());
}

TEST_CASE("algorithm names round-trip") {
  MaxFlowAlgorithm a = MaxFlowAlgorithm::kBoykovKolmogorov;
  REQUIRE(MaxFlowAlgorithmFromName("push_relabel", a));
  CHECK(a == MaxFlowAlgorithm::kPushRelabel);
  CHECK_FALSE(MaxFlowAlgorithmFromName("ford_fulkerson", a));
}
