// functionalize_rng: random ops recomputed in the backward replay the forward's
// draw (Note [Replaying random ops] in functionalize_rng.h). Assumes graphs and
// signature as ExtractPartition emits them, before emit-offload.
#include "passes/functionalize_rng.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "src/partition_internal.h"

namespace fxremat {

namespace {

constexpr const char* kRunAndSave = "higher_order.run_and_save_rng_state";
constexpr const char* kRunWith = "higher_order.run_with_rng_state";

// What torch.get_rng_state() (the CPU generator: mt19937 state and the normal
// cache) and torch.cuda.get_rng_state() (seed and offset) return: a uint8 CPU
// tensor of this many elements.
int64_t RngStateBytes(const std::string& device) { return device == "cuda" ? 16 : 5056; }

ValueFacts RngStateFacts(const std::string& device) {
  ValueFacts f;
  f.kind = ValueFacts::Kind::kTensor;
  f.tensor.dtype = DType::kUInt8;
  f.tensor.shape = {Dim::Static(RngStateBytes(device))};
  f.tensor.stride = {Dim::Static(1)};
  f.tensor.device = "cpu";
  f.tensor.storage = -1;  // a fresh storage, not numbered in the joint graph
  return f;
}

// The op's arguments after the operator (run_and_save_rng_state(op, *args,
// **kwargs), run_with_rng_state(state, op, *args, **kwargs)). torch's
// run_and_save_rng_state picks its generator from a `device` keyword or else
// from the first tensor argument: an op with neither (Inductor's
// prims.inductor_seeds(count, device)) would find no backend. A device passed
// by position goes by keyword, with the positions after it.
struct WrappedCall {
  std::vector<Argument> args;
  Kwargs kwargs;
};
WrappedCall WithOp(std::vector<Argument> head, const Node& random_op) {
  WrappedCall call{std::move(head), random_op.kwargs()};
  call.args.push_back(Argument::Op(random_op.target()));
  const OpInfo* info = random_op.opInfo();
  const int device = info && info->hasSchema() ? info->schema.argumentIndex("device") : -1;
  const size_t by_position = device >= 0 ? std::min(random_op.args().size(), static_cast<size_t>(device))
                                         : random_op.args().size();
  call.args.insert(call.args.end(), random_op.args().begin(),
                   random_op.args().begin() + static_cast<std::ptrdiff_t>(by_position));
  for (size_t i = by_position; i < random_op.args().size(); ++i)
    call.kwargs.emplace_back(info->schema.arguments[i].name, random_op.args()[i]);
  return call;
}

// A name free in both graphs (and so in the joint graph's namespace as
// partition_fn sees it: the emitted graphs hold every joint name they use).
std::string FreshName(const Graph& fw, const Graph& bw, std::string base) {
  std::string name = base;
  for (int k = 1; fw.findNode(name) || bw.findNode(name); ++k)
    name = fmt::format("{}_{}", base, k);
  return name;
}

}  // namespace

Expected<bool> FunctionalizeRng(Partition& p) {
  Graph& fw = *p.forward;
  Graph& bw = *p.backward;
  // Pairs in forward order: the random op in the forward and its recomputation.
  std::vector<std::pair<Node*, Node*>> pairs;
  for (const auto& up : fw.nodes()) {
    Node* f = up.get();
    if (!IsRandomOp(*f)) continue;
    Node* b = bw.findNode(f->name());
    if (!b || !b->isCallFunction() || b->target() != f->target()) continue;
    if (!RandomOpReplayable(*f))
      return Status::Internal(fmt::format("the random op '{}' ({}) is recomputed in the backward, but its device's "
                                          "generator state cannot be replayed",
                                          f->name(), f->target()));
    pairs.push_back({f, b});
  }
  if (pairs.empty()) return false;

  Signature& sig = p.signature;
  // The state goes after the version-checked saved tensors.
  auto first_unchecked = std::find_if(sig.saved.begin(), sig.saved.end(), [](const SavedValue& s) {
    return s.kind != SavedValue::Kind::kTensor || s.no_vc_check;
  });
  const size_t insert_at = static_cast<size_t>(first_unchecked - sig.saved.begin());
  const int64_t num_syms = sig.savedSymInts();

  // Every state goes to the same place: the forward's outputs, the backward's
  // inputs and the saved values each take them in order at one position, so
  // they are gathered here and inserted once at the end (one at a time, each
  // insertion copied the whole output list, placeholder list and saved list:
  // 8,000 random ops took 22 s).
  std::vector<Argument> state_outputs;
  std::vector<SavedValue> state_values;
  Node* bw_before = nullptr;  // the backward input the states go before
  {
    const std::vector<Node*> inputs = bw.placeholders();
    const size_t in_pos = static_cast<size_t>(num_syms) + insert_at;
    if (in_pos < inputs.size()) bw_before = inputs[in_pos];
    else
      for (const auto& up : bw.nodes())
        if (!up->isPlaceholder()) { bw_before = up.get(); break; }
  }
  UniqueNames run_names(fw, "run_and_save_rng_state");

  for (auto [f, b] : pairs) {
    const std::string device = RandomOpDevice(*f);
    const ValueFacts state_facts = RngStateFacts(device);
    const std::string op_name = f->name();
    const std::string state_name = FreshName(fw, bw, "rng_state_" + op_name);

    // Forward: (state, result) = run_and_save_rng_state(op, *args); the result
    // takes over the op's name and uses.
    WrappedCall call = WithOp({}, *f);
    Node* run = fw.createNodeBefore(f, OpKind::kCallFunction, run_names.next(), kRunAndSave, std::move(call.args),
                                    std::move(call.kwargs));
    run->val().kind = ValueFacts::Kind::kTuple;
    run->val().items = {state_facts, f->val()};
    run->meta().stack_trace = f->meta().stack_trace;
    Node* state = fw.createNodeBefore(f, OpKind::kCallFunction, state_name, "_operator.getitem",
                                      {Argument::NodeRef(run), Argument::Int(0)});
    state->val() = state_facts;
    Node* result = ReplaceNode(fw, f, f, "_operator.getitem", {Argument::NodeRef(run), Argument::Int(1)}, {});
    // The state is a forward output among the saved tensors.
    state_outputs.push_back(Argument::NodeRef(state));

    // Backward: the state is an input after the saved tensors before it; the
    // recomputation runs under it.
    Node* state_in = bw.createNodeBefore(bw_before, OpKind::kPlaceholder, state_name, state_name);
    state_in->setRole(PlaceholderRole::kSaved);
    state_in->val() = state_facts;
    WrappedCall replay = WithOp({Argument::NodeRef(state_in)}, *b);
    ReplaceNode(bw, b, b, kRunWith, std::move(replay.args), std::move(replay.kwargs));

    SavedValue v;
    v.name = state_name;
    v.kind = SavedValue::Kind::kTensor;
    v.rule = "RNG state of " + op_name;
    v.origin_op = kRunAndSave;
    v.origin_location = OriginLocation(result->meta().stack_trace);
    v.facts = state_facts;
    v.bytes = state_facts.nbytes();
    state_values.push_back(std::move(v));
  }
  {
    Node* fw_output = fw.outputNode();
    std::vector<Argument> outputs = fw_output->args()[0].list;
    const size_t out_pos = static_cast<size_t>(sig.num_fwd_outputs) + insert_at;
    outputs.insert(outputs.begin() + static_cast<std::ptrdiff_t>(out_pos), std::make_move_iterator(state_outputs.begin()),
                   std::make_move_iterator(state_outputs.end()));
    fw.setInputs(fw_output, {Argument::List(std::move(outputs))});
    sig.saved.insert(sig.saved.begin() + static_cast<std::ptrdiff_t>(insert_at),
                     std::make_move_iterator(state_values.begin()), std::make_move_iterator(state_values.end()));
  }

  // Every position after the insertions, read back from the graphs.
  std::map<std::string, int64_t, std::less<>> in_index;
  const std::vector<Node*> outs = fw.outputValues();
  const std::vector<Node*> ins = bw.placeholders();
  for (size_t i = 0; i < ins.size(); ++i) in_index.emplace(ins[i]->name(), static_cast<int64_t>(i));
  for (size_t i = 0; i < sig.saved.size(); ++i) {
    SavedValue& s = sig.saved[i];
    s.forward_output_index = sig.num_fwd_outputs + static_cast<int64_t>(i);
    // Offloaded values are marked before emit-offload renames their slots.
    auto slot = in_index.find(s.graphName());
    if (slot == in_index.end()) slot = in_index.find(s.name);
    if (slot == in_index.end())
      return Status::Internal(fmt::format("saved value '{}' is not a backward input", s.name));
    s.backward_input_index = slot->second;
  }
  for (TangentEntry& t : sig.tangents)
    if (auto it = in_index.find(t.name); it != in_index.end()) t.backward_input_index = it->second;
  for (OpaqueInputEntry& o : sig.opaque_inputs) {
    auto slot = in_index.find(o.name);
    if (slot == in_index.end())
      return Status::Internal(fmt::format("opaque input '{}' is not a backward input", o.name));
    o.backward_input_index = slot->second;
  }
  sig.forward_num_outputs = static_cast<int64_t>(outs.size());
  sig.backward_num_inputs = static_cast<int64_t>(ins.size());

  // An offloaded value's slots take their host name only in emit-offload,
  // which runs later: check the slots as they are now.
  Signature as_emitted = sig;
  for (SavedValue& s : as_emitted.saved)
    if (s.offloaded && !bw.findNode(s.graphName())) s.offloaded = false;
  Status check = CheckSignature(fw, bw, as_emitted);
  if (!check.ok()) return Status::Internal("replaying random ops broke the signature: " + check.ToString());
  return true;
}

}  // namespace fxremat
