// emit_offload: for every saved value marked `offloaded`, the forward copies it to
// host after its last forward use and returns the copy; the backward takes the
// copy and reloads it before its first use (Note [Offload] in emit_offload.h).
// Assumes graphs and signature as ExtractPartition emits them.
//
// Naming: the host copy is "<name>_host" in both graphs (SavedValue::graphName);
// the backward's reload keeps the joint name, so every backward use reads as
// before. Facts: the torch targets' host copy is the value with device cpu; the
// xla target keeps the device (the memory space is the op's annotation).
// torch_async adds "<name>_to_host" (the forward's transfer, before its wait)
// and "<name>_from_host" (the backward's, before its wait): Note [Overlapped
// offload] in emit_offload.h.
#include "passes/emit_offload.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "fxremat/peak_model.h"
#include "passes/budget_partition.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

// prims.device_put, not aten._to_copy: Inductor decomposes _to_copy while
// AOTAutograd traces and has no lowering for one that appears after
// partitioning ("both a fallback and a decomp"), while it lowers device_put
// (PyTorch's own activation offloading emits it for the same reason).
constexpr const char* kDevicePut = "prims.device_put.default";
// Facts of prims::device_put as torch 2.13 (constraints.txt) reports them; a
// graph that already has facts for it keeps its own.
constexpr const char* kDevicePutSchema = "prims::device_put(Tensor a, Device device, bool non_blocking=False) -> Tensor";
constexpr const char* kPlaceToHost = "xla.place_to_host.default";
// Note [Overlapped offload]: the torch_async target's ops
// (python/fxremat/_offload_ops.py registers them).
constexpr const char* kAsyncOffload = "fxremat.offload.default";
constexpr const char* kAsyncReload = "fxremat.reload.default";
constexpr const char* kAsyncWait = "fxremat.wait_tensor.default";
constexpr const char* kPlaceToDevice = "xla.place_to_device.default";

struct Transfer {
  std::string target;
  std::vector<Argument> extra_args;  // after the value
  Kwargs kwargs;
};

Transfer ToHost(OffloadTarget target) {
  if (target == OffloadTarget::kXla) return {kPlaceToHost, {}, {}};
  if (target == OffloadTarget::kTorchAsync) return {kAsyncOffload, {}, {}};
  return {kDevicePut, {Argument::Device("cpu")}, {{"non_blocking", Argument::Bool(true)}}};
}

Transfer ToDevice(const ValueFacts& device_facts, OffloadTarget target) {
  if (target == OffloadTarget::kXla) return {kPlaceToDevice, {}, {}};
  if (target == OffloadTarget::kTorchAsync) return {kAsyncReload, {Argument::Device(device_facts.tensor.device)}, {}};
  return {kDevicePut, {Argument::Device(device_facts.tensor.device)}, {{"non_blocking", Argument::Bool(true)}}};
}

ValueFacts HostFacts(const ValueFacts& device_facts, OffloadTarget target) {
  ValueFacts host = device_facts;
  if (target != OffloadTarget::kXla) host.tensor.device = "cpu";
  host.tensor.storage = -1;  // a fresh storage, not numbered in the joint graph
  return host;
}

void RegisterTransferOps(Graph& g, OffloadTarget target) {
  if (target == OffloadTarget::kTorch) {
    EnsureOpFacts(g, kDevicePut, kDevicePutSchema, {"pt2_compliant_tag"}, {"pt2_compliant_tag"});
  } else if (target == OffloadTarget::kTorchAsync) {
    EnsureOpFacts(g, kAsyncOffload, "fxremat::offload(Tensor t) -> Tensor", {});
    EnsureOpFacts(g, kAsyncReload, "fxremat::reload(Tensor t, Device device) -> Tensor", {});
    EnsureOpFacts(g, kAsyncWait, "fxremat::wait_tensor(Tensor(a) t, Tensor? keepalive=None) -> Tensor(a)", {});
  } else {
    EnsureOpFacts(g, kPlaceToHost, "xla::place_to_host(Tensor t) -> Tensor", {});
    EnsureOpFacts(g, kPlaceToDevice, "xla::place_to_device(Tensor t) -> Tensor", {});
  }
}

// Whether n updates one of its inputs in place: a mutable schema, or, without
// facts, PyTorch's naming of in-place ops (aten.add_).
bool UpdatesInPlace(const Node& n) {
  if (!n.isCallFunction()) return false;
  const OpInfo* info = n.opInfo();
  if (info && info->hasSchema()) return info->schema.isMutable();
  const std::string_view packet = PacketOf(n.target());
  return !packet.empty() && packet.back() == '_';
}

// A view (IsViewOp), or, without facts, an op of functorch's view_ops list.
bool ViewLike(const Node& n) {
  if (IsViewOp(n)) return true;
  const OpInfo* info = n.isCallFunction() ? n.opInfo() : nullptr;
  return n.isCallFunction() && !(info && info->hasSchema()) && InDefaultViewOps(PacketOf(n.target()));
}

// The index of the last forward node that updates v's storage in place -- an
// op that updates one of its inputs, reading v, a view of it, or any value on
// the same storage (its base, a sibling view) -- or v's own index if none. A
// copy of v must not start before it: the backward reads v as it is after it.
size_t LastInPlaceUpdate(const Graph& fw, const Node* v) {
  // Up to the base v is a view of, then down through every view of it (graphs
  // without storage ids too).
  const Node* root = v;
  while (ViewLike(*root) && !root->args().empty() && root->args()[0].is_node()) root = root->args()[0].node;
  std::vector<bool> alias(fw.size(), false);
  std::vector<const Node*> todo = {root};
  alias[root->index()] = true;
  while (!todo.empty()) {
    const Node* n = todo.back();
    todo.pop_back();
    for (const Node* user : n->users())
      if (!alias[user->index()] && ViewLike(*user)) {
        alias[user->index()] = true;
        todo.push_back(user);
      }
  }
  const int64_t storage = v->val().is_tensor() ? v->val().tensor.storage : -1;
  auto on_storage = [&](const Node* x) {
    return alias[x->index()] || (storage >= 0 && x->val().is_tensor() && x->val().tensor.storage == storage);
  };
  size_t last = v->index();
  for (size_t i = v->index() + 1; i < fw.size(); ++i) {
    const Node& n = *fw.nodes()[i];
    if (!UpdatesInPlace(n)) continue;
    for (const Node* input : n.inputs())
      if (on_storage(input)) last = i;
  }
  return last;
}

// Note [Overlapped offload]: whether a layout is non-overlapping and dense (by
// the dims' hints), so that a buffer with the same strides holds exactly the
// tensor's elements. Only such values move on the side stream.
bool DenseLayout(const TensorFacts& t) {
  if (t.shape.size() != t.stride.size()) return false;
  std::vector<size_t> dims;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d].hint == 0) return true;  // no elements
    if (t.shape[d].hint != 1) dims.push_back(d);
  }
  std::stable_sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return t.stride[a].hint < t.stride[b].hint; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (t.stride[d].hint != expected) return false;
    expected *= t.shape[d].hint;
  }
  return true;
}

bool IsAsyncTransfer(const Node& n) {
  return n.isCallFunction() && (n.target() == kAsyncOffload || n.target() == kAsyncReload);
}

bool IsAsyncTransferOp(const Node& n) { return IsAsyncTransfer(n) || (n.isCallFunction() && n.target() == kAsyncWait); }

double TransferSeconds(int64_t bytes, const OffloadOptions& options) {
  return static_cast<double>(bytes) / options.link_bytes_per_second;
}

// The estimated compute done before each node of g runs (one entry more than
// g has nodes; never decreasing). Transfers and waits compute nothing.
std::vector<double> ComputeDoneBefore(const Graph& g, const OffloadOptions& options) {
  const auto& nodes = g.nodes();
  std::vector<double> before(nodes.size() + 1, 0);
  for (size_t i = 0; i < nodes.size(); ++i)
    before[i + 1] = before[i] + (IsAsyncTransferOp(*nodes[i]) ? 0 : EstimatedSeconds(*nodes[i], options));
  return before;
}

// 0 .. n-1, ordered by key(i) (stable: ties keep index order).
template <typename Key>
std::vector<size_t> IndicesOrderedBy(size_t n, Key key) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  return order;
}

// Note [Overlapped offload]: where the backward issues each reload. The side
// stream runs the reloads one after another in issue order, so they are
// issued in the order their values are first used (a value needed early never
// queues behind one needed later), each as late as lets it and every later
// one finish by their first uses: from the last-needed back, a reload must
// start by min(its first use, the next reload's start) minus its transfer
// time, and is issued at the last node before which the estimated compute
// reaches that start (the first node after the placeholders at the earliest).
// `in_use_order` lists the entries by first use. Returns the issue points,
// indexed like `first_uses`, for the async entries.
std::vector<Node*> PrefetchPoints(const Graph& bw, const std::vector<Node*>& first_uses,
                                  const std::vector<size_t>& in_use_order, const std::vector<int64_t>& bytes,
                                  const std::vector<bool>& async, const OffloadOptions& options) {
  const auto& nodes = bw.nodes();
  const std::vector<double> before = ComputeDoneBefore(bw, options);
  std::vector<size_t> order;
  for (size_t k : in_use_order)
    if (async[k]) order.push_back(k);
  std::vector<Node*> points(first_uses.size(), nullptr);
  const size_t first_op = bw.placeholders().size();
  double next_start = std::numeric_limits<double>::infinity();
  size_t next_issue = nodes.size() - 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t use = first_uses[*it]->index();
    const double start = std::min(before[use], next_start) - TransferSeconds(bytes[*it], options);
    // The last node at or before the first use (and no later than the next
    // reload's issue point, keeping the issue order) whose compute-done
    // figure is at most `start`.
    const size_t limit = std::min(use, next_issue);
    size_t at = static_cast<size_t>(std::upper_bound(before.begin() + static_cast<std::ptrdiff_t>(first_op),
                                                     before.begin() + static_cast<std::ptrdiff_t>(limit) + 1, start) -
                                    before.begin());
    at = at > first_op ? at - 1 : first_op;
    points[*it] = nodes[at].get();
    next_start = start;
    next_issue = at;
  }
  return points;
}

// Note [Overlapped offload]: each forward wait moves from right after its
// value's last use to the first node by which the estimated compute since the
// transfer's start covers it, the side stream running the transfers one after
// another in start order; the value stays on the device until then, which the
// simulated peak (and so the budget) sees.
void SinkForwardWaits(const Graph& fw, const std::vector<SavedValue*>& todo, const std::vector<OffloadTarget>& moves,
                      const std::vector<Node*>& starts, std::vector<Node*>& anchors, const OffloadOptions& options) {
  const auto& nodes = fw.nodes();
  const std::vector<double> before = ComputeDoneBefore(fw, options);
  double side_stream_free = 0;
  for (size_t k : IndicesOrderedBy(todo.size(), [&](size_t i) { return starts[i]->index(); })) {
    if (moves[k] != OffloadTarget::kTorchAsync) continue;  // synchronous: at the anchor
    const double begin = std::max(before[starts[k]->index()], side_stream_free);
    side_stream_free = begin + TransferSeconds(StorageBytes(todo[k]->facts.tensor), options);
    // `before` never decreases: the first node at or after the anchor whose
    // compute-done figure reaches the transfer's end, the output at the latest.
    const size_t output = fw.outputNode()->index();
    const auto from = before.begin() + static_cast<std::ptrdiff_t>(anchors[k]->index());
    const auto to = before.begin() + static_cast<std::ptrdiff_t>(output);
    const size_t at = static_cast<size_t>(std::lower_bound(from, to, side_stream_free) - before.begin());
    anchors[k] = nodes[at].get();
  }
}

double ExposedInGraph(const Graph& g, const OffloadOptions& options) {
  double now = 0, side_stream_free = 0, stalled = 0;
  std::vector<double> done(g.size(), 0);
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    if (IsAsyncTransfer(n)) {
      const double start = std::max(now, side_stream_free);
      side_stream_free = start + TransferSeconds(StorageBytes(n.val().tensor), options);
      done[n.index()] = side_stream_free;
    } else if (n.isCallFunction() && n.target() == kDevicePut) {
      // a synchronous transfer (a value torch_async moves on the compute
      // stream): the compute waits for all of it, after the side stream's queue
      const double start = std::max(now, side_stream_free);
      const double end = start + TransferSeconds(StorageBytes(n.val().tensor), options);
      stalled += end - now;
      now = end;
    } else if (n.isCallFunction() && n.target() == kAsyncWait) {
      const Node* transfer = n.args().empty() || !n.args()[0].is_node() ? nullptr : n.args()[0].node;
      if (transfer && done[transfer->index()] > now) {
        stalled += done[transfer->index()] - now;
        now = done[transfer->index()];
      }
    } else {
      now += EstimatedSeconds(n, options);
    }
  }
  return stalled;
}

}  // namespace

Expected<bool> EmitOffload(Partition& p, const OffloadOptions& options) {
  const OffloadTarget target = options.target;
  const bool async = target == OffloadTarget::kTorchAsync;
  Graph& fw = *p.forward;
  Graph& bw = *p.backward;
  std::vector<SavedValue*> todo;
  for (SavedValue& s : p.signature.saved) {
    if (!s.offloaded) continue;
    const std::string where = fmt::format("saved value '{}'", s.name);
    if (s.kind != SavedValue::Kind::kTensor || !s.facts.is_tensor())
      return Status::BadInput("only tensors can be offloaded to host", where);
    Node* produced = fw.outputValues().at(static_cast<size_t>(s.forward_output_index));
    if (produced && produced->name() == s.graphName()) continue;  // already emitted
    if (!produced || produced->name() != s.deviceName())
      return Status::Internal(fmt::format("forward output {} is not '{}'", s.forward_output_index, s.deviceName()),
                              where);
    if (fw.findNode(s.graphName()) || bw.findNode(s.graphName()))
      return Status::BadInput(fmt::format("cannot name its host copy '{}': the name is taken", s.graphName()), where);
    todo.push_back(&s);
  }
  if (todo.empty()) return false;
  // Per value, its transfers: torch_async moves a value on the side stream only
  // if its layout is dense (DenseLayout), any other synchronously, as the torch
  // target does (prims.device_put keeps the layout).
  std::vector<OffloadTarget> moves;
  for (const SavedValue* s : todo) {
    moves.push_back(async && !DenseLayout(s->facts.tensor) ? OffloadTarget::kTorch : target);
    if (moves.back() != OffloadTarget::kTorchAsync) continue;
    for (const std::string& name : {s->name + "_to_host", s->name + "_from_host"})
      if (fw.findNode(name) || bw.findNode(name))
        return Status::BadInput(fmt::format("cannot name its transfer '{}': the name is taken", name),
                                fmt::format("saved value '{}'", s->name));
  }
  for (OffloadTarget used : {OffloadTarget::kTorch, OffloadTarget::kXla, OffloadTarget::kTorchAsync})
    if (std::find(moves.begin(), moves.end(), used) != moves.end()) {
      RegisterTransferOps(fw, used);
      RegisterTransferOps(bw, used);
    }

  // Forward: anchors first (the node after each value's last use and its last
  // in-place update; with torch_async also the node after the value itself, or
  // after that update), then the copies, so that copies sharing an anchor come
  // in signature order.
  Node* fw_output = fw.outputNode();
  std::vector<Node*> anchors, starts;
  for (SavedValue* s : todo) {
    Node* value = fw.findNode(s->deviceName());
    // Never between placeholders: the copy of an input goes after the last one.
    size_t defined = value->index();
    if (const size_t num_inputs = fw.placeholders().size(); num_inputs > 0) defined = std::max(defined, num_inputs - 1);
    const size_t updated = std::max(defined, LastInPlaceUpdate(fw, value));
    size_t last = updated;
    for (Node* user : value->users())
      if (user != fw_output) last = std::max(last, user->index());
    anchors.push_back(fw.nodes()[last + 1].get());
    starts.push_back(fw.nodes()[updated + 1].get());
  }
  if (async) SinkForwardWaits(fw, todo, moves, starts, anchors, options);
  for (size_t k = 0; k < todo.size(); ++k) {
    const SavedValue& s = *todo[k];
    Node* value = fw.findNode(s.deviceName());  // the snapshot, if any (Note [Snapshots of mutated inputs])
    Transfer t = ToHost(moves[k]);
    std::vector<Argument> args = {Argument::NodeRef(value)};
    args.insert(args.end(), t.extra_args.begin(), t.extra_args.end());
    Node* host = nullptr;
    if (moves[k] == OffloadTarget::kTorchAsync) {
      Node* copy = fw.createNodeBefore(starts[k], OpKind::kCallFunction, s.name + "_to_host", t.target,
                                       std::move(args), std::move(t.kwargs));
      copy->val() = HostFacts(value->val(), target);
      host = fw.createNodeBefore(anchors[k], OpKind::kCallFunction, s.graphName(), kAsyncWait,
                                 {Argument::NodeRef(copy)}, {{"keepalive", Argument::NodeRef(value)}});
    } else {
      host = fw.createNodeBefore(anchors[k], OpKind::kCallFunction, s.graphName(), t.target, std::move(args),
                                 std::move(t.kwargs));
    }
    host->val() = HostFacts(value->val(), target);
    std::vector<Argument> outputs = fw_output->args()[0].list;
    outputs[static_cast<size_t>(s.forward_output_index)] = Argument::NodeRef(host);
    fw.setInputs(fw_output, {Argument::List(std::move(outputs))});
  }

  // Backward: the placeholder becomes the host copy; the reload takes the joint
  // name right before the first use (with torch_async the wait does, and the
  // reload is issued at its prefetch point, found on the backward as it was).
  std::vector<Node*> first_uses;
  std::vector<int64_t> bytes;
  std::vector<bool> on_side_stream;
  for (size_t k = 0; k < todo.size(); ++k) {
    Node* placeholder = bw.placeholders().at(static_cast<size_t>(todo[k]->backward_input_index));
    Node* first_use = bw.outputNode();
    for (Node* user : placeholder->users())
      if (user->index() < first_use->index()) first_use = user;
    first_uses.push_back(first_use);
    bytes.push_back(StorageBytes(placeholder->val().tensor));
    on_side_stream.push_back(moves[k] == OffloadTarget::kTorchAsync);
  }
  // In first-use order, so that reloads issued before one node queue in the
  // order they are needed.
  const std::vector<size_t> in_use_order =
      IndicesOrderedBy(todo.size(), [&](size_t i) { return first_uses[i]->index(); });
  const std::vector<Node*> prefetches = PrefetchPoints(bw, first_uses, in_use_order, bytes, on_side_stream, options);
  for (size_t k : in_use_order) {
    const SavedValue* s = todo[k];
    Node* placeholder = bw.placeholders().at(static_cast<size_t>(s->backward_input_index));
    const ValueFacts device_facts = placeholder->val();
    bw.renameNode(placeholder, s->graphName());
    placeholder->val() = HostFacts(device_facts, target);
    Transfer t = ToDevice(device_facts, moves[k]);
    std::vector<Argument> args = {Argument::NodeRef(placeholder)};
    args.insert(args.end(), t.extra_args.begin(), t.extra_args.end());
    if (moves[k] == OffloadTarget::kTorchAsync) {
      // Made without inputs, so that taking over the placeholder's uses leaves them be.
      Node* copy = bw.createNodeBefore(prefetches[k], OpKind::kCallFunction, s->name + "_from_host", t.target);
      copy->val() = device_facts;
      Node* reloaded = bw.createNodeBefore(first_uses[k], OpKind::kCallFunction, s->name, kAsyncWait);
      reloaded->val() = device_facts;
      reloaded->meta() = placeholder->meta();
      bw.replaceAllUsesWith(placeholder, reloaded);
      bw.setInputs(copy, std::move(args), std::move(t.kwargs));
      bw.setInputs(reloaded, {Argument::NodeRef(copy)}, {{"keepalive", Argument::NodeRef(placeholder)}});
      continue;
    }
    Node* reload = bw.createNodeBefore(first_uses[k], OpKind::kCallFunction, s->name, t.target);
    reload->val() = device_facts;
    reload->meta() = placeholder->meta();
    bw.replaceAllUsesWith(placeholder, reload);
    bw.setInputs(reload, std::move(args), std::move(t.kwargs));
  }
  Status check = CheckSignature(fw, bw, p.signature);
  if (!check.ok()) return Status::Internal("offload broke the signature: " + check.ToString());
  return true;
}

double EstimatedSeconds(const Node& n, const OffloadOptions& options) {
  // RecomputeCost is flops plus flops_per_byte times the bytes moved: at 0 it
  // is the flops, and the bytes are what 1 adds.
  const double flops = RecomputeCost(n, 0);
  const double bytes = RecomputeCost(n, 1) - flops;
  return flops / options.device_flops_per_second + bytes / options.device_bytes_per_second;
}

double ExposedTransferSeconds(const Partition& p, const OffloadOptions& options) {
  if (options.target != OffloadTarget::kTorchAsync) return 0;
  return ExposedInGraph(*p.forward, options) + ExposedInGraph(*p.backward, options);
}

}  // namespace fxremat
