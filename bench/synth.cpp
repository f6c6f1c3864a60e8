// fxremat_synth: writes a synthetic joint forward/backward graph of any size in
// fxremat's format (docs/format.md), for benchmarks.
//
//   fxremat_synth --nodes 1000000 -o bench/out/synth_1m.json.gz
//   fxremat_synth --layers 2 --batch 2 --seq 4 --dim 8 --hidden 16 -o g.json
//
// The graph is exactly what AOTAutograd traces (torch 2.13, Dynamo +
// aot_module_simplified, as fxremat.export_joint does) for a stack of L residual
// MLP blocks with an RMSNorm-style normalization, followed by `.sum()`:
//
//   def block(x):                               # x: [batch, seq, dim]
//       h = norm_w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
//       a = fc1(h)                              # Linear(dim, hidden)
//       a = torch.relu(F.gelu(a) * torch.sin(a))
//       return x + fc2(a)                       # Linear(hidden, dim)
//
// 21 forward nodes, 46 backward nodes and 5 parameters per block, so the graph
// has 72 * L + 5 nodes. bench/check_synth.py exports that module through
// fxremat.export_joint and checks that this generator produces the same document
// (names, targets, arguments, shapes, strides, storage ids, tags and op facts;
// only the stack traces differ), that fxremat.load runs it to eager autograd's
// values, and that `fxremat partition` + `fxremat verify` pass on it.
//
// The JSON is written directly (streamed into one buffer) rather than built as
// an IR graph: generating 1M nodes takes about a second plus compression.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "fxremat/serialize.h"

namespace {

using Shape = std::vector<int64_t>;

// Op facts as torch 2.13 prints them: str(op._schema), op.tags, and the union of
// tags over the overload packet (what fxremat.export_joint writes).
struct OpFact {
  const char* target;
  const char* schema;
  const char* tags;         // JSON array text
  const char* packet_tags;  // JSON array text
};

constexpr OpFact kOps[] = {
    {"aten.add.Tensor", "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","generated","out","pointwise","pt2_compliant_tag"])"},
    {"aten.addmm.default",
     "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
     R"(["core","pt2_compliant_tag"])", R"(["core","out","pt2_compliant_tag"])"},
    {"aten.cos.default", "aten::cos(Tensor self) -> Tensor", R"(["core","pointwise","pt2_compliant_tag"])",
     R"(["core","out","pointwise","pt2_compliant_tag"])"},
    {"aten.detach.default", "aten::detach(Tensor(a) self) -> Tensor(a)", R"(["pt2_compliant_tag"])",
     R"(["pt2_compliant_tag"])"},
    {"aten.div.Scalar", "aten::div.Scalar(Tensor self, Scalar other) -> Tensor",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","generated","out","pointwise","pt2_compliant_tag"])"},
    {"aten.expand.default", "aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
     R"(["core","pt2_compliant_tag"])", R"(["core","pt2_compliant_tag"])"},
    {"aten.gelu.default", R"(aten::gelu(Tensor self, *, str approximate=\"none\") -> Tensor)",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","out","pointwise","pt2_compliant_tag"])"},
    {"aten.gelu_backward.default",
     R"(aten::gelu_backward(Tensor grad_output, Tensor self, *, str approximate=\"none\") -> Tensor)",
     R"(["pointwise","pt2_compliant_tag"])", R"(["out","pointwise","pt2_compliant_tag"])"},
    {"aten.mean.dim",
     "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
     R"(["core","pt2_compliant_tag","reduction"])", R"(["core","out","pt2_compliant_tag","reduction"])"},
    {"aten.mm.default", "aten::mm(Tensor self, Tensor mat2) -> Tensor", R"(["core","pt2_compliant_tag"])",
     R"(["core","out","pt2_compliant_tag"])"},
    {"aten.mul.Scalar", "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","generated","out","pointwise","pt2_compliant_tag"])"},
    {"aten.mul.Tensor", "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","generated","out","pointwise","pt2_compliant_tag"])"},
    {"aten.pow.Tensor_Scalar", "aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
     R"(["core","pointwise","pt2_compliant_tag"])", R"(["core","out","pointwise","pt2_compliant_tag"])"},
    {"aten.relu.default", "aten::relu(Tensor self) -> Tensor", R"(["core","pointwise","pt2_compliant_tag"])",
     R"(["core","generated","out","pointwise","pt2_compliant_tag"])"},
    {"aten.rsqrt.default", "aten::rsqrt(Tensor self) -> Tensor", R"(["core","pointwise","pt2_compliant_tag"])",
     R"(["core","out","pointwise","pt2_compliant_tag"])"},
    {"aten.sin.default", "aten::sin(Tensor self) -> Tensor", R"(["core","pointwise","pt2_compliant_tag"])",
     R"(["core","out","pointwise","pt2_compliant_tag"])"},
    {"aten.sum.default", "aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
     R"(["pt2_compliant_tag","reduction"])", R"(["core","generated","out","pt2_compliant_tag","reduction"])"},
    {"aten.sum.dim_IntList",
     "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
     R"(["core","pt2_compliant_tag","reduction"])", R"(["core","generated","out","pt2_compliant_tag","reduction"])"},
    {"aten.t.default", "aten::t(Tensor(a) self) -> Tensor(a)", R"(["pt2_compliant_tag"])",
     R"(["pt2_compliant_tag"])"},
    {"aten.threshold_backward.default",
     "aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
     R"(["pointwise","pt2_compliant_tag"])", R"(["out","pointwise","pt2_compliant_tag"])"},
    {"aten.view.default", "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
     R"(["core","pt2_compliant_tag"])", R"(["core","pt2_compliant_tag"])"},
};

Shape Contiguous(const Shape& shape) {
  Shape stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * std::max<int64_t>(shape[i], 1);
  return stride;
}

// A value in the graph: its node name and tensor facts.
struct Value {
  std::string name;
  Shape shape, stride;
  int64_t storage = -1;
};

std::string Ref(const Value& v) { return fmt::format(R"({{"node":"{}"}})", v.name); }
std::string List(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ",")); }

class Writer {
 public:
  explicit Writer(size_t reserve) { out_.reserve(reserve); }

  // FX's naming: base, base_1, base_2, ...; a base that shadows a Python builtin
  // (pow, sum) starts at base_1.
  std::string Name(std::string_view base) {
    int64_t& n = counters_[std::string(base)];
    if (n == 0 && base != "pow" && base != "sum") {
      ++n;
      return std::string(base);
    }
    if (n == 0) n = 1;
    return fmt::format("{}_{}", base, n++);
  }

  void Header(const std::string& name) {
    fmt::format_to(std::back_inserter(out_),
                   R"({{"format":"fxremat.graph","version":[{},{}],"name":"{}","kind":"joint",)"
                   R"("joint":{{"num_fwd_outputs":1,"output_paths":["[0]"],"tangent_outputs":[0]}},"ops":{{)",
                   fxremat::kFormatMajorVersion, fxremat::kFormatMinorVersion, name);
    bool first = true;
    for (const OpFact& op : kOps) {
      fmt::format_to(std::back_inserter(out_), R"({}"{}":{{"schema":"{}","tags":{},"packet_tags":{}}})",
                     first ? "" : ",", op.target, op.schema, op.tags, op.packet_tags);
      first = false;
    }
    out_ += R"(},"nodes":[)";
  }

  Value Placeholder(const std::string& name, const std::string& role, const std::string& path,
                    const Shape& shape, bool requires_grad, const char* tag) {
    Value v{name, shape, Contiguous(shape), next_storage_++};
    Sep();
    fmt::format_to(std::back_inserter(out_), R"({{"name":"{}","op":"placeholder","target":"{}","role":"{}",)", name,
                   name, role);
    if (!path.empty()) fmt::format_to(std::back_inserter(out_), R"("path":"{}",)", path);
    Meta(v, requires_grad, tag);
    out_ += '}';
    return v;
  }

  // A call_function node producing a fresh tensor (new storage).
  Value Call(std::string_view base, std::string_view target, std::initializer_list<std::string> args,
             const Shape& shape, const char* tag, bool requires_grad = false) {
    return Emit(base, target, args, shape, Contiguous(shape), next_storage_++, tag, requires_grad);
  }

  // A view op (view, t, detach, expand): aliases its input's storage.
  Value View(std::string_view base, std::string_view target, const Value& of,
             std::initializer_list<std::string> args, const Shape& shape, const Shape& stride, const char* tag) {
    return Emit(base, target, args, shape, stride, of.storage, tag, false);
  }

  void Output(const std::vector<const Value*>& outs) {
    Sep();
    out_ += R"({"name":"output","op":"output","target":"output","args":[[)";
    for (size_t i = 0; i < outs.size(); ++i) {
      if (i) out_ += ',';
      out_ += Ref(*outs[i]);
    }
    out_ += "]]}]}\n";
  }

  std::string& text() { return out_; }
  int64_t nodes() const { return nodes_; }

 private:
  Value Emit(std::string_view base, std::string_view target, std::initializer_list<std::string> args,
             const Shape& shape, const Shape& stride, int64_t storage, const char* tag, bool requires_grad) {
    Value v{Name(base), shape, stride, storage};
    Sep();
    fmt::format_to(std::back_inserter(out_), R"({{"name":"{}","op":"call_function","target":"{}","args":[{}],)",
                   v.name, target, fmt::join(args, ","));
    Meta(v, requires_grad, tag);
    out_ += '}';
    return v;
  }

  void Meta(const Value& v, bool requires_grad, const char* tag) {
    fmt::format_to(std::back_inserter(out_),
                   R"("meta":{{"val":{{"kind":"tensor","dtype":"float32","shape":{},"stride":{},"device":"cpu",)"
                   R"("requires_grad":{},"storage":{}}},"partitioner_tag":"{}"}})",
                   List(v.shape), List(v.stride), requires_grad ? "true" : "false", v.storage, tag);
  }

  void Sep() {
    if (nodes_++) out_ += ',';
  }

  std::string out_;
  std::unordered_map<std::string, int64_t> counters_;
  int64_t next_storage_ = 0;
  int64_t nodes_ = 0;
};

struct Config {
  int64_t layers = 0, batch = 2, seq = 128, dim = 256, hidden = 1024;
};

// Per-block values the backward reads.
struct Saved {
  Value x, norm_w, w1, b1, w2, b2;  // input and parameters
  Value rsqrt, detach, mul, view, t, view_1, gelu, sin, detach_1, view_2, t_1;
};

constexpr const char* kFw = "is_forward";
constexpr const char* kBw = "is_backward";

void Generate(Writer& w, const Config& c, const std::string& name) {
  const int64_t B = c.batch, S = c.seq, D = c.dim, H = c.hidden, T = B * S;
  const Shape x3{B, S, D}, r3{B, S, 1}, h3{B, S, H}, x2{T, D}, h2{T, H};
  w.Header(name);

  // Placeholders: parameters block by block, then the input, then the tangent.
  std::vector<Saved> blocks(static_cast<size_t>(c.layers));
  int64_t p = 0;
  auto primal = [&](const std::string& path, const Shape& shape) {
    ++p;
    return w.Placeholder(fmt::format("primals_{}", p), "primal", path, shape, true, kFw);
  };
  for (int64_t i = 0; i < c.layers; ++i) {
    Saved& s = blocks[static_cast<size_t>(i)];
    s.norm_w = primal(fmt::format("params['blocks.{}.norm_w']", i), {D});
    s.w1 = primal(fmt::format("params['blocks.{}.fc1.weight']", i), {H, D});
    s.b1 = primal(fmt::format("params['blocks.{}.fc1.bias']", i), {H});
    s.w2 = primal(fmt::format("params['blocks.{}.fc2.weight']", i), {D, H});
    s.b2 = primal(fmt::format("params['blocks.{}.fc2.bias']", i), {D});
  }
  Value x = primal("args[0]", x3);
  Value tangent = w.Placeholder("tangents_1", "tangent", "", {}, false, kBw);

  // Forward.
  for (Saved& s : blocks) {
    s.x = x;
    Value pw = w.Call("pow", "aten.pow.Tensor_Scalar", {Ref(x), "2"}, x3, kFw);
    Value mean = w.Call("mean", "aten.mean.dim", {Ref(pw), "[-1]", "true"}, r3, kFw);
    Value add = w.Call("add", "aten.add.Tensor", {Ref(mean), "1e-06"}, r3, kFw);
    s.rsqrt = w.Call("rsqrt", "aten.rsqrt.default", {Ref(add)}, r3, kFw);
    s.detach = w.View("detach", "aten.detach.default", s.rsqrt, {Ref(s.rsqrt)}, r3, s.rsqrt.stride, kFw);
    s.mul = w.Call("mul", "aten.mul.Tensor", {Ref(x), Ref(s.rsqrt)}, x3, kFw);
    Value mul_1 = w.Call("mul", "aten.mul.Tensor", {Ref(s.norm_w), Ref(s.mul)}, x3, kFw);
    s.view = w.View("view", "aten.view.default", mul_1, {Ref(mul_1), List(x2)}, x2, Contiguous(x2), kFw);
    s.t = w.View("t", "aten.t.default", s.w1, {Ref(s.w1)}, {D, H}, {1, D}, kFw);
    Value addmm = w.Call("addmm", "aten.addmm.default", {Ref(s.b1), Ref(s.view), Ref(s.t)}, h2, kFw);
    s.view_1 = w.View("view", "aten.view.default", addmm, {Ref(addmm), List(h3)}, h3, Contiguous(h3), kFw);
    s.gelu = w.Call("gelu", "aten.gelu.default", {Ref(s.view_1)}, h3, kFw);
    s.sin = w.Call("sin", "aten.sin.default", {Ref(s.view_1)}, h3, kFw);
    Value mul_2 = w.Call("mul", "aten.mul.Tensor", {Ref(s.gelu), Ref(s.sin)}, h3, kFw);
    Value relu = w.Call("relu", "aten.relu.default", {Ref(mul_2)}, h3, kFw);
    s.detach_1 = w.View("detach", "aten.detach.default", relu, {Ref(relu)}, h3, relu.stride, kFw);
    s.view_2 = w.View("view", "aten.view.default", relu, {Ref(relu), List(h2)}, h2, Contiguous(h2), kFw);
    s.t_1 = w.View("t", "aten.t.default", s.w2, {Ref(s.w2)}, {H, D}, {1, H}, kFw);
    Value addmm_1 = w.Call("addmm", "aten.addmm.default", {Ref(s.b2), Ref(s.view_2), Ref(s.t_1)}, x2, kFw);
    Value view_3 = w.View("view", "aten.view.default", addmm_1, {Ref(addmm_1), List(x3)}, x3, Contiguous(x3), kFw);
    x = w.Call("add", "aten.add.Tensor", {Ref(x), Ref(view_3)}, x3, kFw);
  }
  Value loss = w.Call("sum", "aten.sum.default", {Ref(x)}, {}, kFw, /*requires_grad=*/true);

  // Backward, last block first. g: the gradient of the block's output.
  Value g = w.View("expand", "aten.expand.default", tangent, {Ref(tangent), List(x3)}, x3, {0, 0, 0}, kBw);
  struct Grads { Value norm_w, w1, b1, w2, b2; };
  std::vector<Grads> grads(blocks.size());
  for (size_t i = blocks.size(); i-- > 0;) {
    const Saved& s = blocks[i];
    Grads& gr = grads[i];
    const bool broadcast = g.stride[2] == 0;  // the top block's gradient is the expanded scalar
    Value view_8 = w.View("view", "aten.view.default", g, {Ref(g), List(x2)}, x2,
                          broadcast ? Shape{0, 0} : Contiguous(x2), kBw);
    Value t_4 = w.View("t", "aten.t.default", s.t_1, {Ref(s.t_1)}, {D, H}, {H, 1}, kBw);
    Value mm = w.Call("mm", "aten.mm.default", {Ref(view_8), Ref(t_4)}, h2, kBw);
    Value t_5 = w.View("t", "aten.t.default", view_8, {Ref(view_8)}, {D, T}, {view_8.stride[1], view_8.stride[0]}, kBw);
    Value mm_1 = w.Call("mm", "aten.mm.default", {Ref(t_5), Ref(s.view_2)}, {D, H}, kBw);
    Value t_6 = w.View("t", "aten.t.default", mm_1, {Ref(mm_1)}, {H, D}, {1, H}, kBw);
    Value sum_2 = w.Call("sum", "aten.sum.dim_IntList", {Ref(view_8), "[0]", "true"}, {1, D}, kBw);
    gr.b2 = w.View("view", "aten.view.default", sum_2, {Ref(sum_2), List({D})}, {D}, {1}, kBw);
    gr.w2 = w.View("t", "aten.t.default", t_6, {Ref(t_6)}, {D, H}, {H, 1}, kBw);
    Value view_10 = w.View("view", "aten.view.default", mm, {Ref(mm), List(h3)}, h3, Contiguous(h3), kBw);
    Value detach_4 = w.View("detach", "aten.detach.default", s.detach_1, {Ref(s.detach_1)}, h3, Contiguous(h3), kBw);
    Value tb = w.Call("threshold_backward", "aten.threshold_backward.default", {Ref(view_10), Ref(detach_4), "0"},
                      h3, kBw);
    Value mul_6 = w.Call("mul", "aten.mul.Tensor", {Ref(tb), Ref(s.gelu)}, h3, kBw);
    Value mul_7 = w.Call("mul", "aten.mul.Tensor", {Ref(tb), Ref(s.sin)}, h3, kBw);
    Value cos = w.Call("cos", "aten.cos.default", {Ref(s.view_1)}, h3, kBw);
    Value mul_8 = w.Call("mul", "aten.mul.Tensor", {Ref(mul_6), Ref(cos)}, h3, kBw);
    Value gb = w.Call("gelu_backward", "aten.gelu_backward.default", {Ref(mul_7), Ref(s.view_1)}, h3, kBw);
    Value add_4 = w.Call("add", "aten.add.Tensor", {Ref(mul_8), Ref(gb)}, h3, kBw);
    Value view_11 = w.View("view", "aten.view.default", add_4, {Ref(add_4), List(h2)}, h2, Contiguous(h2), kBw);
    Value t_8 = w.View("t", "aten.t.default", s.t, {Ref(s.t)}, {H, D}, {D, 1}, kBw);
    Value mm_2 = w.Call("mm", "aten.mm.default", {Ref(view_11), Ref(t_8)}, x2, kBw);
    Value t_9 = w.View("t", "aten.t.default", view_11, {Ref(view_11)}, {H, T}, {1, H}, kBw);
    Value mm_3 = w.Call("mm", "aten.mm.default", {Ref(t_9), Ref(s.view)}, {H, D}, kBw);
    Value t_10 = w.View("t", "aten.t.default", mm_3, {Ref(mm_3)}, {D, H}, {1, D}, kBw);
    Value sum_3 = w.Call("sum", "aten.sum.dim_IntList", {Ref(view_11), "[0]", "true"}, {1, H}, kBw);
    gr.b1 = w.View("view", "aten.view.default", sum_3, {Ref(sum_3), List({H})}, {H}, {1}, kBw);
    gr.w1 = w.View("t", "aten.t.default", t_10, {Ref(t_10)}, {H, D}, {D, 1}, kBw);
    Value view_13 = w.View("view", "aten.view.default", mm_2, {Ref(mm_2), List(x3)}, x3, Contiguous(x3), kBw);
    Value mul_9 = w.Call("mul", "aten.mul.Tensor", {Ref(view_13), Ref(s.norm_w)}, x3, kBw);
    Value mul_10 = w.Call("mul", "aten.mul.Tensor", {Ref(view_13), Ref(s.mul)}, x3, kBw);
    Value sum_4 = w.Call("sum", "aten.sum.dim_IntList", {Ref(mul_10), "[0,1]", "true"}, {1, 1, D}, kBw);
    gr.norm_w = w.View("view", "aten.view.default", sum_4, {Ref(sum_4), List({D})}, {D}, {1}, kBw);
    Value mul_11 = w.Call("mul", "aten.mul.Tensor", {Ref(mul_9), Ref(s.x)}, x3, kBw);
    Value mul_12 = w.Call("mul", "aten.mul.Tensor", {Ref(mul_9), Ref(s.rsqrt)}, x3, kBw);
    Value sum_5 = w.Call("sum", "aten.sum.dim_IntList", {Ref(mul_11), "[2]", "true"}, r3, kBw);
    Value add_5 = w.Call("add", "aten.add.Tensor", {Ref(g), Ref(mul_12)}, x3, kBw);
    Value detach_5 = w.View("detach", "aten.detach.default", s.detach, {Ref(s.detach)}, r3, Contiguous(r3), kBw);
    Value pow_3 = w.Call("pow", "aten.pow.Tensor_Scalar", {Ref(detach_5), "3"}, r3, kBw);
    Value mul_13 = w.Call("mul", "aten.mul.Scalar", {Ref(sum_5), "-0.5"}, r3, kBw);
    Value mul_14 = w.Call("mul", "aten.mul.Tensor", {Ref(mul_13), Ref(pow_3)}, r3, kBw);
    Value expand_1 = w.View("expand", "aten.expand.default", mul_14, {Ref(mul_14), List(x3)}, x3, {S, 1, 0}, kBw);
    Value div = w.Call("div", "aten.div.Scalar", {Ref(expand_1), fmt::format("{}", D)}, x3, kBw);
    Value pow_4 = w.Call("pow", "aten.pow.Tensor_Scalar", {Ref(s.x), "1.0"}, x3, kBw);
    Value mul_15 = w.Call("mul", "aten.mul.Scalar", {Ref(pow_4), "2.0"}, x3, kBw);
    Value mul_16 = w.Call("mul", "aten.mul.Tensor", {Ref(div), Ref(mul_15)}, x3, kBw);
    g = w.Call("add", "aten.add.Tensor", {Ref(add_5), Ref(mul_16)}, x3, kBw);
  }

  // Forward output, then one gradient per primal in primal order.
  std::vector<const Value*> outs{&loss};
  for (const Grads& gr : grads) {
    for (const Value* v : {&gr.norm_w, &gr.w1, &gr.b1, &gr.w2, &gr.b2}) outs.push_back(v);
  }
  outs.push_back(&g);
  w.Output(outs);
}

[[noreturn]] void Usage(const char* why) {
  std::cerr << "fxremat_synth: " << why << "\n"
            << "usage: fxremat_synth (--nodes N | --layers L) -o FILE.json[.gz]\n"
            << "                     [--batch B] [--seq S] [--dim D] [--hidden H] [--name NAME]\n"
            << "  A joint graph of L residual MLP blocks (72 nodes each, 72*L+5 in all);\n"
            << "  --nodes picks L = max(1, round((N-5)/72)). Defaults: batch 2, seq 128,\n"
            << "  dim 256, hidden 1024. Prints one JSON line: path, nodes, layers, seconds.\n";
  std::exit(2);
}

int64_t ParseInt(const char* flag, const char* text) {
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || v <= 0) Usage(fmt::format("{} expects a positive integer", flag).c_str());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  int64_t nodes = 0;
  std::string out, name;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Usage(fmt::format("{} needs a value", a).c_str());
      return argv[++i];
    };
    if (a == "--nodes") nodes = ParseInt("--nodes", next());
    else if (a == "--layers") c.layers = ParseInt("--layers", next());
    else if (a == "--batch") c.batch = ParseInt("--batch", next());
    else if (a == "--seq") c.seq = ParseInt("--seq", next());
    else if (a == "--dim") c.dim = ParseInt("--dim", next());
    else if (a == "--hidden") c.hidden = ParseInt("--hidden", next());
    else if (a == "--name") name = next();
    else if (a == "-o" || a == "--output") out = next();
    else if (a == "-h" || a == "--help") Usage("help");
    else Usage(fmt::format("unknown argument '{}'", a).c_str());
  }
  if (out.empty()) Usage("-o FILE is required");
  if ((nodes > 0) == (c.layers > 0)) Usage("give exactly one of --nodes and --layers");
  if (nodes > 0) c.layers = std::max<int64_t>(1, std::llround(static_cast<double>(nodes - 5) / 72.0));
  if (name.empty()) name = fmt::format("synth_{}l", c.layers);

  const auto t0 = std::chrono::steady_clock::now();
  Writer w(static_cast<size_t>(c.layers) * 72 * 330 + 8192);
  Generate(w, c, name);
  const auto t1 = std::chrono::steady_clock::now();
  fxremat::Status st = fxremat::WriteFileAtomically(out, w.text());
  if (!st.ok()) {
    std::cerr << "fxremat_synth: error: " << st.ToString() << "\n";
    return 2;
  }
  const auto t2 = std::chrono::steady_clock::now();
  std::cout << fmt::format(
      R"({{"path":"{}","nodes":{},"layers":{},"json_bytes":{},"generate_s":{:.3f},"write_s":{:.3f}}})"
      "\n",
      out, w.nodes(), c.layers, w.text().size(), std::chrono::duration<double>(t1 - t0).count(),
      std::chrono::duration<double>(t2 - t1).count());
  return 0;
}
