// The peak-budget solver (passes/budget_partition.h) against an exhaustive
// search over saved sets on the small random programs of testdata/random: at
// every point of the exhaustive Pareto front (a byte budget equal to that
// point's peak), the solver stays within the budget, and its recompute cost is
// compared with the optimum's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "fxremat/pipeline.h"
#include "fxremat/serialize.h"
#include "passes/budget_partition.h"

namespace fs = std::filesystem;
using namespace fxremat;

TEST_CASE("the budget solver never exceeds a budget and is near the exhaustive optimum", "[budget]") {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(FXREMAT_SOURCE_DIR) / "testdata" / "random"))
    if (e.path().string().find(".json") != std::string::npos) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 20);
  int graphs = 0, points = 0, within = 0;
  for (const std::string& file : files) {
    INFO(file);
    auto joint = LoadGraphFile(file);
    REQUIRE(joint.ok());
    MinCutOptions options;
    auto prepared = PrepareMinCutGraph(**joint, options);
    REQUIRE(prepared.ok());
    auto front = ExhaustiveFront(**prepared, options, 14);
    if (!front.ok()) continue;  // too many candidates for an exhaustive search
    ++graphs;
    for (const FrontPoint& best : *front) {
      INFO(fmt::format("budget {} B, optimum cost {}", best.peak_bytes, best.recompute_cost));
      MinCutOptions budget = options;
      budget.memory_budget_bytes = best.peak_bytes;
      auto ours = SolvePeakBudget(**prepared, budget);
      ++points;
      if (!ours.ok()) {  // the solver did not find a partition the exhaustive search did
        std::cout << fmt::format("  {}: budget {} B: {}\n", fs::path(file).filename().string(), best.peak_bytes, ours.status().ToString());
        continue;
      }
      CHECK(ours->peak_bytes <= best.peak_bytes);
      CHECK(ours->recompute_cost >= best.recompute_cost * (1 - 1e-9));  // the optimum is a lower bound
      const bool near = ours->recompute_cost <= best.recompute_cost * 1.01 + 1e-9;
      within += near;
      if (!near)
        std::cout << fmt::format("  {}: budget {} B: solver cost {} (peak {}), optimum {}\n", fs::path(file).filename().string(),
                                 best.peak_bytes, ours->recompute_cost, ours->peak_bytes, best.recompute_cost);
    }
  }
  std::cout << fmt::format("budget solver vs exhaustive search: {} graphs, {} front points, {} within 1% of the "
                           "optimal recompute cost\n", graphs, points, within);
  REQUIRE(graphs >= 5);
  CHECK(within * 100 >= points * 90);
}
