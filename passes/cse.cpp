// cse: merges call_function nodes that compute the same thing. Assumes a
// functional graph except for mutating ops, which split it into regions that
// are never merged across (the reference's mutation_region_id).
#include "passes/cse.h"

#include "fxremat/op_categories.h"

#include <algorithm>

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace fxremat {

namespace {


bool IsMutationOp(const Node& n) {
  const OpInfo* info = n.opInfo();
  return info && info->hasSchema() && info->schema.isMutable();
}

// A canonical text for an argument; node references by their representative.
// Returns false for NaN, which never equals itself in the reference either.
bool AppendKey(const Argument& a, std::string& key) {
  switch (a.kind) {
    case Argument::Kind::kNone: key += "N"; return true;
    case Argument::Kind::kBool: key += a.int_value ? "T" : "F"; return true;
    case Argument::Kind::kInt: key += fmt::format("i{}", a.int_value); return true;
    case Argument::Kind::kDouble:
      if (std::isnan(a.double_value)) return false;
      key += fmt::format("d{}", a.double_value);
      return true;
    case Argument::Kind::kString: key += fmt::format("s{}:{}", a.text.size(), a.text); return true;
    case Argument::Kind::kNode: key += fmt::format("%{}", a.node->name()); return true;
    case Argument::Kind::kList:
      key += "[";
      for (const Argument& item : a.list) {
        if (!AppendKey(item, key)) return false;
        key += ",";
      }
      key += "]";
      return true;
    case Argument::Kind::kDType: key += fmt::format("t{}", a.int_value); return true;
    case Argument::Kind::kDevice: key += "D" + a.text; return true;
    case Argument::Kind::kLayout: key += "L" + a.text; return true;
    case Argument::Kind::kMemoryFormat: key += "M" + a.text; return true;
    case Argument::Kind::kOp: key += fmt::format("o{}:{}", a.text.size(), a.text); return true;
    case Argument::Kind::kComplex:
      if (std::isnan(a.double_value) || std::isnan(a.imag_value)) return false;
      key += fmt::format("c{},{}", a.double_value, a.imag_value);
      return true;
  }
  return false;
}

// Pairs (duplicate, representative) in graph order. Keys name the
// representative of each argument, so chains of duplicates collapse in one pass.
std::vector<std::pair<Node*, Node*>> FindDuplicates(const Graph& graph) {
  // Storages that graph outputs live in: nodes aliasing them are never merged.
  std::unordered_set<int64_t> output_storages;
  for (Node* o : graph.outputValues())
    if (o && o->val().is_tensor() && o->val().tensor.storage >= 0) output_storages.insert(o->val().tensor.storage);
  std::unordered_map<std::string, Node*> seen;  // key -> first node (representative)
  std::unordered_map<const Node*, Node*> representative;
  std::vector<std::pair<Node*, Node*>> duplicates;
  int64_t region = 0;
  std::string key;
  for (const auto& up : graph.nodes()) {
    Node* n = up.get();
    if (IsMutationOp(*n)) ++region;
    if (!n->isCallFunction() || InRandOps(n->target()) || n->target().rfind("aten.empty.", 0) == 0) continue;
    if (n->val().is_tensor() && output_storages.count(n->val().tensor.storage)) continue;
    key = fmt::format("{}#{}(", region, n->target());
    bool hashable = true;
    auto append = [&](const Argument& a) {
      // Substitute merged nodes by their representative.
      if (a.kind == Argument::Kind::kNode) {
        auto it = representative.find(a.node);
        Argument mapped = a;
        if (it != representative.end()) mapped.node = it->second;
        hashable = hashable && AppendKey(mapped, key);
      } else if (a.kind == Argument::Kind::kList) {
        key += "[";
        for (const Argument& item : a.list) {
          Argument mapped = item;
          if (item.kind == Argument::Kind::kNode)
            if (auto it = representative.find(item.node); it != representative.end()) mapped.node = it->second;
          hashable = hashable && AppendKey(mapped, key);
          key += ",";
        }
        key += "]";
      } else {
        hashable = hashable && AppendKey(a, key);
      }
      key += ",";
    };
    for (const Argument& a : n->args()) append(a);
    key += ")";
    for (const auto& [k, v] : n->kwargs()) {
      key += k + "=";
      append(v);
    }
    if (!hashable) continue;
    auto [it, inserted] = seen.emplace(key, n);
    if (inserted) continue;
    representative.emplace(n, it->second);
    duplicates.emplace_back(n, it->second);
  }
  return duplicates;
}

}  // namespace

std::vector<Node*> FindCommonSubexpressions(const Graph& graph) {
  std::vector<Node*> result;
  for (const auto& [duplicate, keep] : FindDuplicates(graph)) result.push_back(duplicate);
  return result;
}

Expected<bool> EliminateCommonSubexpressions(Graph& graph) {
  std::vector<std::pair<Node*, Node*>> duplicates = FindDuplicates(graph);
  std::vector<Node*> doomed;
  for (const auto& [duplicate, keep] : duplicates) {
    graph.replaceAllUsesWith(duplicate, keep);
    // A name given to either copy names the one value that remains.
    for (const std::string& name : duplicate->meta().names)
      if (std::find(keep->meta().names.begin(), keep->meta().names.end(), name) == keep->meta().names.end())
        keep->meta().names.push_back(name);
    keep->meta().offload_requested = keep->meta().offload_requested || duplicate->meta().offload_requested;
    doomed.push_back(duplicate);
  }
  graph.eraseNodes(doomed);
  return !duplicates.empty();
}

}  // namespace fxremat
