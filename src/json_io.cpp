// JSON reader and writer for the graph format of docs/format.md, and the
// file helpers (gzip-aware reading, atomic writing). nlohmann::json throws; all
// of its exceptions are caught in this file and become Status errors.
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "src/constants_io.h"
#include "src/facts_check.h"
#include "src/json_internal.h"

namespace fxremat {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

// Reads one JSON document into a Graph, tracking the JSON path for errors.
class GraphReader {
 public:
  Expected<std::unique_ptr<Graph>> Read(const json& doc);

 private:
  Status Fail(const std::string& path, const std::string& message) {
    return Status::BadInput(message, path);
  }
  // An integer that fits int64 (a JSON integer above INT64_MAX is refused, not
  // wrapped to a negative number).
  Expected<int64_t> ReadInt64(const json& j, const std::string& path, const char* what) {
    if (!j.is_number_integer()) return Fail(path, fmt::format("expected {}", what));
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return Fail(path, fmt::format("the integer {} is outside int64", j.get<uint64_t>()));
    return j.get<int64_t>();
  }
  Status ReadHeader(const json& doc);
  Status ReadOps(const json& ops);
  Status CheckReferences(const json& nodes);
  Status ReadNode(const json& j, size_t index);
  Expected<Argument> ReadArgument(const json& j, const std::string& path, const std::string& node_name,
                                  int depth = 0);
  Expected<ValueFacts> ReadValueFacts(const json& j, const std::string& path, int depth = 0);
  Expected<Dim> ReadDim(const json& j, const std::string& path);
  Status ReadMeta(const json& j, const std::string& path, Node* node);
  Status ReadConstants(const json& constants);
  Expected<const SafetensorsEntry*> SidecarEntry(const std::string& file, const std::string& key,
                                                 const std::string& path);

 public:
  std::string sidecar_dir_;  // where sidecar files are; empty: none may be referenced

 private:
  std::map<std::string, std::map<std::string, SafetensorsEntry>> sidecars_;
  Status InferRolesAndTangents();

  std::unique_ptr<Graph> graph_ = std::make_unique<Graph>();
  bool has_tangent_outputs_ = false;
};

const char* TypeName(const json& j) { return j.type_name(); }

Status GraphReader::ReadHeader(const json& doc) {
  if (!doc.is_object()) return Fail("/", fmt::format("expected a JSON object, got {}", TypeName(doc)));
  if (!doc.contains("format") || doc["format"] != "fxremat.graph")
    return Fail("/format", "not an fxremat graph (expected \"format\": \"fxremat.graph\")");
  if (!doc.contains("version") || !doc["version"].is_array() || doc["version"].size() != 2 ||
      !doc["version"][0].is_number_integer() || !doc["version"][1].is_number_integer())
    return Fail("/version", "expected \"version\": [major, minor]");
  int64_t major = doc["version"][0].get<int64_t>();
  int64_t minor = doc["version"][1].get<int64_t>();
  if (major != kFormatMajorVersion)
    return Fail("/version", fmt::format("unsupported format version {}.{}: this reader supports major "
                                        "version {} (files {}.x)",
                                        major, minor, kFormatMajorVersion, kFormatMajorVersion));
  if (doc.contains("name")) {
    if (!doc["name"].is_string()) return Fail("/name", "expected a string");
    graph_->setName(doc["name"].get<std::string>());
  }
  if (!doc.contains("kind") || !doc["kind"].is_string())
    return Fail("/kind", "missing graph kind (joint, forward, backward or plain)");
  auto kind = GraphKindFromName(doc["kind"].get<std::string>());
  if (!kind) return Fail("/kind", fmt::format("unknown graph kind '{}'", doc["kind"].get<std::string>()));
  graph_->setKind(*kind);

  if (*kind == GraphKind::kJoint) {
    if (!doc.contains("joint") || !doc["joint"].is_object())
      return Fail("/joint", "a joint graph needs a \"joint\" object");
    const json& joint = doc["joint"];
    if (!joint.contains("num_fwd_outputs") || !joint["num_fwd_outputs"].is_number_integer())
      return Fail("/joint/num_fwd_outputs", "missing or not an integer");
    graph_->joint().num_fwd_outputs = joint["num_fwd_outputs"].get<int64_t>();
    if (joint.contains("output_paths") && !joint["output_paths"].is_null()) {
      if (!joint["output_paths"].is_array()) return Fail("/joint/output_paths", "expected an array");
      for (size_t i = 0; i < joint["output_paths"].size(); ++i) {
        const json& p = joint["output_paths"][i];
        if (p.is_null()) graph_->joint().output_paths.emplace_back(std::nullopt);
        else if (p.is_string()) graph_->joint().output_paths.emplace_back(p.get<std::string>());
        else return Fail(fmt::format("/joint/output_paths/{}", i), "expected a string or null");
      }
    }
    if (joint.contains("tangent_outputs") && !joint["tangent_outputs"].is_null()) {
      has_tangent_outputs_ = true;
      if (!joint["tangent_outputs"].is_array()) return Fail("/joint/tangent_outputs", "expected an array");
      for (size_t i = 0; i < joint["tangent_outputs"].size(); ++i) {
        const json& t = joint["tangent_outputs"][i];
        if (!t.is_number_integer())
          return Fail(fmt::format("/joint/tangent_outputs/{}", i), "expected an integer");
        graph_->joint().tangent_outputs.push_back(t.get<int64_t>());
      }
    }
  }
  if (doc.contains("symbols")) {
    if (!doc["symbols"].is_object()) return Fail("/symbols", "expected an object");
    for (const auto& [sym, hint] : doc["symbols"].items()) {
      FXREMAT_ASSIGN_OR_RETURN(int64_t h, ReadInt64(hint, "/symbols/" + sym, "an integer hint"));
      if (auto problem = SymbolHintProblem(sym, h)) return Fail("/symbols/" + sym, *problem);
      graph_->symbols()[sym] = h;
    }
  }
  return Status::Ok();
}

Status GraphReader::ReadOps(const json& ops) {
  if (!ops.is_object()) return Fail("/ops", "expected an object");
  for (const auto& [target, facts] : ops.items()) {
    const std::string path = "/ops/" + target;
    if (!IsDottedName(target)) return Fail(path, fmt::format("op '{}' is not a dotted name (identifiers joined by '.')", target));
    if (!facts.is_object()) return Fail(path, "expected an object");
    std::string schema;
    if (facts.contains("schema")) {
      if (!facts["schema"].is_string()) return Fail(path + "/schema", "expected a string");
      schema = facts["schema"].get<std::string>();
    }
    std::vector<std::string> tags;
    if (facts.contains("tags")) {
      if (!facts["tags"].is_array()) return Fail(path + "/tags", "expected an array of strings");
      for (const json& t : facts["tags"]) {
        if (!t.is_string()) return Fail(path + "/tags", "expected an array of strings");
        // torch.Tag names; the text form writes them bare (found by the fuzzer)
        if (!IsPythonIdentifier(t.get<std::string>()))
          return Fail(path + "/tags", fmt::format("tag '{}' is not an identifier", t.get<std::string>()));
        tags.push_back(t.get<std::string>());
      }
    }
    std::vector<std::string> packet_tags;
    if (facts.contains("packet_tags")) {
      if (!facts["packet_tags"].is_array()) return Fail(path + "/packet_tags", "expected an array of strings");
      for (const json& t : facts["packet_tags"]) {
        if (!t.is_string()) return Fail(path + "/packet_tags", "expected an array of strings");
        // torch.Tag names; the text form writes them bare (found by the fuzzer)
        if (!IsPythonIdentifier(t.get<std::string>()))
          return Fail(path + "/packet_tags", fmt::format("tag '{}' is not an identifier", t.get<std::string>()));
        packet_tags.push_back(t.get<std::string>());
      }
    }
    auto info = MakeOpInfo(target, schema, std::move(tags));
    if (!info.ok()) return info.status().WithContext(path);
    info->packet_tags = std::move(packet_tags);
    graph_->ops().emplace(target, std::move(info).value());
  }
  return Status::Ok();
}

void CollectRefs(const json& j, std::vector<std::string>& out) {
  if (j.is_object()) {
    if (j.size() == 1 && j.contains("node") && j["node"].is_string()) {
      out.push_back(j["node"].get<std::string>());
      return;
    }
    for (const auto& [k, v] : j.items()) CollectRefs(v, out);
  } else if (j.is_array()) {
    for (const json& v : j) CollectRefs(v, out);
  }
}

// Before building anything: names unique, every reference resolves to some
// node, and references point backwards. A forward reference is reported as a
// cycle when the references form one, else as a use before definition.
Status GraphReader::CheckReferences(const json& nodes) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = fmt::format("/nodes/{}", i);
    if (!nodes[i].is_object()) return Fail(path, "expected a node object");
    if (!nodes[i].contains("name") || !nodes[i]["name"].is_string())
      return Fail(path + "/name", "missing node name");
    std::string name = nodes[i]["name"].get<std::string>();
    if (name.empty()) return Fail(path + "/name", "empty node name");
    if (!IsPythonIdentifier(name))
      return Fail(path + "/name", fmt::format("node name '{}' is not a Python identifier", name));
    auto [it, inserted] = index_of.emplace(name, i);
    if (!inserted)
      return Fail(path + "/name", fmt::format("duplicate node name '{}' (first defined at /nodes/{})",
                                              name, it->second));
  }
  std::vector<std::vector<size_t>> edges(nodes.size());
  std::optional<std::pair<size_t, size_t>> first_forward_ref;
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::vector<std::string> refs;
    if (nodes[i].contains("args")) CollectRefs(nodes[i]["args"], refs);
    if (nodes[i].contains("kwargs")) CollectRefs(nodes[i]["kwargs"], refs);
    const std::string name = nodes[i]["name"].get<std::string>();
    for (const std::string& ref : refs) {
      auto it = index_of.find(ref);
      if (it == index_of.end())
        return Fail(fmt::format("/nodes/{}", i),
                    fmt::format("node '{}' references '{}', which is not a node of this graph "
                                "(dangling reference)", name, ref));
      edges[i].push_back(it->second);
      if (it->second >= i && !first_forward_ref) first_forward_ref = std::make_pair(i, it->second);
    }
  }
  if (!first_forward_ref) return Status::Ok();
  // Look for a cycle with a DFS from every node (colors: 0 new, 1 on stack, 2
  // done). Iterative: the path can be as long as the graph (a chain listed
  // backwards), far deeper than the call stack allows.
  std::vector<int> color(nodes.size(), 0);
  std::vector<size_t> stack;       // the current path
  std::vector<size_t> next_edge;   // per path entry: the next edge to follow
  auto dfs = [&](size_t root) -> std::optional<std::vector<size_t>> {
    color[root] = 1;
    stack.assign(1, root);
    next_edge.assign(1, 0);
    while (!stack.empty()) {
      const size_t v = stack.back();
      if (next_edge.back() == edges[v].size()) {
        color[v] = 2;
        stack.pop_back();
        next_edge.pop_back();
        continue;
      }
      const size_t w = edges[v][next_edge.back()++];
      if (color[w] == 1) {
        auto start = std::find(stack.begin(), stack.end(), w);
        std::vector<size_t> cycle(start, stack.end());
        cycle.push_back(w);
        return cycle;
      }
      if (color[w] == 0) {
        color[w] = 1;
        stack.push_back(w);
        next_edge.push_back(0);
      }
    }
    return std::nullopt;
  };
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (color[v] != 0) continue;
    if (auto cycle = dfs(v)) {
      std::string text;
      for (size_t k = 0; k < cycle->size(); ++k)
        text += (k ? " -> " : "") + nodes[(*cycle)[k]]["name"].get<std::string>();
      return Fail(fmt::format("/nodes/{}", cycle->front()),
                  fmt::format("cycle in the graph: {} (each node uses the next)", text));
    }
  }
  auto [user, used] = *first_forward_ref;
  return Fail(fmt::format("/nodes/{}", user),
              fmt::format("node '{}' uses '{}' before it is defined (nodes must be in topological order)",
                          nodes[user]["name"].get<std::string>(), nodes[used]["name"].get<std::string>()));
}

Expected<Dim> GraphReader::ReadDim(const json& j, const std::string& path) {
  if (j.is_number_integer()) {
    FXREMAT_ASSIGN_OR_RETURN(int64_t v, ReadInt64(j, path, "an integer"));
    return Dim::Static(v);
  }
  if (j.is_object() && j.contains("sym") && j["sym"].is_string()) {
    Dim d;
    d.expr = j["sym"].get<std::string>();
    if (j.contains("hint")) {
      FXREMAT_ASSIGN_OR_RETURN(d.hint, ReadInt64(j["hint"], path + "/hint", "an integer"));
    } else if (auto it = graph_->symbols().find(d.expr); it != graph_->symbols().end()) {
      d.hint = it->second;
    } else {
      return Fail(path, fmt::format("symbolic dim '{}' has no hint (add it to \"symbols\" or give \"hint\")", d.expr));
    }
    return d;
  }
  return Fail(path, "expected an integer or {\"sym\": EXPR}");
}

Expected<ValueFacts> GraphReader::ReadValueFacts(const json& j, const std::string& path, int depth) {
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string())
    return Fail(path, "expected value facts {\"kind\": ...}");
  const std::string kind = j["kind"].get<std::string>();
  ValueFacts v;
  if (kind == "tensor") {
    v.kind = ValueFacts::Kind::kTensor;
    if (!j.contains("dtype") || !j["dtype"].is_string()) return Fail(path + "/dtype", "missing tensor dtype");
    auto dtype = DTypeFromName(j["dtype"].get<std::string>());
    if (!dtype) return Fail(path + "/dtype", fmt::format("unknown dtype '{}'", j["dtype"].get<std::string>()));
    v.tensor.dtype = *dtype;
    if (!j.contains("shape") || !j["shape"].is_array()) return Fail(path + "/shape", "missing tensor shape");
    for (size_t i = 0; i < j["shape"].size(); ++i) {
      FXREMAT_ASSIGN_OR_RETURN(Dim d, ReadDim(j["shape"][i], fmt::format("{}/shape/{}", path, i)));
      v.tensor.shape.push_back(std::move(d));
    }
    if (j.contains("stride")) {
      if (!j["stride"].is_array()) return Fail(path + "/stride", "expected an array");
      for (size_t i = 0; i < j["stride"].size(); ++i) {
        FXREMAT_ASSIGN_OR_RETURN(Dim d, ReadDim(j["stride"][i], fmt::format("{}/stride/{}", path, i)));
        v.tensor.stride.push_back(std::move(d));
      }
      if (v.tensor.stride.size() != v.tensor.shape.size())
        return Fail(path + "/stride", fmt::format("{} strides for {} dims", v.tensor.stride.size(),
                                                  v.tensor.shape.size()));
    }
    if (auto problem = FindTensorFactsProblem(v.tensor))
      return Fail(fmt::format("{}/{}/{}", path, problem->field, problem->index), problem->message);
    if (j.contains("device")) {
      if (!j["device"].is_string()) return Fail(path + "/device", "expected a string");
      v.tensor.device = j["device"].get<std::string>();
    }
    if (j.contains("storage") && !j["storage"].is_null()) {
      if (!j["storage"].is_number_integer()) return Fail(path + "/storage", "expected an integer");
      v.tensor.storage = j["storage"].get<int64_t>();
    }
    if (j.contains("requires_grad")) {
      if (!j["requires_grad"].is_boolean()) return Fail(path + "/requires_grad", "expected a boolean");
      v.tensor.requires_grad = j["requires_grad"].get<bool>();
    }
  } else if (kind == "symint" || kind == "symfloat" || kind == "symbool") {
    v.kind = kind == "symint" ? ValueFacts::Kind::kSymInt
             : kind == "symfloat" ? ValueFacts::Kind::kSymFloat : ValueFacts::Kind::kSymBool;
    if (!j.contains("expr") || !j["expr"].is_string()) return Fail(path + "/expr", "missing expression");
    v.expr = j["expr"].get<std::string>();
    if (j.contains("hint") && j["hint"].is_number_integer()) {
      v.hint = j["hint"].get<int64_t>();
    } else if (auto it = graph_->symbols().find(v.expr); it != graph_->symbols().end()) {
      v.hint = it->second;  // a bare symbol: its hint is the graph's (what verify feeds it)
    }
  } else if (kind == "tuple") {
    v.kind = ValueFacts::Kind::kTuple;
    if (!j.contains("items") || !j["items"].is_array()) return Fail(path + "/items", "missing tuple items");
    if (depth >= kMaxTupleNesting) return Fail(path, fmt::format("tuples nest deeper than {} levels", kMaxTupleNesting));
    for (size_t i = 0; i < j["items"].size(); ++i) {
      FXREMAT_ASSIGN_OR_RETURN(ValueFacts item, ReadValueFacts(j["items"][i], fmt::format("{}/items/{}", path, i), depth + 1));
      v.items.push_back(std::move(item));
    }
  } else if (kind == "none") {
    v.kind = ValueFacts::Kind::kNone;
  } else if (kind == "const") {
    v.kind = ValueFacts::Kind::kConst;
    v.expr = j.contains("value") ? j["value"].dump() : "None";
  } else {
    return Fail(path + "/kind", fmt::format("unknown value kind '{}'", kind));
  }
  return v;
}

Expected<Argument> GraphReader::ReadArgument(const json& j, const std::string& path, const std::string& node_name,
                                             int depth) {
  switch (j.type()) {
    case json::value_t::null: return Argument::None();
    case json::value_t::boolean: return Argument::Bool(j.get<bool>());
    case json::value_t::number_integer: return Argument::Int(j.get<int64_t>());
    case json::value_t::number_unsigned:
      if (j.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Fail(path, fmt::format("the integer {} is outside int64", j.get<uint64_t>()));
      return Argument::Int(j.get<int64_t>());
    case json::value_t::number_float:
      if (!std::isfinite(j.get<double>()))
        return Fail(path, "a non-finite number: write {\"float\": \"inf\"}, \"-inf\" or \"nan\"");
      return Argument::Double(j.get<double>());
    case json::value_t::string: return Argument::String(j.get<std::string>());
    case json::value_t::array: {
      if (depth >= kMaxArgumentNesting)
        return Fail(path, fmt::format("arguments nest deeper than {} levels", kMaxArgumentNesting));
      std::vector<Argument> items;
      for (size_t i = 0; i < j.size(); ++i) {
        FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(j[i], fmt::format("{}/{}", path, i), node_name, depth + 1));
        items.push_back(std::move(a));
      }
      return Argument::List(std::move(items));
    }
    case json::value_t::object: {
      if (j.size() != 1) break;
      auto only = j.begin();
      const std::string key = only.key();
      const json& value = only.value();
      if (key == "node" && value.is_string()) {
        Node* n = graph_->findNode(value.get<std::string>());
        if (!n) return Fail(path, fmt::format("node '{}' references '{}', which is not defined before it",
                                              node_name, value.get<std::string>()));
        return Argument::NodeRef(n);
      }
      if (!value.is_string()) break;
      const std::string text = value.get<std::string>();
      if (key == "float") {
        if (text == "inf") return Argument::Double(INFINITY);
        if (text == "-inf") return Argument::Double(-INFINITY);
        if (text == "nan") return Argument::Double(NAN);
        return Fail(path, fmt::format("unknown float constant '{}'", text));
      }
      if (key == "dtype") {
        auto d = DTypeFromName(text);
        if (!d) return Fail(path, fmt::format("unknown dtype '{}'", text));
        return Argument::OfDType(*d);
      }
      if (key == "device") return Argument::Device(text);
      if (key == "layout") {
        if (!IsLayoutName(text)) return Fail(path, fmt::format("unknown layout '{}'", text));
        return Argument::Layout(text);
      }
      if (key == "memory_format") {
        if (!IsMemoryFormatName(text)) return Fail(path, fmt::format("unknown memory format '{}'", text));
        return Argument::MemoryFormat(text);
      }
      break;
    }
    default: break;
  }
  return Fail(path, fmt::format("unsupported argument {}", j.dump()));
}

Status GraphReader::ReadMeta(const json& j, const std::string& path, Node* node) {
  if (!j.is_object()) return Fail(path, "expected an object");
  if (j.contains("val")) {
    FXREMAT_ASSIGN_OR_RETURN(ValueFacts v, ReadValueFacts(j["val"], path + "/val"));
    node->val() = std::move(v);
  }
  NodeMeta& meta = node->meta();
  auto read_string = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key) || j[key].is_null()) return Status::Ok();
    if (!j[key].is_string()) return Fail(path + "/" + key, "expected a string");
    out = j[key].get<std::string>();
    return Status::Ok();
  };
  FXREMAT_RETURN_IF_ERROR(read_string("recompute", meta.recompute));
  FXREMAT_RETURN_IF_ERROR(read_string("partitioner_tag", meta.partitioner_tag));
  FXREMAT_RETURN_IF_ERROR(read_string("stack_trace", meta.stack_trace));
  static const std::set<std::string> kPolicies = {"MUST_SAVE", "PREFER_SAVE", "MUST_RECOMPUTE",
                                                  "PREFER_RECOMPUTE", "MUST_CPU_OFFLOAD", "PREFER_CPU_OFFLOAD"};
  if (!meta.recompute.empty() && !kPolicies.count(meta.recompute))
    return Fail(path + "/recompute", fmt::format("unknown checkpoint policy '{}'", meta.recompute));
  if (j.contains("ac_graph_id") && !j["ac_graph_id"].is_null()) {
    if (!j["ac_graph_id"].is_number_integer()) return Fail(path + "/ac_graph_id", "expected an integer");
    meta.ac_graph_id = j["ac_graph_id"].get<int64_t>();
  }
  if (j.contains("names") && !j["names"].is_null()) {
    const json& names = j["names"];
    if (!names.is_array()) return Fail(path + "/names", "expected a list of strings");
    for (size_t k = 0; k < names.size(); ++k) {
      if (!names[k].is_string()) return Fail(fmt::format("{}/names/{}", path, k), "expected a string");
      meta.names.push_back(names[k].get<std::string>());
    }
  }
  if (j.contains("offload_requested") && !j["offload_requested"].is_null()) {
    if (!j["offload_requested"].is_boolean()) return Fail(path + "/offload_requested", "expected a boolean");
    meta.offload_requested = j["offload_requested"].get<bool>();
  }
  if (j.contains("mutated") && !j["mutated"].is_null()) {
    if (!j["mutated"].is_boolean()) return Fail(path + "/mutated", "expected a boolean");
    meta.mutated = j["mutated"].get<bool>();
  }
  if (j.contains("saved_tensor_with_no_vc_check") && !j["saved_tensor_with_no_vc_check"].is_null()) {
    if (!j["saved_tensor_with_no_vc_check"].is_boolean())
      return Fail(path + "/saved_tensor_with_no_vc_check", "expected a boolean");
    meta.no_vc_check = j["saved_tensor_with_no_vc_check"].get<bool>();
  }
  if (j.contains("has_backward_hook") && !j["has_backward_hook"].is_null()) {
    if (!j["has_backward_hook"].is_boolean()) return Fail(path + "/has_backward_hook", "expected a boolean");
    meta.has_backward_hook = j["has_backward_hook"].get<bool>();
  }
  for (const auto& [key, field] : {std::pair{"memory_budget", &NodeMeta::memory_budget},
                                   std::pair{"region_memory_budget", &NodeMeta::region_memory_budget}}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number() || !std::isfinite(j[key].get<double>()))
      return Fail(path + "/" + key, "expected a number");
    meta.*field = j[key].get<double>();
  }
  if (j.contains("written_back_from") && !j["written_back_from"].is_null()) {
    if (!j["written_back_from"].is_number_integer() || j["written_back_from"].get<int64_t>() < 0)
      return Fail(path + "/written_back_from", "expected a forward output index");
    meta.written_back_from = j["written_back_from"].get<int64_t>();
  }
  if (j.contains("value_range") && !j["value_range"].is_null()) {
    const json& r = j["value_range"];
    if (!r.is_array() || r.size() != 2) return Fail(path + "/value_range", "expected [low, high]");
    FXREMAT_ASSIGN_OR_RETURN(int64_t low, ReadInt64(r[0], path + "/value_range/0", "an integer (low)"));
    FXREMAT_ASSIGN_OR_RETURN(int64_t high, ReadInt64(r[1], path + "/value_range/1", "an integer (high)"));
    if (auto problem = ValueRangeProblem(low, high)) return Fail(path + "/value_range", *problem);
    meta.value_range = std::make_pair(low, high);
  }
  return Status::Ok();
}

Status GraphReader::ReadNode(const json& j, size_t index) {
  const std::string path = fmt::format("/nodes/{}", index);
  const std::string name = j["name"].get<std::string>();
  if (!j.contains("op") || !j["op"].is_string()) return Fail(path + "/op", fmt::format("node '{}' has no op", name));
  const std::string op_name = j["op"].get<std::string>();
  OpKind op;
  if (op_name == "placeholder") op = OpKind::kPlaceholder;
  else if (op_name == "call_function") op = OpKind::kCallFunction;
  else if (op_name == "get_attr") op = OpKind::kGetAttr;
  else if (op_name == "output") op = OpKind::kOutput;
  else return Fail(path + "/op", fmt::format("node '{}': unknown op '{}' (call_module and call_method "
                                             "are not part of aten graphs)", name, op_name));
  if (graph_->outputNode() != nullptr)
    return Fail(path, fmt::format("node '{}' follows the output node (the output node must be last)", name));
  std::string target = op == OpKind::kOutput ? "output" : name;
  if (j.contains("target")) {
    if (!j["target"].is_string()) return Fail(path + "/target", "expected a string");
    target = j["target"].get<std::string>();
  } else if (op == OpKind::kCallFunction) {
    return Fail(path + "/target", fmt::format("call_function node '{}' has no target", name));
  }
  if ((op == OpKind::kCallFunction || op == OpKind::kGetAttr) && !IsDottedName(target))
    return Fail(path + "/target", fmt::format("node '{}': target '{}' is not a dotted name (identifiers joined by '.')",
                                              name, target));
  std::vector<Argument> args;
  if (j.contains("args")) {
    if (!j["args"].is_array()) return Fail(path + "/args", "expected an array");
    for (size_t i = 0; i < j["args"].size(); ++i) {
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(j["args"][i], fmt::format("{}/args/{}", path, i), name));
      args.push_back(std::move(a));
    }
  }
  Kwargs kwargs;
  if (j.contains("kwargs")) {
    if (!j["kwargs"].is_object()) return Fail(path + "/kwargs", "expected an object");
    for (const auto& [k, v] : j["kwargs"].items()) {
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(v, fmt::format("{}/kwargs/{}", path, k), name));
      kwargs.emplace_back(k, std::move(a));
    }
  }
  if (op == OpKind::kOutput) {
    if (args.size() != 1 || args[0].kind != Argument::Kind::kList)
      return Fail(path + "/args", "the output node takes one argument: a list of output values");
    for (size_t i = 0; i < args[0].list.size(); ++i) {
      const Argument& a = args[0].list[i];
      if (a.kind != Argument::Kind::kNode && a.kind != Argument::Kind::kNone)
        return Fail(fmt::format("{}/args/0/{}", path, i), "an output entry must be a node reference or null");
    }
  }
  Node* node = graph_->createNode(op, name, std::move(target), std::move(args), std::move(kwargs));
  if (j.contains("meta")) FXREMAT_RETURN_IF_ERROR(ReadMeta(j["meta"], path + "/meta", node));
  if ((op == OpKind::kPlaceholder || op == OpKind::kCallFunction) &&
      node->val().kind == ValueFacts::Kind::kUnknown)
    return Fail(path + "/meta/val", fmt::format("node '{}' has no value facts (meta.val): shapes and "
                                                "dtypes are needed to size activations", name));
  if (j.contains("role")) {
    if (op != OpKind::kPlaceholder) return Fail(path + "/role", "only placeholders have a role");
    auto role = j["role"].is_string() ? PlaceholderRoleFromName(j["role"].get<std::string>()) : std::nullopt;
    if (!role) return Fail(path + "/role", fmt::format("unknown placeholder role {}", j["role"].dump()));
    node->setRole(*role);
  }
  if (j.contains("path") && !j["path"].is_null()) {
    if (!j["path"].is_string()) return Fail(path + "/path", "expected a string");
    node->setPath(j["path"].get<std::string>());
  }
  return Status::Ok();
}

// Roles follow AOTAutograd's naming convention when a file does not state them;
// tangent_outputs default to the forward outputs that require grad.
Status GraphReader::InferRolesAndTangents() {
  for (Node* p : graph_->placeholders()) {
    if (p->role() != PlaceholderRole::kNone) continue;
    const std::string& t = p->target();
    if (graph_->kind() != GraphKind::kJoint) p->setRole(PlaceholderRole::kInput);
    else if (t.find("tangents") != std::string::npos) p->setRole(PlaceholderRole::kTangent);
    else if (t.find("fwd_seed") != std::string::npos || t.find("fwd_base_offset") != std::string::npos)
      p->setRole(PlaceholderRole::kFwdRng);
    else if (t.find("bwd_seed") != std::string::npos || t.find("bwd_base_offset") != std::string::npos)
      p->setRole(PlaceholderRole::kBwdRng);
    else p->setRole(PlaceholderRole::kPrimal);
  }
  if (graph_->kind() == GraphKind::kJoint && !has_tangent_outputs_) {
    std::vector<Node*> outputs = graph_->outputValues();
    JointFacts& joint = graph_->joint();
    for (int64_t i = 0; i < joint.num_fwd_outputs && i < static_cast<int64_t>(outputs.size()); ++i) {
      Node* o = outputs[static_cast<size_t>(i)];
      if (o && o->val().is_tensor() && o->val().tensor.requires_grad) joint.tangent_outputs.push_back(i);
    }
  }
  return Status::Ok();
}

Expected<const SafetensorsEntry*> GraphReader::SidecarEntry(const std::string& file, const std::string& key,
                                                            const std::string& path) {
  if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." ||
      file == "..")
    return Fail(path + "/file", fmt::format("'{}' is not a file name beside the graph", file));
  if (sidecar_dir_.empty())
    return Fail(path + "/file", fmt::format("the constant is in the sidecar file '{}', but the document was not "
                                            "read from a file (load it by its path)", file));
  auto it = sidecars_.find(file);
  if (it == sidecars_.end()) {
    const std::string full = (std::filesystem::path(sidecar_dir_) / file).string();
    Expected<std::string> contents = ReadFileContents(full);
    if (!contents.ok())
      return Fail(path + "/file", fmt::format("cannot read the constants file '{}': {}", file, contents.status().ToString()));
    FXREMAT_ASSIGN_OR_RETURN(auto entries, ParseSafetensors(*contents, full));
    it = sidecars_.emplace(file, std::move(entries)).first;
  }
  auto e = it->second.find(key);
  if (e == it->second.end()) return Fail(path + "/key", fmt::format("the sidecar file '{}' has no tensor '{}'", file, key));
  return &e->second;
}

Status GraphReader::ReadConstants(const json& constants) {
  if (!constants.is_object()) return Fail("/constants", "expected an object");
  for (const auto& [target, j] : constants.items()) {
    const std::string path = "/constants/" + target;
    if (!j.is_object()) return Fail(path, "expected an object");
    Constant c;
    if (j.contains("opaque")) {
      if (!j["opaque"].is_string()) return Fail(path + "/opaque", "expected the object's type name");
      c.kind = Constant::Kind::kOpaque;
      c.type_name = j["opaque"].get<std::string>();
      graph_->constants().emplace(target, std::move(c));
      continue;
    }
    if (!j.contains("val")) return Fail(path, "missing \"val\" (the tensor's facts)");
    FXREMAT_ASSIGN_OR_RETURN(ValueFacts v, ReadValueFacts(j["val"], path + "/val"));
    if (!v.is_tensor()) return Fail(path + "/val", "a constant's facts must be a tensor's");
    int64_t expected = DTypeItemSize(v.tensor.dtype);
    for (size_t i = 0; i < v.tensor.shape.size(); ++i) {
      const Dim& d = v.tensor.shape[i];
      if (!d.is_static()) return Fail(fmt::format("{}/val/shape/{}", path, i), "a constant's shape is static");
      if (d.hint < 0) return Fail(fmt::format("{}/val/shape/{}", path, i), "negative dimension");
      if (d.hint != 0 && expected > std::numeric_limits<int64_t>::max() / d.hint)
        return Fail(path + "/val/shape", "the tensor's size overflows 64 bits");
      expected *= d.hint;
    }
    c.facts = v.tensor;
    const int present = j.contains("data") + j.contains("file") + (j.contains("by_reference") ? 1 : 0);
    if (present != 1) return Fail(path, "expected exactly one of \"data\", \"file\" or \"by_reference\"");
    if (j.contains("data")) {
      if (!j["data"].is_string()) return Fail(path + "/data", "expected base64 text");
      FXREMAT_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(j["data"].get<std::string>(), path + "/data"));
      if (static_cast<int64_t>(bytes.size()) != expected)
        return Fail(path + "/data", fmt::format("{} bytes of data for a tensor of {} bytes", bytes.size(), expected));
      c.data = std::make_shared<const std::string>(std::move(bytes));
    } else if (j.contains("file")) {
      if (!j["file"].is_string()) return Fail(path + "/file", "expected a file name");
      std::string key = target;
      if (j.contains("key")) {
        if (!j["key"].is_string()) return Fail(path + "/key", "expected a string");
        key = j["key"].get<std::string>();
      }
      FXREMAT_ASSIGN_OR_RETURN(const SafetensorsEntry* e, SidecarEntry(j["file"].get<std::string>(), key, path));
      if (e->dtype != SafetensorsDType(c.facts.dtype))
        return Fail(path + "/file", fmt::format("the sidecar holds {} data for a {} tensor", e->dtype,
                                                DTypeName(c.facts.dtype)));
      if (static_cast<int64_t>(e->data.size()) != expected)
        return Fail(path + "/file", fmt::format("the sidecar holds {} bytes for a tensor of {} bytes", e->data.size(),
                                                expected));
      c.data = std::make_shared<const std::string>(e->data);
    } else if (!j["by_reference"].is_boolean() || !j["by_reference"].get<bool>()) {
      return Fail(path + "/by_reference", "expected true");
    }
    graph_->constants().emplace(target, std::move(c));
  }
  return Status::Ok();
}

Expected<std::unique_ptr<Graph>> GraphReader::Read(const json& doc) {
  FXREMAT_RETURN_IF_ERROR(ReadHeader(doc));
  if (doc.contains("ops")) FXREMAT_RETURN_IF_ERROR(ReadOps(doc["ops"]));
  if (doc.contains("constants")) FXREMAT_RETURN_IF_ERROR(ReadConstants(doc["constants"]));
  if (!doc.contains("nodes") || !doc["nodes"].is_array()) return Fail("/nodes", "missing the node list");
  const json& nodes = doc["nodes"];
  FXREMAT_RETURN_IF_ERROR(CheckReferences(nodes));
  for (size_t i = 0; i < nodes.size(); ++i) FXREMAT_RETURN_IF_ERROR(ReadNode(nodes[i], i));
  if (graph_->outputNode() == nullptr)
    return Fail("/nodes", "the graph has no output node");
  FXREMAT_RETURN_IF_ERROR(InferRolesAndTangents());
  FXREMAT_RETURN_IF_ERROR(VerifyGraph(*graph_));
  return std::move(graph_);
}

// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

ojson DimToJson(const Dim& d) {
  if (d.is_static()) return d.hint;
  return ojson{{"sym", d.expr}, {"hint", d.hint}};
}

ojson ValueFactsToJson(const ValueFacts& v) {
  ojson j;
  switch (v.kind) {
    case ValueFacts::Kind::kTensor: {
      j["kind"] = "tensor";
      j["dtype"] = std::string(DTypeName(v.tensor.dtype));
      ojson shape = ojson::array(), stride = ojson::array();
      for (const Dim& d : v.tensor.shape) shape.push_back(DimToJson(d));
      for (const Dim& d : v.tensor.stride) stride.push_back(DimToJson(d));
      j["shape"] = shape;
      // Unknown strides (the readers take facts without them) stay unwritten: an
      // empty list beside a non-empty shape reads as a count mismatch (found by
      // tests/fuzz/fuzz_loader.cpp: text "f32[4]cpu" could not be read back as JSON).
      if (!v.tensor.stride.empty() || v.tensor.shape.empty()) j["stride"] = stride;
      j["device"] = v.tensor.device;
      j["requires_grad"] = v.tensor.requires_grad;
      if (v.tensor.storage >= 0) j["storage"] = v.tensor.storage;
      break;
    }
    case ValueFacts::Kind::kSymInt: j["kind"] = "symint"; j["expr"] = v.expr; j["hint"] = v.hint; break;
    case ValueFacts::Kind::kSymFloat: j["kind"] = "symfloat"; j["expr"] = v.expr; break;
    case ValueFacts::Kind::kSymBool: j["kind"] = "symbool"; j["expr"] = v.expr; break;
    case ValueFacts::Kind::kTuple: {
      j["kind"] = "tuple";
      ojson items = ojson::array();
      for (const ValueFacts& item : v.items) items.push_back(ValueFactsToJson(item));
      j["items"] = items;
      break;
    }
    case ValueFacts::Kind::kNone: j["kind"] = "none"; break;
    case ValueFacts::Kind::kConst:
      j["kind"] = "const";
      j["value"] = ojson::parse(v.expr, nullptr, /*allow_exceptions=*/false);
      break;
    case ValueFacts::Kind::kUnknown: break;
  }
  return j;
}

ojson ArgumentToJson(const Argument& a) {
  switch (a.kind) {
    case Argument::Kind::kNone: return nullptr;
    case Argument::Kind::kBool: return a.int_value != 0;
    case Argument::Kind::kInt: return a.int_value;
    case Argument::Kind::kDouble:
      if (std::isnan(a.double_value)) return ojson{{"float", "nan"}};
      if (std::isinf(a.double_value)) return ojson{{"float", a.double_value > 0 ? "inf" : "-inf"}};
      return a.double_value;
    case Argument::Kind::kString: return a.text;
    case Argument::Kind::kNode: return ojson{{"node", a.node->name()}};
    case Argument::Kind::kList: {
      ojson list = ojson::array();
      for (const Argument& item : a.list) list.push_back(ArgumentToJson(item));
      return list;
    }
    case Argument::Kind::kDType: return ojson{{"dtype", std::string(DTypeName(a.dtype()))}};
    case Argument::Kind::kDevice: return ojson{{"device", a.text}};
    case Argument::Kind::kLayout: return ojson{{"layout", a.text}};
    case Argument::Kind::kMemoryFormat: return ojson{{"memory_format", a.text}};
  }
  return nullptr;
}

}  // namespace

Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text) { return GraphFromJson(text, ""); }

Status CheckJsonDepth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  int64_t line = 1, column = 0;
  for (char c : text) {
    ++column;
    if (c == '\n') { ++line; column = 0; }
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return Status::BadInput(fmt::format("{} nests deeper than {} levels at line {}, column {}", what,
                                            kMaxJsonDepth, line, column));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text, const std::string& sidecar_dir) {
  FXREMAT_RETURN_IF_ERROR(CheckJsonDepth(text, "the JSON document"));
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return Status::BadInput(fmt::format("malformed JSON: {}", what));
  } catch (const json::exception& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '-1e999'": no
    // position from the library; find the token to name its line and column.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    std::string where;
    if (auto q = what.find('\''); q != std::string::npos) {
      const std::string token = what.substr(q + 1, what.rfind('\'') - q - 1);
      if (size_t at = token.empty() ? std::string_view::npos : text.find(token); at != std::string_view::npos) {
        const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n')) + 1;
        const size_t line_start = text.rfind('\n', at);
        where = fmt::format("line {}, column {}", line, at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1);
      }
    }
    return Status::BadInput(fmt::format("malformed JSON: {}", what), where);
  }
  return GraphFromJsonDocument(doc, sidecar_dir);
}

Expected<std::unique_ptr<Graph>> GraphFromJsonDocument(const nlohmann::json& doc, const std::string& sidecar_dir) {
  try {
    GraphReader reader;
    reader.sidecar_dir_ = sidecar_dir;
    return reader.Read(doc);
  } catch (const json::exception& e) {
    return Status::BadInput(fmt::format("malformed graph document: {}", e.what()));
  }
}

std::string GraphToJson(const Graph& graph) { return GraphToJsonDocument(graph).dump(1) + "\n"; }

GraphFiles GraphToJsonFiles(const Graph& graph, const std::string& sidecar_name) {
  std::map<std::string, SafetensorsEntry> sidecar;
  GraphFiles files;
  files.json = GraphToJsonDocument(graph, sidecar_name, &sidecar).dump(1) + "\n";
  if (!sidecar.empty()) files.sidecar = WriteSafetensors(sidecar);
  return files;
}

std::string SidecarNameFor(const std::string& graph_path) {
  std::string name = std::filesystem::path(graph_path).filename().string();
  for (std::string_view ext : {".gz", ".json", ".fxir"})
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      name.resize(name.size() - ext.size());
  return name + ".constants.safetensors";
}

Status WriteGraphFile(const std::string& path, const Graph& graph) {
  const std::string sidecar_name = SidecarNameFor(path);
  GraphFiles files = GraphToJsonFiles(graph, sidecar_name);
  if (!files.sidecar.empty()) {
    const std::string sidecar_path = (std::filesystem::path(path).parent_path() / sidecar_name).string();
    FXREMAT_RETURN_IF_ERROR(WriteFileAtomically(sidecar_path, files.sidecar));
  }
  return WriteFileAtomically(path, files.json);
}

nlohmann::ordered_json GraphToJsonDocument(const Graph& graph) { return GraphToJsonDocument(graph, "", nullptr); }

nlohmann::ordered_json GraphToJsonDocument(const Graph& graph, const std::string& sidecar_name,
                                           std::map<std::string, SafetensorsEntry>* sidecar) {
  ojson doc;
  doc["format"] = "fxremat.graph";
  doc["version"] = {kFormatMajorVersion, kFormatMinorVersion};
  if (!graph.name().empty()) doc["name"] = graph.name();
  doc["kind"] = std::string(GraphKindName(graph.kind()));
  if (graph.kind() == GraphKind::kJoint) {
    ojson joint;
    joint["num_fwd_outputs"] = graph.joint().num_fwd_outputs;
    if (!graph.joint().output_paths.empty()) {
      ojson paths = ojson::array();
      for (const auto& p : graph.joint().output_paths) paths.push_back(p ? ojson(*p) : ojson(nullptr));
      joint["output_paths"] = paths;
    }
    joint["tangent_outputs"] = graph.joint().tangent_outputs;
    doc["joint"] = joint;
  }
  if (!graph.symbols().empty()) {
    ojson symbols = ojson::object();
    for (const auto& [sym, hint] : graph.symbols()) symbols[sym] = hint;
    doc["symbols"] = symbols;
  }
  ojson ops = ojson::object();
  for (const auto& [target, info] : graph.ops()) {
    ojson facts;
    facts["schema"] = info.schema_text;
    facts["tags"] = info.tags;
    if (!info.packet_tags.empty()) facts["packet_tags"] = info.packet_tags;
    ops[target] = facts;
  }
  doc["ops"] = ops;
  if (!graph.constants().empty()) {
    ojson constants = ojson::object();
    for (const auto& [target, c] : graph.constants()) {
      ojson j;
      if (c.kind == Constant::Kind::kOpaque) {
        j["opaque"] = c.type_name;
      } else {
        ValueFacts v;
        v.kind = ValueFacts::Kind::kTensor;
        v.tensor = c.facts;
        j["val"] = ValueFactsToJson(v);
        if (!c.hasData()) {
          j["by_reference"] = true;
        } else if (sidecar && !sidecar_name.empty() && static_cast<int64_t>(c.data->size()) > kInlineConstantBytes) {
          j["file"] = sidecar_name;
          j["key"] = target;
          std::vector<int64_t> shape;
          for (const Dim& d : c.facts.shape) shape.push_back(d.hint);
          (*sidecar)[target] = SafetensorsEntry{std::string(SafetensorsDType(c.facts.dtype)), shape, *c.data};
        } else {
          j["data"] = Base64Encode(*c.data);
        }
      }
      constants[target] = std::move(j);
    }
    doc["constants"] = std::move(constants);
  }
  ojson nodes = ojson::array();
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    ojson j;
    j["name"] = n.name();
    j["op"] = std::string(OpKindName(n.op()));
    j["target"] = n.target();
    if (n.isPlaceholder()) {
      j["role"] = std::string(PlaceholderRoleName(n.role()));
      if (!n.path().empty()) j["path"] = n.path();
    }
    if (!n.args().empty()) {
      ojson args = ojson::array();
      for (const Argument& a : n.args()) args.push_back(ArgumentToJson(a));
      j["args"] = args;
    }
    if (!n.kwargs().empty()) {
      ojson kwargs = ojson::object();
      for (const auto& [k, v] : n.kwargs()) kwargs[k] = ArgumentToJson(v);
      j["kwargs"] = kwargs;
    }
    ojson meta = ojson::object();
    if (n.val().kind != ValueFacts::Kind::kUnknown) meta["val"] = ValueFactsToJson(n.val());
    const NodeMeta& m = n.meta();
    if (!m.recompute.empty()) meta["recompute"] = m.recompute;
    if (m.ac_graph_id) meta["ac_graph_id"] = *m.ac_graph_id;
    if (!m.partitioner_tag.empty()) meta["partitioner_tag"] = m.partitioner_tag;
    if (!m.stack_trace.empty()) meta["stack_trace"] = m.stack_trace;
    if (m.value_range) meta["value_range"] = {m.value_range->first, m.value_range->second};
    if (!m.names.empty()) meta["names"] = m.names;
    if (m.offload_requested) meta["offload_requested"] = true;
    if (m.mutated) meta["mutated"] = true;
    if (m.no_vc_check) meta["saved_tensor_with_no_vc_check"] = true;
    if (m.has_backward_hook) meta["has_backward_hook"] = true;
    if (m.written_back_from) meta["written_back_from"] = *m.written_back_from;
    if (m.memory_budget) meta["memory_budget"] = *m.memory_budget;
    if (m.region_memory_budget) meta["region_memory_budget"] = *m.region_memory_budget;
    if (!meta.empty()) j["meta"] = meta;
    nodes.push_back(std::move(j));
  }
  doc["nodes"] = std::move(nodes);
  return doc;
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

Expected<std::string> ReadFileContents(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return Status::BadInput("no such file (or not a regular file)", path);
  // gzread reads plain files transparently.
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::BadInput("cannot open file", path);
  std::string contents;
  char buffer[1 << 16];
  while (true) {
    int n = gzread(f, buffer, sizeof(buffer));
    if (n < 0) {
      int errnum = 0;
      std::string message = gzerror(f, &errnum);
      gzclose(f);
      return Status::BadInput(fmt::format("cannot read compressed file: {}", message), path);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<size_t>(n));
  }
  // A truncated gzip stream reads short without an error from gzread; gzclose
  // and gzeof tell whether the stream ended cleanly.
  int close_status = gzclose(f);
  if (close_status != Z_OK && close_status != Z_BUF_ERROR)
    return Status::BadInput("cannot read compressed file (truncated or corrupt)", path);
  if (close_status == Z_BUF_ERROR)
    return Status::BadInput("truncated compressed file (the gzip stream ends early)", path);
  return contents;
}

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  bool ok = true;
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    gzFile f = gzopen(tmp.c_str(), "wb9");
    ok = f != nullptr;
    if (ok) {
      ok = contents.empty() ||
           gzwrite(f, contents.data(), static_cast<unsigned>(contents.size())) ==
               static_cast<int>(contents.size());
      ok = (gzclose(f) == Z_OK) && ok;
    }
  } else {
    std::ofstream out(tmp, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    ok = !out.fail();
  }
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    return Status::BadInput("cannot write file", path);
  }
  return Status::Ok();
}

Expected<std::unique_ptr<Graph>> LoadGraphFile(const std::string& path) {
  FXREMAT_ASSIGN_OR_RETURN(std::string contents, ReadFileContents(path));
  size_t first = contents.find_first_not_of(" \t\r\n");
  bool is_text = path.size() >= 5 && path.compare(path.size() - 5, 5, ".fxir") == 0;
  if (first != std::string::npos && (contents[first] == '#' || contents[first] == 'd')) is_text = true;
  if (first == std::string::npos) return Status::BadInput("empty file", path);
  auto graph = is_text ? ParseGraph(contents)
                       : GraphFromJson(contents, std::filesystem::absolute(path).parent_path().string());
  if (!graph.ok()) return graph.status().WithContext(path);
  return graph;
}

}  // namespace fxremat
