// The JSON format and the IR text form round-trip exactly on every testdata
// graph; malformed documents give errors that name where.
#include <catch2/catch.hpp>

#include <filesystem>

#include "fxremat/serialize.h"
#include "fxremat/text.h"

namespace fs = std::filesystem;
using namespace fxremat;

std::vector<std::string> TestdataFiles() {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(FXREMAT_SOURCE_DIR) / "testdata"))
    if (e.path().string().find(".json") != std::string::npos) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

TEST_CASE("every testdata graph round-trips through JSON and text") {
  auto files = TestdataFiles();
  REQUIRE(files.size() >= 8);
  for (const std::string& file : files) {
    INFO(file);
    auto graph = LoadGraphFile(file);
    INFO(graph.status().ToString());
    REQUIRE(graph.ok());
    const std::string json = GraphToJson(**graph);
    auto again = GraphFromJson(json);
    REQUIRE(again.ok());
    CHECK(GraphToJson(**again) == json);
    const std::string text = PrintGraph(**graph);
    auto parsed = ParseGraph(text);
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK(PrintGraph(**parsed) == text);
    CHECK(GraphToJson(**parsed) == json);
  }
}

TEST_CASE("JSON errors name the JSON path") {
  auto check = [](const std::string& doc, const std::string& where, const std::string& what) {
    auto g = GraphFromJson(doc);
    REQUIRE_FALSE(g.ok());
    INFO(g.status().ToString());
    CHECK(g.status().where() == where);
    CHECK(g.status().message().find(what) != std::string::npos);
  };
  const std::string head = R"({"format": "fxremat.graph", "version": [1, 0], "kind": "plain", "nodes": )";
  check(R"({"format": "fxremat.graph", "version": [2, 0], "kind": "plain", "nodes": []})", "/version",
        "unsupported format version 2.0");
  check(head + R"([{"name": "x", "op": "placeholder"}, {"name": "output", "op": "output", "args": [[{"node": "x"}]]}]})",
        "/nodes/0/meta/val", "no value facts");
  check(head + R"([{"name": "output", "op": "output", "args": [[{"node": "ghost"}]]}]})", "/nodes/0",
        "'ghost', which is not a node of this graph");
  check(head + R"([{"name": "a", "op": "call_function", "target": "aten.sin.default", "args": [{"node": "b"}], "meta": {"val": {"kind": "none"}}},
                   {"name": "b", "op": "call_function", "target": "aten.sin.default", "args": [{"node": "a"}], "meta": {"val": {"kind": "none"}}},
                   {"name": "output", "op": "output", "args": [[]]}]})",
        "/nodes/0", "cycle in the graph: a -> b -> a");
  check(R"({"format": "fxremat.graph", "version": [1, 0], "kind": "plain", "nodes": [)", "", "malformed JSON");
}

TEST_CASE("text parse errors carry line and column") {
  auto g = ParseGraph("# fxremat.graph v1 kind=plain\ndef forward(self, x: \"f32[2][1]cpu\"):\n    y: \"f32[2][1]cpu\" = torch.ops.aten.sin.default(z)\n    return (y,)\n");
  REQUIRE_FALSE(g.ok());
  CHECK(g.status().where() == "line 3, col 52");
  CHECK(g.status().message().find("'z' is not defined") != std::string::npos);
}
