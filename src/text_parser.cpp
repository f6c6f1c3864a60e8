// Parses the IR text form printed by text_printer.cpp. Line based: `#` header
// lines carry graph, op and placeholder facts; `def forward(...)` declares the
// placeholders with their value facts; each body line defines one node.
// Errors carry "line N, col M".
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/text.h"
#include "src/constants_io.h"
#include "src/facts_check.h"
#include "text_common.h"

namespace fxremat {

namespace {

enum class Tok { kEnd, kIdent, kInt, kFloat, kString, kPunct };

struct Token {
  Tok kind = Tok::kEnd;
  std::string text;  // identifier (may contain dots), punctuation, or unquoted string
  int64_t int_value = 0;
  double double_value = 0;
  size_t col = 0;
};

// Tokenizes one line. '#' outside a string ends the tokens (a comment).
class Lexer {
 public:
  Lexer(std::string_view line, int line_no) : s_(line), line_no_(line_no) {}

  Status Error(size_t col, const std::string& message) const {
    return Status::BadInput(message, fmt::format("line {}, col {}", line_no_, col + 1));
  }
  const Token& peek() const { return current_; }
  // The raw text after a '#' that ended the tokens, if any.
  std::optional<std::string_view> comment() const { return comment_; }

  Status Advance() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    current_ = Token();
    current_.col = pos_;
    if (pos_ >= s_.size()) return Status::Ok();
    char c = s_[pos_];
    if (c == '#') {
      comment_ = s_.substr(pos_ + 1);
      pos_ = s_.size();
      return Status::Ok();
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                                  (s_[pos_] == '.' && pos_ + 1 < s_.size() &&
                                   (std::isalpha(static_cast<unsigned char>(s_[pos_ + 1])) || s_[pos_ + 1] == '_'))))
        ++pos_;
      current_.kind = Tok::kIdent;
      current_.text = std::string(s_.substr(start, pos_ - start));
      return Status::Ok();
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '-' && pos_ + 1 < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_ + 1])) || s_.substr(pos_ + 1, 3) == "inf"))) {
      size_t start = pos_;
      if (c == '-' && s_.substr(pos_ + 1, 3) == "inf") {
        pos_ += 4;
        current_.kind = Tok::kFloat;
        current_.double_value = -INFINITY;
        current_.text = "-inf";
        return Status::Ok();
      }
      ++pos_;
      bool is_float = false;
      while (pos_ < s_.size()) {
        char d = s_[pos_];
        if (std::isdigit(static_cast<unsigned char>(d))) { ++pos_; continue; }
        if (d == '.' || d == 'e' || d == 'E') { is_float = true; ++pos_; continue; }
        if ((d == '-' || d == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) { ++pos_; continue; }
        break;
      }
      std::string text(s_.substr(start, pos_ - start));
      current_.text = text;
      char* end = nullptr;
      if (is_float) {
        current_.kind = Tok::kFloat;
        current_.double_value = std::strtod(text.c_str(), &end);
      } else {
        current_.kind = Tok::kInt;
        errno = 0;
        current_.int_value = std::strtoll(text.c_str(), &end, 10);
        if (errno == ERANGE) return Error(start, fmt::format("integer '{}' out of range", text));
      }
      if (end != text.c_str() + text.size()) return Error(start, fmt::format("bad number '{}'", text));
      return Status::Ok();
    }
    if (c == '\'' || c == '"') return LexString(c);
    current_.kind = Tok::kPunct;
    current_.text = std::string(1, c);
    ++pos_;
    return Status::Ok();
  }

  Status Expect(std::string_view punct) {
    if (current_.kind != Tok::kPunct || current_.text != punct)
      return Error(current_.col, fmt::format("expected '{}', found {}", punct, Describe()));
    return Advance();
  }
  bool IsPunct(std::string_view punct) const { return current_.kind == Tok::kPunct && current_.text == punct; }
  Expected<std::string> ExpectIdent() {
    if (current_.kind != Tok::kIdent) return Error(current_.col, fmt::format("expected a name, found {}", Describe()));
    std::string text = current_.text;
    FXREMAT_RETURN_IF_ERROR(Advance());
    return text;
  }
  Expected<std::string> ExpectString() {
    if (current_.kind != Tok::kString) return Error(current_.col, fmt::format("expected a string, found {}", Describe()));
    std::string text = current_.text;
    FXREMAT_RETURN_IF_ERROR(Advance());
    return text;
  }
  Expected<int64_t> ExpectInt() {
    if (current_.kind != Tok::kInt) return Error(current_.col, fmt::format("expected an integer, found {}", Describe()));
    int64_t v = current_.int_value;
    FXREMAT_RETURN_IF_ERROR(Advance());
    return v;
  }
  std::string Describe() const {
    switch (current_.kind) {
      case Tok::kEnd: return "end of line";
      case Tok::kString: return "a string";
      default: return fmt::format("'{}'", current_.text);
    }
  }

 private:
  Status LexString(char quote) {
    size_t start = pos_++;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      char c = s_[pos_++];
      if (c != '\\') { out += c; continue; }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'x': {
          if (pos_ + 2 > s_.size()) return Error(pos_, "bad \\x escape");
          out += static_cast<char>(std::strtol(std::string(s_.substr(pos_, 2)).c_str(), nullptr, 16));
          pos_ += 2;
          break;
        }
        default: out += e;
      }
    }
    if (pos_ >= s_.size()) return Error(start, "unterminated string");
    ++pos_;
    current_.kind = Tok::kString;
    current_.text = std::move(out);
    return Status::Ok();
  }

  std::string_view s_;
  int line_no_;
  size_t pos_ = 0;
  Token current_;
  std::optional<std::string_view> comment_;
};

// Parses value facts from an annotation string ("f32[4, s0][s0, 1]cpu rg").

class FactsParser {
 public:
  FactsParser(std::string_view s, const Graph& graph) : s_(s), graph_(graph) {}
  Expected<ValueFacts> Parse() {
    FXREMAT_ASSIGN_OR_RETURN(ValueFacts v, ParseOne());
    SkipSpaces();
    if (pos_ != s_.size()) return Err("trailing text");
    return v;
  }

 private:
  Status Err(const std::string& what) const {
    const std::string shown = s_.size() > 80 ? std::string(s_.substr(0, 77)) + "..." : std::string(s_);
    return Status::BadInput(fmt::format("bad type annotation \"{}\": {} at offset {}", shown, what, pos_));
  }
  void SkipSpaces() { while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_; }
  bool Consume(std::string_view t) {
    if (s_.substr(pos_, t.size()) == t) { pos_ += t.size(); return true; }
    return false;
  }
  // Text up to the matching close bracket (balanced), consuming the bracket.
  Expected<std::string_view> Balanced(char open, char close) {
    int depth = 1;
    size_t start = pos_;
    for (; pos_ < s_.size(); ++pos_) {
      if (s_[pos_] == open) ++depth;
      else if (s_[pos_] == close && --depth == 0) {
        std::string_view inner = s_.substr(start, pos_ - start);
        ++pos_;
        return inner;
      }
    }
    return Err(fmt::format("missing '{}'", close));
  }
  // A whole decimal int64 (no silent saturation: 2^64 is refused, not read as 2^63-1).
  Expected<int64_t> ParseInt64(std::string_view text, const char* what) const {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc::result_out_of_range) return Err(fmt::format("{} '{}' is outside int64", what, text));
    if (ec != std::errc() || end != text.data() + text.size()) return Err(fmt::format("bad {} '{}'", what, text));
    return v;
  }
  Expected<Dim> ParseDim(std::string_view text) {
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
    if (text.empty()) return Err("empty dimension");
    bool numeric = true;
    for (size_t i = 0; i < text.size(); ++i)
      numeric = numeric && (std::isdigit(static_cast<unsigned char>(text[i])) || (i == 0 && text[i] == '-'));
    if (numeric) {
      FXREMAT_ASSIGN_OR_RETURN(int64_t v, ParseInt64(text, "dimension"));
      return Dim::Static(v);
    }
    Dim d;
    if (auto tilde = text.rfind('~'); tilde != std::string_view::npos) {
      d.expr = std::string(text.substr(0, tilde));
      FXREMAT_ASSIGN_OR_RETURN(d.hint, ParseInt64(text.substr(tilde + 1), "hint"));
      return d;
    }
    d.expr = std::string(text);
    auto it = graph_.symbols().find(d.expr);
    if (it == graph_.symbols().end()) return Err(fmt::format("symbol '{}' has no hint (add '# symbol {}=N')", d.expr.str(), d.expr.str()));
    d.hint = it->second;
    return d;
  }
  Expected<DimVector> ParseDims(std::string_view inner) {
    DimVector dims;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= inner.size(); ++i) {
      if (i < inner.size() && (inner[i] == '(' || inner[i] == '[')) ++depth;
      else if (i < inner.size() && (inner[i] == ')' || inner[i] == ']')) --depth;
      else if (i == inner.size() || (inner[i] == ',' && depth == 0)) {
        std::string_view part = inner.substr(start, i - start);
        if (!(i == inner.size() && dims.empty() && part.find_first_not_of(' ') == std::string_view::npos)) {
          FXREMAT_ASSIGN_OR_RETURN(Dim d, ParseDim(part));
          dims.push_back(std::move(d));
        }
        start = i + 1;
      }
    }
    return dims;
  }
  Expected<ValueFacts> ParseOne() {
    // Tuples nest a few levels; a deeper annotation is refused, not recursed into.
    ++depth_;
    Expected<ValueFacts> v = ParseOneAtDepth();
    --depth_;
    return v;
  }
  Expected<ValueFacts> ParseOneAtDepth() {
    SkipSpaces();
    ValueFacts v;
    if (Consume("None")) { v.kind = ValueFacts::Kind::kNone; return v; }
    if (Consume("Sym(")) {
      v.kind = ValueFacts::Kind::kSymInt;
      FXREMAT_ASSIGN_OR_RETURN(std::string_view inner, Balanced('(', ')'));
      FXREMAT_ASSIGN_OR_RETURN(Dim d, ParseDim(inner));
      v.expr = d.expr.empty() ? std::to_string(d.hint) : d.expr.str();
      v.hint = d.hint;
      return v;
    }
    if (Consume("SymFloat(") || Consume("SymBool(")) {
      v.kind = s_[pos_ - 2] == 't' ? ValueFacts::Kind::kSymFloat : ValueFacts::Kind::kSymBool;
      FXREMAT_ASSIGN_OR_RETURN(std::string_view inner, Balanced('(', ')'));
      v.expr = std::string(inner);
      return v;
    }
    if (Consume("Opaque(")) {  // Note [Opaque inputs]: the type's name
      v.kind = ValueFacts::Kind::kOpaque;
      FXREMAT_ASSIGN_OR_RETURN(std::string_view inner, Balanced('(', ')'));
      if (inner.empty()) return Err("Opaque() names no type");
      for (char c : inner)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'))
          return Err(fmt::format("Opaque({}): a type name is a dotted identifier", inner));
      v.expr = std::string(inner);
      return v;
    }
    if (Consume("Const(")) {
      v.kind = ValueFacts::Kind::kConst;
      FXREMAT_ASSIGN_OR_RETURN(std::string_view inner, Balanced('(', ')'));
      // The constant is JSON text (what the JSON form holds under "value"); the
      // writers copy it verbatim, so anything else would make them write invalid
      // JSON (found by the fuzzer).
      if (!nlohmann::json::accept(inner))
        return Err(fmt::format("Const({}) does not hold a JSON value", inner));
      v.expr = std::string(inner);
      return v;
    }
    if (Consume("(")) {
      // Counted as the JSON reader counts: tuples in tuples.
      if (depth_ > kMaxTupleNesting) return Err(fmt::format("tuples nest deeper than {} levels", kMaxTupleNesting));
      v.kind = ValueFacts::Kind::kTuple;
      while (true) {
        SkipSpaces();
        if (Consume(")")) return v;
        FXREMAT_ASSIGN_OR_RETURN(ValueFacts item, ParseOne());
        v.items.push_back(std::move(item));
        SkipSpaces();
        if (Consume(",")) continue;
        if (Consume(")")) return v;
        return Err("expected ',' or ')'");
      }
    }
    size_t bracket = s_.find('[', pos_);
    if (bracket == std::string_view::npos) return Err("expected a tensor type like f32[4, 4]");
    auto dtype = DTypeFromShortName(s_.substr(pos_, bracket - pos_));
    if (!dtype) return Err(fmt::format("unknown dtype '{}'", s_.substr(pos_, bracket - pos_)));
    v.kind = ValueFacts::Kind::kTensor;
    v.tensor.dtype = *dtype;
    pos_ = bracket + 1;
    FXREMAT_ASSIGN_OR_RETURN(std::string_view shape, Balanced('[', ']'));
    FXREMAT_ASSIGN_OR_RETURN(v.tensor.shape, ParseDims(shape));
    if (Consume("[")) {
      FXREMAT_ASSIGN_OR_RETURN(std::string_view stride, Balanced('[', ']'));
      FXREMAT_ASSIGN_OR_RETURN(v.tensor.stride, ParseDims(stride));
      if (v.tensor.stride.size() != v.tensor.shape.size())
        return Err(fmt::format("{} strides for {} dims", v.tensor.stride.size(), v.tensor.shape.size()));
    }
    if (auto problem = FindTensorFactsProblem(v.tensor)) return Err(problem->message);
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != ',' && s_[pos_] != ')') ++pos_;
    v.tensor.device = std::string(s_.substr(start, pos_ - start));
    if (v.tensor.device.empty()) return Err("missing device");
    if (!IsDeviceName(v.tensor.device.str()))
      return Err(fmt::format("not a device: '{}' (cpu, cuda:0, ...)", v.tensor.device.str()));
    if (s_.substr(pos_, 3) == " rg") { v.tensor.requires_grad = true; pos_ += 3; }
    if (s_.substr(pos_, 2) == " @") {
      pos_ += 2;
      size_t start_digits = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == start_digits) return Err("expected a storage id after '@'");
      FXREMAT_ASSIGN_OR_RETURN(v.tensor.storage, ParseInt64(s_.substr(start_digits, pos_ - start_digits), "storage id"));
    }
    return v;
  }

  std::string_view s_;
  const Graph& graph_;
  size_t pos_ = 0;
  int depth_ = 0;
};


class Parser {
 public:
  // `first_line`: the line number of the text's first line (a subgraph block's
  // text is parsed on its own, with the enclosing text's line numbers);
  // `nesting`: how many subgraph blocks enclose it.
  explicit Parser(int first_line = 1, int nesting = 0) : first_line_(first_line), nesting_(nesting) {}
  Expected<std::unique_ptr<Graph>> Parse(std::string_view text);

 private:
  Status ParseHeaderLine(Lexer& lex);
  Status ParseMetaPairs(Lexer& lex, NodeMeta& meta, Node* placeholder);
  Status ParseDef(Lexer& lex);
  Status ParseBodyLine(Lexer& lex);
  Expected<Argument> ParseArgument(Lexer& lex);
  Expected<ValueFacts> ParseFacts(Lexer& lex, const std::string& annotation, size_t col);

  struct PendingInput {
    PlaceholderRole role = PlaceholderRole::kNone;
    std::string target, path;
    NodeMeta meta;
  };
  std::unique_ptr<Graph> graph_ = std::make_unique<Graph>();
  int argument_depth_ = 0;
  std::vector<std::pair<std::string, PendingInput>> inputs_;
  bool seen_header_ = false, seen_def_ = false, seen_return_ = false;
  int first_line_ = 1;
  int nesting_ = 0;
};

// `# subgraph NAME {`: the name, when `line` (after its '#') opens a subgraph block.
std::optional<std::string_view> SubgraphBlockName(std::string_view after_hash) {
  size_t i = after_hash.find_first_not_of(' ');
  if (i == std::string_view::npos || after_hash.substr(i, 9) != "subgraph ") return std::nullopt;
  std::string_view rest = after_hash.substr(i + 9);
  while (!rest.empty() && rest.back() == ' ') rest.remove_suffix(1);
  if (rest.size() < 2 || rest.back() != '{') return std::nullopt;
  rest.remove_suffix(1);
  while (!rest.empty() && rest.back() == ' ') rest.remove_suffix(1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return rest;
}

bool IsSubgraphBlockEnd(std::string_view after_hash) {
  size_t i = after_hash.find_first_not_of(' ');
  return i != std::string_view::npos && after_hash.substr(i) == "}";
}

Expected<ValueFacts> Parser::ParseFacts(Lexer& lex, const std::string& annotation, size_t col) {
  auto facts = FactsParser(annotation, *graph_).Parse();
  if (!facts.ok()) return lex.Error(col, facts.status().message());
  return facts;
}

Status Parser::ParseMetaPairs(Lexer& lex, NodeMeta& meta, Node* /*placeholder*/) {
  while (lex.peek().kind != Tok::kEnd) {
    size_t col = lex.peek().col;
    FXREMAT_ASSIGN_OR_RETURN(std::string key, lex.ExpectIdent());
    // Flags: present (true) or absent, no value.
    static constexpr std::pair<std::string_view, bool NodeMeta::*> kFlags[] = {
        {"offload_requested", &NodeMeta::offload_requested},
        {"mutated", &NodeMeta::mutated},
        {"no_vc_check", &NodeMeta::no_vc_check},
        {"has_backward_hook", &NodeMeta::has_backward_hook},
    };
    bool is_flag = false;
    for (const auto& [name, field] : kFlags)
      if (key == name) {
        meta.*field = true;
        is_flag = true;
      }
    if (is_flag) continue;
    FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
    if (key == "tag") {
      const size_t value_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string tag, lex.ExpectIdent());
      std::optional<PartitionerTag> t = PartitionerTagFromName(tag);
      if (!t) return lex.Error(value_col, fmt::format("unknown partitioner tag '{}'", tag));
      meta.partitioner_tag = *t;
    } else if (key == "recompute") {
      const size_t value_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string policy, lex.ExpectIdent());
      std::optional<Decision> d = RecomputeTagFromName(policy);
      if (!d) return lex.Error(value_col, fmt::format("unknown checkpoint policy '{}' (recompute tag)", policy));
      meta.recompute = *d;
    }
    else if (key == "written_back_from") { FXREMAT_ASSIGN_OR_RETURN(int64_t k, lex.ExpectInt()); meta.mutableRare().written_back_from = k; }
    else if (key == "reads_mutated") { FXREMAT_ASSIGN_OR_RETURN(meta.mutableRare().reads_mutated, lex.ExpectIdent()); }
    else if (key == "ac_graph_id") { FXREMAT_ASSIGN_OR_RETURN(int64_t id, lex.ExpectInt()); meta.mutableRare().ac_graph_id = id; }
    else if (key == "memory_budget" || key == "region_memory_budget") {
      const Token tok = lex.peek();
      if (tok.kind != Tok::kFloat && tok.kind != Tok::kInt) return lex.Error(tok.col, fmt::format("{} takes a number", key));
      FXREMAT_RETURN_IF_ERROR(lex.Advance());
      const double v = tok.kind == Tok::kFloat ? tok.double_value : static_cast<double>(tok.int_value);
      (key == "memory_budget" ? meta.mutableRare().memory_budget : meta.mutableRare().region_memory_budget) = v;
    }
    else if (key == "stack") { FXREMAT_ASSIGN_OR_RETURN(meta.stack_trace, lex.ExpectString()); }
    else if (key == "names") {
      FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
      while (!lex.IsPunct("]")) {
        FXREMAT_ASSIGN_OR_RETURN(std::string name, lex.ExpectString());
        meta.names.push_back(std::move(name));
        if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
      }
      FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
    } else if (key == "value_range") {
      FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
      FXREMAT_ASSIGN_OR_RETURN(int64_t lo, lex.ExpectInt());
      FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
      FXREMAT_ASSIGN_OR_RETURN(int64_t hi, lex.ExpectInt());
      FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
      meta.mutableRare().value_range = std::make_pair(lo, hi);
    } else {
      return lex.Error(col, fmt::format("unknown metadata key '{}'", key));
    }
  }
  return Status::Ok();
}

Status Parser::ParseHeaderLine(Lexer& lex) {
  // `lex` is positioned on the first token after '#'.
  size_t col = lex.peek().col;
  FXREMAT_ASSIGN_OR_RETURN(std::string word, lex.ExpectIdent());
  if (word == "fxremat.graph") {
    FXREMAT_ASSIGN_OR_RETURN(std::string version, lex.ExpectIdent());
    if (version != "v1") return lex.Error(col, fmt::format("unsupported text form version '{}' (this parser reads v1)", version));
    seen_header_ = true;
    while (lex.peek().kind != Tok::kEnd) {
      size_t key_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string key, lex.ExpectIdent());
      FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
      if (key == "kind") {
        FXREMAT_ASSIGN_OR_RETURN(std::string kind, lex.ExpectIdent());
        auto k = GraphKindFromName(kind);
        if (!k) return lex.Error(key_col, fmt::format("unknown graph kind '{}'", kind));
        graph_->setKind(*k);
      } else if (key == "name") {
        FXREMAT_ASSIGN_OR_RETURN(std::string name, lex.ExpectString());
        graph_->setName(name);
      } else if (key == "num_fwd_outputs") {
        FXREMAT_ASSIGN_OR_RETURN(graph_->joint().num_fwd_outputs, lex.ExpectInt());
      } else if (key == "tangent_outputs") {
        FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
        while (!lex.IsPunct("]")) {
          FXREMAT_ASSIGN_OR_RETURN(int64_t o, lex.ExpectInt());
          graph_->joint().tangent_outputs.push_back(o);
          if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
        }
        FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
      } else if (key == "output_paths") {
        FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
        while (!lex.IsPunct("]")) {
          if (lex.peek().kind == Tok::kIdent && lex.peek().text == "None") {
            FXREMAT_RETURN_IF_ERROR(lex.Advance());
            graph_->joint().output_paths.emplace_back(std::nullopt);
          } else {
            FXREMAT_ASSIGN_OR_RETURN(std::string p, lex.ExpectString());
            graph_->joint().output_paths.emplace_back(p);
          }
          if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
        }
        FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
      } else {
        return lex.Error(key_col, fmt::format("unknown graph attribute '{}'", key));
      }
    }
    return Status::Ok();
  }
  if (!seen_header_) return lex.Error(col, "the first line must be '# fxremat.graph v1 kind=...'");
  if (word == "symbol") {
    FXREMAT_ASSIGN_OR_RETURN(std::string sym, lex.ExpectIdent());
    FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
    FXREMAT_ASSIGN_OR_RETURN(int64_t hint, lex.ExpectInt());
    graph_->symbols()[sym] = hint;
    return Status::Ok();
  }
  if (word == "constant") {
    FXREMAT_ASSIGN_OR_RETURN(std::string target, lex.ExpectIdent());
    if (graph_->constants().count(target)) return lex.Error(col, fmt::format("constant '{}' given twice", target));
    Constant c;
    if (lex.peek().kind == Tok::kIdent && lex.peek().text == "opaque") {
      FXREMAT_RETURN_IF_ERROR(lex.Advance());
      FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
      c.kind = Constant::Kind::kOpaque;
      FXREMAT_ASSIGN_OR_RETURN(c.type_name, lex.ExpectString());
    } else {
      size_t facts_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string annotation, lex.ExpectString());
      FXREMAT_ASSIGN_OR_RETURN(ValueFacts v, ParseFacts(lex, annotation, facts_col));
      if (!v.is_tensor()) return lex.Error(facts_col, "a constant's facts must be a tensor's");
      c.facts = v.tensor;
      size_t data_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string key, lex.ExpectIdent());
      if (key == "data") {
        FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
        FXREMAT_ASSIGN_OR_RETURN(std::string text, lex.ExpectString());
        auto bytes = Base64Decode(text, "");
        if (!bytes.ok()) return lex.Error(data_col, bytes.status().message());
        int64_t expected = DTypeItemSize(c.facts.dtype);
        for (const Dim& d : c.facts.shape) expected *= d.hint;
        if (static_cast<int64_t>(bytes->size()) != expected)
          return lex.Error(data_col, fmt::format("{} bytes of data for a tensor of {} bytes", bytes->size(), expected));
        c.data = std::make_shared<const std::string>(std::move(bytes).value());
      } else if (key != "by_reference") {
        return lex.Error(data_col, "expected data='BASE64' or by_reference");
      }
    }
    graph_->constants().emplace(target, std::move(c));
    return Status::Ok();
  }
  if (word == "op") {
    FXREMAT_ASSIGN_OR_RETURN(std::string target, lex.ExpectIdent());
    FXREMAT_ASSIGN_OR_RETURN(std::string schema, lex.ExpectString());
    std::vector<std::string> tags;
    FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
    // Tags are torch.Tag names: identifiers, as the JSON reader requires (the
    // lexer's identifiers also take dotted targets; found by the fuzzer).
    auto expect_tag = [&]() -> Expected<std::string> {
      const size_t tag_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string tag, lex.ExpectIdent());
      if (!IsPythonIdentifier(tag)) return lex.Error(tag_col, fmt::format("tag '{}' is not an identifier", tag));
      return tag;
    };
    while (!lex.IsPunct("]")) {
      FXREMAT_ASSIGN_OR_RETURN(std::string tag, expect_tag());
      tags.push_back(tag);
      if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
    }
    FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
    std::vector<std::string> packet_tags;
    if (lex.peek().kind == Tok::kIdent && lex.peek().text == "packet") {
      FXREMAT_RETURN_IF_ERROR(lex.Advance());
      FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
      FXREMAT_RETURN_IF_ERROR(lex.Expect("["));
      while (!lex.IsPunct("]")) {
        FXREMAT_ASSIGN_OR_RETURN(std::string tag, expect_tag());
        packet_tags.push_back(tag);
        if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
      }
      FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
    }
    auto info = MakeOpInfo(target, schema, std::move(tags));
    if (!info.ok()) return lex.Error(col, info.status().ToString());
    info->packet_tags = std::move(packet_tags);
    graph_->ops().emplace(target, std::move(info).value());
    return Status::Ok();
  }
  if (word == "input") {
    FXREMAT_ASSIGN_OR_RETURN(std::string name, lex.ExpectIdent());
    PendingInput input;
    input.target = name;
    NodeMeta& meta = input.meta;
    while (lex.peek().kind != Tok::kEnd) {
      // role/target/path first, then the shared metadata keys.
      if (lex.peek().kind == Tok::kIdent &&
          (lex.peek().text == "role" || lex.peek().text == "target" || lex.peek().text == "path")) {
        size_t key_col = lex.peek().col;
        std::string key = lex.peek().text;
        FXREMAT_RETURN_IF_ERROR(lex.Advance());
        FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
        if (key == "role") {
          FXREMAT_ASSIGN_OR_RETURN(std::string role, lex.ExpectIdent());
          auto r = PlaceholderRoleFromName(role);
          if (!r) return lex.Error(key_col, fmt::format("unknown placeholder role '{}'", role));
          input.role = *r;
        } else if (key == "target") {
          FXREMAT_ASSIGN_OR_RETURN(input.target, lex.ExpectString());
        } else {
          FXREMAT_ASSIGN_OR_RETURN(input.path, lex.ExpectString());
        }
        continue;
      }
      FXREMAT_RETURN_IF_ERROR(ParseMetaPairs(lex, meta, nullptr));
    }
    inputs_.emplace_back(name, std::move(input));
    return Status::Ok();
  }
  return lex.Error(col, fmt::format("unknown header line '# {} ...'", word));
}

Expected<Argument> Parser::ParseArgument(Lexer& lex) {
  ++argument_depth_;
  struct Leave {
    int& depth;
    ~Leave() { --depth; }
  } leave{argument_depth_};
  const Token tok = lex.peek();
  switch (tok.kind) {
    case Tok::kInt: FXREMAT_RETURN_IF_ERROR(lex.Advance()); return Argument::Int(tok.int_value);
    case Tok::kFloat: FXREMAT_RETURN_IF_ERROR(lex.Advance()); return Argument::Double(tok.double_value);
    case Tok::kString: FXREMAT_RETURN_IF_ERROR(lex.Advance()); return Argument::String(tok.text);
    case Tok::kPunct:
      if (tok.text == "[") {
        // Arguments nest a few lists deep; a deeper one is refused, not recursed
        // into (the JSON reader counts the same way: lists in lists).
        if (argument_depth_ > kMaxArgumentNesting)
          return lex.Error(tok.col, fmt::format("arguments nest deeper than {} levels", kMaxArgumentNesting));
        FXREMAT_RETURN_IF_ERROR(lex.Advance());
        std::vector<Argument> items;
        while (!lex.IsPunct("]")) {
          FXREMAT_ASSIGN_OR_RETURN(Argument a, ParseArgument(lex));
          items.push_back(std::move(a));
          if (!lex.IsPunct("]")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
        }
        FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
        return Argument::List(std::move(items));
      }
      if (tok.text == "{") {  // a dict with string keys: {'BACKEND': 'AUTO', ...}
        // A dict costs three levels, as its JSON form {"dict": [[k, v]]} does, so
        // that whatever this reader accepts the JSON reader accepts too.
        argument_depth_ += 2;
        struct LeaveDict {
          int& depth;
          ~LeaveDict() { depth -= 2; }
        } leave_dict{argument_depth_};
        if (argument_depth_ > kMaxArgumentNesting)
          return lex.Error(tok.col, fmt::format("arguments nest deeper than {} levels", kMaxArgumentNesting));
        FXREMAT_RETURN_IF_ERROR(lex.Advance());
        std::vector<Argument> items;
        std::set<std::string, std::less<>> keys;
        while (!lex.IsPunct("}")) {
          const Token key = lex.peek();
          if (key.kind != Tok::kString) return lex.Error(key.col, "a dict key must be a string");
          if (!keys.insert(key.text).second) return lex.Error(key.col, fmt::format("the key '{}' is given twice", key.text));
          FXREMAT_RETURN_IF_ERROR(lex.Advance());
          FXREMAT_RETURN_IF_ERROR(lex.Expect(":"));
          FXREMAT_ASSIGN_OR_RETURN(Argument v, ParseArgument(lex));
          items.push_back(Argument::List({Argument::String(key.text), std::move(v)}));
          if (!lex.IsPunct("}")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
        }
        FXREMAT_RETURN_IF_ERROR(lex.Expect("}"));
        return Argument::Dict(std::move(items));
      }
      break;
    case Tok::kIdent: {
      FXREMAT_RETURN_IF_ERROR(lex.Advance());
      if (tok.text == "None") return Argument::None();
      if (tok.text == "True") return Argument::Bool(true);
      if (tok.text == "False") return Argument::Bool(false);
      if (tok.text == "inf") return Argument::Double(INFINITY);
      if (tok.text == "nan") return Argument::Double(NAN);
      if (tok.text == "complex") {  // complex(real, imag): a Python complex scalar
        FXREMAT_RETURN_IF_ERROR(lex.Expect("("));
        double parts[2] = {0, 0};
        for (int i = 0; i < 2; ++i) {
          if (i) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
          const size_t col = lex.peek().col;
          FXREMAT_ASSIGN_OR_RETURN(Argument part, ParseArgument(lex));
          if (part.kind == Argument::Kind::kDouble) parts[i] = part.double_value;
          else if (part.kind == Argument::Kind::kInt) parts[i] = static_cast<double>(part.int_value);
          else return lex.Error(col, "complex(real, imag) takes two numbers");
        }
        FXREMAT_RETURN_IF_ERROR(lex.Expect(")"));
        return Argument::Complex(parts[0], parts[1]);
      }
      if (tok.text == "device") {
        FXREMAT_RETURN_IF_ERROR(lex.Expect("("));
        FXREMAT_ASSIGN_OR_RETURN(std::string key, lex.ExpectIdent());
        if (key != "type") return lex.Error(tok.col, "expected device(type=...)");
        FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
        FXREMAT_ASSIGN_OR_RETURN(std::string type, lex.ExpectString());
        if (lex.IsPunct(",")) {
          FXREMAT_RETURN_IF_ERROR(lex.Advance());
          FXREMAT_ASSIGN_OR_RETURN(std::string index_key, lex.ExpectIdent());
          FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
          FXREMAT_ASSIGN_OR_RETURN(int64_t index, lex.ExpectInt());
          type += ":" + std::to_string(index);
        }
        if (!IsDeviceName(type)) return lex.Error(tok.col, fmt::format("not a device: '{}' (cpu, cuda:0, ...)", type));
        FXREMAT_RETURN_IF_ERROR(lex.Expect(")"));
        return Argument::Device(type);
      }
      if (tok.text.rfind("torch.ops.", 0) == 0 && tok.text.size() > 10)  // an operator as a value
        return Argument::Op(tok.text.substr(10));
      if (tok.text.rfind("torch.", 0) == 0) {
        std::string rest = tok.text.substr(6);
        if (auto d = DTypeFromName(rest)) return Argument::OfDType(*d);
        if (IsLayoutName(rest)) return Argument::Layout(rest);
        // (channels_last has no "_format" suffix; it used to be refused here)
        if (IsMemoryFormatName(rest)) return Argument::MemoryFormat(rest);
        return lex.Error(tok.col, fmt::format("unknown torch constant '{}'", tok.text));
      }
      Node* n = graph_->findNode(tok.text);
      if (!n) return lex.Error(tok.col, fmt::format("'{}' is not defined before this use", tok.text));
      return Argument::NodeRef(n);
    }
    default: break;
  }
  return lex.Error(tok.col, fmt::format("expected an argument, found {}", lex.Describe()));
}

Status Parser::ParseDef(Lexer& lex) {
  seen_def_ = true;
  FXREMAT_RETURN_IF_ERROR(lex.Advance());  // 'def'
  FXREMAT_ASSIGN_OR_RETURN(std::string fn, lex.ExpectIdent());
  if (fn != "forward") return lex.Error(0, "expected 'def forward(self, ...)'");
  FXREMAT_RETURN_IF_ERROR(lex.Expect("("));
  FXREMAT_ASSIGN_OR_RETURN(std::string self, lex.ExpectIdent());
  if (self != "self") return lex.Error(0, "expected 'self' as the first parameter");
  size_t declared = 0;
  while (lex.IsPunct(",")) {
    FXREMAT_RETURN_IF_ERROR(lex.Advance());
    size_t col = lex.peek().col;
    FXREMAT_ASSIGN_OR_RETURN(std::string name, lex.ExpectIdent());
    if (std::string problem = NodeNameProblem(name); !problem.empty())
      return lex.Error(col, fmt::format("node name '{}' {}", name, problem));
    if (graph_->findNode(name)) return lex.Error(col, fmt::format("duplicate node name '{}'", name));
    PendingInput* input = nullptr;
    for (auto& [n, in] : inputs_)
      if (n == name) input = &in;
    Node* node = graph_->createNode(OpKind::kPlaceholder, name, input ? input->target : name);
    if (input) {
      node->setRole(input->role);
      node->setPath(input->path);
      node->meta() = input->meta;
    }
    if (lex.IsPunct(":")) {
      FXREMAT_RETURN_IF_ERROR(lex.Advance());
      size_t facts_col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(std::string annotation, lex.ExpectString());
      FXREMAT_ASSIGN_OR_RETURN(node->val(), ParseFacts(lex, annotation, facts_col));
    }
    ++declared;
  }
  FXREMAT_RETURN_IF_ERROR(lex.Expect(")"));
  FXREMAT_RETURN_IF_ERROR(lex.Expect(":"));
  for (const auto& [name, in] : inputs_)
    if (!graph_->findNode(name))
      return Status::BadInput(fmt::format("'# input {}' names no parameter of forward()", name));
  (void)declared;
  return Status::Ok();
}

// Nothing may follow a return statement's value on its line: `return add, s`
// is a tuple in Python, which the text form writes `return (add, s)`.
static Status ExpectEndOfReturn(Lexer& lex) {
  if (lex.peek().kind != Tok::kEnd)
    return lex.Error(lex.peek().col, fmt::format("unexpected {} after the returned value (write a tuple as "
                                                 "'return (a, b)')",
                                                 lex.Describe()));
  return Status::Ok();
}

Status Parser::ParseBodyLine(Lexer& lex) {
  if (seen_return_) return lex.Error(lex.peek().col, "code after the return statement");
  if (lex.peek().kind == Tok::kIdent && lex.peek().text == "return") {
    FXREMAT_RETURN_IF_ERROR(lex.Advance());
    if (lex.IsPunct("[")) {  // `return [a, b]`: a plain graph returning a list (Note [Single-value outputs])
      if (graph_->kind() != GraphKind::kPlain)
        return lex.Error(lex.peek().col, "only a plain graph returns a list; return a tuple");
      FXREMAT_ASSIGN_OR_RETURN(Argument list, ParseArgument(lex));
      for (const Argument& a : list.list)
        if (a.kind != Argument::Kind::kNode && a.kind != Argument::Kind::kNone)
          return lex.Error(lex.peek().col, "a returned value must be a node or None");
      graph_->setReturnsList(true);
      FXREMAT_RETURN_IF_ERROR(ExpectEndOfReturn(lex));
      graph_->createNode(OpKind::kOutput, graph_->uniqueName("output"), "output", {std::move(list)});
      seen_return_ = true;
      return Status::Ok();
    }
    if (!lex.IsPunct("(")) {  // `return x`: a plain graph's single value (Note [Single-value outputs])
      size_t col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ParseArgument(lex));
      if (a.kind != Argument::Kind::kNode) return lex.Error(col, "a returned value must be a node or a tuple");
      if (graph_->kind() != GraphKind::kPlain)
        return lex.Error(col, "only a plain graph returns a single value; return a tuple");
      FXREMAT_RETURN_IF_ERROR(ExpectEndOfReturn(lex));
      graph_->createNode(OpKind::kOutput, graph_->uniqueName("output"), "output", {std::move(a)});
      seen_return_ = true;
      return Status::Ok();
    }
    FXREMAT_RETURN_IF_ERROR(lex.Expect("("));
    std::vector<Argument> values;
    while (!lex.IsPunct(")")) {
      size_t col = lex.peek().col;
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ParseArgument(lex));
      if (a.kind != Argument::Kind::kNode && a.kind != Argument::Kind::kNone)
        return lex.Error(col, "a returned value must be a node or None");
      values.push_back(std::move(a));
      if (!lex.IsPunct(")")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
    }
    FXREMAT_RETURN_IF_ERROR(lex.Expect(")"));
    FXREMAT_RETURN_IF_ERROR(ExpectEndOfReturn(lex));
    graph_->createNode(OpKind::kOutput, graph_->uniqueName("output"), "output", {Argument::List(std::move(values))});
    seen_return_ = true;
    return Status::Ok();
  }
  size_t name_col = lex.peek().col;
  FXREMAT_ASSIGN_OR_RETURN(std::string name, lex.ExpectIdent());
  if (std::string problem = NodeNameProblem(name); !problem.empty())
    return lex.Error(name_col, fmt::format("node name '{}' {}", name, problem));
  if (graph_->findNode(name)) return lex.Error(name_col, fmt::format("duplicate node name '{}'", name));
  ValueFacts facts;
  if (lex.IsPunct(":")) {
    FXREMAT_RETURN_IF_ERROR(lex.Advance());
    size_t col = lex.peek().col;
    FXREMAT_ASSIGN_OR_RETURN(std::string annotation, lex.ExpectString());
    FXREMAT_ASSIGN_OR_RETURN(facts, ParseFacts(lex, annotation, col));
  }
  FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
  size_t rhs_col = lex.peek().col;
  FXREMAT_ASSIGN_OR_RETURN(std::string callee, lex.ExpectIdent());
  Node* node = nullptr;
  if (callee.rfind("self.", 0) == 0) {
    node = graph_->createNode(OpKind::kGetAttr, name, callee.substr(5));
  } else if (lex.IsPunct("[")) {  // getitem sugar: x[0]
    Node* base = graph_->findNode(callee);
    if (!base) return lex.Error(rhs_col, fmt::format("'{}' is not defined before this use", callee));
    FXREMAT_RETURN_IF_ERROR(lex.Advance());
    FXREMAT_ASSIGN_OR_RETURN(int64_t index, lex.ExpectInt());
    FXREMAT_RETURN_IF_ERROR(lex.Expect("]"));
    node = graph_->createNode(OpKind::kCallFunction, name, "_operator.getitem",
                              {Argument::NodeRef(base), Argument::Int(index)});
  } else {
    std::string target;
    if (callee.rfind("torch.ops.", 0) == 0) target = callee.substr(10);
    else if (text_form::IsPythonCallable(callee)) target = callee;
    else return lex.Error(rhs_col, fmt::format("expected torch.ops.<op>(...), a Python operator or self.<attr>, found '{}'", callee));
    FXREMAT_RETURN_IF_ERROR(lex.Expect("("));
    std::vector<Argument> args;
    Kwargs kwargs;
    while (!lex.IsPunct(")")) {
      // A keyword argument is an identifier followed by '='.
      bool is_kwarg = false;
      if (lex.peek().kind == Tok::kIdent) {
        Lexer probe = lex;
        FXREMAT_RETURN_IF_ERROR(probe.Advance());
        is_kwarg = probe.IsPunct("=");
      }
      if (is_kwarg) {
        FXREMAT_ASSIGN_OR_RETURN(std::string key, lex.ExpectIdent());
        FXREMAT_RETURN_IF_ERROR(lex.Expect("="));
        FXREMAT_ASSIGN_OR_RETURN(Argument a, ParseArgument(lex));
        kwargs.emplace_back(key, std::move(a));
      } else {
        if (!kwargs.empty()) return lex.Error(lex.peek().col, "positional argument after keyword argument");
        FXREMAT_ASSIGN_OR_RETURN(Argument a, ParseArgument(lex));
        args.push_back(std::move(a));
      }
      if (!lex.IsPunct(")")) FXREMAT_RETURN_IF_ERROR(lex.Expect(","));
    }
    FXREMAT_RETURN_IF_ERROR(lex.Expect(")"));
    node = graph_->createNode(OpKind::kCallFunction, name, target, std::move(args), std::move(kwargs));
  }
  node->val() = std::move(facts);
  if (lex.peek().kind != Tok::kEnd) return lex.Error(lex.peek().col, fmt::format("unexpected {}", lex.Describe()));
  if (auto comment = lex.comment()) {
    Lexer meta_lex(*comment, 0);
    FXREMAT_RETURN_IF_ERROR(meta_lex.Advance());
    Status st = ParseMetaPairs(meta_lex, node->meta(), nullptr);
    if (!st.ok()) return lex.Error(name_col, "in the metadata comment: " + st.message());
  }
  return Status::Ok();
}

Expected<std::unique_ptr<Graph>> Parser::Parse(std::string_view text) {
  int line_no = first_line_ - 1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(' ');
    if (first == std::string_view::npos) {
      if (end == text.size()) break;
      continue;
    }
    // Golden test files separate cases with "// -----"; a lone graph has none.
    if (line.substr(first, 2) == "//") continue;
    Lexer lex(line, line_no);
    if (line[first] == '#') {
      if (seen_def_) continue;  // comments inside the body are ignored
      if (auto name = SubgraphBlockName(line.substr(first + 1))) {
        // Note [Higher-order ops]: the block's lines up to its matching `# }`
        // are a graph of their own.
        const int open_line = line_no;
        const size_t body_start = start;
        int depth = 1;
        size_t body_end = start;
        while (depth > 0) {
          if (start > text.size())
            return Status::BadInput(fmt::format("subgraph '{}' has no closing '# }}'", *name),
                                    fmt::format("line {}, col {}", open_line, first + 1));
          size_t e = text.find('\n', start);
          if (e == std::string_view::npos) e = text.size();
          std::string_view l = text.substr(start, e - start);
          if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
          body_end = start;
          start = e + 1;
          ++line_no;
          const size_t f = l.find_first_not_of(' ');
          if (f == std::string_view::npos || l[f] != '#') continue;
          if (SubgraphBlockName(l.substr(f + 1))) ++depth;
          else if (IsSubgraphBlockEnd(l.substr(f + 1))) --depth;
        }
        Lexer block(line, open_line);
        if (name->empty()) return block.Error(first, "a subgraph block needs a name: '# subgraph NAME {'");
        if (nesting_ + 1 > kMaxSubgraphNesting)
          return block.Error(first, fmt::format("subgraphs nest deeper than {} levels", kMaxSubgraphNesting));
        const std::string key(*name);
        if (graph_->subgraphs().count(key)) return block.Error(first, fmt::format("subgraph '{}' given twice", key));
        Parser nested(open_line + 1, nesting_ + 1);
        auto sub = nested.Parse(text.substr(body_start, body_end - body_start));
        if (!sub.ok()) return sub.status().WithContext(fmt::format("subgraph '{}'", key));
        graph_->subgraphs().emplace(key, std::shared_ptr<const Graph>(std::move(sub).value()));
        if (start > text.size()) break;
        continue;
      }
      Lexer header(line.substr(first + 1), line_no);
      FXREMAT_RETURN_IF_ERROR(header.Advance());
      Status st = ParseHeaderLine(header);
      if (!st.ok()) return st;
      continue;
    }
    FXREMAT_RETURN_IF_ERROR(lex.Advance());
    if (!seen_def_) {
      if (!seen_header_) return lex.Error(first, "the first line must be '# fxremat.graph v1 kind=...'");
      if (lex.peek().kind != Tok::kIdent || lex.peek().text != "def")
        return lex.Error(first, "expected 'def forward(self, ...):'");
      FXREMAT_RETURN_IF_ERROR(ParseDef(lex));
      continue;
    }
    FXREMAT_RETURN_IF_ERROR(ParseBodyLine(lex));
    if (end == text.size()) break;
  }
  if (!seen_def_) return Status::BadInput("no 'def forward(self, ...):' line");
  if (!seen_return_) return Status::BadInput("no return statement (the graph has no output node)");
  for (Node* p : graph_->placeholders())
    if (p->role() == PlaceholderRole::kNone)
      p->setRole(graph_->kind() == GraphKind::kJoint ? PlaceholderRole::kPrimal : PlaceholderRole::kInput);
  FXREMAT_RETURN_IF_ERROR(VerifyGraph(*graph_));
  return std::move(graph_);
}

}  // namespace

Expected<std::unique_ptr<Graph>> ParseGraph(std::string_view text) {
  // Found by tests/fuzz/fuzz_loader.cpp: a text that was not UTF-8 was read, and
  // writing the graph as JSON failed inside the JSON library.
  FXREMAT_RETURN_IF_ERROR(CheckUtf8(text, "the text form"));
  Parser parser;
  return parser.Parse(text);
}

}  // namespace fxremat
