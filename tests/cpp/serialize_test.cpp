// The JSON format and the IR text form round-trip exactly on every testdata
// graph; malformed documents give errors that name where.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <set>

#include <unistd.h>
#include <zlib.h>

#include <fmt/format.h>

#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "src/json_internal.h"
#include "src/populate_pages.h"

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

// A placeholder whose facts are a constant string (its JSON text has quotes of
// its own, and here a backslash and a newline): the annotation is quoted with
// escapes, and the text reads back as the same graph.
TEST_CASE("a string constant's facts round-trip through the text form") {
  auto graph = LoadGraphFile(std::string(FXREMAT_SOURCE_DIR) + "/testdata/sin_mm.json.gz");
  REQUIRE(graph.ok());
  nlohmann::json doc = nlohmann::json::parse(GraphToJson(**graph));
  bool changed = false;
  for (auto& node : doc["nodes"])
    if (node["name"] == "primals_2") {
      node["meta"]["val"] = {{"kind", "const"}, {"value", "he said \"hi\" \\ then\nleft"}};
      changed = true;
    }
  REQUIRE(changed);
  auto with_const = GraphFromJson(doc.dump());
  INFO(with_const.status().ToString());
  REQUIRE(with_const.ok());
  const std::string text = PrintGraph(**with_const);
  auto parsed = ParseGraph(text);
  INFO(text);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(PrintGraph(**parsed) == text);
  CHECK(GraphToJson(**parsed) == GraphToJson(**with_const));
}

// The text form may repeat a kwarg; a JSON object keeps a key once. The
// streamed writer writes such a node as the document does (its first place,
// the last value), whether it finds the repeat pairwise (a few keys) or by
// sorting (many).
TEST_CASE("repeated kwargs are written once, as the JSON document writes them") {
  auto graph = LoadGraphFile(std::string(FXREMAT_SOURCE_DIR) + "/testdata/sin_mm.json.gz");
  REQUIRE(graph.ok());
  const std::string text = PrintGraph(**graph);
  const std::string call = "torch.ops.aten.cos.default(mm)";
  REQUIRE(text.find(call) != std::string::npos);
  for (int keys : {3, 40}) {
    std::string kwargs;
    for (int k = 0; k < keys; ++k) kwargs += fmt::format(", k{} = {}", k % (keys - 1), k);  // the last key repeats k0
    std::string edited = text;
    edited.replace(edited.find(call), call.size(), "torch.ops.aten.cos.default(mm" + kwargs + ")");
    auto parsed = ParseGraph(edited);
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    const std::string streamed = GraphToJson(**parsed);
    const nlohmann::ordered_json document = GraphToJsonDocument(**parsed);
    CHECK(nlohmann::ordered_json::parse(streamed) == document);
    size_t written = 0;
    for (size_t at = 0; (at = streamed.find("\"k0\":", at)) != std::string::npos; ++at) ++written;
    CHECK(written == 1);
    for (const auto& node : document["nodes"])
      if (node["name"] == "cos") {
        CHECK(node["kwargs"].size() == static_cast<size_t>(keys - 1));
        CHECK(node["kwargs"]["k0"] == keys - 1);
      }
  }
}

// Note [Reading nodes on two threads]: FXREMAT_READ_TWO_THREADS_FROM sets the
// node count from which a document is read on two threads.
struct ReadThreadsFrom {
  explicit ReadThreadsFrom(const char* n) { setenv("FXREMAT_READ_TWO_THREADS_FROM", n, 1); }
  ~ReadThreadsFrom() { unsetenv("FXREMAT_READ_TWO_THREADS_FROM"); }
};

// A chain of `n` sin nodes (s0 = sin(primals_1), s1 = sin(s0), ...) returning
// the last, as JSON; `edit` may change the node list's text before it is joined.
std::string ChainJson(size_t n, const std::function<void(std::vector<std::string>&)>& edit = nullptr) {
  const std::string val = R"({"kind":"tensor","dtype":"float32","shape":[4],"stride":[1],"device":"cpu"})";
  std::vector<std::string> nodes;
  nodes.push_back(R"({"name":"primals_1","op":"placeholder","target":"primals_1","meta":{"val":)" + val + "}}");
  for (size_t i = 0; i < n; ++i)
    nodes.push_back(fmt::format(R"({{"name":"s{}","op":"call_function","target":"aten.sin.default",)"
                                R"("args":[{{"node":"{}"}}],"meta":{{"val":{}}}}})",
                                i, i ? fmt::format("s{}", i - 1) : "primals_1", val));
  nodes.push_back(fmt::format(R"({{"name":"output","op":"output","target":"output","args":[[{{"node":"s{}"}}]]}})",
                              n - 1));
  if (edit) edit(nodes);
  std::string out = R"({"format":"fxremat.graph","version":[1,6],"kind":"plain","ops":{"aten.sin.default":)"
                    R"({"schema":"aten::sin(Tensor self) -> Tensor","tags":["core","pointwise"]}},"nodes":[)";
  for (size_t i = 0; i < nodes.size(); ++i) out += (i ? "," : "") + nodes[i];
  return out + "]}";
}

TEST_CASE("Note [Reading nodes on two threads]: the same graph and the same errors as one thread") {
  auto read_both_ways = [](const std::string& json) {
    std::pair<Expected<std::unique_ptr<Graph>>, Expected<std::unique_ptr<Graph>>> both{
        Status::Internal("unread"), Status::Internal("unread")};
    {
      ReadThreadsFrom two("1");
      both.first = GraphFromJson(json);
    }
    {
      ReadThreadsFrom one("1000000000");
      both.second = GraphFromJson(json);
    }
    return both;
  };
  SECTION("every testdata graph") {
    for (const std::string& file : TestdataFiles()) {
      INFO(file);
      auto graph = LoadGraphFile(file);
      REQUIRE(graph.ok());
      const std::string json = GraphToJson(**graph);
      auto [two, one] = read_both_ways(json);
      REQUIRE(two.ok());
      REQUIRE(one.ok());
      CHECK(GraphToJson(**two) == json);
      CHECK(PrintGraph(**two) == PrintGraph(**one));
    }
  }
  SECTION("a chain long enough for both threads to have blocks of nodes") {
    const std::string json = ChainJson(20'000);
    auto [two, one] = read_both_ways(json);
    REQUIRE(two.ok());
    REQUIRE(one.ok());
    CHECK(GraphToJson(**two) == GraphToJson(**one));
    // Use lists are built in node order either way.
    const Node* input = (*two)->findNode("primals_1");
    REQUIRE(input->users().size() == 1);
    CHECK(input->users()[0]->name() == "s0");
    CHECK((*two)->findNode("s19999")->inputs()[0]->name() == "s19998");
  }
  // Each bad document fails in both parts of the list (the second thread reads
  // the last 60%), with the error one thread reports.
  using Edit = std::function<void(std::vector<std::string>&)>;
  const std::vector<std::pair<std::string, Edit>> bad = {
      {"a name used twice, once in each part",
       [](auto& nodes) { nodes[15'000] = std::string(nodes[15'000]).replace(nodes[15'000].find("s14999"), 6, "s100"); }},
      {"a reference to a later node",
       [](auto& nodes) { nodes[101] = std::string(nodes[101]).replace(nodes[101].find("\"s99\""), 5, "\"s12000\""); }},
      {"a reference to an unknown node, in the second part",
       [](auto& nodes) { nodes[15'001] = std::string(nodes[15'001]).replace(nodes[15'001].find("\"s14999\""), 8, "\"nope\""); }},
      {"a node after the output node",
       [](auto& nodes) { std::swap(nodes[15'000], nodes.back()); }},
      {"a bad value in the second part",
       [](auto& nodes) { nodes[17'000] = std::string(nodes[17'000]).replace(nodes[17'000].find("float32"), 7, "float99"); }},
      {"a node without a name", [](auto& nodes) { nodes[18'000].replace(nodes[18'000].find("\"name\""), 6, "\"nome\""); }},
      // The last node of each thread's part of the names (the first 40%: 8,000 of 20,002).
      {"the first part's last node without a name",
       [](auto& nodes) { nodes[7'999].replace(nodes[7'999].find("\"name\""), 6, "\"nome\""); }},
      {"the last node named as an earlier one",
       [](auto& nodes) { nodes.back().replace(nodes.back().find("\"output\""), 8, "\"s5\""); }},
  };
  SECTION("bad documents") {
    for (const auto& [what, edit] : bad) {
      INFO(what);
      auto [two, one] = read_both_ways(ChainJson(20'000, edit));
      REQUIRE_FALSE(one.ok());
      REQUIRE_FALSE(two.ok());
      CHECK(two.status().ToString() == one.status().ToString());
    }
  }
  SECTION("a repeated name key: the last one names the node, as nlohmann reads it") {
    auto [two, one] = read_both_ways(ChainJson(20'000, [](auto& nodes) { nodes[16'000].insert(1, "\"name\":\"s1\","); }));
    REQUIRE(one.ok());
    REQUIRE(two.ok());
    CHECK(GraphToJson(**two) == GraphToJson(**one));
  }
}

// Note [Populated tape]: FXREMAT_MAP_TAPE_FROM sets the document size (bytes)
// from which a second thread maps simdjson's tape ahead of its stage 2.
struct MapTapeFrom {
  explicit MapTapeFrom(const char* n) { setenv("FXREMAT_MAP_TAPE_FROM", n, 1); }
  ~MapTapeFrom() { unsetenv("FXREMAT_MAP_TAPE_FROM"); }
};

TEST_CASE("Note [Populated tape]: the pages mapped are the ones stage 2 writes, and the parse is unchanged") {
  std::vector<std::pair<std::string, std::string>> documents;  // what, JSON
  for (const std::string& file : TestdataFiles()) {
    auto graph = LoadGraphFile(file);
    REQUIRE(graph.ok());
    documents.emplace_back(file, GraphToJson(**graph));
  }
  documents.emplace_back("a 20,000-node chain", ChainJson(20'000));
  SECTION("the tape exactly; the strings exactly in compact JSON without escapes, and never less") {
    for (const auto& [what, json] : documents) {
      INFO(what);
      auto sizes = MeasureTapeForTesting(json);
      REQUIRE(sizes);
      CHECK(sizes->first.tape_bytes == sizes->second.tape_bytes);
      CHECK(sizes->first.string_bytes >= sizes->second.string_bytes);
    }
    auto compact = MeasureTapeForTesting(ChainJson(2'000));
    REQUIRE(compact);
    CHECK(compact->first.string_bytes == compact->second.string_bytes);
    // Escapes and spaces are counted at their raw length: more than written.
    auto spaced = MeasureTapeForTesting(R"({"a\n\u00e9" : [1, -2.5e3, true, false, null, "x\"y" ] , "b":{}})");
    REQUIRE(spaced);
    CHECK(spaced->first.tape_bytes == spaced->second.tape_bytes);
    CHECK(spaced->first.string_bytes > spaced->second.string_bytes);
  }
  SECTION("the same graphs and the same errors with the tape mapped ahead") {
    documents.emplace_back("truncated", ChainJson(2'000).substr(0, 50'000));
    documents.emplace_back("a bad literal", ChainJson(2'000, [](auto& nodes) { nodes[500].insert(1, "\"x\":tru,"); }));
    // Stage 1 indexes these and stage 2 refuses them; counted, they would
    // outgrow simdjson's buffers (the mapping stops at their end).
    std::string adjacent_strings = "[", adjacent_numbers = "[";
    for (int i = 0; i < 20'000; ++i) {
      adjacent_strings += "\"\"";
      adjacent_numbers += "1 ";
    }
    documents.emplace_back("strings with nothing between", adjacent_strings + "]");
    documents.emplace_back("numbers with nothing between", adjacent_numbers + "]");
    documents.emplace_back("a bad value", ChainJson(2'000, [](auto& nodes) {
      nodes[700] = std::string(nodes[700]).replace(nodes[700].find("float32"), 7, "float99");
    }));
    for (const auto& [what, json] : documents) {
      INFO(what);
      Expected<std::unique_ptr<Graph>> mapped = Status::Internal("unread"), unmapped = Status::Internal("unread");
      {
        MapTapeFrom all("1");
        mapped = GraphFromJson(json);
      }
      {
        MapTapeFrom none("100000000000");
        unmapped = GraphFromJson(json);
      }
      REQUIRE(mapped.ok() == unmapped.ok());
      if (mapped.ok())
        CHECK(GraphToJson(**mapped) == GraphToJson(**unmapped));
      else
        CHECK(mapped.status().ToString() == unmapped.status().ToString());
    }
  }
}

// Note [Compact large graphs]: compact text is nlohmann's dump(), and a graph
// file is written compact above 50,000 nodes, indented up to it.
TEST_CASE("Note [Compact large graphs]: compact JSON is nlohmann's, and large graph files are written so") {
  SECTION("every testdata graph, compact, is nlohmann's dump() and reads back") {
    for (const std::string& file : TestdataFiles()) {
      INFO(file);
      auto graph = LoadGraphFile(file);
      REQUIRE(graph.ok());
      const std::string compact = GraphToJson(**graph, -1);
      CHECK(compact == GraphToJsonDocument(**graph).dump() + "\n");
      CHECK(compact.find('\n') == compact.size() - 1);
      auto back = GraphFromJson(compact);
      REQUIRE(back.ok());
      CHECK(GraphToJson(**back) == GraphToJson(**graph));
    }
  }
  SECTION("graph files: indented up to 50,000 nodes, compact above") {
    const fs::path dir = fs::temp_directory_path() / fmt::format("fxremat_compact_test_{}", ::getpid());
    fs::create_directories(dir);
    for (const size_t nodes : {size_t{50'000}, size_t{50'001}}) {
      INFO(nodes);
      auto graph = GraphFromJson(ChainJson(nodes - 2));  // a placeholder, the sins, the output
      REQUIRE(graph.ok());
      REQUIRE((*graph)->size() == nodes);
      for (const char* name : {"g.json", "g.json.gz"}) {
        const std::string path = (dir / name).string();
        REQUIRE(WriteGraphFile(path, **graph).ok());
        auto text = ReadFileContents(path);
        REQUIRE(text.ok());
        CHECK(*text == GraphToJson(**graph, nodes > 50'000 ? -1 : 1));
        auto back = LoadGraphFile(path);
        REQUIRE(back.ok());
        CHECK(GraphToJson(**back) == GraphToJson(**graph));
      }
    }
    fs::remove_all(dir);
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

// Issue 12: what one form's reader accepts, the other form of it reads back (the
// fuzzer, tests/fuzz/fuzz_loader.cpp, checks this on every input it makes).
TEST_CASE("layouts and memory formats: both readers take torch's names and refuse others") {
  const std::string text =
      "# fxremat.graph v1 kind=plain\n"
      "def forward(self, x: \"f32[2, 2][2, 1]cpu\"):\n"
      "    y: \"f32[2, 2][2, 1]cpu\" = torch.ops.aten.clone.default(x, memory_format = torch.channels_last)\n"
      "    z: \"f32[2, 2][2, 1]cpu\" = torch.ops.aten.empty_like.default(y, layout = torch.strided, "
      "memory_format = torch.preserve_format)\n"
      "    return (z,)\n";
  auto g = ParseGraph(text);
  INFO(g.status().ToString());
  REQUIRE(g.ok());  // torch.channels_last was refused: it has no "_format" suffix
  auto back = GraphFromJson(GraphToJson(**g));
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(PrintGraph(**back) == PrintGraph(**g));

  std::string json = GraphToJson(**g);
  json.replace(json.find("\"channels_last\""), 15, "\"banana\"");
  auto bad = GraphFromJson(json);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().where() == "/nodes/1/kwargs/memory_format");
  CHECK(bad.status().message() == "unknown memory format 'banana'");
  auto bad_text = ParseGraph(std::string(text).replace(text.find("channels_last"), 13, "banana_format"));
  REQUIRE_FALSE(bad_text.ok());
  CHECK(bad_text.status().message().find("unknown torch constant 'torch.banana_format'") != std::string::npos);
}

TEST_CASE("sizes are refused where they are written") {
  const std::string head = R"({"format": "fxremat.graph", "version": [1, 2], "kind": "plain", "nodes": [)"
                           R"({"name": "x", "op": "placeholder", "meta": {"val": {"kind": "tensor", "dtype": "float32", )";
  const std::string tail = R"(, "device": "cpu"}}}, {"name": "output", "op": "output", "args": [[{"node": "x"}]]}]})";
  auto check = [&](const std::string& facts, const std::string& where, const std::string& what) {
    auto g = GraphFromJson(head + facts + tail);
    REQUIRE_FALSE(g.ok());
    INFO(g.status().ToString());
    CHECK(g.status().where() == where);
    CHECK(g.status().message() == what);
  };
  check(R"("shape": [2, -3], "stride": [1, 1])", "/nodes/0/meta/val/shape/1", "dimension 1 is -3: sizes are not negative");
  check(R"("shape": [9223372036854775808], "stride": [1])", "/nodes/0/meta/val/shape/0",
        "the integer 9223372036854775808 is outside int64");
  check(R"("shape": [4611686018427387904], "stride": [1])", "/nodes/0/meta/val/shape/0",
        "the tensor's size overflows 64 bits (dimension 0 is 4611686018427387904)");
  check(R"("shape": [2], "stride": [-1])", "/nodes/0/meta/val/stride/0", "stride 0 is -1: strides are not negative");
  check(R"("shape": [{"sym": "s0", "hint": -1}], "stride": [1])", "/nodes/0/meta/val/shape/0",
        "dimension 0 is -1: sizes are not negative");

  auto text = [](const std::string& annotation) {
    return ParseGraph("# fxremat.graph v1 kind=plain\ndef forward(self, x: \"" + annotation + "\"):\n    return (x,)\n");
  };
  for (const auto& [annotation, what] : std::vector<std::pair<std::string, std::string>>{
           {"f32[18446744073709551616][1]cpu", "dimension '18446744073709551616' is outside int64"},
           {"f32[-2][1]cpu", "dimension 0 is -2: sizes are not negative"},
           {"f32[][1]cpu", "1 strides for 0 dims"},
           {"f32[s0~x][1]cpu", "bad hint 'x'"}}) {
    auto g = text(annotation);
    REQUIRE_FALSE(g.ok());
    INFO(g.status().ToString());
    CHECK(g.status().where() == "line 2, col 22");
    CHECK(g.status().message().find(what) != std::string::npos);
  }
}

TEST_CASE("the text form is UTF-8: other bytes are refused where they are") {
  const std::string ok = "# fxremat.graph v1 kind=plain\ndef forward(self, x: \"f32[2][1]cpu\"):\n    return (x,)\n";
  REQUIRE(ParseGraph(ok).ok());
  for (const std::string& bad : {std::string("\xff"), std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                 std::string("\xf4\x90\x80\x80"), std::string("\xe2\x82")}) {
    std::string text = ok;
    text.insert(text.find("forward"), bad);  // line 2, col 5
    auto g = ParseGraph(text);
    REQUIRE_FALSE(g.ok());
    CHECK(g.status().where() == "line 2, col 5");
    CHECK(g.status().message().find("invalid UTF-8") != std::string::npos);
  }
  std::string accented = ok;
  accented.insert(accented.find("kind"), "name='caf\xc3\xa9' ");
  INFO(ParseGraph(accented).status().ToString());
  CHECK(ParseGraph(accented).ok());
}

TEST_CASE("a --policy that is not UTF-8 is refused, not passed on to the JSON writer") {
  auto p = ParsePolicy("save_ops:aten.mm,\xfe\xfe");
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().where() == "--policy: line 1, col 18");
  CHECK(p.status().message() == "invalid UTF-8 (byte 0xFE): a policy is UTF-8");
}

TEST_CASE("tensor facts without strides read back from the JSON they are written to") {
  auto g = ParseGraph("# fxremat.graph v1 kind=plain\ndef forward(self, x: \"f32[4]cpu\"):\n"
                      "    n: \"f32[4]cpu\" = torch.ops.aten.sin.default(x)\n    return (n,)\n");
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  auto back = GraphFromJson(GraphToJson(**g));
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(PrintGraph(**back) == PrintGraph(**g));
}

TEST_CASE("Note [Stack-trace table]: each distinct trace is written once, nodes name it by index") {
  const std::string doc = R"({"format": "fxremat.graph", "version": [1, 4], "kind": "plain", "nodes": [
    {"name": "x", "op": "placeholder", "meta": {"val": {"kind": "none"}, "stack_trace": "File a.py, line 1"}},
    {"name": "a", "op": "call_function", "target": "aten.sin.default", "args": [{"node": "x"}],
     "meta": {"val": {"kind": "none"}, "stack_trace": "File b.py, line 2"}},
    {"name": "b", "op": "call_function", "target": "aten.sin.default", "args": [{"node": "a"}],
     "meta": {"val": {"kind": "none"}, "stack_trace": "File a.py, line 1"}},
    {"name": "c", "op": "call_function", "target": "aten.sin.default", "args": [{"node": "b"}],
     "meta": {"val": {"kind": "none"}}},
    {"name": "output", "op": "output", "args": [[{"node": "c"}]]}]})";
  auto g = GraphFromJson(doc);  // 1.4: traces as strings
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  const nlohmann::ordered_json written = nlohmann::ordered_json::parse(GraphToJson(**g));
  REQUIRE(written["version"][1] == kFormatMinorVersion);
  REQUIRE(written["stack_traces"] == nlohmann::ordered_json::array({"File a.py, line 1", "File b.py, line 2"}));
  CHECK(written["nodes"][0]["meta"]["stack_trace_index"] == 0);
  CHECK(written["nodes"][1]["meta"]["stack_trace_index"] == 1);
  CHECK(written["nodes"][2]["meta"]["stack_trace_index"] == 0);
  CHECK_FALSE(written["nodes"][0]["meta"].contains("stack_trace"));  // a key of its own: older readers skip it
  CHECK_FALSE(written["nodes"][3]["meta"].contains("stack_trace_index"));
  // Both writers agree (the streaming one is byte for byte nlohmann's).
  CHECK(GraphToJsonDocument(**g).dump(1) + "\n" == GraphToJson(**g));
  auto again = GraphFromJson(written.dump());
  REQUIRE(again.ok());
  CHECK((*again)->findNode("b")->meta().stack_trace.str() == "File a.py, line 1");
  CHECK((*again)->findNode("c")->meta().stack_trace.empty());
  // A graph without traces has no table.
  auto plain = GraphFromJson(R"({"format": "fxremat.graph", "version": [1, 5], "kind": "plain", "nodes": [
    {"name": "x", "op": "placeholder", "meta": {"val": {"kind": "none"}}},
    {"name": "output", "op": "output", "args": [[{"node": "x"}]]}]})");
  REQUIRE(plain.ok());
  CHECK(GraphToJson(**plain).find("stack_traces") == std::string::npos);
  // An index outside the table, or a table that is not strings, is refused where it is.
  nlohmann::ordered_json bad = written;
  bad["nodes"][2]["meta"]["stack_trace_index"] = 2;
  auto refused = GraphFromJson(bad.dump());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().where() == "/nodes/2/meta/stack_trace_index");
  CHECK(refused.status().message().find("2 is not an index of \"stack_traces\" (which has 2)") != std::string::npos);
  bad["nodes"][2]["meta"]["stack_trace_index"] = 18446744073709551615ull;  // a huge unsigned one
  refused = GraphFromJson(bad.dump());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().where() == "/nodes/2/meta/stack_trace_index");
  bad = written;
  bad["stack_traces"][1] = 7;
  refused = GraphFromJson(bad.dump());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().where() == "/stack_traces/1");
}

// Note [Streaming writer]: SignatureToJson streams the text that
// SignatureToJsonDocument(sig).dump(2) prints, byte for byte.
TEST_CASE("the streamed signature is byte for byte the document's dump") {
  auto check = [](const Signature& sig) { CHECK(SignatureToJson(sig) == SignatureToJsonDocument(sig).dump(2) + "\n"); };
  // Every field, the optional ones set and unset, names shared between saved
  // values, a symbolic dim, a non-ASCII name and empty lists and objects.
  Signature sig;
  check(sig);
  sig.partitioner = "mincut";
  sig.forward_num_inputs = 2;
  sig.forward_num_outputs = 4;
  sig.backward_num_inputs = 4;
  sig.backward_num_outputs = 2;
  sig.num_fwd_outputs = 1;
  sig.primals = {{"primals_1", 0, "params['w']", 0, true, std::nullopt}, {"primals_2", 1, "", 1, false, 3}};
  sig.forward_outputs = {{0, "out", std::string("[0]")}, {1, "", std::nullopt}};
  SavedValue a;
  a.name = "mm";
  a.facts.kind = ValueFacts::Kind::kTensor;
  a.facts.tensor.dtype = DType::kBFloat16;
  a.facts.tensor.shape = {Dim::Static(4), Dim{8, "s0"}};
  a.names = {"attn", "qk\xc3\xa9"};  // "qké"
  a.annotation = "attn";
  a.decision = "MUST_SAVE";
  a.rule = "policy MUST_SAVE";
  a.origin_op = "aten.mm.default";
  a.origin_location = "model.py:3 (forward)";
  a.forward_output_index = 1;
  a.backward_input_index = 1;
  a.bytes = 64;
  a.no_vc_check = true;
  SavedValue b;
  b.name = "sym_size";
  b.kind = SavedValue::Kind::kSymInt;
  b.facts.kind = ValueFacts::Kind::kSymInt;
  b.facts.expr = "s0";
  b.names = {"attn", "other"};  // "attn" maps to the first value that has it
  b.offloaded = true;
  b.forward_output_index = 2;
  b.backward_input_index = 0;
  SavedValue c;
  c.name = "flag";
  c.kind = SavedValue::Kind::kSymInt;
  c.facts.kind = ValueFacts::Kind::kConst;
  c.annotation = "only_annotation";
  sig.saved = {a, b, c};
  sig.tangents = {{"tangents_1", 3, 0}, {"token", 2, -1}};
  check(sig);
  sig.opaque_inputs = {{"primals_3", 2, 3, "BackwardState"}};
  sig.notes = {"a note", "another \"quoted\" note\n"};
  sig.peak = PeakSummary{1024, "mm", "forward", 512, std::nullopt};
  check(sig);
  sig.peak->budget_bytes = 2048;
  sig.peak->node = "";
  check(sig);
  // Every ASCII byte at every offset in an 8-byte word (the writer tests
  // eight bytes at a time), runs that need no escape, and UTF-8.
  sig.notes.clear();
  for (int byte = 1; byte < 0x80; ++byte)
    for (size_t offset = 0; offset < 9; ++offset)
      sig.notes.push_back(std::string(offset, 'a') + static_cast<char>(byte) + std::string(9, 'b'));
  sig.notes.push_back(std::string(100, 'x'));
  sig.notes.push_back("caf\xc3\xa9 au lait, plain for sixteen");
  check(sig);
  // And what the pipeline writes for every testdata graph, both partitioners.
  for (const std::string& file : TestdataFiles()) {
    auto graph = LoadGraphFile(file);
    REQUIRE(graph.ok());
    if ((*graph)->kind() != GraphKind::kJoint) continue;
    for (const char* partitioner : {"mincut", "default"}) {
      INFO(file << " " << partitioner);
      PartitionRequest request;
      request.partitioner = partitioner;
      auto p = RunPartition(**graph, request);
      if (!p.ok()) continue;  // graphs made to be refused
      check(p->signature);
    }
  }
}

// `bytes` as the file `dir`/`name`; its path.
std::string WriteTestFile(const fs::path& dir, const std::string& name, std::string_view bytes) {
  const std::string path = (dir / name).string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
  std::fclose(f);
  return path;
}

// A gzip file of one member per entry of `members` ("ab" appends a new
// member), then `tail` as it is; its path.
std::string WriteTestGzip(const fs::path& dir, const std::string& name, const std::vector<std::string_view>& members,
                          std::string_view tail = "") {
  const std::string path = (dir / name).string();
  for (size_t k = 0; k < members.size(); ++k) {
    gzFile f = gzopen(path.c_str(), k == 0 ? "wb" : "ab");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, members[k].data(), static_cast<unsigned>(members[k].size())) ==
            static_cast<int>(members[k].size()));
    REQUIRE(gzclose(f) == Z_OK);
  }
  if (!tail.empty()) {
    std::FILE* f = std::fopen(path.c_str(), "ab");
    REQUIRE(f != nullptr);
    std::fwrite(tail.data(), 1, tail.size(), f);
    std::fclose(f);
  }
  return path;
}

// ReadFileContents inflates a .gz in one libdeflate call when it can, and
// reads with zlib what that call refuses (Note in src/json_io.cpp): several
// gzip members, zero padding, a truncated stream. Each gives what zlib alone
// gives; bytes after the stream that are neither a member nor zeros are
// refused, as Python's gzip refuses them (zlib ignores them).
TEST_CASE("gzip files: several members, trailing bytes and truncation read as zlib and Python read them") {
  const std::string source = std::string(FXREMAT_SOURCE_DIR) + "/testdata/carry_x.json.gz";
  auto text = ReadFileContents(source);
  REQUIRE(text.ok());
  auto expected = LoadGraphFile(source);
  REQUIRE(expected.ok());
  const fs::path dir = fs::temp_directory_path() / fmt::format("fxremat_gzip_test_{}", ::getpid());
  fs::create_directories(dir);
  auto gzip = [&](const std::string& name, const std::vector<std::string_view>& members, std::string_view tail) {
    return WriteTestGzip(dir, name, members, tail);
  };
  const std::string_view all(*text);
  const std::string one = gzip("one.json.gz", {all}, "");
  const std::string two = gzip("two.json.gz", {all.substr(0, all.size() / 2), all.substr(all.size() / 2)}, "");
  const std::string zeros = gzip("zeros.json.gz", {all}, std::string(64, '\0'));
  for (const std::string& path : {one, two, zeros}) {
    INFO(path);
    auto read = ReadFileContents(path);
    REQUIRE(read.ok());
    CHECK(*read == *text);
    auto g = LoadGraphFile(path);
    REQUIRE(g.ok());
    CHECK(GraphToJson(**g) == GraphToJson(**expected));
  }
  // Bytes after the stream: refused, naming where they start. Note
  // [Implausible gzip lengths]: four of them reading as a length of 4 GiB - 1
  // are not believed (the file is inflated by zlib, into a buffer sized by
  // what it inflates to), then refused like any other.
  const std::string tail = gzip("tail.json.gz", {all}, "not gzip");
  const std::string claims_4gib = gzip("claims_4gib.json.gz", {all}, std::string(4, '\xff'));
  for (const std::string& path : {tail, claims_4gib}) {
    INFO(path);
    auto read = ReadFileContents(path);
    REQUIRE_FALSE(read.ok());
    CHECK_THAT(read.status().ToString(), Catch::Contains("after the gzip stream") && Catch::Contains(path));
    CHECK_FALSE(LoadGraphFile(path).ok());
  }
  // Truncated: the last 10 bytes (part of the trailer) cut off.
  std::string bytes;
  {
    std::FILE* f = std::fopen(one.c_str(), "rb");
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), f)) > 0;) bytes.append(buffer, n);
    std::fclose(f);
  }
  const std::string cut = (dir / "cut.json.gz").string();
  {
    std::FILE* f = std::fopen(cut.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size() - 10, f);
    std::fclose(f);
  }
  auto truncated = ReadFileContents(cut);
  REQUIRE_FALSE(truncated.ok());
  CHECK_THAT(truncated.status().ToString(), Catch::Contains("truncated compressed file") && Catch::Contains(cut));
  // A header CRC (FLG.FHCRC) that does not match: zlib refuses the file
  // (libdeflate would skip the CRC unchecked, so such files are left to zlib).
  REQUIRE(bytes.size() > 10);
  REQUIRE(static_cast<unsigned char>(bytes[3]) == 0);  // zlib's gzopen writes no optional header fields
  std::string bad_crc = bytes;
  bad_crc[3] = 0x02;
  bad_crc.insert(10, std::string("\x00\x00", 2));
  const std::string crc_path = (dir / "crc.json.gz").string();
  {
    std::FILE* f = std::fopen(crc_path.c_str(), "wb");
    std::fwrite(bad_crc.data(), 1, bad_crc.size(), f);
    std::fclose(f);
  }
  auto crc = ReadFileContents(crc_path);
  CHECK_FALSE(crc.ok());
  fs::remove_all(dir);
}

// A file that is not gzip is read in one piece (ReadPlainWhole in
// src/json_io.cpp: pages mapped first, the halves read on two threads from
// 16 MiB): the bytes are the file's, with simdjson's padding spare, at every
// size around the thread threshold and at the small sizes; a file whose first
// byte only looks like gzip's is plain too.
TEST_CASE("plain files are read whole and byte for byte with the JSON padding spare") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("fxremat_plain_read_test_{}", ::getpid());
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) { return WriteTestFile(dir, name, bytes); };
  constexpr size_t kTwoThreads = size_t{16} << 20;  // kMapOnAnotherThreadFrom
  for (size_t size : {size_t{1}, size_t{3}, size_t{4095}, size_t{4097}, kTwoThreads - 1, kTwoThreads,
                      kTwoThreads + 4097}) {
    INFO(size);
    std::string bytes(size, '\0');
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>('a' + (i * 7919 + i / 4096) % 26);
    if (size >= 2) bytes[0] = '\x1f';  // gzip's first byte, not its second
    const std::string path = write(fmt::format("plain_{}.bin", size), bytes);
    auto read = ReadFileContents(path);
    REQUIRE(read.ok());
    CHECK(read->size() == size);
    CHECK(*read == bytes);
    CHECK(read->capacity() >= size + 64);  // simdjson::SIMDJSON_PADDING
  }
  // A graph read from its plain file equals the same graph read from its gzip file.
  const std::string gz = std::string(FXREMAT_SOURCE_DIR) + "/testdata/carry_x.json.gz";
  auto text = ReadFileContents(gz);
  REQUIRE(text.ok());
  const std::string plain = write("carry_x.json", *text);
  auto from_plain = LoadGraphFile(plain);
  auto from_gz = LoadGraphFile(gz);
  REQUIRE(from_plain.ok());
  REQUIRE(from_gz.ok());
  CHECK(GraphToJson(**from_plain) == GraphToJson(**from_gz));
  // An empty file is still refused by name.
  auto empty = LoadGraphFile(write("empty.json", ""));
  REQUIRE_FALSE(empty.ok());
  CHECK_THAT(empty.status().ToString(), Catch::Contains("empty file"));
  fs::remove_all(dir);
}

// Note [Known field keys]: every key the reader asks for has its own slot, and
// no other string finds one: not a key cut short or made longer, not one with
// a character changed (first, middle or last: keys over 16 bytes are compared
// in full once their first and last eight bytes match).
TEST_CASE("Note [Known field keys]: each key finds its slot, no near miss finds one") {
  const std::vector<std::string_view> keys = KnownFieldKeysForTesting();
  REQUIRE(keys.size() >= 30);
  const std::set<std::string_view> known(keys.begin(), keys.end());
  REQUIRE(known.size() == keys.size());
  for (size_t slot = 0; slot < keys.size(); ++slot) {
    INFO(keys[slot]);
    CHECK(KnownFieldSlotForTesting(keys[slot]) == static_cast<int>(slot));
    const std::string key(keys[slot]);
    std::vector<std::string> misses = {key.substr(0, key.size() - 1), key + "_", "_" + key, key + key};
    for (size_t at : {size_t{0}, key.size() / 2, key.size() - 1}) {
      std::string changed = key;
      changed[at] = changed[at] == 'x' ? 'y' : 'x';
      misses.push_back(changed);
      changed[at] = static_cast<char>(std::toupper(static_cast<unsigned char>(key[at])));
      if (changed != key) misses.push_back(changed);
    }
    for (const std::string& miss : misses) {
      INFO(miss);
      if (!known.count(miss)) CHECK(KnownFieldSlotForTesting(miss) == -1);
    }
  }
  CHECK(KnownFieldSlotForTesting("") == -1);
  CHECK(KnownFieldSlotForTesting(std::string_view("na\0e", 4)) == -1);
}

// Both front ends (Note [Two JSON front ends]) read a node's fields alike: a
// repeated key in a node, its meta or its value facts keeps its last value,
// a key the reader does not know is skipped, and an error names the same place.
TEST_CASE("Note [Known field keys]: repeated and unknown keys read as nlohmann reads them") {
  auto both = [](const std::string& json) {
    auto simd = GraphFromJson(json);
    auto nl = GraphFromJsonDocument(nlohmann::json::parse(json));
    REQUIRE(simd.ok() == nl.ok());
    if (!simd.ok()) {
      CHECK(simd.status().ToString() == nl.status().ToString());
      return std::string("error: ") + simd.status().ToString();
    }
    CHECK(GraphToJson(**simd) == GraphToJson(**nl));
    return GraphToJson(**simd);
  };
  const std::string plain = ChainJson(3);
  both(plain);
  auto edited = [&](size_t node, std::string_view find, std::string_view replace) {
    return ChainJson(3, [&](std::vector<std::string>& nodes) {
      const size_t at = nodes[node].find(find);
      REQUIRE(at != std::string::npos);
      nodes[node].replace(at, find.size(), replace);
    });
  };
  // The last dtype wins: float16, in both.
  const std::string dtype_twice = both(edited(1, R"("dtype":"float32")", R"("dtype":"float32","dtype":"float16")"));
  CHECK(dtype_twice.find("float16") != std::string::npos);
  // The last val wins, and an unknown key beside it is skipped.
  const std::string val_twice =
      both(edited(2, R"("meta":{)", R"("meta":{"val":{"kind":"none"},"hint_of_nothing":[1,2],)"));
  CHECK(val_twice == both(plain));
  // A repeated op: the last one is read (and is refused here).
  CHECK_THAT(both(edited(1, R"("op":"call_function")", R"("op":"call_function","op":"call_method")")),
             Catch::Contains("unknown op 'call_method'"));
  // A key that differs from a known one in its last byte is unknown: the node has no target.
  CHECK_THAT(both(edited(1, R"("target":)", R"("targex":)")), Catch::Contains("has no target"));
}

// Note [Warming pages ahead]: mapping never changes memory, ranges of any size
// and alignment may be queued, Drain() drops what is left, and a stopped
// warmer refuses more work.
TEST_CASE("Note [Warming pages ahead]: a PageWarmer maps without changing memory") {
  constexpr size_t kBytes = (size_t{3} << 20) + 12345;
  std::unique_ptr<std::byte[]> memory(new std::byte[kBytes]);
  for (size_t i = 0; i < kBytes; i += 4096 / 4) memory[i] = static_cast<std::byte>(i * 31 % 251);
  {
    PageWarmer warmer;
    CHECK(warmer.Queue(memory.get() + 1, 100));
    CHECK(warmer.Queue(memory.get() + 7, kBytes - 7));
    CHECK(warmer.Queue(memory.get(), 0));
    warmer.Drain();
    CHECK(warmer.Queue(memory.get(), kBytes));  // more after a Drain
    warmer.Stop();
    CHECK_FALSE(warmer.Queue(memory.get(), kBytes));
  }
  {
    PageWarmer warmer;  // destroyed with work queued: it stops
    for (int k = 0; k < 64; ++k) warmer.Queue(memory.get(), kBytes);
  }
  bool unchanged = true;
  for (size_t i = 0; i < kBytes; i += 4096 / 4) unchanged &= memory[i] == static_cast<std::byte>(i * 31 % 251);
  CHECK(unchanged);
}

// Note [Warming pages ahead]: LoadGraphFile allocates the parser's buffers
// before it reads a document of 1 MB (here 128 KiB) to 16 MiB and maps them
// meanwhile.
// The graph and every error are the ones GraphFromJson gives for the same text,
// from a plain file, a gzip file, and a two-member gzip file whose stated
// length (its last member's) is short of the text (the prepared buffers are
// then too small and the parse allocates its own).
struct WarmPagesFrom {
  explicit WarmPagesFrom(const char* n) { setenv("FXREMAT_WARM_PAGES_FROM", n, 1); }
  ~WarmPagesFrom() { unsetenv("FXREMAT_WARM_PAGES_FROM"); }
};

TEST_CASE("Note [Warming pages ahead]: graphs and errors as without the warmer") {
  WarmPagesFrom warm_from("131072");
  const fs::path dir = fs::temp_directory_path() / fmt::format("fxremat_warm_test_{}", ::getpid());
  fs::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) { return WriteTestFile(dir, name, bytes); };
  auto gzip = [&](const std::string& name, const std::vector<std::string_view>& members) {
    return WriteTestGzip(dir, name, members);
  };
  const std::string good = ChainJson(3000);
  REQUIRE(good.size() > (size_t{128} << 10));
  const std::string bad = ChainJson(3000, [](auto& nodes) {
    nodes[2500].replace(nodes[2500].find("float32"), 7, "float99");
  });
  const std::string truncated = good.substr(0, good.size() - 10);
  for (const std::string* text : {&good, &bad, &truncated}) {
    auto expected = GraphFromJson(*text);
    const std::string_view all(*text);
    for (const std::string& path :
         {write("g.json", *text), gzip("g.json.gz", {all}),
          gzip("two.json.gz", {all.substr(0, all.size() - 1000), all.substr(all.size() - 1000)})}) {
      INFO(path);
      auto g = LoadGraphFile(path);
      REQUIRE(g.ok() == expected.ok());
      if (g.ok()) CHECK(GraphToJson(**g) == GraphToJson(**expected));
      else CHECK(g.status().ToString() == expected.status().WithContext(path).ToString());
    }
  }
  fs::remove_all(dir);
}
