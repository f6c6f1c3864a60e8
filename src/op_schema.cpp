// Parser for PyTorch function schema strings (the subset str(op._schema)
// prints): name.overload(args) -> returns, alias annotations such as Tensor(a!),
// defaults, and the `*` that starts keyword-only arguments.
#include "fxremat/op_schema.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace fxremat {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits at top-level commas (outside (), [] and quotes).
Expected<std::vector<std::string_view>> SplitTopLevel(std::string_view s, std::string_view where) {
  std::vector<std::string_view> parts;
  int depth = 0;
  char quote = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (quote) {
      if (c == '\\') ++i;
      else if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (c == '(' || c == '[') ++depth;
    else if (c == ')' || c == ']') {
      if (--depth < 0) return Status::BadInput("unbalanced brackets in schema", std::string(where));
    } else if (c == ',' && depth == 0) {
      parts.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (depth != 0 || quote) return Status::BadInput("unbalanced brackets in schema", std::string(where));
  std::string_view last = Trim(s.substr(start));
  if (!last.empty() || !parts.empty()) parts.push_back(last);
  return parts;
}

// Parses one "Type(a!)[] name=default" entry (name optional for returns).
Expected<SchemaArgument> ParseArgument(std::string_view text, bool is_return, std::string_view where) {
  SchemaArgument arg;
  std::string_view rest = text;
  if (auto eq = rest.find('='); eq != std::string_view::npos && !is_return) {
    arg.default_value = std::string(Trim(rest.substr(eq + 1)));
    rest = Trim(rest.substr(0, eq));
  }
  // The type ends at the last top-level space (the name follows), if any.
  std::string_view type_part = rest;
  int depth = 0;
  size_t split = std::string_view::npos;
  for (size_t i = 0; i < rest.size(); ++i) {
    char c = rest[i];
    if (c == '(' || c == '[') ++depth;
    else if (c == ')' || c == ']') --depth;
    else if (c == ' ' && depth == 0) split = i;
  }
  if (split != std::string_view::npos) {
    type_part = Trim(rest.substr(0, split));
    arg.name = std::string(Trim(rest.substr(split + 1)));
  } else if (!is_return) {
    return Status::BadInput(fmt::format("schema argument '{}' has no name", text), std::string(where));
  }
  // Pull out the alias annotation "(a)" / "(a!)" / "(a -> *)" that follows the base type.
  std::string type;
  for (size_t i = 0; i < type_part.size(); ++i) {
    char c = type_part[i];
    if (c == '(' && i > 0 && std::isalnum(static_cast<unsigned char>(type_part[i - 1]))) {
      size_t close = type_part.find(')', i);
      if (close == std::string_view::npos)
        return Status::BadInput(fmt::format("bad alias annotation in '{}'", text), std::string(where));
      std::string_view annotation = type_part.substr(i + 1, close - i - 1);
      // Only Tensor-like types carry alias sets; "Dict(str, Tensor)" is a type.
      if (annotation.find(',') == std::string_view::npos) {
        arg.is_write = annotation.find('!') != std::string_view::npos;
        std::string set;
        for (char a : annotation) {
          if (a == '!' || a == ' ' || a == '-') break;
          set.push_back(a);
        }
        arg.alias_set = set;
        i = close;
        continue;
      }
    }
    type.push_back(c);
  }
  arg.type = std::move(type);
  if (arg.type.empty()) return Status::BadInput(fmt::format("schema argument '{}' has no type", text), std::string(where));
  return arg;
}

}  // namespace

Expected<OpSchema> ParseOpSchema(std::string_view text) {
  const std::string where = fmt::format("schema '{}'", text);
  OpSchema schema;
  size_t open = text.find('(');
  size_t arrow = text.rfind("->");
  if (open == std::string_view::npos || arrow == std::string_view::npos || arrow < open)
    return Status::BadInput("not a function schema (expected 'name(args) -> returns')", where);
  // The argument list closes at the ')' that balances `open`.
  int depth = 0;
  size_t close = std::string_view::npos;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    else if (text[i] == ')' && --depth == 0) { close = i; break; }
  }
  if (close == std::string_view::npos || close > arrow)
    return Status::BadInput("unbalanced parentheses", where);
  std::string_view full_name = Trim(text.substr(0, open));
  if (auto dot = full_name.find('.'); dot != std::string_view::npos) {
    schema.name = std::string(full_name.substr(0, dot));
    schema.overload = std::string(full_name.substr(dot + 1));
  } else {
    schema.name = std::string(full_name);
    schema.overload = "default";
  }
  if (schema.name.find("::") == std::string::npos)
    return Status::BadInput("schema name has no namespace ('ns::name')", where);

  FXREMAT_ASSIGN_OR_RETURN(auto arg_texts, SplitTopLevel(text.substr(open + 1, close - open - 1), where));
  bool kwarg_only = false;
  for (std::string_view a : arg_texts) {
    if (a == "*") { kwarg_only = true; continue; }
    if (a.empty()) return Status::BadInput("empty schema argument", where);
    FXREMAT_ASSIGN_OR_RETURN(SchemaArgument arg, ParseArgument(a, /*is_return=*/false, where));
    arg.kwarg_only = kwarg_only;
    schema.arguments.push_back(std::move(arg));
  }

  std::string_view returns = Trim(text.substr(arrow + 2));
  if (returns.size() >= 2 && returns.front() == '(' && returns.back() == ')') {
    FXREMAT_ASSIGN_OR_RETURN(auto ret_texts, SplitTopLevel(returns.substr(1, returns.size() - 2), where));
    for (std::string_view r : ret_texts) {
      if (r.empty()) continue;
      FXREMAT_ASSIGN_OR_RETURN(SchemaArgument ret, ParseArgument(r, /*is_return=*/true, where));
      schema.returns.push_back(std::move(ret));
    }
  } else if (!returns.empty()) {
    FXREMAT_ASSIGN_OR_RETURN(SchemaArgument ret, ParseArgument(returns, /*is_return=*/true, where));
    schema.returns.push_back(std::move(ret));
  }
  return schema;
}

bool OpSchema::isMutable() const {
  return std::any_of(arguments.begin(), arguments.end(),
                     [](const SchemaArgument& a) { return a.is_write; });
}

bool OpSchema::returnsAlias() const {
  return std::any_of(returns.begin(), returns.end(), [](const SchemaArgument& r) {
    return !r.alias_set.empty() && !r.is_write;
  });
}

int OpSchema::argumentIndex(std::string_view arg_name) const {
  for (size_t i = 0; i < arguments.size(); ++i)
    if (arguments[i].name == arg_name) return static_cast<int>(i);
  return -1;
}

bool OpInfo::hasTag(std::string_view tag) const {
  return std::find(tags.begin(), tags.end(), tag) != tags.end();
}

bool OpInfo::packetHasTag(std::string_view tag) const {
  return hasTag(tag) || std::find(packet_tags.begin(), packet_tags.end(), tag) != packet_tags.end();
}

Expected<OpInfo> MakeOpInfo(std::string target, std::string schema_text, std::vector<std::string> tags) {
  OpInfo info;
  if (!schema_text.empty()) {
    auto parsed = ParseOpSchema(schema_text);
    if (!parsed.ok()) return parsed.status().WithContext(fmt::format("op '{}'", target));
    info.schema = std::move(parsed).value();
  }
  info.target = std::move(target);
  info.schema_text = std::move(schema_text);
  info.tags = std::move(tags);
  return info;
}

}  // namespace fxremat
