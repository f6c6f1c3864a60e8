// Prints a Graph in the IR text form (text.h): FX's graph.code layout, with the
// joint facts, op facts and placeholder facts in `#` header lines and node
// metadata in a trailing comment. text_parser.cpp reads exactly this back.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "fxremat/text.h"
#include "src/constants_io.h"
#include "text_common.h"

namespace fxremat {

namespace {

std::string FormatDim(const Dim& d, const Graph* graph) {
  if (d.is_static()) return std::to_string(d.hint);
  if (graph) {
    auto it = graph->symbols().find(d.expr);
    if (it != graph->symbols().end() && it->second == d.hint) return d.expr;
  }
  return fmt::format("{}~{}", d.expr.str(), d.hint);
}

std::string FormatFacts(const ValueFacts& v, const Graph* graph) {
  switch (v.kind) {
    case ValueFacts::Kind::kTensor: {
      std::string s(DTypeShortName(v.tensor.dtype));
      s += "[";
      for (size_t i = 0; i < v.tensor.shape.size(); ++i)
        s += (i ? ", " : "") + FormatDim(v.tensor.shape[i], graph);
      s += "]";
      if (!v.tensor.stride.empty() || v.tensor.shape.empty()) {
        s += "[";
        for (size_t i = 0; i < v.tensor.stride.size(); ++i)
          s += (i ? ", " : "") + FormatDim(v.tensor.stride[i], graph);
        s += "]";
      }
      s += v.tensor.device;
      if (v.tensor.requires_grad) s += " rg";
      if (v.tensor.storage >= 0) s += fmt::format(" @{}", v.tensor.storage);
      return s;
    }
    case ValueFacts::Kind::kSymInt: {
      Dim d{v.hint, v.expr};
      return fmt::format("Sym({})", FormatDim(d, graph));
    }
    case ValueFacts::Kind::kSymFloat: return fmt::format("SymFloat({})", v.expr);
    case ValueFacts::Kind::kSymBool: return fmt::format("SymBool({})", v.expr);
    case ValueFacts::Kind::kTuple: {
      std::string s = "(";
      for (size_t i = 0; i < v.items.size(); ++i) s += (i ? ", " : "") + FormatFacts(v.items[i], graph);
      if (v.items.size() == 1) s += ",";
      return s + ")";
    }
    case ValueFacts::Kind::kNone: return "None";
    case ValueFacts::Kind::kConst: return fmt::format("Const({})", v.expr);
    case ValueFacts::Kind::kOpaque: return fmt::format("Opaque({})", v.expr);
    case ValueFacts::Kind::kUnknown: return "";
  }
  return "";
}

std::string FormatDouble(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);  // shortest round-trip form
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string FormatArgument(const Argument& a) {
  switch (a.kind) {
    case Argument::Kind::kNone: return "None";
    case Argument::Kind::kBool: return a.int_value ? "True" : "False";
    case Argument::Kind::kInt: return std::to_string(a.int_value);
    case Argument::Kind::kDouble: return FormatDouble(a.double_value);
    case Argument::Kind::kString: return text_form::QuotePython(a.text);
    case Argument::Kind::kNode: return a.node->name();
    case Argument::Kind::kList: {
      std::string s = "[";
      for (size_t i = 0; i < a.list.size(); ++i) s += (i ? ", " : "") + FormatArgument(a.list[i]);
      return s + "]";
    }
    case Argument::Kind::kDType: return fmt::format("torch.{}", DTypeName(a.dtype()));
    case Argument::Kind::kDevice: {
      auto colon = a.text.str().find(':');
      if (colon == std::string::npos) return fmt::format("device(type='{}')", a.text);
      return fmt::format("device(type='{}', index={})", a.text.str().substr(0, colon), a.text.str().substr(colon + 1));
    }
    case Argument::Kind::kLayout:
    case Argument::Kind::kMemoryFormat: return fmt::format("torch.{}", a.text);
    case Argument::Kind::kComplex:
      return fmt::format("complex({}, {})", FormatDouble(a.double_value), FormatDouble(a.imag_value));
    case Argument::Kind::kOp: return "torch.ops." + a.text.str();
    case Argument::Kind::kDict: {
      std::string s = "{";
      for (size_t i = 0; i < a.list.size(); ++i)
        s += (i ? ", " : "") + FormatArgument(a.list[i].list[0]) + ": " + FormatArgument(a.list[i].list[1]);
      return s + "}";
    }
  }
  return "?";
}

// "tag=is_forward recompute=MUST_SAVE ac_graph_id=1 value_range=[0, 512] names=['a', 'b']
// offload_requested stack='...'" (offload_requested is a flag: present or absent).
std::string FormatMeta(const NodeMeta& m) {
  std::vector<std::string> parts;
  if (m.partitioner_tag != PartitionerTag::kNone) parts.push_back("tag=" + std::string(PartitionerTagName(m.partitioner_tag)));
  if (m.recompute != Decision::kNone) parts.push_back("recompute=" + std::string(DecisionName(m.recompute)));
  if (m.rare().ac_graph_id) parts.push_back(fmt::format("ac_graph_id={}", *m.rare().ac_graph_id));
  if (m.rare().value_range) parts.push_back(fmt::format("value_range=[{}, {}]", m.rare().value_range->first, m.rare().value_range->second));
  if (!m.names.empty()) {
    std::vector<std::string> quoted;
    for (const std::string& name : m.names) quoted.push_back(text_form::QuotePython(name));
    parts.push_back(fmt::format("names=[{}]", fmt::join(quoted, ", ")));
  }
  if (m.offload_requested) parts.push_back("offload_requested");
  if (m.mutated) parts.push_back("mutated");
  if (m.no_vc_check) parts.push_back("no_vc_check");
  if (m.has_backward_hook) parts.push_back("has_backward_hook");
  if (m.rare().written_back_from) parts.push_back(fmt::format("written_back_from={}", *m.rare().written_back_from));
  if (!m.rare().reads_mutated.empty()) parts.push_back("reads_mutated=" + m.rare().reads_mutated.str());
  // {:?}-free shortest round-trip form: fmt's default for double.
  if (m.rare().memory_budget) parts.push_back(fmt::format("memory_budget={}", *m.rare().memory_budget));
  if (m.rare().region_memory_budget) parts.push_back(fmt::format("region_memory_budget={}", *m.rare().region_memory_budget));
  if (!m.stack_trace.empty()) parts.push_back("stack=" + text_form::QuotePython(m.stack_trace));
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string FormatCall(const Node& n) {
  std::vector<std::string> parts;
  for (const Argument& a : n.args()) parts.push_back(FormatArgument(a));
  for (const auto& [k, v] : n.kwargs()) parts.push_back(fmt::format("{} = {}", k, FormatArgument(v)));
  const std::string joined = fmt::format("{}", fmt::join(parts, ", "));
  if (n.isGetItem() && n.args().size() == 2 && n.kwargs().empty() && n.args()[0].is_node() &&
      n.args()[1].kind == Argument::Kind::kInt)
    return fmt::format("{}[{}]", n.args()[0].node->name(), n.args()[1].int_value);
  if (text_form::IsPythonCallable(n.target())) return fmt::format("{}({})", n.target(), joined);
  return fmt::format("torch.ops.{}({})", n.target(), joined);
}

}  // namespace

std::string FormatValueFacts(const ValueFacts& facts) { return FormatFacts(facts, nullptr); }

// A facts annotation as a string literal: in double quotes, as FX prints
// them, when nothing in it needs escaping; otherwise as QuotePython quotes it
// (a Const holding a JSON string has quotes of its own), which the lexer reads
// back the same.
namespace {
std::string QuoteFacts(const std::string& facts) {
  const bool plain = std::none_of(facts.begin(), facts.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  return plain ? "\"" + facts + "\"" : text_form::QuotePython(facts);
}
}  // namespace

std::string PrintGraph(const Graph& graph) {
  std::string out;
  // Header: graph facts.
  out += fmt::format("# fxremat.graph v{} kind={}", 1, GraphKindName(graph.kind()));
  if (!graph.name().empty()) out += " name=" + text_form::QuotePython(graph.name());
  if (graph.kind() == GraphKind::kJoint) {
    const JointFacts& j = graph.joint();
    out += fmt::format(" num_fwd_outputs={} tangent_outputs=[{}]", j.num_fwd_outputs,
                       fmt::join(j.tangent_outputs, ", "));
    if (!j.output_paths.empty()) {
      std::vector<std::string> paths;
      for (const auto& p : j.output_paths) paths.push_back(p ? text_form::QuotePython(*p) : "None");
      out += fmt::format(" output_paths=[{}]", fmt::join(paths, ", "));
    }
  }
  out += "\n";
  for (const auto& [sym, hint] : graph.symbols()) out += fmt::format("# symbol {}={}\n", sym, hint);
  for (const auto& [target, info] : graph.ops()) {
    std::vector<std::string> tags;
    for (const std::string& t : info.tags) tags.push_back(t);
    out += fmt::format("# op {} {} [{}]", target, text_form::QuotePython(info.schema_text), fmt::join(tags, ", "));
    if (!info.packet_tags.empty()) out += fmt::format(" packet=[{}]", fmt::join(info.packet_tags, ", "));
    out += "\n";
  }
  for (const auto& [target, c] : graph.constants()) {
    if (c.kind == Constant::Kind::kOpaque) {
      out += fmt::format("# constant {} opaque={}\n", target, text_form::QuotePython(c.type_name));
      continue;
    }
    ValueFacts v;
    v.kind = ValueFacts::Kind::kTensor;
    v.tensor = c.facts;
    out += fmt::format("# constant {} {} {}\n", target, QuoteFacts(FormatFacts(v, &graph)),
                       c.hasData() ? "data=" + text_form::QuotePython(Base64Encode(*c.data)) : "by_reference");
  }
  // Note [Higher-order ops]: each subgraph is a graph of its own text between
  // `# subgraph NAME {` and `# }`.
  for (const auto& [target, sub] : graph.subgraphs())
    out += fmt::format("# subgraph {} {{\n{}# }}\n", target, PrintGraph(*sub));
  std::vector<std::string> params;
  for (Node* p : graph.placeholders()) {
    std::string line = fmt::format("# input {} role={}", p->name(), PlaceholderRoleName(p->role()));
    if (p->target() != p->name()) line += " target=" + text_form::QuotePython(p->target());
    if (!p->path().empty()) line += " path=" + text_form::QuotePython(p->path());
    std::string meta = FormatMeta(p->meta());
    if (!meta.empty()) line += " " + meta;
    out += line + "\n";
    std::string facts = FormatFacts(p->val(), &graph);
    params.push_back(facts.empty() ? p->name() : fmt::format("{}: {}", p->name(), QuoteFacts(facts)));
  }
  out += fmt::format("def forward(self{}{}):\n", params.empty() ? "" : ", ", fmt::join(params, ", "));
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    if (n.isPlaceholder()) continue;
    if (n.isOutput()) {
      std::vector<std::string> values;
      for (Node* v : graph.outputValues()) values.push_back(v ? v->name() : "None");
      if (n.args()[0].kind != Argument::Kind::kList)  // Note [Single-value outputs]
        out += fmt::format("    return {}\n", values[0]);
      else if (graph.returnsList())
        out += fmt::format("    return [{}]\n", fmt::join(values, ", "));
      else
        out += fmt::format("    return ({}{})\n", fmt::join(values, ", "), values.size() == 1 ? "," : "");
      continue;
    }
    std::string facts = FormatFacts(n.val(), &graph);
    std::string lhs = facts.empty() ? n.name() : fmt::format("{}: {}", n.name(), QuoteFacts(facts));
    std::string rhs = n.op() == OpKind::kGetAttr ? "self." + n.target() : FormatCall(n);
    std::string meta = FormatMeta(n.meta());
    out += fmt::format("    {} = {}{}\n", lhs, rhs, meta.empty() ? "" : "  # " + meta);
  }
  return out;
}

}  // namespace fxremat
