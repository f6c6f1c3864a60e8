// Classifies a joint graph's nodes the way the reference's classify_nodes does
// (torch/_functorch/partitioners.py): which nodes the forward outputs need
// (computable from primals alone), and which depend on tangents or must run in
// the backward.
#include <algorithm>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "fxremat/phases.h"
#include "fxremat/partition.h"
#include "partition_internal.h"

namespace fxremat {

bool MustBeInBackward(const Node& n) {
  if (n.meta().partitioner_tag == PartitionerTag::kMustBeInBackward) return true;
  const OpInfo* info = n.opInfo();
  bool is_mutable = info && info->hasSchema() && info->schema.isMutable();
  return n.meta().partitioner_tag == PartitionerTag::kIsBackward && is_mutable;
}

// Note [Bodies that return their inputs]
// AOTAutograd partitions an invoke_subgraph (torch.compiler.nested_compile_
// region) body itself: its forward body returns what its backward body reads,
// which includes the body's own inputs (a LayerNorm weight for the layer's
// backward) as outputs -- aliases of the call's operands. In the forward they
// are saved, never freed. Recomputed in the backward, the call's results are
// buffers the backward frees after their last use, and Inductor then reused
// one for its next result: it wrote into the parameter (a 3-block model under
// dots_saveable or budget 0.0: four parameters changed by up to 1.0 in one
// step; found by a bug hunt). PyTorch's min cut never recomputes the call
// (a non-builtin op). Such a call stays in the forward and its results are
// saved, whatever a policy or budget prefers.
bool HopReturnsItsInputs(const Node& n) {
  if (!n.isCallFunction() || !n.target().starts_with("higher_order.") || n.args().empty() || !n.args()[0].is_node())
    return false;
  const Graph* owner = n.owningGraph();
  const Graph* body = owner ? owner->subgraphOf(*n.args()[0].node) : nullptr;
  if (body == nullptr) return false;
  for (const Node* out : body->outputValues()) {
    // Through views to what they view.
    for (int hops = 0; out != nullptr && hops < 64 && !out->isPlaceholder(); ++hops) {
      if (!out->isCallFunction() || out->args().empty() || !out->args()[0].is_node() || !IsViewOp(*out)) break;
      out = out->args()[0].node;
    }
    if (out != nullptr && out->isPlaceholder()) return true;
  }
  return false;
}

bool MustBeInForward(const Node& n) {
  if (n.meta().partitioner_tag == PartitionerTag::kMustBeInForward) return true;
  // Only a call AOTAutograd traced in the forward (tagged is_forward): an
  // untagged one may read tangents (a backward body returns a tangent as the
  // gradient of an input it passes through), and must then run in the backward.
  if (n.meta().partitioner_tag == PartitionerTag::kIsForward && HopReturnsItsInputs(n)) return true;
  const OpInfo* info = n.opInfo();
  bool is_mutable = info && info->hasSchema() && info->schema.isMutable();
  return n.meta().partitioner_tag != PartitionerTag::kIsBackward && n.meta().partitioner_tag != PartitionerTag::kMustBeInBackward &&
         is_mutable;
}

bool IsSymNode(const Node& n) { return n.val().is_sym(); }

bool MustRecompute(const Node& n) {
  return n.meta().recompute == Decision::kMustRecompute || n.meta().recompute == Decision::kPreferRecompute;
}

namespace {

// Note [Attention without dropout]
// The fused attention ops (_scaled_dot_product_*_attention*) carry the
// nondeterministic_seeded tag for their dropout. With dropout_p a constant 0
// (the default, and every inference-style or dropout-free model) they draw no
// random numbers and replay exactly, so they are recomputable like any other
// compute-intensive op; with dropout they stay random.
bool DrawsNoRandomNumbers(const Node& n, const OpInfo& info) {
  if (!info.hasSchema()) return false;
  const int k = info.schema.argumentIndex("dropout_p");
  if (k < 0) return false;
  const SchemaArgument& arg = info.schema.arguments[static_cast<size_t>(k)];
  const Argument* a = nullptr;
  if (static_cast<size_t>(k) < n.args().size() && !arg.kwarg_only) a = &n.args()[static_cast<size_t>(k)];
  else a = n.kwarg("dropout_p");
  if (!a) return arg.default_value && (*arg.default_value == "0.0" || *arg.default_value == "0" || *arg.default_value == "0.");
  if (a->kind == Argument::Kind::kDouble) return a->double_value == 0.0;
  if (a->kind == Argument::Kind::kInt) return a->int_value == 0;
  return false;
}

}  // namespace

bool IsRandomOp(const Node& n) {
  if (!n.isCallFunction()) return false;
  if (InDefaultRandomOps(PacketOf(n.target()))) return true;
  const OpInfo* info = n.opInfo();
  return info && info->hasTag("nondeterministic_seeded") && !DrawsNoRandomNumbers(n, *info);
}

std::string RandomOpDevice(const Node& n) {
  const ValueFacts* tensor = nullptr;
  std::vector<const ValueFacts*> stack = {&n.val()};
  while (!stack.empty() && !tensor) {
    const ValueFacts* v = stack.back();
    stack.pop_back();
    if (v->is_tensor()) tensor = v;
    for (auto it = v->items.rbegin(); it != v->items.rend(); ++it) stack.push_back(&*it);
  }
  if (!tensor) return "";
  const std::string& device = tensor->tensor.device;
  return device.substr(0, device.find(':'));
}

bool RandomOpReplayable(const Node& n) {
  if (!IsRandomOp(n)) return false;
  const std::string device = RandomOpDevice(n);
  return device == "cpu" || device == "cuda";
}

std::string UnreplayableReason(const Node& n) {
  return fmt::format("its device ('{}') has no generator state fxremat can replay (cpu, cuda)", RandomOpDevice(n));
}

bool RandomOpMustBeSaved(const Node& n) {
  const Node* op = n.isGetItem() && !n.inputs().empty() ? n.inputs()[0] : &n;
  if (!IsRandomOp(*op)) return false;
  return !MustRecompute(*op) || !RandomOpReplayable(*op);
}

bool IsViewOp(const Node& n) {
  const OpInfo* info = n.isCallFunction() ? n.opInfo() : nullptr;
  return info && info->hasSchema() && info->schema.returnsAlias() && !info->schema.isMutable();
}

bool IsAssertOnlySymBool(const Node& n) {
  return n.val().kind == ValueFacts::Kind::kSymBool && !n.users().empty() &&
         std::all_of(n.users().begin(), n.users().end(),
                     [](const Node* u) { return u->target() == "aten._assert_scalar.default"; });
}

Expected<bool> HasRecomputableOps(const Graph& graph) {
  ScopedPhase phase("has-recomputable-ops");
  bool found = false;
  for (const auto& up : graph.nodes()) {
    if (!MustRecompute(*up)) continue;
    found = true;
    // PREFER_RECOMPUTE on a random op is a weight, not a demand: the min cut
    // saves one it cannot replay (Note [Policy demands in the cut]).
    if (up->meta().recompute == Decision::kMustRecompute && IsRandomOp(*up) && !RandomOpReplayable(*up))
      return Status::BadInput(
          fmt::format("the random op {} is marked {}: recomputing it in the backward would draw different random "
                      "numbers, and {}",
                      up->target(), DecisionName(up->meta().recompute), UnreplayableReason(*up)),
          fmt::format("node '{}'", up->name()));
  }
  return found;
}

Expected<JointClassification> ClassifyJoint(const Graph& joint) {
  ScopedPhase phase("classify");
  if (joint.kind() != GraphKind::kJoint)
    return Status::BadInput(fmt::format("expected a joint graph, got a {} graph", GraphKindName(joint.kind())));
  JointClassification c;
  for (Node* p : joint.placeholders()) {
    switch (p->role()) {
      case PlaceholderRole::kPrimal: c.primals.push_back(p); break;
      case PlaceholderRole::kTangent: c.tangents.push_back(p); break;
      case PlaceholderRole::kFwdRng: c.fwd_rng.push_back(p); break;
      case PlaceholderRole::kBwdRng: c.bwd_rng.push_back(p); break;
      default:
        return Status::BadInput(fmt::format("placeholder role '{}' has no place in a joint graph",
                                            PlaceholderRoleName(p->role())),
                                fmt::format("node '{}'", p->name()));
    }
  }
  std::vector<Node*> outputs = joint.outputValues();
  const size_t num_fwd = static_cast<size_t>(joint.joint().num_fwd_outputs);
  c.forward_outputs.assign(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(num_fwd));
  c.backward_outputs.assign(outputs.begin() + static_cast<std::ptrdiff_t>(num_fwd), outputs.end());

  const size_t n = joint.size();
  // Forward-computable: valid when extracting the forward from primals.
  std::vector<bool>& computable = c.forward_computable;
  computable.assign(n, false);
  c.in_tangents_closure.assign(n, false);
  for (const auto& up : joint.nodes()) {
    const Node& node = *up;
    const size_t i = node.index();
    if (node.role() == PlaceholderRole::kTangent || MustBeInBackward(node)) c.in_tangents_closure[i] = true;
    for (Node* input : node.inputs())
      if (c.in_tangents_closure[input->index()] && !node.isOutput()) c.in_tangents_closure[i] = true;
    if (node.isPlaceholder()) {
      computable[i] = node.role() == PlaceholderRole::kPrimal || node.role() == PlaceholderRole::kFwdRng;
    } else if (node.isCallFunction() || node.op() == OpKind::kGetAttr) {
      bool ok = !MustBeInBackward(node);
      for (Node* input : node.inputs()) ok = ok && computable[input->index()];
      computable[i] = ok;
    }
  }
  // Needed by the forward outputs: a backwards walk over computable nodes.
  c.required_by_forward.assign(n, false);
  std::vector<Node*> stack;
  for (Node* o : c.forward_outputs)
    if (o && computable[o->index()]) stack.push_back(o);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (c.required_by_forward[node->index()]) continue;
    c.required_by_forward[node->index()] = true;
    for (Node* input : node->inputs()) stack.push_back(input);
  }
  // Primals are inputs of the forward graph whether or not they are used.
  for (Node* p : c.primals) c.required_by_forward[p->index()] = true;
  for (Node* p : c.fwd_rng) c.required_by_forward[p->index()] = true;
  c.sides = ClassifySides(joint);
  return c;
}

}  // namespace fxremat
