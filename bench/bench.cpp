// fxremat_bench: times fxremat's partitioner on one joint graph, in process.
//
//   fxremat_bench GRAPH [--repeat N] [--partitioner mincut|default] [--max-flow NAME]
//                 [--only solver|partition]
//
// Loads GRAPH once (timed once), then times, N times each:
//   solver     the choice of saved values alone. mincut: SolveMinCut (flow
//              network build + max flow + cut) on the graph MinCutPartition would
//              hand it (CSE'd and tag-cleaned once beforehand, not timed here);
//              default: ChooseDefaultSavedValues.
//   partition  the whole pass: MinCutPartition / DefaultPartition (preparation,
//              solver, extraction of forward and backward graphs, signature check).
// and prints one JSON line: nodes, load_ms, solver_ms [...], partition_ms [...],
// saved_bytes, saved_count (and, for mincut, the flow network's size and cut).
// Exit 2 on bad input or usage. See docs/benchmarks.md.
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "fxremat/phases.h"
#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "passes/cleanup_recompute_tags.h"
#include "passes/cse.h"
#include "passes/default_partition.h"
#include "passes/min_cut_partition.h"
#include "src/max_flow.h"

using namespace fxremat;

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "fxremat_bench: " << why << "\n"
            << "usage: fxremat_bench GRAPH [--repeat N] [--partitioner mincut|default] [--max-flow NAME]\n"
            << "                     [--only solver|partition]\n";
  std::exit(2);
}

int Fail(const Status& st) {
  std::cerr << "fxremat_bench: error: " << st.ToString() << "\n";
  return 2;
}

std::string JsonList(const std::vector<double>& v) {
  std::vector<std::string> items;
  items.reserve(v.size());
  for (double x : v) items.push_back(fmt::format("{:.4f}", x));
  return fmt::format("[{}]", fmt::join(items, ","));
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, partitioner = "mincut", max_flow, only;
  int repeat = 5;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(fmt::format("{} needs a value", a));
      return argv[++i];
    };
    if (a == "--repeat") {
      std::string v = next();
      repeat = std::atoi(v.c_str());
      if (repeat <= 0) Usage("--repeat expects a positive integer");
    } else if (a == "--partitioner") {
      partitioner = next();
    } else if (a == "--max-flow") {
      max_flow = next();
    } else if (a == "--only") {
      only = next();
      if (only != "solver" && only != "partition") Usage("--only takes solver or partition");
    } else if (a == "-h" || a == "--help") {
      Usage("help");
    } else if (!a.empty() && a[0] == '-') {
      Usage(fmt::format("unknown option '{}'", a));
    } else if (path.empty()) {
      path = a;
    } else {
      Usage("exactly one GRAPH");
    }
  }
  if (path.empty()) Usage("GRAPH is required");
  if (partitioner != "mincut" && partitioner != "default")
    Usage(fmt::format("unknown partitioner '{}' (mincut, default)", partitioner));

  const auto t_load0 = Clock::now();
  auto loaded = LoadGraphFile(path);
  const auto t_load1 = Clock::now();
  if (!loaded.ok()) return Fail(loaded.status());
  const Graph& joint = **loaded;
  if (joint.kind() != GraphKind::kJoint) return Fail(Status::BadInput("expected a joint graph", path));

  const int solver_runs = only == "partition" ? 0 : repeat;
  const int partition_runs = only == "solver" ? 0 : repeat;
  std::vector<double> solver_ms, partition_ms;
  int64_t saved_bytes = -1, saved_count = -1, solver_saved = -1;
  std::string extra;
  PhaseLog phases;

  if (partitioner == "default") {
    if (!max_flow.empty()) Usage("--max-flow applies to --partitioner mincut only");
    for (int r = 0; r < solver_runs; ++r) {
      const auto t0 = Clock::now();
      auto saved = ChooseDefaultSavedValues(joint);
      const auto t1 = Clock::now();
      if (!saved.ok()) return Fail(saved.status().WithContext(path));
      solver_ms.push_back(Ms(t0, t1));
      solver_saved = static_cast<int64_t>(saved->size());
    }
    for (int r = 0; r < partition_runs; ++r) {
      const auto t0 = Clock::now();
      auto part = DefaultPartition(joint);
      const auto t1 = Clock::now();
      if (!part.ok()) return Fail(part.status().WithContext(path));
      partition_ms.push_back(Ms(t0, t1));
      saved_bytes = part->signature.savedBytes();
      saved_count = static_cast<int64_t>(part->signature.saved.size());
    }
  } else {
    MinCutOptions options;
    if (!max_flow.empty() && !MaxFlowAlgorithmFromName(max_flow, options.max_flow))
      Usage(fmt::format("unknown max-flow algorithm '{}'", max_flow));
    // The graph SolveMinCut sees inside MinCutPartition: CSE'd and tag-cleaned.
    const auto t_prep0 = Clock::now();
    std::unique_ptr<Graph> prepared = CloneGraph(joint);
    if (options.cse) {
      auto cse = EliminateCommonSubexpressions(*prepared);
      if (!cse.ok()) return Fail(cse.status().WithContext(path));
    }
    auto cleaned = CleanupRecomputeTags(*prepared, /*is_default_partition=*/false);
    if (!cleaned.ok()) return Fail(cleaned.status().WithContext(path));
    const auto t_prep1 = Clock::now();
    MinCutSolution last;
    for (int r = 0; r < solver_runs; ++r) {
      const auto t0 = Clock::now();
      auto solution = SolveMinCut(*prepared, options);
      const auto t1 = Clock::now();
      if (!solution.ok()) return Fail(solution.status().WithContext(path));
      solver_ms.push_back(Ms(t0, t1));
      last = std::move(solution).value();
    }
    if (solver_runs > 0) solver_saved = static_cast<int64_t>(last.saved_values.size());
    for (int r = 0; r < partition_runs; ++r) {
      phases = PhaseLog();  // the last run's phases
      ScopedPhaseLog phase_scope(&phases);
      const auto t0 = Clock::now();
      auto part = MinCutPartition(joint, options);
      const auto t1 = Clock::now();
      if (!part.ok()) return Fail(part.status().WithContext(path));
      partition_ms.push_back(Ms(t0, t1));
      saved_bytes = part->signature.savedBytes();
      saved_count = static_cast<int64_t>(part->signature.saved.size());
    }
    extra = fmt::format(
        R"(,"max_flow":{},"prepare_ms":{:.4f},"network_nodes":{},"network_edges":{},"cut_value":{},"banned":{})",
        JsonString(MaxFlowAlgorithmName(options.max_flow)), Ms(t_prep0, t_prep1), last.network_nodes,
        last.network_edges, last.cut_value, last.banned_nodes.size());
  }

  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const int64_t peak_rss_kb = PeakRssKb();  // this program's own peak (fxremat/phases.h)
  std::cout << fmt::format(
                   R"({{"graph":{},"partitioner":{},"nodes":{},"repeat":{},"load_ms":{:.4f},"solver_ms":{},)"
                   R"("partition_ms":{},"solver_saved_values":{},"saved_bytes":{},"saved_count":{},"max_rss_kb":{},)"
                   R"("phases_ms":{}{}}})",
                   JsonString(path), JsonString(partitioner), joint.size(), repeat, Ms(t_load0, t_load1),
                   JsonList(solver_ms), JsonList(partition_ms), solver_saved, saved_bytes, saved_count,
                   peak_rss_kb >= 0 ? peak_rss_kb : usage.ru_maxrss, phases.ToJson(), extra)
            << std::endl;
  return 0;
}
