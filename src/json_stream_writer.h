// A JSON text writer that prints byte for byte what nlohmann's dump(indent)
// prints for the same document, without building the document (Note
// [Streaming writer]). Private to src/: the graph writer (json_io.cpp) and the
// signature writer (signature.cpp).
#pragma once

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fxremat/ir.h"

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
  // `indent`: spaces per level, as nlohmann's dump(indent); -1: compact, as dump().
  explicit JsonStreamWriter(Sink sink = nullptr, int indent = 1) : sink_(std::move(sink)), indent_(indent) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key) {
    Element();
    WriteString(key);
    if (indent_ < 0) Append(':');
    else Append(": ", 2);
    after_key_ = true;
  }
  void String(std::string_view s) { Element(); WriteString(s); }
  void Int(int64_t v) {
    Element();
    char buffer[24];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), v);
    Append(buffer, static_cast<size_t>(end - buffer));
  }
  void Bool(bool v) {
    Element();
    if (v) Append("true", 4);
    else Append("false", 5);
  }
  void Null() { Element(); Append("null", 4); }
  void Double(double v) { Element(); Append(nlohmann::ordered_json(v).dump()); }
  // A value nlohmann prints (pretty, at this writer's indent), placed at the current level.
  void Raw(const nlohmann::ordered_json& value) {
    Element();
    const std::string text = value.dump(indent_);
    const size_t indent = open_.size() * static_cast<size_t>(indent_);
    for (char c : text) {
      Append(c);
      if (c == '\n') Spaces(indent);
    }
  }
  void StringArray(const std::vector<std::string>& items) {
    BeginArray();
    for (const std::string& s : items) String(s);
    EndArray();
  }
  // Hands pending text to the sink (all of it when `all`); false if it failed.
  bool Flush(bool all) {
    if (!sink_ || (!all && used_ < kFlushBytes)) return ok_;
    if (ok_ && used_ > 0) ok_ = sink_(std::string_view(out_.data(), used_));
    used_ = 0;
    return ok_;
  }
  // Text placed as it is (a document's final newline).
  void AppendText(std::string_view text) { Append(text); }
  // The text written since the last flush (without a sink: all of it); the
  // writer starts again from empty.
  std::string Take() {
    out_.resize(used_);
    used_ = 0;
    return std::exchange(out_, std::string());
  }

 private:
  // The text is built in out_'s first used_ bytes; out_ itself is sized ahead
  // (zero-filled once per growth) so that an append is a bounds check and a
  // copy. std::string's own appends cost a length check, a capacity check and
  // often a strlen each, a third of the writer's time at a million nodes.
  void Grow(size_t n) { out_.resize(std::max(out_.size() * 2, used_ + n + 4096)); }
  void Append(const char* p, size_t n) {
    if (n == 0) return;  // p may be null (an empty string_view)
    if (out_.size() - used_ < n) Grow(n);
    std::memcpy(out_.data() + used_, p, n);
    used_ += n;
  }
  void Append(std::string_view s) { Append(s.data(), s.size()); }
  void Append(char c) {
    if (used_ == out_.size()) Grow(1);
    out_[used_++] = c;
  }
  void Spaces(size_t n) {
    if (out_.size() - used_ < n) Grow(n);
    std::memset(out_.data() + used_, ' ', n);
    used_ += n;
  }
  // Before a value: the separator and indent of its container, unless it
  // follows its key.
  void Element() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (open_.empty()) return;
    if (indent_ < 0) {  // compact: a comma between elements, nothing else
      if (!open_.back()) Append(',');
      open_.back() = 0;
      return;
    }
    if (open_.back()) Append('\n');
    else Append(",\n", 2);
    open_.back() = 0;
    Spaces(open_.size() * static_cast<size_t>(indent_));
  }
  void Open(char bracket) {
    Element();
    Append(bracket);
    open_.push_back(1);
  }
  void Close(char bracket) {
    const bool empty = open_.back();
    open_.pop_back();
    if (!empty && indent_ >= 0) {
      Append('\n');
      Spaces(open_.size() * static_cast<size_t>(indent_));
    }
    Append(bracket);
  }
  // Printable ASCII other than '"' and '\\': copied as it is.
  static bool Plain(unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; }
  // Whether every byte is Plain, tested eight at a time: a byte >= 0x80 sets
  // its high bit; below 0x20, equal to '"' or to '\\' are found with the
  // "has a byte less than n" word test (exact for bytes below 0x80).
  static bool AllPlain(std::string_view s) {
    constexpr uint64_t kOnes = 0x0101010101010101ULL, kHighs = 0x8080808080808080ULL;
    auto has_less = [](uint64_t x, uint64_t n) { return (x - kOnes * n) & ~x & kHighs; };
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t x;
      std::memcpy(&x, s.data() + i, sizeof(x));
      if ((x & kHighs) | has_less(x, 0x20) | has_less(x ^ (kOnes * '"'), 1) | has_less(x ^ (kOnes * '\\'), 1))
        return false;
    }
    for (; i < s.size(); ++i)
      if (!Plain(static_cast<unsigned char>(s[i]))) return false;
    return true;
  }
  void WriteString(std::string_view s) {
    if (AllPlain(s)) {  // the usual case: one copy between the quotes
      if (out_.size() - used_ < s.size() + 2) Grow(s.size() + 2);
      out_[used_++] = '"';
      std::memcpy(out_.data() + used_, s.data(), s.size());
      used_ += s.size();
      out_[used_++] = '"';
      return;
    }
    for (unsigned char c : s) {
      if (c >= 0x80) {  // nlohmann checks and prints UTF-8 (and throws on bad UTF-8, as before)
        Append(nlohmann::ordered_json(std::string(s)).dump());
        return;
      }
    }
    Append('"');
    size_t run = 0;  // start of the pending run of characters that need no escape
    for (size_t i = 0; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      Append(s.data() + run, i - run);
      run = i + 1;
      switch (c) {
        case '"': Append("\\\"", 2); break;
        case '\\': Append("\\\\", 2); break;
        case '\b': Append("\\b", 2); break;
        case '\t': Append("\\t", 2); break;
        case '\n': Append("\\n", 2); break;
        case '\f': Append("\\f", 2); break;
        case '\r': Append("\\r", 2); break;
        default: Append(fmt::format("\\u{:04x}", static_cast<unsigned>(c))); break;
      }
    }
    Append(s.data() + run, s.size() - run);
    Append('"');
  }

  Sink sink_;
  int indent_;
  std::string out_;  // the text is its first used_ bytes
  size_t used_ = 0;
  std::vector<uint8_t> open_;  // per open container: 1 while it has no element yet
  bool after_key_ = false;
  bool ok_ = true;
};

// A dim as both documents write it: a static one as its size, a symbolic one
// as {"sym": expression, "hint": example value} (docs/format.md).
inline void WriteDim(JsonStreamWriter& w, const Dim& d) {
  if (d.is_static()) return w.Int(d.hint);
  w.BeginObject();
  w.Key("sym"); w.String(d.expr.str());
  w.Key("hint"); w.Int(d.hint);
  w.EndObject();
}

}  // namespace fxremat
