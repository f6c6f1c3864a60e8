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
#include <limits>
#include <vector>

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
    case Argument::Kind::kDict:  // its items are [key, value] lists
      AppendTagged(key, a.kind == Argument::Kind::kList ? '[' : '{', a.list.size());
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

// The nodes whose value lives in a storage a graph output lives in (those are
// never merged: outputs must stay distinct tensors). Storage ids are small
// integers given in graph order, so a bitmap over them is the usual set; a
// sorted list takes ids far above the graph's size. A hash set here cost a
// sixth of the pass at a million nodes (a cache miss per node).
class OutputStorages {
 public:
  explicit OutputStorages(const Graph& graph) {
    for (Node* o : graph.outputValues())
      if (o && o->val().is_tensor() && o->val().tensor.storage >= 0) ids_.push_back(o->val().tensor.storage);
    std::sort(ids_.begin(), ids_.end());
    ids_.erase(std::unique(ids_.begin(), ids_.end()), ids_.end());
    if (!ids_.empty() && ids_.back() < static_cast<int64_t>(8 * graph.size() + 1024)) {
      bitmap_.assign(static_cast<size_t>(ids_.back()) + 1, false);
      for (int64_t id : ids_) bitmap_[static_cast<size_t>(id)] = true;
    }
  }
  bool contains(int64_t storage) const {
    if (storage < 0 || ids_.empty()) return false;
    if (!bitmap_.empty()) return static_cast<size_t>(storage) < bitmap_.size() && bitmap_[static_cast<size_t>(storage)];
    return std::binary_search(ids_.begin(), ids_.end(), storage);
  }

 private:
  std::vector<int64_t> ids_;  // sorted, unique
  std::vector<bool> bitmap_;  // by id, when the ids are small
};

// Key -> the first node with that key: open addressing over 8-byte slots (the
// upper half of the key's hash beside the node's index; a probe reads a key
// only when the halves match), the key bytes in chunks that never move (one
// allocation per megabyte). A std::unordered_map cost an allocation per key and
// a cache miss per probe into a table four times the size.
class KeyTable {
 public:
  static constexpr uint32_t kAbsent = std::numeric_limits<uint32_t>::max();
  explicit KeyTable(size_t nodes) : keys_(nodes) {
    size_t capacity = 16;
    while (capacity < 2 * nodes) capacity *= 2;
    slots_.assign(capacity, Slot{});
  }
  // The index of the first node stored under `key`; kAbsent after storing
  // `node_index` (< the table's node count, each stored at most once) under it.
  uint32_t FindOrInsert(std::string_view key, uint32_t node_index) {
    const uint64_t hash = std::hash<std::string_view>()(key);
    const uint32_t fingerprint = static_cast<uint32_t>(hash >> 32);
    for (size_t slot = hash & (slots_.size() - 1);; slot = (slot + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[slot];
      if (s.node == kAbsent) {
        s = Slot{fingerprint, node_index};
        keys_[node_index] = Store(key);
        return kAbsent;
      }
      if (s.fingerprint == fingerprint && keys_[s.node] == key) return s.node;
    }
  }

 private:
  struct Slot {
    uint32_t fingerprint = 0;
    uint32_t node = kAbsent;
  };
  std::string_view Store(std::string_view k) {
    if (chunk_size_ - chunk_used_ < k.size()) {
      chunk_size_ = std::max<size_t>(k.size(), size_t{1} << 20);
      chunks_.emplace_back(new char[chunk_size_]);
      chunk_used_ = 0;
    }
    char* at = chunks_.back().get() + chunk_used_;
    std::memcpy(at, k.data(), k.size());
    chunk_used_ += k.size();
    return {at, k.size()};
  }
  std::vector<Slot> slots_;               // at most half full: one slot per node, twice over
  std::vector<std::string_view> keys_;    // by node index
  std::vector<std::unique_ptr<char[]>> chunks_;
  size_t chunk_used_ = 0, chunk_size_ = 0;
};

}  // namespace

// Keys name the representative of each argument, so chains of duplicates
// collapse in one pass.
std::vector<DuplicateNode> FindCommonSubexpressions(const Graph& graph) {
  ScopedPhase phase("find-common-subexpressions");
  const OutputStorages output_storages(graph);
  KeyTable seen(graph.size());
  std::vector<Node*> representative(graph.size(), nullptr);  // by node index; null: itself
  std::vector<DuplicateNode> duplicates;
  uint64_t region = 0;
  std::string key;
  struct TargetFacts {
    bool mutates, never_merged;
  };
  PerTarget<TargetFacts> target_facts;  // Note [Facts per target]
  for (const auto& up : graph.nodes()) {
    Node* n = up.get();
    if (!n->isCallFunction()) continue;  // only a call mutates
    const TargetFacts& facts = target_facts.get(*n, [](const Node& op) {
      return TargetFacts{IsMutationOp(op), InRandOps(op.target()) || op.target().rfind("aten.empty.", 0) == 0};
    });
    if (facts.mutates) ++region;
    if (facts.never_merged) continue;
    if (n->val().is_tensor() && output_storages.contains(n->val().tensor.storage)) continue;
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
    const uint32_t first = seen.FindOrInsert(key, static_cast<uint32_t>(n->index()));
    if (first == KeyTable::kAbsent) continue;
    representative[n->index()] = graph.nodes()[first].get();
    duplicates.push_back(DuplicateNode{n->index(), first});
  }
  return duplicates;
}

Expected<bool> MergeCommonSubexpressions(Graph& graph, const std::vector<DuplicateNode>& duplicates) {
  std::vector<Node*> doomed;
  doomed.reserve(duplicates.size());
  // The names each kept node has so far, for the nodes that gain names: one
  // set a kept node for the whole loop, as many duplicates can merge into one
  // (a set rebuilt for each of them made 5*10^4 named copies quadratic again).
  std::unordered_map<const Node*, std::unordered_set<std::string>> known_names;
  for (const DuplicateNode& d : duplicates) {
    if (d.duplicate >= graph.size() || d.representative >= d.duplicate)
      return Status::Internal(fmt::format("cse: duplicate {} of node {} is not a node after it", d.duplicate,
                                          d.representative));
    Node* duplicate = graph.nodes()[d.duplicate].get();
    Node* keep = graph.nodes()[d.representative].get();
    graph.replaceAllUsesWith(duplicate, keep);
    // A name given to either copy names the one value that remains (in the
    // order given, each once: through a set, as two copies of 5*10^4 names
    // each took a search of the kept names per name 16.8 s).
    if (!duplicate->meta().names.empty()) {
      std::vector<std::string>& names = keep->meta().names;
      auto [it, first_gain] = known_names.try_emplace(keep);
      if (first_gain) it->second.insert(names.begin(), names.end());
      for (const std::string& name : duplicate->meta().names)
        if (it->second.insert(name).second) names.push_back(name);
    }
    keep->meta().offload_requested = keep->meta().offload_requested || duplicate->meta().offload_requested;
    doomed.push_back(duplicate);
  }
  graph.eraseNodes(doomed);
  return !duplicates.empty();
}

Expected<bool> EliminateCommonSubexpressions(Graph& graph) {
  return MergeCommonSubexpressions(graph, FindCommonSubexpressions(graph));
}

}  // namespace fxremat
