// protect_mutations (Note [Mutated inputs] in protect_mutations.h).
#include "passes/protect_mutations.h"
#include "fxremat/phases.h"

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "fxremat/partition.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

// The node a view reads (its first node argument), or null.
const Node* ViewBase(const Node* view) {
  for (const Argument& a : view->args())
    if (a.is_node()) return a.node;
  return nullptr;
}

// The node whose storage `n` aliases: follows view ops back to their first
// tensor argument.
const Node* AliasRoot(const Node* n) {
  while (IsViewOp(*n)) {
    const Node* base = ViewBase(n);
    if (!base) break;
    n = base;
  }
  return n;
}

// Calls fn(argument node) for every argument the op writes (schema `(a!)`).
template <typename Fn>
void ForEachWrittenArgument(const Node& n, Fn&& fn) {
  const OpInfo* info = n.opInfo();
  if (!info || !info->hasSchema()) return;
  const OpSchema& schema = info->schema;
  for (size_t i = 0; i < schema.arguments.size(); ++i) {
    if (!schema.arguments[i].is_write) continue;
    const Argument* a = nullptr;
    if (i < n.args().size() && !schema.arguments[i].kwarg_only) a = &n.args()[i];
    else a = n.kwarg(schema.arguments[i].name);
    if (a) a->forEachNode([&](Node* written) { fn(written); });
  }
}

bool InBackward(const JointClassification& c, const Node& n) { return c.in_tangents_closure[n.index()]; }

// Calls fn(alias root) for every value the forward op `n` writes (nothing for
// a backward op): the write rule LastWrites and LastWriteOf share.
template <typename Fn>
void ForEachForwardWrite(const JointClassification& c, const Node& n, Fn&& fn) {
  if (!n.isCallFunction() || InBackward(c, n)) return;
  ForEachWrittenArgument(n, [&](Node* written) { fn(AliasRoot(written)); });
}

// For each alias root: the position of the last forward write (the size of the
// graph for a write after the forward), or -1 when none.
std::vector<int64_t> LastWrites(const Graph& joint, const JointClassification& c) {
  std::vector<int64_t> last(joint.size(), -1);
  const int64_t after_forward = static_cast<int64_t>(joint.size());
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.isPlaceholder() && n.meta().mutated) last[n.index()] = after_forward;
    ForEachForwardWrite(c, n, [&](const Node* root) {
      int64_t& slot = last[root->index()];
      if (slot != after_forward) slot = std::max<int64_t>(slot, static_cast<int64_t>(n.index()));
    });
  }
  return last;
}

// Forward nodes whose value the backward reads (directly, or through other
// forward nodes it would have to recompute): the most a partitioner could
// recompute there.
std::vector<bool> NeededByBackward(const Graph& joint, const JointClassification& c) {
  std::vector<bool> needed(joint.size(), false);
  for (Node* o : c.backward_outputs)
    if (o) needed[o->index()] = true;
  for (size_t i = joint.size(); i-- > 0;) {
    const Node& n = *joint.nodes()[i];
    if (n.isOutput()) continue;
    for (const Node* u : n.users())
      if (!u->isOutput() && (InBackward(c, *u) || needed[u->index()])) needed[i] = true;
  }
  return needed;
}

// Whether `t`'s strides lay it out densely without overlap (clone keeps such
// strides under preserve_format; anything else it makes contiguous). Symbolic
// layouts are taken as dense: their clone's facts are then the input's.
bool DenseNonOverlapping(const TensorFacts& t) {
  const size_t rank = t.shape.size();
  if (t.stride.size() != rank) return true;
  for (size_t d = 0; d < rank; ++d)
    if (!t.shape[d].is_static() || !t.stride[d].is_static()) return true;
  std::vector<size_t> dims(rank);
  for (size_t d = 0; d < rank; ++d) dims[d] = d;
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return t.stride[a].hint < t.stride[b].hint; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (t.shape[d].hint == 1) continue;
    if (t.stride[d].hint != expected) return false;
    expected *= t.shape[d].hint;
  }
  return true;
}

constexpr std::string_view kCloneTarget = "aten.clone.default";
constexpr std::string_view kCloneSchema = "aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor";

ValueFacts SnapshotFacts(const ValueFacts& of) {
  ValueFacts v = of;
  v.tensor.storage = -1;  // a storage of its own, not numbered in the joint graph
  if (!DenseNonOverlapping(v.tensor)) {
    int64_t stride = 1;
    for (size_t d = v.tensor.shape.size(); d-- > 0;) {
      v.tensor.stride[d] = Dim::Static(stride);
      stride *= std::max<int64_t>(v.tensor.shape[d].hint, 1);
    }
  }
  return v;
}

}  // namespace

bool HasForwardMutations(const Graph& joint) {
  ScopedPhase phase("has-forward-mutations");
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.isPlaceholder() && n.meta().mutated) return true;
    if (!n.isCallFunction() || MustBeInBackward(n) || n.meta().partitioner_tag == PartitionerTag::kIsBackward) continue;
    const OpInfo* info = n.opInfo();
    if (info && info->hasSchema() && info->schema.isMutable()) return true;
  }
  return false;
}

Expected<bool> ProtectMutations(Graph& joint) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  const std::vector<int64_t> last_write = LastWrites(joint, c);
  bool changed = false;
  for (const auto& up : joint.nodes()) {
    Node& n = *up;
    if (!n.isCallFunction() || InBackward(c, n) || IsViewOp(n) || n.val().is_sym()) continue;
    std::string reads;
    for (const Node* input : n.inputs()) {
      const Node* root = AliasRoot(input);
      if (last_write[root->index()] > static_cast<int64_t>(n.index())) { reads = root->name(); break; }
    }
    if (reads.empty() || n.meta().rare().reads_mutated == reads) continue;
    n.meta().mutableRare().reads_mutated = reads;
    changed = true;
  }
  return changed;
}

// LastWrites' entry for `root` alone: the forward ops that write it are users
// of it or of a view of it, so only those are looked at (a scan of the whole
// graph per extraction cost 26 ms at a million nodes).
int64_t LastWriteOf(const Graph& joint, const JointClassification& c, const Node& root) {
  if (root.isPlaceholder() && root.meta().mutated) return static_cast<int64_t>(joint.size());
  int64_t last = -1;
  std::vector<const Node*> aliases{&root};
  for (size_t i = 0; i < aliases.size(); ++i) {
    for (const Node* u : aliases[i]->users()) {
      // A view whose base (its first node argument) is an alias of root: walking
      // its chain back with AliasRoot instead made a chain of n views n^2.
      if (u->isCallFunction() && !InBackward(c, *u) && IsViewOp(*u) && ViewBase(u) == aliases[i]) aliases.push_back(u);
      ForEachForwardWrite(c, *u, [&](const Node* written_root) {
        if (written_root == &root) last = std::max<int64_t>(last, static_cast<int64_t>(u->index()));
      });
    }
  }
  return last;
}

Status SnapshotSavedMutatedData(const Graph& joint, const JointClassification& c,
                                const std::vector<Node*>& saved_tensors, Partition& p) {
  // Only the joint graph's nodes and c are read (no name look-ups there): the
  // budget solver's threads extract from one joint graph at once.
  std::unordered_map<const Node*, int64_t> last_write;  // by alias root
  // AliasRoot of each view met, so that many saved views of one chain walk it
  // once (each walking it back to the root made n saved views of a chain n^2).
  std::unordered_map<const Node*, const Node*> root_of;
  auto alias_root = [&root_of](const Node* value) {
    std::vector<const Node*> path;
    const Node* n = value;
    while (IsViewOp(*n)) {
      if (auto known = root_of.find(n); known != root_of.end()) {
        n = known->second;
        break;
      }
      const Node* base = ViewBase(n);
      if (!base) break;
      path.push_back(n);
      n = base;
    }
    for (const Node* v : path) root_of.emplace(v, n);
    return n;
  };
  Graph& fw = *p.forward;
  Graph& bw = *p.backward;
  Node* const fw_output = fw.outputNode();
  if (!fw_output || fw_output->args().size() != 1 || fw_output->args()[0].kind != Argument::Kind::kList)
    return Status::Internal("the forward graph has no output list", "forward graph");
  const int64_t first_saved = p.signature.num_fwd_outputs;
  for (SavedValue& s : p.signature.saved) {
    if (s.kind != SavedValue::Kind::kTensor) continue;
    const int64_t k = s.forward_output_index - first_saved;
    if (k < 0 || k >= static_cast<int64_t>(saved_tensors.size())) continue;
    const Node* value = saved_tensors[static_cast<size_t>(k)];
    if (value->name() != s.name || !value->val().is_tensor()) continue;
    const Node* root = alias_root(value);
    auto [at_root, added] = last_write.try_emplace(root, 0);
    if (added) at_root->second = LastWriteOf(joint, c, *root);
    const int64_t write = at_root->second;
    if (write <= static_cast<int64_t>(value->index())) continue;  // no write, or the value is the new data
    // The backward reads the old data if a reader it computes stands before
    // the write in the joint graph.
    bool reads_old = false;
    for (const Node* u : value->users())
      reads_old = reads_old || (!u->isOutput() && static_cast<int64_t>(u->index()) < write && bw.findNode(u->name()));
    if (!reads_old) continue;
    Node* input = bw.findNode(s.graphName());
    Node* saved = fw.findNode(s.name);
    const std::vector<Argument>& outputs_now = fw_output->args()[0].list;
    const size_t at = static_cast<size_t>(s.forward_output_index);
    if (!input || !saved || at >= outputs_now.size() || !outputs_now[at].is_node() || outputs_now[at].node != saved)
      return Status::Internal(fmt::format("saved value '{}' is not forward output {} and a backward input", s.name, at),
                              "forward graph");
    EnsureOpFacts(fw, std::string(kCloneTarget), std::string(kCloneSchema), {"core", "pt2_compliant_tag"},
                  {"core", "out", "pt2_compliant_tag"});  // once: later calls find it
    Node* before = nullptr;
    if (saved->isPlaceholder()) {
      for (const auto& up : fw.nodes())
        if (!up->isPlaceholder()) { before = up.get(); break; }
    } else {
      before = fw.nodes()[saved->index() + 1].get();
    }
    s.snapshot = true;
    if (fw.findNode(s.deviceName()) || bw.findNode(s.deviceName()))
      return Status::Internal(fmt::format("the name '{}' is taken", s.deviceName()), "forward graph");
    Node* snapshot = fw.createNodeBefore(before, OpKind::kCallFunction, s.deviceName(), kCloneTarget,
                                         {Argument::NodeRef(saved)});
    snapshot->val() = SnapshotFacts(saved->val());
    std::vector<Argument> outputs = outputs_now;
    outputs[at] = Argument::NodeRef(snapshot);
    fw.setInputs(fw_output, {Argument::List(std::move(outputs))});
    s.facts = snapshot->val();
    input->val() = snapshot->val();  // the backward receives the clone
    p.signature.notes.push_back(fmt::format(
        "saved '{}' as a copy taken before the forward overwrites it ({}): the backward reads the data from before "
        "the write (Note [Snapshots of mutated inputs])",
        s.name, DescribeMutation(joint, *root)));
  }
  return Status::Ok();
}

std::string DescribeMutation(const Graph& joint, const std::string& mutated) {
  const Node* root = joint.findNode(mutated);
  if (!root) return fmt::format("'{}' is mutated", mutated);
  return DescribeMutation(joint, *root);
}

std::string DescribeMutation(const Graph& joint, const Node& mutated_root) {
  const Node* root = &mutated_root;
  const std::string& mutated = root->name();
  if (root->isPlaceholder() && root->meta().mutated)
    return fmt::format("the program mutates the input '{}' (AOTAutograd writes its new value back after the forward)",
                       mutated);
  for (const auto& up : joint.nodes()) {
    bool writes = false;
    if (up->isCallFunction())
      ForEachWrittenArgument(*up, [&](Node* w) { writes = writes || AliasRoot(w) == root; });
    if (writes) return fmt::format("node '{}' ({}) overwrites '{}' in the forward", up->name(), up->target(), mutated);
  }
  return fmt::format("'{}' is mutated", mutated);
}

Status CheckMutationDemands(const Graph& joint) {
  bool any = false;
  for (const auto& up : joint.nodes()) any = any || !up->meta().rare().reads_mutated.empty();
  if (!any) return Status::Ok();
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  const std::vector<bool> needed = NeededByBackward(joint, c);
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    if (n.meta().rare().reads_mutated.empty() || n.meta().recompute != Decision::kMustRecompute || !needed[n.index()]) continue;
    return Status::BadInput(
        fmt::format("value '{}' is marked MUST_RECOMPUTE, but it reads '{}' before the forward overwrites it: {}. "
                    "Recomputed in the backward it would read the new data and give wrong gradients; save it "
                    "instead (Note [Mutated inputs])",
                    n.name(), n.meta().rare().reads_mutated, DescribeMutation(joint, n.meta().rare().reads_mutated)),
        fmt::format("node '{}'", n.name()));
  }
  return Status::Ok();
}

}  // namespace fxremat
