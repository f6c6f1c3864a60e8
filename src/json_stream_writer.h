// A JSON text writer that prints byte for byte what nlohmann's dump(indent)
// prints for the same document, without building the document (Note
// [Streaming writer]). Private to src/: the graph writer (json_io.cpp) and the
// signature writer (signature.cpp).
#pragma once

#include <charconv>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fxremat {

// Note [Streaming writer]: a document is written as text directly, byte for
// byte as nlohmann's dump(indent) of the same document prints it (`indent`
// spaces per level, `"key": value`, `[]`/`{}` when empty), without building
// the document first: a graph as `GraphToJsonDocument(graph).dump(1)`, a
// signature as `SignatureToJsonDocument(signature).dump(2)`. Text goes to `out_`; a sink, when given, takes it
// whenever more than kFlushBytes are pending (a gzip stream, a file), so that
// writing a large graph holds one buffer, not the whole file. The rare values
// whose printing nlohmann decides (floats, non-ASCII strings, `const` values)
// are printed by nlohmann itself.
class JsonStreamWriter {
 public:
  static constexpr size_t kFlushBytes = 1 << 20;
  using Sink = std::function<bool(std::string_view)>;
  // `indent`: spaces per level, as nlohmann's dump(indent).
  explicit JsonStreamWriter(Sink sink = nullptr, int indent = 1) : sink_(std::move(sink)), indent_(indent) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key) {
    Element();
    WriteString(key);
    out_ += ": ";
    after_key_ = true;
  }
  void String(std::string_view s) { Element(); WriteString(s); }
  void Int(int64_t v) {
    Element();
    char buffer[24];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
    out_.append(buffer, end);
  }
  void Bool(bool v) { Element(); out_ += v ? "true" : "false"; }
  void Null() { Element(); out_ += "null"; }
  void Double(double v) { Element(); out_ += nlohmann::ordered_json(v).dump(); }
  // A value nlohmann prints (pretty, at this writer's indent), placed at the current level.
  void Raw(const nlohmann::ordered_json& value) {
    Element();
    const std::string text = value.dump(indent_);
    const std::string indent(open_.size() * static_cast<size_t>(indent_), ' ');
    for (char c : text) {
      out_ += c;
      if (c == '\n') out_ += indent;
    }
  }
  void StringArray(const std::vector<std::string>& items) {
    BeginArray();
    for (const std::string& s : items) String(s);
    EndArray();
  }
  // Hands pending text to the sink (all of it when `all`); false if it failed.
  bool Flush(bool all) {
    if (!sink_ || (!all && out_.size() < kFlushBytes)) return ok_;
    if (ok_ && !out_.empty()) ok_ = sink_(out_);
    out_.clear();
    return ok_;
  }
  std::string& text() { return out_; }

 private:
  // Before a value: the separator and indent of its container, unless it
  // follows its key.
  void Element() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (open_.empty()) return;
    out_ += open_.back() ? "\n" : ",\n";
    open_.back() = false;
    out_.append(open_.size() * static_cast<size_t>(indent_), ' ');
  }
  void Open(char bracket) {
    Element();
    out_ += bracket;
    open_.push_back(true);
  }
  void Close(char bracket) {
    const bool empty = open_.back();
    open_.pop_back();
    if (!empty) {
      out_ += '\n';
      out_.append(open_.size() * static_cast<size_t>(indent_), ' ');
    }
    out_ += bracket;
  }
  void WriteString(std::string_view s) {
    for (unsigned char c : s) {
      if (c >= 0x80) {  // nlohmann checks and prints UTF-8 (and throws on bad UTF-8, as before)
        out_ += nlohmann::ordered_json(std::string(s)).dump();
        return;
      }
    }
    out_ += '"';
    size_t run = 0;  // start of the pending run of characters that need no escape
    for (size_t i = 0; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      out_.append(s.data() + run, i - run);
      run = i + 1;
      switch (c) {
        case '"': out_ += "\\\""; break;
        case '\\': out_ += "\\\\"; break;
        case '\b': out_ += "\\b"; break;
        case '\t': out_ += "\\t"; break;
        case '\n': out_ += "\\n"; break;
        case '\f': out_ += "\\f"; break;
        case '\r': out_ += "\\r"; break;
        default: out_ += fmt::format("\\u{:04x}", static_cast<unsigned>(c)); break;
      }
    }
    out_.append(s.data() + run, s.size() - run);
    out_ += '"';
  }

  Sink sink_;
  int indent_;
  std::string out_;
  std::vector<bool> open_;  // per open container: no element yet
  bool after_key_ = false;
  bool ok_ = true;
};


}  // namespace fxremat
