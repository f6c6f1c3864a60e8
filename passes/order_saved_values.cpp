// order_saved_values (Note [Symbol bindings], Note [Activations with no
// version counter checks in eager] in order_saved_values.h).
#include "passes/order_saved_values.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>

namespace fxremat {

namespace {

void SymbolsOfExpr(const Graph& joint, std::string_view expr, std::set<std::string>& out) {
  size_t i = 0;
  while (i < expr.size()) {
    const unsigned char c = static_cast<unsigned char>(expr[i]);
    if (std::isalpha(c) || c == '_') {
      size_t j = i + 1;
      while (j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_')) ++j;
      std::string word(expr.substr(i, j - i));
      if (joint.symbols().count(word)) out.insert(std::move(word));
      i = j;
    } else {
      ++i;
    }
  }
}

void Collect(const Graph& joint, const ValueFacts& val, std::set<std::string>& out) {
  switch (val.kind) {
    case ValueFacts::Kind::kSymInt:
    case ValueFacts::Kind::kSymFloat:
    case ValueFacts::Kind::kSymBool: SymbolsOfExpr(joint, val.expr, out); break;
    case ValueFacts::Kind::kTensor:
      for (const Dim& d : val.tensor.shape) SymbolsOfExpr(joint, d.expr.str(), out);
      for (const Dim& d : val.tensor.stride) SymbolsOfExpr(joint, d.expr.str(), out);
      break;
    case ValueFacts::Kind::kTuple:
      for (const ValueFacts& item : val.items) Collect(joint, item, out);
      break;
    default: break;
  }
}

// Whether a symbol is unbacked: PyTorch names those u0, u1, ... (SymT.UNBACKED_INT;
// an unbacked float's is zuf0, ...), backed ones s0, s1, ....
bool IsUnbackedSymbol(std::string_view name) {
  std::string_view digits = name;
  if (digits.rfind("zuf", 0) == 0) digits.remove_prefix(3);
  else if (!digits.empty() && digits.front() == 'u') digits.remove_prefix(1);
  else return false;
  return !digits.empty() && std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The symbol a node binds (the reference's is_symbol_binding_fx_node): a SymInt
// whose expression is a bare symbol, on a placeholder (a backed size the inputs
// carry) or on any node for an unbacked symbol (u0 = _local_scalar_dense(...),
// the .item() that creates it). Empty if none. An expression of an unbacked
// symbol (u0 + 2) binds nothing: the backward needs u0 itself, which Inductor's
// generated code names (16c of the usage hunt: "name 'u0' is not defined").
std::string BoundSymbol(const Graph& joint, const Node& n) {
  if (n.val().kind != ValueFacts::Kind::kSymInt || !joint.symbols().count(n.val().expr)) return "";
  return n.isPlaceholder() || IsUnbackedSymbol(n.val().expr) ? n.val().expr : "";
}

}  // namespace

std::vector<std::string> FreeSymbols(const Graph& joint, const ValueFacts& val) {
  std::set<std::string> out;
  Collect(joint, val, out);
  return {out.begin(), out.end()};  // name order, as the reference sorts by s.name
}

Expected<bool> BindSavedSymbols(const Graph& joint, const std::vector<Node*>& tangents,
                                const std::vector<Node*>& saved_tensors, std::vector<Node*>& saved_syms) {
  if (joint.symbols().empty()) return false;
  // The first binding node of each symbol (the reference's find_symbol_binding_fx_nodes).
  std::map<std::string, Node*> binding_of;
  for (const auto& up : joint.nodes())
    if (std::string s = BoundSymbol(joint, *up); !s.empty()) binding_of.emplace(s, up.get());
  std::set<std::string> bound;
  std::vector<Node*> binding, derived;
  for (Node* n : saved_syms) {
    if (std::string s = BoundSymbol(joint, *n); !s.empty()) {
      bound.insert(s);
      binding.push_back(n);
    } else {
      derived.push_back(n);
    }
  }
  auto visit = [&](const Node* n) {
    for (const std::string& s : FreeSymbols(joint, n->val())) {
      if (bound.count(s)) continue;
      bound.insert(s);
      auto it = binding_of.find(s);
      if (it != binding_of.end() && std::find(binding.begin(), binding.end(), it->second) == binding.end())
        binding.push_back(it->second);
    }
  };
  for (const Node* n : derived) visit(n);
  for (const Node* n : saved_tensors) visit(n);
  for (const Node* n : tangents) visit(n);
  std::vector<Node*> ordered = binding;
  ordered.insert(ordered.end(), derived.begin(), derived.end());
  if (ordered == saved_syms) return false;
  saved_syms = std::move(ordered);
  return true;
}

bool OrderNoVcCheckLast(std::vector<Node*>& saved_tensors) {
  std::vector<Node*> ordered;
  for (Node* n : saved_tensors)
    if (!n->meta().no_vc_check) ordered.push_back(n);
  for (Node* n : saved_tensors)
    if (n->meta().no_vc_check) ordered.push_back(n);
  if (ordered == saved_tensors) return false;
  saved_tensors = std::move(ordered);
  return true;
}

}  // namespace fxremat
