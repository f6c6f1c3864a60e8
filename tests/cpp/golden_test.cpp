// Golden tests: every tests/golden/*.test file holds cases separated by
// "// -----". The first line says what to run ("// RUN: print", "// RUN:
// partition-default", "// RUN: json"; a later RUN line switches the action for
// its case and the ones after it); each case is IR text followed by
// FileCheck directives, or by "// expected-error {{...}}" for a case that must
// fail with that message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "filecheck.h"
#include "fxremat/partition.h"
#include "fxremat/peak_model.h"
#include "passes/reorder_backward.h"
#include "fxremat/pass.h"
#include "fxremat/pipeline.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/default_partition.h"
#include "passes/emit_offload.h"
#include "passes/functionalize_rng.h"
#include "passes/insert_barriers.h"
#include "passes/min_cut_partition.h"

namespace fs = std::filesystem;
using namespace fxremat;
using fxremat::testing::CheckDirective;

namespace {

struct GoldenCase {
  std::string text;
  std::vector<CheckDirective> checks;
  std::string expected_error;
  std::string run;  // the last RUN line at or before this case
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
      cases.back().run = run;
      continue;
    }
    // A RUN line applies to its case and the cases after it.
    if (auto r = strip("// RUN:")) { run = *r; cases.back().run = run; continue; }
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

std::string PrintPartition(const Partition& p) {
  return "// forward\n" + PrintGraph(*p.forward) + "// backward\n" + PrintGraph(*p.backward) + "// signature\n" +
         SignatureToJson(p.signature);
}

// "saved=a,b offload=a" -> {saved: [a, b], offload: [a]}; bare words under "".
std::map<std::string, std::vector<std::string>> ParseWords(const std::string& words_text) {
  std::map<std::string, std::vector<std::string>> result;
  std::istringstream words(words_text);
  for (std::string word; words >> word;) {
    auto eq = word.find('=');
    std::string key = eq == std::string::npos ? "" : word.substr(0, eq);
    std::string values = eq == std::string::npos ? word : word.substr(eq + 1);
    std::istringstream items(values);
    for (std::string item; std::getline(items, item, ',');) result[key].push_back(item);
  }
  return result;
}

// Extracts with the saved values named in `saved=` (a partition the test fixes
// instead of a solver), then marks the `offload=` ones offloaded.
Expected<Partition> ExtractForTest(const Graph& joint, std::map<std::string, std::vector<std::string>>& words) {
  std::vector<Node*> saved;
  for (const std::string& name : words["saved"]) {
    Node* n = joint.findNode(name);
    if (!n) return Status::BadInput("no node '" + name + "' to save");
    saved.push_back(n);
  }
  FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractPartition(joint, saved, "test"));
  for (const std::string& name : words["offload"]) {
    auto it = std::find_if(p.signature.saved.begin(), p.signature.saved.end(),
                           [&](const SavedValue& s) { return s.name == name; });
    if (it == p.signature.saved.end()) return Status::BadInput("'" + name + "' is not saved");
    it->offloaded = true;
  }
  return p;
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
  if (run.rfind("extract", 0) == 0) {
    // "extract saved=a,b [offload=a]": ExtractPartition with these saved values.
    auto words = ParseWords(run.substr(7));
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractForTest(*graph, words));
    return PrintPartition(p);
  }
  if (run.rfind("peak", 0) == 0) {
    // "peak saved=a,b [model=inductor]": the peak model (fxremat/peak_model.h)
    // on the partition that saves these values, its backward in
    // autograd-engine order.
    auto words = ParseWords(run.substr(4));
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractForTest(*graph, words));
    FXREMAT_RETURN_IF_ERROR(ReorderBackward(*p.backward).status());
    const bool inductor = !words["model"].empty() && words["model"][0] == "inductor";
    FXREMAT_ASSIGN_OR_RETURN(PeakEstimate e,
                             SimulatePeak(p, inductor ? PeakModelKind::kInductor : PeakModelKind::kEager));
    return PrintGraph(*p.backward) +
           fmt::format("// peak {} B at '{}' in the {}; forward peak {} B; live after forward {} B; backward peak {} B\n",
                       e.peak_bytes, e.peak_node, e.peak_graph, e.forward_peak_bytes, e.live_after_forward_bytes,
                       e.backward_peak_bytes);
  }
  if (run.rfind("functionalize-rng", 0) == 0) {
    // "functionalize-rng saved=a,b" (a fixed partition), "functionalize-rng
    // default" or "functionalize-rng mincut" (that partitioner's choice).
    auto words = ParseWords(run.substr(17));
    Partition p;
    const std::string partitioner = words[""].empty() ? "" : words[""][0];
    if (partitioner == "default") {
      FXREMAT_ASSIGN_OR_RETURN(p, DefaultPartition(*graph));
    } else if (partitioner == "mincut") {
      FXREMAT_ASSIGN_OR_RETURN(p, MinCutPartition(*graph, MinCutOptions{}));
    } else {
      FXREMAT_ASSIGN_OR_RETURN(p, ExtractForTest(*graph, words));
    }
    const std::string before = PrintPartition(p);
    FXREMAT_ASSIGN_OR_RETURN(bool changed, FunctionalizeRng(p));
    const std::string after = PrintPartition(p);
    if (changed == (after == before)) return Status::Internal("pass's \"changed?\" does not match its edit");
    // Running it again changes nothing; both graphs round-trip through the text form.
    FXREMAT_ASSIGN_OR_RETURN(bool again, FunctionalizeRng(p));
    if (again || PrintPartition(p) != after) return Status::Internal("a second FunctionalizeRng changed the partition");
    for (const Graph* g : {p.forward.get(), p.backward.get()}) {
      FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> emitted_again, ParseGraph(PrintGraph(*g)));
      if (PrintGraph(*emitted_again) != PrintGraph(*g)) return Status::Internal("emitted graph does not round-trip");
    }
    return std::string(changed ? "// changed\n" : "// unchanged\n") + after;
  }
  if (run.rfind("emit-offload", 0) == 0) {
    // "emit-offload torch|torch_async|xla saved=a,b offload=a" (torch_async with
    // MinCutOptions' default cost knobs)
    auto words = ParseWords(run.substr(12));
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractForTest(*graph, words));
    FXREMAT_ASSIGN_OR_RETURN(OffloadTarget named, OffloadTargetFromName(words[""].empty() ? "torch" : words[""][0]));
    const OffloadOptions target = MinCutOptions{}.OffloadOptionsFor(named);
    const std::string before = PrintPartition(p);
    FXREMAT_ASSIGN_OR_RETURN(bool changed, EmitOffload(p, target));
    const std::string after = PrintPartition(p);
    if (!changed && after != before) return Status::Internal("pass said unchanged but edited the partition");
    // Running it again changes nothing.
    FXREMAT_ASSIGN_OR_RETURN(bool again, EmitOffload(p, target));
    if (again || PrintPartition(p) != after) return Status::Internal("a second EmitOffload changed the partition");
    return std::string(changed ? "// changed\n" : "// unchanged\n") + after;
  }
  if (run.rfind("insert-barriers", 0) == 0) {
    // "insert-barriers saved=a,b [offload=a]" (offload to the xla target first)
    auto words = ParseWords(run.substr(15));
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractForTest(*graph, words));
    FXREMAT_RETURN_IF_ERROR(EmitOffload(p, OffloadTarget::kXla).status());
    const std::string before = PrintPartition(p);
    FXREMAT_ASSIGN_OR_RETURN(bool changed, InsertBarriers(p));
    const std::string after = PrintPartition(p);
    if (!changed && after != before) return Status::Internal("pass said unchanged but edited the partition");
    if (changed && after == before) return Status::Internal("pass said changed but the partition is identical");
    // The emitted backward round-trips through the text form.
    FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> bw, ParseGraph(PrintGraph(*p.backward)));
    if (PrintGraph(*bw) != PrintGraph(*p.backward)) return Status::Internal("backward text does not round-trip");
    return std::string(changed ? "// changed\n" : "// unchanged\n") + after;
  }
  // A registered graph pass by its name (fxremat/pass.h); words after the name
  // set PassOptions: "keep" (keep_annotations), "mincut" (the min cut's
  // cleanup-recompute-tags; the default partitioner's rule otherwise).
  std::istringstream words(run);
  std::string name;
  words >> name;
  if (const GraphPass* pass = FindGraphPass(name)) {
    PassOptions options;
    options.default_partition = true;
    for (std::string w; words >> w;) {
      if (w == "keep") options.keep_annotations = true;
      else if (w == "mincut") options.default_partition = false;
      else return Status::BadInput("unknown option '" + w + "' for pass " + name);
    }
    FXREMAT_ASSIGN_OR_RETURN(bool changed, pass->run(*graph, options));
    const std::string after = PrintGraph(*graph);
    // A pass that reports "unchanged" must leave the graph byte-identical, and
    // one that reports "changed" must have changed it.
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
      Expected<std::string> out = RunAction(c.run, c.text);
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

TEST_CASE("every registered pass has golden tests", "[golden]") {
  const fs::path dir = fs::path(FXREMAT_SOURCE_DIR) / "tests" / "golden";
  std::string all;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream buffer;
    buffer << in.rdbuf();
    all += buffer.str();
  }
  for (const GraphPass& pass : GraphPasses()) {
    if (pass.name == "apply-policy" || pass.name == "check-mutation-demands") continue;  // policy_test.cpp, protect_mutations.test
    INFO("pass " << pass.name);
    CHECK(all.find("// RUN: " + std::string(pass.name)) != std::string::npos);
  }
  for (const PartitionPass& pass : PartitionPasses()) {
    INFO("pass " << pass.name);
    CHECK(all.find("// RUN: " + std::string(pass.name)) != std::string::npos);
  }
}
