// Golden tests: every tests/golden/*.test file holds cases separated by
// "// -----". The first line says what to run ("// RUN: print", "// RUN:
// partition-default", "// RUN: json"); each case is IR text followed by
// FileCheck directives, or by "// expected-error {{...}}" for a case that must
// fail with that message.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "filecheck.h"
#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/cleanup_recompute_tags.h"
#include "passes/cse.h"
#include "passes/default_partition.h"
#include "passes/min_cut_partition.h"

namespace fs = std::filesystem;
using namespace fxremat;
using fxremat::testing::CheckDirective;

namespace {

struct GoldenCase {
  std::string text;
  std::vector<CheckDirective> checks;
  std::string expected_error;
  int first_line = 0;
};

std::vector<GoldenCase> SplitCases(const std::string& contents, std::string& run) {
  std::vector<GoldenCase> cases(1);
  std::istringstream in(contents);
  int line_no = 0;
  cases.back().first_line = 1;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    auto strip = [&](const std::string& prefix) -> std::optional<std::string> {
      size_t at = line.find(prefix);
      if (at == std::string::npos) return std::nullopt;
      std::string rest = line.substr(at + prefix.size());
      size_t first = rest.find_first_not_of(' ');
      return first == std::string::npos ? std::string() : rest.substr(first);
    };
    if (line.rfind("// -----", 0) == 0) {
      cases.emplace_back();
      cases.back().first_line = line_no + 1;
      continue;
    }
    if (auto r = strip("// RUN:")) { run = *r; continue; }
    if (auto e = strip("// expected-error")) {
      size_t open = e->find("{{"), close = e->rfind("}}");
      std::string expected = e->substr(open + 2, close - open - 2);
      // "\n" in an expected message stands for a line break.
      for (size_t at; (at = expected.find("\\n")) != std::string::npos;) expected.replace(at, 2, "\n");
      cases.back().expected_error = expected;
      continue;
    }
    if (auto c = strip("// CHECK-NEXT:")) { cases.back().checks.push_back({CheckDirective::Kind::kNext, *c, line_no}); continue; }
    if (auto c = strip("// CHECK-SAME:")) { cases.back().checks.push_back({CheckDirective::Kind::kSame, *c, line_no}); continue; }
    if (auto c = strip("// CHECK-NOT:")) { cases.back().checks.push_back({CheckDirective::Kind::kNot, *c, line_no}); continue; }
    if (auto c = strip("// CHECK:")) { cases.back().checks.push_back({CheckDirective::Kind::kCheck, *c, line_no}); continue; }
    if (line.rfind("//", 0) == 0) continue;
    cases.back().text += line + "\n";
  }
  return cases;
}

// Runs one action; returns the output text or the error.
Expected<std::string> RunAction(const std::string& run, const std::string& text) {
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ParseGraph(text));
  const std::string printed = PrintGraph(*graph);
  // Every case also checks the round trip: print → parse → print is identical.
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> reparsed, ParseGraph(printed));
  if (PrintGraph(*reparsed) != printed) return Status::Internal("print → parse → print changed the text");
  if (run == "print") return printed;
  if (run == "json") {
    std::string json = GraphToJson(*graph);
    FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> from_json, GraphFromJson(json));
    if (PrintGraph(*from_json) != printed) return Status::Internal("text → JSON → text changed the graph");
    return json;
  }
  if (run == "partition-default") {
    FXREMAT_ASSIGN_OR_RETURN(Partition p, DefaultPartition(*graph));
    return "// forward\n" + PrintGraph(*p.forward) + "// backward\n" + PrintGraph(*p.backward) +
           "// signature\n" + SignatureToJson(p.signature);
  }
  if (run.rfind("partition-mincut", 0) == 0) {
    // "partition-mincut NAME=VALUE ..." sets min-cut options.
    MinCutOptions options;
    std::istringstream words(run.substr(16));
    for (std::string item; words >> item;) {
      auto eq = item.find('=');
      FXREMAT_RETURN_IF_ERROR(SetMinCutOption(options, item.substr(0, eq), item.substr(eq + 1)));
    }
    FXREMAT_ASSIGN_OR_RETURN(Partition p, MinCutPartition(*graph, options));
    return "// forward\n" + PrintGraph(*p.forward) + "// backward\n" + PrintGraph(*p.backward) +
           "// signature\n" + SignatureToJson(p.signature);
  }
  if (run == "cse") {
    FXREMAT_ASSIGN_OR_RETURN(bool changed, EliminateCommonSubexpressions(*graph));
    const std::string after = PrintGraph(*graph);
    if (!changed && after != printed) return Status::Internal("pass said unchanged but edited the graph");
    return std::string(changed ? "// changed\n" : "// unchanged\n") + after;
  }
  if (run == "cleanup-recompute-tags") {
    FXREMAT_ASSIGN_OR_RETURN(bool changed, CleanupRecomputeTags(*graph, /*is_default_partition=*/true));
    const std::string after = PrintGraph(*graph);
    // A pass that reports "unchanged" must leave the graph byte-identical.
    if (!changed && after != printed) return Status::Internal("pass said unchanged but edited the graph");
    if (changed && after == printed) return Status::Internal("pass said changed but the graph is identical");
    return std::string(changed ? "// changed\n" : "// unchanged\n") + after;
  }
  return Status::BadInput("unknown RUN action '" + run + "'");
}

}  // namespace

TEST_CASE("golden tests", "[golden]") {
  const fs::path dir = fs::path(FXREMAT_SOURCE_DIR) / "tests" / "golden";
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".test") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  REQUIRE(!files.empty());
  for (const fs::path& file : files) {
    std::ifstream in(file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string run;
    std::vector<GoldenCase> cases = SplitCases(buffer.str(), run);
    REQUIRE(!run.empty());
    for (const GoldenCase& c : cases) {
      INFO(file.filename().string() << ", case starting at line " << c.first_line);
      Expected<std::string> out = RunAction(run, c.text);
      if (!c.expected_error.empty()) {
        REQUIRE_FALSE(out.ok());
        INFO("error was: " << out.status().ToString());
        CHECK(out.status().ToString().find(c.expected_error) != std::string::npos);
        continue;
      }
      INFO("error: " << out.status().ToString());
      REQUIRE(out.ok());
      REQUIRE_FALSE(c.checks.empty());
      std::string failure = fxremat::testing::RunFileCheck(*out, c.checks);
      INFO(failure);
      CHECK(failure.empty());
    }
  }
}
