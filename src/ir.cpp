// Graph IR implementation: dtype tables, use-list maintenance, the verifier
// and deep copy.
#include "fxremat/ir.h"
#include "fxremat/phases.h"
#include "src/populate_pages.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cctype>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_set>

#include <fmt/format.h>

#include "src/facts_check.h"

namespace fxremat {

namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  std::string_view short_name;  // as FX prints it in type annotations
  int64_t item_size;
  std::string_view safetensors;  // the safetensors header's dtype name
  bool floating;                 // float or complex
};

constexpr DTypeEntry kDTypes[] = {
#define FXREMAT_DTYPE(enumerator, name, short_name, item_size, safetensors, floating, c10_scalar_type) \
  {DType::enumerator, name, short_name, item_size, safetensors, floating},
#include "fxremat/dtypes.def"
};

// The table is indexed by the enum: both come from dtypes.def, in its order.
constexpr bool TableInEnumOrder() {
  for (size_t i = 0; i < std::size(kDTypes); ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(TableInEnumOrder());

const DTypeEntry& Entry(DType dtype) {
  const size_t index = static_cast<size_t>(dtype);
  assert(index < std::size(kDTypes) && "unknown DType");
  return kDTypes[index < std::size(kDTypes) ? index : 0];
}

}  // namespace

std::string_view DTypeName(DType dtype) { return Entry(dtype).name; }
std::string_view DTypeShortName(DType dtype) { return Entry(dtype).short_name; }
int64_t DTypeItemSize(DType dtype) { return Entry(dtype).item_size; }
std::string_view DTypeSafetensorsName(DType dtype) { return Entry(dtype).safetensors; }
std::vector<DType> AllDTypes() {
  std::vector<DType> out;
  for (const DTypeEntry& e : kDTypes) out.push_back(e.dtype);
  return out;
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeEntry& e : kDTypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}
std::optional<DType> DTypeFromShortName(std::string_view short_name) {
  for (const DTypeEntry& e : kDTypes)
    if (e.short_name == short_name) return e.dtype;
  return std::nullopt;
}

bool DTypeIsFloating(DType dtype) { return Entry(dtype).floating; }
bool DTypeIsIntegral(DType dtype) { return !DTypeIsFloating(dtype); }

int64_t TensorFacts::numel() const {
  int64_t n = 1;
  for (const Dim& d : shape) n *= d.hint;
  return n;
}
int64_t TensorFacts::nbytes() const { return numel() * DTypeItemSize(dtype); }

int64_t ValueFacts::nbytes() const {
  switch (kind) {
    case Kind::kTensor: return tensor.nbytes();
    case Kind::kTuple: {
      int64_t total = 0;
      for (const ValueFacts& item : items) total += item.nbytes();
      return total;
    }
    default: return 0;
  }
}

const std::string* InternedString::Intern(std::string_view text) {
  if (text.empty()) return nullptr;
  // Node-based: the strings never move. Leaked on purpose (interned strings
  // outlive every graph, including static ones destroyed at exit).
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view v) const { return std::hash<std::string_view>()(v); }
  };
  static auto* const table = new std::unordered_set<std::string, Hash, std::equal_to<>>();
  static std::mutex* const mutex = new std::mutex();
  std::lock_guard<std::mutex> lock(*mutex);
  auto it = table->find(text);
  if (it == table->end()) it = table->emplace(text).first;
  return &*it;
}

const RareNodeMeta NodeMeta::kNoRare;

const InternedString& CpuDeviceName() {
  static const InternedString kCpu("cpu");
  return kCpu;
}

const InternedString& Node::GetItemTarget() {
  static const InternedString kGetItem("_operator.getitem");
  return kGetItem;
}

const std::string& InternedString::Empty() {
  static const std::string kEmpty;
  return kEmpty;
}

std::string_view PartitionerTagName(PartitionerTag tag) {
  switch (tag) {
    case PartitionerTag::kNone: return "";
    case PartitionerTag::kIsForward: return "is_forward";
    case PartitionerTag::kIsBackward: return "is_backward";
    case PartitionerTag::kMustBeInForward: return "must_be_in_forward";
    case PartitionerTag::kMustBeInBackward: return "must_be_in_backward";
  }
  return "";
}

std::optional<PartitionerTag> PartitionerTagFromName(std::string_view name) {
  for (PartitionerTag t : {PartitionerTag::kIsForward, PartitionerTag::kIsBackward, PartitionerTag::kMustBeInForward,
                           PartitionerTag::kMustBeInBackward})
    if (PartitionerTagName(t) == name) return t;
  return std::nullopt;
}

std::string_view OpKindName(OpKind op) {
  switch (op) {
    case OpKind::kPlaceholder: return "placeholder";
    case OpKind::kCallFunction: return "call_function";
    case OpKind::kGetAttr: return "get_attr";
    case OpKind::kOutput: return "output";
  }
  return "?";
}

namespace {
constexpr std::array<std::pair<PlaceholderRole, std::string_view>, 7> kRoles = {{
    {PlaceholderRole::kNone, "none"}, {PlaceholderRole::kPrimal, "primal"},
    {PlaceholderRole::kTangent, "tangent"}, {PlaceholderRole::kFwdRng, "fwd_rng"},
    {PlaceholderRole::kBwdRng, "bwd_rng"}, {PlaceholderRole::kSaved, "saved"},
    {PlaceholderRole::kInput, "input"},
}};
constexpr std::array<std::pair<GraphKind, std::string_view>, 4> kGraphKinds = {{
    {GraphKind::kPlain, "plain"}, {GraphKind::kJoint, "joint"},
    {GraphKind::kForward, "forward"}, {GraphKind::kBackward, "backward"},
}};
}  // namespace

std::string_view PlaceholderRoleName(PlaceholderRole role) {
  for (const auto& [r, n] : kRoles)
    if (r == role) return n;
  return "?";
}
std::optional<PlaceholderRole> PlaceholderRoleFromName(std::string_view name) {
  for (const auto& [r, n] : kRoles)
    if (n == name) return r;
  return std::nullopt;
}
std::string_view GraphKindName(GraphKind kind) {
  for (const auto& [k, n] : kGraphKinds)
    if (k == kind) return n;
  return "?";
}
std::optional<GraphKind> GraphKindFromName(std::string_view name) {
  for (const auto& [k, n] : kGraphKinds)
    if (n == name) return k;
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Node
// ---------------------------------------------------------------------------

const Argument* Node::kwarg(std::string_view key) const {
  for (const auto& [k, v] : kwargs_)
    if (k == key) return &v;
  return nullptr;
}

const OpInfo* Node::opInfo() const {
  if (op_ != OpKind::kCallFunction) return nullptr;
  // OpTable entries are never erased, so a found entry can be cached; a miss is
  // not cached because facts may be added later (from the dispatcher).
  if (const OpInfo* cached = op_info_.load(std::memory_order_relaxed)) return cached;
  auto it = graph_->ops().find(target());
  if (it == graph_->ops().end()) return nullptr;
  op_info_.store(&it->second, std::memory_order_relaxed);
  return &it->second;
}

void Node::recomputeInputs() {
  inputs_.clear();
  auto collect = [&](auto&& add) {
    for (const Argument& a : args_) a.forEachNode(add);
    for (const auto& [k, v] : kwargs_) v.forEachNode(add);
  };
  size_t refs = 0;
  collect([&refs](Node*) { ++refs; });
  // Distinct inputs in first-use order. A linear search is the cheapest for the
  // few arguments of an op; an output node listing every saved value (hundreds
  // of thousands on a large graph) would make it quadratic.
  constexpr size_t kLinearLimit = 32;
  if (refs <= kLinearLimit) {
    collect([this](Node* n) {
      if (std::find(inputs_.begin(), inputs_.end(), n) == inputs_.end()) inputs_.push_back(n);
    });
    return;
  }
  std::unordered_set<Node*> seen;
  seen.reserve(refs);
  inputs_.reserve(refs);
  collect([&](Node* n) {
    if (seen.insert(n).second) inputs_.push_back(n);
  });
}

// ---------------------------------------------------------------------------
// Graph
// ---------------------------------------------------------------------------

void Graph::indexNames() const {
  if (names_indexed_) return;
  by_name_.reserve(nodes_.size());
  for (const auto& n : nodes_) by_name_.emplace(n->name_, n.get());
  names_indexed_ = true;
}

Node* Graph::findNode(std::string_view name) const {
  indexNames();
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void Graph::reserve(size_t n) {
  nodes_.reserve(n);
  reserved_nodes_ = n;
  if (names_indexed_) by_name_.reserve(n);
  // Arena room for the nodes still to come: what the current chunk has left,
  // then the unused chunks.
  const size_t more = n > nodes_.size() ? n - nodes_.size() : 0;
  size_t room = kNodesPerChunk - nodes_in_current_chunk_ + (node_chunks_.size() - next_chunk_) * kNodesPerChunk;
  for (; room < more; room += kNodesPerChunk) {
    owned_chunks_.emplace_back(new std::byte[NodeChunkBytes()]);
    node_chunks_.push_back(owned_chunks_.back().get());
    chunk_mapped_bytes_.push_back(0);
  }
}

void Graph::adoptNodeMemory(std::string&& memory, size_t nodes) {
  if (memory.capacity() < NodeChunkBytes() || nodes == 0) return;  // freed by the caller as before
  auto owner = std::make_shared<std::string>(std::move(memory));
  std::byte* const base = reinterpret_cast<std::byte*>(owner->data());
  const size_t capacity = owner->capacity();
  const size_t mapped = owner->size();  // the text, read into it
  adoptNodeMemory(std::move(owner), base, capacity, mapped, nodes);
}

void Graph::adoptNodeMemory(std::shared_ptr<void> owner, std::byte* base, size_t capacity, size_t mapped_bytes,
                            size_t nodes) {
  constexpr size_t kChunkBytes = NodeChunkBytes();
  static_assert(alignof(Node) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);  // the buffers are operator new's
  // Chunks the graph has already (adopted or reserved) serve the first of the nodes to come.
  const size_t have = node_chunks_.size() - next_chunk_;
  const size_t wanted = (nodes + kNodesPerChunk - 1) / kNodesPerChunk;
  const size_t chunks = std::min(capacity / kChunkBytes, wanted > have ? wanted - have : 0);
  if (chunks == 0) return;
  for (size_t c = 0; c < chunks; ++c) {
    node_chunks_.push_back(base + c * kChunkBytes);
    chunk_mapped_bytes_.push_back(std::min(kChunkBytes, mapped_bytes - std::min(mapped_bytes, c * kChunkBytes)));
  }
  const size_t used = chunks * kChunkBytes;
  if (capacity > used) ReleasePages(base + used, capacity - used);
  adopted_memory_.push_back(std::move(owner));
}

Node* Graph::outputNode() const {
  if (nodes_.empty() || !nodes_.back()->isOutput()) return nullptr;
  return nodes_.back().get();
}

std::vector<Node*> Graph::placeholders() const {
  std::vector<Node*> result;
  for (const auto& n : nodes_)
    if (n->isPlaceholder()) result.push_back(n.get());
  return result;
}

std::vector<Node*> Graph::outputValues() const {
  std::vector<Node*> result;
  Node* out = outputNode();
  if (!out || out->args().empty()) return result;
  const Argument& values = out->args()[0];
  if (values.kind == Argument::Kind::kList) {
    for (const Argument& a : values.list) result.push_back(a.is_node() ? a.node : nullptr);
  } else {
    result.push_back(values.is_node() ? values.node : nullptr);
  }
  return result;
}

void NodeDestroyer::operator()(Node* node) const { node->~Node(); }

Node* Graph::allocateNode() {
  if (nodes_in_current_chunk_ == kNodesPerChunk) {
    if (next_chunk_ == node_chunks_.size()) {
      // operator new[] of std::byte is aligned for any fundamental type, so for Node.
      static_assert(alignof(Node) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);
      owned_chunks_.emplace_back(new std::byte[NodeChunkBytes()]);  // not zeroed: Node constructs it
      node_chunks_.push_back(owned_chunks_.back().get());
      chunk_mapped_bytes_.push_back(0);
    }
    const size_t mapped = chunk_mapped_bytes_[next_chunk_];
    current_chunk_ = node_chunks_[next_chunk_++];
    // Note [Populated pages]: ~140,000 pages at a million nodes. synth_1m CLI,
    // three interleaved runs each: 5.72/5.42/5.47 s -> 5.14/5.32/5.38 s. A
    // chunk another thread mapped already costs a walk of its page tables.
    // Adopted memory the reader wrote (Note [Recycled text pages]) needs no
    // walk. Only the slots of the nodes reserve() expects are mapped: the
    // last chunk of a small graph (a 1,000-node graph's second, a copy's
    // only one) is mostly never used.
    size_t needed = NodeChunkBytes();
    if (reserved_nodes_ > nodes_.size() && reserved_nodes_ - nodes_.size() < kNodesPerChunk)
      needed = (reserved_nodes_ - nodes_.size()) * sizeof(Node);
    if (needed > mapped) PopulatePages(current_chunk_ + mapped, needed - mapped);
    nodes_in_current_chunk_ = 0;
  }
  return reinterpret_cast<Node*>(current_chunk_ + sizeof(Node) * nodes_in_current_chunk_++);
}

std::vector<Graph::NodeMemory> Graph::unusedNodeMemory() const {
  std::vector<NodeMemory> ranges;
  for (size_t c = next_chunk_; c < node_chunks_.size(); ++c)
    ranges.push_back({node_chunks_[c], NodeChunkBytes(), chunk_mapped_bytes_[c]});
  return ranges;
}

Node* Graph::createNode(OpKind op, std::string name, std::string_view target,
                        std::vector<Argument> args, Kwargs kwargs) {
  assert(!findNode(name) && "createNode: duplicate node name");
  return insertNode(NodePtr(new (allocateNode()) Node(this, op, std::move(name), target)), appendPosition(op),
                    std::move(args), std::move(kwargs));
}

Node* Graph::createNodeLike(const Node& like, std::vector<Argument> args, Kwargs kwargs) {
  assert(!findNode(like.name()) && "createNodeLike: duplicate node name");
  return insertNode(NodePtr(new (allocateNode()) Node(this, like)), appendPosition(like.op()), std::move(args),
                    std::move(kwargs));
}

size_t Graph::appendPosition(OpKind op) const {
  return op != OpKind::kOutput && outputNode() != nullptr ? nodes_.size() - 1 : nodes_.size();
}

Node* Graph::insertNode(NodePtr node, size_t position, std::vector<Argument> args, Kwargs kwargs) {
  Node* raw = node.get();
  nodes_.insert(nodes_.begin() + static_cast<std::ptrdiff_t>(position), std::move(node));
  if (names_indexed_) by_name_.emplace(raw->name_, raw);
  renumber(position);
  setInputs(raw, std::move(args), std::move(kwargs));
  return raw;
}

Node* Graph::createNodeBefore(Node* before, OpKind op, std::string name, std::string_view target,
                              std::vector<Argument> args, Kwargs kwargs) {
  assert(before && before->graph_ == this && "createNodeBefore: anchor from another graph");
  assert(!findNode(name) && "createNodeBefore: duplicate node name");
  assert(op != OpKind::kOutput && "createNodeBefore: the output node is created with createNode");
  return insertNode(NodePtr(new (allocateNode()) Node(this, op, std::move(name), target)), before->index_,
                    std::move(args), std::move(kwargs));
}

void Graph::renameNode(Node* node, std::string name) {
  assert(node->graph_ == this);
  if (name == node->name_) return;
  assert(!findNode(name) && "renameNode: the name is taken");
  if (names_indexed_) by_name_.erase(node->name_);
  node->name_ = std::move(name);  // a placeholder whose target is its name keeps following it
  if (names_indexed_) by_name_.emplace(node->name_, node);
}

void Graph::setInputs(Node* node, std::vector<Argument> args, Kwargs kwargs) {
  assert(node->graph_ == this);
  for (Node* input : node->inputs_) {
    auto& users = input->users_;
    users.erase(std::remove(users.begin(), users.end(), node), users.end());
  }
  node->args_ = std::move(args);
  node->kwargs_ = std::move(kwargs);
  node->recomputeInputs();
  for (Node* input : node->inputs_) {
    assert(input->graph_ == this && "argument from another graph");
    input->users_.push_back(node);
  }
}


void Graph::replaceAllUsesWith(Node* from, Node* to) {
  assert(from != to);
  NodeList users = from->users_;  // copy: setInputs edits the list
  for (Node* user : users) {
    auto swap = [from, to](Node* n) { return n == from ? to : n; };
    std::vector<Argument> args;
    for (const Argument& a : user->args_) args.push_back(a.mapNodes(swap));
    Kwargs kwargs;
    for (const auto& [k, v] : user->kwargs_) kwargs.emplace_back(k, v.mapNodes(swap));
    setInputs(user, std::move(args), std::move(kwargs));
  }
}

void Graph::eraseNode(Node* node) {
  assert(node->graph_ == this);
  assert(node->users_.empty() && "eraseNode: the node still has users");
  setInputs(node, {}, {});
  size_t position = node->index_;
  if (names_indexed_) by_name_.erase(node->name_);
  nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(position));
  renumber(position);
}

void Graph::eraseNodes(const std::vector<Node*>& doomed) {
  if (doomed.empty()) return;
  std::vector<bool> erase(nodes_.size(), false);
  for (Node* n : doomed) {
    assert(n->graph_ == this);
    erase[n->index_] = true;
  }
  for (Node* n : doomed) {
    for (Node* user : n->users_) {
      (void)user;
      assert(erase[user->index_] && "eraseNodes: a user of an erased node survives");
    }
    // Detach from surviving inputs only; erased inputs go away wholesale.
    for (Node* input : n->inputs_) {
      if (erase[input->index_]) continue;
      auto& users = input->users_;
      users.erase(std::remove(users.begin(), users.end(), n), users.end());
    }
    if (names_indexed_) by_name_.erase(n->name_);
  }
  size_t out = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (erase[i]) continue;
    if (out != i) nodes_[out] = std::move(nodes_[i]);
    nodes_[out]->index_ = out;
    ++out;
  }
  nodes_.resize(out);
}

std::string Graph::uniqueName(std::string_view base) const {
  std::string candidate(base);
  for (int i = 1; findNode(candidate); ++i) candidate = fmt::format("{}_{}", base, i);
  return candidate;
}

std::string UniqueNames::next() {
  for (;; ++suffix_) {
    std::string name = suffix_ == 0 ? base_ : fmt::format("{}_{}", base_, suffix_);
    if (!graph_.findNode(name)) {
      ++suffix_;
      return name;
    }
  }
}

Status Graph::reorderNodes(const std::vector<Node*>& order) {
  if (order.size() != nodes_.size())
    return Status::Internal(fmt::format("reorderNodes: {} nodes for a graph of {}", order.size(), nodes_.size()));
  std::vector<bool> placed(nodes_.size(), false);
  bool past_placeholders = false;
  for (size_t k = 0; k < order.size(); ++k) {
    Node* n = order[k];
    if (!n || n->graph_ != this || placed[n->index_])
      return Status::Internal("reorderNodes: not a permutation of the graph's nodes");
    if (n->isPlaceholder() && past_placeholders)
      return Status::Internal(fmt::format("reorderNodes: placeholder '{}' after other nodes", n->name_));
    if (!n->isPlaceholder()) past_placeholders = true;
    if (n->isOutput() && k + 1 != order.size()) return Status::Internal("reorderNodes: the output node is not last");
    for (Node* input : n->inputs_)
      if (!placed[input->index_])
        return Status::Internal(fmt::format("reorderNodes: '{}' before its input '{}'", n->name_, input->name_));
    placed[n->index_] = true;
  }
  std::vector<NodePtr> reordered;
  reordered.reserve(nodes_.size());
  std::vector<size_t> old_index;
  for (Node* n : order) old_index.push_back(n->index_);
  for (size_t old : old_index) reordered.push_back(std::move(nodes_[old]));
  nodes_ = std::move(reordered);
  renumber(0);
  return Status::Ok();
}

void Graph::renumber(size_t from) {
  for (size_t i = from; i < nodes_.size(); ++i) nodes_[i]->index_ = i;
}

// ---------------------------------------------------------------------------
// Verifier
// ---------------------------------------------------------------------------

// What the format says tensor facts are (docs/format.md): sizes and strides
// not negative, and the tensor's bytes (numel * item size, symbolic dims at
// their hints) within int64, so that every byte count downstream is exact.
// The JSON reader reports these at the field's path, VerifyGraph at the node.
std::optional<FactsProblem> FindTensorFactsProblem(const TensorFacts& t) {
  int64_t bytes = DTypeItemSize(t.dtype);
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const int64_t d = t.shape[i].hint;
    if (d < 0) return FactsProblem{"shape", i, fmt::format("dimension {} is {}: sizes are not negative", i, d)};
    if (d != 0 && bytes > std::numeric_limits<int64_t>::max() / d)
      return FactsProblem{"shape", i,
                          fmt::format("the tensor's size overflows 64 bits (dimension {} is {})", i, d)};
    bytes = d == 0 ? 0 : bytes * d;
  }
  for (size_t i = 0; i < t.stride.size(); ++i)
    if (t.stride[i].hint < 0)
      return FactsProblem{"stride", i,
                          fmt::format("stride {} is {}: strides are not negative", i, t.stride[i].hint)};
  return std::nullopt;
}

Status CheckUtf8(std::string_view text, std::string_view what) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    bool ok = n != 0 && i + n <= text.size();
    uint32_t cp = n == 1 ? b : n == 2 ? (b & 0x1Fu) : n == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    if (ok && n > 1) {
      static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= kMin[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (!ok)
      return Status::BadInput(fmt::format("invalid UTF-8 (byte 0x{:02X}): {} is UTF-8", b, what),
                              fmt::format("line {}, col {}", line, col));
    if (b == '\n') {
      ++line;
      col = 1;
    } else {
      col += n;  // columns count bytes, as the parser's do
    }
    i += n;
  }
  return Status::Ok();
}

// ASCII letters, digits and '_', whatever the C locale (std::isalnum reads
// it, and Python sets it in the process that loads the extension): the CLI
// and the Python package accept the same names. Inline, since every node's
// name and target is checked as a graph is read (std::isalnum, a call per
// character, was 2% of a million-node load).
bool IsPythonIdentifier(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (const char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

bool IsPythonKeyword(std::string_view name) {
  // keyword.kwlist of Python 3.11 (soft keywords such as match and type are identifiers).
  static constexpr std::string_view kKeywords[] = {
      "False", "None",   "True",    "and",      "as",       "assert", "async",  "await",    "break",
      "class", "continue", "def",   "del",      "elif",     "else",   "except", "finally",  "for",
      "from",  "global", "if",      "import",   "in",       "is",     "lambda", "nonlocal", "not",
      "or",    "pass",   "raise",   "return",   "try",      "while",  "with",   "yield"};
  if (name.size() < 2 || name.size() > 8) return false;
  for (std::string_view k : kKeywords)
    if (k == name) return true;
  return false;
}

std::string NodeNameProblem(std::string_view name) {
  if (!IsPythonIdentifier(name)) return "is not a Python identifier";
  if (IsPythonKeyword(name)) return "is a Python keyword";
  return "";
}

bool IsDottedName(std::string_view name) {
  for (size_t start = 0;;) {
    const size_t dot = name.find('.', start);
    if (!IsPythonIdentifier(name.substr(start, dot == std::string_view::npos ? dot : dot - start))) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsLayoutName(std::string_view name) {
  static constexpr std::string_view kLayouts[] = {"strided",    "sparse_coo", "sparse_csr", "sparse_csc",
                                                  "sparse_bsr", "sparse_bsc", "_mkldnn",    "jagged"};
  return std::find(std::begin(kLayouts), std::end(kLayouts), name) != std::end(kLayouts);
}

bool IsDeviceName(std::string_view name) {
  const size_t colon = name.find(':');
  const std::string_view type = name.substr(0, colon);
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (type.empty() || !lower(type[0])) return false;
  for (char c : type)
    if (!lower(c) && !digit(c) && c != '_') return false;
  if (colon == std::string_view::npos) return true;
  const std::string_view index = name.substr(colon + 1);
  if (index.empty() || index.size() > 9) return false;
  for (char c : index)
    if (!digit(c)) return false;
  return true;
}

bool IsMemoryFormatName(std::string_view name) {
  static constexpr std::string_view kFormats[] = {"contiguous_format", "channels_last", "channels_last_3d",
                                                  "preserve_format"};
  return std::find(std::begin(kFormats), std::end(kFormats), name) != std::end(kFormats);
}

std::optional<std::string> ValueRangeProblem(int64_t low, int64_t high) {
  if (low >= high) return fmt::format("value_range [{}, {}) is empty", low, high);
  return std::nullopt;
}

bool IsHigherOrderTarget(std::string_view target) { return target.starts_with("higher_order."); }

const Graph* Graph::subgraphOf(const Node& get_attr) const {
  if (get_attr.op() != OpKind::kGetAttr) return nullptr;
  auto it = subgraphs_.find(get_attr.target());
  return it == subgraphs_.end() ? nullptr : it->second.get();
}

namespace {

// `where()` names the value; called only on an error (at a million nodes,
// formatting every node's name was most of a verification).
template <typename Where>
Status CheckFacts(const ValueFacts& v, const Where& where) {
  if (v.kind == ValueFacts::Kind::kTuple) {
    for (const ValueFacts& item : v.items) FXREMAT_RETURN_IF_ERROR(CheckFacts(item, where));
    return Status::Ok();
  }
  if (!v.is_tensor()) return Status::Ok();
  if (auto problem = FindTensorFactsProblem(v.tensor)) return Status::BadInput(problem->message, where());
  return Status::Ok();
}

}  // namespace

Status VerifyGraph(const Graph& graph) {
  ScopedPhase phase("verify-graph");
  const auto& nodes = graph.nodes();
  if (nodes.empty() || !nodes.back()->isOutput())
    return Status::BadInput("graph has no output node (it must be the last node)");
  bool seen_non_placeholder = false;
  for (const auto& up : nodes) {
    const Node& n = *up;
    auto where = [&n] { return fmt::format("node '{}'", n.name()); };
    if (n.isOutput() && &n != nodes.back().get())
      return Status::BadInput("more than one output node", where());
    if (n.isPlaceholder() && seen_non_placeholder)
      return Status::BadInput("placeholder after a non-placeholder node", where());
    if (!n.isPlaceholder()) seen_non_placeholder = true;
    for (Node* input : n.inputs()) {
      if (input->owningGraph() != &graph)
        return Status::Internal("argument belongs to another graph", where());
      if (input->index() >= n.index())
        return Status::BadInput(fmt::format("uses '{}' before it is defined", input->name()), where());
      if (input->isOutput())
        return Status::BadInput("uses the output node as a value", where());
    }
    if ((n.isPlaceholder() || n.isCallFunction()) &&
        n.val().kind == ValueFacts::Kind::kUnknown)
      return Status::BadInput("missing value facts (meta.val)", where());
    FXREMAT_RETURN_IF_ERROR(CheckFacts(n.val(), where));
    if (n.meta().rare().value_range)
      if (auto problem = ValueRangeProblem(n.meta().rare().value_range->first, n.meta().rare().value_range->second))
        return Status::BadInput(*problem, where());
    if (n.op() == OpKind::kGetAttr) {
      const bool is_constant = graph.constants().count(n.target()) > 0;
      const bool is_subgraph = graph.subgraphs().count(n.target()) > 0;
      if (!is_constant && !is_subgraph)
        return Status::BadInput(
            fmt::format("get_attr of '{}', which neither \"constants\" nor \"subgraphs\" holds", n.target()), where());
      if (!n.args().empty() || !n.kwargs().empty()) return Status::BadInput("a get_attr node takes no arguments", where());
    }
    // Note [Single-value outputs]
    if (n.isOutput() && !(n.args().size() == 1 && (n.args()[0].kind == Argument::Kind::kList ||
                                                   (n.args()[0].kind == Argument::Kind::kNode &&
                                                    graph.kind() == GraphKind::kPlain))))
      return Status::BadInput(graph.kind() == GraphKind::kPlain
                                  ? "the output node must have one argument, a list of values or one value"
                                  : "the output node must have one argument, a list of values",
                              where());
    if (n.isOutput() && graph.returnsList() && n.args()[0].kind != Argument::Kind::kList)
      return Status::BadInput("\"returns_list\" is set but the graph returns a single value", where());
  }
  // A symbol's hint may be any integer: a symbol need not be a size (an integer
  // argument Dynamo made dynamic: index_add's alpha=-1, a negative padding); a
  // negative size is refused where a dimension takes the hint (FindTensorFactsProblem).
  for (const auto& [target, sub] : graph.subgraphs()) {
    const std::string where = fmt::format("subgraph '{}'", target);
    if (!sub) return Status::Internal("a null subgraph", where);
    if (graph.constants().count(target)) return Status::BadInput("named both a constant and a subgraph", where);
    if (sub->kind() != GraphKind::kPlain)
      return Status::BadInput(fmt::format("a subgraph must be a plain graph, not {}", GraphKindName(sub->kind())), where);
    if (Status s = VerifyGraph(*sub); !s.ok()) return s.WithContext(where);
  }
  for (const auto& [target, c] : graph.constants())
    if (c.kind == Constant::Kind::kTensor) {
      ValueFacts v;
      v.kind = ValueFacts::Kind::kTensor;
      v.tensor = c.facts;
      FXREMAT_RETURN_IF_ERROR(CheckFacts(v, [&name = target] { return fmt::format("constant '{}'", name); }));
    }
  if (graph.kind() == GraphKind::kJoint) {
    const JointFacts& joint = graph.joint();
    std::vector<Node*> outputs = graph.outputValues();
    int64_t primals = 0, tangents = 0;
    for (Node* p : graph.placeholders()) {
      primals += p->role() == PlaceholderRole::kPrimal;
      tangents += p->role() == PlaceholderRole::kTangent;
    }
    const int64_t num_outputs = static_cast<int64_t>(outputs.size());
    if (joint.num_fwd_outputs < 0 || joint.num_fwd_outputs > num_outputs)
      return Status::BadInput(fmt::format("num_fwd_outputs is {} but the output node has {} entries",
                                          joint.num_fwd_outputs, num_outputs),
                              "joint.num_fwd_outputs");
    const int64_t tokens = joint.backwardTokens();
    if (num_outputs - joint.num_fwd_outputs != primals + tokens)
      return Status::BadInput(
          fmt::format("num_fwd_outputs is {}: that leaves {} gradient outputs for {} primals{} "
                      "(a joint graph returns one gradient per primal{})",
                      joint.num_fwd_outputs, num_outputs - joint.num_fwd_outputs, primals,
                      tokens ? fmt::format(" and {} backward effect tokens", tokens) : "",
                      tokens ? ", then the backward's tokens" : ""),
          "joint.num_fwd_outputs");
    if (!joint.output_paths.empty() &&
        static_cast<int64_t>(joint.output_paths.size()) != joint.num_fwd_outputs)
      return Status::BadInput(fmt::format("{} output paths for {} forward outputs",
                                          joint.output_paths.size(), joint.num_fwd_outputs),
                              "joint.output_paths");
    if (static_cast<int64_t>(joint.tangent_outputs.size()) != tangents)
      return Status::BadInput(fmt::format("{} tangent_outputs entries for {} tangents",
                                          joint.tangent_outputs.size(), tangents),
                              "joint.tangent_outputs");
    for (Node* p : graph.placeholders()) {
      const std::optional<int64_t>& from = p->meta().rare().written_back_from;
      if (!from) continue;
      if (!p->meta().mutated || p->role() != PlaceholderRole::kPrimal)
        return Status::BadInput("written_back_from is only for a mutated primal", fmt::format("node '{}'", p->name()));
      if (*from < 0 || *from >= joint.num_fwd_outputs)
        return Status::BadInput(fmt::format("written back from forward output {}, out of range of {} forward outputs",
                                            *from, joint.num_fwd_outputs),
                                fmt::format("node '{}'", p->name()));
    }
    for (size_t i = 0; i < joint.tangent_outputs.size(); ++i) {
      int64_t o = joint.tangent_outputs[i];
      if (o == -1) continue;  // a backward effect token
      if (o < 0 || o >= joint.num_fwd_outputs)
        return Status::BadInput(fmt::format("tangent {} belongs to forward output {}, out of range", i, o),
                                fmt::format("joint.tangent_outputs[{}]", i));
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Clone
// ---------------------------------------------------------------------------


Graph::~Graph() {
  ScopedPhase phase("destroy-graph");
  nodes_.clear();
}

std::unique_ptr<Graph> CloneGraph(const Graph& graph) {
  ScopedPhase phase("clone-graph");
  auto copy = std::make_unique<Graph>();
  copy->reserve(graph.size());
  copy->setName(graph.name());
  copy->setKind(graph.kind());
  copy->joint() = graph.joint();
  copy->symbols() = graph.symbols();
  copy->ops() = graph.ops();
  copy->constants() = graph.constants();  // the data is shared, never copied
  copy->subgraphs() = graph.subgraphs();  // immutable: shared (Note [Higher-order ops])
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    // Nodes are copied in order: an argument's copy has its index.
    auto in_copy = [&copy](Node* original) { return copy->nodes()[original->index()].get(); };
    std::vector<Argument> args;
    for (const Argument& a : n.args()) args.push_back(a.mapNodes(in_copy));
    Kwargs kwargs;
    for (const auto& [k, v] : n.kwargs()) kwargs.emplace_back(k, v.mapNodes(in_copy));
    Node* c = copy->createNodeLike(n, std::move(args), std::move(kwargs));
    c->val() = n.val();
    c->meta() = n.meta();
    c->setRole(n.role());
    c->setPath(n.path());
  }
  return copy;
}


// Note [Tangents without descriptors]
// A joint graph whose document does not say which forward output each tangent
// belongs to (AOTAutograd's descriptors were absent: an invoke_subgraph body,
// an older exporter) gets the mapping PyTorch's partitioners imply: tangents
// follow the forward outputs that need them, in order. Tried in turn, the first
// that accounts for every tangent wins (after rule 0: a `tangents_token*` input
// of no elements is a backward effect token, -1, Note [Effect tokens]):
//   1. the outputs whose value requires grad;
//   2. all forward outputs, one tangent each;
//   3. the floating-point tensor outputs (the only ones that can carry a gradient);
//   4. in order, each tangent to the next output of its dtype and shape.
// Otherwise the first tangent that matches no output is an error naming it.
namespace {

// Rules 1-4 of the Note, for the tangents that are cotangents.
Expected<std::vector<int64_t>> InferCotangentOutputs(const Graph& g, const std::vector<const Node*>& tangents) {
  const std::vector<Node*> outputs = g.outputValues();
  const int64_t nfo = std::min<int64_t>(g.joint().num_fwd_outputs, static_cast<int64_t>(outputs.size()));
  auto pick = [&](auto&& keep) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < nfo; ++i)
      if (keep(outputs[static_cast<size_t>(i)])) out.push_back(i);
    return out;
  };
  std::vector<int64_t> by_grad =
      pick([](const Node* o) { return o && o->val().is_tensor() && o->val().tensor.requires_grad; });
  if (by_grad.size() == tangents.size()) return by_grad;
  if (static_cast<int64_t>(tangents.size()) == nfo) return pick([](const Node*) { return true; });
  std::vector<int64_t> by_dtype =
      pick([](const Node* o) { return o && o->val().is_tensor() && DTypeIsFloating(o->val().tensor.dtype); });
  if (by_dtype.size() == tangents.size()) return by_dtype;
  std::vector<int64_t> matched;
  int64_t next = 0;
  for (size_t k = 0; k < tangents.size(); ++k) {
    const Node* t = tangents[k];
    const ValueFacts& tv = t->val();
    while (next < nfo) {
      const Node* o = outputs[static_cast<size_t>(next)];
      ++next;
      if (o && o->val().is_tensor() && tv.is_tensor() && o->val().tensor.dtype == tv.tensor.dtype &&
          o->val().tensor.shape == tv.tensor.shape) {
        matched.push_back(next - 1);
        break;
      }
    }
    if (matched.size() != k + 1)
      return Status::BadInput(
          fmt::format("tangent '{}' matches no forward output (no descriptors; {} tangents for {} forward outputs, "
                      "{} of which require grad): give joint.tangent_outputs",
                      t->name(), tangents.size(), nfo, by_grad.size()),
          "joint.tangent_outputs");
  }
  return matched;
}

}  // namespace

Expected<std::vector<int64_t>> InferTangentOutputs(const Graph& g) {
  // Rule 0: AOTAutograd names a backward effect token's input `tangents_token*`
  // (BackwardTokenAOTInput): it belongs to no output (-1, Note [Effect tokens]).
  std::vector<const Node*> tangents;
  std::vector<bool> is_token;
  for (const Node* ph : g.placeholders())
    if (ph->role() == PlaceholderRole::kTangent) {
      const bool token = ph->name().starts_with("tangents_token") && ph->val().is_tensor() &&
                         ph->val().tensor.numel() == 0;
      is_token.push_back(token);
      if (!token) tangents.push_back(ph);
    }
  FXREMAT_ASSIGN_OR_RETURN(std::vector<int64_t> mapped, InferCotangentOutputs(g, tangents));
  std::vector<int64_t> out;
  size_t k = 0;
  for (bool token : is_token) out.push_back(token ? -1 : mapped[k++]);
  return out;
}

}  // namespace fxremat
