// The peak model (Note [Peak model] in fxremat/peak_model.h): one pass over the
// forward graph and one over the backward graph, storages reference-counted by
// the live values that refer to them.
#include "fxremat/peak_model.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <boost/container/small_vector.hpp>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "src/partition_internal.h"

namespace fxremat {

int64_t StorageBytes(const TensorFacts& facts) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t span = 1;
  bool strided = facts.stride.size() == facts.shape.size();
  for (size_t i = 0; i < facts.shape.size(); ++i) {
    int64_t size = facts.shape[i].hint;
    if (size <= 0) return 0;
    if (!strided) continue;
    int64_t stride = facts.stride[i].hint;
    if (stride < 0) { strided = false; continue; }
    if (stride != 0 && (size - 1) > (kMax - span) / stride) return kMax;  // VerifyGraph refuses such graphs
    span += (size - 1) * stride;
  }
  if (!strided) span = facts.numel();
  int64_t item = DTypeItemSize(facts.dtype);
  return span > kMax / item ? kMax : span * item;
}

namespace {

// One storage: its bytes and whether it counts (a device storage the step
// allocated) or not (an input's, a host one).
struct Storage {
  int64_t bytes = 0;
  bool counted = true;
  bool host = false;
  int32_t refs = 0;
};

class Simulator {
 public:
  explicit Simulator(std::string main_device) : main_device_(std::move(main_device)) {}

  // A storage for a fresh tensor; inputs are not counted.
  int32_t NewStorage(const TensorFacts& facts, bool counted) {
    Storage s;
    s.bytes = StorageBytes(facts);
    s.host = facts.device != main_device_;
    s.counted = counted;
    storages_.push_back(s);
    return static_cast<int32_t>(storages_.size() - 1);
  }

  // The value takes a reference on each of its storages (allocating the fresh ones).
  template <typename Ids>
  void Ref(const Ids& ids) {
    for (int32_t id : ids) {
      if (id < 0) continue;
      Storage& s = storages_[static_cast<size_t>(id)];
      if (s.refs++ == 0 && s.counted) (s.host ? host_live_ : live_) += s.bytes;
    }
  }
  template <typename Ids>
  void Unref(const Ids& ids) {
    for (int32_t id : ids) {
      if (id < 0) continue;
      Storage& s = storages_[static_cast<size_t>(id)];
      if (--s.refs == 0 && s.counted) (s.host ? host_live_ : live_) -= s.bytes;
    }
  }
  // Starts a new window for windowPeak() (the backward's own peak).
  void StartWindow() { window_peak_ = live_; }
  int64_t windowPeak() const { return window_peak_; }
  void Observe(const std::string& node, const char* graph) {
    window_peak_ = std::max(window_peak_, live_);
    if (live_ > peak_) {
      peak_ = live_;
      peak_node_ = node;
      peak_graph_ = graph;
    }
    host_peak_ = std::max(host_peak_, host_live_);
  }

  int64_t live() const { return live_; }
  int64_t peak() const { return peak_; }
  const std::string& peakNode() const { return peak_node_; }
  const std::string& peakGraph() const { return peak_graph_; }
  int64_t hostPeak() const { return host_peak_; }

 private:
  std::string main_device_;
  std::vector<Storage> storages_;
  int64_t live_ = 0, peak_ = 0, host_live_ = 0, host_peak_ = 0, window_peak_ = 0;
  std::string peak_node_, peak_graph_;
};

// The argument of `n` that a schema argument names (positional, then kwarg).
const Argument* ArgumentFor(const Node& n, const OpSchema& schema, size_t index) {
  if (index < n.args().size()) return &n.args()[index];
  return n.kwarg(schema.arguments[index].name);
}

// Storage ids per value: one per tensor (a tuple: one per item, -1 for a
// non-tensor), empty for a value that holds no tensor. A value Inductor would
// inline (Note [Inductor fusion in the peak model]) holds its inputs' storages.
// Inline: almost every value has one storage, and a heap block per value cost
// a fifth of the simulation at a million nodes.
using StorageIds = boost::container::small_vector<int32_t, 2>;

// Ops without the pointwise tag that Inductor lowers to a loop body too (its
// lowerings in torch/_inductor/lowering.py make them Pointwise nodes).
bool LoweredToLoopBody(std::string_view packet) {
  static constexpr std::string_view kOps[] = {
      "aten.full",  "aten.full_like",       "aten.zeros_like",     "aten.ones_like", "aten.scalar_tensor",
      "prims.iota", "aten.gather",          "aten.index",          "aten.embedding", "aten._to_copy",
      "aten.constant_pad_nd", "aten.slice_scatter", "aten.select_scatter"};
  return std::find(std::begin(kOps), std::end(kOps), packet) != std::end(kOps);
}

// A single-tensor op whose result Inductor can leave unrealized.
bool InlinableProducer(const Node& n) {
  if (!n.isCallFunction() || n.isGetItem() || !n.val().is_tensor()) return false;
  const OpInfo* info = n.opInfo();
  if (!info || !info->hasSchema()) return false;
  if (info->schema.isMutable() || info->schema.returnsAlias() || info->packetHasTag("nondeterministic_seeded"))
    return false;
  if (n.target() == "aten._to_copy.default") {  // a copy to another device (offload) is a transfer
    const Node* src = n.args().empty() || !n.args()[0].is_node() ? nullptr : n.args()[0].node;
    if (!src || !src->val().is_tensor() || src->val().tensor.device != n.val().tensor.device) return false;
  }
  return info->packetHasTag("pointwise") || LoweredToLoopBody(PacketOf(n.target()));
}

bool IsReductionOp(const Node& n) {
  const OpInfo* info = n.isCallFunction() ? n.opInfo() : nullptr;
  return info && info->packetHasTag("reduction") && !info->schema.isMutable();
}

// A view (IsViewOp) whose result is one tensor.
bool IsTensorView(const Node& n) { return n.val().is_tensor() && IsViewOp(n); }

// Per node of g: whether Inductor would inline its result into its readers
// (Note [Inductor fusion in the peak model]); views are marked when they pass
// an inlined base through to fusing readers only.
std::vector<bool> InlinedValues(const Graph& g) {
  std::vector<bool> inlined(g.size(), false);
  const Node* output = g.outputNode();
  const auto& nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& n = **it;
    const bool producer = InlinableProducer(n), view = IsTensorView(n);
    if (!producer && !view) continue;
    bool fuses = !n.users().empty();
    for (const Node* u : n.users()) {
      if (u == output) { fuses = false; break; }
      const bool reader = InlinableProducer(*u) || IsReductionOp(*u) || (IsTensorView(*u) && inlined[u->index()]);
      if (!reader) { fuses = false; break; }
    }
    inlined[n.index()] = fuses;
  }
  return inlined;
}

class GraphRun {
 public:
  GraphRun(const Graph& g, Simulator& sim, const char* label, PeakModelKind kind)
      : g_(g), sim_(sim), label_(label), ids_(g.size()) {
    if (kind == PeakModelKind::kInductor) inlined_ = InlinedValues(g);
  }

  StorageIds& ids(const Node* n) { return ids_[n->index()]; }

  // How many storage slots a value takes: a tuple its leaves', anything else one.
  static size_t Leaves(const ValueFacts& v) {
    if (v.kind != ValueFacts::Kind::kTuple) return 1;
    size_t count = 0;
    for (const ValueFacts& item : v.items) count += Leaves(item);
    return count;
  }

  void NewLeaves(const ValueFacts& v, StorageIds& out) {
    if (v.kind == ValueFacts::Kind::kTuple) {
      for (const ValueFacts& item : v.items) NewLeaves(item, out);
      return;
    }
    out.push_back(v.is_tensor() ? sim_.NewStorage(v.tensor, true) : -1);
  }

  // The storages of n's result: aliases where the schema (or getitem) says so,
  // fresh storages otherwise.
  StorageIds ResultStorages(const Node& n) {
    const ValueFacts& v = n.val();
    if (n.isGetItem()) {
      if (n.args().size() >= 2 && n.args()[0].is_node() && n.args()[1].kind == Argument::Kind::kInt) {
        // A tuple's storages are its leaves, flattened (a nested tuple, as
        // run_and_save_rng_state's (state, (result...)), takes several).
        const Node* tuple = n.args()[0].node;
        const StorageIds& from = ids(tuple);
        const int64_t i = n.args()[1].int_value;
        const std::vector<ValueFacts>& items = tuple->val().items;
        if (tuple->val().kind == ValueFacts::Kind::kTuple && i >= 0 && static_cast<size_t>(i) < items.size()) {
          size_t first = 0;
          for (int64_t k = 0; k < i; ++k) first += Leaves(items[static_cast<size_t>(k)]);
          const size_t count = Leaves(items[static_cast<size_t>(i)]);
          if (first + count <= from.size())
            return StorageIds(from.begin() + static_cast<std::ptrdiff_t>(first),
                              from.begin() + static_cast<std::ptrdiff_t>(first + count));
        }
        if (i >= 0 && static_cast<size_t>(i) < from.size()) return {from[static_cast<size_t>(i)]};
      }
      return {};
    }
    auto alias_of = [&](const SchemaArgument& ret) -> const StorageIds* {
      if (ret.alias_set.empty()) return nullptr;
      const OpInfo* info = n.opInfo();
      for (size_t a = 0; a < info->schema.arguments.size(); ++a)
        if (info->schema.arguments[a].alias_set == ret.alias_set) {
          const Argument* arg = ArgumentFor(n, info->schema, a);
          if (arg && arg->is_node()) return &ids(arg->node);
          return nullptr;
        }
      return nullptr;
    };
    const OpInfo* info = n.opInfo();
    const bool has_schema = info && info->hasSchema();
    if (v.is_tensor()) {
      if (has_schema && !info->schema.returns.empty())
        if (const StorageIds* base = alias_of(info->schema.returns[0]); base && !base->empty()) return *base;
      if (!inlined_.empty() && inlined_[n.index()]) {
        // Note [Inductor fusion in the peak model]: the loop body reads its
        // inputs' storages, which it keeps alive instead of allocating.
        StorageIds reads;
        for (const Node* in : n.inputs())
          for (int32_t id : ids(in))
            if (id >= 0) reads.push_back(id);
        std::sort(reads.begin(), reads.end());
        reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
        constexpr size_t kRealizeReadsThreshold = 4;  // torch._inductor.config.realize_reads_threshold
        if (n.users().size() <= 1 || reads.size() <= kRealizeReadsThreshold) return reads;
      }
      // PyTorch implements _unsafe_view as a view although its schema has no
      // alias, and device_put onto the device a tensor is already on returns it.
      const bool same_device_put = n.target() == "prims.device_put.default" && !n.args().empty() &&
                                   n.args()[0].is_node() && n.args()[0].node->val().is_tensor() &&
                                   n.args()[0].node->val().tensor.device == v.tensor.device;
      if ((n.target() == "aten._unsafe_view.default" || same_device_put) && !n.args().empty() &&
          n.args()[0].is_node() && ids(n.args()[0].node).size() == 1)
        return ids(n.args()[0].node);
      return {sim_.NewStorage(v.tensor, true)};
    }
    if (v.kind == ValueFacts::Kind::kTuple) {
      StorageIds out;
      for (size_t i = 0; i < v.items.size(); ++i) {
        if (i == 3 && n.target() == "higher_order.flex_attention_backward" && n.args().size() > 12 &&
            n.args()[12].kind == Argument::Kind::kList && v.items[i].kind == ValueFacts::Kind::kTuple &&
            v.items[i].items.size() == n.args()[12].list.size()) {
          // The gradients of score_mod's captured tensors: flex_attention_backward
          // allocates one only for a tensor that requires grad and returns None
          // for the others, where its fake value still shows a tensor.
          for (size_t k = 0; k < v.items[i].items.size(); ++k) {
            const Argument& captured = n.args()[12].list[k];
            const bool no_grad = captured.is_node() && captured.node->val().is_tensor() &&
                                 !captured.node->val().tensor.requires_grad;
            if (no_grad && v.items[i].items[k].kind != ValueFacts::Kind::kTuple) out.push_back(-1);
            else NewLeaves(v.items[i].items[k], out);
          }
          continue;
        }
        if (v.items[i].kind == ValueFacts::Kind::kTuple) {  // a nested tuple: fresh leaves
          NewLeaves(v.items[i], out);
          continue;
        }
        if (!v.items[i].is_tensor()) {
          out.push_back(-1);
          continue;
        }
        const StorageIds* base = nullptr;
        if (has_schema && info->schema.returns.size() == 1) base = alias_of(info->schema.returns[0]);  // Tensor(a)[]
        else if (has_schema && i < info->schema.returns.size()) base = alias_of(info->schema.returns[i]);
        out.push_back(base && base->size() == 1 ? (*base)[0] : sim_.NewStorage(v.items[i].tensor, true));
      }
      return out;
    }
    return {};
  }

  // Runs the graph's nodes after its placeholders, which the caller has set
  // up. Values listed by the output node keep their reference (the caller
  // takes it over); everything else dies after its last use.
  void Run() {
    const size_t n = g_.size();
    std::vector<size_t> last_use(n, 0);
    for (const auto& up : g_.nodes()) {
      size_t last = up->index();
      for (const Node* u : up->users()) last = std::max(last, u->index());
      last_use[up->index()] = last;
    }
    // Values freed after node i: those whose last use is i (outputs excluded),
    // as lists threaded through two index arrays (first dying after i, next
    // dying after the same node), in graph order as before.
    constexpr size_t kNone = std::numeric_limits<size_t>::max();
    std::vector<size_t> first_dead(n, kNone), last_dead(n, kNone), next_dead(n, kNone);
    const Node* output = g_.outputNode();
    for (const auto& up : g_.nodes()) {
      if (up->isOutput()) continue;
      bool is_output = false;
      for (const Node* u : up->users()) is_output = is_output || u == output;
      if (is_output) continue;
      const size_t at = last_use[up->index()];
      if (first_dead[at] == kNone) first_dead[at] = up->index();
      else next_dead[last_dead[at]] = up->index();
      last_dead[at] = up->index();
    }
    for (const auto& up : g_.nodes()) {
      const Node* node = up.get();
      if (node->isOutput()) break;
      if (!node->isPlaceholder()) {
        if (node->op() == OpKind::kGetAttr) ids_[node->index()] = StorageIds{};  // constants: not step memory
        else ids_[node->index()] = ResultStorages(*node);
        sim_.Ref(ids_[node->index()]);
        sim_.Observe(node->name(), label_);
      }
      for (size_t dead = first_dead[node->index()]; dead != kNone; dead = next_dead[dead]) sim_.Unref(ids_[dead]);
    }
  }

 private:
  const Graph& g_;
  Simulator& sim_;
  const char* label_;
  std::vector<StorageIds> ids_;
  std::vector<bool> inlined_;  // empty: the eager model
};

}  // namespace

std::string MainDevice(const Graph& g) {
  for (const auto& up : g.nodes()) {
    const ValueFacts& v = up->val();
    if (v.is_tensor() && v.tensor.device != "cpu") return v.tensor.device;
  }
  return "cpu";
}

Expected<PeakEstimate> SimulatePeak(const Partition& p, PeakModelKind kind) {
  const Graph& fw = *p.forward;
  const Graph& bw = *p.backward;
  std::string device = MainDevice(fw);
  if (device == "cpu") device = MainDevice(bw);
  Simulator sim(device);
  PeakEstimate est;

  // Forward: inputs are the baseline.
  GraphRun forward(fw, sim, "forward", kind);
  for (const Node* ph : fw.placeholders())
    if (ph->val().is_tensor()) forward.ids(ph) = {sim.NewStorage(ph->val().tensor, /*counted=*/false)};
  forward.Run();
  est.forward_peak_bytes = sim.peak();
  // The forward's outputs, by position: each holds one reference.
  std::vector<Node*> fw_outputs = fw.outputValues();
  for (Node* o : fw_outputs)
    if (o) sim.Ref(forward.ids(o));
  {
    // Drop the references Run left on the output values (one per distinct value).
    std::vector<bool> seen(fw.size(), false);
    for (Node* o : fw_outputs)
      if (o && !seen[o->index()]) {
        seen[o->index()] = true;
        sim.Unref(forward.ids(o));
      }
  }
  est.live_after_forward_bytes = sim.live();

  // Backward: saved values take over their forward-output reference.
  GraphRun backward(bw, sim, "backward", kind);
  std::vector<Node*> bw_inputs = bw.placeholders();
  for (const SavedValue& s : p.signature.saved) {
    if (s.forward_output_index < 0 || static_cast<size_t>(s.forward_output_index) >= fw_outputs.size() ||
        s.backward_input_index < 0 || static_cast<size_t>(s.backward_input_index) >= bw_inputs.size())
      return Status::Internal(fmt::format("peak model: saved value '{}' has no forward output or backward input", s.name));
    const Node* out = fw_outputs[static_cast<size_t>(s.forward_output_index)];
    if (out) backward.ids(bw_inputs[static_cast<size_t>(s.backward_input_index)]) = forward.ids(out);
  }
  for (const TangentEntry& t : p.signature.tangents) {
    if (t.backward_input_index < 0 || static_cast<size_t>(t.backward_input_index) >= bw_inputs.size())
      return Status::Internal(fmt::format("peak model: tangent '{}' has no backward input", t.name));
    Node* ph = bw_inputs[static_cast<size_t>(t.backward_input_index)];
    if (ph->val().is_tensor()) {
      backward.ids(ph) = {sim.NewStorage(ph->val().tensor, true)};
      sim.Ref(backward.ids(ph));
    }
  }
  sim.StartWindow();
  sim.Observe("", "backward");
  backward.Run();
  est.peak_bytes = sim.peak();
  est.peak_node = sim.peakNode();
  est.peak_graph = sim.peakGraph();
  est.backward_peak_bytes = sim.windowPeak();
  est.host_peak_bytes = sim.hostPeak();
  return est;
}

}  // namespace fxremat
