// Builds forward and backward graphs from a joint graph and a list of saved
// values, the way the reference's _extract_fwd_bwd_modules does, and the
// Signature that states every position (Note [AOTAutograd runtime contract]).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <cassert>
#include <exception>
#include <optional>
#include <system_error>
#include <thread>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "fxremat/phases.h"
#include "fxremat/partition.h"
#include "partition_internal.h"
#include "passes/order_saved_values.h"
#include "passes/protect_mutations.h"

namespace fxremat {

bool IsAnnotationOp(std::string_view target) {
  return target == "xla.name_tensor.default" || target == "xla.offload_name.default" ||
         target == "fxremat.checkpoint_name.default";
}

// FX's notion (Node.is_impure) with random ops pure, as eliminate_dead_code
// runs inside torch.compile's tracing context (Inductor's fallback_random off).
bool IsImpure(const Node& n) { return n.isCallFunction() && IsFxImpure(n, /*impure_random=*/false); }

void MarkOffloadedValues(Partition& p, const std::vector<Node*>& values) {
  if (values.empty()) return;
  std::unordered_set<std::string_view> names;
  for (const Node* n : values) names.insert(n->name());
  for (SavedValue& v : p.signature.saved) v.offloaded = v.offloaded || names.count(v.name) > 0;
}

Node* ReplaceNode(Graph& g, Node* old, Node* anchor, std::string target, std::vector<Argument> args, Kwargs kwargs) {
  const std::string name = old->name();
  Node* made = g.createNodeBefore(anchor, OpKind::kCallFunction, g.uniqueName(name + "_replaced"), std::move(target),
                                  std::move(args), std::move(kwargs));
  made->val() = old->val();
  made->meta() = old->meta();
  g.replaceAllUsesWith(old, made);
  g.eraseNode(old);
  g.renameNode(made, name);
  return made;
}

std::string AnnotationName(const Node& n) {
  auto name_of = [](const Node& op) -> std::string {
    if (op.args().size() >= 2 && op.args()[1].kind == Argument::Kind::kString) return op.args()[1].text;
    if (const Argument* a = op.kwarg("name"); a && a->kind == Argument::Kind::kString) return a->text;
    return {};
  };
  if (n.isCallFunction() && IsAnnotationOp(n.target())) return name_of(n);
  for (Node* user : n.users())
    if (user->isCallFunction() && IsAnnotationOp(user->target()) && !user->args().empty() &&
        user->args()[0].is_node() && user->args()[0].node == &n)
      return name_of(*user);
  return {};
}

void EnsureOpFacts(Graph& g, const std::string& target, const std::string& schema,
                   std::vector<std::string> tags, std::vector<std::string> packet_tags) {
  if (g.ops().count(target)) return;
  Expected<OpInfo> info = MakeOpInfo(target, schema, std::move(tags));
  assert(info.ok() && "EnsureOpFacts: a built-in schema does not parse");
  info->packet_tags = std::move(packet_tags);
  g.ops().emplace(target, std::move(info).value());
}

std::string OriginLocation(std::string_view stack_trace) {
  // The innermost frame is the last `File "X", line N, in F` line.
  constexpr std::string_view kFile = "File \"";
  size_t at = stack_trace.rfind(kFile);
  if (at == std::string_view::npos) return {};
  std::string_view rest = stack_trace.substr(at + kFile.size());
  size_t quote = rest.find('"');
  if (quote == std::string_view::npos) return {};
  std::string_view file = rest.substr(0, quote);
  if (size_t slash = file.rfind('/'); slash != std::string_view::npos) file.remove_prefix(slash + 1);
  rest.remove_prefix(quote + 1);
  std::string_view line_number, function;
  if (rest.substr(0, 7) == ", line ") {
    rest.remove_prefix(7);
    size_t digits = 0;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    line_number = rest.substr(0, digits);
    rest.remove_prefix(digits);
  }
  if (rest.substr(0, 5) == ", in ") {
    rest.remove_prefix(5);
    size_t end = rest.find_first_of("\r\n");
    function = rest.substr(0, end);
    while (!function.empty() && function.back() == ' ') function.remove_suffix(1);
  }
  std::string out(file);
  if (!line_number.empty()) out += fmt::format(":{}", line_number);
  if (!function.empty()) out += fmt::format(" ({})", function);
  return out;
}

// Which joint nodes the extracted graph keeps: `valid` nodes are computable
// from the inputs (every argument valid, not pinned to the other side);
// `live` ones are valid and needed by an output or side-effecting. Mirrors
// copy-then-eliminate-dead-code without building the dead nodes.
struct SubgraphPlan {
  std::vector<uint8_t> is_input, valid, live;  // bytes, not vector<bool>: read in the hot loops
};

bool IsEffectToken(const Node& n) {
  constexpr std::string_view kWithEffects = "higher_order.with_effects";
  for (const Node* u : n.users())
    if (u->isCallFunction() && u->target() == kWithEffects && !u->args().empty() && u->args()[0].is_node() &&
        u->args()[0].node == &n)
      return true;
  if (!n.isGetItem() || n.args().size() < 2 || !n.args()[0].is_node()) return false;
  const Node* tuple = n.args()[0].node;
  return tuple->isCallFunction() && tuple->target() == kWithEffects && n.args()[1].kind == Argument::Kind::kInt &&
         n.args()[1].int_value == 0;
}

NodeSides ClassifySides(const Graph& joint) {
  NodeSides sides;
  sides.forward_only.assign(joint.size(), false);
  sides.backward_only.assign(joint.size(), false);
  sides.impure.assign(joint.size(), false);
  PerTarget<bool> impure;  // Note [Facts per target]
  for (const auto& up : joint.nodes()) {
    sides.forward_only[up->index()] = MustBeInForward(*up);
    sides.backward_only[up->index()] = MustBeInBackward(*up);
    if (up->isCallFunction()) sides.impure[up->index()] = impure.get(*up, IsImpure);
  }
  return sides;
}

Expected<SubgraphPlan> PlanSubgraph(const Graph& joint, const std::vector<Node*>& inputs,
                                    const std::vector<Node*>& outputs, Subgraph which, const NodeSides& sides) {
  const std::vector<bool>& elsewhere = which == Subgraph::kForward ? sides.backward_only : sides.forward_only;
  const size_t n = joint.size();
  SubgraphPlan plan;
  plan.is_input.assign(n, false);
  plan.valid.assign(n, false);
  plan.live.assign(n, false);
  for (Node* in : inputs) plan.is_input[in->index()] = plan.valid[in->index()] = true;
  for (const auto& up : joint.nodes()) {
    const Node& node = *up;
    const size_t i = node.index();
    if (plan.is_input[i] || node.isPlaceholder() || node.isOutput()) continue;
    if (elsewhere[i]) continue;
    bool ok = true;
    for (Node* input : node.inputs())
      if (!plan.valid[input->index()]) { ok = false; break; }
    plan.valid[i] = ok;
  }
  for (Node* o : outputs) {
    if (!o) continue;
    if (!plan.valid[o->index()]) {
      // Name the first value on the way that nothing provides: an invalid node
      // whose own inputs are all valid (a placeholder that is not an input, or a
      // node pinned to the other graph).
      const Node* cause = o;
      for (bool descended = true; descended;) {
        descended = false;
        for (const Node* in : cause->inputs())
          if (!plan.valid[in->index()]) {
            cause = in;
            descended = true;
            break;
          }
      }
      const char* graph = which == Subgraph::kForward ? "forward" : "backward";
      std::string why;
      if (cause != o)
        why = fmt::format(" ('{}' is neither an input of the {} graph nor computable there{})", cause->name(), graph,
                          elsewhere[cause->index()] ? ": it must run in the other graph" : "");
      else if (elsewhere[o->index()])
        why = " (it must run in the other graph)";
      return Status::BadInput(
          fmt::format("'{}' is an output of the {} graph but cannot be computed from its inputs{}", o->name(), graph,
                      why),
          fmt::format("node '{}'", o->name()));
    }
    plan.live[o->index()] = true;
  }
  for (size_t i = n; i-- > 0;) {
    const Node& node = *joint.nodes()[i];
    if (!plan.valid[i]) continue;
    bool keep = plan.live[i] || sides.impure[i];
    // An input does not read its joint-graph arguments: it becomes a placeholder.
    for (size_t u = 0, m = node.users().size(); u < m && !keep; ++u) {
      const size_t j = node.users()[u]->index();
      keep = plan.live[j] && !plan.is_input[j];
    }
    plan.live[i] = keep;
  }
  return plan;
}

namespace {

std::unique_ptr<Graph> BuildSubgraph(const Graph& joint, const std::vector<Node*>& inputs,
                                     const std::vector<PlaceholderRole>& input_roles,
                                     const std::vector<Node*>& outputs, Subgraph which, const SubgraphPlan& plan,
                                     bool share_op_facts);

}  // namespace

Expected<std::unique_ptr<Graph>> ExtractSubgraph(const Graph& joint, const std::vector<Node*>& inputs,
                                                 const std::vector<PlaceholderRole>& input_roles,
                                                 const std::vector<Node*>& outputs, Subgraph which,
                                                 const NodeSides& sides, bool share_op_facts) {
  FXREMAT_ASSIGN_OR_RETURN(SubgraphPlan plan, PlanSubgraph(joint, inputs, outputs, which, sides));
  return BuildSubgraph(joint, inputs, input_roles, outputs, which, plan, share_op_facts);
}

namespace {

std::unique_ptr<Graph> BuildSubgraph(const Graph& joint, const std::vector<Node*>& inputs,
                                     const std::vector<PlaceholderRole>& input_roles,
                                     const std::vector<Node*>& outputs, Subgraph which, const SubgraphPlan& plan,
                                     bool share_op_facts) {
  auto g = std::make_unique<Graph>();
  g->reserve(static_cast<size_t>(std::count(plan.live.begin(), plan.live.end(), true)) + inputs.size() + 1);
  g->setName(joint.name());
  g->setKind(which == Subgraph::kForward ? GraphKind::kForward : GraphKind::kBackward);
  g->symbols() = joint.symbols();
  std::vector<Node*> env(joint.size(), nullptr);  // joint node index -> new node
  auto in_subgraph = [&env](Node* original) { return env[original->index()]; };
  for (size_t k = 0; k < inputs.size(); ++k) {
    Node* in = inputs[k];
    Node* p = g->createNode(OpKind::kPlaceholder, in->name(), in->name());
    p->val() = in->val();
    p->meta() = in->meta();
    p->setRole(input_roles[k]);
    if (in->isPlaceholder()) p->setPath(in->path());
    env[in->index()] = p;
  }
  // Every node of g is a joint node other than its output, under the same name:
  // "output" is free in g unless the joint has a non-output node so named
  // (found on this walk: asking the joint by name would build its name index).
  bool output_name_taken = false;
  for (const auto& up : joint.nodes()) {
    const Node& n = *up;
    output_name_taken = output_name_taken || (!n.isOutput() && n.name() == "output");
    if (plan.is_input[n.index()] || !plan.live[n.index()]) continue;
    std::vector<Argument> args;
    args.reserve(n.args().size());
    for (const Argument& a : n.args()) args.push_back(a.mapNodes(in_subgraph));
    Kwargs kwargs;
    for (const auto& [k, v] : n.kwargs()) kwargs.emplace_back(k, v.mapNodes(in_subgraph));
    Node* copy = g->createNodeLike(n, std::move(args), std::move(kwargs));
    copy->val() = n.val();
    copy->meta() = n.meta();
    if (which == Subgraph::kBackward) {
      // Note [No recompute tags in the backward]: the backward runs every node it
      // holds; a tag left on one asks a later pass to recompute it again. Compiled
      // autograd inlines this graph, and after a graph break its resumed frame goes
      // through AOTAutograd's forward-loss-backward remat, which refuses tagged random
      // ops ("does not support RNG ops in recompute regions"): an SDPA without dropout,
      // which fxremat recomputes (Note [Attention without dropout]) and PyTorch's min
      // cut never does, failed the step. The Python builder copies these graphs, so
      // the CLI and partition_fn emit the same untagged backward.
      copy->meta().recompute = Decision::kNone;
      if (copy->meta().rare().ac_graph_id) copy->meta().mutableRare().ac_graph_id.reset();
    }
    env[n.index()] = copy;
    if (const OpInfo* info = n.opInfo())  // copied once per target, or shared by a scratch graph
      copy->cacheOpInfo(share_op_facts ? info : &g->ops().try_emplace(info->target, *info).first->second);
    // A constant goes with every graph that reads it (the reference copies get_attr nodes into both).
    // So does a higher-order op's subgraph (Note [Higher-order ops]), shared.
    if (n.op() == OpKind::kGetAttr) {
      if (auto it = joint.constants().find(n.target()); it != joint.constants().end()) g->constants().insert(*it);
      if (auto it = joint.subgraphs().find(n.target()); it != joint.subgraphs().end()) g->subgraphs().insert(*it);
    }
  }
  std::vector<Argument> values;
  for (Node* o : outputs) values.push_back(o ? Argument::NodeRef(env[o->index()]) : Argument::None());
  g->createNode(OpKind::kOutput, output_name_taken ? g->uniqueName("output") : std::string("output"), "output",
                {Argument::List(std::move(values))});
  return g;
}

}  // namespace

Expected<Partition> ExtractPartition(const Graph& joint, const std::vector<Node*>& saved_values,
                                     const std::string& partitioner_name) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  return ExtractPartition(joint, c, saved_values, partitioner_name);
}

// Note [Saved values never alias each other]
// AOTAutograd donates to Inductor's backward every saved tensor that aliases
// no forward input, forward output or backward output (its donated buffers,
// torch/_functorch/_aot_autograd/graph_compile.py): the backward may write
// over one once it has last read it. Two saved tensors sharing a storage (a
// value and a view of it) are both donated, and the backward overwrote the
// one while it still read the other: Falcon under Inductor at budget 0.3 got
// gradients off by 0.07 (its backward run eagerly on the same inputs was
// exact). For the budget solver's saved sets (ExtractOptions::
// save_shared_storages_once) a storage two or more saved values share is
// therefore saved once, as the value that allocated it (their root), and the
// backward recomputes the others from it: the same storage is kept, and views
// cost nothing to recompute. A storage of an input or of a forward output is
// left as it is (AOTAutograd donates none of it). The min cut and the default
// partition keep PyTorch's saved sets exactly, aliases included (its min cut
// saves a value's two transposes on random_0013, its default_partition a value
// and its detach): what PyTorch's own partitions risk there, they risk too.
namespace {

std::vector<Node*> SaveSharedStoragesOnce(const JointClassification& c, const std::vector<Node*>& saved_values) {
  auto root_of = [](Node* n) -> Node* {
    for (int steps = 0; steps < 4096; ++steps) {
      const Node* source = nullptr;
      if (!SharesStorage(*n, &source)) return n;
      if (!source) return nullptr;
      n = const_cast<Node*>(source);
    }
    return nullptr;
  };
  std::unordered_map<const Node*, int> sharing;  // root -> saved tensors on its storage
  std::vector<Node*> roots(saved_values.size(), nullptr);
  for (size_t i = 0; i < saved_values.size(); ++i) {
    Node* s = saved_values[i];
    if (!s->val().is_tensor() || !s->isCallFunction()) continue;
    Node* r = root_of(s);
    if (!r || !r->isCallFunction() || !r->val().is_tensor()) continue;
    roots[i] = r;
    ++sharing[r];
  }
  bool any = false;
  for (const auto& [root, count] : sharing) any = any || count > 1;
  if (!any) return saved_values;
  std::unordered_set<const Node*> user_visible;  // roots of the forward outputs
  for (Node* o : c.forward_outputs)
    if (o)
      if (Node* r = root_of(o)) user_visible.insert(r);
  // The symbolic sizes the views from a root to a value read (view(x, [s0, 16]))
  // must reach the backward too: saved with the root, unless a view reads a
  // tensor besides its source (then the value is saved as it is). A dynamic
  // shape's size may come from a tensor that nothing else saves
  // (sym_size(constant_pad_nd, 1) for a view of an addmm).
  auto view_scalars = [&](Node* s, Node* r, std::vector<Node*>& scalars) {
    for (Node* n = s; n && n != r;) {
      const Node* source = nullptr;
      if (!SharesStorage(*n, &source) || !source) return false;
      for (Node* in : n->inputs()) {
        if (in == source) continue;
        if (!IsSymNode(*in) && in->val().kind != ValueFacts::Kind::kConst) return false;
        scalars.push_back(in);
      }
      n = const_cast<Node*>(source);
    }
    return true;
  };
  std::vector<Node*> out;
  std::unordered_set<const Node*> added;
  for (size_t i = 0; i < saved_values.size(); ++i) {
    Node* s = saved_values[i];
    Node* r = roots[i];
    std::vector<Node*> scalars;
    const bool shared = r && sharing[r] > 1 && !user_visible.count(r) && view_scalars(s, r, scalars);
    Node* keep = shared ? r : s;
    if (added.insert(keep).second) out.push_back(keep);
    for (Node* scalar : scalars)
      if (added.insert(scalar).second) out.push_back(scalar);
  }
  return out;
}

}  // namespace

Expected<Partition> ExtractPartition(const Graph& joint, const JointClassification& c,
                                     const std::vector<Node*>& requested_saved_values,
                                     const std::string& partitioner_name, const ExtractOptions& options) {
  ScopedPhase phase("extract");
  const std::vector<Node*> saved_values = options.save_shared_storages_once
                                              ? SaveSharedStoragesOnce(c, requested_saved_values)
                                              : requested_saved_values;
  std::vector<Node*> saved_tensors, saved_syms;
  // Note [Opaque inputs] (fxremat/partition.h): opaque primals go to the
  // backward as inputs of their own, whatever the partitioner chose.
  std::vector<Node*> opaque_inputs;
  for (Node* p : c.primals)
    if (p->val().kind == ValueFacts::Kind::kOpaque) opaque_inputs.push_back(p);
  std::vector<bool> listed(joint.size(), false);
  for (Node* s : saved_values) {
    if (s->owningGraph() != &joint)
      return Status::Internal(fmt::format("saved value '{}' is not a node of the joint graph", s->name()));
    if (s->val().kind == ValueFacts::Kind::kOpaque && s->isPlaceholder()) continue;
    // Note [Effect tokens are never saved]: a token only orders effectful ops;
    // the backward's effects get a token of their own (tangents_token). Saved,
    // the token input is None at run time (AOTAutograd erases tokens) and an
    // intermediate token breaks Inductor's unlift_tokens, and saving one lets
    // the backward replay the effect it orders. The budget solver's saved sets
    // (which start from every input) named them (linalg.cholesky's error check).
    if (IsEffectToken(*s)) continue;
    // A Python scalar (an int input Dynamo specialized, read by the backward)
    // is saved with the symints, as the reference saves it and AOTAutograd's
    // runtime stashes it (on ctx, not through save_for_backward).
    const bool scalar = IsSymNode(*s) || s->val().kind == ValueFacts::Kind::kConst;
    if (!s->val().is_tensor() && !scalar)
      return Status::Internal(fmt::format("saved value '{}' is neither a tensor nor a symbolic scalar", s->name()));
    if (listed[s->index()]) return Status::Internal(fmt::format("saved value '{}' listed twice", s->name()));
    listed[s->index()] = true;
    (scalar ? saved_syms : saved_tensors).push_back(s);
  }

  auto backward_inputs = [&](std::vector<Node*>& inputs, std::vector<PlaceholderRole>& roles) {
    inputs.clear();
    roles.clear();
    for (Node* s : saved_syms) { inputs.push_back(s); roles.push_back(PlaceholderRole::kSaved); }
    for (Node* s : saved_tensors) { inputs.push_back(s); roles.push_back(PlaceholderRole::kSaved); }
    for (Node* t : c.tangents) { inputs.push_back(t); roles.push_back(PlaceholderRole::kTangent); }
    for (Node* r : c.bwd_rng) { inputs.push_back(r); roles.push_back(PlaceholderRole::kBwdRng); }
    for (Node* o : opaque_inputs) { inputs.push_back(o); roles.push_back(PlaceholderRole::kInput); }
  };
  std::vector<Node*> bw_inputs;
  std::vector<PlaceholderRole> bw_roles;
  backward_inputs(bw_inputs, bw_roles);
  const NodeSides& sides = c.sides;
  FXREMAT_ASSIGN_OR_RETURN(SubgraphPlan probe,
                           PlanSubgraph(joint, bw_inputs, c.backward_outputs, Subgraph::kBackward, sides));
  // Saved values the backward does not read are dropped, as the reference does.
  auto unused = [&](Node* s) {
    for (Node* user : s->users())
      if (probe.live[user->index()] && !probe.is_input[user->index()]) return false;
    for (Node* o : c.backward_outputs)
      if (o == s) return false;
    return true;
  };
  const size_t before_dropping = saved_tensors.size() + saved_syms.size() + opaque_inputs.size();
  saved_tensors.erase(std::remove_if(saved_tensors.begin(), saved_tensors.end(), unused), saved_tensors.end());
  saved_syms.erase(std::remove_if(saved_syms.begin(), saved_syms.end(), unused), saved_syms.end());
  opaque_inputs.erase(std::remove_if(opaque_inputs.begin(), opaque_inputs.end(), unused), opaque_inputs.end());
  // With nothing dropped the backward's inputs are the probe's (in another
  // order, which the plan does not depend on): its plan is the backward's.
  const bool probe_is_backward = saved_tensors.size() + saved_syms.size() + opaque_inputs.size() == before_dropping;
  // The order (and the symbol bindings) AOTAutograd's runtime expects.
  FXREMAT_ASSIGN_OR_RETURN(const bool bindings_changed, BindSavedSymbols(joint, c.tangents, saved_tensors, saved_syms));
  OrderNoVcCheckLast(saved_tensors);

  std::vector<Node*> fw_inputs;
  std::vector<PlaceholderRole> fw_roles;
  for (Node* p : c.primals) { fw_inputs.push_back(p); fw_roles.push_back(PlaceholderRole::kPrimal); }
  for (Node* r : c.fwd_rng) { fw_inputs.push_back(r); fw_roles.push_back(PlaceholderRole::kFwdRng); }
  std::vector<Node*> fw_outputs = c.forward_outputs;
  fw_outputs.insert(fw_outputs.end(), saved_tensors.begin(), saved_tensors.end());
  fw_outputs.insert(fw_outputs.end(), saved_syms.begin(), saved_syms.end());

  backward_inputs(bw_inputs, bw_roles);
  auto extract_forward = [&] {
    return ExtractSubgraph(joint, fw_inputs, fw_roles, fw_outputs, Subgraph::kForward, sides, options.scratch);
  };
  auto extract_backward = [&]() -> Expected<std::unique_ptr<Graph>> {
    if (probe_is_backward && !bindings_changed)
      return BuildSubgraph(joint, bw_inputs, bw_roles, c.backward_outputs, Subgraph::kBackward, probe, options.scratch);
    return ExtractSubgraph(joint, bw_inputs, bw_roles, c.backward_outputs, Subgraph::kBackward, sides,
                           options.scratch);
  };
  // The signature depends on the joint graph and the saved values alone, not
  // on the extracted graphs: the forward's thread fills it once the forward
  // is built (the backward, the larger side, is the longer of the two).
  Partition result;
  auto fill_signature = [&] {
    Signature& sig = result.signature;
    sig.partitioner = partitioner_name;
    sig.num_fwd_outputs = joint.joint().num_fwd_outputs;
    sig.forward_num_inputs = static_cast<int64_t>(fw_inputs.size());
    sig.forward_num_outputs = static_cast<int64_t>(fw_outputs.size());
    sig.backward_num_inputs = static_cast<int64_t>(bw_inputs.size());
    sig.backward_num_outputs = static_cast<int64_t>(c.backward_outputs.size());
    for (size_t i = 0; i < c.primals.size(); ++i) {
      PrimalEntry e;
      e.name = c.primals[i]->name();
      e.forward_input_index = static_cast<int64_t>(i);
      e.path = c.primals[i]->path();
      e.gradient_index = static_cast<int64_t>(i);
      e.has_gradient = c.backward_outputs[i] != nullptr;
      e.written_back_from = c.primals[i]->meta().rare().written_back_from;
      sig.primals.push_back(std::move(e));
    }
    for (size_t i = 0; i < c.forward_outputs.size(); ++i) {
      ForwardOutputEntry e;
      e.forward_output_index = static_cast<int64_t>(i);
      e.name = c.forward_outputs[i] ? c.forward_outputs[i]->name() : "";
      if (i < joint.joint().output_paths.size()) e.path = joint.joint().output_paths[i];
      sig.forward_outputs.push_back(std::move(e));
    }
    const int64_t num_fwd = sig.num_fwd_outputs;
    const int64_t num_syms = static_cast<int64_t>(saved_syms.size());
    const int64_t num_tensors = static_cast<int64_t>(saved_tensors.size());
    auto add_saved = [&](Node* s, SavedValue::Kind kind, int64_t fw_index, int64_t bw_index) {
      SavedValue v;
      v.name = s->name();
      v.kind = kind;
      v.names = s->meta().names;
      // A naming op the pipeline did not fold (a direct call of a partitioner).
      if (std::string legacy = AnnotationName(*s); !legacy.empty() &&
          std::find(v.names.begin(), v.names.end(), legacy) == v.names.end())
        v.names.push_back(legacy);
      if (!v.names.empty()) v.annotation = v.names.front();
      v.decision = std::string(DecisionName(s->meta().recompute));
      v.no_vc_check = kind == SavedValue::Kind::kTensor && s->meta().no_vc_check;
      v.origin_op = s->isCallFunction() ? s->target() : "";
      v.origin_location = OriginLocation(s->meta().stack_trace);
      v.forward_output_index = fw_index;
      v.backward_input_index = bw_index;
      v.facts = s->val();
      // Note [Size of a value]: a symint is no tensor bytes (it is counted apart).
      v.bytes = kind == SavedValue::Kind::kSymInt ? 0 : s->val().nbytes();
      sig.saved.push_back(std::move(v));
    };
    // Reserved: a SavedValue is copied, not moved, when the vector grows (its
    // ValueFacts member has no noexcept move), 111k of them at a million nodes.
    sig.saved.reserve(sig.saved.size() + saved_tensors.size() + saved_syms.size());
    for (int64_t k = 0; k < num_tensors; ++k)
      add_saved(saved_tensors[static_cast<size_t>(k)], SavedValue::Kind::kTensor, num_fwd + k, num_syms + k);
    for (int64_t k = 0; k < num_syms; ++k)
      add_saved(saved_syms[static_cast<size_t>(k)], SavedValue::Kind::kSymInt, num_fwd + num_tensors + k, k);
    for (size_t t = 0; t < c.tangents.size(); ++t) {
      TangentEntry e;
      e.name = c.tangents[t]->name();
      e.backward_input_index = num_syms + num_tensors + static_cast<int64_t>(t);
      e.forward_output_index = t < joint.joint().tangent_outputs.size() ? joint.joint().tangent_outputs[t] : -1;
      sig.tangents.push_back(std::move(e));
    }
    for (size_t k = 0; k < opaque_inputs.size(); ++k) {
      OpaqueInputEntry e;
      e.name = opaque_inputs[k]->name();
      e.forward_input_index = static_cast<int64_t>(
          std::find(c.primals.begin(), c.primals.end(), opaque_inputs[k]) - c.primals.begin());
      e.backward_input_index =
          num_syms + num_tensors + static_cast<int64_t>(c.tangents.size() + c.bwd_rng.size() + k);
      e.type = opaque_inputs[k]->val().expr;
      sig.opaque_inputs.push_back(std::move(e));
    }
  };
  // Note [Extracting both sides at once]: the forward and the backward are
  // built from the joint graph independently, so a large graph builds them on
  // two threads (a scratch extraction runs on the budget search's own
  // threads, and a small graph is not worth a thread: starting one costs
  // ~50 us, a 10k-node extraction a few milliseconds). Both only read the
  // joint: a node's op-facts cache is atomic (Node::op_info_), and interning
  // is locked. A forward error is reported first, as when they ran in turn.
  // Anything thrown (std::bad_alloc) reaches the caller as it would on one
  // thread: the worker's exception is rethrown here after the join, and a
  // thread that cannot start leaves the work to this one.
  std::optional<Expected<std::unique_ptr<Graph>>> forward, backward;
  std::thread forward_thread;
  std::exception_ptr forward_exception;
  if (!options.scratch && joint.size() >= options.parallel_from_nodes && std::thread::hardware_concurrency() > 1) {
    try {
      forward_thread = std::thread([&] {
        try {
          forward.emplace(extract_forward());
          if (forward->ok()) fill_signature();
        } catch (...) {
          forward_exception = std::current_exception();
        }
      });
    } catch (const std::system_error&) {  // no thread: both on this one
    }
  }
  if (forward_thread.joinable()) {
    struct JoinAtExit {
      std::thread& t;
      ~JoinAtExit() { t.join(); }
    } join_at_exit{forward_thread};
    backward.emplace(extract_backward());
  } else {
    forward.emplace(extract_forward());
    if (forward->ok()) {
      fill_signature();
      backward.emplace(extract_backward());
    }
  }
  if (forward_exception) std::rethrow_exception(forward_exception);
  FXREMAT_ASSIGN_OR_RETURN(result.forward, std::move(*forward));
  FXREMAT_ASSIGN_OR_RETURN(result.backward, std::move(*backward));

  // Note [Snapshots of mutated inputs]: a scratch partition too, so that the
  // budget solver prices the copies.
  FXREMAT_RETURN_IF_ERROR(SnapshotSavedMutatedData(joint, c, saved_tensors, result));
  if (options.scratch) return result;
  Status check = CheckSignature(*result.forward, *result.backward, result.signature);
  if (!check.ok()) return Status::Internal("emitted graphs violate their signature: " + check.ToString());
  return result;
}

int64_t Signature::savedBytes() const {
  int64_t total = 0;
  for (const SavedValue& s : saved)
    if (s.kind == SavedValue::Kind::kTensor) total += s.bytes;
  return total;
}

int64_t Signature::savedSymInts() const {
  int64_t n = 0;
  for (const SavedValue& s : saved) n += s.kind == SavedValue::Kind::kSymInt;
  return n;
}

int64_t Signature::offloadedBytes() const {
  int64_t total = 0;
  for (const SavedValue& s : saved)
    if (s.offloaded) total += s.bytes;
  return total;
}

}  // namespace fxremat
