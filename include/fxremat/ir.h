// fxremat's graph IR: the FX data model (one node = one value) with the tensor
// facts and metadata that partitioning needs. The Graph owns its nodes; all other
// links are non-owning pointers. Use lists change only through Graph's edit
// functions (setInputs, replaceAllUsesWith, eraseNode), never by hand.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/container/small_vector.hpp>

#include "fxremat/op_schema.h"
#include "fxremat/status.h"

namespace fxremat {

class Node;
class Graph;

// ---------------------------------------------------------------------------
// Tensor facts
// ---------------------------------------------------------------------------

// Every dtype torch 2.13 has, from the one list (fxremat/dtypes.def).
enum class DType : uint8_t {
#define FXREMAT_DTYPE(enumerator, ...) enumerator,
#include "fxremat/dtypes.def"
};

// "float32" (torch's name without "torch.").
std::string_view DTypeName(DType dtype);
// "f32" (the short form FX prints in type annotations).
std::string_view DTypeShortName(DType dtype);
std::optional<DType> DTypeFromName(std::string_view name);
std::optional<DType> DTypeFromShortName(std::string_view short_name);
int64_t DTypeItemSize(DType dtype);
// "F32", "BF16", "BOOL": the dtype's name in a safetensors header.
std::string_view DTypeSafetensorsName(DType dtype);
// Every dtype, in the table's order (the one dtype table; Python reads it
// through fxremat._C.dtypes()).
std::vector<DType> AllDTypes();
bool DTypeIsFloating(DType dtype);  // float or complex: can carry gradients
bool DTypeIsIntegral(DType dtype);  // integer or bool

// A string from a small vocabulary that millions of nodes repeat (op targets,
// devices, symbolic dim expressions, argument strings such as "none" or "sum",
// printed constants, input paths): equal texts share one immutable copy that
// lives as long as the process, so a copy is a pointer copy, equality mostly a
// pointer compare, and a node pays no allocation for it. Interned text is never
// freed: a process that reads many graphs keeps every distinct text it saw
// (kilobytes for real models). Interning takes a lock. Never intern text that
// is unique per node (node names, stack traces). Empty is the null state.
class InternedString {
 public:
  InternedString() = default;
  InternedString(std::string_view text) : text_(Intern(text)) {}  // NOLINT(google-explicit-constructor)
  InternedString(const std::string& text) : InternedString(std::string_view(text)) {}  // NOLINT
  InternedString(const char* text) : InternedString(std::string_view(text)) {}  // NOLINT
  const std::string& str() const { return text_ ? *text_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT(google-explicit-constructor)
  operator std::string_view() const { return str(); }    // NOLINT(google-explicit-constructor)
  bool empty() const { return text_ == nullptr; }
  size_t size() const { return str().size(); }
  // One copy per text within one interning table; but a process may hold two
  // (the CLI and its dlopen'ed libtorch plugin each link the library), so
  // different pointers still compare the texts.
  bool operator==(const InternedString& o) const {
    return text_ == o.text_ || (text_ && o.text_ && *text_ == *o.text_);
  }
  bool operator==(const std::string& o) const { return str() == o; }
  bool operator==(std::string_view o) const { return str() == o; }
  bool operator==(const char* o) const { return str() == o; }

 private:
  static const std::string* Intern(std::string_view text);  // null for empty text
  static const std::string& Empty();
  const std::string* text_ = nullptr;
};

// fmt >= 10 formats an InternedString through this (fmt 9 through its
// conversion to std::string_view).
inline std::string_view format_as(const InternedString& s) { return s.str(); }

// One dimension (or stride) of a tensor: static, or a SymPy expression over the
// graph's symbols with a hint (the example value) for byte counts.
struct Dim {
  int64_t hint = 0;       // the static value, or the hint of a symbolic dim
  InternedString expr;    // empty for a static dim
  bool is_static() const { return expr.empty(); }
  static Dim Static(int64_t v) { return Dim{v, {}}; }
  bool operator==(const Dim&) const = default;
};

// "cpu", interned once (TensorFacts' default device, without a look-up per tensor).
const InternedString& CpuDeviceName();

// A tensor's sizes or strides: up to four dims inline (no allocation for the
// tensors of most graphs; a fifth moves them to the heap).
using DimVector = boost::container::small_vector<Dim, 4>;

struct TensorFacts {
  DType dtype = DType::kFloat32;
  DimVector shape;
  DimVector stride;
  InternedString device = CpuDeviceName();
  bool requires_grad = false;
  // Values with the same id alias one storage (views of one base); -1 unknown.
  int64_t storage = -1;

  int64_t numel() const;   // uses hints for symbolic dims
  int64_t nbytes() const;  // numel * item size
  bool operator==(const TensorFacts&) const = default;
};

// What FX's meta["val"] says about a node's value.
struct ValueFacts {
  enum class Kind : uint8_t {
    kUnknown,  // no meta["val"]
    kNone, kTensor, kSymInt, kSymFloat, kSymBool, kTuple, kConst,
    kOpaque,  // an object the graph passes along but never looks into (Note [Opaque inputs])
  };
  Kind kind = Kind::kUnknown;
  TensorFacts tensor;              // kTensor
  InternedString expr;             // kSym*: SymPy expression; kConst: printed value; kOpaque: type name
  int64_t hint = 0;                // kSymInt: the example value
  std::vector<ValueFacts> items;   // kTuple

  bool is_tensor() const { return kind == Kind::kTensor; }
  bool is_sym() const {
    return kind == Kind::kSymInt || kind == Kind::kSymFloat || kind == Kind::kSymBool;
  }
  // Bytes this value occupies: tensors by numel*itemsize, tuples summed,
  // everything else 0 (Note [Size of a value] in partition.h for the symint rule).
  int64_t nbytes() const;
  bool operator==(const ValueFacts&) const = default;
};

// What a get_attr node reads: a tensor constant of the traced module
// (`_tensor_constant0`, a non-persistent buffer), or in process an object of
// another type carried by reference. Note [Constants] in docs/format.md terms:
// format key "constants", keyed by attribute path.
struct Constant {
  enum class Kind : uint8_t { kTensor, kOpaque };
  Kind kind = Kind::kTensor;
  TensorFacts facts;      // kTensor: dtype, shape, stride, device of the attribute
  std::string type_name;  // kOpaque: the Python type, for messages
  // kTensor: the elements, little-endian, contiguous in row-major order of the
  // shape. Null when the caller keeps the tensor (in process, by reference):
  // partitioning never reads the data, only `verify` and the writers do.
  std::shared_ptr<const std::string> data;
  bool hasData() const { return data != nullptr; }
  bool operator==(const Constant& o) const {
    return kind == o.kind && facts == o.facts && type_name == o.type_name && hasData() == o.hasData() &&
           (!hasData() || *data == *o.data);
  }
};

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

// An FX argument: a constant, a reference to an earlier node, or a list of them.
struct Argument {
  enum class Kind : uint8_t {
    kNone, kBool, kInt, kDouble, kString, kNode, kList,
    kDType, kDevice, kLayout, kMemoryFormat, kComplex,
    kOp,  // an operator passed as a value (auto_functionalized's mutable op): text = its target
    // A dict with string keys (flex_attention's kernel_options), in insertion
    // order: `list` holds one two-entry kList [kString key, value] per item.
    kDict,
  };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;     // kBool (0/1), kInt, kDType (the enum value)
  double double_value = 0;   // kDouble (may be inf/nan); kComplex: the real part
  double imag_value = 0;     // kComplex: the imaginary part (a Python complex scalar, e.g. 1j)
  // kString, kDevice ("cpu"), kLayout ("strided"), kMemoryFormat, kOp: interned
  // (op arguments repeat a small vocabulary: "none", "sum", "cpu", an einsum equation).
  InternedString text;
  Node* node = nullptr;      // kNode
  std::vector<Argument> list;  // kList

  static Argument None() { return Argument{}; }
  static Argument Bool(bool v) { Argument a; a.kind = Kind::kBool; a.int_value = v; return a; }
  static Argument Int(int64_t v) { Argument a; a.kind = Kind::kInt; a.int_value = v; return a; }
  static Argument Double(double v) { Argument a; a.kind = Kind::kDouble; a.double_value = v; return a; }
  static Argument Complex(double re, double im) {
    Argument a; a.kind = Kind::kComplex; a.double_value = re; a.imag_value = im; return a;
  }
  static Argument String(std::string_view v) { Argument a; a.kind = Kind::kString; a.text = v; return a; }
  static Argument NodeRef(Node* n) { Argument a; a.kind = Kind::kNode; a.node = n; return a; }
  static Argument List(std::vector<Argument> v) { Argument a; a.kind = Kind::kList; a.list = std::move(v); return a; }
  static Argument OfDType(DType d) { Argument a; a.kind = Kind::kDType; a.int_value = static_cast<int64_t>(d); return a; }
  static Argument Device(std::string_view d) { Argument a; a.kind = Kind::kDevice; a.text = d; return a; }
  static Argument Layout(std::string_view l) { Argument a; a.kind = Kind::kLayout; a.text = l; return a; }
  static Argument MemoryFormat(std::string_view m) { Argument a; a.kind = Kind::kMemoryFormat; a.text = m; return a; }
  static Argument Op(std::string_view target) { Argument a; a.kind = Kind::kOp; a.text = target; return a; }
  // `items`: one List({String(key), value}) per entry.
  static Argument Dict(std::vector<Argument> items) { Argument a; a.kind = Kind::kDict; a.list = std::move(items); return a; }

  bool is_node() const { return kind == Kind::kNode; }
  DType dtype() const { return static_cast<DType>(int_value); }
  // A copy with every node reference replaced by fn(Node*).
  template <typename Fn>
  Argument mapNodes(Fn&& fn) const {
    if (kind == Kind::kNode) return NodeRef(fn(node));
    if (kind != Kind::kList && kind != Kind::kDict) return *this;
    std::vector<Argument> items;
    items.reserve(list.size());
    for (const Argument& a : list) items.push_back(a.mapNodes(fn));
    Argument mapped = List(std::move(items));
    mapped.kind = kind;
    return mapped;
  }
  // Calls fn(Node*) for every node reference, depth first, in order.
  template <typename Fn>
  void forEachNode(Fn&& fn) const {
    if (kind == Kind::kNode) fn(node);
    else if (kind == Kind::kList || kind == Kind::kDict) for (const Argument& a : list) a.forEachNode(fn);
  }
};

using Kwargs = std::vector<std::pair<std::string, Argument>>;

// ---------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------

enum class OpKind : uint8_t { kPlaceholder, kCallFunction, kGetAttr, kOutput };

// A node's inputs or users: up to four inline, the common case, so that a
// node's use lists cost no allocation of their own.
using NodeList = boost::container::small_vector<Node*, 4>;
std::string_view OpKindName(OpKind op);  // "placeholder", "call_function", ...

// What a placeholder stands for. See docs/format.md, "role".
enum class PlaceholderRole : uint8_t { kNone, kPrimal, kTangent, kFwdRng, kBwdRng, kSaved, kInput };
std::string_view PlaceholderRoleName(PlaceholderRole role);
std::optional<PlaceholderRole> PlaceholderRoleFromName(std::string_view name);

// Immutable text that copies of a node share: a stack trace (about 2 KB per
// node of a transformer graph, the same text for every layer's op) is stored
// once, and copying a node -- a clone, an extraction, each of the budget
// solver's candidates -- copies a pointer. Empty is the null state.
class SharedText {
 public:
  SharedText() = default;
  SharedText(std::string text)  // NOLINT(google-explicit-constructor): assigned from strings
      : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  const std::string& str() const {
    static const std::string kEmpty;
    return text_ ? *text_ : kEmpty;
  }
  operator const std::string&() const { return str(); }  // NOLINT(google-explicit-constructor)
  operator std::string_view() const { return str(); }    // NOLINT(google-explicit-constructor)
  bool empty() const { return text_ == nullptr; }
  bool operator==(const SharedText& o) const { return text_ == o.text_ || str() == o.str(); }

 private:
  std::shared_ptr<const std::string> text_;
};

// PyTorch's CheckpointPolicy values, plus kNone (no demand): a node's
// recompute tag (NodeMeta::recompute) and a policy's decision (policy.h).
enum class Decision : uint8_t {
  kNone,
  kMustSave,
  kPreferSave,
  kMustRecompute,
  kPreferRecompute,
  kMustOffload,    // MUST_CPU_OFFLOAD
  kPreferOffload,  // PREFER_CPU_OFFLOAD
};

// "MUST_SAVE", "PREFER_CPU_OFFLOAD", ...; "" for kNone.
std::string_view DecisionName(Decision d);
// Inverse of DecisionName; also accepts "CheckpointPolicy.MUST_SAVE". Unknown
// names are a bad-input error.
Expected<Decision> DecisionFromName(std::string_view name);
// A recompute tag as the graph readers take it: exactly a DecisionName other
// than kNone's ("MUST_SAVE", not "CheckpointPolicy.MUST_SAVE"); nullopt if not.
std::optional<Decision> RecomputeTagFromName(std::string_view name);

// AOTAutograd's meta["partitioner_tag"]: where the joint trace put a node.
enum class PartitionerTag : uint8_t { kNone, kIsForward, kIsBackward, kMustBeInForward, kMustBeInBackward };
// "is_forward", "must_be_in_backward", ...; "" for kNone.
std::string_view PartitionerTagName(PartitionerTag tag);
// Inverse of PartitionerTagName for a non-empty name; nullopt if unknown.
std::optional<PartitionerTag> PartitionerTagFromName(std::string_view name);

// The node metadata few nodes carry (Note [Rare metadata]).
struct RareNodeMeta {
  std::optional<int64_t> ac_graph_id;
  std::optional<std::pair<int64_t, int64_t>> value_range;  // [low, high) of integer inputs
  // With NodeMeta::mutated: the forward output whose value AOTAutograd writes
  // into this input after the forward (format key `written_back_from`), when known.
  std::optional<int64_t> written_back_from;
  // Set by ProtectMutations on a forward value that reads a value the forward
  // mutates (the name of that value): it is never recomputed in the backward,
  // where it would read the mutated data. Derived, not stored in the format.
  InternedString reads_mutated;
  // Note [Region budgets] (passes/budget_partition.h): PyTorch's legacy
  // meta["memory_budget"] (MemoryBudgetMode) and the budget of
  // torch.autograd.graph.region_activation_memory_budget, read off
  // meta["custom"]["_region_activation_memory_budget"]. Format keys
  // `memory_budget` and `region_memory_budget`.
  std::optional<double> memory_budget;
  std::optional<double> region_memory_budget;
  bool operator==(const RareNodeMeta&) const = default;
};

// The node metadata that partitioning reads (FX's node.meta, minus "val").
//
// Note [Rare metadata]
// Fields most nodes leave unset (checkpoint graph ids, input ranges, write-back
// and mutation facts, region budgets) live in a RareNodeMeta shared between
// copies: a node without them pays one null pointer, a clone or extraction
// copies a pointer, and a write through mutableRare() copies the record first
// if another node shares it. Read them with rare(), which is an empty record
// when the node has none.
struct NodeMeta {
  Decision recompute = Decision::kNone;  // the CheckpointPolicy tag, e.g. MUST_SAVE
  PartitionerTag partitioner_tag = PartitionerTag::kNone;
  bool offload_requested = false;  // with `names`: one of them was xla::offload_name
  // Placeholders: the program mutates this input (AOTAutograd writes the new
  // value back after the forward, or a copy_ in the graph does). Format key
  // `mutated`; Note [Mutated inputs] in passes/protect_mutations.h.
  bool mutated = false;
  // AOTAutograd's meta["saved_tensor_with_no_vc_check"]: if saved, the value is
  // stashed on ctx without a version-counter check, so it goes after the other
  // saved tensors (passes/order_saved_values.h).
  bool no_vc_check = false;
  // Dynamo's meta["has_backward_hook"]: a tensor hook runs on this value's
  // gradient (cleanup_recompute_tags saves such a region output).
  bool has_backward_hook = false;
  SharedText stack_trace;
  // Names given to this value by naming ops (FoldAnnotations), in graph order.
  std::vector<std::string> names;

  const RareNodeMeta& rare() const { return rare_ ? *rare_ : kNoRare; }
  RareNodeMeta& mutableRare() {
    if (!rare_) {
      rare_ = std::make_shared<RareNodeMeta>();
    } else if (rare_.use_count() > 1) {
      rare_ = std::make_shared<RareNodeMeta>(*rare_);
    } else {
      // The count is a relaxed load: order it after another thread's release of
      // its copy before writing in place (why shared_ptr::unique() was removed).
      std::atomic_thread_fence(std::memory_order_acquire);
    }
    return *rare_;
  }
  bool operator==(const NodeMeta& o) const {
    return recompute == o.recompute && partitioner_tag == o.partitioner_tag &&
           offload_requested == o.offload_requested && mutated == o.mutated && no_vc_check == o.no_vc_check &&
           has_backward_hook == o.has_backward_hook && stack_trace == o.stack_trace && names == o.names &&
           rare() == o.rare();
  }

 private:
  static const RareNodeMeta kNoRare;
  std::shared_ptr<RareNodeMeta> rare_;
};

class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  OpKind op() const { return op_; }
  // Placeholder/get_attr: its target; call_function: "aten.mm.default" or
  // "_operator.getitem"; output: "output".
  const std::string& target() const { return target_is_name_ ? name_ : target_.str(); }
  const std::vector<Argument>& args() const { return args_; }
  const Kwargs& kwargs() const { return kwargs_; }
  // A kwarg by name, or nullptr.
  const Argument* kwarg(std::string_view key) const;
  // Each distinct user once, in the order the uses were created.
  const NodeList& users() const { return users_; }
  // Each distinct node this node reads, in argument order.
  const NodeList& inputs() const { return inputs_; }
  // Position in the graph's node order (0-based); stable until nodes are erased.
  size_t index() const { return index_; }
  Graph* owningGraph() const { return graph_; }

  ValueFacts& val() { return val_; }
  const ValueFacts& val() const { return val_; }
  NodeMeta& meta() { return meta_; }
  const NodeMeta& meta() const { return meta_; }

  PlaceholderRole role() const { return role_; }
  void setRole(PlaceholderRole role) { role_ = role; }
  // Placeholders: pytree path of the user input ("args[0]['a']"); may be empty.
  const std::string& path() const { return path_.str(); }
  void setPath(std::string_view path) { path_ = path; }

  // Op facts of a call_function target, or nullptr (Python callables, or a file
  // that had none and was not completed from the dispatcher).
  const OpInfo* opInfo() const;
  // Caches the entry of this node's target in its graph's op table, found by
  // the caller (a copy made beside its op facts), saving opInfo()'s look-up.
  void cacheOpInfo(const OpInfo* info) const { op_info_.store(info, std::memory_order_relaxed); }

  bool isPlaceholder() const { return op_ == OpKind::kPlaceholder; }
  bool isCallFunction() const { return op_ == OpKind::kCallFunction; }
  bool isOutput() const { return op_ == OpKind::kOutput; }
  bool isGetItem() const { return op_ == OpKind::kCallFunction && target_ == GetItemTarget(); }

 private:
  friend class Graph;
  static const InternedString& GetItemTarget();  // "_operator.getitem"
  // A placeholder's target is usually its own name: then it is not interned
  // (names are unique per node) but follows the name (target_is_name_).
  Node(Graph* graph, OpKind op, std::string name, std::string_view target)
      : graph_(graph), op_(op), target_is_name_(op == OpKind::kPlaceholder && target == name), name_(std::move(name)) {
    if (!target_is_name_) target_ = target;
  }
  Node(Graph* graph, const Node& like)  // createNodeLike: no re-interning
      : graph_(graph), op_(like.op_), target_is_name_(like.target_is_name_), name_(like.name_), target_(like.target_) {}
  void recomputeInputs();

  Graph* graph_;
  // Cached lookup in the graph's OpTable. Atomic (relaxed: every thread that
  // fills it stores the same entry) because threads that only read a graph
  // may both ask (Note [Extracting both sides at once] in src/extract_partition.cpp).
  mutable std::atomic<const OpInfo*> op_info_{nullptr};
  OpKind op_;
  bool target_is_name_ = false;  // a placeholder whose target is its name (target_ unused)
  std::string name_;
  // Interned: an op name, the output's "output", a get_attr's attribute path
  // (_tensor_constant0, true_graph_0), a placeholder target other than its name.
  InternedString target_;
  std::vector<Argument> args_;
  Kwargs kwargs_;
  NodeList inputs_;
  NodeList users_;
  size_t index_ = 0;
  ValueFacts val_;
  NodeMeta meta_;
  PlaceholderRole role_ = PlaceholderRole::kNone;
  InternedString path_;  // interned: pytree paths of inputs, bounded by the largest graph's inputs
};

// ---------------------------------------------------------------------------
// Graph
// ---------------------------------------------------------------------------

// Nodes live in their graph's arena (Graph::allocateNode): the owning pointer
// runs the destructor and leaves the memory to the arena.
struct NodeDestroyer {
  void operator()(Node* node) const;
};
using NodePtr = std::unique_ptr<Node, NodeDestroyer>;

enum class GraphKind : uint8_t { kPlain, kJoint, kForward, kBackward };
std::string_view GraphKindName(GraphKind kind);
std::optional<GraphKind> GraphKindFromName(std::string_view name);

// Facts only a joint forward/backward graph has. See docs/format.md, "joint".
struct JointFacts {
  int64_t num_fwd_outputs = 0;
  std::vector<std::optional<std::string>> output_paths;  // per forward output
  // Per tangent: the forward output index, or -1 for a backward effect token
  // (Note [Effect tokens] in docs/format.md): an input of the backward that is
  // no cotangent; the joint graph returns one token per such tangent after the
  // gradients.
  std::vector<int64_t> tangent_outputs;
  int64_t backwardTokens() const {
    int64_t n = 0;
    for (int64_t t : tangent_outputs) n += t == -1;
    return n;
  }
  bool operator==(const JointFacts&) const = default;
};

class Graph {
 public:
  Graph() = default;
  ~Graph();  // timed as phase "destroy-graph" (fxremat/phases.h): at a million nodes it is not free
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void setName(std::string name) { name_ = std::move(name); }
  GraphKind kind() const { return kind_; }
  void setKind(GraphKind kind) { kind_ = kind; }
  // A plain graph returning a Python list rather than a tuple (Note
  // [Single-value outputs]): flex_attention_backward vmaps its joint subgraph
  // with out_dims shaped like what the subgraph returns.
  bool returnsList() const { return returns_list_; }
  void setReturnsList(bool v) { returns_list_ = v; }
  JointFacts& joint() { return joint_; }
  const JointFacts& joint() const { return joint_; }
  // Hints of the free symbols of symbolic dims, ordered by name.
  std::map<std::string, int64_t>& symbols() { return symbols_; }
  const std::map<std::string, int64_t>& symbols() const { return symbols_; }
  OpTable& ops() { return ops_; }
  const OpTable& ops() const { return ops_; }
  // The values get_attr nodes read, by attribute path (their target).
  std::map<std::string, Constant>& constants() { return constants_; }
  const std::map<std::string, Constant>& constants() const { return constants_; }
  // The graphs get_attr nodes hand to higher-order ops (cond's branches, map's
  // and invoke_subgraph's bodies), by attribute path. A subgraph is immutable
  // once read: the graphs a partition emits share it (Note [Higher-order ops]).
  std::map<std::string, std::shared_ptr<const Graph>>& subgraphs() { return subgraphs_; }
  const std::map<std::string, std::shared_ptr<const Graph>>& subgraphs() const { return subgraphs_; }
  // The subgraph a get_attr node reads, or nullptr (a constant, or not a get_attr).
  const Graph* subgraphOf(const Node& get_attr) const;

  // Nodes in graph order.
  const std::vector<NodePtr>& nodes() const { return nodes_; }
  size_t size() const { return nodes_.size(); }
  Node* findNode(std::string_view name) const;
  // The output node, or nullptr while the graph has none.
  Node* outputNode() const;
  std::vector<Node*> placeholders() const;
  // The output node's entries (nullptr for None), in order.
  std::vector<Node*> outputValues() const;

  // Creates a node. It is appended, except that it goes before an existing
  // output node (the output node stays last). The name must be unused.
  //   Given:   %a = placeholder; return (%a)
  //   Execute: createNode(kCallFunction, "b", "aten.sin.default", {%a})
  //   Result:  %a = placeholder; %b = aten.sin.default(%a); return (%a)
  Node* createNode(OpKind op, std::string name, std::string_view target,
                   std::vector<Argument> args = {}, Kwargs kwargs = {});
  // Creates a node right before `before` (which must be in this graph and not a
  // placeholder unless the new node is one too). The name must be unused.
  //   Given:   %a = placeholder; %c = aten.cos.default(%a); return (%c)
  //   Execute: createNodeBefore(%c, kCallFunction, "b", "aten.sin.default", {%a})
  //   Result:  %a = placeholder; %b = aten.sin.default(%a); %c = aten.cos.default(%a); return (%c)
  // Creates a node with the op, name and target of `like` (a node of another
  // graph: a clone or an extraction), appended as createNode does; cheaper than
  // createNode(like.op(), like.name(), like.target(), ...), which interns the
  // target again (a lock per node, contended when the budget solver's threads
  // extract at once).
  Node* createNodeLike(const Node& like, std::vector<Argument> args = {}, Kwargs kwargs = {});
  Node* createNodeBefore(Node* before, OpKind op, std::string name, std::string_view target,
                         std::vector<Argument> args = {}, Kwargs kwargs = {});
  // Renames a node; the new name must be unused. Uses keep pointing at it. A
  // placeholder whose target was its name gets the new name as target too.
  //   Given:   %a = placeholder; %b = aten.sin.default(%a)
  //   Execute: renameNode(%a, "x")
  //   Result:  %x = placeholder; %b = aten.sin.default(%x)
  void renameNode(Node* node, std::string name);
  // Replaces a node's arguments, updating use lists.
  //   Given:   %c = f(%a)
  //   Execute: setInputs(%c, {%b})
  //   Result:  %c = f(%b); %a no longer lists %c as a user
  void setInputs(Node* node, std::vector<Argument> args, Kwargs kwargs = {});
  // Rewrites every use of `from` to `to`.
  //   Given:   %3 = f(%1, %2); %4 = g(%3)
  //   Execute: replaceAllUsesWith(%3, %6)
  //   Result:  %4 = g(%6)
  void replaceAllUsesWith(Node* from, Node* to);
  // Erases a node that has no users (asserts otherwise).
  void eraseNode(Node* node);
  // Erases many nodes at once, in linear time. Every user of an erased node
  // must be erased too (asserts otherwise).
  //   Given:   %a = f(%x); %b = g(%a); %c = h(%x)
  //   Execute: eraseNodes({%a, %b})
  //   Result:  %c = h(%x)
  void eraseNodes(const std::vector<Node*>& nodes);
  // Puts the nodes in `order`, a permutation of all of them in which every node
  // comes after its inputs, placeholders first and the output node last;
  // anything else is an internal error and leaves the graph unchanged.
  //   Given:   %a = placeholder; %b = f(%a); %c = g(%a); return (%b, %c)
  //   Execute: reorderNodes({%a, %c, %b, output})
  //   Result:  %a = placeholder; %c = g(%a); %b = f(%a); return (%b, %c)
  Status reorderNodes(const std::vector<Node*>& order);
  // A name not yet used in the graph, derived from `base` FX-style (base, base_1, ...).
  std::string uniqueName(std::string_view base) const;
  // Room for `n` nodes without reallocating the node list or rehashing the
  // name index (readers and copies know their size in advance); the node
  // arena's chunks for them are allocated too (Note [Node arena]).
  void reserve(size_t n);
  // The arena memory of the nodes reserve() made room for and not yet created,
  // chunk by chunk in the order nodes will use it. Another thread may map its
  // pages ahead (PopulatePages, Note [Populated pages] in
  // src/populate_pages.h) while this graph's thread creates nodes; the ranges
  // stay valid as long as the graph. Their contents are not to be touched.
  // `mapped_bytes`: how much of the chunk, from its start, is adopted memory
  // the reader wrote already, which needs no mapping.
  struct NodeMemory {
    std::byte* begin;
    size_t size;
    size_t mapped_bytes;
  };
  std::vector<NodeMemory> unusedNodeMemory() const;
  // Note [Recycled text pages]: takes over `memory` (a file's text the reader
  // is done with) as arena chunks for up to `nodes` of the nodes still to
  // come, before reserve(). Its pages are mapped already, so the nodes placed
  // there cost no page faults; the pages past those chunks are given back to
  // the system (MADV_DONTNEED). The string's contents are overwritten: it is
  // kept only as the owner of its buffer, which goes with the graph.
  void adoptNodeMemory(std::string&& memory, size_t nodes);
  // The same for `capacity` bytes at `base`, allocated with operator new and
  // kept alive by `owner` (Note [Recycled index pages] in src/json_io.cpp: the
  // JSON parser's structural index). A buffer too small for a chunk is not
  // taken: `owner` is dropped, and frees it, on return.
  // Its first `mapped_bytes` are mapped already: a chunk among them is not
  // mapped again when nodes start using it.
  void adoptNodeMemory(std::shared_ptr<void> owner, std::byte* base, size_t capacity, size_t mapped_bytes,
                       size_t nodes);
  // The bytes of one arena chunk: a buffer meant for adoptNodeMemory (a file's
  // text) is best allocated in whole chunks (Note [Recycled text pages]).
  static constexpr size_t NodeChunkBytes();

 private:
  void renumber(size_t from);
  // Where createNode puts a node: last, or before an existing output node.
  size_t appendPosition(OpKind op) const;
  // Places a freshly allocated node at `position` (renumbering those after it)
  // and sets its arguments: the common tail of every create function.
  Node* insertNode(NodePtr node, size_t position, std::vector<Argument> args, Kwargs kwargs);

  std::string name_;
  GraphKind kind_ = GraphKind::kPlain;
  bool returns_list_ = false;
  JointFacts joint_;
  std::map<std::string, int64_t> symbols_;
  OpTable ops_;
  std::map<std::string, Constant> constants_;
  std::map<std::string, std::shared_ptr<const Graph>> subgraphs_;
  // Note [Node arena]: nodes are placed in chunks of kNodesPerChunk, allocated
  // as the graph grows and freed with it: a million-node graph pays a few
  // thousand allocations for its nodes instead of a million, and walks them in
  // memory order. An erased node's slot is not reused (erasing is rare and
  // bounded by what was created). Declared before nodes_: destroyed after it.
  // Chunks past the current one were allocated by reserve() and are not used
  // yet. A chunk's pages are mapped when it becomes the current one, unless
  // another thread mapped them first (unusedNodeMemory).
  static constexpr size_t kNodesPerChunk = 512;
  Node* allocateNode();
  std::vector<std::byte*> node_chunks_;  // in the order nodes use them
  // By chunk: how many bytes from its start are known to be mapped (adopted memory the reader wrote).
  std::vector<size_t> chunk_mapped_bytes_;
  size_t reserved_nodes_ = 0;  // the last reserve()'s n: a chunk maps the pages of those only
  std::vector<std::unique_ptr<std::byte[]>> owned_chunks_;
  std::vector<std::shared_ptr<void>> adopted_memory_;  // adoptNodeMemory's buffers, holding chunks
  size_t next_chunk_ = 0;              // the chunk that becomes current next
  std::byte* current_chunk_ = nullptr;
  size_t nodes_in_current_chunk_ = kNodesPerChunk;  // full: the next node starts a chunk
  std::vector<NodePtr> nodes_;
  // Name -> node, built on the first look-up by name and kept up to date from
  // then on: graphs that are only built and walked (an extraction the budget
  // solver simulates and drops) never pay for it. Keys view the nodes' own
  // names (a node never moves: nodes_ holds pointers; renameNode re-keys it).
  // Not thread-safe: one graph is used by one thread at a time.
  void indexNames() const;
  mutable std::unordered_map<std::string_view, Node*> by_name_;
  mutable bool names_indexed_ = false;
};

// The names Graph::uniqueName(base) gives, one after another, for a pass that
// creates many nodes of one base name: each suffix is probed once, where each
// uniqueName call probes base, base_1, ... from the first (the k-th of a run
// of calls k taken names). The names are uniqueName's as long as the pass
// frees none of them meanwhile.
class UniqueNames {
 public:
  UniqueNames(const Graph& graph, std::string base) : graph_(graph), base_(std::move(base)) {}
  std::string next();

 private:
  const Graph& graph_;
  std::string base_;
  int suffix_ = 0;  // the next suffix to probe; 0 is the base itself
};

constexpr size_t Graph::NodeChunkBytes() { return kNodesPerChunk * sizeof(Node); }

// Note [Higher-order ops]
// A higher-order op (torch.ops.higher_order.cond, map_impl, invoke_subgraph,
// auto_functionalized_v2, with_effects, ...) is a call_function node whose
// target is "higher_order.NAME". The graphs it runs are get_attr nodes among its
// arguments, as in FX (`cond(pred, true_graph_0, false_graph_0, [x])`), naming
// entries of the owning graph's subgraphs(); an operator it takes as a value
// (auto_functionalized's mutable op, with_effects' effectful op) is an
// Argument of kind kOp. Its value is the tuple of its results, read through
// getitems; every result is a fresh storage (auto_functionalized returns copies
// of the bases it wrote; the op it wraps is never run in place).
// The partition rules, each where it is applied:
//  - never recomputed: the reference's recompute allowlist names no HOP
//    (min_cut_partition.cpp, Categorize), so a forward HOP's results that the
//    backward reads are saved, and a backward HOP runs in the backward;
//  - with_effects: its results are MUST_SAVE (the reference's
//    force_save_effectful_ops; passes/force_saves.cpp), it is never dropped as
//    dead code nor merged by CSE, so its token chain keeps the effects' order;
//  - a subgraph get_attr travels like a constant: every emitted graph that
//    calls the op reads the attribute again and carries the subgraph (shared);
//  - recompute cost: the sum of its bodies' costs; peak: the bytes of its
//    results (its bodies' transient buffers are not modelled).
// Formats: a "subgraphs" object of nested graph documents (format 1.4) and, in
// the text form, `# subgraph NAME {` ... `# }` blocks (docs/format.md).
bool IsHigherOrderTarget(std::string_view target);

// Note [Single-value outputs]
// A graph's output node takes one argument, the list of its results, with one
// exception: a plain graph (a higher-order op's subgraph) may return a single
// value itself, as FX allows. flex_attention's score_mod and mask_mod
// subgraphs do (`return add`, not `return (add,)`), and the op calls them
// expecting a tensor, so the form is kept through every reader and writer
// (format 1.6; the text form prints `return add`). outputValues() reads both
// forms; joint, forward and backward graphs always return a list. The
// sequence's Python type is kept too: a plain graph may return a list
// (Graph::returnsList(), "returns_list" in the format, `return [a, b]` in the
// text form) where FX graphs usually return tuples, and a caller can depend on
// it (flex_attention_backward builds vmap's out_dims from it).

// Checks the invariants every pass may assume: names unique, arguments defined
// before use, exactly one output node and it is last, placeholders first,
// call_function nodes have value facts, joint facts consistent with the graph
// (num_fwd_outputs, one gradient per primal, tangent map). Errors name the node.
Status VerifyGraph(const Graph& graph);

// Deep copy: same nodes, names, facts and metadata.
std::unique_ptr<Graph> CloneGraph(const Graph& graph);

// The forward output each tangent of a joint graph belongs to, when nothing
// records it (Note [Tangents without descriptors] in src/ir.cpp).
Expected<std::vector<int64_t>> InferTangentOutputs(const Graph& g);

}  // namespace fxremat
