// emit_offload: for every saved value marked `offloaded`, the forward copies it to
// host after its last forward use and returns the copy; the backward takes the
// copy and reloads it before its first use (Note [Offload] in emit_offload.h).
// Assumes graphs and signature as ExtractPartition emits them.
//
// Naming: the host copy is "<name>_host" in both graphs (SavedValue::graphName);
// the backward's reload keeps the joint name, so every backward use reads as
// before. Facts: the torch target's host copy is the value with device cpu; the
// xla target keeps the device (the memory space is the op's annotation).
#include "passes/emit_offload.h"

#include <algorithm>

#include <fmt/format.h>

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
constexpr const char* kPlaceToDevice = "xla.place_to_device.default";

struct Transfer {
  std::string target;
  std::vector<Argument> extra_args;  // after the value
  Kwargs kwargs;
};

Transfer ToHost(OffloadTarget target) {
  if (target == OffloadTarget::kXla) return {kPlaceToHost, {}, {}};
  return {kDevicePut, {Argument::Device("cpu")}, {{"non_blocking", Argument::Bool(true)}}};
}

Transfer ToDevice(const ValueFacts& device_facts, OffloadTarget target) {
  if (target == OffloadTarget::kXla) return {kPlaceToDevice, {}, {}};
  return {kDevicePut, {Argument::Device(device_facts.tensor.device)}, {{"non_blocking", Argument::Bool(true)}}};
}

ValueFacts HostFacts(const ValueFacts& device_facts, OffloadTarget target) {
  ValueFacts host = device_facts;
  if (target == OffloadTarget::kTorch) host.tensor.device = "cpu";
  host.tensor.storage = -1;  // a fresh storage, not numbered in the joint graph
  return host;
}

void RegisterTransferOps(Graph& g, OffloadTarget target) {
  if (target == OffloadTarget::kTorch) {
    EnsureOpFacts(g, kDevicePut, kDevicePutSchema, {"pt2_compliant_tag"}, {"pt2_compliant_tag"});
  } else {
    EnsureOpFacts(g, kPlaceToHost, "xla::place_to_host(Tensor t) -> Tensor", {});
    EnsureOpFacts(g, kPlaceToDevice, "xla::place_to_device(Tensor t) -> Tensor", {});
  }
}

}  // namespace

Expected<bool> EmitOffload(Partition& p, OffloadTarget target) {
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
    if (!produced || produced->name() != s.name)
      return Status::Internal(fmt::format("forward output {} is not '{}'", s.forward_output_index, s.name), where);
    if (fw.findNode(s.graphName()) || bw.findNode(s.graphName()))
      return Status::BadInput(fmt::format("cannot name its host copy '{}': the name is taken", s.graphName()), where);
    todo.push_back(&s);
  }
  if (todo.empty()) return false;
  RegisterTransferOps(fw, target);
  RegisterTransferOps(bw, target);

  // Forward: anchors first (the node after each value's last use), then the
  // copies, so that copies sharing an anchor come in signature order.
  Node* fw_output = fw.outputNode();
  std::vector<Node*> anchors;
  for (SavedValue* s : todo) {
    Node* value = fw.findNode(s->name);
    // Never between placeholders: the copy of an input goes after the last one.
    size_t last = value->index();
    if (const size_t num_inputs = fw.placeholders().size(); num_inputs > 0) last = std::max(last, num_inputs - 1);
    for (Node* user : value->users())
      if (user != fw_output) last = std::max(last, user->index());
    anchors.push_back(fw.nodes()[last + 1].get());
  }
  for (size_t k = 0; k < todo.size(); ++k) {
    const SavedValue& s = *todo[k];
    Node* value = fw.findNode(s.name);
    Transfer t = ToHost(target);
    std::vector<Argument> args = {Argument::NodeRef(value)};
    args.insert(args.end(), t.extra_args.begin(), t.extra_args.end());
    Node* host = fw.createNodeBefore(anchors[k], OpKind::kCallFunction, s.graphName(), t.target, std::move(args),
                                     std::move(t.kwargs));
    host->val() = HostFacts(value->val(), target);
    std::vector<Argument> outputs = fw_output->args()[0].list;
    outputs[static_cast<size_t>(s.forward_output_index)] = Argument::NodeRef(host);
    fw.setInputs(fw_output, {Argument::List(std::move(outputs))});
  }

  // Backward: the placeholder becomes the host copy; the reload takes the joint
  // name right before the first use.
  for (SavedValue* s : todo) {
    Node* placeholder = bw.placeholders().at(static_cast<size_t>(s->backward_input_index));
    const ValueFacts device_facts = placeholder->val();
    Node* first_use = bw.outputNode();
    for (Node* user : placeholder->users())
      if (user->index() < first_use->index()) first_use = user;
    bw.renameNode(placeholder, s->graphName());
    placeholder->val() = HostFacts(device_facts, target);
    Transfer t = ToDevice(device_facts, target);
    Node* reload = bw.createNodeBefore(first_use, OpKind::kCallFunction, s->name, t.target);
    reload->val() = device_facts;
    reload->meta() = placeholder->meta();
    bw.replaceAllUsesWith(placeholder, reload);
    std::vector<Argument> args = {Argument::NodeRef(placeholder)};
    args.insert(args.end(), t.extra_args.begin(), t.extra_args.end());
    bw.setInputs(reload, std::move(args), std::move(t.kwargs));
  }
  Status check = CheckSignature(fw, bw, p.signature);
  if (!check.ok()) return Status::Internal("offload broke the signature: " + check.ToString());
  return true;
}

}  // namespace fxremat
