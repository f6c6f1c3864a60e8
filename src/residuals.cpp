// The residual report (residuals.h): what each saved value is, in the words of
// JAX's print_saved_residuals, with where it sits in the two graphs.
#include "fxremat/residuals.h"

#include <algorithm>

#include <fmt/format.h>

namespace fxremat {

namespace {

// "f32[64,s0]", JAX style; symints as "Sym(s0)".
std::string ShortType(const ValueFacts& v) {
  if (v.is_tensor()) {
    std::vector<std::string> dims;
    for (const Dim& d : v.tensor.shape) dims.push_back(d.is_static() ? std::to_string(d.hint) : d.expr.str());
    return fmt::format("{}[{}]", DTypeShortName(v.tensor.dtype), fmt::join(dims, ","));
  }
  if (v.kind == ValueFacts::Kind::kSymFloat) return v.expr.empty() ? "SymFloat" : fmt::format("SymFloat({})", v.expr);
  if (v.kind == ValueFacts::Kind::kSymBool) return v.expr.empty() ? "SymBool" : fmt::format("SymBool({})", v.expr);
  return v.expr.empty() ? "Sym" : fmt::format("Sym({})", v.expr);
}

// "aten.sin" for "aten.sin.default": the op packet, as JAX names primitives.
std::string PacketName(const std::string& target) {
  size_t first = target.find('.');
  size_t last = target.rfind('.');
  if (first == std::string::npos || first == last) return target;
  return target.substr(0, last);
}

std::string Origin(const SavedValue& s, const Signature& sig) {
  const std::string location = s.origin_location.empty() ? "" : fmt::format(" ({})", s.origin_location);
  auto primal = std::find_if(sig.primals.begin(), sig.primals.end(),
                             [&](const PrimalEntry& p) { return p.name == s.name; });
  if (primal != sig.primals.end())
    return fmt::format("from the argument {}{}", s.name, primal->path.empty() ? "" : fmt::format(" ({})", primal->path));
  if (!s.names.empty() || s.annotation) {
    std::vector<std::string> quoted;
    if (s.names.empty()) quoted.push_back(fmt::format("'{}'", *s.annotation));
    for (const std::string& name : s.names) quoted.push_back(fmt::format("'{}'", name));
    return fmt::format("named {}{}", fmt::join(quoted, ", "), location);
  }
  if (!s.origin_op.empty()) return fmt::format("output of {}{}", PacketName(s.origin_op), location);
  return fmt::format("value {}{}", s.name, location);
}

}  // namespace

ResidualDescription DescribeResidual(const SavedValue& value, const Signature& sig) {
  return {ShortType(value.facts), Origin(value, sig)};
}

std::string ResidualReport(const Signature& sig) {
  std::vector<const SavedValue*> order;
  for (const SavedValue& s : sig.saved) order.push_back(&s);
  std::stable_sort(order.begin(), order.end(), [](const SavedValue* a, const SavedValue* b) {
    return a->forward_output_index < b->forward_output_index;
  });
  std::vector<std::string> descriptions;
  size_t width = 0;
  for (const SavedValue* s : order) {
    descriptions.push_back(fmt::format("{} {}", ShortType(s->facts), Origin(*s, sig)));
    width = std::max(width, descriptions.back().size());
  }
  // The rule that decided each value, as a column of its own when known.
  size_t rule_width = 0;
  for (const SavedValue* s : order) rule_width = std::max(rule_width, s->rule.size());
  std::string out;
  for (size_t i = 0; i < order.size(); ++i) {
    const SavedValue& s = *order[i];
    const std::string rule = rule_width == 0 ? "" : fmt::format("{:<{}}  ", s.rule, rule_width);
    out += fmt::format("{:<{}}  {}{:<9}  fw_out {}  bw_in {}\n", descriptions[i], width, rule,
                       s.offloaded ? "offloaded" : "saved", s.forward_output_index, s.backward_input_index);
  }
  const int64_t offloaded = sig.offloadedBytes();
  out += fmt::format("{} residual{}: {} B saved on device, {} B offloaded to host", order.size(),
                     order.size() == 1 ? "" : "s", sig.savedBytes() - offloaded, offloaded);
  if (const int64_t syms = sig.savedSymInts(); syms > 0)
    out += fmt::format(", {} symint{} on the autograd context", syms, syms == 1 ? "" : "s");
  out += "\n";
  if (sig.peak) {
    const PeakSummary& pk = *sig.peak;
    out += fmt::format("step peak (simulated): {} B above the inputs, {}", pk.bytes,
                       pk.node.empty() ? fmt::format("when the tangents arrive in the {}", pk.graph)
                                       : fmt::format("at {} in the {}", pk.node, pk.graph));
    if (pk.budget_bytes) out += fmt::format(" (budget {} B)", *pk.budget_bytes);
    out += fmt::format("; {} B live after the forward\n", pk.live_after_forward_bytes);
  }
  return out;
}

}  // namespace fxremat
