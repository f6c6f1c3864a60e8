// The signature checker (every position the signature states is where the
// graphs have it) and the signature's JSON form.
#include <algorithm>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/partition.h"
#include "fxremat/phases.h"
#include "fxremat/text.h"
#include "src/json_internal.h"
#include "src/json_stream_writer.h"

namespace fxremat {

namespace {

Status Violation(const std::string& where, const std::string& message) {
  return Status::BadInput(message, "signature " + where);
}

}  // namespace

Status CheckSignature(const Graph& forward, const Graph& backward, const Signature& sig) {
  ScopedPhase phase("check-signature");
  const std::vector<Node*> fw_in = forward.placeholders();
  const std::vector<Node*> fw_out = forward.outputValues();
  const std::vector<Node*> bw_in = backward.placeholders();
  const std::vector<Node*> bw_out = backward.outputValues();
  auto count = [](const char* what, size_t actual, int64_t stated) -> Status {
    if (static_cast<int64_t>(actual) != stated)
      return Violation(what, fmt::format("states {} but the graph has {}", stated, actual));
    return Status::Ok();
  };
  FXREMAT_RETURN_IF_ERROR(count("forward.num_inputs", fw_in.size(), sig.forward_num_inputs));
  FXREMAT_RETURN_IF_ERROR(count("forward.num_outputs", fw_out.size(), sig.forward_num_outputs));
  FXREMAT_RETURN_IF_ERROR(count("backward.num_inputs", bw_in.size(), sig.backward_num_inputs));
  FXREMAT_RETURN_IF_ERROR(count("backward.num_outputs", bw_out.size(), sig.backward_num_outputs));
  const int64_t expected_fw_outputs = sig.num_fwd_outputs + static_cast<int64_t>(sig.saved.size());
  if (sig.forward_num_outputs != expected_fw_outputs)
    return Violation("forward.num_outputs", fmt::format("{} forward outputs + {} saved values != {}",
                                                        sig.num_fwd_outputs, sig.saved.size(),
                                                        sig.forward_num_outputs));
  int64_t backward_tokens = 0;  // Note [Effect tokens]: returned after the gradients
  for (const TangentEntry& t : sig.tangents) backward_tokens += t.forward_output_index == -1;
  if (static_cast<int64_t>(sig.primals.size()) + backward_tokens != sig.backward_num_outputs)
    return Violation("primals", fmt::format("{} primals and {} backward tokens but {} backward outputs (one gradient "
                                            "per primal, then the tokens)",
                                            sig.primals.size(), backward_tokens, sig.backward_num_outputs));

  // Which positions of each side are claimed; the messages (`where`) are built
  // only for a violation: at a million nodes the signature lists 10^5 values.
  struct Claims {
    explicit Claims(int64_t size) : limit(size), used(static_cast<size_t>(std::max<int64_t>(size, 0)), 0) {}
    int64_t limit;
    std::vector<uint8_t> used;
    int64_t count = 0;
    bool has(size_t index) const { return index < used.size() && used[index]; }
  };
  Claims fw_in_used(sig.forward_num_inputs), fw_out_used(sig.forward_num_outputs),
      bw_in_used(sig.backward_num_inputs), bw_out_used(sig.backward_num_outputs);
  auto claim = [](Claims& claims, int64_t index, auto where) -> Status {
    if (index < 0 || index >= claims.limit)
      return Violation(where(), fmt::format("index {} out of range [0, {})", index, claims.limit));
    if (claims.used[static_cast<size_t>(index)]) return Violation(where(), fmt::format("index {} is claimed twice", index));
    claims.used[static_cast<size_t>(index)] = 1;
    ++claims.count;
    return Status::Ok();
  };

  for (size_t i = 0; i < sig.primals.size(); ++i) {
    const PrimalEntry& p = sig.primals[i];
    auto where = [&] { return fmt::format("primals[{}] ({})", i, p.name); };
    FXREMAT_RETURN_IF_ERROR(claim(fw_in_used, p.forward_input_index, [&] { return where() + ".forward_input_index"; }));
    const Node* node = fw_in[static_cast<size_t>(p.forward_input_index)];
    if (node->name() != p.name || node->role() != PlaceholderRole::kPrimal)
      return Violation(where(), fmt::format("declared at forward input {} but forward input {} is '{}' ({})",
                                          p.forward_input_index, p.forward_input_index, node->name(),
                                          PlaceholderRoleName(node->role())));
    FXREMAT_RETURN_IF_ERROR(claim(bw_out_used, p.gradient_index, [&] { return where() + ".gradient_index"; }));
    const bool has = bw_out[static_cast<size_t>(p.gradient_index)] != nullptr;
    if (has != p.has_gradient)
      return Violation(where(), fmt::format("states has_gradient={} but backward output {} is {}", p.has_gradient,
                                          p.gradient_index, has ? "a tensor" : "None"));
  }
  for (size_t i = 0; i < sig.forward_outputs.size(); ++i) {
    const ForwardOutputEntry& o = sig.forward_outputs[i];
    auto where = [&] { return fmt::format("forward_outputs[{}]", i); };
    if (o.forward_output_index < 0 || o.forward_output_index >= sig.num_fwd_outputs)
      return Violation(where(), fmt::format("index {} is not a user output (there are {})", o.forward_output_index,
                                          sig.num_fwd_outputs));
    FXREMAT_RETURN_IF_ERROR(claim(fw_out_used, o.forward_output_index, where));
    const Node* node = fw_out[static_cast<size_t>(o.forward_output_index)];
    const std::string actual = node ? node->name() : "";
    if (actual != o.name)
      return Violation(where(), fmt::format("names '{}' but forward output {} is '{}'", o.name, o.forward_output_index,
                                          node ? actual : "None"));
  }
  // Saved values: tensors occupy a contiguous block, then symints
  // (Note [AOTAutograd runtime contract]).
  int64_t num_syms = 0;
  for (const SavedValue& s : sig.saved) num_syms += s.kind == SavedValue::Kind::kSymInt;
  const int64_t num_tensors = static_cast<int64_t>(sig.saved.size()) - num_syms;
  for (size_t i = 0; i < sig.saved.size(); ++i) {
    const SavedValue& s = sig.saved[i];
    auto where = [&] { return fmt::format("saved[{}] ({})", i, s.name); };
    const bool is_sym = s.kind == SavedValue::Kind::kSymInt;
    FXREMAT_RETURN_IF_ERROR(claim(fw_out_used, s.forward_output_index, [&] { return where() + ".forward_output_index"; }));
    FXREMAT_RETURN_IF_ERROR(claim(bw_in_used, s.backward_input_index, [&] { return where() + ".backward_input_index"; }));
    const int64_t fw_lo = sig.num_fwd_outputs + (is_sym ? num_tensors : 0);
    const int64_t fw_hi = fw_lo + (is_sym ? num_syms : num_tensors);
    if (s.forward_output_index < fw_lo || s.forward_output_index >= fw_hi)
      return Violation(where(), fmt::format("a saved {} must be a forward output in [{}, {}), not {}",
                                          is_sym ? "symint" : "tensor", fw_lo, fw_hi, s.forward_output_index));
    const int64_t bw_lo = is_sym ? 0 : num_syms;
    const int64_t bw_hi = bw_lo + (is_sym ? num_syms : num_tensors);
    if (s.backward_input_index < bw_lo || s.backward_input_index >= bw_hi)
      return Violation(where(), fmt::format("a saved {} must be a backward input in [{}, {}), not {}",
                                          is_sym ? "symint" : "tensor", bw_lo, bw_hi, s.backward_input_index));
    const Node* produced = fw_out[static_cast<size_t>(s.forward_output_index)];
    if (!produced || produced->name() != s.forwardName())
      return Violation(where(), fmt::format("declared at forward output {} but forward output {} is '{}'",
                                          s.forward_output_index, s.forward_output_index,
                                          produced ? produced->name() : "None"));
    const Node* consumed = bw_in[static_cast<size_t>(s.backward_input_index)];
    if (consumed->name() != s.graphName() || consumed->role() != PlaceholderRole::kSaved)
      return Violation(where(), fmt::format("declared at backward input {} but backward input {} is '{}' ({})",
                                          s.backward_input_index, s.backward_input_index, consumed->name(),
                                          PlaceholderRoleName(consumed->role())));
    if (!(produced->val() == consumed->val()))
      return Violation(where(), "the forward produces different value facts than the backward expects");
    if (s.facts.is_tensor() && (!produced->val().is_tensor() ||
                                produced->val().tensor.dtype != s.facts.tensor.dtype ||
                                produced->val().tensor.shape != s.facts.tensor.shape))
      return Violation(where(), fmt::format("states {} but the value is {}", FormatValueFacts(s.facts),
                                          FormatValueFacts(produced->val())));
    if (is_sym != (produced->val().is_sym() || produced->val().kind == ValueFacts::Kind::kConst))
      return Violation(where(), fmt::format("kind '{}' does not match the value", is_sym ? "symint" : "tensor"));
  }
  for (size_t i = 0; i < sig.tangents.size(); ++i) {
    const TangentEntry& t = sig.tangents[i];
    auto where = [&] { return fmt::format("tangents[{}] ({})", i, t.name); };
    FXREMAT_RETURN_IF_ERROR(claim(bw_in_used, t.backward_input_index, [&] { return where() + ".backward_input_index"; }));
    const Node* node = bw_in[static_cast<size_t>(t.backward_input_index)];
    if (node->name() != t.name || node->role() != PlaceholderRole::kTangent)
      return Violation(where(), fmt::format("declared at backward input {} but backward input {} is '{}' ({})",
                                          t.backward_input_index, t.backward_input_index, node->name(),
                                          PlaceholderRoleName(node->role())));
    if (t.forward_output_index != -1 &&  // -1: a backward effect token
        (t.forward_output_index < 0 || t.forward_output_index >= sig.num_fwd_outputs))
      return Violation(where(), fmt::format("belongs to forward output {}, which is not a user output",
                                          t.forward_output_index));
  }
  for (size_t i = 0; i < sig.opaque_inputs.size(); ++i) {
    const OpaqueInputEntry& o = sig.opaque_inputs[i];
    auto where = [&] { return fmt::format("opaque_inputs[{}] ({})", i, o.name); };
    FXREMAT_RETURN_IF_ERROR(claim(bw_in_used, o.backward_input_index, [&] { return where() + ".backward_input_index"; }));
    const Node* node = bw_in[static_cast<size_t>(o.backward_input_index)];
    if (node->name() != o.name || node->val().kind != ValueFacts::Kind::kOpaque)
      return Violation(where(), fmt::format("declared at backward input {} but backward input {} is '{}' ({})",
                                          o.backward_input_index, o.backward_input_index, node->name(),
                                          FormatValueFacts(node->val())));
    if (o.forward_input_index < 0 || o.forward_input_index >= sig.forward_num_inputs ||
        fw_in[static_cast<size_t>(o.forward_input_index)]->name() != o.name)
      return Violation(where(), fmt::format("forward input {} is not '{}'", o.forward_input_index, o.name));
  }
  // Every placeholder and output position is accounted for, except RNG inputs.
  for (size_t i = 0; i < fw_in.size(); ++i)
    if (!fw_in_used.has(i) && fw_in[i]->role() != PlaceholderRole::kFwdRng)
      return Violation("forward", fmt::format("forward input {} ('{}') is not described", i, fw_in[i]->name()));
  for (size_t i = 0; i < bw_in.size(); ++i)
    if (!bw_in_used.has(i) && bw_in[i]->role() != PlaceholderRole::kBwdRng)
      return Violation("backward", fmt::format("backward input {} ('{}') is not described", i, bw_in[i]->name()));
  if (fw_out_used.count != sig.forward_num_outputs)
    return Violation("forward", "some forward outputs are not described");
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// JSON
// ---------------------------------------------------------------------------

namespace {
using ojson = nlohmann::ordered_json;

ojson FactsShape(const ValueFacts& v) {
  ojson shape = ojson::array();
  for (const Dim& d : v.tensor.shape) shape.push_back(DimToJson(d));
  return shape;
}
}  // namespace

namespace {

void WriteShape(JsonStreamWriter& w, const ValueFacts& v) {  // as FactsShape
  w.BeginArray();
  for (const Dim& d : v.tensor.shape) WriteDim(w, d);
  w.EndArray();
}

void StringOrNull(JsonStreamWriter& w, const std::string& s) {
  if (s.empty()) w.Null();
  else w.String(s);
}

}  // namespace

// Streamed (Note [Streaming writer] in src/json_stream_writer.h), byte for
// byte as SignatureToJsonDocument(sig).dump(2): at a million nodes the
// signature lists 10^5 saved values, and building the document cost ~0.9 s.
std::string SignatureToJson(const Signature& sig) {
  JsonStreamWriter w(nullptr, /*indent=*/2);
  w.BeginObject();
  w.Key("format"); w.String("fxremat.signature");
  w.Key("version"); w.BeginArray(); w.Int(1); w.Int(0); w.EndArray();
  w.Key("partitioner"); w.String(sig.partitioner);
  w.Key("forward"); w.BeginObject();
  w.Key("num_inputs"); w.Int(sig.forward_num_inputs);
  w.Key("num_outputs"); w.Int(sig.forward_num_outputs);
  w.EndObject();
  w.Key("backward"); w.BeginObject();
  w.Key("num_inputs"); w.Int(sig.backward_num_inputs);
  w.Key("num_outputs"); w.Int(sig.backward_num_outputs);
  w.EndObject();
  w.Key("num_fwd_outputs"); w.Int(sig.num_fwd_outputs);
  w.Key("primals"); w.BeginArray();
  for (const PrimalEntry& p : sig.primals) {
    w.BeginObject();
    w.Key("name"); w.String(p.name);
    w.Key("forward_input_index"); w.Int(p.forward_input_index);
    w.Key("path"); StringOrNull(w, p.path);
    w.Key("gradient_index"); w.Int(p.gradient_index);
    w.Key("has_gradient"); w.Bool(p.has_gradient);
    if (p.written_back_from) { w.Key("written_back_from"); w.Int(*p.written_back_from); }
    w.EndObject();
  }
  w.EndArray();
  w.Key("forward_outputs"); w.BeginArray();
  for (const ForwardOutputEntry& o : sig.forward_outputs) {
    w.BeginObject();
    w.Key("forward_output_index"); w.Int(o.forward_output_index);
    w.Key("name"); StringOrNull(w, o.name);
    w.Key("path");
    if (o.path) w.String(*o.path);
    else w.Null();
    w.EndObject();
  }
  w.EndArray();
  w.Key("saved"); w.BeginArray();
  for (const SavedValue& v : sig.saved) {
    w.BeginObject();
    w.Key("name"); w.String(v.name);
    w.Key("kind"); w.String(v.kind == SavedValue::Kind::kTensor ? "tensor" : "symint");
    w.Key("annotation");
    if (v.annotation) w.String(*v.annotation);
    else w.Null();
    w.Key("forward_output_index"); w.Int(v.forward_output_index);
    w.Key("backward_input_index"); w.Int(v.backward_input_index);
    if (v.facts.is_tensor()) {
      w.Key("shape"); WriteShape(w, v.facts);
      w.Key("dtype"); w.String(DTypeName(v.facts.tensor.dtype));
    } else {
      w.Key("shape"); w.Null();
      w.Key("dtype");
      w.String(v.facts.kind == ValueFacts::Kind::kSymFloat  ? "symfloat"
               : v.facts.kind == ValueFacts::Kind::kSymBool ? "symbool"
               : v.facts.kind == ValueFacts::Kind::kConst   ? "const"
                                                            : "symint");
    }
    if (v.facts.is_sym() && !v.facts.expr.empty()) { w.Key("expr"); w.String(v.facts.expr.str()); }
    w.Key("bytes"); w.Int(v.bytes);
    w.Key("names"); w.StringArray(v.names);
    w.Key("decision"); StringOrNull(w, v.decision);
    if (!v.rule.empty()) { w.Key("rule"); w.String(v.rule); }
    w.Key("offloaded"); w.Bool(v.offloaded);
    if (v.snapshot) { w.Key("snapshot"); w.Bool(true); }
    if (v.no_vc_check) { w.Key("no_vc_check"); w.Bool(true); }
    w.Key("origin_op"); StringOrNull(w, v.origin_op);
    w.Key("origin_location"); StringOrNull(w, v.origin_location);
    w.EndObject();
  }
  w.EndArray();
  w.Key("tangents"); w.BeginArray();
  for (const TangentEntry& t : sig.tangents) {
    w.BeginObject();
    w.Key("name"); w.String(t.name);
    w.Key("backward_input_index"); w.Int(t.backward_input_index);
    w.Key("forward_output_index"); w.Int(t.forward_output_index);
    w.EndObject();
  }
  w.EndArray();
  if (!sig.opaque_inputs.empty()) {  // Note [Opaque inputs]
    w.Key("opaque_inputs"); w.BeginArray();
    for (const OpaqueInputEntry& o : sig.opaque_inputs) {
      w.BeginObject();
      w.Key("name"); w.String(o.name);
      w.Key("forward_input_index"); w.Int(o.forward_input_index);
      w.Key("backward_input_index"); w.Int(o.backward_input_index);
      w.Key("type"); w.String(o.type);
      w.EndObject();
    }
    w.EndArray();
  }
  // Note [Names in the signature]: each name of a saved value -> where it is;
  // a name on several saved values maps to the first (forward-output order).
  std::vector<const SavedValue*> first_of_name;
  std::vector<const std::string*> names_in_order;
  std::unordered_set<std::string_view> seen;
  for (const SavedValue& v : sig.saved) {
    auto add = [&](const std::string& name) {
      if (!seen.insert(name).second) return;
      names_in_order.push_back(&name);
      first_of_name.push_back(&v);
    };
    for (const std::string& name : v.names) add(name);
    if (v.names.empty() && v.annotation) add(*v.annotation);
  }
  w.Key("name_in_output_indices"); w.BeginObject();
  for (size_t k = 0; k < names_in_order.size(); ++k) { w.Key(*names_in_order[k]); w.Int(first_of_name[k]->forward_output_index); }
  w.EndObject();
  w.Key("name_in_input_names"); w.BeginObject();
  for (size_t k = 0; k < names_in_order.size(); ++k) { w.Key(*names_in_order[k]); w.String(first_of_name[k]->graphName()); }
  w.EndObject();
  w.Key("name_in_input_indices"); w.BeginObject();
  for (size_t k = 0; k < names_in_order.size(); ++k) { w.Key(*names_in_order[k]); w.Int(first_of_name[k]->backward_input_index); }
  w.EndObject();
  w.Key("saved_bytes"); w.Int(sig.savedBytes());
  w.Key("saved_symints"); w.Int(sig.savedSymInts());
  w.Key("offloaded_bytes"); w.Int(sig.offloadedBytes());
  if (!sig.notes.empty()) { w.Key("notes"); w.StringArray(sig.notes); }
  if (sig.peak) {
    w.Key("peak"); w.BeginObject();
    w.Key("bytes"); w.Int(sig.peak->bytes);
    w.Key("node"); w.String(sig.peak->node);
    w.Key("graph"); w.String(sig.peak->graph);
    w.Key("live_after_forward_bytes"); w.Int(sig.peak->live_after_forward_bytes);
    if (sig.peak->budget_bytes) { w.Key("budget_bytes"); w.Int(*sig.peak->budget_bytes); }
    w.EndObject();
  }
  w.EndObject();
  w.AppendText("\n");
  return w.Take();
}

nlohmann::ordered_json SignatureToJsonDocument(const Signature& sig) {
  ojson j;
  j["format"] = "fxremat.signature";
  j["version"] = {1, 0};
  j["partitioner"] = sig.partitioner;
  j["forward"] = {{"num_inputs", sig.forward_num_inputs}, {"num_outputs", sig.forward_num_outputs}};
  j["backward"] = {{"num_inputs", sig.backward_num_inputs}, {"num_outputs", sig.backward_num_outputs}};
  j["num_fwd_outputs"] = sig.num_fwd_outputs;
  ojson primals = ojson::array();
  for (const PrimalEntry& p : sig.primals) {
    ojson e = {{"name", p.name}, {"forward_input_index", p.forward_input_index},
               {"path", p.path.empty() ? ojson(nullptr) : ojson(p.path)},
               {"gradient_index", p.gradient_index}, {"has_gradient", p.has_gradient}};
    if (p.written_back_from) e["written_back_from"] = *p.written_back_from;
    primals.push_back(std::move(e));
  }
  j["primals"] = primals;
  ojson outputs = ojson::array();
  for (const ForwardOutputEntry& o : sig.forward_outputs)
    outputs.push_back({{"forward_output_index", o.forward_output_index},
                       {"name", o.name.empty() ? ojson(nullptr) : ojson(o.name)},
                       {"path", o.path ? ojson(*o.path) : ojson(nullptr)}});
  j["forward_outputs"] = outputs;
  ojson saved = ojson::array();
  for (const SavedValue& s : sig.saved) {
    ojson e;
    e["name"] = s.name;
    e["kind"] = s.kind == SavedValue::Kind::kTensor ? "tensor" : "symint";
    e["annotation"] = s.annotation ? ojson(*s.annotation) : ojson(nullptr);
    e["forward_output_index"] = s.forward_output_index;
    e["backward_input_index"] = s.backward_input_index;
    if (s.facts.is_tensor()) {
      e["shape"] = FactsShape(s.facts);
      e["dtype"] = std::string(DTypeName(s.facts.tensor.dtype));
    } else {
      e["shape"] = nullptr;
      e["dtype"] = s.facts.kind == ValueFacts::Kind::kSymFloat ? "symfloat"
                   : s.facts.kind == ValueFacts::Kind::kSymBool ? "symbool"
                   : s.facts.kind == ValueFacts::Kind::kConst   ? "const"  // a Python scalar input
                                                                 : "symint";
    }
    if (s.facts.is_sym() && !s.facts.expr.empty()) e["expr"] = s.facts.expr;
    e["bytes"] = s.bytes;
    e["names"] = s.names;
    e["decision"] = s.decision.empty() ? ojson(nullptr) : ojson(s.decision);
    if (!s.rule.empty()) e["rule"] = s.rule;
    e["offloaded"] = s.offloaded;
    if (s.snapshot) e["snapshot"] = true;
    if (s.no_vc_check) e["no_vc_check"] = true;
    e["origin_op"] = s.origin_op.empty() ? ojson(nullptr) : ojson(s.origin_op);
    e["origin_location"] = s.origin_location.empty() ? ojson(nullptr) : ojson(s.origin_location);
    saved.push_back(std::move(e));
  }
  j["saved"] = saved;
  ojson tangents = ojson::array();
  for (const TangentEntry& t : sig.tangents)
    tangents.push_back({{"name", t.name}, {"backward_input_index", t.backward_input_index},
                        {"forward_output_index", t.forward_output_index}});
  j["tangents"] = tangents;
  if (!sig.opaque_inputs.empty()) {  // Note [Opaque inputs]
    ojson opaque = ojson::array();
    for (const OpaqueInputEntry& o : sig.opaque_inputs)
      opaque.push_back({{"name", o.name}, {"forward_input_index", o.forward_input_index},
                        {"backward_input_index", o.backward_input_index}, {"type", o.type}});
    j["opaque_inputs"] = opaque;
  }
  // Note [Names in the signature]: each name of a saved value -> where it is;
  // a name on several saved values maps to the first (forward-output order).
  ojson out_indices = ojson::object(), in_names = ojson::object(), in_indices = ojson::object();
  for (const SavedValue& s : sig.saved) {
    std::vector<std::string> names = s.names;
    if (names.empty() && s.annotation) names.push_back(*s.annotation);
    for (const std::string& name : names) {
      if (out_indices.contains(name)) continue;
      out_indices[name] = s.forward_output_index;
      in_names[name] = s.graphName();
      in_indices[name] = s.backward_input_index;
    }
  }
  j["name_in_output_indices"] = out_indices;
  j["name_in_input_names"] = in_names;
  j["name_in_input_indices"] = in_indices;
  j["saved_bytes"] = sig.savedBytes();
  j["saved_symints"] = sig.savedSymInts();
  j["offloaded_bytes"] = sig.offloadedBytes();
  if (!sig.notes.empty()) j["notes"] = sig.notes;
  if (sig.peak) {
    ojson peak = ojson::object();
    peak["bytes"] = sig.peak->bytes;
    peak["node"] = sig.peak->node;
    peak["graph"] = sig.peak->graph;
    peak["live_after_forward_bytes"] = sig.peak->live_after_forward_bytes;
    if (sig.peak->budget_bytes) peak["budget_bytes"] = *sig.peak->budget_bytes;
    j["peak"] = peak;
  }
  return j;
}

Expected<Signature> SignatureFromJson(const std::string& text, const std::string& where) {
  using json = nlohmann::json;
  FXREMAT_RETURN_IF_ERROR(CheckJsonDepth(text, "the signature").WithContext(where));
  // The entry being read, for the message of a field of the wrong type or a
  // missing one (nlohmann's names neither the key nor the entry).
  std::string at;
  try {
    json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != "fxremat.signature")
      return Status::BadInput("not an fxremat signature (expected \"format\": \"fxremat.signature\")", where);
    if (!j.contains("version") || !j["version"].is_array() || j["version"].empty() || j["version"][0] != 1)
      return Status::BadInput(fmt::format("unsupported signature version {}", j.value("version", json()).dump()), where);
    Signature sig;
    sig.partitioner = j.at("partitioner").get<std::string>();
    sig.forward_num_inputs = j.at("forward").at("num_inputs").get<int64_t>();
    sig.forward_num_outputs = j.at("forward").at("num_outputs").get<int64_t>();
    sig.backward_num_inputs = j.at("backward").at("num_inputs").get<int64_t>();
    sig.backward_num_outputs = j.at("backward").at("num_outputs").get<int64_t>();
    sig.num_fwd_outputs = j.at("num_fwd_outputs").get<int64_t>();
    at = "/primals";
    for (size_t entry = 0; const json& p : j.at("primals")) {
      at = fmt::format("/primals/{}", entry++);
      PrimalEntry e;
      e.name = p.at("name").get<std::string>();
      e.forward_input_index = p.at("forward_input_index").get<int64_t>();
      if (p.contains("path") && p["path"].is_string()) e.path = p["path"].get<std::string>();
      e.gradient_index = p.at("gradient_index").get<int64_t>();
      e.has_gradient = p.at("has_gradient").get<bool>();
      if (p.contains("written_back_from") && !p["written_back_from"].is_null())
        e.written_back_from = p["written_back_from"].get<int64_t>();
      sig.primals.push_back(std::move(e));
    }
    at = "/forward_outputs";
    for (size_t entry = 0; const json& o : j.at("forward_outputs")) {
      at = fmt::format("/forward_outputs/{}", entry++);
      ForwardOutputEntry e;
      e.forward_output_index = o.at("forward_output_index").get<int64_t>();
      if (o.contains("name") && o["name"].is_string()) e.name = o["name"].get<std::string>();
      if (o.contains("path") && o["path"].is_string()) e.path = o["path"].get<std::string>();
      sig.forward_outputs.push_back(std::move(e));
    }
    at = "/saved";
    for (size_t entry = 0; const json& s : j.at("saved")) {
      at = fmt::format("/saved/{}", entry++);
      SavedValue v;
      v.name = s.at("name").get<std::string>();
      v.kind = s.at("kind").get<std::string>() == "symint" ? SavedValue::Kind::kSymInt : SavedValue::Kind::kTensor;
      if (s.contains("annotation") && s["annotation"].is_string()) v.annotation = s["annotation"].get<std::string>();
      v.forward_output_index = s.at("forward_output_index").get<int64_t>();
      v.backward_input_index = s.at("backward_input_index").get<int64_t>();
      v.bytes = s.at("bytes").get<int64_t>();
      if (v.kind == SavedValue::Kind::kTensor) {
        v.facts.kind = ValueFacts::Kind::kTensor;
        auto dtype = DTypeFromName(s.at("dtype").get<std::string>());
        if (!dtype) return Status::BadInput(fmt::format("saved value '{}': unknown dtype", v.name), where);
        v.facts.tensor.dtype = *dtype;
        for (const json& d : s.at("shape")) {
          if (d.is_number_integer()) v.facts.tensor.shape.push_back(Dim::Static(d.get<int64_t>()));
          else v.facts.tensor.shape.push_back(Dim{d.at("hint").get<int64_t>(), d.at("sym").get<std::string>()});
        }
      } else {
        const std::string dtype = s.value("dtype", "symint");
        v.facts.kind = dtype == "symfloat"  ? ValueFacts::Kind::kSymFloat
                       : dtype == "symbool" ? ValueFacts::Kind::kSymBool
                       : dtype == "const"   ? ValueFacts::Kind::kConst  // a Python scalar input
                                            : ValueFacts::Kind::kSymInt;
        if (s.contains("expr") && s["expr"].is_string()) v.facts.expr = s["expr"].get<std::string>();
      }
      // Keys added with names and offload; a file without them has none.
      if (s.contains("names") && s["names"].is_array()) v.names = s["names"].get<std::vector<std::string>>();
      if (v.names.empty() && v.annotation) v.names.push_back(*v.annotation);
      if (s.contains("decision") && s["decision"].is_string()) v.decision = s["decision"].get<std::string>();
      if (s.contains("rule") && s["rule"].is_string()) v.rule = s["rule"].get<std::string>();
      if (s.contains("offloaded") && s["offloaded"].is_boolean()) v.offloaded = s["offloaded"].get<bool>();
      if (s.contains("snapshot") && s["snapshot"].is_boolean()) v.snapshot = s["snapshot"].get<bool>();
      if (s.contains("no_vc_check") && s["no_vc_check"].is_boolean()) v.no_vc_check = s["no_vc_check"].get<bool>();
      if (s.contains("origin_op") && s["origin_op"].is_string()) v.origin_op = s["origin_op"].get<std::string>();
      if (s.contains("origin_location") && s["origin_location"].is_string())
        v.origin_location = s["origin_location"].get<std::string>();
      sig.saved.push_back(std::move(v));
    }
    at = "/tangents";
    for (size_t entry = 0; const json& t : j.at("tangents")) {
      at = fmt::format("/tangents/{}", entry++);
      TangentEntry e;
      e.name = t.at("name").get<std::string>();
      e.backward_input_index = t.at("backward_input_index").get<int64_t>();
      e.forward_output_index = t.at("forward_output_index").get<int64_t>();
      sig.tangents.push_back(std::move(e));
    }
    if (j.contains("opaque_inputs") && j["opaque_inputs"].is_array())
      for (size_t entry = 0; const json& o : j["opaque_inputs"]) {
        at = fmt::format("/opaque_inputs/{}", entry++);
        OpaqueInputEntry e;
        e.name = o.at("name").get<std::string>();
        e.forward_input_index = o.at("forward_input_index").get<int64_t>();
        e.backward_input_index = o.at("backward_input_index").get<int64_t>();
        e.type = o.value("type", "");
        sig.opaque_inputs.push_back(std::move(e));
      }
    if (j.contains("notes") && j["notes"].is_array())
      for (const auto& note : j["notes"])
        if (note.is_string()) sig.notes.push_back(note.get<std::string>());
    at = "/peak";
    if (j.contains("peak") && j["peak"].is_object()) {
      const json& pk = j["peak"];
      PeakSummary peak;
      peak.bytes = pk.at("bytes").get<int64_t>();
      peak.node = pk.value("node", "");
      peak.graph = pk.value("graph", "");
      peak.live_after_forward_bytes = pk.value("live_after_forward_bytes", int64_t{0});
      if (pk.contains("budget_bytes") && pk["budget_bytes"].is_number_integer())
        peak.budget_bytes = pk["budget_bytes"].get<int64_t>();
      sig.peak = peak;
    }
    return sig;
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();  // "[json.exception.type_error.302] type must be ..."
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return Status::BadInput(fmt::format("malformed signature{}: {}", at.empty() ? "" : " at " + at, what), where);
  }
}

}  // namespace fxremat
