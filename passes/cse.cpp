// cse: merges call_function nodes that compute the same thing. Assumes a
// functional graph except for mutating ops, which split it into regions that
// are never merged across (the reference's mutation_region_id).
#include "passes/cse.h"

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace fxremat {

namespace {

// The reference's rand_ops (compile_utils.py), by overload packet.
bool IsRandomPacket(std::string_view target) {
  static const std::unordered_set<std::string_view> kRandom = {
      "aten.dropout", "aten._fused_dropout", "aten._standard_gamma", "aten.bernoulli",
      "aten.multinomial", "aten.native_dropout", "aten.normal", "aten.poisson", "aten.binomial",
      "aten.rrelu", "aten.rand_like", "aten.rand", "aten.randint", "aten.randn", "aten.randperm"};
  size_t last_dot = target.rfind('.');
  return last_dot != std::string_view::npos && kRandom.count(target.substr(0, last_dot));
}

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
  }
  return false;
}

}  // namespace

Expected<bool> EliminateCommonSubexpressions(Graph& graph) {
  // Storages that graph outputs live in: nodes aliasing them are never merged.
  std::unordered_set<int64_t> output_storages;
  for (Node* o : graph.outputValues())
    if (o && o->val().is_tensor() && o->val().tensor.storage >= 0) output_storages.insert(o->val().tensor.storage);

  std::unordered_map<std::string, Node*> seen;  // key -> first node (representative)
  std::vector<Node*> duplicates;
  int64_t region = 0;
  bool changed = false;
  // Iterate over a snapshot: merging erases nodes.
  std::vector<Node*> order;
  for (const auto& up : graph.nodes()) order.push_back(up.get());
  for (Node* n : order) {
    if (IsMutationOp(*n)) ++region;
    if (!n->isCallFunction() || IsRandomPacket(n->target()) || n->target().rfind("aten.empty.", 0) == 0) continue;
    if (n->val().is_tensor() && output_storages.count(n->val().tensor.storage)) continue;
    std::string key = fmt::format("{}#{}(", region, n->target());
    bool hashable = true;
    for (const Argument& a : n->args()) {
      hashable = hashable && AppendKey(a, key);
      key += ",";
    }
    key += ")";
    for (const auto& [k, v] : n->kwargs()) {
      key += k + "=";
      hashable = hashable && AppendKey(v, key);
      key += ",";
    }
    if (!hashable) continue;
    auto [it, inserted] = seen.emplace(std::move(key), n);
    if (inserted) continue;
    // A later duplicate: its users read the representative instead. Keys use
    // representatives' names, so chains of duplicates collapse in one pass.
    graph.replaceAllUsesWith(n, it->second);
    duplicates.push_back(n);
    changed = true;
  }
  graph.eraseNodes(duplicates);
  return changed;
}

}  // namespace fxremat
