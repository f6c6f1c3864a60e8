#include "filecheck.h"

#include <map>
#include <regex>
#include <sstream>

namespace fxremat::testing {

namespace {

std::string EscapeRegex(const std::string& s) {
  static const std::string kSpecial = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char c : s) {
    if (kSpecial.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// Turns a FileCheck pattern into a regex; `captures` receives the names of the
// [[VAR:re]] groups in order.
std::string ToRegex(const std::string& pattern, const std::map<std::string, std::string>& vars,
                    std::vector<std::string>& captures, std::string& error) {
  std::string re;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern.compare(i, 2, "{{") == 0) {
      size_t end = pattern.find("}}", i + 2);
      if (end == std::string::npos) { error = "unterminated {{"; return {}; }
      re += "(?:" + pattern.substr(i + 2, end - i - 2) + ")";
      i = end + 2;
    } else if (pattern.compare(i, 2, "[[") == 0) {
      size_t end = pattern.find("]]", i + 2);
      if (end == std::string::npos) { error = "unterminated [["; return {}; }
      std::string body = pattern.substr(i + 2, end - i - 2);
      size_t colon = body.find(':');
      if (colon == std::string::npos) {
        auto it = vars.find(body);
        if (it == vars.end()) { error = "undefined variable " + body; return {}; }
        re += EscapeRegex(it->second);
      } else {
        captures.push_back(body.substr(0, colon));
        re += "(" + body.substr(colon + 1) + ")";
      }
      i = end + 2;
    } else {
      size_t next = std::min(pattern.find("{{", i), pattern.find("[[", i));
      if (next == std::string::npos) next = pattern.size();
      re += EscapeRegex(pattern.substr(i, next - i));
      i = next;
    }
  }
  return re;
}

}  // namespace

std::string RunFileCheck(const std::string& output, const std::vector<CheckDirective>& checks) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::map<std::string, std::string> vars;
  size_t cursor = 0;          // first line a CHECK may match
  long last_match = -1;       // line of the previous positive match
  size_t last_col = 0;        // column after it (for CHECK-SAME)
  std::vector<const CheckDirective*> pending_not;

  auto fail = [&](const CheckDirective& d, const std::string& why) {
    std::ostringstream msg;
    msg << "line " << d.line << ": " << why << "\n  pattern: " << d.pattern << "\n--- output ---\n" << output;
    return msg.str();
  };
  auto search = [&](const CheckDirective& d, size_t line_no, size_t from_col, std::smatch& m, bool& ok,
                    std::string& error) {
    std::vector<std::string> captures;
    std::string re = ToRegex(d.pattern, vars, captures, error);
    if (!error.empty()) return false;
    const std::string& text = lines[line_no];
    std::string tail = text.substr(std::min(from_col, text.size()));
    ok = std::regex_search(tail, m, std::regex(re));
    if (ok)
      for (size_t k = 0; k < captures.size(); ++k) vars[captures[k]] = m[k + 1].str();
    return true;
  };
  auto check_nots = [&](size_t from, size_t to) -> std::string {
    for (const CheckDirective* d : pending_not)
      for (size_t l = from; l < to && l < lines.size(); ++l) {
        std::smatch m;
        bool ok = false;
        std::string error;
        if (!search(*d, l, 0, m, ok, error)) return fail(*d, error);
        if (ok) return fail(*d, "CHECK-NOT pattern found on output line " + std::to_string(l + 1));
      }
    pending_not.clear();
    return {};
  };

  for (const CheckDirective& d : checks) {
    std::smatch m;
    bool ok = false;
    std::string error;
    switch (d.kind) {
      case CheckDirective::Kind::kNot:
        pending_not.push_back(&d);
        break;
      case CheckDirective::Kind::kCheck: {
        size_t l = cursor;
        for (; l < lines.size(); ++l) {
          if (!search(d, l, 0, m, ok, error)) return fail(d, error);
          if (ok) break;
        }
        if (l >= lines.size()) return fail(d, "CHECK pattern not found");
        if (auto e = check_nots(cursor, l); !e.empty()) return e;
        last_match = static_cast<long>(l);
        last_col = static_cast<size_t>(m.position(0) + m.length(0));
        cursor = l + 1;
        break;
      }
      case CheckDirective::Kind::kNext: {
        size_t l = static_cast<size_t>(last_match + 1);
        if (l >= lines.size()) return fail(d, "CHECK-NEXT: no next line");
        if (!search(d, l, 0, m, ok, error)) return fail(d, error);
        if (!ok) return fail(d, "CHECK-NEXT does not match output line " + std::to_string(l + 1) + ": " + lines[l]);
        if (auto e = check_nots(cursor, l); !e.empty()) return e;
        last_match = static_cast<long>(l);
        last_col = static_cast<size_t>(m.position(0) + m.length(0));
        cursor = l + 1;
        break;
      }
      case CheckDirective::Kind::kSame: {
        if (last_match < 0) return fail(d, "CHECK-SAME without a previous match");
        size_t l = static_cast<size_t>(last_match);
        if (!search(d, l, last_col, m, ok, error)) return fail(d, error);
        if (!ok) return fail(d, "CHECK-SAME does not match the rest of output line " + std::to_string(l + 1));
        last_col += static_cast<size_t>(m.position(0) + m.length(0));
        break;
      }
    }
  }
  if (auto e = check_nots(cursor, lines.size()); !e.empty()) return e;
  return {};
}

}  // namespace fxremat::testing
