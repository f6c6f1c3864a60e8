// Tests of the libtorch bridge: op facts from the dispatcher, the op-by-op
// interpreter and numeric verification of partitions. The joint graphs are
// built by hand, as AOTAutograd would trace them, and partitioned by hand.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "fxremat/torch_bridge.h"
#include "passes/default_partition.h"
#include "passes/emit_offload.h"
#include "passes/fold_annotations.h"
#include "passes/insert_barriers.h"

namespace fxremat {
namespace {

// ---------------------------------------------------------------------------
// Graph building helpers
// ---------------------------------------------------------------------------

ValueFacts Tensor(DimVector shape, DType dtype = DType::kFloat32) {
  ValueFacts v;
  v.kind = ValueFacts::Kind::kTensor;
  v.tensor.dtype = dtype;
  v.tensor.shape = shape;
  v.tensor.stride.assign(shape.size(), Dim::Static(1));
  for (size_t d = shape.size(); d-- > 1;) {
    Dim s = v.tensor.stride[d];
    v.tensor.stride[d - 1] = Dim::Static(s.hint * std::max<int64_t>(shape[d].hint, 1));
  }
  return v;
}

ValueFacts Tensor(std::initializer_list<int64_t> shape, DType dtype = DType::kFloat32) {
  DimVector dims;
  for (int64_t d : shape) dims.push_back(Dim::Static(d));
  return Tensor(std::move(dims), dtype);
}

ValueFacts SymInt(std::string expr, int64_t hint) {
  ValueFacts v;
  v.kind = ValueFacts::Kind::kSymInt;
  v.expr = std::move(expr);
  v.hint = hint;
  return v;
}

ValueFacts Tuple(std::vector<ValueFacts> items) {
  ValueFacts v;
  v.kind = ValueFacts::Kind::kTuple;
  v.items = std::move(items);
  return v;
}

Argument N(Node* n) { return Argument::NodeRef(n); }
Argument I(int64_t v) { return Argument::Int(v); }
Argument Ints(std::vector<int64_t> vs) {
  std::vector<Argument> list;
  for (int64_t v : vs) list.push_back(Argument::Int(v));
  return Argument::List(std::move(list));
}

Node* Placeholder(Graph& g, const std::string& name, PlaceholderRole role, ValueFacts val) {
  Node* n = g.createNode(OpKind::kPlaceholder, name, name);
  n->setRole(role);
  n->val() = std::move(val);
  return n;
}

Node* Call(Graph& g, const std::string& name, const std::string& target, std::vector<Argument> args,
           ValueFacts val, Kwargs kwargs = {}) {
  Node* n = g.createNode(OpKind::kCallFunction, name, target, std::move(args), std::move(kwargs));
  n->val() = std::move(val);
  return n;
}

Node* GetItem(Graph& g, const std::string& name, Node* of, int64_t index) {
  return Call(g, name, "_operator.getitem", {N(of), I(index)}, of->val().items.at(index));
}

void Output(Graph& g, const std::vector<Node*>& values) {
  std::vector<Argument> list;
  for (Node* v : values) list.push_back(v ? N(v) : Argument::None());
  g.createNode(OpKind::kOutput, "output", "output", {Argument::List(std::move(list))});
}

// What a by-hand partition declares; turned into a Signature.
struct SavedSpec {
  std::string name;
  SavedValue::Kind kind;
  ValueFacts facts;
};

struct HandPartition {
  std::unique_ptr<Graph> forward = std::make_unique<Graph>();
  std::unique_ptr<Graph> backward = std::make_unique<Graph>();
  Signature sig;
};

// Fills the signature by the AOTAutograd runtime contract: forward outputs are
// the user outputs then the saved values (tensors first), backward inputs the
// saved symints, saved tensors, then tangents; one gradient per primal.
Signature MakeSignature(const Graph& joint, const std::vector<SavedSpec>& saved,
                        const std::vector<bool>& has_gradient) {
  Signature sig;
  sig.partitioner = "by-hand";
  const int64_t num_fwd = joint.joint().num_fwd_outputs;
  sig.num_fwd_outputs = num_fwd;
  std::vector<Node*> primals, tangents;
  for (Node* p : joint.placeholders()) {
    if (p->role() == PlaceholderRole::kPrimal) primals.push_back(p);
    if (p->role() == PlaceholderRole::kTangent) tangents.push_back(p);
  }
  for (size_t k = 0; k < primals.size(); ++k) {
    PrimalEntry e;
    e.name = primals[k]->name();
    e.forward_input_index = static_cast<int64_t>(k);
    e.gradient_index = static_cast<int64_t>(k);
    e.has_gradient = has_gradient.at(k);
    sig.primals.push_back(e);
  }
  std::vector<Node*> outs = joint.outputValues();
  for (int64_t k = 0; k < num_fwd; ++k) {
    ForwardOutputEntry e;
    e.forward_output_index = k;
    e.name = outs[k] ? outs[k]->name() : "";
    sig.forward_outputs.push_back(e);
  }
  std::vector<SavedSpec> ordered;
  for (const SavedSpec& s : saved)
    if (s.kind == SavedValue::Kind::kTensor) ordered.push_back(s);
  for (const SavedSpec& s : saved)
    if (s.kind == SavedValue::Kind::kSymInt) ordered.push_back(s);
  const int64_t num_symints = static_cast<int64_t>(saved.size()) -
      std::count_if(saved.begin(), saved.end(), [](const SavedSpec& s) { return s.kind == SavedValue::Kind::kTensor; });
  int64_t tensor_pos = 0, symint_pos = 0;
  for (size_t k = 0; k < ordered.size(); ++k) {
    SavedValue v;
    v.name = ordered[k].name;
    v.kind = ordered[k].kind;
    v.facts = ordered[k].facts;
    v.forward_output_index = num_fwd + static_cast<int64_t>(k);
    v.backward_input_index = v.kind == SavedValue::Kind::kSymInt ? symint_pos++ : num_symints + tensor_pos++;
    v.bytes = v.kind == SavedValue::Kind::kSymInt ? 1 : v.facts.nbytes();
    sig.saved.push_back(v);
  }
  for (size_t k = 0; k < tangents.size(); ++k) {
    TangentEntry t;
    t.name = tangents[k]->name();
    t.backward_input_index = static_cast<int64_t>(saved.size() + k);
    t.forward_output_index = joint.joint().tangent_outputs.empty() ? static_cast<int64_t>(k)
                                                                    : joint.joint().tangent_outputs[k];
    sig.tangents.push_back(t);
  }
  sig.forward_num_inputs = static_cast<int64_t>(primals.size());
  sig.forward_num_outputs = num_fwd + static_cast<int64_t>(saved.size());
  sig.backward_num_inputs = static_cast<int64_t>(saved.size() + tangents.size());
  sig.backward_num_outputs = static_cast<int64_t>(primals.size());
  return sig;
}

std::string Lines(const VerifyReport& r) {
  std::string out;
  for (const std::string& l : r.lines) out += "  " + l + "\n";
  return out;
}

// ---------------------------------------------------------------------------
// sin -> mm -> sum
// ---------------------------------------------------------------------------

// Joint graph of  loss = (sin(x) @ w).sum()  with x [4, 3], w [3, 5].
std::unique_ptr<Graph> SinMmSumJoint() {
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  g->setName("sin_mm_sum");
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({4, 3}));
  Node* w = Placeholder(*g, "primals_2", PlaceholderRole::kPrimal, Tensor({3, 5}));
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({}));
  Node* sin = Call(*g, "sin", "aten.sin.default", {N(x)}, Tensor({4, 3}));
  Node* mm = Call(*g, "mm", "aten.mm.default", {N(sin), N(w)}, Tensor({4, 5}));
  Node* sum = Call(*g, "sum_1", "aten.sum.default", {N(mm)}, Tensor({}));
  Node* expand = Call(*g, "expand", "aten.expand.default", {N(tan), Ints({4, 5})}, Tensor({4, 5}));
  Node* t = Call(*g, "t", "aten.t.default", {N(sin)}, Tensor({3, 4}));
  Node* mm_1 = Call(*g, "mm_1", "aten.mm.default", {N(t), N(expand)}, Tensor({3, 5}));
  Node* t_1 = Call(*g, "t_1", "aten.t.default", {N(w)}, Tensor({5, 3}));
  Node* mm_2 = Call(*g, "mm_2", "aten.mm.default", {N(expand), N(t_1)}, Tensor({4, 3}));
  Node* cos = Call(*g, "cos", "aten.cos.default", {N(x)}, Tensor({4, 3}));
  Node* mul = Call(*g, "mul", "aten.mul.Tensor", {N(mm_2), N(cos)}, Tensor({4, 3}));
  Output(*g, {sum, mul, mm_1});
  g->joint().num_fwd_outputs = 1;
  g->joint().tangent_outputs = {0};
  return g;
}

struct SinMmSumOptions {
  bool wrong_gradient = false;  // backward uses add where the joint uses mul
  bool swap_saved = false;      // sin and cos (same shape) swapped in the signature
};

// Forward saves sin, cos and w; the backward computes both gradients from them.
HandPartition SinMmSumPartition(const Graph& joint, SinMmSumOptions opt = {}) {
  HandPartition p;
  Graph& f = *p.forward;
  f.setKind(GraphKind::kForward);
  Node* x = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({4, 3}));
  Node* w = Placeholder(f, "primals_2", PlaceholderRole::kPrimal, Tensor({3, 5}));
  Node* sin = Call(f, "sin", "aten.sin.default", {N(x)}, Tensor({4, 3}));
  Node* mm = Call(f, "mm", "aten.mm.default", {N(sin), N(w)}, Tensor({4, 5}));
  Node* sum = Call(f, "sum_1", "aten.sum.default", {N(mm)}, Tensor({}));
  Node* cos = Call(f, "cos", "aten.cos.default", {N(x)}, Tensor({4, 3}));
  Output(f, {sum, sin, cos, w});

  Graph& b = *p.backward;
  b.setKind(GraphKind::kBackward);
  Node* bsin = Placeholder(b, "sin", PlaceholderRole::kSaved, Tensor({4, 3}));
  Node* bcos = Placeholder(b, "cos", PlaceholderRole::kSaved, Tensor({4, 3}));
  Node* bw = Placeholder(b, "primals_2", PlaceholderRole::kSaved, Tensor({3, 5}));
  Node* tan = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({}));
  Node* expand = Call(b, "expand", "aten.expand.default", {N(tan), Ints({4, 5})}, Tensor({4, 5}));
  Node* t = Call(b, "t", "aten.t.default", {N(bsin)}, Tensor({3, 4}));
  Node* mm_1 = Call(b, "mm_1", "aten.mm.default", {N(t), N(expand)}, Tensor({3, 5}));
  Node* t_1 = Call(b, "t_1", "aten.t.default", {N(bw)}, Tensor({5, 3}));
  Node* mm_2 = Call(b, "mm_2", "aten.mm.default", {N(expand), N(t_1)}, Tensor({4, 3}));
  Node* mul = Call(b, "mul", opt.wrong_gradient ? "aten.add.Tensor" : "aten.mul.Tensor", {N(mm_2), N(bcos)},
                   Tensor({4, 3}));
  Output(b, {mul, mm_1});

  p.sig = MakeSignature(joint,
                        {{"sin", SavedValue::Kind::kTensor, Tensor({4, 3})},
                         {"cos", SavedValue::Kind::kTensor, Tensor({4, 3})},
                         {"primals_2", SavedValue::Kind::kTensor, Tensor({3, 5})}},
                        {true, true});
  if (opt.swap_saved) std::swap(p.sig.saved[0].forward_output_index, p.sig.saved[1].forward_output_index);
  return p;
}

TEST_CASE("graphs built by hand satisfy the IR invariants", "[torch_bridge]") {
  auto joint = SinMmSumJoint();
  REQUIRE(VerifyGraph(*joint).ok());
  HandPartition p = SinMmSumPartition(*joint);
  REQUIRE(VerifyGraph(*p.forward).ok());
  REQUIRE(VerifyGraph(*p.backward).ok());
}

TEST_CASE("verify passes on a correct partition of sin/mm/sum", "[torch_bridge][verify]") {
  auto joint = SinMmSumJoint();
  HandPartition p = SinMmSumPartition(*joint);
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK(r->passed);
  // 1 forward output, 3 saved values, 2 gradients.
  CHECK(r->values_compared == 6);
  REQUIRE(r->lines.size() == 6);
  CHECK(r->lines[0] == "forward output 0 (sum_1): max abs err 0 ok");
  CHECK(r->lines[1].find("saved 0 (sin") == 0);
  CHECK(r->lines[1].find("[4, 3] float32 ok") != std::string::npos);
  CHECK(r->lines[4].find("gradient 0 (primals_1") == 0);
  for (const std::string& line : r->lines) CHECK(line.find("MISMATCH") == std::string::npos);
}

TEST_CASE("verify fails when the backward computes a different gradient", "[torch_bridge][verify]") {
  auto joint = SinMmSumJoint();
  HandPartition p = SinMmSumPartition(*joint, {.wrong_gradient = true});
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK_FALSE(r->passed);
  REQUIRE(r->lines.size() == 6);
  CHECK(r->lines[0].find(" ok") != std::string::npos);           // forward output still right
  CHECK(r->lines[4].find("gradient 0 (primals_1") == 0);
  CHECK(r->lines[4].find("MISMATCH") != std::string::npos);       // d/dx is wrong
  CHECK(r->lines[5].find(" ok") != std::string::npos);            // d/dw is right
}

TEST_CASE("verify fails when two saved values of the same shape are swapped", "[torch_bridge][verify]") {
  auto joint = SinMmSumJoint();
  HandPartition p = SinMmSumPartition(*joint, {.swap_saved = true});
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK_FALSE(r->passed);
  // Shapes and dtypes still agree with the signature; the values do not.
  CHECK(r->lines[1].find(" ok") != std::string::npos);
  CHECK(r->lines[2].find(" ok") != std::string::npos);
  CHECK(r->lines[4].find("MISMATCH") != std::string::npos);
  CHECK(r->lines[5].find("MISMATCH") != std::string::npos);
}

TEST_CASE("verify reports a saved value whose runtime shape contradicts the signature", "[torch_bridge][verify]") {
  auto joint = SinMmSumJoint();
  HandPartition p = SinMmSumPartition(*joint);
  p.sig.saved[2].facts = Tensor({5, 3});  // w is [3, 5]
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK_FALSE(r->passed);
  CHECK(r->lines[3].find("MISMATCH (signature says [5, 3] float32)") != std::string::npos);
}

TEST_CASE("verify is an error, not a mismatch, when the signature does not fit the graphs", "[torch_bridge][verify]") {
  auto joint = SinMmSumJoint();
  HandPartition p = SinMmSumPartition(*joint);
  p.sig.saved[0].backward_input_index = 9;
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  CHECK(r.status().ToString().find("'sin'") != std::string::npos);
}

TEST_CASE("verify tolerances scale", "[torch_bridge][verify]") {
  // A wrong gradient stays wrong under any sane scale; a correct one passes at 0.
  auto joint = SinMmSumJoint();
  HandPartition good = SinMmSumPartition(*joint);
  VerifyOptions exact;
  exact.tolerance_scale = 0;
  Expected<VerifyReport> r = VerifyPartition(*joint, *good.forward, *good.backward, good.sig, exact);
  REQUIRE(r.ok());
  CHECK(r->passed);  // the same ops on the same inputs: bitwise equal
}

// ---------------------------------------------------------------------------
// Multi-output ops: native_layer_norm + getitem
// ---------------------------------------------------------------------------

std::unique_ptr<Graph> LayerNormJoint() {
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({4, 5}));
  Node* w = Placeholder(*g, "primals_2", PlaceholderRole::kPrimal, Tensor({5}));
  Node* bias = Placeholder(*g, "primals_3", PlaceholderRole::kPrimal, Tensor({5}));
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({4, 5}));
  Node* ln = Call(*g, "native_layer_norm", "aten.native_layer_norm.default",
                  {N(x), Ints({5}), N(w), N(bias), Argument::Double(1e-5)},
                  Tuple({Tensor({4, 5}), Tensor({4, 1}), Tensor({4, 1})}));
  Node* out = GetItem(*g, "getitem", ln, 0);
  Node* mean = GetItem(*g, "getitem_1", ln, 1);
  Node* rstd = GetItem(*g, "getitem_2", ln, 2);
  Node* bwd = Call(*g, "native_layer_norm_backward", "aten.native_layer_norm_backward.default",
                   {N(tan), N(x), Ints({5}), N(mean), N(rstd), N(w), N(bias),
                    Argument::List({Argument::Bool(true), Argument::Bool(true), Argument::Bool(true)})},
                   Tuple({Tensor({4, 5}), Tensor({5}), Tensor({5})}));
  Node* gx = GetItem(*g, "getitem_3", bwd, 0);
  Node* gw = GetItem(*g, "getitem_4", bwd, 1);
  Node* gb = GetItem(*g, "getitem_5", bwd, 2);
  Output(*g, {out, gx, gw, gb});
  g->joint().num_fwd_outputs = 1;
  g->joint().tangent_outputs = {0};
  return g;
}

HandPartition LayerNormPartition(const Graph& joint, bool swap_mean_rstd) {
  HandPartition p;
  Graph& f = *p.forward;
  f.setKind(GraphKind::kForward);
  Node* x = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({4, 5}));
  Node* w = Placeholder(f, "primals_2", PlaceholderRole::kPrimal, Tensor({5}));
  Node* bias = Placeholder(f, "primals_3", PlaceholderRole::kPrimal, Tensor({5}));
  Node* ln = Call(f, "native_layer_norm", "aten.native_layer_norm.default",
                  {N(x), Ints({5}), N(w), N(bias), Argument::Double(1e-5)},
                  Tuple({Tensor({4, 5}), Tensor({4, 1}), Tensor({4, 1})}));
  Node* out = GetItem(f, "getitem", ln, 0);
  Node* mean = GetItem(f, "getitem_1", ln, 1);
  Node* rstd = GetItem(f, "getitem_2", ln, 2);
  Output(f, {out, x, w, bias, mean, rstd});

  Graph& b = *p.backward;
  b.setKind(GraphKind::kBackward);
  Node* bx = Placeholder(b, "primals_1", PlaceholderRole::kSaved, Tensor({4, 5}));
  Node* bw = Placeholder(b, "primals_2", PlaceholderRole::kSaved, Tensor({5}));
  Node* bb = Placeholder(b, "primals_3", PlaceholderRole::kSaved, Tensor({5}));
  Node* bmean = Placeholder(b, "getitem_1", PlaceholderRole::kSaved, Tensor({4, 1}));
  Node* brstd = Placeholder(b, "getitem_2", PlaceholderRole::kSaved, Tensor({4, 1}));
  Node* tan = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({4, 5}));
  // Keyword arguments exercise the by-name path of the stack builder.
  Node* bwd = Call(b, "native_layer_norm_backward", "aten.native_layer_norm_backward.default",
                   {N(tan), N(bx), Ints({5}), N(bmean), N(brstd)},
                   Tuple({Tensor({4, 5}), Tensor({5}), Tensor({5})}),
                   {{"weight", N(bw)}, {"bias", N(bb)},
                    {"output_mask", Argument::List({Argument::Bool(true), Argument::Bool(true), Argument::Bool(true)})}});
  Node* gx = GetItem(b, "getitem_3", bwd, 0);
  Node* gw = GetItem(b, "getitem_4", bwd, 1);
  Node* gb = GetItem(b, "getitem_5", bwd, 2);
  Output(b, {gx, gw, gb});

  p.sig = MakeSignature(joint,
                        {{"primals_1", SavedValue::Kind::kTensor, Tensor({4, 5})},
                         {"primals_2", SavedValue::Kind::kTensor, Tensor({5})},
                         {"primals_3", SavedValue::Kind::kTensor, Tensor({5})},
                         {"getitem_1", SavedValue::Kind::kTensor, Tensor({4, 1})},
                         {"getitem_2", SavedValue::Kind::kTensor, Tensor({4, 1})}},
                        {true, true, true});
  if (swap_mean_rstd) std::swap(p.sig.saved[3].forward_output_index, p.sig.saved[4].forward_output_index);
  return p;
}

TEST_CASE("verify runs multi-output ops through getitem", "[torch_bridge][verify]") {
  auto joint = LayerNormJoint();
  REQUIRE(VerifyGraph(*joint).ok());
  {
    HandPartition p = LayerNormPartition(*joint, false);
    REQUIRE(VerifyGraph(*p.backward).ok());
    Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 7});
    REQUIRE(r.ok());
    INFO(Lines(r.value()));
    CHECK(r->passed);
    CHECK(r->values_compared == 1 + 5 + 3);
  }
  {
    HandPartition p = LayerNormPartition(*joint, true);
    Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 7});
    REQUIRE(r.ok());
    INFO(Lines(r.value()));
    CHECK_FALSE(r->passed);
  }
}

TEST_CASE("verify runs aten.max.dim and its gradient", "[torch_bridge][verify]") {
  // y = max(x, dim=1).values; dx = value_selector_backward-like scatter via
  // aten.zeros + aten.scatter.src? Simplest exact form AOTAutograd emits:
  // unsqueeze grad and index, then aten.scatter on zeros.
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({3, 6}));
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({3}));
  Node* mx = Call(*g, "max_1", "aten.max.dim", {N(x), I(1)}, Tuple({Tensor({3}), Tensor({3}, DType::kInt64)}));
  Node* values = GetItem(*g, "getitem", mx, 0);
  Node* indices = GetItem(*g, "getitem_1", mx, 1);
  Node* ut = Call(*g, "unsqueeze", "aten.unsqueeze.default", {N(tan), I(1)}, Tensor({3, 1}));
  Node* ui = Call(*g, "unsqueeze_1", "aten.unsqueeze.default", {N(indices), I(1)}, Tensor({3, 1}, DType::kInt64));
  Node* zeros = Call(*g, "zeros", "aten.zeros.default", {Ints({3, 6})}, Tensor({3, 6}),
                     {{"dtype", Argument::OfDType(DType::kFloat32)}, {"layout", Argument::Layout("strided")},
                      {"device", Argument::Device("cpu")}, {"pin_memory", Argument::Bool(false)}});
  Node* scatter = Call(*g, "scatter", "aten.scatter.src", {N(zeros), I(1), N(ui), N(ut)}, Tensor({3, 6}));
  Output(*g, {values, scatter});
  g->joint().num_fwd_outputs = 1;
  g->joint().tangent_outputs = {0};
  REQUIRE(VerifyGraph(*g).ok());

  HandPartition p;
  {
    Graph& f = *p.forward;
    Node* fx = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({3, 6}));
    Node* fmx = Call(f, "max_1", "aten.max.dim", {N(fx), I(1)}, Tuple({Tensor({3}), Tensor({3}, DType::kInt64)}));
    Node* fv = GetItem(f, "getitem", fmx, 0);
    Node* fi = GetItem(f, "getitem_1", fmx, 1);
    Output(f, {fv, fi});
    Graph& b = *p.backward;
    Node* bi = Placeholder(b, "getitem_1", PlaceholderRole::kSaved, Tensor({3}, DType::kInt64));
    Node* bt = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({3}));
    Node* but = Call(b, "unsqueeze", "aten.unsqueeze.default", {N(bt), I(1)}, Tensor({3, 1}));
    Node* bui = Call(b, "unsqueeze_1", "aten.unsqueeze.default", {N(bi), I(1)}, Tensor({3, 1}, DType::kInt64));
    Node* bz = Call(b, "zeros", "aten.zeros.default", {Ints({3, 6})}, Tensor({3, 6}),
                    {{"dtype", Argument::OfDType(DType::kFloat32)}, {"device", Argument::Device("cpu")}});
    Node* bs = Call(b, "scatter", "aten.scatter.src", {N(bz), I(1), N(bui), N(but)}, Tensor({3, 6}));
    Output(b, {bs});
  }
  p.sig = MakeSignature(*g, {{"getitem_1", SavedValue::Kind::kTensor, Tensor({3}, DType::kInt64)}}, {true});
  Expected<VerifyReport> r = VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 3});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK(r->passed);
  CHECK(r->lines[1].find("[3] int64 ok") != std::string::npos);
}

// ---------------------------------------------------------------------------
// SymInts: aten.sym_size.int and _operator arithmetic, saved symints
// ---------------------------------------------------------------------------

std::unique_ptr<Graph> SymSizeJoint() {
  // x: [s0, 3];  y = x.view(s0 * 3) ** 2;  dx = (2 * t * y_base).view(s0, 3)
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  g->symbols()["s0"] = 4;
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({Dim{4, "s0"}, Dim::Static(3)}));
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({Dim{12, "3*s0"}}));
  Node* s0 = Call(*g, "sym_size_int", "aten.sym_size.int", {N(x), I(0)}, SymInt("s0", 4));
  Node* s1 = Call(*g, "sym_size_int_1", "aten.sym_size.int", {N(x), I(1)}, SymInt("3", 3));
  Node* numel = Call(*g, "mul", "_operator.mul", {N(s0), N(s1)}, SymInt("3*s0", 12));
  Node* view = Call(*g, "view", "aten.view.default", {N(x), Argument::List({N(numel)})}, Tensor({Dim{12, "3*s0"}}));
  Node* sq = Call(*g, "mul_1", "aten.mul.Tensor", {N(view), N(view)}, Tensor({Dim{12, "3*s0"}}));
  Node* m2 = Call(*g, "mul_2", "aten.mul.Tensor", {N(tan), N(view)}, Tensor({Dim{12, "3*s0"}}));
  Node* twice = Call(*g, "add", "aten.add.Tensor", {N(m2), N(m2)}, Tensor({Dim{12, "3*s0"}}));
  Node* back = Call(*g, "view_1", "aten.view.default", {N(twice), Argument::List({N(s0), N(s1)})},
                    Tensor({Dim{4, "s0"}, Dim::Static(3)}));
  Output(*g, {sq, back});
  g->joint().num_fwd_outputs = 1;
  g->joint().tangent_outputs = {0};
  return g;
}

HandPartition SymSizePartition(const Graph& joint, bool wrong_symint_order) {
  HandPartition p;
  Graph& f = *p.forward;
  Node* x = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({Dim{4, "s0"}, Dim::Static(3)}));
  Node* s0 = Call(f, "sym_size_int", "aten.sym_size.int", {N(x), I(0)}, SymInt("s0", 4));
  Node* s1 = Call(f, "sym_size_int_1", "aten.sym_size.int", {N(x), I(1)}, SymInt("3", 3));
  Node* numel = Call(f, "mul", "_operator.mul", {N(s0), N(s1)}, SymInt("3*s0", 12));
  Node* view = Call(f, "view", "aten.view.default", {N(x), Argument::List({N(numel)})}, Tensor({Dim{12, "3*s0"}}));
  Node* sq = Call(f, "mul_1", "aten.mul.Tensor", {N(view), N(view)}, Tensor({Dim{12, "3*s0"}}));
  Output(f, {sq, view, s0, s1});

  Graph& b = *p.backward;
  Node* bs0 = Placeholder(b, "sym_size_int", PlaceholderRole::kSaved, SymInt("s0", 4));
  Node* bs1 = Placeholder(b, "sym_size_int_1", PlaceholderRole::kSaved, SymInt("3", 3));
  Node* bview = Placeholder(b, "view", PlaceholderRole::kSaved, Tensor({Dim{12, "3*s0"}}));
  Node* tan = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({Dim{12, "3*s0"}}));
  Node* m2 = Call(b, "mul_2", "aten.mul.Tensor", {N(tan), N(bview)}, Tensor({Dim{12, "3*s0"}}));
  Node* twice = Call(b, "add", "aten.add.Tensor", {N(m2), N(m2)}, Tensor({Dim{12, "3*s0"}}));
  Node* back = Call(b, "view_1", "aten.view.default", {N(twice), Argument::List({N(bs0), N(bs1)})},
                    Tensor({Dim{4, "s0"}, Dim::Static(3)}));
  Output(b, {back});

  p.sig = MakeSignature(joint,
                        {{"view", SavedValue::Kind::kTensor, Tensor({Dim{12, "3*s0"}})},
                         {"sym_size_int", SavedValue::Kind::kSymInt, SymInt("s0", 4)},
                         {"sym_size_int_1", SavedValue::Kind::kSymInt, SymInt("3", 3)}},
                        {true});
  if (wrong_symint_order) std::swap(p.sig.saved[1].forward_output_index, p.sig.saved[2].forward_output_index);
  return p;
}

TEST_CASE("verify runs sym_size and _operator arithmetic and saves symints", "[torch_bridge][verify]") {
  auto joint = SymSizeJoint();
  REQUIRE(VerifyGraph(*joint).ok());
  HandPartition p = SymSizePartition(*joint, false);
  // Backward inputs: symints first, then the tensor, then the tangent.
  CHECK(p.sig.saved[0].backward_input_index == 2);
  CHECK(p.sig.saved[1].backward_input_index == 0);
  Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK(r->passed);
  CHECK(r->lines[2].find("symint 4 ok") != std::string::npos);

  // Swapped symints: the gradient comes out [3, 4], not [4, 3].
  HandPartition bad = SymSizePartition(*joint, true);
  Expected<VerifyReport> r2 = VerifyPartition(*joint, *bad.forward, *bad.backward, bad.sig, VerifyOptions{});
  REQUIRE(r2.ok());
  INFO(Lines(r2.value()));
  CHECK_FALSE(r2->passed);
  CHECK(r2->lines.back().find("shape [3, 4], expected [4, 3]") != std::string::npos);
}

// ---------------------------------------------------------------------------
// Integer inputs, None gradients, RNG
// ---------------------------------------------------------------------------

TEST_CASE("verify draws integer inputs inside value_range and matches None gradients", "[torch_bridge][verify]") {
  // ids lie in [5, 10) and index a 5-row table after subtracting 5: ids drawn
  // outside the range (zeros, or 10 and up) make the embedding fail.
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* w = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({5, 4}));
  Node* ids = Placeholder(*g, "primals_2", PlaceholderRole::kPrimal, Tensor({16}, DType::kInt64));
  ids->meta().mutableRare().value_range = std::make_pair<int64_t, int64_t>(5, 10);
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({16, 4}));
  Node* rows = Call(*g, "sub", "aten.sub.Scalar", {N(ids), I(5)}, Tensor({16}, DType::kInt64));
  Node* emb = Call(*g, "embedding", "aten.embedding.default", {N(w), N(rows)}, Tensor({16, 4}));
  // A forward output traced on a GPU: verification maps the device to the CPU.
  Node* full = Call(*g, "full", "aten.full.default", {Ints({}), Argument::Double(2.5)}, Tensor({}),
                    {{"dtype", Argument::OfDType(DType::kFloat32)}, {"layout", Argument::Layout("strided")},
                     {"device", Argument::Device("cuda:0")}, {"pin_memory", Argument::Bool(false)}});
  Node* grad = Call(*g, "embedding_dense_backward", "aten.embedding_dense_backward.default",
                    {N(tan), N(rows), I(5), I(-1), Argument::Bool(false)}, Tensor({5, 4}));
  Output(*g, {emb, full, grad, nullptr});
  g->joint().num_fwd_outputs = 2;
  g->joint().tangent_outputs = {0};
  REQUIRE(VerifyGraph(*g).ok());

  HandPartition p;
  {
    Graph& f = *p.forward;
    Node* fw = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({5, 4}));
    Node* fids = Placeholder(f, "primals_2", PlaceholderRole::kPrimal, Tensor({16}, DType::kInt64));
    Node* frows = Call(f, "sub", "aten.sub.Scalar", {N(fids), I(5)}, Tensor({16}, DType::kInt64));
    Node* femb = Call(f, "embedding", "aten.embedding.default", {N(fw), N(frows)}, Tensor({16, 4}));
    Node* ffull = Call(f, "full", "aten.full.default", {Ints({}), Argument::Double(2.5)}, Tensor({}),
                       {{"dtype", Argument::OfDType(DType::kFloat32)}, {"device", Argument::Device("cuda:0")}});
    Output(f, {femb, ffull, frows});
    Graph& b = *p.backward;
    Node* brows = Placeholder(b, "sub", PlaceholderRole::kSaved, Tensor({16}, DType::kInt64));
    Node* bt = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({16, 4}));
    Node* bgrad = Call(b, "embedding_dense_backward", "aten.embedding_dense_backward.default",
                       {N(bt), N(brows), I(5), I(-1), Argument::Bool(false)}, Tensor({5, 4}));
    Output(b, {bgrad, nullptr});
  }
  p.sig = MakeSignature(*g, {{"sub", SavedValue::Kind::kTensor, Tensor({16}, DType::kInt64)}}, {true, false});
  Expected<VerifyReport> r = VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 11});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK(r->passed);
  CHECK(r->lines[1] == "forward output 1 (full): max abs err 0 ok");
  CHECK(r->lines.back() == "gradient 1 (primals_2, backward output 1): max abs err 0 ok");

  // A gradient where the joint graph has None is a mismatch.
  Node* out = p.backward->outputNode();
  Node* bgrad = p.backward->findNode("embedding_dense_backward");
  p.backward->setInputs(out, {Argument::List({N(bgrad), N(bgrad)})});
  Expected<VerifyReport> r2 = VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 11});
  REQUIRE(r2.ok());
  INFO(Lines(r2.value()));
  CHECK_FALSE(r2->passed);
  CHECK(r2->lines.back().find("MISMATCH (expected None, got Tensor)") != std::string::npos);
}

TEST_CASE("verify fails cleanly when integer inputs leave the range an op accepts", "[torch_bridge][verify]") {
  // The same embedding without value_range: ids are zeros, 0 - 5 is no row.
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* w = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({5, 4}));
  Node* ids = Placeholder(*g, "primals_2", PlaceholderRole::kPrimal, Tensor({16}, DType::kInt64));
  Node* rows = Call(*g, "sub", "aten.sub.Scalar", {N(ids), I(5)}, Tensor({16}, DType::kInt64));
  Node* emb = Call(*g, "embedding", "aten.embedding.default", {N(w), N(rows)}, Tensor({16, 4}));
  Output(*g, {emb, nullptr, nullptr});
  g->joint().num_fwd_outputs = 1;
  HandPartition p;
  Output(*p.forward, {});
  Output(*p.backward, {});
  Expected<VerifyReport> r = VerifyPartition(*g, *p.forward, *p.backward, MakeSignature(*g, {}, {false, false}), VerifyOptions{});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  CHECK(r.status().ToString().find("joint graph, node 'embedding'") != std::string::npos);
}

std::unique_ptr<Graph> DropoutJoint() {
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({8, 8}));
  Node* tan = Placeholder(*g, "tangents_1", PlaceholderRole::kTangent, Tensor({8, 8}));
  Node* drop = Call(*g, "native_dropout", "aten.native_dropout.default", {N(x), Argument::Double(0.5), Argument::Bool(true)},
                    Tuple({Tensor({8, 8}), Tensor({8, 8}, DType::kBool)}));
  Node* out = GetItem(*g, "getitem", drop, 0);
  Node* mask = GetItem(*g, "getitem_1", drop, 1);
  Node* grad = Call(*g, "native_dropout_backward", "aten.native_dropout_backward.default",
                    {N(tan), N(mask), Argument::Double(2.0)}, Tensor({8, 8}));
  Output(*g, {out, grad});
  g->joint().num_fwd_outputs = 1;
  g->joint().tangent_outputs = {0};
  return g;
}

TEST_CASE("verify seeds the RNG alike for the joint and the forward run", "[torch_bridge][verify]") {
  auto joint = DropoutJoint();
  for (bool recompute_in_backward : {false, true}) {
    HandPartition p;
    Graph& f = *p.forward;
    Node* x = Placeholder(f, "primals_1", PlaceholderRole::kPrimal, Tensor({8, 8}));
    Node* drop = Call(f, "native_dropout", "aten.native_dropout.default", {N(x), Argument::Double(0.5), Argument::Bool(true)},
                      Tuple({Tensor({8, 8}), Tensor({8, 8}, DType::kBool)}));
    Node* out = GetItem(f, "getitem", drop, 0);
    Node* mask = GetItem(f, "getitem_1", drop, 1);
    Graph& b = *p.backward;
    Node* tan = nullptr;
    Node* bmask = nullptr;
    if (recompute_in_backward) {
      // Wrong: a second draw of the random mask differs from the forward's.
      Output(f, {out, x});
      Node* bx = Placeholder(b, "primals_1", PlaceholderRole::kSaved, Tensor({8, 8}));
      tan = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({8, 8}));
      Node* bdrop = Call(b, "native_dropout", "aten.native_dropout.default", {N(bx), Argument::Double(0.5), Argument::Bool(true)},
                         Tuple({Tensor({8, 8}), Tensor({8, 8}, DType::kBool)}));
      bmask = GetItem(b, "getitem_1", bdrop, 1);
      p.sig = MakeSignature(*joint, {{"primals_1", SavedValue::Kind::kTensor, Tensor({8, 8})}}, {true});
    } else {
      Output(f, {out, mask});
      bmask = Placeholder(b, "getitem_1", PlaceholderRole::kSaved, Tensor({8, 8}, DType::kBool));
      tan = Placeholder(b, "tangents_1", PlaceholderRole::kTangent, Tensor({8, 8}));
      p.sig = MakeSignature(*joint, {{"getitem_1", SavedValue::Kind::kTensor, Tensor({8, 8}, DType::kBool)}}, {true});
    }
    Node* grad = Call(b, "native_dropout_backward", "aten.native_dropout_backward.default",
                      {N(tan), N(bmask), Argument::Double(2.0)}, Tensor({8, 8}));
    Output(b, {grad});
    Expected<VerifyReport> r = VerifyPartition(*joint, *p.forward, *p.backward, p.sig, VerifyOptions{.seed = 5});
    REQUIRE(r.ok());
    INFO("recompute_in_backward=" << recompute_in_backward << "\n" << Lines(r.value()));
    CHECK(r->lines[0] == "forward output 0 (getitem): max abs err 0 ok");
    CHECK(r->passed == !recompute_in_backward);
  }
}

TEST_CASE("verify converts list arguments: Tensor[], Tensor?[], Scalar[], int[] from an int", "[torch_bridge][verify]") {
  // y = x[:, idx] summed over dim 1 (int[1] given as a bare int), plus
  // _foreach_add([x, x], [1, 2.5]) whose Tensor[] result getitem indexes.
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({3, 4}));
  Node* idx = Placeholder(*g, "primals_2", PlaceholderRole::kPrimal, Tensor({2}, DType::kInt64));
  idx->meta().mutableRare().value_range = std::make_pair<int64_t, int64_t>(0, 4);
  Node* picked = Call(*g, "index", "aten.index.Tensor", {N(x), Argument::List({Argument::None(), N(idx)})},
                      Tensor({3, 2}));
  Node* sum = Call(*g, "sum_1", "aten.sum.dim_IntList", {N(picked), I(1)}, Tensor({3}));
  Node* fe = Call(*g, "_foreach_add", "aten._foreach_add.ScalarList",
                  {Argument::List({N(x), N(x)}), Argument::List({I(1), Argument::Double(2.5)})},
                  Tuple({Tensor({3, 4}), Tensor({3, 4})}));
  Node* a = GetItem(*g, "getitem", fe, 0);
  Node* b = GetItem(*g, "getitem_1", fe, 1);
  Node* ab = Call(*g, "mul", "aten.mul.Tensor", {N(a), N(b)}, Tensor({3, 4}));
  Output(*g, {sum, ab, nullptr, nullptr});
  g->joint().num_fwd_outputs = 2;

  // The forward recomputes the same; the backward has nothing to do.
  auto f = CloneGraph(*g);
  f->setKind(GraphKind::kForward);
  f->joint() = JointFacts{};
  f->setInputs(f->outputNode(), {Argument::List({N(f->findNode("sum_1")), N(f->findNode("mul"))})});
  HandPartition p;
  p.forward = std::move(f);
  Output(*p.backward, {nullptr, nullptr});
  p.sig = MakeSignature(*g, {}, {false, false});
  Expected<VerifyReport> r = VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{});
  REQUIRE(r.ok());
  INFO(Lines(r.value()));
  CHECK(r->passed);
  CHECK(r->values_compared == 4);
}

// ---------------------------------------------------------------------------
// Errors: unrunnable graphs are bad input naming the node, never exceptions
// ---------------------------------------------------------------------------

// A joint graph with one op between a primal and the output, plus a trivially
// matching partition, to probe the interpreter's error paths.
Expected<VerifyReport> RunOneOp(const std::string& target, std::vector<Argument> extra_args, OpKind kind = OpKind::kCallFunction) {
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({2, 3}));
  std::vector<Argument> args = {N(x)};
  for (Argument& a : extra_args) args.push_back(std::move(a));
  Node* y = g->createNode(kind, "y", target, std::move(args));
  y->val() = Tensor({2, 3});
  Output(*g, {y, nullptr});
  g->joint().num_fwd_outputs = 1;
  HandPartition p;
  Node* fx = Placeholder(*p.forward, "primals_1", PlaceholderRole::kPrimal, Tensor({2, 3}));
  Output(*p.forward, {fx});
  Output(*p.backward, {nullptr});
  p.sig = MakeSignature(*g, {}, {false});
  return VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{});
}

// joint: y = primals_1 * c where c is a get_attr constant; the forward computes y
// from the same constant (both graphs carry it), the backward returns nothing.
Expected<VerifyReport> RunWithConstant(const Constant& c) {
  auto g = std::make_unique<Graph>();
  g->setKind(GraphKind::kJoint);
  Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({3}));
  Node* k = g->createNode(OpKind::kGetAttr, "_tensor_constant0", "_tensor_constant0");
  k->val() = Tensor({3});
  Node* y = Call(*g, "y", "aten.mul.Tensor", {N(x), N(k)}, Tensor({3}));
  Output(*g, {y, nullptr});
  g->joint().num_fwd_outputs = 1;
  g->constants()["_tensor_constant0"] = c;
  HandPartition p;
  Node* fx = Placeholder(*p.forward, "primals_1", PlaceholderRole::kPrimal, Tensor({3}));
  Node* fk = p.forward->createNode(OpKind::kGetAttr, "_tensor_constant0", "_tensor_constant0");
  fk->val() = Tensor({3});
  // The forward multiplies by 2 * c: a wrong partition, unless c is zero.
  Node* two = Call(*p.forward, "two", "aten.add.Tensor", {N(fk), N(fk)}, Tensor({3}));
  Node* fy = Call(*p.forward, "y", "aten.mul.Tensor", {N(fx), N(two)}, Tensor({3}));
  p.forward->constants()["_tensor_constant0"] = c;
  Output(*p.forward, {fy});
  Output(*p.backward, {nullptr});
  p.sig = MakeSignature(*g, {}, {false});
  return VerifyPartition(*g, *p.forward, *p.backward, p.sig, VerifyOptions{});
}

TEST_CASE("verify runs get_attr constants with their data", "[torch_bridge][verify]") {
  Constant c;
  c.facts.dtype = DType::kFloat32;
  c.facts.shape = {Dim::Static(3)};
  c.facts.stride = {Dim::Static(1)};
  SECTION("the real values reach the ops: 2*c differs from c") {
    const float values[3] = {1.0f, 2.0f, 3.0f};
    c.data = std::make_shared<const std::string>(reinterpret_cast<const char*>(values), sizeof(values));
    auto r = RunWithConstant(c);
    REQUIRE(r.ok());
    CHECK_FALSE(r->passed);
  }
  SECTION("zeros: 2*c equals c, the check passes") {
    c.data = std::make_shared<const std::string>(12, '\0');
    auto r = RunWithConstant(c);
    REQUIRE(r.ok());
    CHECK(r->passed);
  }
  SECTION("a constant held by reference has no data to run") {
    auto r = RunWithConstant(c);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().ToString().find("has no data (it was handed over by reference)") != std::string::npos);
  }
}

TEST_CASE("verify turns unrunnable ops into bad input naming the node", "[torch_bridge][verify]") {
  SECTION("unknown op") {
    auto r = RunOneOp("aten.no_such_op.default", {});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().ToString().find("node 'y'") != std::string::npos);
    CHECK(r.status().ToString().find("aten.no_such_op.default") != std::string::npos);
  }
  SECTION("dispatcher exception (shape error)") {
    auto g = std::make_unique<Graph>();
    g->setKind(GraphKind::kJoint);
    Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({2, 3}));
    Node* y = Call(*g, "y", "aten.mm.default", {N(x), N(x)}, Tensor({2, 3}));
    Output(*g, {y, nullptr});
    g->joint().num_fwd_outputs = 1;
    HandPartition p;
    Output(*p.forward, {});
    Output(*p.backward, {});
    Expected<VerifyReport> r2 = VerifyPartition(*g, *p.forward, *p.backward, MakeSignature(*g, {}, {false}), VerifyOptions{});
    REQUIRE_FALSE(r2.ok());
    CHECK(r2.status().code() == ErrorCode::kBadInput);
    CHECK(r2.status().ToString().find("node 'y'") != std::string::npos);
    CHECK(r2.status().ToString().find("aten.mm.default") != std::string::npos);
  }
  SECTION("argument of a type that does not convert") {
    auto r = RunOneOp("aten.add.Tensor", {Argument::String("not a tensor")});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().ToString().find("node 'y'") != std::string::npos);
    CHECK(r.status().ToString().find("argument 'other'") != std::string::npos);
  }
  SECTION("unknown keyword argument") {
    auto g = std::make_unique<Graph>();
    g->setKind(GraphKind::kJoint);
    Node* x = Placeholder(*g, "primals_1", PlaceholderRole::kPrimal, Tensor({2, 3}));
    Node* y = Call(*g, "y", "aten.sin.default", {N(x)}, Tensor({2, 3}), {{"bogus", I(1)}});
    Output(*g, {y, nullptr});
    g->joint().num_fwd_outputs = 1;
    HandPartition p;
    Output(*p.forward, {});
    Output(*p.backward, {});
    auto r = VerifyPartition(*g, *p.forward, *p.backward, MakeSignature(*g, {}, {false}), VerifyOptions{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().ToString().find("bogus") != std::string::npos);
  }
  SECTION("get_attr of a constant the graph lacks") {
    auto r = RunOneOp("_tensor_constant0", {}, OpKind::kGetAttr);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == ErrorCode::kBadInput);
    CHECK(r.status().ToString().find("'_tensor_constant0', which the graph's constants lack") != std::string::npos);
  }
  SECTION("annotation ops run as identity") {
    auto r = RunOneOp("xla.name_tensor.default", {Argument::String("act")});
    REQUIRE(r.ok());
    CHECK(r->passed);
  }
}

// ---------------------------------------------------------------------------
// Op facts from the dispatcher
// ---------------------------------------------------------------------------

TEST_CASE("CompleteOpFactsFromDispatcher fills schemas and tags", "[torch_bridge][op_facts]") {
  auto g = SinMmSumJoint();
  Node* x = g->findNode("primals_1");
  Node* named = Call(*g, "named", "xla.name_tensor.default", {N(x), Argument::String("x")}, Tensor({4, 3}));
  Node* ckpt = Call(*g, "ckpt", "fxremat.checkpoint_name.default", {N(named), Argument::String("x")}, Tensor({4, 3}));
  Node* s = Call(*g, "sym_size_int", "aten.sym_size.int", {N(ckpt), I(0)}, SymInt("4", 4));
  Call(*g, "twice", "_operator.mul", {N(s), I(2)}, SymInt("8", 8));
  Call(*g, "drop", "aten.native_dropout.default", {N(x), Argument::Double(0.1), Argument::Bool(true)},
       Tuple({Tensor({4, 3}), Tensor({4, 3}, DType::kBool)}));
  Call(*g, "added", "aten.add.Tensor", {N(x), N(x)}, Tensor({4, 3}));
  Call(*g, "tv", "aten.t.default", {N(x)}, Tensor({3, 4}));

  Expected<bool> added = CompleteOpFactsFromDispatcher(*g);
  REQUIRE(added.ok());
  CHECK(added.value());
  const OpTable& ops = g->ops();

  REQUIRE(ops.count("aten.mm.default") == 1);
  const OpInfo& mm = ops.find("aten.mm.default")->second;
  CHECK(mm.target == "aten.mm.default");
  CHECK(mm.schema_text == "aten::mm(Tensor self, Tensor mat2) -> Tensor");
  CHECK(mm.hasTag("core"));
  CHECK(mm.schema.name == "aten::mm");
  CHECK(mm.schema.overload == "default");
  CHECK(mm.schema.arguments.size() == 2);

  CHECK(ops.find("aten.sin.default")->second.hasTag("pointwise"));
  CHECK_FALSE(ops.find("aten.mm.default")->second.hasTag("pointwise"));
  CHECK(ops.find("aten.add.Tensor")->second.schema_text ==
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  CHECK(ops.find("aten.native_dropout.default")->second.hasTag("nondeterministic_seeded"));
  CHECK(ops.find("aten.t.default")->second.schema_text == "aten::t(Tensor(a) self) -> Tensor(a)");
  CHECK(ops.find("aten.t.default")->second.schema.returnsAlias());
  CHECK(ops.find("aten.sym_size.int")->second.schema_text == "aten::sym_size.int(Tensor self, int dim) -> SymInt");

  const OpInfo& name_tensor = ops.find("xla.name_tensor.default")->second;
  CHECK(name_tensor.schema_text == "xla::name_tensor(Tensor t, str name) -> Tensor");
  CHECK(name_tensor.tags.empty());
  CHECK(ops.find("fxremat.checkpoint_name.default")->second.schema_text ==
        "fxremat::checkpoint_name(Tensor x, str name) -> Tensor");
  CHECK(ops.count("_operator.mul") == 0);

  // Nothing left to add.
  Expected<bool> again = CompleteOpFactsFromDispatcher(*g);
  REQUIRE(again.ok());
  CHECK_FALSE(again.value());
}

TEST_CASE("CompleteOpFactsFromDispatcher fills packet tags", "[torch_bridge][op_facts]") {
  // packet_tags: the union of the tags of every overload of the op's packet, as
  // the Python exporter writes it (python/fxremat/_format.py packet_tag_names).
  auto g = SinMmSumJoint();
  Node* x = g->findNode("primals_1");
  Call(*g, "added", "aten.add.Tensor", {N(x), N(x)}, Tensor({4, 3}));
  Call(*g, "rsubbed", "aten.rsub.Tensor", {N(x), N(x)}, Tensor({4, 3}));
  Call(*g, "maxed", "aten.max.dim", {N(x), I(0)}, Tuple({Tensor({3}), Tensor({3}, DType::kInt64)}));
  Call(*g, "tv", "aten.t.default", {N(x)}, Tensor({3, 4}));
  Node* named = Call(*g, "named", "xla.name_tensor.default", {N(x), Argument::String("x")}, Tensor({4, 3}));
  Call(*g, "ckpt", "fxremat.checkpoint_name.default", {N(named), Argument::String("x")}, Tensor({4, 3}));
  REQUIRE(CompleteOpFactsFromDispatcher(*g).ok());
  const OpTable& ops = g->ops();
  auto packet_tags = [&](const char* target) {
    auto it = ops.find(target);
    REQUIRE(it != ops.end());
    return it->second.packet_tags;
  };
  using Tags = std::vector<std::string>;

  // Verified in Python (torch 2.13.0), e.g. for aten.add.Tensor:
  //   sorted({t.name for o in torch.ops.aten.add.overloads()
  //           for t in getattr(torch.ops.aten.add, o).tags})
  //   == ['core', 'generated', 'out', 'pointwise', 'pt2_compliant_tag']
  // (aten.add.Scalar_out brings 'generated', aten.add.out 'out').
  CHECK(packet_tags("aten.add.Tensor") == Tags{"core", "generated", "out", "pointwise", "pt2_compliant_tag"});
  CHECK(ops.find("aten.add.Tensor")->second.packetHasTag("pointwise"));
  // The own tags are a subset; the overload itself need not be pointwise for its
  // packet to be (the reference's pointwise_ops() works by packet).
  CHECK(ops.find("aten.rsub.Tensor")->second.tags == Tags{"pt2_compliant_tag"});
  CHECK(packet_tags("aten.rsub.Tensor") == Tags{"generated", "out", "pointwise", "pt2_compliant_tag"});
  CHECK_FALSE(ops.find("aten.rsub.Tensor")->second.hasTag("pointwise"));
  CHECK(ops.find("aten.rsub.Tensor")->second.packetHasTag("pointwise"));
  CHECK(packet_tags("aten.max.dim") == Tags{"core", "out", "pointwise", "pt2_compliant_tag", "reduction"});
  CHECK(packet_tags("aten.mm.default") == Tags{"core", "out", "pt2_compliant_tag"});
  CHECK(packet_tags("aten.sin.default") == Tags{"core", "out", "pointwise", "pt2_compliant_tag"});
  CHECK(packet_tags("aten.t.default") == Tags{"pt2_compliant_tag"});  // a one-overload packet
  for (const auto& [target, info] : ops) {
    INFO(target);
    CHECK(std::is_sorted(info.packet_tags.begin(), info.packet_tags.end()));
    CHECK(std::adjacent_find(info.packet_tags.begin(), info.packet_tags.end()) == info.packet_tags.end());
    for (const std::string& tag : info.tags) CHECK(info.packetHasTag(tag));
  }
  // The built-in annotation ops are not in this process's dispatcher: no tags.
  CHECK(packet_tags("xla.name_tensor.default").empty());
  CHECK(packet_tags("fxremat.checkpoint_name.default").empty());
}

TEST_CASE("Dispatcher op facts equal the Python exporter's on every testdata graph", "[torch_bridge][op_facts]") {
  // The testdata files were written by python/fxremat/_format.py from torch's
  // Python op objects (op.tags, and the union over op.overloadpacket's overloads
  // for packet_tags); the bridge must derive the same facts from the dispatcher.
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(FXREMAT_SOURCE_DIR) / "testdata"))
    if (e.path().string().ends_with(".json.gz")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 8);
  size_t compared = 0;
  for (const std::string& file : files) {
    INFO(file);
    auto graph = LoadGraphFile(file);
    INFO(graph.status().ToString());
    REQUIRE(graph.ok());
    Graph& g = **graph;
    const OpTable from_file = g.ops();
    g.ops().clear();
    REQUIRE(CompleteOpFactsFromDispatcher(g).ok());
    for (const auto& [target, written] : from_file) {
      INFO(target);
      if (IsAnnotationOp(target)) continue;  // xla.name_tensor: registered by Python only
      auto it = g.ops().find(target);
      REQUIRE(it != g.ops().end());
      CHECK(it->second.schema_text == written.schema_text);
      CHECK(it->second.tags == written.tags);
      CHECK_FALSE(written.packet_tags.empty());  // a 1.1 file: written for every op
      CHECK(it->second.packet_tags == written.packet_tags);
      ++compared;
    }
  }
  CHECK(compared > 50);
}

TEST_CASE("CompleteOpFactsFromDispatcher keeps facts a file already has", "[torch_bridge][op_facts]") {
  auto g = SinMmSumJoint();
  Expected<OpInfo> mine = MakeOpInfo("aten.mm.default", "aten::mm(Tensor self, Tensor mat2) -> Tensor", {"custom"});
  REQUIRE(mine.ok());
  g->ops().emplace("aten.mm.default", mine.value());
  REQUIRE(CompleteOpFactsFromDispatcher(*g).ok());
  CHECK(g->ops().find("aten.mm.default")->second.tags == std::vector<std::string>{"custom"});
  CHECK(g->ops().count("aten.sin.default") == 1);
}

TEST_CASE("CompleteOpFactsFromDispatcher rejects unknown ops by node", "[torch_bridge][op_facts]") {
  auto g = SinMmSumJoint();
  Node* x = g->findNode("primals_1");
  Call(*g, "bad_node", "aten.no_such_op.default", {N(x)}, Tensor({4, 3}));
  Expected<bool> r = CompleteOpFactsFromDispatcher(*g);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kBadInput);
  CHECK(r.status().ToString() ==
        "unknown op 'aten.no_such_op.default' at node 'bad_node': not registered in the libtorch dispatcher");
}

TEST_CASE("IsAnnotationOp", "[torch_bridge][op_facts]") {
  CHECK(IsAnnotationOp("xla.name_tensor.default"));
  CHECK(IsAnnotationOp("xla.offload_name.default"));
  CHECK(IsAnnotationOp("fxremat.checkpoint_name.default"));
  CHECK_FALSE(IsAnnotationOp("aten.mm.default"));
  CHECK_FALSE(IsAnnotationOp("xla.name_tensor"));
}

}  // namespace
}  // namespace fxremat

namespace fxremat {
namespace {

// Partitions of the testdata graphs that offload every saved tensor (both
// targets), and ones that recompute everything behind optimization barriers,
// still compute the joint graph's values.
TEST_CASE("verify passes on partitions with offload transfers and barriers", "[torch_bridge][verify]") {
  namespace fs = std::filesystem;
  for (const char* name : {"sin_mm", "simple_mlp", "name_tensor", "gpt2_2l"}) {
    INFO(name);
    auto loaded = LoadGraphFile((fs::path(FXREMAT_SOURCE_DIR) / "testdata" / (std::string(name) + ".json.gz")).string());
    REQUIRE(loaded.ok());
    Graph& joint = **loaded;
    REQUIRE(FoldAnnotations(joint, {}).ok());
    for (OffloadTarget target : {OffloadTarget::kTorch, OffloadTarget::kXla}) {
      Expected<Partition> p = DefaultPartition(joint);
      REQUIRE(p.ok());
      for (SavedValue& s : p->signature.saved) s.offloaded = s.kind == SavedValue::Kind::kTensor;
      Expected<bool> changed = EmitOffload(*p, target);
      INFO(changed.status().ToString());
      REQUIRE(changed.ok());
      Expected<VerifyReport> r = VerifyPartition(joint, *p->forward, *p->backward, p->signature, VerifyOptions{});
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      CHECK(r->passed);
    }
    // Save only the primals: the backward recomputes the forward behind barriers.
    std::vector<Node*> primals;
    for (Node* n : joint.placeholders())
      if (n->role() == PlaceholderRole::kPrimal) primals.push_back(n);
    Expected<Partition> p = ExtractPartition(joint, primals, "test");
    REQUIRE(p.ok());
    p->signature.saved.front().offloaded = true;
    REQUIRE(EmitOffload(*p, OffloadTarget::kXla).ok());
    Expected<bool> barriers = InsertBarriers(*p);
    INFO(barriers.status().ToString());
    REQUIRE(barriers.ok());
    CHECK(*barriers);
    Expected<VerifyReport> r = VerifyPartition(joint, *p->forward, *p->backward, p->signature, VerifyOptions{});
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK(r->passed);
  }
}

}  // namespace
}  // namespace fxremat
