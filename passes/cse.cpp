// cse: merges call_function nodes that compute the same thing. Assumes a
// functional graph except for mutating ops, which split it into regions that
// are never merged across (the reference's mutation_region_id).
#include "passes/cse.h"
#include "fxremat/phases.h"

#include "fxremat/op_categories.h"

#include <algorithm>

#include <cmath>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

namespace fxremat {

namespace {


bool IsMutationOp(const Node& n) {
  const OpInfo* info = n.opInfo();
  return info && info->hasSchema() && info->schema.isMutable();
}

// Keys are binary: a tag byte per item, then a fixed-size payload (8 raw bytes)
// or a length-prefixed one, so that two keys are equal exactly when the
// arguments are. At a million nodes, formatting them as text cost a second.
void AppendRaw(std::string& key, uint64_t bits) { key.append(reinterpret_cast<const char*>(&bits), sizeof(bits)); }
void AppendTagged(std::string& key, char tag, uint64_t bits) {
  key += tag;
  AppendRaw(key, bits);
}
void AppendText(std::string& key, char tag, std::string_view text) {
  AppendTagged(key, tag, text.size());
  key.append(text);
}
uint64_t DoubleBits(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

// Appends the canonical key of an argument; a node reference by the index of
// its representative (`representative[i]`, or the node itself). Returns false
// for NaN, which never equals itself in the reference either.
bool AppendKey(const Argument& a, const std::vector<Node*>& representative, std::string& key) {
  switch (a.kind) {
    case Argument::Kind::kNone: key += 'N'; return true;
    case Argument::Kind::kBool: key += a.int_value ? 'T' : 'F'; return true;
    case Argument::Kind::kInt: AppendTagged(key, 'i', static_cast<uint64_t>(a.int_value)); return true;
    case Argument::Kind::kDouble:
      if (std::isnan(a.double_value)) return false;
      AppendTagged(key, 'd', DoubleBits(a.double_value));
      return true;
    case Argument::Kind::kString: AppendText(key, 's', a.text); return true;
    case Argument::Kind::kNode: {
      const Node* rep = representative[a.node->index()];
      AppendTagged(key, '%', (rep ? rep : a.node)->index());
      return true;
    }
    case Argument::Kind::kList:
      AppendTagged(key, '[', a.list.size());
      for (const Argument& item : a.list)
        if (!AppendKey(item, representative, key)) return false;
      return true;
    case Argument::Kind::kDType: AppendTagged(key, 't', static_cast<uint64_t>(a.int_value)); return true;
    case Argument::Kind::kDevice: AppendText(key, 'D', a.text); return true;
    case Argument::Kind::kLayout: AppendText(key, 'L', a.text); return true;
    case Argument::Kind::kMemoryFormat: AppendText(key, 'M', a.text); return true;
    case Argument::Kind::kOp: AppendText(key, 'o', a.text); return true;
    case Argument::Kind::kComplex:
      if (std::isnan(a.double_value) || std::isnan(a.imag_value)) return false;
      AppendTagged(key, 'c', DoubleBits(a.double_value));
      AppendRaw(key, DoubleBits(a.imag_value));
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
  // key -> first node (representative). The keys' bytes live in `key_bytes`,
  // in chunks that never move: one allocation per megabyte, not per key.
  std::unordered_map<std::string_view, Node*> seen;
  seen.reserve(graph.size());
  std::vector<std::unique_ptr<char[]>> key_bytes;
  size_t chunk_used = 0, chunk_size = 0;
  auto store = [&](const std::string& k) -> std::string_view {
    if (chunk_size - chunk_used < k.size()) {
      chunk_size = std::max<size_t>(k.size(), size_t{1} << 20);
      key_bytes.emplace_back(new char[chunk_size]);
      chunk_used = 0;
    }
    char* at = key_bytes.back().get() + chunk_used;
    std::memcpy(at, k.data(), k.size());
    chunk_used += k.size();
    return {at, k.size()};
  };
  std::vector<Node*> representative(graph.size(), nullptr);  // by node index; null: itself
  std::vector<std::pair<Node*, Node*>> duplicates;
  uint64_t region = 0;
  std::string key;
  for (const auto& up : graph.nodes()) {
    Node* n = up.get();
    if (IsMutationOp(*n)) ++region;
    if (!n->isCallFunction() || InRandOps(n->target()) || n->target().rfind("aten.empty.", 0) == 0) continue;
    if (n->val().is_tensor() && output_storages.count(n->val().tensor.storage)) continue;
    key.clear();
    AppendRaw(key, region);
    AppendText(key, '#', n->target());
    bool hashable = true;
    AppendTagged(key, '(', n->args().size());
    for (const Argument& a : n->args()) hashable = hashable && AppendKey(a, representative, key);
    AppendTagged(key, '{', n->kwargs().size());
    for (const auto& [k, v] : n->kwargs()) {
      AppendText(key, '=', k);
      hashable = hashable && AppendKey(v, representative, key);
    }
    if (!hashable) continue;
    auto it = seen.find(key);
    if (it == seen.end()) {
      seen.emplace(store(key), n);
      continue;
    }
    representative[n->index()] = it->second;
    duplicates.emplace_back(n, it->second);
  }
  return duplicates;
}

}  // namespace

std::vector<Node*> FindCommonSubexpressions(const Graph& graph) {
  ScopedPhase phase("find-common-subexpressions");
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
