// Small helpers shared by the IR text printer and parser (private to src/).
#pragma once

#include <string>
#include <string_view>

#include "fxremat/op_categories.h"

namespace fxremat::text_form {

// Python's repr() of a str: single quotes unless the text holds a ' and no ".
inline std::string QuotePython(std::string_view s) {
  const char quote = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos) ? '"' : '\'';
  std::string out(1, quote);
  static const char* kHex = "0123456789abcdef";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '\\') out += "\\\\";
    else if (c == quote) { out += '\\'; out += c; }
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (u < 0x20 || u == 0x7f) { out += "\\x"; out += kHex[u >> 4]; out += kHex[u & 15]; }
    else out += c;
  }
  out += quote;
  return out;
}

// Targets that are Python callables rather than dispatcher ops.
inline bool IsPythonCallable(std::string_view target) { return IsPythonCallableTarget(target); }

}  // namespace fxremat::text_form
