// Numeric verification of a partition: an interpreter that runs an fxremat
// Graph op by op through the libtorch dispatcher, and VerifyPartition, which
// runs the joint graph and forward→backward on the same seeded inputs and
// compares the results.
//
// Note [Verify runs on CPU]
// Everything runs on the CPU, whatever device the graph was traced on: inputs
// are created on the CPU and Device arguments (aten.full(..., device=cuda:0))
// are mapped to the CPU. Verification asks whether the two sides compute the
// same values, which does not depend on the device, and fxremat links the CPU
// build of libtorch.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <limits>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>

#include <torch/csrc/jit/serialization/pickle.h>

#include "dispatcher_util.h"
#include "fxremat/input_ranges.h"
#include "fxremat/serialize.h"
#include "fxremat/torch_bridge.h"
#include "src/constants_io.h"

namespace fxremat {
namespace {

using c10::IValue;

// ---------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------

std::string FormatDouble(double v) {
  if (v == 0) return "0";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The hints of a shape or stride: its sizes, symbolic dims at their example values.
std::vector<int64_t> Hints(const DimVector& dims) {
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) out.push_back(d.hint);
  return out;
}

std::string FormatShape(c10::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(sizes[i]);
  }
  return out + "]";
}

std::string ErrorText(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    std::string msg = c10_error->what_without_backtrace();
    // The first line is the useful one; the rest is a C++ frame dump.
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg.resize(nl);
    return msg;
  }
  return e.what();
}

at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
#define FXREMAT_DTYPE(enumerator, name, short_name, item_size, safetensors, floating, c10_scalar_type) \
  case DType::enumerator:                                                                            \
    return at::ScalarType::c10_scalar_type;
#include "fxremat/dtypes.def"
  }
  return at::kFloat;
}

// fxremat's name of a runtime dtype ("float32"), or libtorch's for the rest.
std::string ScalarTypeName(at::ScalarType type) {
  for (DType dtype : AllDTypes())
    if (ToScalarType(dtype) == type) return std::string(DTypeName(dtype));
  return c10::toString(type);
}

std::optional<at::Layout> LayoutFromName(std::string_view name) {
  if (name == "strided") return at::kStrided;
  if (name == "sparse_coo") return at::kSparse;
  if (name == "sparse_csr") return at::kSparseCsr;
  if (name == "sparse_csc") return at::kSparseCsc;
  if (name == "sparse_bsr") return at::kSparseBsr;
  if (name == "sparse_bsc") return at::kSparseBsc;
  if (name == "_mkldnn") return at::kMkldnn;
  if (name == "jagged") return at::kJagged;
  return std::nullopt;
}

std::optional<at::MemoryFormat> MemoryFormatFromName(std::string_view name) {
  if (name == "contiguous_format") return at::MemoryFormat::Contiguous;
  if (name == "preserve_format") return at::MemoryFormat::Preserve;
  if (name == "channels_last") return at::MemoryFormat::ChannelsLast;
  if (name == "channels_last_3d") return at::MemoryFormat::ChannelsLast3d;
  return std::nullopt;
}

// See Note [Verify runs on CPU].
c10::Device VerifyDevice() { return c10::Device(c10::kCPU); }

// A placeholder's role; placeholders without one get it from the name, as
// docs/format.md describes for files.
PlaceholderRole EffectiveRole(const Node& node, bool joint) {
  if (node.role() != PlaceholderRole::kNone) return node.role();
  const std::string& t = node.target().empty() ? node.name() : node.target();
  if (t.find("tangents") != std::string::npos) return PlaceholderRole::kTangent;
  if (t.find("fwd_seed") != std::string::npos || t.find("fwd_base_offset") != std::string::npos)
    return PlaceholderRole::kFwdRng;
  if (t.find("bwd_seed") != std::string::npos || t.find("bwd_base_offset") != std::string::npos)
    return PlaceholderRole::kBwdRng;
  return joint ? PlaceholderRole::kPrimal : PlaceholderRole::kInput;
}

// ---------------------------------------------------------------------------
// Python scalar semantics for FX's SymInt arithmetic (_operator.*, math.*)
// ---------------------------------------------------------------------------

struct PyNum {
  enum Kind { kInt, kFloat, kBool } kind = kInt;
  int64_t i = 0;
  double f = 0;
  bool isIntLike() const { return kind != kFloat; }  // Python bools are ints
  double asDouble() const { return kind == kFloat ? f : static_cast<double>(i); }
};

std::optional<PyNum> ToPyNum(const IValue& v) {
  PyNum n;
  if (v.isBool()) { n.kind = PyNum::kBool; n.i = v.toBool(); return n; }
  if (v.isInt()) { n.kind = PyNum::kInt; n.i = v.toInt(); return n; }
  if (v.isDouble()) { n.kind = PyNum::kFloat; n.f = v.toDouble(); return n; }
  if (v.isSymInt()) {
    if (auto i = v.toSymInt().maybe_as_int()) { n.i = *i; return n; }
  }
  return std::nullopt;
}

int64_t PyFloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t PyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Evaluates a Python callable target; nullopt with *error set on failure.
std::optional<IValue> EvalPython(const std::string& fn, const std::vector<IValue>& args,
                                 std::string* error) {
  std::vector<PyNum> n;
  for (const IValue& a : args) {
    std::optional<PyNum> p = ToPyNum(a);
    if (!p) {
      *error = "expects numbers, got a " + a.tagKind();
      return std::nullopt;
    }
    n.push_back(*p);
  }
  auto arity = [&](size_t k) {
    if (n.size() == k) return true;
    *error = "expects " + std::to_string(k) + " argument(s), got " + std::to_string(n.size());
    return false;
  };
  auto num = [](double d) { return IValue(d); };
  auto integer = [](int64_t i) { return IValue(i); };

  // Binary arithmetic.
  static const char* const kBinary[] = {"add", "sub", "mul", "floordiv", "truediv", "mod", "pow"};
  std::string op = fn;
  for (const char* prefix : {"_operator.", "math.", "builtins.", "torch."})
    if (op.starts_with(prefix)) { op = op.substr(std::string_view(prefix).size()); break; }
  if (fn.starts_with("_operator.") &&
      std::find(std::begin(kBinary), std::end(kBinary), op) != std::end(kBinary)) {
    if (!arity(2)) return std::nullopt;
    const PyNum& a = n[0];
    const PyNum& b = n[1];
    const bool ints = a.isIntLike() && b.isIntLike();
    if (op == "add") return ints ? integer(a.i + b.i) : num(a.asDouble() + b.asDouble());
    if (op == "sub") return ints ? integer(a.i - b.i) : num(a.asDouble() - b.asDouble());
    if (op == "mul") return ints ? integer(a.i * b.i) : num(a.asDouble() * b.asDouble());
    if (op == "truediv") {
      if (b.asDouble() == 0) { *error = "division by zero"; return std::nullopt; }
      return num(a.asDouble() / b.asDouble());
    }
    if (op == "floordiv" || op == "mod") {
      if (b.asDouble() == 0) { *error = "division by zero"; return std::nullopt; }
      if (ints) return integer(op == "floordiv" ? PyFloorDiv(a.i, b.i) : PyMod(a.i, b.i));
      const double x = a.asDouble(), y = b.asDouble();
      if (op == "floordiv") return num(std::floor(x / y));
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return num(r);
    }
    // pow
    if (ints && b.i >= 0) {  // exact, by squaring (wraps on overflow like int64)
      uint64_t r = 1, base = static_cast<uint64_t>(a.i);
      for (int64_t e = b.i; e > 0; e >>= 1, base *= base)
        if (e & 1) r *= base;
      return integer(static_cast<int64_t>(r));
    }
    return num(std::pow(a.asDouble(), b.asDouble()));
  }
  if (fn.starts_with("_operator.") &&
      (op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge")) {
    if (!arity(2)) return std::nullopt;
    const PyNum& a = n[0];
    const PyNum& b = n[1];
    int c;
    if (a.isIntLike() && b.isIntLike()) c = (a.i > b.i) - (a.i < b.i);
    else c = (a.asDouble() > b.asDouble()) - (a.asDouble() < b.asDouble());
    bool r = op == "eq" ? c == 0 : op == "ne" ? c != 0 : op == "lt" ? c < 0
           : op == "le" ? c <= 0 : op == "gt" ? c > 0 : c >= 0;
    return IValue(r);
  }
  if (fn == "_operator.neg") {
    if (!arity(1)) return std::nullopt;
    return n[0].isIntLike() ? integer(-n[0].i) : num(-n[0].f);
  }
  if (fn == "_operator.pos") {
    if (!arity(1)) return std::nullopt;
    return n[0].isIntLike() ? integer(n[0].i) : num(n[0].f);
  }
  if (fn == "_operator.abs" || fn == "builtins.abs") {
    if (!arity(1)) return std::nullopt;
    return n[0].isIntLike() ? integer(n[0].i < 0 ? -n[0].i : n[0].i) : num(std::fabs(n[0].f));
  }
  if (fn == "_operator.not_" || fn == "torch.sym_not") {
    if (!arity(1)) return std::nullopt;
    return IValue(n[0].asDouble() == 0);
  }
  if (fn == "_operator.and_" || fn == "_operator.or_" || fn == "_operator.xor") {
    if (!arity(2)) return std::nullopt;
    if (!n[0].isIntLike() || !n[1].isIntLike()) { *error = "expects ints or bools"; return std::nullopt; }
    int64_t r = op == "and_" ? (n[0].i & n[1].i) : op == "or_" ? (n[0].i | n[1].i) : (n[0].i ^ n[1].i);
    if (n[0].kind == PyNum::kBool && n[1].kind == PyNum::kBool) return IValue(r != 0);
    return integer(r);
  }
  if (fn == "math.ceil" || fn == "math.floor" || fn == "math.trunc") {
    if (!arity(1)) return std::nullopt;
    if (n[0].isIntLike()) return integer(n[0].i);
    double v = op == "ceil" ? std::ceil(n[0].f) : op == "floor" ? std::floor(n[0].f) : std::trunc(n[0].f);
    return integer(static_cast<int64_t>(v));
  }
  if (fn == "math.sqrt" || fn == "torch._sym_sqrt" || fn == "math.exp" || fn == "math.log") {
    if (!arity(1)) return std::nullopt;
    double x = n[0].asDouble();
    return num(op == "exp" ? std::exp(x) : op == "log" ? std::log(x) : std::sqrt(x));
  }
  if (fn == "torch.sym_float") {
    if (!arity(1)) return std::nullopt;
    return num(n[0].asDouble());
  }
  if (fn == "torch.sym_int") {
    if (!arity(1)) return std::nullopt;
    return n[0].isIntLike() ? integer(n[0].i) : integer(static_cast<int64_t>(std::trunc(n[0].f)));
  }
  if (fn == "torch.sym_max" || fn == "torch.sym_min" || fn == "builtins.max" || fn == "builtins.min") {
    if (!arity(2)) return std::nullopt;
    const bool want_max = op.ends_with("max");
    const PyNum& a = n[0];
    const PyNum& b = n[1];
    const bool a_wins = want_max ? a.asDouble() >= b.asDouble() : a.asDouble() <= b.asDouble();
    if (a.isIntLike() && b.isIntLike()) return integer(want_max ? std::max(a.i, b.i) : std::min(a.i, b.i));
    const PyNum& w = a_wins ? a : b;
    return w.isIntLike() ? integer(w.i) : num(w.f);
  }
  *error = "unsupported Python function";
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Argument -> IValue by schema type
// ---------------------------------------------------------------------------

// Coerces a raw value (a node's runtime value or a constant) to a schema type.
// Returns nullopt with *error set when it does not fit.
std::optional<IValue> Coerce(const IValue& v, const c10::TypePtr& type, std::optional<int32_t> list_size,
                             std::string* error) {
  using K = c10::TypeKind;
  auto fail = [&](const char* expected) -> std::optional<IValue> {
    *error = std::string("expected ") + expected + ", got " + (v.isNone() ? std::string("None") : v.tagKind());
    return std::nullopt;
  };
  switch (type->kind()) {
    case K::OptionalType:
      if (v.isNone()) return IValue();
      return Coerce(v, type->castRaw<c10::OptionalType>()->getElementType(), list_size, error);
    case K::TensorType:
      if (v.isTensor()) return v;
      // A Python number where a Tensor goes (aten.add.Tensor(x, 1)): the op
      // sees it as PyTorch's Python binding passes it, a 0-dim "wrapped
      // number" tensor, which type promotion treats like a scalar.
      if (v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble()) {
        const at::Scalar scalar = v.toScalar();
        at::Tensor t = at::scalar_tensor(scalar, at::TensorOptions().dtype(scalar.type()).device(VerifyDevice()));
        t.unsafeGetTensorImpl()->set_wrapped_number(true);
        return IValue(std::move(t));
      }
      return fail("a Tensor");
    case K::IntType:
    case K::SymIntType:
    case K::ScalarTypeType:
    case K::LayoutType:
    case K::MemoryFormatType:
    case K::QSchemeType:
      if (v.isInt()) return v;
      if (v.isBool()) return IValue(static_cast<int64_t>(v.toBool()));
      if (v.isSymInt()) {
        if (auto i = v.toSymInt().maybe_as_int()) return IValue(*i);
      }
      return fail("an int");
    case K::FloatType:
    case K::SymFloatType:
      if (v.isDouble()) return v;
      if (v.isInt()) return IValue(static_cast<double>(v.toInt()));
      return fail("a float");
    case K::BoolType:
    case K::SymBoolType:
      if (v.isBool()) return v;
      if (v.isInt() && (v.toInt() == 0 || v.toInt() == 1)) return IValue(v.toInt() != 0);
      return fail("a bool");
    case K::NumberType:  // Scalar
      if (v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble()) return v;
      if (v.isSymInt()) {
        if (auto i = v.toSymInt().maybe_as_int()) return IValue(*i);
      }
      return fail("a Scalar");
    case K::ComplexType:
      if (v.isComplexDouble()) return v;
      if (v.isDouble() || v.isInt()) return IValue(c10::complex<double>(v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt()), 0));
      return fail("a complex");
    case K::StringType:
      if (v.isString()) return v;
      return fail("a str");
    case K::DeviceObjType:
      if (v.isDevice() || v.isString()) return IValue(VerifyDevice());
      return fail("a Device");
    case K::GeneratorType:
      // Graphs never carry a generator object; None means the default one.
      if (v.isNone()) return IValue();
      return fail("None for a Generator");
    case K::AnyType:
      return v;
    case K::ListType: {
      const c10::TypePtr& elem = type->castRaw<c10::ListType>()->getElementType();
      c10::impl::GenericList list(elem);
      if (v.isList() || v.isTuple()) {
        c10::ArrayRef<IValue> items = v.isList() ? v.toListRef() : v.toTupleRef().elements();
        for (const IValue& item : items) {
          std::optional<IValue> c = Coerce(item, elem, std::nullopt, error);
          if (!c) return std::nullopt;
          list.push_back(std::move(*c));
        }
        return IValue(std::move(list));
      }
      // `int[2] stride=1`: a scalar stands for a list of N copies.
      const auto ek = elem->kind();
      if ((ek == K::IntType || ek == K::SymIntType || ek == K::FloatType || ek == K::BoolType) &&
          (v.isInt() || v.isDouble() || v.isBool() || v.isSymInt())) {
        std::optional<IValue> c = Coerce(v, elem, std::nullopt, error);
        if (!c) return std::nullopt;
        for (int32_t k = 0; k < list_size.value_or(1); ++k) list.push_back(*c);
        return IValue(std::move(list));
      }
      return fail(("a list (" + type->str() + ")").c_str());
    }
    default:
      *error = "unsupported argument type '" + type->str() + "'";
      return std::nullopt;
  }
}

// Row-major strides of a contiguous tensor of these sizes.
std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) strides[d - 1] = strides[d] * std::max<int64_t>(sizes[d], 1);
  return strides;
}

// ---------------------------------------------------------------------------
// The interpreter
// ---------------------------------------------------------------------------

class Interpreter {
 private:
  // A get_attr node's value: the constant's data as a tensor of its facts.
  Expected<IValue> Constant(const Node& node) const {
    auto it = graph_.constants().find(node.target());
    if (it == graph_.constants().end())
      return Status::BadInput("get_attr of '" + node.target() + "', which the graph's constants lack", Where(node));
    const fxremat::Constant& c = it->second;
    if (c.kind != fxremat::Constant::Kind::kTensor)
      return Status::BadInput("constant '" + node.target() + "' is a " + c.type_name +
                                  " object held by reference: it cannot be run outside the process that traced it",
                              Where(node));
    if (!c.hasData())
      return Status::BadInput("constant '" + node.target() +
                                  "' has no data (it was handed over by reference); save the graph with its constants",
                              Where(node));
    const std::vector<int64_t> sizes = Hints(c.facts.shape);
    const auto options = at::TensorOptions().device(VerifyDevice()).dtype(ToScalarType(c.facts.dtype));
    const std::vector<int64_t> contiguous_strides = ContiguousStrides(sizes);
    at::Tensor contiguous = at::empty_strided(sizes, contiguous_strides, options.device(at::kCPU));
    if (!c.data->empty()) std::memcpy(contiguous.data_ptr(), c.data->data(), c.data->size());
    const std::vector<int64_t> strides =
        c.facts.stride.size() == c.facts.shape.size() ? Hints(c.facts.stride) : contiguous_strides;
    at::Tensor t = at::empty_strided(sizes, strides, options);
    t.copy_(contiguous);
    return IValue(t);
  }

 public:
  Interpreter(const Graph& graph, std::string label) : graph_(graph), label_(std::move(label)) {}

  // Runs the graph on one value per placeholder; returns the output node's entries.
  Expected<std::vector<IValue>> Run(std::vector<IValue> inputs) {
    const auto& nodes = graph_.nodes();
    env_.assign(nodes.size(), IValue());
    // Free each value after its last use, so that big graphs fit in memory.
    std::vector<size_t> last_use(nodes.size(), 0);
    for (const auto& up : nodes) {
      for (Node* user : up->users()) last_use[up->index()] = std::max(last_use[up->index()], user->index());
    }
    std::vector<std::vector<size_t>> release_after(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i)
      release_after[std::max(last_use[i], i)].push_back(i);  // unused values die at once

    size_t next_input = 0;
    for (const auto& up : nodes) {
      const Node& node = *up;
      const size_t i = node.index();
      switch (node.op()) {
        case OpKind::kPlaceholder:
          if (next_input >= inputs.size())
            return Status::Internal("more placeholders than inputs", Where(node));
          env_[i] = std::move(inputs[next_input++]);
          break;
        case OpKind::kGetAttr: {
          if (graph_.subgraphOf(node)) break;  // a subgraph: the higher-order op that takes it runs it
          Expected<IValue> v = Constant(node);
          if (!v.ok()) return v.status();
          env_[i] = std::move(v).value();
          break;
        }
        case OpKind::kCallFunction: {
          Expected<IValue> v = Call(node);
          if (!v.ok()) return v.status();
          env_[i] = std::move(v).value();
          break;
        }
        case OpKind::kOutput: {
          std::vector<IValue> outputs;
          if (!node.args().empty()) {
            const Argument& result = node.args()[0];
            if (result.kind != Argument::Kind::kList && result.kind != Argument::Kind::kNode)
              return Status::BadInput("the output node must have one argument, a list of values or one value",
                                      Where(node));
            // Note [Single-value outputs]: a subgraph may return one value itself
            const std::span<const Argument> values =
                result.kind == Argument::Kind::kNode ? std::span<const Argument>(&result, 1) : std::span(result.list);
            for (const Argument& a : values) {
              Expected<IValue> v = Raw(a, node);
              if (!v.ok()) return v.status();
              outputs.push_back(std::move(v).value());
            }
          }
          return outputs;
        }
      }
      for (size_t dead : release_after[i]) env_[dead] = IValue();
    }
    return Status::BadInput("graph has no output node", label_ + " graph");
  }

 private:
  std::string Where(const Node& node) const { return label_ + " graph, node '" + node.name() + "'"; }

  // An argument as a runtime value: constants as themselves, node references
  // as the node's value, lists as generic lists.
  Expected<IValue> Raw(const Argument& a, const Node& node) const {
    switch (a.kind) {
      case Argument::Kind::kNone: return IValue();
      case Argument::Kind::kBool: return IValue(a.int_value != 0);
      case Argument::Kind::kInt: return IValue(a.int_value);
      case Argument::Kind::kDouble: return IValue(a.double_value);
      case Argument::Kind::kComplex: return IValue(c10::complex<double>(a.double_value, a.imag_value));
      case Argument::Kind::kString: return IValue(a.text.str());
      case Argument::Kind::kDType: return IValue(ToScalarType(a.dtype()));
      case Argument::Kind::kDevice: return IValue(VerifyDevice());
      case Argument::Kind::kLayout: {
        std::optional<at::Layout> layout = LayoutFromName(a.text);
        if (!layout) return Status::BadInput("unknown layout '" + a.text.str() + "'", Where(node));
        return IValue(*layout);
      }
      case Argument::Kind::kMemoryFormat: {
        std::optional<at::MemoryFormat> format = MemoryFormatFromName(a.text);
        if (!format) return Status::BadInput("unknown memory format '" + a.text.str() + "'", Where(node));
        return IValue(*format);
      }
      case Argument::Kind::kOp: return IValue(a.text.str());  // only higher-order ops take one (CallHigherOrder)
      case Argument::Kind::kNode:
        if (a.node == nullptr || a.node->owningGraph() != &graph_ || a.node->index() >= env_.size())
          return Status::BadInput("argument refers to a node outside the graph", Where(node));
        return env_[a.node->index()];
      case Argument::Kind::kList: {
        c10::impl::GenericList list(c10::AnyType::get());
        for (const Argument& item : a.list) {
          Expected<IValue> v = Raw(item, node);
          if (!v.ok()) return v.status();
          list.push_back(std::move(v).value());
        }
        return IValue(std::move(list));
      }
      case Argument::Kind::kDict: {
        c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
        for (const Argument& item : a.list) {
          Expected<IValue> v = Raw(item.list[1], node);
          if (!v.ok()) return v.status();
          dict.insert(item.list[0].text.str(), std::move(v).value());
        }
        return IValue(std::move(dict));
      }
    }
    return IValue();
  }

  Expected<IValue> Call(const Node& node) {
    const std::string& target = node.target();
    if (node.isGetItem()) return GetItem(node);
    if (IsHigherOrderTarget(target)) return CallHigherOrder(node);
    if (IsAnnotationOp(target)) {
      if (node.args().empty()) return Status::BadInput("annotation op without an argument", Where(node));
      return Raw(node.args()[0], node);
    }
    // The xla transfer and barrier ops (passes/emit_offload, passes/insert_barriers)
    // have no CPU kernels: a transfer is a copy of the tensor, a barrier the identity.
    if (target == "xla.place_to_host.default" || target == "xla.place_to_device.default") {
      if (node.args().size() != 1) return Status::BadInput("'" + target + "' takes one tensor", Where(node));
      Expected<IValue> v = Raw(node.args()[0], node);
      if (!v.ok()) return v.status();
      if (!v.value().isTensor()) return Status::BadInput("'" + target + "' takes a tensor", Where(node));
      return IValue(v.value().toTensor().clone());
    }
    // prims.device_put (passes/emit_offload's torch target) is registered by
    // Python's torch._prims, not in libtorch: it is Tensor.to(device).
    if (target == "prims.device_put.default") {
      if (node.args().size() != 2) return Status::BadInput("'" + target + "' takes a tensor and a device", Where(node));
      Expected<IValue> v = Raw(node.args()[0], node);
      if (!v.ok()) return v.status();
      Expected<IValue> d = Raw(node.args()[1], node);
      if (!d.ok()) return d.status();
      if (!v.value().isTensor() || !d.value().isDevice())
        return Status::BadInput("'" + target + "' takes a tensor and a device", Where(node));
      return IValue(v.value().toTensor().to(d.value().toDevice()));
    }
    // The torch_async target's side-stream ops (python/fxremat/_offload_ops.py, not
    // in libtorch): a transfer is a copy of the tensor (to host, or to the device
    // named), a wait the identity of its first argument.
    if (target == "fxremat.offload.default" || target == "fxremat.reload.default") {
      const bool to_host = target == "fxremat.offload.default";
      if (node.args().size() != (to_host ? 1u : 2u))
        return Status::BadInput("'" + target + "' takes " + (to_host ? "a tensor" : "a tensor and a device"), Where(node));
      Expected<IValue> v = Raw(node.args()[0], node);
      if (!v.ok()) return v.status();
      if (!v.value().isTensor()) return Status::BadInput("'" + target + "' takes a tensor", Where(node));
      c10::Device device(c10::kCPU);
      if (!to_host) {
        Expected<IValue> d = Raw(node.args()[1], node);
        if (!d.ok()) return d.status();
        if (!d.value().isDevice()) return Status::BadInput("'" + target + "' takes a tensor and a device", Where(node));
        device = d.value().toDevice();
      }
      return IValue(v.value().toTensor().to(device, /*non_blocking=*/false, /*copy=*/true));
    }
    if (target == "fxremat.wait_tensor.default") {
      if (node.args().empty()) return Status::BadInput("'" + target + "' takes a tensor", Where(node));
      return Raw(node.args()[0], node);
    }
    if (target == "xla.optimization_barrier.default") {
      if (node.args().size() != 1) return Status::BadInput("'" + target + "' takes one list", Where(node));
      return Raw(node.args()[0], node);
    }
    if (torch_bridge::IsPythonCallableTarget(target)) {
      std::vector<IValue> args;
      for (const Argument& a : node.args()) {
        Expected<IValue> v = Raw(a, node);
        if (!v.ok()) return v.status();
        args.push_back(std::move(v).value());
      }
      if (!node.kwargs().empty())
        return Status::BadInput("'" + target + "' with keyword arguments is unsupported", Where(node));
      std::string error;
      std::optional<IValue> r = EvalPython(target, args, &error);
      if (!r) return Status::BadInput("'" + target + "': " + error, Where(node));
      return *r;
    }
    return CallDispatcher(node);
  }

  // Note [Higher-order ops] (fxremat/ir.h): the bodies run in an interpreter of
  // their own; what each op does with them is PyTorch's dense implementation.
  Expected<std::vector<IValue>> RunBody(const Node& node, const Argument& a, std::vector<IValue> inputs) {
    const Graph* body = a.is_node() ? graph_.subgraphOf(*a.node) : nullptr;
    if (!body) return Status::BadInput("'" + node.target() + "' expects a subgraph (get_attr) here", Where(node));
    Interpreter sub(*body, label_ + " graph's subgraph '" + a.node->target() + "'");
    return sub.Run(std::move(inputs));
  }

  Expected<std::vector<IValue>> RawList(const Argument& a, const Node& node) {
    std::vector<IValue> out;
    if (a.kind != Argument::Kind::kList) return Status::BadInput("expected a list of operands", Where(node));
    for (const Argument& item : a.list) {
      Expected<IValue> v = Raw(item, node);
      if (!v.ok()) return v.status();
      out.push_back(std::move(v).value());
    }
    return out;
  }

  static IValue Tuple(std::vector<IValue> items) { return IValue(c10::ivalue::Tuple::create(std::move(items))); }

  Expected<IValue> CallHigherOrder(const Node& node) {
    const std::string name = node.target().substr(std::string_view("higher_order.").size());
    const auto& args = node.args();
    auto need = [&](size_t n) -> Status {
      if (args.size() < n)
        return Status::BadInput("'" + node.target() + "' takes at least " + std::to_string(n) + " arguments",
                                Where(node));
      return Status::Ok();
    };
    if (name == "cond") {  // cond(pred, true_graph, false_graph, operands)
      FXREMAT_RETURN_IF_ERROR(need(4));
      Expected<IValue> pred = Raw(args[0], node);
      if (!pred.ok()) return pred.status();
      bool take_true = false;
      if (pred.value().isTensor()) take_true = pred.value().toTensor().item<bool>();
      else if (pred.value().isBool()) take_true = pred.value().toBool();
      else if (std::optional<PyNum> n = ToPyNum(pred.value())) take_true = n->asDouble() != 0;
      else return Status::BadInput("cond's predicate is neither a tensor nor a scalar", Where(node));
      Expected<std::vector<IValue>> operands = RawList(args[3], node);
      if (!operands.ok()) return operands.status();
      Expected<std::vector<IValue>> outs = RunBody(node, args[take_true ? 1 : 2], std::move(operands).value());
      if (!outs.ok()) return outs.status();
      return Tuple(std::move(outs).value());
    }
    if (name == "invoke_subgraph") {  // invoke_subgraph(body, identifier, *operands)
      FXREMAT_RETURN_IF_ERROR(need(2));
      FXREMAT_ASSIGN_OR_RETURN(std::vector<IValue> operands, RawArgs(node, 2));
      Expected<std::vector<IValue>> outs = RunBody(node, args[0], std::move(operands));
      if (!outs.ok()) return outs.status();
      return Tuple(std::move(outs).value());
    }
    if (name == "map_impl") {  // map_impl(body, xs, pos_args): body over slices of xs, stacked
      FXREMAT_RETURN_IF_ERROR(need(3));
      Expected<std::vector<IValue>> xs = RawList(args[1], node);
      if (!xs.ok()) return xs.status();
      Expected<std::vector<IValue>> pos = RawList(args[2], node);
      if (!pos.ok()) return pos.status();
      if (xs.value().empty() || !xs.value()[0].isTensor())
        return Status::BadInput("map_impl maps over tensors", Where(node));
      const int64_t n = xs.value()[0].toTensor().size(0);
      std::vector<std::vector<at::Tensor>> per_output;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<IValue> inputs;
        for (const IValue& x : xs.value()) inputs.emplace_back(x.toTensor().select(0, i));
        for (const IValue& p : pos.value()) inputs.push_back(p);
        Expected<std::vector<IValue>> outs = RunBody(node, args[0], std::move(inputs));
        if (!outs.ok()) return outs.status();
        per_output.resize(outs.value().size());
        for (size_t k = 0; k < outs.value().size(); ++k) per_output[k].push_back(outs.value()[k].toTensor());
      }
      std::vector<IValue> stacked;
      for (const auto& pieces : per_output) stacked.emplace_back(at::stack(pieces));
      return Tuple(std::move(stacked));
    }
    if (name == "scan") {  // scan(combine_fn, init, xs, additional_inputs) -> (*final carries, *stacked ys)
      FXREMAT_RETURN_IF_ERROR(need(4));
      Expected<std::vector<IValue>> init = RawList(args[1], node);
      if (!init.ok()) return init.status();
      Expected<std::vector<IValue>> xs = RawList(args[2], node);
      if (!xs.ok()) return xs.status();
      Expected<std::vector<IValue>> extra = RawList(args[3], node);
      if (!extra.ok()) return extra.status();
      std::vector<IValue> carry = std::move(init).value();
      if (xs.value().empty() || !xs.value()[0].isTensor()) return Status::BadInput("scan scans over tensors", Where(node));
      const int64_t n = xs.value()[0].toTensor().size(0);
      std::vector<std::vector<at::Tensor>> ys;
      for (int64_t i = 0; i < n; ++i) {
        std::vector<IValue> inputs = carry;
        for (const IValue& x : xs.value()) inputs.emplace_back(x.toTensor().select(0, i));
        for (const IValue& a : extra.value()) inputs.push_back(a);
        Expected<std::vector<IValue>> outs = RunBody(node, args[0], std::move(inputs));
        if (!outs.ok()) return outs.status();
        if (outs.value().size() < carry.size())
          return Status::BadInput("scan's body returns fewer values than it carries", Where(node));
        for (size_t k = 0; k < carry.size(); ++k) carry[k] = outs.value()[k];
        ys.resize(outs.value().size() - carry.size());
        for (size_t k = carry.size(); k < outs.value().size(); ++k)
          ys[k - carry.size()].push_back(outs.value()[k].toTensor());
      }
      std::vector<IValue> items = carry;
      for (const auto& pieces : ys) items.emplace_back(at::stack(pieces));
      return Tuple(std::move(items));
    }
    if (name == "with_effects") {  // with_effects(token, op, *args, **kwargs) -> (token, *results)
      FXREMAT_RETURN_IF_ERROR(need(2));
      if (args[1].kind != Argument::Kind::kOp)
        return Status::BadInput("with_effects' second argument must be an operator", Where(node));
      Expected<IValue> token = Raw(args[0], node);
      if (!token.ok()) return token.status();
      FXREMAT_ASSIGN_OR_RETURN(std::vector<IValue> op_args, RawArgs(node, 2));
      FXREMAT_ASSIGN_OR_RETURN(auto op_kwargs, RawKwargs(node));
      Expected<IValue> result = CallOp(node, args[1].text, std::move(op_args), std::move(op_kwargs));
      if (!result.ok()) return result.status();
      std::vector<IValue> items{token.value()};
      if (result.value().isTuple())
        for (const IValue& r : result.value().toTupleRef().elements()) items.push_back(r);
      else
        items.push_back(result.value());
      return Tuple(std::move(items));
    }
    if (name == "auto_functionalized_v2") return CallAutoFunctionalized(node);
    // Note [Replaying random ops] (passes/functionalize_rng.h). The interpreter
    // runs every device's op on the CPU, so the CPU generator is the one to read
    // and set, whatever device the graph names.
    if (name == "run_and_save_rng_state") {  // (op, *args, **kwargs) -> (state, op's result)
      FXREMAT_RETURN_IF_ERROR(need(1));
      if (args[0].kind != Argument::Kind::kOp)
        return Status::BadInput("run_and_save_rng_state's first argument must be an operator", Where(node));
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      at::Tensor state;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        state = gen.get_state();
      }
      FXREMAT_ASSIGN_OR_RETURN(std::vector<IValue> op_args, RawArgs(node, 1));
      FXREMAT_ASSIGN_OR_RETURN(auto op_kwargs, RawKwargs(node));
      Expected<IValue> result = CallOp(node, args[0].text, std::move(op_args), std::move(op_kwargs));
      if (!result.ok()) return result.status();
      return Tuple({IValue(state), std::move(result).value()});
    }
    if (name == "run_with_rng_state") {  // (state, op, *args, **kwargs) -> op's result, generator restored
      FXREMAT_RETURN_IF_ERROR(need(2));
      if (args[1].kind != Argument::Kind::kOp)
        return Status::BadInput("run_with_rng_state's second argument must be an operator", Where(node));
      Expected<IValue> state = Raw(args[0], node);
      if (!state.ok()) return state.status();
      if (!state.value().isTensor()) return Status::BadInput("run_with_rng_state's state is not a tensor", Where(node));
      FXREMAT_ASSIGN_OR_RETURN(std::vector<IValue> op_args, RawArgs(node, 2));
      FXREMAT_ASSIGN_OR_RETURN(auto op_kwargs, RawKwargs(node));
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      at::Tensor current;
      try {
        std::lock_guard<std::mutex> lock(gen.mutex());
        current = gen.get_state();
        gen.set_state(state.value().toTensor());
      } catch (const c10::Error& e) {
        return Status::BadInput(std::string("run_with_rng_state: not a CPU generator state: ") + e.what_without_backtrace(),
                                Where(node));
      }
      Expected<IValue> result = CallOp(node, args[1].text, std::move(op_args), std::move(op_kwargs));
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(current);
      }
      return result;
    }
    return Status::BadInput("the higher-order op '" + node.target() +
                                "' cannot be run here (verify runs cond, map_impl, scan, invoke_subgraph, with_effects, "
                                "auto_functionalized_v2, run_and_save_rng_state and run_with_rng_state)",
                            Where(node));
  }

  // auto_functionalized_v2(op, _all_bases=[...], _x_base_index=..., [view facts], other kwargs):
  // the mutable op runs on copies of the bases (each mutable argument rebuilt as
  // its view of its base's copy); returns (results..., copied bases...).
  Expected<IValue> CallAutoFunctionalized(const Node& node) {
    if (node.args().empty() || node.args()[0].kind != Argument::Kind::kOp)
      return Status::BadInput("auto_functionalized_v2's first argument must be an operator", Where(node));
    const std::string& target = node.args()[0].text;
    Expected<const c10::OperatorHandle*> found = FindOp(node, target);
    if (!found.ok()) return found.status();
    const c10::FunctionSchema& schema = found.value()->schema();
    std::map<std::string, IValue> kw;
    for (const auto& [key, a] : node.kwargs()) {
      Expected<IValue> v = Raw(a, node);
      if (!v.ok()) return v.status();
      kw[key] = std::move(v).value();
    }
    std::vector<at::Tensor> bases;
    if (auto it = kw.find("_all_bases"); it != kw.end() && it->second.isList())
      for (const IValue& b : it->second.toListRef()) bases.push_back(b.toTensor().clone(at::MemoryFormat::Preserve));
    auto take = [&](const std::string& key) -> std::optional<IValue> {
      auto it = kw.find(key);
      if (it == kw.end()) return std::nullopt;
      IValue v = it->second;
      kw.erase(it);
      return v;
    };
    auto ints = [](const IValue& v) {
      std::vector<int64_t> out;
      for (const IValue& x : v.toListRef()) out.push_back(x.toInt());
      return out;
    };
    std::vector<std::pair<std::string, IValue>> op_kwargs;
    for (const c10::Argument& param : schema.arguments()) {
      const bool mutable_arg = param.alias_info() && param.alias_info()->isWrite();
      if (!mutable_arg) continue;
      const std::string prefix = "_" + param.name();
      std::optional<IValue> base_index = take(prefix + "_base_index");
      if (!base_index)
        return Status::BadInput("auto_functionalized_v2: no view facts for the mutable argument '" + param.name() +
                                    "' (a list of tensors is not supported here)",
                                Where(node));
      if (base_index->isNone()) {
        op_kwargs.emplace_back(param.name(), IValue());
        continue;
      }
      const int64_t k = base_index->toInt();
      if (k < 0 || k >= static_cast<int64_t>(bases.size()))
        return Status::BadInput("auto_functionalized_v2: base index out of range", Where(node));
      at::Tensor view = bases[static_cast<size_t>(k)];
      if (take(prefix + "_alias")) {
        view = view.alias();
      } else if (std::optional<IValue> offset = take(prefix + "_storage_offset")) {
        std::optional<IValue> size = take(prefix + "_size");
        std::optional<IValue> stride = take(prefix + "_stride");
        if (!size || !stride) return Status::BadInput("auto_functionalized_v2: incomplete view facts", Where(node));
        view = view.as_strided(ints(*size), ints(*stride), offset->toInt());
      } else if (std::optional<IValue> dim = take(prefix + "_slice_dim")) {
        std::optional<IValue> start = take(prefix + "_slice_start");
        std::optional<IValue> end = take(prefix + "_slice_end");
        view = view.slice(dim->toInt(), start && !start->isNone() ? std::optional<int64_t>(start->toInt()) : std::nullopt,
                          end && !end->isNone() ? std::optional<int64_t>(end->toInt()) : std::nullopt);
      }
      op_kwargs.emplace_back(param.name(), view);
    }
    take("_all_bases");
    for (auto& [key, v] : kw) {
      if (key.starts_with("_"))
        return Status::BadInput("auto_functionalized_v2: unsupported argument '" + key + "'", Where(node));
      op_kwargs.emplace_back(key, std::move(v));
    }
    Expected<IValue> result = CallOp(node, target, {}, std::move(op_kwargs));
    if (!result.ok()) return result.status();
    std::vector<IValue> items;
    if (result.value().isTuple())
      for (const IValue& r : result.value().toTupleRef().elements()) items.push_back(r);
    else
      items.push_back(result.value());
    for (at::Tensor& b : bases) items.emplace_back(std::move(b));
    return Tuple(std::move(items));
  }

  Expected<IValue> GetItem(const Node& node) {
    if (node.args().size() != 2) return Status::BadInput("getitem takes two arguments", Where(node));
    Expected<IValue> seq = Raw(node.args()[0], node);
    if (!seq.ok()) return seq.status();
    Expected<IValue> idx = Raw(node.args()[1], node);
    if (!idx.ok()) return idx.status();
    std::optional<PyNum> index = ToPyNum(idx.value());
    if (!index || !index->isIntLike()) return Status::BadInput("getitem index is not an int", Where(node));
    c10::ArrayRef<IValue> items;
    if (seq.value().isTuple()) items = seq.value().toTupleRef().elements();
    else if (seq.value().isList()) items = seq.value().toListRef();
    else return Status::BadInput("getitem on a " + seq.value().tagKind() + " is unsupported", Where(node));
    int64_t k = index->i < 0 ? index->i + static_cast<int64_t>(items.size()) : index->i;
    if (k < 0 || k >= static_cast<int64_t>(items.size()))
      return Status::BadInput("getitem index " + std::to_string(index->i) + " out of range for " +
                              std::to_string(items.size()) + " items", Where(node));
    return items[static_cast<size_t>(k)];
  }

  // The runtime values of a node's positional arguments from `first` on.
  Expected<std::vector<IValue>> RawArgs(const Node& node, size_t first = 0) {
    std::vector<IValue> out;
    for (size_t k = first; k < node.args().size(); ++k) {
      Expected<IValue> v = Raw(node.args()[k], node);
      if (!v.ok()) return v.status();
      out.push_back(std::move(v).value());
    }
    return out;
  }

  Expected<std::vector<std::pair<std::string, IValue>>> RawKwargs(const Node& node) {
    std::vector<std::pair<std::string, IValue>> out;
    for (const auto& [key, a] : node.kwargs()) {
      Expected<IValue> v = Raw(a, node);
      if (!v.ok()) return v.status();
      out.emplace_back(key, std::move(v).value());
    }
    return out;
  }

  Expected<IValue> CallDispatcher(const Node& node) {
    FXREMAT_ASSIGN_OR_RETURN(std::vector<IValue> args, RawArgs(node));
    FXREMAT_ASSIGN_OR_RETURN(auto kwargs, RawKwargs(node));
    return CallOp(node, node.target(), std::move(args), std::move(kwargs));
  }

  Expected<const c10::OperatorHandle*> FindOp(const Node& node, const std::string& target) {
    auto it = ops_.find(target);
    if (it == ops_.end()) {
      std::optional<c10::OperatorHandle> op = torch_bridge::FindDispatcherOp(target);
      if (!op)
        return Status::BadInput("unknown op '" + target + "': not registered in the libtorch dispatcher",
                                Where(node));
      it = ops_.emplace(target, *op).first;
    }
    return &it->second;
  }

  // Calls `target` through the dispatcher on runtime values (positional, then by name).
  Expected<IValue> CallOp(const Node& node, const std::string& target, std::vector<IValue> raw_args,
                          std::vector<std::pair<std::string, IValue>> raw_kwargs) {
    Expected<const c10::OperatorHandle*> found = FindOp(node, target);
    if (!found.ok()) return found.status();
    const c10::OperatorHandle& op = *found.value();
    const c10::FunctionSchema& schema = op.schema();
    const std::vector<c10::Argument>& params = schema.arguments();
    const std::string op_where = "op '" + target + "': ";

    if (raw_args.size() > params.size())
      return Status::BadInput(op_where + std::to_string(raw_args.size()) + " positional arguments for " +
                              std::to_string(params.size()) + " parameters", Where(node));
    for (const auto& [key, unused] : raw_kwargs) {
      (void)unused;
      bool found = std::any_of(params.begin(), params.end(),
                               [&](const c10::Argument& p) { return p.name() == key; });
      if (!found) return Status::BadInput(op_where + "unknown keyword argument '" + key + "'", Where(node));
    }

    torch::jit::Stack stack;
    stack.reserve(params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      const c10::Argument& param = params[p];
      const IValue* arg = nullptr;
      if (p < raw_args.size()) arg = &raw_args[p];
      else
        for (const auto& [key, v] : raw_kwargs)
          if (key == param.name()) arg = &v;
      // Pinned host memory needs an accelerator; on the CPU it changes no value
      // (an offload copy of a value traced on cuda says pin_memory=True).
      if (param.name() == "pin_memory" && arg != nullptr && arg->isBool()) {
        stack.emplace_back();
        continue;
      }
      if (arg == nullptr) {
        if (param.default_value()) {
          stack.push_back(*param.default_value());
          continue;
        }
        if (param.type()->kind() == c10::TypeKind::OptionalType) {
          stack.emplace_back();
          continue;
        }
        return Status::BadInput(op_where + "missing argument '" + param.name() + "'", Where(node));
      }
      std::string error;
      std::optional<IValue> v;
      try {
        v = Coerce(*arg, param.type(), param.N(), &error);
      } catch (const std::exception& e) {
        error = ErrorText(e);
      }
      if (!v)
        return Status::BadInput(op_where + "argument '" + param.name() + "' (" + param.type()->str() +
                                "): " + error, Where(node));
      stack.push_back(std::move(*v));
    }

    try {
      op.callBoxed(stack);
    } catch (const std::exception& e) {
      return Status::BadInput(op_where + "failed: " + ErrorText(e), Where(node));
    } catch (...) {
      return Status::BadInput(op_where + "failed with an unknown exception", Where(node));
    }
    const size_t num_returns = schema.returns().size();
    if (stack.size() != num_returns)
      return Status::Internal(op_where + "returned " + std::to_string(stack.size()) + " values for " +
                              std::to_string(num_returns) + " returns", Where(node));
    if (num_returns == 0) return IValue();
    if (num_returns == 1) return std::move(stack[0]);
    return IValue(c10::ivalue::Tuple::create(std::move(stack)));
  }

  const Graph& graph_;
  std::string label_;
  std::vector<IValue> env_;
  std::unordered_map<std::string, c10::OperatorHandle> ops_;
};

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

// A random input, kept so that each run gets its own fresh copy (runs may
// mutate their inputs).
struct InputValue {
  IValue scalar;        // non-tensors
  bool is_tensor = false;
  at::Tensor tensor;    // the master copy
  std::vector<int64_t> sizes, strides;
};

// Number of elements the storage of a (sizes, strides) tensor spans.
int64_t StorageElements(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  int64_t n = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return 0;
    n += (sizes[d] - 1) * strides[d];
  }
  return n;
}

// A flat 1-D alias of all the storage a strided tensor spans (so that tensors
// whose elements overlap, like expanded ones, can still be filled and copied).
at::Tensor FlatStorage(const at::Tensor& t, int64_t elements) {
  return t.as_strided({elements}, {1}, t.storage_offset());
}

// Tensors from a --inputs file, by key.
Expected<std::map<std::string, at::Tensor>> LoadInputsFile(const std::string& path) {
  FXREMAT_ASSIGN_OR_RETURN(std::string contents, ReadFileContents(path));
  std::map<std::string, at::Tensor> out;
  const bool safetensors = path.size() >= 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0;
  if (safetensors) {
    FXREMAT_ASSIGN_OR_RETURN(auto entries, ParseSafetensors(std::move(contents), path));
    for (auto& [key, e] : entries) {
      std::optional<DType> dtype;
      for (DType d : AllDTypes())
        if (SafetensorsDType(d) == e.dtype) dtype = d;
      if (!dtype) return Status::BadInput("tensor '" + key + "' has the unsupported dtype " + e.dtype, path);
      at::Tensor t = at::empty_strided(e.shape, ContiguousStrides(e.shape),
                                       at::TensorOptions().dtype(ToScalarType(*dtype)));
      if (static_cast<int64_t>(e.data.size()) != t.numel() * t.element_size())
        return Status::BadInput("tensor '" + key + "' has " + std::to_string(e.data.size()) +
                                    " bytes for its shape and dtype", path);
      if (!e.data.empty()) std::memcpy(t.data_ptr(), e.data.data(), e.data.size());
      out.emplace(key, t);
    }
    return out;
  }
  IValue loaded;
  try {
    loaded = torch::jit::pickle_load(std::vector<char>(contents.begin(), contents.end()));
  } catch (const std::exception& e) {
    return Status::BadInput("not a safetensors file, nor a dict saved by torch.save: " + ErrorText(e), path);
  }
  if (!loaded.isGenericDict()) return Status::BadInput("expected a dict of tensors (torch.save({...}, path))", path);
  for (const auto& item : loaded.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      return Status::BadInput("expected a dict from strings to tensors", path);
    out.emplace(item.key().toStringRef(), item.value().toTensor());
  }
  return out;
}

Expected<InputValue> MakeInput(const Node& node, const at::Generator& gen) {
  InputValue in;
  const ValueFacts& val = node.val();
  const std::string where = "joint graph, placeholder '" + node.name() + "'";
  switch (val.kind) {
    case ValueFacts::Kind::kTensor: break;
    case ValueFacts::Kind::kSymInt: in.scalar = IValue(val.hint); return in;
    case ValueFacts::Kind::kSymFloat: in.scalar = IValue(static_cast<double>(val.hint)); return in;
    case ValueFacts::Kind::kSymBool: in.scalar = IValue(val.hint != 0); return in;
    case ValueFacts::Kind::kNone: return in;
    case ValueFacts::Kind::kConst: {
      const std::string& e = val.expr;
      if (e == "True" || e == "False") { in.scalar = IValue(e == "True"); return in; }
      if (e == "None") return in;
      try {
        size_t used = 0;
        int64_t i = std::stoll(e, &used);
        if (used == e.size()) { in.scalar = IValue(i); return in; }
        double d = std::stod(e, &used);
        if (used == e.size()) { in.scalar = IValue(d); return in; }
      } catch (const std::exception&) {
      }
      return Status::BadInput("cannot build an input for constant '" + e + "'", where);
    }
    case ValueFacts::Kind::kOpaque:  // Note [Opaque inputs]: only the caller has one
      return Status::BadInput("cannot build an input of the opaque type " + val.expr.str() +
                                  " (the runtime supplies it: verify runs such a graph only in process)",
                              where);
    default:
      return Status::BadInput("cannot build an input without tensor or symint facts", where);
  }
  const TensorFacts& facts = val.tensor;
  in.sizes = Hints(facts.shape);
  in.strides = facts.stride.size() == facts.shape.size() ? Hints(facts.stride) : ContiguousStrides(in.sizes);
  for (size_t d = 0; d < in.sizes.size(); ++d)
    if (in.sizes[d] < 0 || in.strides[d] < 0)
      return Status::BadInput("negative size or stride " + FormatShape(in.sizes) + " / " +
                              FormatShape(in.strides), where);
  const at::ScalarType type = ToScalarType(facts.dtype);
  const auto cpu = at::TensorOptions().device(VerifyDevice());
  try {
    at::Tensor t = at::empty_strided(in.sizes, in.strides, cpu.dtype(type));
    const int64_t elements = StorageElements(in.sizes, in.strides);
    at::Tensor flat = FlatStorage(t, elements);
    if (DTypeIsFloating(facts.dtype)) {
      const at::ScalarType draw = facts.dtype == DType::kFloat64 || facts.dtype == DType::kComplex128
                                      ? at::kDouble : at::kFloat;
      at::Tensor values = at::empty_strided({elements}, {1}, cpu.dtype(draw));
      values.normal_(0.0, 1.0, gen);
      flat.copy_(values);
    } else if (facts.dtype != DType::kBool && (IntegerInputRange(node).second > IntegerInputRange(node).first)) {
      const auto [low, high] = IntegerInputRange(node);
      at::Tensor values = at::empty_strided({elements}, {1}, cpu.dtype(at::kLong));
      values.random_(low, high, gen);
      flat.copy_(values);
    } else {
      flat.zero_();
    }
    in.is_tensor = true;
    in.tensor = t;
  } catch (const std::exception& e) {
    return Status::BadInput("cannot build a " + std::string(DTypeName(facts.dtype)) + " input of shape " +
                            FormatShape(in.sizes) + ": " + ErrorText(e), where);
  }
  return in;
}

// A fresh copy of an input, with the same sizes and strides.
IValue Fresh(const InputValue& in) {
  if (!in.is_tensor) return in.scalar;
  at::Tensor t = at::empty_strided(in.sizes, in.strides, in.tensor.options());
  const int64_t elements = StorageElements(in.sizes, in.strides);
  FlatStorage(t, elements).copy_(FlatStorage(in.tensor, elements));
  return IValue(t);
}

// ---------------------------------------------------------------------------
// Comparison
// ---------------------------------------------------------------------------

struct Tolerance {
  double rtol = 0, atol = 0;
};

// torch.testing.assert_close's defaults.
Tolerance DefaultTolerance(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return {1e-3, 1e-5};
    case at::kBFloat16: return {1.6e-2, 1e-5};
    case at::kFloat: case at::kComplexFloat: return {1.3e-6, 1e-5};
    case at::kDouble: case at::kComplexDouble: return {1e-7, 1e-7};
    case at::ScalarType::Float8_e4m3fn: return {1.25e-1, 1e-5};
    case at::ScalarType::Float8_e5m2: return {2.5e-1, 1e-5};
    default: return {0, 0};  // integers and bool: exact
  }
}

struct Comparison {
  bool ok = true;
  double max_err = 0;
  std::string detail;  // why it does not match, beyond the error size
};

void Merge(Comparison& into, const Comparison& c) {
  into.ok = into.ok && c.ok;
  if (std::isnan(c.max_err) || c.max_err > into.max_err) into.max_err = c.max_err;
  if (into.detail.empty()) into.detail = c.detail;
}

Comparison CompareValues(const IValue& expected, const IValue& actual, double scale) {
  Comparison c;
  auto mismatch = [&](std::string why) {
    c.ok = false;
    c.detail = std::move(why);
    return c;
  };
  auto describe = [](const IValue& v) { return v.isNone() ? std::string("None") : v.tagKind(); };
  if (expected.isNone() || actual.isNone()) {
    if (expected.isNone() && actual.isNone()) return c;
    return mismatch("expected " + describe(expected) + ", got " + describe(actual));
  }
  if (expected.isTensor() && actual.isTensor()) {
    const at::Tensor& e = expected.toTensor();
    const at::Tensor& a = actual.toTensor();
    if (e.scalar_type() != a.scalar_type())
      return mismatch("dtype " + ScalarTypeName(a.scalar_type()) + ", expected " + ScalarTypeName(e.scalar_type()));
    if (!e.sizes().equals(a.sizes()))
      return mismatch("shape " + FormatShape(a.sizes()) + ", expected " + FormatShape(e.sizes()));
    if (e.numel() == 0) return c;
    const at::ScalarType type = e.scalar_type();
    if (!at::isFloatingType(type) && !at::isComplexType(type)) {
      c.ok = e.equal(a);
      if (!c.ok) c.max_err = e.to(at::kDouble).sub(a.to(at::kDouble)).abs().max().item<double>();
      return c;
    }
    const at::ScalarType wide = at::isComplexType(type) ? at::kComplexDouble : at::kDouble;
    const at::Tensor ed = e.to(wide);
    const at::Tensor ad = a.to(wide);
    const Tolerance tol = DefaultTolerance(type);
    const at::Tensor diff = ed.sub(ad).abs();
    const at::Tensor both_nan = ed.isnan().logical_and(ad.isnan());
    const at::Tensor close = diff.le(ed.abs().mul(tol.rtol * scale).add(tol.atol * scale))
                                 .logical_or(ed.eq(ad))  // equal infinities
                                 .logical_or(both_nan);
    c.ok = close.all().item<bool>();
    // The largest error among elements that are not both NaN (a NaN on one
    // side only makes the maximum NaN).
    c.max_err = diff.masked_fill(both_nan.logical_or(ed.eq(ad)), 0.0).max().item<double>();
    if (!c.ok) {
      c.detail = "rtol " + FormatDouble(tol.rtol * scale) + ", atol " + FormatDouble(tol.atol * scale);
    }
    return c;
  }
  if ((expected.isList() || expected.isTuple()) && (actual.isList() || actual.isTuple())) {
    c10::ArrayRef<IValue> es = expected.isList() ? expected.toListRef() : expected.toTupleRef().elements();
    c10::ArrayRef<IValue> as = actual.isList() ? actual.toListRef() : actual.toTupleRef().elements();
    if (es.size() != as.size())
      return mismatch(std::to_string(as.size()) + " items, expected " + std::to_string(es.size()));
    for (size_t k = 0; k < es.size(); ++k) Merge(c, CompareValues(es[k], as[k], scale));
    return c;
  }
  std::optional<PyNum> en = ToPyNum(expected);
  std::optional<PyNum> an = ToPyNum(actual);
  if (en && an) {
    if (en->isIntLike() && an->isIntLike()) {
      c.ok = en->i == an->i;
      c.max_err = std::fabs(static_cast<double>(en->i) - static_cast<double>(an->i));
      return c;
    }
    const double x = en->asDouble(), y = an->asDouble();
    c.max_err = std::fabs(x - y);
    c.ok = x == y || (std::isnan(x) && std::isnan(y)) ||
           c.max_err <= 1e-7 * scale + 1e-7 * scale * std::fabs(x);
    if (std::isnan(x) && std::isnan(y)) c.max_err = 0;
    return c;
  }
  return mismatch("expected " + describe(expected) + ", got " + describe(actual));
}

std::string ReportLine(const std::string& what, const Comparison& c) {
  std::string line = what + ": max abs err " + FormatDouble(c.max_err) + (c.ok ? " ok" : " MISMATCH");
  if (!c.ok && !c.detail.empty()) line += " (" + c.detail + ")";
  return line;
}

// ---------------------------------------------------------------------------
// VerifyPartition
// ---------------------------------------------------------------------------

// Restores the default CPU generator's state on scope exit: verification
// reseeds it, and a caller's RNG stream should not notice.
// Runs libtorch's kernels on one intra-op thread for the guard's life (and
// restores the caller's setting): with several threads, reductions on a busy
// machine can sum in different orders from run to run (measured: gpt2_2l's
// gradients off by 4e-5 in 1 run of 10 on 2 cores under load), and verify must
// give the same verdict every time.
class SingleThreadGuard {
 public:
  SingleThreadGuard() : before_(at::get_num_threads()) {
    if (before_ != 1) at::set_num_threads(1);
  }
  SingleThreadGuard(const SingleThreadGuard&) = delete;
  SingleThreadGuard& operator=(const SingleThreadGuard&) = delete;
  ~SingleThreadGuard() {
    if (before_ != 1) at::set_num_threads(before_);
  }

 private:
  int before_;
};

class CpuRngStateGuard {
 public:
  CpuRngStateGuard() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  CpuRngStateGuard(const CpuRngStateGuard&) = delete;
  CpuRngStateGuard& operator=(const CpuRngStateGuard&) = delete;
  ~CpuRngStateGuard() {
    try {
      std::lock_guard<std::mutex> lock(gen_.mutex());
      gen_.set_state(state_);
    } catch (...) {  // never throw from a destructor; the state is best effort
    }
  }

 private:
  at::Generator gen_;
  at::Tensor state_;
};

// Note [Saved values whose meta is wrong]
// PyTorch's fake-tensor (meta) kernels of some ops give an output another
// shape than the real kernel does: aten.mkldnn_rnn_layer's workspace (a CPU
// LSTM under allow_rnn) is [0] under meta and oneDNN's size at run time (28,672
// bytes for one 16-unit layer over 5 steps). The graph's facts, and so the
// signature, carry the meta shape; the partition is right (the backward takes
// the tensor the forward made, whatever its size), so verify notes the
// difference instead of failing. The peak model counts such a value at its meta
// size too (docs/budget.md, "What the peak model does not see").
// The op, when the joint graph's `name` is an output of one of these ops.
static const std::string* OpWhoseMetaMisstatesShape(const Graph& joint, const std::string& name) {
  static const std::string kOps[] = {"aten.mkldnn_rnn_layer.default", "aten._cudnn_rnn.default",
                                     "aten.miopen_rnn.default"};
  const Node* n = joint.findNode(name);
  if (n && n->isGetItem() && !n->args().empty() && n->args()[0].is_node()) n = n->args()[0].node;
  if (!n) return nullptr;
  for (const std::string& op : kOps)
    if (n->target() == op) return &op;
  return nullptr;
}

Expected<VerifyReport> VerifyPartitionImpl(const Graph& joint, const Graph& forward, const Graph& backward,
                                           const Signature& sig, const VerifyOptions& options) {
  // Placeholders of the joint graph and what they are.
  std::vector<Node*> joint_inputs = joint.placeholders();
  std::vector<Node*> primals, tangents;
  std::unordered_map<std::string, size_t> joint_input_index;
  for (size_t k = 0; k < joint_inputs.size(); ++k) {
    joint_input_index[joint_inputs[k]->name()] = k;
    PlaceholderRole role = EffectiveRole(*joint_inputs[k], /*joint=*/true);
    if (role == PlaceholderRole::kPrimal) primals.push_back(joint_inputs[k]);
    if (role == PlaceholderRole::kTangent) tangents.push_back(joint_inputs[k]);
  }
  const int64_t num_fwd = joint.joint().num_fwd_outputs;
  if (sig.num_fwd_outputs != num_fwd)
    return Status::BadInput("signature has " + std::to_string(sig.num_fwd_outputs) +
                            " forward outputs, the joint graph " + std::to_string(num_fwd), "signature");

  // Seeded random inputs, drawn from a private generator in placeholder order.
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  std::vector<InputValue> master;
  for (Node* p : joint_inputs) {
    Expected<InputValue> in = MakeInput(*p, gen);
    if (!in.ok()) return in.status();
    master.push_back(std::move(in).value());
  }
  std::vector<std::string> report_lines;
  if (!options.inputs_file.empty()) {
    FXREMAT_ASSIGN_OR_RETURN(auto given, LoadInputsFile(options.inputs_file));
    std::map<std::string, size_t> by_key;
    for (size_t k = 0; k < joint_inputs.size(); ++k) {
      by_key[joint_inputs[k]->name()] = k;
      if (!joint_inputs[k]->path().empty()) by_key[joint_inputs[k]->path()] = k;
    }
    std::vector<bool> real(joint_inputs.size(), false);
    for (auto& [key, t] : given) {
      auto it = by_key.find(key);
      if (it == by_key.end())
        return Status::BadInput("'" + key + "' names no input of the joint graph (use placeholder names or paths)",
                                options.inputs_file);
      const Node& p = *joint_inputs[it->second];
      const ValueFacts& facts = p.val();
      if (facts.kind == ValueFacts::Kind::kSymInt) {
        // A SymInt input (dynamic shapes) comes as a 0-d integer tensor.
        if (t.dim() != 0 || !at::isIntegralType(t.scalar_type(), /*includeBool=*/false))
          return Status::BadInput("'" + key + "': input '" + p.name() + "' is a SymInt: give a 0-d integer tensor",
                                  options.inputs_file);
        master[it->second].scalar = IValue(t.item<int64_t>());
        real[it->second] = true;
        continue;
      }
      if (!facts.is_tensor()) return Status::BadInput("'" + key + "': input '" + p.name() + "' is not a tensor",
                                                      options.inputs_file);
      const std::vector<int64_t> want = Hints(facts.tensor.shape);
      if (t.sizes().vec() != want || t.scalar_type() != ToScalarType(facts.tensor.dtype))
        return Status::BadInput("'" + key + "' is " + std::string(c10::toString(t.scalar_type())) + FormatShape(t.sizes().vec()) +
                                    ", the graph's input '" + p.name() + "' is " + std::string(DTypeName(facts.tensor.dtype)) +
                                    FormatShape(want), options.inputs_file);
      InputValue& in = master[it->second];
      at::Tensor copy = at::empty_strided(in.sizes, in.strides, in.tensor.options());
      copy.copy_(t);
      in.tensor = copy;
      real[it->second] = true;
    }
    int64_t drawn = 0;
    for (bool r : real) drawn += !r;
    report_lines.push_back("inputs: " + std::to_string(static_cast<int64_t>(joint_inputs.size()) - drawn) + " from " +
                           options.inputs_file + ", " + std::to_string(drawn) + " drawn at random (seed " +
                           std::to_string(options.seed) + ")");
  }
  auto joint_value = [&](const std::string& name) -> std::optional<IValue> {
    auto it = joint_input_index.find(name);
    if (it == joint_input_index.end()) return std::nullopt;
    return Fresh(master[it->second]);
  };

  // The joint run.
  std::vector<IValue> joint_args;
  for (const InputValue& in : master) joint_args.push_back(Fresh(in));
  at::manual_seed(options.seed);
  Expected<std::vector<IValue>> joint_out = Interpreter(joint, "joint").Run(std::move(joint_args));
  if (!joint_out.ok()) {
    // The joint graph itself cannot run on these inputs: a graph or input problem.
    if (options.inputs_file.empty())
      return Status::BadInput(joint_out.status().message() + " (on random inputs, seed " +
                                  std::to_string(options.seed) + "; give real ones with --inputs FILE)",
                              joint_out.status().where());
    return joint_out.status();
  }
  // The joint graph runs; a forward or backward that does not is a failed
  // verification of the partition (exit 1), not bad input.
  auto run_failed = [&](const Status& st) {
    VerifyReport failed;
    failed.passed = false;
    failed.lines = report_lines;
    failed.lines.push_back("FAILED: " + st.ToString());
    return failed;
  };
  const int64_t backward_tokens = joint.joint().backwardTokens();  // Note [Effect tokens]: after the gradients
  if (static_cast<int64_t>(joint_out->size()) != num_fwd + static_cast<int64_t>(primals.size()) + backward_tokens)
    return Status::BadInput("the joint graph has " + std::to_string(joint_out->size()) + " outputs for " +
                            std::to_string(num_fwd) + " forward outputs, " + std::to_string(primals.size()) +
                            " primals and " + std::to_string(backward_tokens) + " backward tokens", "joint graph");

  // A partition of another graph (a directory left from another run) would
  // fail later with a runtime error about some op; its inputs tell it first.
  for (const Node* in : forward.placeholders()) {
    const Node* j = joint.findNode(in->name());
    if (!j || !j->isPlaceholder() || !in->val().is_tensor() || !j->val().is_tensor()) continue;
    const TensorFacts& a = in->val().tensor;
    const TensorFacts& b = j->val().tensor;
    const std::vector<int64_t> shape_a = Hints(a.shape), shape_b = Hints(b.shape);
    if (a.dtype != b.dtype || shape_a != shape_b)
      return Status::BadInput("input '" + in->name() + "' is " + std::string(DTypeName(a.dtype)) + " " +
                                  FormatShape(shape_a) + " here and " + std::string(DTypeName(b.dtype)) + " " +
                                  FormatShape(shape_b) + " in the joint graph: the partition is not of this joint graph",
                              "forward graph");
  }
  // The forward run: primals at the signature's positions, other inputs (RNG
  // state) by name.
  std::vector<Node*> fwd_inputs = forward.placeholders();
  if (static_cast<int64_t>(fwd_inputs.size()) != sig.forward_num_inputs)
    return Status::BadInput("the forward graph has " + std::to_string(fwd_inputs.size()) +
                            " inputs, the signature says " + std::to_string(sig.forward_num_inputs), "forward graph");
  std::vector<std::optional<IValue>> fwd_args(fwd_inputs.size());
  for (const PrimalEntry& p : sig.primals) {
    if (p.forward_input_index < 0 || p.forward_input_index >= static_cast<int64_t>(fwd_args.size()))
      return Status::BadInput("primal '" + p.name + "' at forward input " + std::to_string(p.forward_input_index) +
                              ", out of range", "signature");
    fwd_args[p.forward_input_index] = joint_value(p.name);
    if (!fwd_args[p.forward_input_index])
      return Status::BadInput("primal '" + p.name + "' is not a placeholder of the joint graph (is the partition "
                              "of another graph?)", "signature");
  }
  std::vector<IValue> fwd_run_args;
  for (size_t k = 0; k < fwd_inputs.size(); ++k) {
    if (!fwd_args[k]) fwd_args[k] = joint_value(fwd_inputs[k]->name());
    if (!fwd_args[k])
      return Status::BadInput("forward input " + std::to_string(k) + " ('" + fwd_inputs[k]->name() +
                              "') is neither a primal of the signature nor a joint graph input", "forward graph");
    fwd_run_args.push_back(std::move(*fwd_args[k]));
  }
  const std::vector<IValue> fwd_inputs_kept = fwd_run_args;  // the same tensors
  at::manual_seed(options.seed);
  Expected<std::vector<IValue>> fwd_out = Interpreter(forward, "forward").Run(std::move(fwd_run_args));
  if (!fwd_out.ok()) return run_failed(fwd_out.status());
  if (static_cast<int64_t>(fwd_out->size()) != sig.forward_num_outputs ||
      static_cast<int64_t>(fwd_out->size()) < num_fwd)
    return Status::BadInput("the forward graph has " + std::to_string(fwd_out->size()) +
                            " outputs, the signature says " + std::to_string(sig.forward_num_outputs), "forward graph");
  // AOTAutograd's epilogue: a mutated input receives its new value between the
  // forward and the backward (Note [Mutated inputs]), so a backward that
  // recomputed from the old data would be caught here.
  for (const PrimalEntry& p : sig.primals) {
    if (!p.written_back_from) continue;
    const int64_t k = *p.written_back_from;
    if (k < 0 || k >= num_fwd)
      return Status::BadInput("primal '" + p.name + "' is written back from forward output " + std::to_string(k) + ", out of range",
                              "signature");
    const IValue& dst = fwd_inputs_kept[static_cast<size_t>(p.forward_input_index)];
    const IValue& src = (*fwd_out)[static_cast<size_t>(k)];
    if (!dst.isTensor() || !src.isTensor()) continue;
    at::NoGradGuard no_grad;
    dst.toTensor().copy_(src.toTensor());
  }

  // The backward run, its inputs wired from the signature. The RNG continues
  // from the forward run, as it does in the joint run.
  std::vector<Node*> bwd_inputs = backward.placeholders();
  if (static_cast<int64_t>(bwd_inputs.size()) != sig.backward_num_inputs)
    return Status::BadInput("the backward graph has " + std::to_string(bwd_inputs.size()) +
                            " inputs, the signature says " + std::to_string(sig.backward_num_inputs), "backward graph");
  std::vector<std::optional<IValue>> bwd_args(bwd_inputs.size());
  for (const SavedValue& s : sig.saved) {
    if (s.forward_output_index < 0 || s.forward_output_index >= static_cast<int64_t>(fwd_out->size()) ||
        s.backward_input_index < 0 || s.backward_input_index >= static_cast<int64_t>(bwd_args.size()))
      return Status::BadInput("saved value '" + s.name + "' (forward output " + std::to_string(s.forward_output_index) +
                              ", backward input " + std::to_string(s.backward_input_index) + ") is out of range",
                              "signature");
    bwd_args[s.backward_input_index] = (*fwd_out)[s.forward_output_index];
  }
  for (size_t k = 0; k < sig.tangents.size(); ++k) {
    const TangentEntry& t = sig.tangents[k];
    if (t.backward_input_index < 0 || t.backward_input_index >= static_cast<int64_t>(bwd_args.size()))
      return Status::BadInput("tangent '" + t.name + "' at backward input " + std::to_string(t.backward_input_index) +
                              ", out of range", "signature");
    std::optional<IValue> v = joint_value(t.name);
    if (!v && k < tangents.size()) v = joint_value(tangents[k]->name());
    if (!v) return Status::BadInput("tangent '" + t.name + "' is not a placeholder of the joint graph", "signature");
    bwd_args[t.backward_input_index] = std::move(v);
  }
  std::vector<IValue> bwd_run_args;
  for (size_t k = 0; k < bwd_inputs.size(); ++k) {
    if (!bwd_args[k]) bwd_args[k] = joint_value(bwd_inputs[k]->name());  // bwd RNG state
    if (!bwd_args[k])
      return Status::BadInput("backward input " + std::to_string(k) + " ('" + bwd_inputs[k]->name() +
                              "') is not wired by the signature", "backward graph");
    bwd_run_args.push_back(std::move(*bwd_args[k]));
  }
  Expected<std::vector<IValue>> bwd_out = Interpreter(backward, "backward").Run(std::move(bwd_run_args));
  if (!bwd_out.ok()) return run_failed(bwd_out.status());
  if (static_cast<int64_t>(bwd_out->size()) != sig.backward_num_outputs)
    return Status::BadInput("the backward graph has " + std::to_string(bwd_out->size()) +
                            " outputs, the signature says " + std::to_string(sig.backward_num_outputs), "backward graph");

  // Compare.
  VerifyReport report;
  report.passed = true;
  report.lines = std::move(report_lines);
  auto add = [&](const std::string& what, const Comparison& c) {
    report.lines.push_back(ReportLine(what, c));
    report.passed = report.passed && c.ok;
    ++report.values_compared;
  };
  const Node* joint_output = joint.outputNode();
  auto joint_output_name = [&](int64_t k) -> std::string {
    if (joint_output == nullptr || joint_output->args().empty()) return "?";
    const auto& list = joint_output->args()[0].list;
    if (k >= static_cast<int64_t>(list.size())) return "?";
    return list[k].is_node() ? list[k].node->name() : "None";
  };

  for (int64_t k = 0; k < num_fwd; ++k)
    add("forward output " + std::to_string(k) + " (" + joint_output_name(k) + ")",
        CompareValues((*joint_out)[k], (*fwd_out)[k], options.tolerance_scale));

  for (size_t k = 0; k < sig.saved.size(); ++k) {
    const SavedValue& s = sig.saved[k];
    const IValue& v = (*fwd_out)[s.forward_output_index];
    Comparison c;
    std::string got;
    bool noted = false;  // a difference that is PyTorch's meta kernel's, not the partition's
    if (s.kind == SavedValue::Kind::kTensor) {
      if (!v.isTensor()) {
        c.ok = false;
        c.detail = "expected a tensor, got " + (v.isNone() ? std::string("None") : v.tagKind());
      } else {
        const at::Tensor& t = v.toTensor();
        got = FormatShape(t.sizes()) + " " + ScalarTypeName(t.scalar_type());
        if (s.facts.kind == ValueFacts::Kind::kTensor) {
          const std::vector<int64_t> want = Hints(s.facts.tensor.shape);
          const at::ScalarType want_type = ToScalarType(s.facts.tensor.dtype);
          if (!t.sizes().equals(want) || t.scalar_type() != want_type) {
            c.detail = "signature says " + FormatShape(want) + " " + ScalarTypeName(want_type);
            if (const std::string* op = OpWhoseMetaMisstatesShape(joint, s.name);
                op && t.scalar_type() == want_type) {
              // Note [Saved values whose meta is wrong]
              c.detail += ", as PyTorch's meta kernel of " + *op + " says; the backward takes the tensor the "
                          "forward made, so the partition is right";
              noted = true;
            } else {
              c.ok = false;
            }
          }
        }
      }
    } else {
      std::optional<PyNum> n = ToPyNum(v);
      if (!n || !n->isIntLike()) {
        c.ok = false;
        c.detail = "expected a symint, got " + (v.isNone() ? std::string("None") : v.tagKind());
      } else {
        got = "symint " + std::to_string(n->i);
      }
    }
    std::string line = "saved " + std::to_string(k) + " (" + s.name + ", forward output " +
                       std::to_string(s.forward_output_index) + (s.offloaded ? ", offloaded" : "") + "): " + got + (got.empty() ? "" : " ") +
                       (noted ? "noted" : c.ok ? "ok" : "MISMATCH");
    if (!c.ok || noted) line += " (" + c.detail + ")";
    report.lines.push_back(std::move(line));
    report.passed = report.passed && c.ok;
    ++report.values_compared;
  }

  std::unordered_map<std::string, const PrimalEntry*> primal_entry;
  for (const PrimalEntry& p : sig.primals) primal_entry[p.name] = &p;
  for (size_t k = 0; k < primals.size(); ++k) {
    int64_t grad_index = static_cast<int64_t>(k);
    bool has_gradient = true;
    if (auto it = primal_entry.find(primals[k]->name()); it != primal_entry.end()) {
      grad_index = it->second->gradient_index;
      has_gradient = it->second->has_gradient;
    }
    const IValue& expected = (*joint_out)[num_fwd + static_cast<int64_t>(k)];
    Comparison c;
    if (grad_index < 0 || grad_index >= static_cast<int64_t>(bwd_out->size())) {
      if (has_gradient || !expected.isNone())
        return Status::BadInput("gradient of '" + primals[k]->name() + "' at backward output " +
                                std::to_string(grad_index) + ", out of range", "signature");
    } else {
      c = CompareValues(expected, (*bwd_out)[grad_index], options.tolerance_scale);
    }
    if (c.ok && !has_gradient && !expected.isNone()) {
      c.ok = false;
      c.detail = "the signature says no gradient, the joint graph has one";
    }
    add("gradient " + std::to_string(k) + " (" + primals[k]->name() + ", backward output " +
            std::to_string(grad_index) + ")",
        c);
  }
  return report;
}

}  // namespace

Expected<VerifyReport> VerifyPartition(const Graph& joint, const Graph& forward, const Graph& backward,
                                       const Signature& signature, const VerifyOptions& options) {
  try {
    CpuRngStateGuard rng_state;
    SingleThreadGuard one_thread;
    return VerifyPartitionImpl(joint, forward, backward, signature, options);
  } catch (const std::exception& e) {
    // Ops are guarded one by one; this catches the rest (input building, comparison).
    return Status::BadInput(std::string("numeric verification failed: ") + ErrorText(e));
  } catch (...) {
    return Status::BadInput("numeric verification failed with an unknown exception");
  }
}

}  // namespace fxremat
