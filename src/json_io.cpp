// JSON reader and writer for the graph format of docs/format.md, and the
// file helpers (gzip-aware reading, atomic writing). Files are read through
// simdjson and written by a streaming writer (Notes [Two JSON front ends] and
// [Streaming writer]); nlohmann::json reads the Python binding's documents and
// names malformed JSON. nlohmann::json throws; all of its exceptions are caught
// in this file and become Status errors.
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <limits>
#include <map>
#include <set>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <simdjson.h>
#ifdef FXREMAT_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "fxremat/serialize.h"
#include "fxremat/phases.h"
#include "fxremat/text.h"
#include "src/constants_io.h"
#include "src/facts_check.h"
#include "src/json_internal.h"
#include "src/json_stream_writer.h"
#include "src/populate_pages.h"

namespace fxremat {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// ---------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------

// Note [Two JSON front ends]: one GraphReader reads a document through either
// of two views with one interface, so that both give the same graph and the
// same error, message and JSON path alike:
//   SimdValue      a simdjson tape (simdjson::dom, runtime-dispatched SIMD): the
//                  files the CLI and LoadGraphFile read. One allocation per
//                  parse, no per-value malloc (docs/benchmarks_io.md measured
//                  the candidate parsers).
//   NlohmannValue  an nlohmann::json DOM: documents the Python binding hands
//                  over as dicts, and every document simdjson refuses, so that
//                  malformed JSON keeps nlohmann's message (line and column).
// nlohmann's `json` keeps an object's keys sorted and unique (the last of
// duplicate keys wins); SimdValue's items(), find() and size() give the same
// view of a simdjson object, so kwargs come out in the same order and the same
// first error is found.

// The JSON kinds the reader tells apart; kInt is any integer that fits int64,
// kBigUnsigned one above INT64_MAX (refused where an int64 is needed).
enum class JKind : uint8_t { kNull, kBool, kInt, kBigUnsigned, kFloat, kString, kArray, kObject, kOther };

// Note [Known field keys]: the reader looks up the fields of a node, of its
// meta and of its value facts by name, some thirty names per node, most of
// them absent. Every name it asks for is one of kFieldKeys, and a lookup names
// its key as a FieldKey, whose slot (its index in kFieldKeys) is found when
// the reader is compiled. SimdFields reads an object's fields once, each key
// found in a small open-addressed table (KnownFieldSlot), and keeps the last
// value of each known key by slot: a lookup is then an index, where it was a
// scan of the object's keys (build-graph of synth_10k: see the commit). A key
// the reader never asks for is skipped, as before; a repeated key keeps its
// last value, as nlohmann does.
inline constexpr std::string_view kFieldKeys[] = {
    // a node
    "name", "op", "target", "args", "kwargs", "meta", "role", "path",
    // its meta
    "val", "recompute", "partitioner_tag", "stack_trace", "stack_trace_index", "ac_graph_id", "names",
    "offload_requested", "mutated", "saved_tensor_with_no_vc_check", "has_backward_hook", "memory_budget",
    "region_memory_budget", "written_back_from", "value_range",
    // value facts
    "kind", "dtype", "shape", "stride", "device", "storage", "requires_grad", "expr", "hint", "items", "type",
    "value"};
inline constexpr size_t kNumFieldKeys = std::size(kFieldKeys);
static_assert(kNumFieldKeys <= 64, "SimdFields keeps a 64-bit mask of the keys present");

// A key as the table compares it: its length and its first and last (up to)
// eight bytes, which tell apart any two keys of at most 16 bytes; a longer
// key is compared in full once these match.
struct KeyPrint {
  uint64_t head = 0, tail = 0;
  size_t size = 0;
  constexpr bool operator==(const KeyPrint&) const = default;
};
// Little-endian, byte by byte: what a memcpy load gives at run time.
constexpr uint64_t LoadBytes(const char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}
constexpr KeyPrint PrintOfKey(std::string_view key) {
  const size_t n = key.size();
  const size_t width = n >= 8 ? 8 : n >= 4 ? 4 : n >= 2 ? 2 : n;
  if (std::is_constant_evaluated())
    return {LoadBytes(key.data(), width), LoadBytes(key.data() + n - width, width), n};
  // Fixed-size copies, which compile to single loads.
  auto load = [](const char* p, size_t w) -> uint64_t {
    uint64_t v = 0;
    switch (w) {
      case 8: { std::memcpy(&v, p, 8); break; }
      case 4: { uint32_t x; std::memcpy(&x, p, 4); v = x; break; }
      case 2: { uint16_t x; std::memcpy(&x, p, 2); v = x; break; }
      case 1: v = static_cast<unsigned char>(*p); break;
      default: break;
    }
    return v;
  };
  return {load(key.data(), width), width ? load(key.data() + n - width, width) : 0, n};
}
constexpr size_t KeyBucket(const KeyPrint& k, size_t buckets) {
  const uint64_t h = (k.head ^ (k.tail * 0x9E3779B97F4A7C15ull) ^ k.size) * 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(h >> 40) & (buckets - 1);
}
struct KnownKeyTable {
  static constexpr size_t kBuckets = 128;
  struct Entry {
    KeyPrint print;
    int8_t slot = -1;
  };
  std::array<Entry, kBuckets> entries{};
  constexpr KnownKeyTable() {
    for (size_t slot = 0; slot < kNumFieldKeys; ++slot) {
      const KeyPrint print = PrintOfKey(kFieldKeys[slot]);
      size_t b = KeyBucket(print, kBuckets);
      while (entries[b].slot >= 0) b = (b + 1) & (kBuckets - 1);
      entries[b] = {print, static_cast<int8_t>(slot)};
    }
  }
};
inline constexpr KnownKeyTable kKnownKeyTable{};

// The slot of `key` in kFieldKeys, or -1. Inlined into SimdFields' loop.
[[gnu::always_inline]] inline int KnownFieldSlot(std::string_view key) {
  const KeyPrint print = PrintOfKey(key);
  for (size_t b = KeyBucket(print, KnownKeyTable::kBuckets);; b = (b + 1) & (KnownKeyTable::kBuckets - 1)) {
    const KnownKeyTable::Entry& e = kKnownKeyTable.entries[b];
    if (e.slot < 0) return -1;
    if (e.print == print && (key.size() <= 16 || key == kFieldKeys[static_cast<size_t>(e.slot)])) return e.slot;
  }
}

// A field name the reader asks for, checked against kFieldKeys when compiled.
struct FieldKey {
  consteval FieldKey(const char* key) : name(key), slot(SlotOf(key)) {}  // NOLINT: implicit, for f.find("name")
  std::string_view name;
  size_t slot;

 private:
  static consteval size_t SlotOf(std::string_view key) {
    for (size_t i = 0; i < kNumFieldKeys; ++i)
      if (kFieldKeys[i] == key) return i;
    throw "a FieldKey must be one of kFieldKeys";  // a compile error: consteval
  }
};

class NlohmannFields;

class NlohmannValue {
 public:
  NlohmannValue() = default;  // a placeholder, to be assigned
  explicit NlohmannValue(const json& j) : j_(&j) {}
  JKind kind() const {
    switch (j_->type()) {
      case json::value_t::null: return JKind::kNull;
      case json::value_t::boolean: return JKind::kBool;
      case json::value_t::number_integer: return JKind::kInt;
      case json::value_t::number_unsigned:
        return j_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? JKind::kBigUnsigned
                                                                                              : JKind::kInt;
      case json::value_t::number_float: return JKind::kFloat;
      case json::value_t::string: return JKind::kString;
      case json::value_t::array: return JKind::kArray;
      case json::value_t::object: return JKind::kObject;
      default: return JKind::kOther;
    }
  }
  const char* type_name() const { return j_->type_name(); }
  bool boolean() const { return j_->get<bool>(); }
  int64_t int64() const { return j_->get<int64_t>(); }
  // The value, when it is an integer of int64's range: a quick IsInteger + int64().
  bool get_int64(int64_t& out) const {
    if (kind() != JKind::kInt) return false;
    out = int64();
    return true;
  }
  uint64_t uint64() const { return j_->get<uint64_t>(); }
  double number() const { return j_->get<double>(); }
  std::string_view str() const { return j_->get_ref<const std::string&>(); }
  size_t size() const { return j_->size(); }
  NlohmannValue at(size_t i) const { return NlohmannValue((*j_)[i]); }
  std::optional<NlohmannValue> find(std::string_view key) const {
    auto it = j_->find(key);
    if (it == j_->end()) return std::nullopt;
    return NlohmannValue(*it);
  }
  // An object's keys are unique here.
  std::optional<NlohmannValue> first_field(std::string_view key) const { return find(key); }
  // Objects: the fields in key order.
  std::vector<std::pair<std::string_view, NlohmannValue>> items() const {
    std::vector<std::pair<std::string_view, NlohmannValue>> out;
    out.reserve(j_->size());
    for (auto it = j_->begin(); it != j_->end(); ++it) out.emplace_back(it.key(), NlohmannValue(it.value()));
    return out;
  }
  // Objects of one field: that field.
  std::pair<std::string_view, NlohmannValue> only_field() const {
    return {j_->begin().key(), NlohmannValue(j_->begin().value())};
  }
  // Arrays: calls fn(element) in order until it returns an error.
  template <typename Fn>
  Status each(Fn&& fn) const {
    for (const json& e : *j_) FXREMAT_RETURN_IF_ERROR(fn(NlohmannValue(e)));
    return Status::Ok();
  }
  std::string dump() const { return j_->dump(); }
  // For reading many fields of one object: nlohmann's own lookup.
  NlohmannFields fields() const;

 private:
  const json* j_ = nullptr;
};

// NlohmannValue's fields(): nlohmann's own lookup, by the key's name.
class NlohmannFields {
 public:
  explicit NlohmannFields(const NlohmannValue& object) : object_(object) {}
  std::optional<NlohmannValue> find(FieldKey key) const { return object_.find(key.name); }

 private:
  NlohmannValue object_;
};
inline NlohmannFields NlohmannValue::fields() const { return NlohmannFields(*this); }

// GCC sees the default-constructed array/object of a failed get() (which
// Checked() rules out) and warns of a null tape; the warning is off for this class.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"

// The reader asks a simdjson element for the type its kind() reported.
void Checked(simdjson::error_code error) {
  assert(error == simdjson::SUCCESS && "SimdValue: wrong type asked of an element");
  (void)error;
}

class SimdFields;

class SimdValue {
 public:
  SimdValue() = default;
  explicit SimdValue(simdjson::dom::element e) : e_(e) {}
  // Inlined: the reader asks it of nearly every value, often twice.
  [[gnu::always_inline]] JKind kind() const {
    switch (e_.type()) {
      case simdjson::dom::element_type::NULL_VALUE: return JKind::kNull;
      case simdjson::dom::element_type::BOOL: return JKind::kBool;
      case simdjson::dom::element_type::INT64: return JKind::kInt;
      case simdjson::dom::element_type::UINT64:
        return uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? JKind::kBigUnsigned : JKind::kInt;
      case simdjson::dom::element_type::DOUBLE: return JKind::kFloat;
      case simdjson::dom::element_type::STRING: return JKind::kString;
      case simdjson::dom::element_type::ARRAY: return JKind::kArray;
      case simdjson::dom::element_type::OBJECT: return JKind::kObject;
    }
    return JKind::kOther;
  }
  // nlohmann's names, for the messages that name a type.
  const char* type_name() const {
    switch (kind()) {
      case JKind::kNull: return "null";
      case JKind::kBool: return "boolean";
      case JKind::kString: return "string";
      case JKind::kArray: return "array";
      case JKind::kObject: return "object";
      default: return "number";
    }
  }
  bool boolean() const {
    bool v = false;
    Checked(e_.get_bool().get(v));
    return v;
  }
  int64_t int64() const {
    return e_.type() == simdjson::dom::element_type::UINT64 ? static_cast<int64_t>(uint64())
                                                             : Get<int64_t>();
  }
  // The value, when it is an integer of int64's range (simdjson stores an
  // integer as UINT64 only above INT64_MAX): IsInteger + int64() in one type
  // check, for hot loops.
  bool get_int64(int64_t& out) const {
    if (e_.type() != simdjson::dom::element_type::INT64) return false;
    out = Get<int64_t>();
    return true;
  }
  uint64_t uint64() const {
    return e_.type() == simdjson::dom::element_type::INT64 ? static_cast<uint64_t>(Get<int64_t>())
                                                            : Get<uint64_t>();
  }
  double number() const {
    switch (e_.type()) {
      case simdjson::dom::element_type::INT64: return static_cast<double>(Get<int64_t>());
      case simdjson::dom::element_type::UINT64: return static_cast<double>(Get<uint64_t>());
      default: return Get<double>();
    }
  }
  std::string_view str() const {
    std::string_view v;
    Checked(e_.get_string().get(v));
    return v;
  }
  // Arrays: the element count; objects: the number of distinct keys.
  size_t size() const {
    if (e_.type() == simdjson::dom::element_type::ARRAY) return Array().size();
    simdjson::dom::object object = Object();
    const size_t n = object.size();
    return n <= 1 ? n : items().size();
  }
  SimdValue at(size_t i) const {
    simdjson::dom::element e;
    Checked(Array().at(i).get(e));
    return SimdValue(e);
  }
  // The first field named `key`, looking no further: quicker than find() when
  // the key comes early, but not what nlohmann reads when a key is repeated.
  std::optional<SimdValue> first_field(std::string_view key) const {
    if (e_.type() != simdjson::dom::element_type::OBJECT) return std::nullopt;
    for (simdjson::dom::key_value_pair field : Object())
      if (field.key == key) return SimdValue(field.value);
    return std::nullopt;
  }
  // The last field named `key` (nlohmann keeps the last of duplicate keys).
  std::optional<SimdValue> find(std::string_view key) const {
    if (e_.type() != simdjson::dom::element_type::OBJECT) return std::nullopt;
    std::optional<SimdValue> found;
    for (simdjson::dom::key_value_pair field : Object())
      if (field.key == key) found.emplace(field.value);
    return found;
  }
  std::vector<std::pair<std::string_view, SimdValue>> items() const {
    std::vector<std::pair<std::string_view, SimdValue>> out;
    for (simdjson::dom::key_value_pair field : Object())
      out.emplace_back(field.key, SimdValue(field.value));
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // Of equal keys (now adjacent, in document order) keep the last.
    size_t kept = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (i + 1 < out.size() && out[i + 1].first == out[i].first) continue;
      out[kept++] = out[i];
    }
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(kept), out.end());
    return out;
  }
  std::pair<std::string_view, SimdValue> only_field() const {
    std::optional<std::pair<std::string_view, SimdValue>> last;
    for (simdjson::dom::key_value_pair field : Object()) last.emplace(field.key, SimdValue(field.value));
    return *last;
  }
  template <typename Fn>
  Status each(Fn&& fn) const {
    for (simdjson::dom::element e : Array()) FXREMAT_RETURN_IF_ERROR(fn(SimdValue(e)));
    return Status::Ok();
  }
  // Objects: fn(key, value) for every field in document order (none for another kind).
  template <typename Fn>
  void each_field(Fn&& fn) const {
    if (e_.type() != simdjson::dom::element_type::OBJECT) return;
    for (simdjson::dom::key_value_pair field : Object()) fn(field.key, SimdValue(field.value));
  }
  SimdFields fields() const;
  // The value as nlohmann prints it (`const` values, messages). Recursion is
  // bounded: the document passed the parser's depth limit (kMaxJsonDepth).
  std::string dump() const { return ToNlohmann().dump(); }
  json ToNlohmann() const {
    switch (kind()) {
      case JKind::kNull: return nullptr;
      case JKind::kBool: return boolean();
      case JKind::kInt:
        if (e_.type() == simdjson::dom::element_type::UINT64 || int64() >= 0) return uint64();  // as nlohmann parses it
        return int64();
      case JKind::kBigUnsigned: return uint64();
      case JKind::kFloat: return number();
      case JKind::kString: return std::string(str());
      case JKind::kArray: {
        json out = json::array();
        for (simdjson::dom::element e : Array()) out.push_back(SimdValue(e).ToNlohmann());
        return out;
      }
      case JKind::kObject: {
        json out = json::object();
        for (simdjson::dom::key_value_pair field : Object())
          out[std::string(field.key)] = SimdValue(field.value).ToNlohmann();
        return out;
      }
      case JKind::kOther: break;
    }
    return nullptr;
  }

 private:
  // By value: a simdjson_result's value_unsafe() is a reference into the temporary.
  template <typename T>
  T Get() const {
    T v{};
    Checked(e_.get<T>().get(v));
    return v;
  }
  simdjson::dom::object Object() const {
    simdjson::dom::object object;
    Checked(e_.get_object().get(object));
    return object;
  }
  simdjson::dom::array Array() const {
    simdjson::dom::array array;
    Checked(e_.get_array().get(array));
    return array;
  }

  simdjson::dom::element e_;
};
#pragma GCC diagnostic pop

// The fields of one simdjson object read once, by key slot (Note [Known
// field keys]): a lookup is an index.
class SimdFields {
 public:
  explicit SimdFields(const SimdValue& object) {
    object.each_field([&](std::string_view key, const SimdValue& value) {
      const int slot = KnownFieldSlot(key);
      if (slot < 0) return;
      values_[slot].value = value;  // a repeated key: the last one stays
      present_ |= uint64_t{1} << slot;
    });
  }
  std::optional<SimdValue> find(FieldKey key) const {
    if (!(present_ >> key.slot & 1)) return std::nullopt;
    return values_[key.slot].value;
  }

 private:
  // Left unset until a field fills it: `present_` says which are.
  union Slot {
    Slot() {}
    SimdValue value;
  };
  uint64_t present_ = 0;
  std::array<Slot, kNumFieldKeys> values_;
};

SimdFields SimdValue::fields() const { return SimdFields(*this); }

// A JSON path ("/nodes/3/args/0") as a chain of stack frames, rendered only
// when an error names it: reading builds no strings for paths.
class JsonPath {
 public:
  JsonPath() = default;  // the document
  JsonPath(const JsonPath& parent, std::string_view key) : parent_(&parent), key_(key) {}
  JsonPath(const JsonPath& parent, size_t index) : parent_(&parent), index_(index), is_index_(true) {}
  std::string str() const {
    if (!parent_) return "";
    std::string out = parent_->str();
    out += '/';
    if (is_index_) out += std::to_string(index_);
    else out += key_;
    return out;
  }

 private:
  const JsonPath* parent_ = nullptr;
  std::string_view key_;
  size_t index_ = 0;
  bool is_index_ = false;
};

// Node names → their index in "nodes": open addressing over indices into a
// names array (the names live in the document). Each slot keeps the upper half
// of its name's hash beside the index, so a probe reads a name only when the
// halves match: at a million nodes the names are scattered over hundreds of
// megabytes of document, and reading one is a cache miss.
class NameIndex {
 public:
  static constexpr size_t kEmpty = std::numeric_limits<size_t>::max();
  static uint64_t Hash(std::string_view name) { return std::hash<std::string_view>()(name); }
  void Reset(const std::vector<std::string_view>* names, size_t count) {
    names_ = names;
    size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{});
  }
  // The hash of `name`, with its first slot fetched into the cache for a later
  // Insert(index, hash): at a million nodes the table is megabytes, and a probe
  // that waits for the slot is a cache miss per node.
  uint64_t Prefetch(std::string_view name) const {
    const uint64_t hash = Hash(name);
    __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]);
    return hash;
  }
  // Adds names[index]; returns the index already holding that name, or kEmpty.
  size_t Insert(size_t index) { return Insert(index, Hash((*names_)[index])); }
  // The same, given Hash(names[index]).
  size_t Insert(size_t index, uint64_t hash) {
    const std::string_view name = (*names_)[index];
    for (size_t slot = hash & (slots_.size() - 1);; slot = (slot + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[slot];
      if (s.index == kNone) {
        s = Slot{static_cast<uint32_t>(hash >> 32), static_cast<uint32_t>(index)};
        return kEmpty;
      }
      if (s.fingerprint == static_cast<uint32_t>(hash >> 32) && (*names_)[s.index] == name) return s.index;
    }
  }
  size_t Find(std::string_view name) const { return Find(name, Hash(name)); }
  // The same, given Hash(name).
  size_t Find(std::string_view name, uint64_t hash) const {
    if (slots_.empty()) return kEmpty;
    for (size_t slot = hash & (slots_.size() - 1);; slot = (slot + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[slot];
      if (s.index == kNone) return kEmpty;
      if (s.fingerprint == static_cast<uint32_t>(hash >> 32) && (*names_)[s.index] == name) return s.index;
    }
  }

 private:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();  // graphs have < 4G nodes
  struct Slot {
    uint32_t fingerprint = 0;
    uint32_t index = kNone;
  };
  const std::vector<std::string_view>* names_ = nullptr;
  std::vector<Slot> slots_;
};

// The names of the nodes a thread parsed last, by hash, direct-mapped: most
// references are to a node a few before the one that makes them, and finding
// one here is a look at a small table this thread keeps warm, where NameIndex
// costs a cache miss or three at a million nodes (its table, the names array,
// the name's text).
class RecentNames {
 public:
  size_t Find(std::string_view name, uint64_t hash) const {
    const Entry& e = entries_[hash % kEntries];
    return e.name == name ? e.index : NameIndex::kEmpty;
  }
  void Put(std::string_view name, uint64_t hash, size_t index) { entries_[hash % kEntries] = {name, index}; }

 private:
  static constexpr size_t kEntries = 512;
  struct Entry {
    std::string_view name;
    size_t index = NameIndex::kEmpty;
  };
  std::array<Entry, kEntries> entries_{};
};

// Reads one JSON document into a Graph through a view V (Note [Two JSON front ends]).
// Defined with LoadGraphFile below: a whole file, refused when over max_bytes
// (Note [Input size limit]).
constexpr size_t kNoLimit = std::numeric_limits<size_t>::max();
Expected<std::string> ReadFileContents(const std::string& path, const std::function<void(size_t)>& on_size,
                                       size_t max_bytes);

template <typename V>
class GraphReader {
 public:
  explicit GraphReader(std::string sidecar_dir) : sidecar_dir_(std::move(sidecar_dir)) {}
  // A subgraph document nested in another at `prefix` ("/subgraphs/true_graph_0"):
  // no "format" or "version" of its own, and every error path starts with `prefix`.
  GraphReader(std::string sidecar_dir, std::string prefix, int nesting)
      : sidecar_dir_(std::move(sidecar_dir)), prefix_(std::move(prefix)), nesting_(nesting) {}
  Expected<std::unique_ptr<Graph>> Read(const V& doc);
  // The text `doc` was parsed from, no longer read: Read gives its buffer to
  // the graph for its nodes (Note [Recycled text pages]).
  void RecycleText(std::string&& text) { recycled_text_ = std::move(text); }
  // The parser's structural index, no longer read: more node arena after the
  // text's (Note [Recycled index pages]).
  void RecycleIndex(std::shared_ptr<uint32_t[]> index, size_t capacity, size_t mapped_bytes) {
    recycled_index_ = {std::move(index), capacity, mapped_bytes};
  }
  // A thread to map the node arena's pages ahead of the nodes (Note [Warming
  // pages ahead]); it must outlive Read.
  void WarmNodeMemoryWith(PageWarmer* warmer) { warmer_ = warmer; }

 private:
  Status Fail(const std::string& path, const std::string& message) { return Status::BadInput(message, prefix_ + path); }
  Status Fail(const JsonPath& path, const std::string& message) {
    return Status::BadInput(message, prefix_ + path.str());
  }
  Status FollowsOutput(const JsonPath& node_path, std::string_view name) {
    return Fail(node_path, fmt::format("node '{}' follows the output node (the output node must be last)", name));
  }
  // An integer that fits int64 (a JSON integer above INT64_MAX is refused, not
  // wrapped to a negative number).
  Expected<int64_t> ReadInt64(const V& j, const JsonPath& path, const char* what) {
    const JKind kind = j.kind();
    if (kind == JKind::kBigUnsigned) return Fail(path, fmt::format("the integer {} is outside int64", j.uint64()));
    if (kind != JKind::kInt) return Fail(path, fmt::format("expected {}", what));
    return j.int64();
  }
  static bool IsInteger(const V& j) { return j.kind() == JKind::kInt || j.kind() == JKind::kBigUnsigned; }
  static bool IsString(const std::optional<V>& j) { return j && j->kind() == JKind::kString; }
  static bool IsNullOrAbsent(const std::optional<V>& j) { return !j || j->kind() == JKind::kNull; }
  Status ReadHeader(const V& doc);
  Status ReadGraphFacts(const V& doc);
  Status ReadOps(const V& ops);
  Status CheckReferences(const std::vector<V>& nodes);
  // Note [Reading nodes on two threads]: a node is parsed (ParseNode, which
  // may run on a second thread) and then created in the graph (CreateNode,
  // in node order, on the reading thread).
  struct PendingNode {
    OpKind op = OpKind::kPlaceholder;
    std::string_view name, target;  // view the document
    // A reference is a kNode argument whose node is null and whose int_value
    // is the node's index in "nodes" (always an earlier one); CreateNode
    // resolves it.
    std::vector<Argument> args;
    Kwargs kwargs;
    ValueFacts val;
    NodeMeta meta;
    PlaceholderRole role = PlaceholderRole::kNone;
    std::optional<std::string_view> path;
  };
  // What parsing a node changes besides the node: each thread has its own.
  struct ParseState {
    InternedString last_device = CpuDeviceName();  // the device the last tensor read was on
    // Stack traces read so far, by text: nodes with the same trace share one
    // copy (SharedText). Keys view the stored texts.
    std::unordered_map<std::string_view, SharedText> texts;
    // On two threads, the index of the later part's names (index_of_ holds
    // the first part's), for the nodes from `later_from` on: an earlier node
    // never needs it (its references are to nodes before it), and the first
    // thread parses such nodes while the second still builds it.
    const NameIndex* later_names = nullptr;
    size_t later_from = 0;
    RecentNames recent;  // of the nodes this thread parsed
  };
  Status ReadNodes(const V& nodes_field, size_t count);
  Status ReadNodesOnTwoThreads(const V& nodes_field, size_t count);
  // Puts the names of nodes [begin, end) into `index` (and names_), failing on
  // a name it already holds; `nodes` gets the node views.
  Status IndexNames(const V& nodes_field, size_t begin, size_t end, NameIndex& index, std::vector<V>& nodes);
  // `shared_index`: index_of_ already holds every node's name (two threads);
  // otherwise each name goes in as its node is parsed, the earlier ones before it.
  Status ParseNode(const V& j, size_t index, bool shared_index, ParseState& state, PendingNode& out);
  Node* CreateNode(PendingNode& pending);
  Expected<Argument> ReadArgument(const V& j, const JsonPath& path, std::string_view node_name, size_t node_index,
                                  const ParseState& state, int depth = 0);
  // Into `v`, which is default-constructed (a fresh ValueFacts).
  Status ReadValueFacts(const V& j, const JsonPath& path, ParseState& state, ValueFacts& v, int depth = 0);
  Expected<Dim> ReadDim(const V& j, const JsonPath& path);
  Status ReadDims(const V& list, const JsonPath& path, DimVector& out);
  Status ReadMeta(const V& j, const JsonPath& path, ParseState& state, PendingNode& node);
  Status ReadConstants(const V& constants);
  Status ReadSubgraphs(const V& subgraphs);
  Status InferRolesAndTangents();
  // The entry `key` of the sidecar `file` and its bytes.
  Expected<std::pair<const SafetensorsEntry*, std::shared_ptr<const std::string>>> SidecarEntry(
      const std::string& file, const std::string& key, const JsonPath& path);

  std::string sidecar_dir_;  // where sidecar files are; empty: none may be referenced
  bool two_threads_ = true;  // a large document's nodes may be read on two threads
  std::string prefix_;       // the JSON path of a nested subgraph document; empty at the top
  int nesting_ = 0;          // how deep this document is nested in subgraphs
  std::map<std::string, SafetensorsFile> sidecars_;
  std::unique_ptr<Graph> graph_ = std::make_unique<Graph>();
  bool has_tangent_outputs_ = false;
  // Every node's name → its index in "nodes" (CheckReferences), and the nodes
  // created so far by index: references resolve without the graph's name table.
  NameIndex index_of_;
  std::vector<SharedText> stack_traces_;  // the document's "stack_traces" (Note [Stack-trace table])
  ParseState state_;                      // the reading thread's
  std::vector<std::string_view> names_;  // by index
  std::vector<Node*> created_;
  std::string recycled_text_;  // RecycleText's
  struct {
    std::shared_ptr<uint32_t[]> index;
    size_t capacity = 0, mapped_bytes = 0;
  } recycled_index_;  // RecycleIndex's
  PageWarmer* warmer_ = nullptr;  // WarmNodeMemoryWith's
  const JsonPath root_;
  static SharedText InternedText(ParseState& state, std::string_view text) {
    if (text.empty()) return SharedText();
    if (auto it = state.texts.find(text); it != state.texts.end()) return it->second;
    SharedText shared{std::string(text)};
    state.texts.emplace(shared.str(), shared);
    return shared;
  }
};

template <typename V>
Status GraphReader<V>::ReadHeader(const V& doc) {
  if (doc.kind() != JKind::kObject) return Fail("/", fmt::format("expected a JSON object, got {}", doc.type_name()));
  if (nesting_ > 0) return ReadGraphFacts(doc);  // a subgraph: the enclosing document has the format and version
  auto format = doc.find("format");
  if (!IsString(format) || format->str() != "fxremat.graph")
    return Fail("/format", "not an fxremat graph (expected \"format\": \"fxremat.graph\")");
  auto version = doc.find("version");
  if (!version || version->kind() != JKind::kArray || version->size() != 2 || !IsInteger(version->at(0)) ||
      !IsInteger(version->at(1)))
    return Fail("/version", "expected \"version\": [major, minor]");
  int64_t major = version->at(0).int64();
  int64_t minor = version->at(1).int64();
  if (major != kFormatMajorVersion)
    return Fail("/version", fmt::format("unsupported format version {}.{}: this reader supports major "
                                        "version {} (files {}.x)",
                                        major, minor, kFormatMajorVersion, kFormatMajorVersion));
  return ReadGraphFacts(doc);
}

template <typename V>
Status GraphReader<V>::ReadGraphFacts(const V& doc) {
  if (auto name = doc.find("name")) {
    if (name->kind() != JKind::kString) return Fail("/name", "expected a string");
    graph_->setName(std::string(name->str()));
  }
  auto kind_field = doc.find("kind");
  if (!IsString(kind_field)) return Fail("/kind", "missing graph kind (joint, forward, backward or plain)");
  auto kind = GraphKindFromName(kind_field->str());
  if (!kind) return Fail("/kind", fmt::format("unknown graph kind '{}'", kind_field->str()));
  graph_->setKind(*kind);
  if (auto returns_list = doc.find("returns_list")) {  // format 1.6 (Note [Single-value outputs])
    if (returns_list->kind() != JKind::kBool) return Fail("/returns_list", "expected true or false");
    if (returns_list->boolean() && *kind != GraphKind::kPlain)
      return Fail("/returns_list", "only a plain graph may return a list");
    graph_->setReturnsList(returns_list->boolean());
  }

  if (*kind == GraphKind::kJoint) {
    auto joint = doc.find("joint");
    if (!joint || joint->kind() != JKind::kObject) return Fail("/joint", "a joint graph needs a \"joint\" object");
    auto num_fwd_outputs = joint->find("num_fwd_outputs");
    if (!num_fwd_outputs || !IsInteger(*num_fwd_outputs)) return Fail("/joint/num_fwd_outputs", "missing or not an integer");
    graph_->joint().num_fwd_outputs = num_fwd_outputs->int64();
    if (auto paths = joint->find("output_paths"); !IsNullOrAbsent(paths)) {
      if (paths->kind() != JKind::kArray) return Fail("/joint/output_paths", "expected an array");
      size_t i = 0;
      FXREMAT_RETURN_IF_ERROR(paths->each([&](const V& p) -> Status {
        if (p.kind() == JKind::kNull) graph_->joint().output_paths.emplace_back(std::nullopt);
        else if (p.kind() == JKind::kString) graph_->joint().output_paths.emplace_back(std::string(p.str()));
        else return Fail(fmt::format("/joint/output_paths/{}", i), "expected a string or null");
        ++i;
        return Status::Ok();
      }));
    }
    if (auto tangents = joint->find("tangent_outputs"); !IsNullOrAbsent(tangents)) {
      has_tangent_outputs_ = true;
      if (tangents->kind() != JKind::kArray) return Fail("/joint/tangent_outputs", "expected an array");
      size_t i = 0;
      FXREMAT_RETURN_IF_ERROR(tangents->each([&](const V& t) -> Status {
        if (!IsInteger(t)) return Fail(fmt::format("/joint/tangent_outputs/{}", i), "expected an integer");
        graph_->joint().tangent_outputs.push_back(t.int64());
        ++i;
        return Status::Ok();
      }));
    }
  }
  if (auto symbols = doc.find("symbols")) {
    if (symbols->kind() != JKind::kObject) return Fail("/symbols", "expected an object");
    const JsonPath symbols_path(root_, "symbols");
    for (const auto& [sym, hint] : symbols->items()) {
      const JsonPath path(symbols_path, sym);
      FXREMAT_ASSIGN_OR_RETURN(int64_t h, ReadInt64(hint, path, "an integer hint"));
      graph_->symbols()[std::string(sym)] = h;
    }
  }
  return Status::Ok();
}

template <typename V>
Status GraphReader<V>::ReadOps(const V& ops) {
  if (ops.kind() != JKind::kObject) return Fail("/ops", "expected an object");
  const JsonPath ops_path(root_, "ops");
  for (const auto& item : ops.items()) {
    const std::string_view target = item.first;
    const V& facts = item.second;  // not a structured binding: the lambda below captures it
    const JsonPath path(ops_path, target);
    if (!IsDottedName(target)) return Fail(path, fmt::format("op '{}' is not a dotted name (identifiers joined by '.')", target));
    if (facts.kind() != JKind::kObject) return Fail(path, "expected an object");
    std::string schema;
    if (auto s = facts.find("schema")) {
      if (s->kind() != JKind::kString) return Fail(JsonPath(path, "schema"), "expected a string");
      schema = std::string(s->str());
    }
    // torch.Tag names; the text form writes them bare (found by the fuzzer)
    auto read_tags = [&](const char* key, std::vector<std::string>& out) -> Status {
      auto list = facts.find(key);
      if (!list) return Status::Ok();
      const JsonPath tags_path(path, key);
      if (list->kind() != JKind::kArray) return Fail(tags_path, "expected an array of strings");
      return list->each([&](const V& t) -> Status {
        if (t.kind() != JKind::kString) return Fail(tags_path, "expected an array of strings");
        if (!IsPythonIdentifier(t.str()))
          return Fail(tags_path, fmt::format("tag '{}' is not an identifier", t.str()));
        out.emplace_back(t.str());
        return Status::Ok();
      });
    };
    std::vector<std::string> tags;
    FXREMAT_RETURN_IF_ERROR(read_tags("tags", tags));
    std::vector<std::string> packet_tags;
    FXREMAT_RETURN_IF_ERROR(read_tags("packet_tags", packet_tags));
    auto info = MakeOpInfo(std::string(target), schema, std::move(tags));
    if (!info.ok()) return info.status().WithContext(path.str());
    info->packet_tags = std::move(packet_tags);
    graph_->ops().emplace(std::string(target), std::move(info).value());
  }
  return Status::Ok();
}

// Every {"node": NAME} in an argument, depth first, object fields in key order.
// Recursion is bounded by the document's depth limit (kMaxJsonDepth).
template <typename V>
void CollectRefs(const V& j, std::vector<std::string_view>& out) {
  const JKind kind = j.kind();
  if (kind == JKind::kObject) {
    if (j.size() == 1) {
      auto [key, value] = j.only_field();
      if (key == "node" && value.kind() == JKind::kString) {
        out.push_back(value.str());
        return;
      }
    }
    for (const auto& [k, v] : j.items()) CollectRefs(v, out);
  } else if (kind == JKind::kArray) {
    (void)j.each([&](const V& v) {
      CollectRefs(v, out);
      return Status::Ok();
    });
  }
}

// Before building anything: names unique, every reference resolves to some
// node, and references point backwards. A forward reference is reported as a
// cycle when the references form one, else as a use before definition.
template <typename V>
Status GraphReader<V>::CheckReferences(const std::vector<V>& nodes) {
  names_.assign(nodes.size(), std::string_view());
  index_of_.Reset(&names_, nodes.size());
  std::vector<std::string_view>& names = names_;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].kind() != JKind::kObject) return Fail(fmt::format("/nodes/{}", i), "expected a node object");
    auto name_field = nodes[i].fields().find("name");
    if (!IsString(name_field)) return Fail(fmt::format("/nodes/{}/name", i), "missing node name");
    std::string_view name = name_field->str();
    if (name.empty()) return Fail(fmt::format("/nodes/{}/name", i), "empty node name");
    if (std::string problem = NodeNameProblem(name); !problem.empty())
      return Fail(fmt::format("/nodes/{}/name", i), fmt::format("node name '{}' {}", name, problem));
    names[i] = name;
    if (size_t first = index_of_.Insert(i); first != NameIndex::kEmpty)
      return Fail(fmt::format("/nodes/{}/name", i),
                  fmt::format("duplicate node name '{}' (first defined at /nodes/{})", name, first));
  }
  // The references of node i, in order: args, then kwargs.
  std::vector<std::string_view> refs;
  auto collect = [&](size_t i) {
    refs.clear();
    const auto& f = nodes[i].fields();
    if (auto args = f.find("args")) CollectRefs(*args, refs);
    if (auto kwargs = f.find("kwargs")) CollectRefs(*kwargs, refs);
  };
  std::optional<std::pair<size_t, size_t>> first_forward_ref;
  for (size_t i = 0; i < nodes.size(); ++i) {
    collect(i);
    for (std::string_view ref : refs) {
      const size_t target = index_of_.Find(ref);
      if (target == NameIndex::kEmpty)
        return Fail(fmt::format("/nodes/{}", i),
                    fmt::format("node '{}' references '{}', which is not a node of this graph "
                                "(dangling reference)", names[i], ref));
      if (target >= i && !first_forward_ref) first_forward_ref = std::make_pair(i, target);
    }
  }
  if (!first_forward_ref) return Status::Ok();
  // Only now (the input is refused either way) the whole reference graph.
  std::vector<std::vector<size_t>> edges(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    collect(i);
    for (std::string_view ref : refs) edges[i].push_back(index_of_.Find(ref));
  }
  // Look for a cycle with a DFS from every node (colors: 0 new, 1 on stack, 2
  // done). Iterative: the path can be as long as the graph (a chain listed
  // backwards), far deeper than the call stack allows.
  std::vector<int> color(nodes.size(), 0);
  std::vector<size_t> stack;       // the current path
  std::vector<size_t> next_edge;   // per path entry: the next edge to follow
  auto dfs = [&](size_t root) -> std::optional<std::vector<size_t>> {
    color[root] = 1;
    stack.assign(1, root);
    next_edge.assign(1, 0);
    while (!stack.empty()) {
      const size_t v = stack.back();
      if (next_edge.back() == edges[v].size()) {
        color[v] = 2;
        stack.pop_back();
        next_edge.pop_back();
        continue;
      }
      const size_t w = edges[v][next_edge.back()++];
      if (color[w] == 1) {
        auto start = std::find(stack.begin(), stack.end(), w);
        std::vector<size_t> cycle(start, stack.end());
        cycle.push_back(w);
        return cycle;
      }
      if (color[w] == 0) {
        color[w] = 1;
        stack.push_back(w);
        next_edge.push_back(0);
      }
    }
    return std::nullopt;
  };
  for (size_t v = 0; v < nodes.size(); ++v) {
    if (color[v] != 0) continue;
    if (auto cycle = dfs(v)) {
      std::string text;
      for (size_t k = 0; k < cycle->size(); ++k) {
        if (k) text += " -> ";
        text += names[(*cycle)[k]];
      }
      return Fail(fmt::format("/nodes/{}", cycle->front()),
                  fmt::format("cycle in the graph: {} (each node uses the next)", text));
    }
  }
  auto [user, used] = *first_forward_ref;
  return Fail(fmt::format("/nodes/{}", user),
              fmt::format("node '{}' uses '{}' before it is defined (nodes must be in topological order)",
                          names[user], names[used]));
}

template <typename V>
Expected<Dim> GraphReader<V>::ReadDim(const V& j, const JsonPath& path) {
  if (IsInteger(j)) {
    FXREMAT_ASSIGN_OR_RETURN(int64_t v, ReadInt64(j, path, "an integer"));
    return Dim::Static(v);
  }
  if (j.kind() == JKind::kObject) {
    if (auto sym = j.find("sym"); IsString(sym)) {
      Dim d;
      d.expr = sym->str();
      if (auto hint = j.find("hint")) {
        FXREMAT_ASSIGN_OR_RETURN(d.hint, ReadInt64(*hint, JsonPath(path, "hint"), "an integer"));
      } else if (auto it = graph_->symbols().find(d.expr); it != graph_->symbols().end()) {
        d.hint = it->second;
      } else {
        return Fail(path, fmt::format("symbolic dim '{}' has no hint (add it to \"symbols\" or give \"hint\")", d.expr.str()));
      }
      return d;
    }
  }
  return Fail(path, "expected an integer or {\"sym\": EXPR}");
}

template <typename V>
Status GraphReader<V>::ReadDims(const V& list, const JsonPath& path, DimVector& out) {
  out.reserve(list.size());
  size_t i = 0;
  return list.each([&](const V& item) -> Status {
    int64_t v = 0;
    if (item.get_int64(v)) {  // a static dim: most are
      out.push_back(Dim::Static(v));
      ++i;
      return Status::Ok();
    }
    FXREMAT_ASSIGN_OR_RETURN(Dim d, ReadDim(item, JsonPath(path, i++)));
    out.push_back(std::move(d));
    return Status::Ok();
  });
}

template <typename V>
Status GraphReader<V>::ReadValueFacts(const V& j, const JsonPath& path, ParseState& state, ValueFacts& v, int depth) {
  if (j.kind() != JKind::kObject) return Fail(path, "expected value facts {\"kind\": ...}");
  const auto& f = j.fields();
  const std::optional<V> kind_field = f.find("kind");
  if (!IsString(kind_field)) return Fail(path, "expected value facts {\"kind\": ...}");
  const std::string_view kind = kind_field->str();
  if (kind == "tensor") {
    v.kind = ValueFacts::Kind::kTensor;
    auto dtype_field = f.find("dtype");
    if (!IsString(dtype_field))
      return Fail(JsonPath(path, "dtype"), dtype_field ? "expected a dtype name such as \"float32\"" : "missing tensor dtype");
    auto dtype = DTypeFromName(dtype_field->str());
    if (!dtype) return Fail(JsonPath(path, "dtype"), fmt::format("unknown dtype '{}'", dtype_field->str()));
    v.tensor.dtype = *dtype;
    auto shape = f.find("shape");
    if (!shape || shape->kind() != JKind::kArray) return Fail(JsonPath(path, "shape"), "missing tensor shape");
    FXREMAT_RETURN_IF_ERROR(ReadDims(*shape, JsonPath(path, "shape"), v.tensor.shape));
    if (auto stride = f.find("stride")) {
      if (stride->kind() != JKind::kArray) return Fail(JsonPath(path, "stride"), "expected an array");
      FXREMAT_RETURN_IF_ERROR(ReadDims(*stride, JsonPath(path, "stride"), v.tensor.stride));
      if (v.tensor.stride.size() != v.tensor.shape.size())
        return Fail(JsonPath(path, "stride"), fmt::format("{} strides for {} dims", v.tensor.stride.size(),
                                                          v.tensor.shape.size()));
    }
    if (auto problem = FindTensorFactsProblem(v.tensor))
      return Fail(JsonPath(JsonPath(path, problem->field), problem->index), problem->message);
    if (auto device = f.find("device")) {
      if (device->kind() != JKind::kString) return Fail(JsonPath(path, "device"), "expected a string");
      if (!IsDeviceName(device->str()))
        return Fail(JsonPath(path, "device"), fmt::format("not a device: '{}' (cpu, cuda:0, ...)", device->str()));
      // Interning takes a lock; nearly every tensor of a graph is on one device.
      if (device->str() != state.last_device.str()) state.last_device = InternedString(device->str());
      v.tensor.device = state.last_device;
    }
    if (auto storage = f.find("storage"); !IsNullOrAbsent(storage)) {
      if (!IsInteger(*storage)) return Fail(JsonPath(path, "storage"), "expected an integer");
      v.tensor.storage = storage->int64();
    }
    if (auto requires_grad = f.find("requires_grad")) {
      if (requires_grad->kind() != JKind::kBool) return Fail(JsonPath(path, "requires_grad"), "expected a boolean");
      v.tensor.requires_grad = requires_grad->boolean();
    }
  } else if (kind == "symint" || kind == "symfloat" || kind == "symbool") {
    v.kind = kind == "symint" ? ValueFacts::Kind::kSymInt
             : kind == "symfloat" ? ValueFacts::Kind::kSymFloat : ValueFacts::Kind::kSymBool;
    auto expr = f.find("expr");
    if (!IsString(expr)) return Fail(JsonPath(path, "expr"), "missing expression");
    v.expr = std::string(expr->str());
    if (auto hint = f.find("hint"); hint && IsInteger(*hint)) {
      v.hint = hint->int64();
    } else if (auto it = graph_->symbols().find(v.expr); it != graph_->symbols().end()) {
      v.hint = it->second;  // a bare symbol: its hint is the graph's (what verify feeds it)
    }
  } else if (kind == "tuple") {
    v.kind = ValueFacts::Kind::kTuple;
    auto items = f.find("items");
    if (!items || items->kind() != JKind::kArray) return Fail(JsonPath(path, "items"), "missing tuple items");
    if (depth >= kMaxTupleNesting) return Fail(path, fmt::format("tuples nest deeper than {} levels", kMaxTupleNesting));
    const JsonPath items_path(path, "items");
    size_t i = 0;
    FXREMAT_RETURN_IF_ERROR(items->each([&](const V& item_json) -> Status {
      return ReadValueFacts(item_json, JsonPath(items_path, i++), state, v.items.emplace_back(), depth + 1);
    }));
  } else if (kind == "none") {
    v.kind = ValueFacts::Kind::kNone;
  } else if (kind == "opaque") {
    v.kind = ValueFacts::Kind::kOpaque;
    auto type = f.find("type");
    if (!IsString(type) || type->str().empty()) return Fail(JsonPath(path, "type"), "an opaque value names its type");
    for (char c : type->str())  // as the text form requires: Opaque(NAME)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'))
        return Fail(JsonPath(path, "type"), fmt::format("'{}' is not a dotted identifier", type->str()));
    v.expr = std::string(type->str());
  } else if (kind == "const") {
    v.kind = ValueFacts::Kind::kConst;
    auto value = f.find("value");
    v.expr = value ? value->dump() : "null";  // JSON text, as the writers copy it
  } else {
    return Fail(JsonPath(path, "kind"), fmt::format("unknown value kind '{}'", kind));
  }
  return Status::Ok();
}

template <typename V>
Expected<Argument> GraphReader<V>::ReadArgument(const V& j, const JsonPath& path, std::string_view node_name,
                                                size_t node_index, const ParseState& state, int depth) {
  switch (j.kind()) {
    case JKind::kNull: return Argument::None();
    case JKind::kBool: return Argument::Bool(j.boolean());
    case JKind::kInt: return Argument::Int(j.int64());
    case JKind::kBigUnsigned: return Fail(path, fmt::format("the integer {} is outside int64", j.uint64()));
    case JKind::kFloat:
      if (!std::isfinite(j.number()))
        return Fail(path, "a non-finite number: write {\"float\": \"inf\"}, \"-inf\" or \"nan\"");
      return Argument::Double(j.number());
    case JKind::kString: return Argument::String(std::string(j.str()));
    case JKind::kArray: {
      if (depth >= kMaxArgumentNesting)
        return Fail(path, fmt::format("arguments nest deeper than {} levels", kMaxArgumentNesting));
      std::vector<Argument> items;
      items.reserve(j.size());
      size_t i = 0;
      FXREMAT_RETURN_IF_ERROR(j.each([&](const V& item) -> Status {
        FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(item, JsonPath(path, i++), node_name, node_index, state, depth + 1));
        items.push_back(std::move(a));
        return Status::Ok();
      }));
      return Argument::List(std::move(items));
    }
    case JKind::kObject: {
      if (j.size() != 1) break;
      auto [key, value] = j.only_field();
      if (key == "node" && value.kind() == JKind::kString) {
        // kEmpty when absent. Most references are to nodes a few before,
        // which this thread has just parsed (RecentNames); on two threads the
        // later part's names are indexed apart from the first part's.
        const std::string_view ref = value.str();
        const uint64_t hash = NameIndex::Hash(ref);
        size_t target = state.recent.Find(ref, hash);
        if (target == NameIndex::kEmpty && state.later_names && node_index >= state.later_from)
          target = state.later_names->Find(ref, hash);
        if (target == NameIndex::kEmpty) target = index_of_.Find(ref, hash);
        if (target >= node_index)
          return Fail(path, fmt::format("node '{}' references '{}', which is not defined before it", node_name,
                                        value.str()));
        Argument node_ref = Argument::NodeRef(nullptr);  // resolved by CreateNode
        node_ref.int_value = static_cast<int64_t>(target);
        return node_ref;
      }
      if (key == "complex") {  // a Python complex scalar: [real, imag], each a number or {"float": ...}
        if (value.kind() != JKind::kArray || value.size() != 2)
          return Fail(path, "a complex constant is {\"complex\": [real, imag]}");
        double parts[2] = {0, 0};
        const JsonPath complex_path(path, "complex");
        for (size_t i = 0; i < 2; ++i) {
          const JsonPath part_path(complex_path, i);
          FXREMAT_ASSIGN_OR_RETURN(Argument part, ReadArgument(value.at(i), part_path, node_name, node_index, state, depth + 1));
          if (part.kind == Argument::Kind::kDouble) parts[i] = part.double_value;
          else if (part.kind == Argument::Kind::kInt) parts[i] = static_cast<double>(part.int_value);
          else return Fail(part_path, "expected a number");
        }
        return Argument::Complex(parts[0], parts[1]);
      }
      if (key == "dict") {  // a dict with string keys: [[key, value], ...], in order
        const JsonPath dict_path(path, "dict");
        if (value.kind() != JKind::kArray) return Fail(dict_path, "a dict argument is {\"dict\": [[key, value], ...]}");
        // three levels, as in the text form (its JSON object, array and pair)
        if (depth + 3 > kMaxArgumentNesting)
          return Fail(path, fmt::format("arguments nest deeper than {} levels", kMaxArgumentNesting));
        std::vector<Argument> items;
        std::set<std::string, std::less<>> keys;
        size_t i = 0;
        FXREMAT_RETURN_IF_ERROR(value.each([&](const V& item) -> Status {
          const JsonPath item_path(dict_path, i++);
          if (item.kind() != JKind::kArray || item.size() != 2 || item.at(0).kind() != JKind::kString)
            return Fail(item_path, "a dict item is [key, value] with a string key");
          if (!keys.emplace(item.at(0).str()).second)
            return Fail(item_path, fmt::format("the key '{}' is given twice", item.at(0).str()));
          FXREMAT_ASSIGN_OR_RETURN(Argument v, ReadArgument(item.at(1), JsonPath(item_path, 1), node_name, node_index, state, depth + 3));
          items.push_back(Argument::List({Argument::String(std::string(item.at(0).str())), std::move(v)}));
          return Status::Ok();
        }));
        return Argument::Dict(std::move(items));
      }
      if (value.kind() != JKind::kString) break;
      const std::string_view text = value.str();
      if (key == "float") {
        if (text == "inf") return Argument::Double(INFINITY);
        if (text == "-inf") return Argument::Double(-INFINITY);
        if (text == "nan") return Argument::Double(NAN);
        return Fail(path, fmt::format("unknown float constant '{}'", text));
      }
      if (key == "dtype") {
        auto d = DTypeFromName(text);
        if (!d) return Fail(path, fmt::format("unknown dtype '{}'", text));
        return Argument::OfDType(*d);
      }
      if (key == "device") {
        if (!IsDeviceName(text)) return Fail(path, fmt::format("not a device: '{}' (cpu, cuda:0, ...)", text));
        return Argument::Device(std::string(text));
      }
      if (key == "op") {
        if (text.empty()) return Fail(path, "an empty operator name");
        return Argument::Op(std::string(text));
      }
      if (key == "layout") {
        if (!IsLayoutName(text)) return Fail(path, fmt::format("unknown layout '{}'", text));
        return Argument::Layout(std::string(text));
      }
      if (key == "memory_format") {
        if (!IsMemoryFormatName(text)) return Fail(path, fmt::format("unknown memory format '{}'", text));
        return Argument::MemoryFormat(std::string(text));
      }
      break;
    }
    default: break;
  }
  return Fail(path, fmt::format("unsupported argument {}", j.dump()));
}

template <typename V>
Status GraphReader<V>::ReadMeta(const V& j, const JsonPath& path, ParseState& state, PendingNode& node) {
  if (j.kind() != JKind::kObject) return Fail(path, "expected an object");
  const auto& f = j.fields();
  if (auto val = f.find("val")) {
    FXREMAT_RETURN_IF_ERROR(ReadValueFacts(*val, JsonPath(path, "val"), state, node.val));
  }
  NodeMeta& meta = node.meta;
  auto read_string = [&](FieldKey key, std::string& out) -> Status {
    auto field = f.find(key);
    if (IsNullOrAbsent(field)) return Status::Ok();
    if (field->kind() != JKind::kString) return Fail(JsonPath(path, key.name), "expected a string");
    out = std::string(field->str());
    return Status::Ok();
  };
  std::string recompute, partitioner_tag;
  FXREMAT_RETURN_IF_ERROR(read_string("recompute", recompute));
  FXREMAT_RETURN_IF_ERROR(read_string("partitioner_tag", partitioner_tag));
  if (auto field = f.find("stack_trace"); !IsNullOrAbsent(field)) {
    if (field->kind() != JKind::kString) return Fail(JsonPath(path, "stack_trace"), "expected a string");
    meta.stack_trace = InternedText(state, field->str());
  }
  // Note [Stack-trace table]: a new key, not a new meaning of `stack_trace`, so
  // that a reader of format 1.4 still reads the file (without the traces).
  if (auto field = f.find("stack_trace_index"); !IsNullOrAbsent(field)) {
    if (!IsInteger(*field)) return Fail(JsonPath(path, "stack_trace_index"), "expected an integer");
    const int64_t k = field->kind() == JKind::kInt ? field->int64() : -1;  // a huge unsigned one is out of range too
    if (k < 0 || k >= static_cast<int64_t>(stack_traces_.size()))
      return Fail(JsonPath(path, "stack_trace_index"),
                  fmt::format("{} is not an index of \"stack_traces\" (which has {})", field->dump(),
                              stack_traces_.size()));
    meta.stack_trace = stack_traces_[static_cast<size_t>(k)];
  }
  if (!recompute.empty()) {
    std::optional<Decision> d = RecomputeTagFromName(recompute);
    if (!d) return Fail(JsonPath(path, "recompute"), fmt::format("unknown checkpoint policy '{}'", recompute));
    meta.recompute = *d;
  }
  if (!partitioner_tag.empty()) {
    std::optional<PartitionerTag> tag = PartitionerTagFromName(partitioner_tag);
    if (!tag) return Fail(JsonPath(path, "partitioner_tag"), fmt::format("unknown partitioner tag '{}'", partitioner_tag));
    meta.partitioner_tag = *tag;
  }
  if (auto id = f.find("ac_graph_id"); !IsNullOrAbsent(id)) {
    if (!IsInteger(*id)) return Fail(JsonPath(path, "ac_graph_id"), "expected an integer");
    meta.mutableRare().ac_graph_id = id->int64();
  }
  if (auto names = f.find("names"); !IsNullOrAbsent(names)) {
    const JsonPath names_path(path, "names");
    if (names->kind() != JKind::kArray) return Fail(names_path, "expected a list of strings");
    size_t k = 0;
    FXREMAT_RETURN_IF_ERROR(names->each([&](const V& name) -> Status {
      if (name.kind() != JKind::kString) return Fail(JsonPath(names_path, k), "expected a string");
      meta.names.emplace_back(name.str());
      ++k;
      return Status::Ok();
    }));
  }
  auto read_flag = [&](FieldKey key, bool& out) -> Status {
    auto field = f.find(key);
    if (IsNullOrAbsent(field)) return Status::Ok();
    if (field->kind() != JKind::kBool) return Fail(JsonPath(path, key.name), "expected a boolean");
    out = field->boolean();
    return Status::Ok();
  };
  FXREMAT_RETURN_IF_ERROR(read_flag("offload_requested", meta.offload_requested));
  FXREMAT_RETURN_IF_ERROR(read_flag("mutated", meta.mutated));
  FXREMAT_RETURN_IF_ERROR(read_flag("saved_tensor_with_no_vc_check", meta.no_vc_check));
  FXREMAT_RETURN_IF_ERROR(read_flag("has_backward_hook", meta.has_backward_hook));
  for (const auto& [key, field] : {std::pair{FieldKey("memory_budget"), &RareNodeMeta::memory_budget},
                                   std::pair{FieldKey("region_memory_budget"),
                                             &RareNodeMeta::region_memory_budget}}) {
    auto value = f.find(key);
    if (IsNullOrAbsent(value)) continue;
    const JKind k = value->kind();
    if ((k != JKind::kInt && k != JKind::kBigUnsigned && k != JKind::kFloat) || !std::isfinite(value->number()))
      return Fail(JsonPath(path, key.name), "expected a number");
    meta.mutableRare().*field = value->number();
  }
  if (auto from = f.find("written_back_from"); !IsNullOrAbsent(from)) {
    if (!IsInteger(*from) || from->int64() < 0)
      return Fail(JsonPath(path, "written_back_from"), "expected a forward output index");
    meta.mutableRare().written_back_from = from->int64();
  }
  if (auto r = f.find("value_range"); !IsNullOrAbsent(r)) {
    const JsonPath range_path(path, "value_range");
    if (r->kind() != JKind::kArray || r->size() != 2) return Fail(range_path, "expected [low, high]");
    FXREMAT_ASSIGN_OR_RETURN(int64_t low, ReadInt64(r->at(0), JsonPath(range_path, size_t{0}), "an integer (low)"));
    FXREMAT_ASSIGN_OR_RETURN(int64_t high, ReadInt64(r->at(1), JsonPath(range_path, size_t{1}), "an integer (high)"));
    if (auto problem = ValueRangeProblem(low, high)) return Fail(range_path, *problem);
    meta.mutableRare().value_range = std::make_pair(low, high);
  }
  return Status::Ok();
}

template <typename V>
Status GraphReader<V>::ParseNode(const V& j, size_t index, bool shared_index, ParseState& state, PendingNode& out) {
  const JsonPath nodes_path(root_, "nodes");
  const JsonPath path(nodes_path, index);
  if (j.kind() != JKind::kObject) return Fail(path, "expected a node object");
  const auto& f = j.fields();
  // The checks of CheckReferences, node by node (Note [One pass over the nodes]).
  auto name_field = f.find("name");
  if (!IsString(name_field)) return Fail(JsonPath(path, "name"), "missing node name");
  const std::string_view name = name_field->str();
  if (name.empty() || !IsPythonIdentifier(name)) return Fail(JsonPath(path, "name"), "not an identifier");
  if (IsPythonKeyword(name)) return Fail(JsonPath(path, "name"), fmt::format("node name '{}' is a Python keyword", name));
  out.name = name;
  // Read alone, the name goes into index_of_ right before the node is made,
  // its slot fetched meanwhile. Reading the node never looks its own name up
  // except in a reference to itself, refused either way; and whatever error
  // ParseNode returns, CheckReferences reports a duplicate name first.
  uint64_t name_hash = 0;
  if (!shared_index) {
    names_[index] = name;
    name_hash = index_of_.Prefetch(name);
  } else if (names_[index] != name) {
    return Fail(JsonPath(path, "name"), "two names");  // only a repeated key; read alone, the last one is taken
  }
  auto op_field = f.find("op");
  if (!IsString(op_field)) return Fail(JsonPath(path, "op"), fmt::format("node '{}' has no op", name));
  const std::string_view op_name = op_field->str();
  OpKind op;
  if (op_name == "placeholder") op = OpKind::kPlaceholder;
  else if (op_name == "call_function") op = OpKind::kCallFunction;
  else if (op_name == "get_attr") op = OpKind::kGetAttr;
  else if (op_name == "output") op = OpKind::kOutput;
  else return Fail(JsonPath(path, "op"), fmt::format("node '{}': unknown op '{}' (call_module and call_method "
                                                     "are not part of aten graphs)", name, op_name));
  out.op = op;
  // (On two threads the graph is being built meanwhile: ReadNodesOnTwoThreads
  // checks this as it creates the node.)
  if (!shared_index && graph_->outputNode() != nullptr) return FollowsOutput(path, name);
  std::string_view target = op == OpKind::kOutput ? std::string_view("output") : name;
  if (auto target_field = f.find("target")) {
    if (target_field->kind() != JKind::kString) return Fail(JsonPath(path, "target"), "expected a string");
    target = target_field->str();
  } else if (op == OpKind::kCallFunction) {
    return Fail(JsonPath(path, "target"), fmt::format("call_function node '{}' has no target", name));
  }
  if ((op == OpKind::kCallFunction || op == OpKind::kGetAttr) && !IsDottedName(target))
    return Fail(JsonPath(path, "target"),
                fmt::format("node '{}': target '{}' is not a dotted name (identifiers joined by '.')", name, target));
  out.target = target;
  std::vector<Argument>& args = out.args;
  if (auto args_field = f.find("args")) {
    const JsonPath args_path(path, "args");
    if (args_field->kind() != JKind::kArray) return Fail(args_path, "expected an array");
    args.reserve(args_field->size());
    size_t i = 0;
    FXREMAT_RETURN_IF_ERROR(args_field->each([&](const V& item) -> Status {
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(item, JsonPath(args_path, i++), name, index, state));
      args.push_back(std::move(a));
      return Status::Ok();
    }));
  }
  if (auto kwargs_field = f.find("kwargs")) {
    const JsonPath kwargs_path(path, "kwargs");
    if (kwargs_field->kind() != JKind::kObject) return Fail(kwargs_path, "expected an object");
    for (const auto& [k, v] : kwargs_field->items()) {
      FXREMAT_ASSIGN_OR_RETURN(Argument a, ReadArgument(v, JsonPath(kwargs_path, k), name, index, state));
      out.kwargs.emplace_back(std::string(k), std::move(a));
    }
  }
  if (op == OpKind::kOutput) {
    // Note [Single-value outputs]: a plain graph may return one value itself.
    const bool single = args.size() == 1 && args[0].kind == Argument::Kind::kNode;
    if (single && graph_->kind() != GraphKind::kPlain)
      return Fail(JsonPath(path, "args"), "only a plain graph returns a single value; this graph returns a list");
    if (!single && (args.size() != 1 || args[0].kind != Argument::Kind::kList))
      return Fail(JsonPath(path, "args"), "the output node takes one argument: a list of output values");
    for (size_t i = 0; i < args[0].list.size(); ++i) {
      const Argument& a = args[0].list[i];
      if (a.kind != Argument::Kind::kNode && a.kind != Argument::Kind::kNone)
        return Fail(fmt::format("{}/args/0/{}", path.str(), i), "an output entry must be a node reference or null");
    }
  }
  // Before the node exists: a graph never holds two nodes of one name
  // (Graph::createNode asserts it). On two threads every name went in first.
  if (!shared_index && index_of_.Insert(index, name_hash) != NameIndex::kEmpty)
    return Fail(JsonPath(path, "name"), "duplicate node name");
  if (auto meta = f.find("meta")) FXREMAT_RETURN_IF_ERROR(ReadMeta(*meta, JsonPath(path, "meta"), state, out));
  if ((op == OpKind::kPlaceholder || op == OpKind::kCallFunction) && out.val.kind == ValueFacts::Kind::kUnknown)
    return Fail(JsonPath(JsonPath(path, "meta"), "val"),
                fmt::format("node '{}' has no value facts (meta.val): shapes and "
                            "dtypes are needed to size activations", name));
  if (auto role_field = f.find("role")) {
    if (op != OpKind::kPlaceholder) return Fail(JsonPath(path, "role"), "only placeholders have a role");
    auto role = role_field->kind() == JKind::kString ? PlaceholderRoleFromName(role_field->str()) : std::nullopt;
    if (!role) return Fail(JsonPath(path, "role"), fmt::format("unknown placeholder role {}", role_field->dump()));
    out.role = *role;
  }
  if (auto path_field = f.find("path"); !IsNullOrAbsent(path_field)) {
    if (path_field->kind() != JKind::kString) return Fail(JsonPath(path, "path"), "expected a string");
    out.path = path_field->str();
  }
  state.recent.Put(name, shared_index ? NameIndex::Hash(name) : name_hash, index);
  return Status::Ok();
}

// The node's references become the nodes created before it.
inline void ResolveReferences(Argument& a, const std::vector<Node*>& created) {
  if (a.kind == Argument::Kind::kNode) {
    a.node = created[static_cast<size_t>(a.int_value)];
    a.int_value = 0;
  } else if (a.kind == Argument::Kind::kList || a.kind == Argument::Kind::kDict) {
    for (Argument& item : a.list) ResolveReferences(item, created);
  }
}

template <typename V>
Node* GraphReader<V>::CreateNode(PendingNode& pending) {
  for (Argument& a : pending.args) ResolveReferences(a, created_);
  for (auto& [key, a] : pending.kwargs) ResolveReferences(a, created_);
  Node* node = graph_->createNode(pending.op, std::string(pending.name), pending.target, std::move(pending.args),
                                  std::move(pending.kwargs));
  created_.push_back(node);
  node->val() = std::move(pending.val);
  node->meta() = std::move(pending.meta);
  if (pending.role != PlaceholderRole::kNone) node->setRole(pending.role);
  if (pending.path) node->setPath(std::string(*pending.path));
  return node;
}

// Roles follow AOTAutograd's naming convention when a file does not state them;
// tangent_outputs default to the forward outputs that require grad.
template <typename V>
Status GraphReader<V>::InferRolesAndTangents() {
  for (Node* p : graph_->placeholders()) {
    if (p->role() != PlaceholderRole::kNone) continue;
    const std::string& t = p->target();
    if (graph_->kind() != GraphKind::kJoint) p->setRole(PlaceholderRole::kInput);
    else if (t.find("tangents") != std::string::npos) p->setRole(PlaceholderRole::kTangent);
    else if (t.find("fwd_seed") != std::string::npos || t.find("fwd_base_offset") != std::string::npos)
      p->setRole(PlaceholderRole::kFwdRng);
    else if (t.find("bwd_seed") != std::string::npos || t.find("bwd_base_offset") != std::string::npos)
      p->setRole(PlaceholderRole::kBwdRng);
    else p->setRole(PlaceholderRole::kPrimal);
  }
  if (graph_->kind() == GraphKind::kJoint && !has_tangent_outputs_) {
    FXREMAT_ASSIGN_OR_RETURN(graph_->joint().tangent_outputs, InferTangentOutputs(*graph_));
  }
  return Status::Ok();
}

template <typename V>
Expected<std::pair<const SafetensorsEntry*, std::shared_ptr<const std::string>>> GraphReader<V>::SidecarEntry(
    const std::string& file, const std::string& key, const JsonPath& path) {
  if (file.empty() || file.find('/') != std::string::npos || file.find('\\') != std::string::npos || file == "." ||
      file == "..")
    return Fail(JsonPath(path, "file"), fmt::format("'{}' is not a file name beside the graph", file));
  if (sidecar_dir_.empty())
    return Fail(JsonPath(path, "file"), fmt::format("the constant is in the sidecar file '{}', but the document was not "
                                                    "read from a file (load it by its path)", file));
  auto it = sidecars_.find(file);
  if (it == sidecars_.end()) {
    const std::string full = (std::filesystem::path(sidecar_dir_) / file).string();
    Expected<std::string> contents = ReadFileContents(full, nullptr, kNoLimit);
    if (!contents.ok())
      return Fail(JsonPath(path, "file"),
                  fmt::format("cannot read the constants file '{}': {}", file, contents.status().ToString()));
    FXREMAT_ASSIGN_OR_RETURN(SafetensorsFile indexed, IndexSafetensors(std::move(*contents), full));
    it = sidecars_.emplace(file, std::move(indexed)).first;
  }
  auto e = it->second.entries.find(key);
  if (e == it->second.entries.end())
    return Fail(JsonPath(path, "key"), fmt::format("the sidecar file '{}' has no tensor '{}'", file, key));
  return std::pair<const SafetensorsEntry*, std::shared_ptr<const std::string>>(&e->second,
                                                                               it->second.SharedData(key));
}

template <typename V>
Status GraphReader<V>::ReadConstants(const V& constants) {
  if (constants.kind() != JKind::kObject) return Fail("/constants", "expected an object");
  const JsonPath constants_path(root_, "constants");
  for (const auto& [target_view, j] : constants.items()) {
    const std::string target(target_view);
    const JsonPath path(constants_path, target_view);
    if (j.kind() != JKind::kObject) return Fail(path, "expected an object");
    Constant c;
    if (auto opaque = j.find("opaque")) {
      if (opaque->kind() != JKind::kString) return Fail(JsonPath(path, "opaque"), "expected the object's type name");
      c.kind = Constant::Kind::kOpaque;
      c.type_name = std::string(opaque->str());
      graph_->constants().emplace(target, std::move(c));
      continue;
    }
    auto val = j.find("val");
    if (!val) return Fail(path, "missing \"val\" (the tensor's facts)");
    const JsonPath val_path(path, "val");
    ValueFacts v;
    FXREMAT_RETURN_IF_ERROR(ReadValueFacts(*val, val_path, state_, v));
    if (!v.is_tensor()) return Fail(val_path, "a constant's facts must be a tensor's");
    int64_t expected = DTypeItemSize(v.tensor.dtype);
    const JsonPath shape_path(val_path, "shape");
    for (size_t i = 0; i < v.tensor.shape.size(); ++i) {
      const Dim& d = v.tensor.shape[i];
      if (!d.is_static()) return Fail(JsonPath(shape_path, i), "a constant's shape is static");
      if (d.hint < 0) return Fail(JsonPath(shape_path, i), "negative dimension");
    }
    // A zero anywhere makes the tensor empty, whatever the order of its dims.
    if (std::any_of(v.tensor.shape.begin(), v.tensor.shape.end(), [](const Dim& d) { return d.hint == 0; })) {
      expected = 0;
    } else {
      for (const Dim& d : v.tensor.shape) {
        if (expected > std::numeric_limits<int64_t>::max() / d.hint)
          return Fail(shape_path, "the tensor's size overflows 64 bits");
        expected *= d.hint;
      }
    }
    c.facts = v.tensor;
    auto data = j.find("data");
    auto file = j.find("file");
    auto by_reference = j.find("by_reference");
    const int present = (data ? 1 : 0) + (file ? 1 : 0) + (by_reference ? 1 : 0);
    if (present != 1) return Fail(path, "expected exactly one of \"data\", \"file\" or \"by_reference\"");
    if (data) {
      const JsonPath data_path(path, "data");
      if (data->kind() != JKind::kString) return Fail(data_path, "expected base64 text");
      FXREMAT_ASSIGN_OR_RETURN(std::string bytes, Base64Decode(std::string(data->str()), data_path.str()));
      if (static_cast<int64_t>(bytes.size()) != expected)
        return Fail(data_path, fmt::format("{} bytes of data for a tensor of {} bytes", bytes.size(), expected));
      c.data = std::make_shared<const std::string>(std::move(bytes));
    } else if (file) {
      if (file->kind() != JKind::kString) return Fail(JsonPath(path, "file"), "expected a file name");
      std::string key = target;
      if (auto key_field = j.find("key")) {
        if (key_field->kind() != JKind::kString) return Fail(JsonPath(path, "key"), "expected a string");
        key = std::string(key_field->str());
      }
      FXREMAT_ASSIGN_OR_RETURN(auto entry, SidecarEntry(std::string(file->str()), key, path));
      const auto& [e, bytes] = entry;
      if (e->dtype != SafetensorsDType(c.facts.dtype))
        return Fail(JsonPath(path, "file"), fmt::format("the sidecar holds {} data for a {} tensor", e->dtype,
                                                        DTypeName(c.facts.dtype)));
      std::vector<int64_t> shape;
      for (const Dim& d : c.facts.shape) shape.push_back(d.hint);
      if (e->shape != shape)
        return Fail(JsonPath(path, "file"), fmt::format("the sidecar's shape [{}] is not the tensor's [{}]",
                                                        fmt::join(e->shape, ", "), fmt::join(shape, ", ")));
      if (static_cast<int64_t>(bytes->size()) != expected)
        return Fail(JsonPath(path, "file"), fmt::format("the sidecar holds {} bytes for a tensor of {} bytes",
                                                        bytes->size(), expected));
      if (auto crc = j.find("crc32")) {  // Note [Sidecar checksums]
        const JsonPath crc_path(path, "crc32");
        int64_t want = -1;
        if (!crc->get_int64(want) || want < 0 || want > int64_t{0xFFFFFFFF})
          return Fail(crc_path, "expected a CRC-32, an integer in [0, 2^32)");
        const uint32_t got = Crc32(*bytes);
        if (got != static_cast<uint32_t>(want))
          return Fail(crc_path, fmt::format("the sidecar '{}' holds other data for '{}' than this document was written "
                                            "with (CRC-32 {:08x}, the document's {:08x}): it was overwritten since, "
                                            "e.g. by another graph saved under the same name with the other "
                                            "extension (.json / .json.gz)",
                                            file->str(), key, got, static_cast<uint32_t>(want)));
      }
      c.data = bytes;
    } else if (by_reference->kind() != JKind::kBool || !by_reference->boolean()) {
      return Fail(JsonPath(path, "by_reference"), "expected true");
    }
    graph_->constants().emplace(target, std::move(c));
  }
  return Status::Ok();
}

template <typename V>
Status GraphReader<V>::ReadNodes(const V& nodes_field, size_t count) {
  names_.assign(count, std::string_view());
  index_of_.Reset(&names_, count);
  size_t index = 0;
  PendingNode pending;
  return nodes_field.each([&](const V& node) -> Status {
    FXREMAT_RETURN_IF_ERROR(ParseNode(node, index++, /*shared_index=*/false, state_, pending));
    CreateNode(pending);
    pending = PendingNode();
    return Status::Ok();
  });
}

// Note [Reading nodes on two threads]
// At a million nodes, building the graph from the parsed document was most of
// a load (1.9 s of 2.7), all on one thread while the machine's other cores
// idled. A large document's node list is now read by two threads:
//  1. Names. The first thread indexes the names of the first 40% of the nodes
//     (names_, index_of_), the second the rest (its own NameIndex). The first
//     goes on to parse and create nodes of its part, which need only its
//     index; before its first node of the second part, it waits for the
//     second index and checks that no name is in both.
//  2. Parsing. The list is cut into blocks (4096 nodes from 131,072 nodes, a
//     32nd of the list below, at least 256), which either thread
//     takes in order (an atomic counter) and parses into PendingNodes. A
//     reference resolves to an index -- among the thread's recently parsed
//     names (RecentNames), then either index -- and must be earlier than the
//     node.
//  3. Creating. The first thread creates every node, block by block in order,
//     and frees each block; while its next block is not parsed yet, it parses
//     one the second has not taken. The second runs at most 64 blocks ahead.
// The work balances itself: creating a node costs about half as much as
// parsing it, and the creating thread parses whatever its creating leaves it
// time for. Parsing reads only the document, the name indexes and what was
// read before the nodes (symbols, stack traces), and interns texts (which
// takes a lock); each thread has its own ParseState. Creating nodes and their
// use lists stays on one thread, in node order, so the graph is the one a
// single reader builds, byte for byte when written.
// Errors: any failure of the try (a bad node, a name used twice, a reference
// to a later node, a node after the output node, a repeated "name" key whose
// last value is not the first, a thread that cannot start) drops everything it
// built, and the document is read again by one thread, whose first error is
// the one reported: the messages of a bad document do not depend on how it
// was read (tests: serialize_test's two-thread cases, CTest
// cli_bad_inputs_two_threads). Subgraph documents are small and read by one.
// A count a test may set in the environment variable `name`; `fallback` when
// it is unset or not a number.
inline size_t SizeFromEnv(const char* name, size_t fallback) {
  if (const char* v = std::getenv(name)) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);
    if (end != v && *end == '\0') return static_cast<size_t>(n);
  }
  return fallback;
}

// FXREMAT_READ_TWO_THREADS_FROM=N reads documents of N nodes or more on two
// threads (tests use 1, so that small documents take the path too).
// The default: with the field slots of Note [Known field keys], synth graphs
// of 5,000 nodes build in 4.5 ms on two threads against 5.3 on one, 10,000 in
// 7.6 against 11.2 (medians of 21, interleaved); at 3,000 one thread is
// quicker (3.4 against 3.9 ms). Two threads vary more on this 2-vCPU machine
// (7 to 16 ms at 10,000), one thread's build is steady.
inline size_t NodesForTwoThreads() { return SizeFromEnv("FXREMAT_READ_TWO_THREADS_FROM", 5'000); }

template <typename V>
Status GraphReader<V>::IndexNames(const V& nodes_field, size_t begin, size_t end, NameIndex& index,
                                  std::vector<V>& nodes) {
  ScopedPhase phase("index-names");
  index.Reset(&names_, end - begin);
  size_t k = 0;
  bool past_the_part = false;
  Status named = nodes_field.each([&](const V& node) -> Status {
    if (k >= end) {
      past_the_part = true;
      return Status::Internal("past the part");  // stops the walk
    }
    if (k++ < begin) return Status::Ok();
    // ParseNode checks that this is the name it reads (the last of the key).
    std::optional<V> name = node.first_field("name");
    if (!IsString(name)) return Status::BadInput("a node without a name");
    names_[k - 1] = name->str();
    if (index.Insert(k - 1) != NameIndex::kEmpty) return Status::BadInput("a name used twice");
    nodes[k - 1] = node;
    return Status::Ok();
  });
  return past_the_part ? Status::Ok() : named;
}

template <typename V>
Status GraphReader<V>::ReadNodesOnTwoThreads(const V& nodes_field, size_t count) {
  // Indexing: this thread the first 40% of the names, the second the rest.
  const size_t split = count * 4 / 10;
  names_.assign(count, std::string_view());
  std::vector<V> nodes(count);
  NameIndex later_names;
  // Blocks of 4096 nodes at a million; smaller below 131,072 nodes, so that a
  // graph of a few thousand still has enough blocks to share evenly.
  const size_t nodes_per_block = std::clamp<size_t>(count / 32, 256, 4096);
  const size_t num_blocks = (count + nodes_per_block - 1) / nodes_per_block;
  // A block's state: kUnread, kParsed (its PendingNodes in blocks[b]) or
  // kFailed; each change is published with a release store.
  enum : uint8_t { kUnread, kParsed, kFailed };
  std::vector<std::unique_ptr<std::vector<PendingNode>>> blocks(num_blocks);
  std::unique_ptr<std::atomic<uint8_t>[]> block_state(new std::atomic<uint8_t>[num_blocks]);
  for (size_t b = 0; b < num_blocks; ++b) block_state[b].store(kUnread, std::memory_order_relaxed);
  std::atomic<size_t> next_to_parse{0};  // the next block either thread may take
  std::atomic<size_t> blocks_created{0};
  std::atomic<int> parts_indexed{0};  // both name indexes complete at 2
  std::atomic<bool> failed{false}, stop{false};
  Status statuses[2];  // each thread's first failure: [0] this one, [1] the second
  // The second thread runs at most this many blocks ahead of the creation (a
  // bound on the PendingNodes held).
  constexpr size_t kMaxBlocksAhead = 64;

  auto parse_block = [&](size_t b, ParseState& state, Status& status) {
    const size_t begin = b * nodes_per_block, end = std::min(count, begin + nodes_per_block);
    auto block = std::make_unique<std::vector<PendingNode>>(end - begin);
    for (size_t k = begin; k < end; ++k) {
      if (Status st = ParseNode(nodes[k], k, /*shared_index=*/true, state, (*block)[k - begin]); !st.ok()) {
        status = std::move(st);
        failed.store(true, std::memory_order_relaxed);
        block_state[b].store(kFailed, std::memory_order_release);
        block_state[b].notify_all();
        return;
      }
    }
    blocks[b] = std::move(block);
    block_state[b].store(kParsed, std::memory_order_release);
    block_state[b].notify_all();
  };
  auto mark_indexed = [&] {
    parts_indexed.fetch_add(1, std::memory_order_acq_rel);
    parts_indexed.notify_all();
  };
  auto wait_for_both_indexes = [&] {
    for (int n = parts_indexed.load(std::memory_order_acquire); n < 2; n = parts_indexed.load(std::memory_order_acquire))
      parts_indexed.wait(n, std::memory_order_acquire);
  };
  // Note [Populated pages]: the second thread maps the arena pages of the
  // nodes it parsed, before the first creates them there (node k goes to
  // chunk k / kNodesPerChunk of the fresh graph's arena, reserved by Read).
  const std::vector<Graph::NodeMemory> arena = graph_->unusedNodeMemory();
  const size_t nodes_per_chunk = arena.empty() ? count : std::max<size_t>(1, arena[0].size / sizeof(Node));
  auto second_thread = [&] {
    ParseState state;
    state.later_names = &later_names;
    state.later_from = split;
    try {
      if (Status st = IndexNames(nodes_field, split, count, later_names, nodes); !st.ok()) {
        statuses[1] = std::move(st);
        failed.store(true, std::memory_order_relaxed);
      }
      mark_indexed();
      wait_for_both_indexes();
      while (!failed.load(std::memory_order_relaxed) && !stop.load(std::memory_order_relaxed)) {
        const size_t b = next_to_parse.fetch_add(1, std::memory_order_relaxed);
        if (b >= num_blocks) break;
        for (size_t done = blocks_created.load(std::memory_order_acquire);
             b >= done + kMaxBlocksAhead && !stop.load(std::memory_order_relaxed);
             done = blocks_created.load(std::memory_order_acquire))
          blocks_created.wait(done, std::memory_order_acquire);
        parse_block(b, state, statuses[1]);
        for (size_t c = b * nodes_per_block / nodes_per_chunk;
             c < arena.size() && c * nodes_per_chunk < (b + 1) * nodes_per_block; ++c)
          PopulatePages(arena[c].begin + arena[c].mapped_bytes, arena[c].size - arena[c].mapped_bytes);
      }
    } catch (const std::exception& e) {
      statuses[1] = Status::Internal(e.what());
      failed.store(true, std::memory_order_relaxed);
    }
    // Wakes this thread wherever it waits: on a block, or on the indexes.
    for (size_t b = 0; b < num_blocks; ++b) block_state[b].notify_all();
    parts_indexed.fetch_add(2, std::memory_order_acq_rel);
    parts_indexed.notify_all();
  };
  std::jthread worker;
  try {
    worker = std::jthread(second_thread);
  } catch (const std::system_error&) {
    return Status::Internal("cannot start a second reading thread");
  }
  // Stops the second thread and wakes it wherever it waits (on the indexes,
  // or on the creation falling behind), so that it never waits for this one.
  auto release_worker = [&] {
    stop.store(true, std::memory_order_relaxed);
    parts_indexed.fetch_add(2, std::memory_order_acq_rel);
    parts_indexed.notify_all();
    blocks_created.fetch_add(kMaxBlocksAhead + 1, std::memory_order_acq_rel);
    blocks_created.notify_all();
  };
  struct ReleaseAtReturn {
    decltype(release_worker)& release;
    ~ReleaseAtReturn() { release(); }
  } release_at_return{release_worker};
  auto failure = [&]() -> Status {
    release_worker();
    worker.join();
    return !statuses[0].ok() ? statuses[0] : !statuses[1].ok() ? statuses[1] : Status::Internal("read failed");
  };

  if (Status st = IndexNames(nodes_field, 0, split, index_of_, nodes); !st.ok()) {
    statuses[0] = std::move(st);
    failed.store(true, std::memory_order_relaxed);
  }
  mark_indexed();
  if (failed.load(std::memory_order_relaxed)) return failure();
  // The first part's nodes need only the first part's index: this thread
  // parses and creates them while the second still indexes the rest (about
  // twice as long: it walks past the first part, then indexes 60%). Before
  // its first node of the later part, both indexes must be complete and no
  // name in both (each index refused repeats within its part), so that the
  // graph never gets a name twice.
  bool whole_index_checked = false;
  auto check_whole_index = [&]() -> bool {
    if (whole_index_checked) return true;
    {
      ScopedPhase phase("wait-for-second-index");
      wait_for_both_indexes();
    }
    if (failed.load(std::memory_order_relaxed)) return false;
    for (size_t k = 0; k < split; ++k)
      if (later_names.Find(names_[k]) != NameIndex::kEmpty) {
        statuses[0] = Status::BadInput("a name used twice");
        return false;
      }
    whole_index_checked = true;
    return true;
  };
  auto has_later_nodes = [&](size_t block) { return (block + 1) * nodes_per_block > split; };
  // This thread creates every node, in order, block by block; while the next
  // block is not parsed yet, it parses one the second thread has not taken.
  ParseState state;
  state.later_names = &later_names;
  state.later_from = split;
  for (size_t b = 0; b < num_blocks; ++b) {
    for (uint8_t s = block_state[b].load(std::memory_order_acquire); s == kUnread;
         s = block_state[b].load(std::memory_order_acquire)) {
      if (failed.load(std::memory_order_relaxed)) return failure();
      const size_t c = next_to_parse.fetch_add(1, std::memory_order_relaxed);
      if (c < num_blocks) {
        if (has_later_nodes(c) && !check_whole_index()) return failure();
        parse_block(c, state, statuses[0]);
      } else {
        ScopedPhase phase("wait-for-second-reader");
        block_state[b].wait(kUnread, std::memory_order_acquire);
      }
    }
    if (block_state[b].load(std::memory_order_acquire) != kParsed || failed.load(std::memory_order_relaxed))
      return failure();
    if (has_later_nodes(b) && !check_whole_index()) return failure();
    std::vector<PendingNode>& block = *blocks[b];
    for (size_t i = 0; i < block.size(); ++i) {
      const size_t k = b * nodes_per_block + i;
      if (graph_->outputNode() != nullptr) {
        statuses[0] = FollowsOutput(JsonPath(JsonPath(root_, "nodes"), k), block[i].name);
        return failure();
      }
      CreateNode(block[i]);
    }
    blocks[b].reset();
    blocks_created.store(b + 1, std::memory_order_release);
    blocks_created.notify_all();
  }
  return Status::Ok();
}

template <typename V>
Expected<std::unique_ptr<Graph>> GraphReader<V>::Read(const V& doc) {
  FXREMAT_RETURN_IF_ERROR(ReadHeader(doc));
  if (auto ops = doc.find("ops")) FXREMAT_RETURN_IF_ERROR(ReadOps(*ops));
  if (auto constants = doc.find("constants")) FXREMAT_RETURN_IF_ERROR(ReadConstants(*constants));
  if (auto subgraphs = doc.find("subgraphs")) FXREMAT_RETURN_IF_ERROR(ReadSubgraphs(*subgraphs));
  if (auto traces = doc.find("stack_traces"); !IsNullOrAbsent(traces)) {  // Note [Stack-trace table]
    const JsonPath traces_path(root_, "stack_traces");
    if (traces->kind() != JKind::kArray) return Fail(traces_path, "expected an array of strings");
    size_t i = 0;
    FXREMAT_RETURN_IF_ERROR(traces->each([&](const V& t) -> Status {
      if (t.kind() != JKind::kString) return Fail(JsonPath(traces_path, i), "expected a string");
      ++i;
      stack_traces_.push_back(InternedText(state_, t.str()));
      return Status::Ok();
    }));
  }
  auto nodes_field = doc.find("nodes");
  if (!nodes_field || nodes_field->kind() != JKind::kArray) return Fail("/nodes", "missing the node list");
  // Note [One pass over the nodes]: CheckReferences' errors (names, dangling
  // and forward references, cycles) come before any node's own error, so the
  // reader used to walk all nodes twice. Now one pass reads each node after
  // checking its name and resolving its references among the nodes before it;
  // on the first error of any kind, CheckReferences runs over the whole list
  // and its error, if any, is the one reported. A node whose name or
  // references that pass refuses always fails CheckReferences too.
  // The nodes are read as the array is walked: gathering them into a list
  // first was a walk of its own over the whole tape (a cache miss per node at
  // a million nodes); only CheckReferences, on an error, needs that list.
  const size_t count = nodes_field->size();
  graph_->adoptNodeMemory(std::move(recycled_text_), count);
  std::string().swap(recycled_text_);  // too small for a chunk: freed now, as it was
  if (std::byte* const base = reinterpret_cast<std::byte*>(recycled_index_.index.get()))
    graph_->adoptNodeMemory(std::move(recycled_index_.index), base, recycled_index_.capacity,
                            recycled_index_.mapped_bytes, count);
  graph_->reserve(count);
  created_.reserve(count);
  const bool on_two_threads = two_threads_ && count >= NodesForTwoThreads() && nesting_ == 0;
  // Read alone, the arena is mapped by the warmer; on two threads, by the
  // second as it goes (Note [Populated pages]).
  if (warmer_ && !on_two_threads)
    for (const Graph::NodeMemory& chunk : graph_->unusedNodeMemory())
      warmer_->Queue(chunk.begin + chunk.mapped_bytes, chunk.size - chunk.mapped_bytes);
  if (on_two_threads) {
    // Note [Reading nodes on two threads]: a document the try refuses is read
    // again by one thread, whose first error is the one to report.
    if (!ReadNodesOnTwoThreads(*nodes_field, count).ok()) {
      GraphReader<V> alone(sidecar_dir_);
      alone.two_threads_ = false;
      return alone.Read(doc);
    }
  } else {
    if (Status s = ReadNodes(*nodes_field, count); !s.ok()) {
      std::vector<V> nodes;
      nodes.reserve(count);
      (void)nodes_field->each([&](const V& n) {
        nodes.push_back(n);
        return Status::Ok();
      });
      FXREMAT_RETURN_IF_ERROR(CheckReferences(nodes));
      return s;
    }
  }
  if (graph_->outputNode() == nullptr)
    return Fail("/nodes", "the graph has no output node");
  FXREMAT_RETURN_IF_ERROR(InferRolesAndTangents());
  if (Status s = VerifyGraph(*graph_); !s.ok()) return prefix_.empty() ? s : s.WithContext(prefix_);
  return std::move(graph_);
}

template <typename V>
Status GraphReader<V>::ReadSubgraphs(const V& subgraphs) {
  const JsonPath subgraphs_path(root_, "subgraphs");
  if (subgraphs.kind() != JKind::kObject) return Fail(subgraphs_path, "expected an object");
  for (const auto& [target_view, j] : subgraphs.items()) {
    const JsonPath path(subgraphs_path, target_view);
    if (target_view.empty()) return Fail(path, "empty subgraph name");
    if (graph_->constants().count(std::string(target_view)))
      return Fail(path, fmt::format("'{}' names both a constant and a subgraph", target_view));
    if (j.kind() != JKind::kObject) return Fail(path, "expected a graph document (an object)");
    if (nesting_ + 1 > kMaxSubgraphNesting)
      return Fail(path, fmt::format("subgraphs nest deeper than {} levels", kMaxSubgraphNesting));
    GraphReader<V> nested(sidecar_dir_, prefix_ + path.str(), nesting_ + 1);
    FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> sub, nested.Read(j));
    graph_->subgraphs().emplace(std::string(target_view), std::shared_ptr<const Graph>(std::move(sub)));
  }
  return Status::Ok();
}
// ---------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------

// A kConst value's JSON text as a document value. The readers only store
// valid JSON text; anything else (an IR built by hand) is written as null
// rather than as nlohmann's "<discarded>", which no reader accepts.
ojson ConstValueJson(const std::string& text) {
  ojson value = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_discarded() ? ojson(nullptr) : value;
}

ojson ValueFactsToJson(const ValueFacts& v) {
  ojson j;
  switch (v.kind) {
    case ValueFacts::Kind::kTensor: {
      j["kind"] = "tensor";
      j["dtype"] = std::string(DTypeName(v.tensor.dtype));
      ojson shape = ojson::array(), stride = ojson::array();
      for (const Dim& d : v.tensor.shape) shape.push_back(DimToJson(d));
      for (const Dim& d : v.tensor.stride) stride.push_back(DimToJson(d));
      j["shape"] = shape;
      // Unknown strides (the readers take facts without them) stay unwritten: an
      // empty list beside a non-empty shape reads as a count mismatch (found by
      // tests/fuzz/fuzz_loader.cpp: text "f32[4]cpu" could not be read back as JSON).
      if (!v.tensor.stride.empty() || v.tensor.shape.empty()) j["stride"] = stride;
      j["device"] = v.tensor.device;
      j["requires_grad"] = v.tensor.requires_grad;
      if (v.tensor.storage >= 0) j["storage"] = v.tensor.storage;
      break;
    }
    case ValueFacts::Kind::kSymInt: j["kind"] = "symint"; j["expr"] = v.expr; j["hint"] = v.hint; break;
    case ValueFacts::Kind::kSymFloat: j["kind"] = "symfloat"; j["expr"] = v.expr; break;
    case ValueFacts::Kind::kSymBool: j["kind"] = "symbool"; j["expr"] = v.expr; break;
    case ValueFacts::Kind::kTuple: {
      j["kind"] = "tuple";
      ojson items = ojson::array();
      for (const ValueFacts& item : v.items) items.push_back(ValueFactsToJson(item));
      j["items"] = items;
      break;
    }
    case ValueFacts::Kind::kNone: j["kind"] = "none"; break;
    case ValueFacts::Kind::kConst:
      j["kind"] = "const";
      j["value"] = ConstValueJson(v.expr);
      break;
    case ValueFacts::Kind::kOpaque:
      j["kind"] = "opaque";
      j["type"] = v.expr;
      break;
    case ValueFacts::Kind::kUnknown: break;
  }
  return j;
}

ojson ArgumentToJson(const Argument& a) {
  switch (a.kind) {
    case Argument::Kind::kNone: return nullptr;
    case Argument::Kind::kBool: return a.int_value != 0;
    case Argument::Kind::kInt: return a.int_value;
    case Argument::Kind::kDouble:
      if (std::isnan(a.double_value)) return ojson{{"float", "nan"}};
      if (std::isinf(a.double_value)) return ojson{{"float", a.double_value > 0 ? "inf" : "-inf"}};
      return a.double_value;
    case Argument::Kind::kString: return a.text;
    case Argument::Kind::kNode: return ojson{{"node", a.node->name()}};
    case Argument::Kind::kList: {
      ojson list = ojson::array();
      for (const Argument& item : a.list) list.push_back(ArgumentToJson(item));
      return list;
    }
    case Argument::Kind::kDType: return ojson{{"dtype", std::string(DTypeName(a.dtype()))}};
    case Argument::Kind::kDevice: return ojson{{"device", a.text}};
    case Argument::Kind::kLayout: return ojson{{"layout", a.text}};
    case Argument::Kind::kMemoryFormat: return ojson{{"memory_format", a.text}};
    case Argument::Kind::kOp: return ojson{{"op", a.text}};
    case Argument::Kind::kDict: {  // {"dict": [[key, value], ...]}, in order
      ojson items = ojson::array();
      for (const Argument& item : a.list) items.push_back(ArgumentToJson(item));
      return ojson{{"dict", std::move(items)}};
    }
    case Argument::Kind::kComplex:
      return ojson{{"complex", ojson::array({ArgumentToJson(Argument::Double(a.double_value)),
                                            ArgumentToJson(Argument::Double(a.imag_value))})}};
  }
  return nullptr;
}

void WriteValueFacts(JsonStreamWriter& w, const ValueFacts& v) {
  if (v.kind == ValueFacts::Kind::kUnknown) return w.Null();
  w.BeginObject();
  switch (v.kind) {
    case ValueFacts::Kind::kTensor: {
      w.Key("kind"); w.String("tensor");
      w.Key("dtype"); w.String(DTypeName(v.tensor.dtype));
      w.Key("shape");
      w.BeginArray();
      for (const Dim& d : v.tensor.shape) WriteDim(w, d);
      w.EndArray();
      // Unknown strides stay unwritten, as in ValueFactsToJson.
      if (!v.tensor.stride.empty() || v.tensor.shape.empty()) {
        w.Key("stride");
        w.BeginArray();
        for (const Dim& d : v.tensor.stride) WriteDim(w, d);
        w.EndArray();
      }
      w.Key("device"); w.String(v.tensor.device.str());
      w.Key("requires_grad"); w.Bool(v.tensor.requires_grad);
      if (v.tensor.storage >= 0) { w.Key("storage"); w.Int(v.tensor.storage); }
      break;
    }
    case ValueFacts::Kind::kSymInt:
      w.Key("kind"); w.String("symint");
      w.Key("expr"); w.String(v.expr);
      w.Key("hint"); w.Int(v.hint);
      break;
    case ValueFacts::Kind::kSymFloat: w.Key("kind"); w.String("symfloat"); w.Key("expr"); w.String(v.expr); break;
    case ValueFacts::Kind::kSymBool: w.Key("kind"); w.String("symbool"); w.Key("expr"); w.String(v.expr); break;
    case ValueFacts::Kind::kTuple:
      w.Key("kind"); w.String("tuple");
      w.Key("items");
      w.BeginArray();
      for (const ValueFacts& item : v.items) WriteValueFacts(w, item);
      w.EndArray();
      break;
    case ValueFacts::Kind::kNone: w.Key("kind"); w.String("none"); break;
    case ValueFacts::Kind::kConst:
      w.Key("kind"); w.String("const");
      w.Key("value"); w.Raw(ConstValueJson(v.expr));
      break;
    case ValueFacts::Kind::kOpaque:
      w.Key("kind"); w.String("opaque");
      w.Key("type"); w.String(v.expr);
      break;
    case ValueFacts::Kind::kUnknown: break;
  }
  w.EndObject();
}

// Whether a key occurs twice among `kwargs` (then written as an object keeps
// it: once). Pairwise for the few keys a node has; by sorting for many (a
// node of 10^5 kwargs took the pairwise check 38 s).
bool HasDuplicateKey(const Kwargs& kwargs) {
  constexpr size_t kPairwiseUpTo = 16;
  if (kwargs.size() <= kPairwiseUpTo) {
    for (size_t i = 0; i < kwargs.size(); ++i)
      for (size_t k = 0; k < i; ++k)
        if (kwargs[i].first == kwargs[k].first) return true;
    return false;
  }
  std::vector<std::string_view> keys;
  keys.reserve(kwargs.size());
  for (const auto& kv : kwargs) keys.emplace_back(kv.first);
  std::sort(keys.begin(), keys.end());
  return std::adjacent_find(keys.begin(), keys.end()) != keys.end();
}

void WriteArgument(JsonStreamWriter& w, const Argument& a) {
  auto tagged = [&](std::string_view key, std::string_view value) {
    w.BeginObject();
    w.Key(key);
    w.String(value);
    w.EndObject();
  };
  switch (a.kind) {
    case Argument::Kind::kNone: return w.Null();
    case Argument::Kind::kBool: return w.Bool(a.int_value != 0);
    case Argument::Kind::kInt: return w.Int(a.int_value);
    case Argument::Kind::kDouble:
      if (std::isnan(a.double_value)) return tagged("float", "nan");
      if (std::isinf(a.double_value)) return tagged("float", a.double_value > 0 ? "inf" : "-inf");
      return w.Double(a.double_value);
    case Argument::Kind::kString: return w.String(a.text);
    case Argument::Kind::kNode: return tagged("node", a.node->name());
    case Argument::Kind::kList:
      w.BeginArray();
      for (const Argument& item : a.list) WriteArgument(w, item);
      return w.EndArray();
    case Argument::Kind::kDType: return tagged("dtype", DTypeName(a.dtype()));
    case Argument::Kind::kDevice: return tagged("device", a.text);
    case Argument::Kind::kLayout: return tagged("layout", a.text);
    case Argument::Kind::kMemoryFormat: return tagged("memory_format", a.text);
    case Argument::Kind::kOp: return tagged("op", a.text);
    case Argument::Kind::kDict:  // {"dict": [[key, value], ...]}, in order
      w.BeginObject();
      w.Key("dict");
      w.BeginArray();
      for (const Argument& item : a.list) WriteArgument(w, item);
      w.EndArray();
      return w.EndObject();
    case Argument::Kind::kComplex:
      w.BeginObject();
      w.Key("complex");
      w.BeginArray();
      WriteArgument(w, Argument::Double(a.double_value));
      WriteArgument(w, Argument::Double(a.imag_value));
      w.EndArray();
      return w.EndObject();
  }
  w.Null();
}

// Note [Stack-trace table] (format 1.5): a graph's distinct stack traces are
// written once, in the order nodes first use them, under "stack_traces"; a
// node names its trace by meta.stack_trace_index. A transformer's joint graph
// repeats one ~2 KB trace per op per layer: written per node, the traces were
// three quarters of a partition's output. Readers take meta.stack_trace (a
// string) too: files of format <= 1.4, hand-written ones. The index is a key
// of its own so that an older 1.x reader, which ignores unknown keys, still
// reads a 1.5 file (without its traces).
class StackTraceTable {
 public:
  // `brief` (GraphToJsonBrief): nodes written without their meta add no trace.
  explicit StackTraceTable(const Graph& graph, const std::function<bool(const Node&)>* brief = nullptr) {
    for (const auto& up : graph.nodes()) {
      if (brief && (*brief)(*up)) continue;
      const SharedText& t = up->meta().stack_trace;
      if (!t.empty() && index_.emplace(t.str(), static_cast<int64_t>(texts_.size())).second)
        texts_.push_back(&t.str());
    }
  }
  bool empty() const { return texts_.empty(); }
  const std::vector<const std::string*>& texts() const { return texts_; }
  int64_t IndexOf(const SharedText& t) const { return index_.at(t.str()); }

 private:
  std::vector<const std::string*> texts_;
  std::unordered_map<std::string_view, int64_t> index_;
};

// The graph object of GraphToJsonDocument, streamed (Note [Streaming writer]);
// a nested subgraph document (`nested`) has no format and version of its own.
// Returns false when the sink failed.
bool WriteGraphObject(JsonStreamWriter& w, const Graph& graph, bool nested, const std::string& sidecar_name,
                      std::map<std::string, SafetensorsEntry>* sidecar,
                      const std::function<bool(const Node&)>* brief = nullptr) {
  w.BeginObject();
  if (!nested) {
    w.Key("format"); w.String("fxremat.graph");
    w.Key("version");
    w.BeginArray();
    w.Int(kFormatMajorVersion);
    w.Int(kFormatMinorVersion);
    w.EndArray();
  }
  if (!graph.name().empty()) { w.Key("name"); w.String(graph.name()); }
  w.Key("kind"); w.String(GraphKindName(graph.kind()));
  if (graph.returnsList()) { w.Key("returns_list"); w.Bool(true); }
  if (graph.kind() == GraphKind::kJoint) {
    w.Key("joint");
    w.BeginObject();
    w.Key("num_fwd_outputs"); w.Int(graph.joint().num_fwd_outputs);
    if (!graph.joint().output_paths.empty()) {
      w.Key("output_paths");
      w.BeginArray();
      for (const auto& p : graph.joint().output_paths) p ? w.String(*p) : w.Null();
      w.EndArray();
    }
    w.Key("tangent_outputs");
    w.BeginArray();
    for (int64_t t : graph.joint().tangent_outputs) w.Int(t);
    w.EndArray();
    w.EndObject();
  }
  if (!graph.symbols().empty()) {
    w.Key("symbols");
    w.BeginObject();
    for (const auto& [sym, hint] : graph.symbols()) { w.Key(sym); w.Int(hint); }
    w.EndObject();
  }
  w.Key("ops");
  w.BeginObject();
  for (const auto& [target, info] : graph.ops()) {
    w.Key(target);
    w.BeginObject();
    w.Key("schema"); w.String(info.schema_text);
    w.Key("tags"); w.StringArray(info.tags);
    if (!info.packet_tags.empty()) { w.Key("packet_tags"); w.StringArray(info.packet_tags); }
    w.EndObject();
  }
  w.EndObject();
  if (!graph.constants().empty()) {
    w.Key("constants");
    w.BeginObject();
    for (const auto& [target, c] : graph.constants()) {
      w.Key(target);
      w.BeginObject();
      if (c.kind == Constant::Kind::kOpaque) {
        w.Key("opaque"); w.String(c.type_name);
      } else {
        ValueFacts v;
        v.kind = ValueFacts::Kind::kTensor;
        v.tensor = c.facts;
        w.Key("val"); WriteValueFacts(w, v);
        if (!c.hasData()) {
          w.Key("by_reference"); w.Bool(true);
        } else if (sidecar && !sidecar_name.empty() && static_cast<int64_t>(c.data->size()) > kInlineConstantBytes &&
                   !SafetensorsDType(c.facts.dtype).empty()) {  // Note [Dtypes without a safetensors name]
          w.Key("file"); w.String(sidecar_name);
          w.Key("key"); w.String(target);
          // Note [Sidecar checksums]
          w.Key("crc32"); w.Int(static_cast<int64_t>(Crc32(*c.data)));
          std::vector<int64_t> shape;
          for (const Dim& d : c.facts.shape) shape.push_back(d.hint);
          (*sidecar)[target] = SafetensorsEntry{std::string(SafetensorsDType(c.facts.dtype)), shape, *c.data};
        } else {
          w.Key("data"); w.String(Base64Encode(*c.data));
        }
      }
      w.EndObject();
    }
    w.EndObject();
  }
  if (!graph.subgraphs().empty()) {
    w.Key("subgraphs");
    w.BeginObject();
    // A subgraph's constants stay inline: its names are its own and could
    // collide with the enclosing graph's in one sidecar file.
    for (const auto& [target, sub] : graph.subgraphs()) {
      w.Key(target);
      if (!WriteGraphObject(w, *sub, /*nested=*/true, "", nullptr)) return false;
    }
    w.EndObject();
  }
  const StackTraceTable traces(graph, brief);
  if (!traces.empty()) {
    w.Key("stack_traces");
    w.BeginArray();
    for (const std::string* t : traces.texts()) w.String(*t);
    w.EndArray();
  }
  w.Key("nodes");
  w.BeginArray();
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    w.BeginObject();
    w.Key("name"); w.String(n.name());
    w.Key("op"); w.String(OpKindName(n.op()));
    w.Key("target"); w.String(n.target());
    if (brief && (*brief)(n)) {  // GraphToJsonBrief: the node's name, op, target and decision only
      if (n.meta().recompute != Decision::kNone) {
        w.Key("meta");
        w.BeginObject();
        w.Key("recompute"); w.String(DecisionName(n.meta().recompute));
        w.EndObject();
      }
      w.EndObject();
      continue;
    }
    if (n.isPlaceholder()) {
      w.Key("role"); w.String(PlaceholderRoleName(n.role()));
      if (!n.path().empty()) { w.Key("path"); w.String(n.path()); }
    }
    if (!n.args().empty()) {
      w.Key("args");
      w.BeginArray();
      for (const Argument& a : n.args()) WriteArgument(w, a);
      w.EndArray();
    }
    if (!n.kwargs().empty()) {
      w.Key("kwargs");
      const bool duplicate = HasDuplicateKey(n.kwargs());
      if (duplicate) {  // an object keeps a key once: as GraphToJsonDocument does it
        ojson kwargs = ojson::object();
        for (const auto& [k, v] : n.kwargs()) kwargs[k] = ArgumentToJson(v);
        w.Raw(kwargs);
      } else {
        w.BeginObject();
        for (const auto& [k, v] : n.kwargs()) { w.Key(k); WriteArgument(w, v); }
        w.EndObject();
      }
    }
    const NodeMeta& m = n.meta();
    const bool has_val = n.val().kind != ValueFacts::Kind::kUnknown;
    if (has_val || m.recompute != Decision::kNone || m.rare().ac_graph_id || m.partitioner_tag != PartitionerTag::kNone || !m.stack_trace.empty() ||
        m.rare().value_range || !m.names.empty() || m.offload_requested || m.mutated || m.no_vc_check ||
        m.has_backward_hook || m.rare().written_back_from || m.rare().memory_budget || m.rare().region_memory_budget) {
      w.Key("meta");
      w.BeginObject();
      if (has_val) { w.Key("val"); WriteValueFacts(w, n.val()); }
      if (m.recompute != Decision::kNone) { w.Key("recompute"); w.String(DecisionName(m.recompute)); }
      if (m.rare().ac_graph_id) { w.Key("ac_graph_id"); w.Int(*m.rare().ac_graph_id); }
      if (m.partitioner_tag != PartitionerTag::kNone) {
        w.Key("partitioner_tag"); w.String(PartitionerTagName(m.partitioner_tag));
      }
      if (!m.stack_trace.empty()) { w.Key("stack_trace_index"); w.Int(traces.IndexOf(m.stack_trace)); }
      if (m.rare().value_range) {
        w.Key("value_range");
        w.BeginArray();
        w.Int(m.rare().value_range->first);
        w.Int(m.rare().value_range->second);
        w.EndArray();
      }
      if (!m.names.empty()) { w.Key("names"); w.StringArray(m.names); }
      if (m.offload_requested) { w.Key("offload_requested"); w.Bool(true); }
      if (m.mutated) { w.Key("mutated"); w.Bool(true); }
      if (m.no_vc_check) { w.Key("saved_tensor_with_no_vc_check"); w.Bool(true); }
      if (m.has_backward_hook) { w.Key("has_backward_hook"); w.Bool(true); }
      if (m.rare().written_back_from) { w.Key("written_back_from"); w.Int(*m.rare().written_back_from); }
      if (m.rare().memory_budget) { w.Key("memory_budget"); w.Double(*m.rare().memory_budget); }
      if (m.rare().region_memory_budget) { w.Key("region_memory_budget"); w.Double(*m.rare().region_memory_budget); }
      w.EndObject();
    }
    w.EndObject();
    if (!w.Flush(/*all=*/false)) return false;
  }
  w.EndArray();
  w.EndObject();
  return true;
}

// The document of GraphToJsonDocument, streamed. Returns false when the sink failed.
bool WriteGraphJson(JsonStreamWriter& w, const Graph& graph, const std::string& sidecar_name,
                    std::map<std::string, SafetensorsEntry>* sidecar) {
  if (!WriteGraphObject(w, graph, /*nested=*/false, sidecar_name, sidecar)) return false;
  w.AppendText("\n");
  return w.Flush(/*all=*/true);
}

// The pre-issue-11 reader and writer (nlohmann's DOM), kept for the Python
// binding's documents; FXREMAT_JSON_IO=nlohmann makes the file and text entry
// points use them too, only so that bench/io_bench.py measures old against new
// in one build.
bool UseNlohmannIo() {
  static const bool use = [] {
    const char* v = std::getenv("FXREMAT_JSON_IO");
    return v != nullptr && std::string_view(v) == "nlohmann";
  }();
  return use;
}

bool IsGzipPath(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

// gzip level of written .gz files. docs/benchmarks_io.md measured levels 1, 6
// and 9 on a 47 MB graph: level 1 compresses at ~260 MB/s to 1/17 of the
// JSON, 6 at ~100 MB/s to 1/28, 9 (the level before) at ~30 MB/s to 1/36.
// Only level 1 keeps a .gz write at the speed of the writer itself.
constexpr int kGzipLevel = 1;

// The one way a file is written (WriteFileAtomically, WriteGraphFile): what
// `produce` hands its sink goes into a temporary file beside `path`
// (gzip-compressed for a .gz path); `before_rename` (the graph writer's
// sidecar) runs once that file is complete; then it is renamed into place. On
// any failure the temporary file is removed and `path` is left as it was.
using FileSink = std::function<bool(std::string_view)>;
Status WriteThroughTemporary(const std::string& path, const std::function<bool(const FileSink&)>& produce,
                             const std::function<Status()>& before_rename = nullptr) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  bool ok = true;
  if (IsGzipPath(path)) {
    gzFile f = gzopen(tmp.c_str(), fmt::format("wb{}", kGzipLevel).c_str());
    ok = f != nullptr;
    if (ok) {
      gzbuffer(f, 1 << 18);
      ok = produce([&](std::string_view text) {
        return text.empty() || gzwrite(f, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size());
      });
      ok = (gzclose(f) == Z_OK) && ok;
    }
  } else {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    ok = f != nullptr;
    if (ok) {
      ok = produce([&](std::string_view text) { return std::fwrite(text.data(), 1, text.size(), f) == text.size(); });
      ok = (std::fclose(f) == 0) && ok;
    }
  }
  std::error_code ec;
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    return Status::BadInput("cannot write file", path);
  }
  if (before_rename) {
    if (Status s = before_rename(); !s.ok()) {
      std::filesystem::remove(tmp, ec);
      return s;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return Status::BadInput("cannot write file", path);
  }
  return Status::Ok();
}

}  // namespace

Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text) { return GraphFromJson(text, ""); }

Status CheckJsonDepth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  int64_t line = 1, column = 0;
  for (char c : text) {
    ++column;
    if (c == '\n') { ++line; column = 0; }
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth)
        return Status::BadInput(fmt::format("{} nests deeper than {} levels at line {}, column {}", what,
                                            kMaxJsonDepth, line, column));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

namespace {

// The pre-issue-11 path: depth check, nlohmann's parser, the reader over its DOM.
// Every document simdjson refuses comes here, so that its message is the one
// nlohmann gives (line and column) or the depth check's.
// nlohmann's DOM builder, noting the first integer literal too large for
// 64 bits, which nlohmann reads as a double (simdjson refuses it, and the read
// falls back here): a graph has no such integer, and Python's reader refuses
// it ("outside int64"), so this reader does too rather than read a float.
class SaxNotingBigIntegers : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<json>;
  using Base::Base;
  bool number_float(json::number_float_t value, const json::string_t& literal) {
    if (!big_integer && literal.find_first_of(".eE") == json::string_t::npos) big_integer = literal;
    return Base::number_float(value, literal);
  }
  std::optional<std::string> big_integer;
};

// "line L, column C" of the first occurrence of `token` in `text`, or "".
std::string LineAndColumnOf(std::string_view text, std::string_view token) {
  const size_t at = token.empty() ? std::string_view::npos : text.find(token);
  if (at == std::string_view::npos) return {};
  const size_t line = static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n')) + 1;
  const size_t line_start = text.rfind('\n', at);
  return fmt::format("line {}, column {}", line, at - (line_start == std::string_view::npos ? 0 : line_start + 1) + 1);
}

Expected<std::unique_ptr<Graph>> ReadWithNlohmann(std::string_view text, const std::string& sidecar_dir) {
  FXREMAT_RETURN_IF_ERROR(CheckJsonDepth(text, "the JSON document"));
  json doc;
  try {
    SaxNotingBigIntegers sax(doc);
    json::sax_parse(text.begin(), text.end(), &sax);
    if (sax.big_integer)
      return Status::BadInput(fmt::format("the integer {} is outside int64", *sax.big_integer),
                              LineAndColumnOf(text, *sax.big_integer));
  } catch (const json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 3, column 5: ..."
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    return Status::BadInput(fmt::format("malformed JSON: {}", what));
  } catch (const json::exception& e) {
    // "[json.exception.out_of_range.406] number overflow parsing '-1e999'": no
    // position from the library; find the token to name its line and column.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    std::string where;
    if (auto q = what.find('\''); q != std::string::npos)
      where = LineAndColumnOf(text, what.substr(q + 1, what.rfind('\'') - q - 1));
    return Status::BadInput(fmt::format("malformed JSON: {}", what), where);
  }
  return GraphFromJsonDocument(doc, sidecar_dir);
}

// Note [Populated tape]
// simdjson's DOM writes a tape (8 bytes a value) and a string buffer (every
// key and string unescaped, after a 4-byte length, before a NUL) that together
// outweigh the text (synth_1m: 291 MB of JSON, 425 MB of tape and about 300 MB
// of strings). It is all fresh memory, and its first touches were most of
// parse-json: the same parse into reused buffers takes a quarter of the time.
// Stage 1 (the structural index) tells how many values and strings the
// document holds, so for a large document a second thread walks the index
// ahead of stage 2, adds up the tape words and string bytes each stretch of it
// will take, and maps those pages (Note [Populated pages]) while stage 2 fills
// the ones before. It maps only what stage 2 will write -- the tape exactly, a
// string by its raw length, which only escapes and spaces before the next
// structural make longer. Before that, while stage 1 runs, the same thread
// maps as many bytes as the text has of stage 1's structural index (4 bytes a
// structural; synth_1m's index is 288 MB for 291 MB of text) and of the tape:
// stage 1 went from 156 to 105 ms and stage 2 from 265 to 220 ms on
// synth_1m. What a text with fewer structurals leaves unused of that tape is
// given back after stage 2, and the index goes with the parser, so the peak
// grows by at most twice the text's length, and only while the text is
// parsed (a text of long strings, such as inline constants). The
// result and every error are parse_into_document's: the same two stages,
// called one at a time (test: serialize_test's "Note [Populated tape]").
// FXREMAT_MAP_TAPE_FROM=N: documents of N bytes or more (tests use 1).
inline size_t MapTapeFrom() { return SizeFromEnv("FXREMAT_MAP_TAPE_FROM", kMapOnAnotherThreadFrom); }

// The root's two tape words, before and after the document's values.
constexpr size_t kRootTapeBytes = 2 * sizeof(uint64_t);

// The tape and string bytes stage 2 writes for the structurals
// index[begin, end) of `text`: one tape word per brace, bracket, string, true,
// false and null, two per number, none per colon and comma; a string takes
// its 4-byte length, its characters (at most the raw ones: what lies between
// its quote and the next structural, less the two quotes) and a NUL.
TapeSizes CountTape(const uint8_t* text, size_t length, const uint32_t* index, size_t begin, size_t end,
                    size_t count) {
  TapeSizes sizes;
  for (size_t i = begin; i < end; ++i) {
    switch (text[index[i]]) {
      case ':': case ',': break;
      case '"': {
        const size_t next = i + 1 < count ? index[i + 1] : length;
        sizes.tape_bytes += sizeof(uint64_t);
        sizes.string_bytes += next - index[i] - 2 + sizeof(uint32_t) + 1;
        break;
      }
      case '{': case '}': case '[': case ']': case 't': case 'f': case 'n': sizes.tape_bytes += sizeof(uint64_t); break;
      default: sizes.tape_bytes += 2 * sizeof(uint64_t);  // a number: its kind, then its value
    }
  }
  return sizes;
}

// Maps, a stretch of structurals at a time, the pages stage 2 will write.
void MapTapeAhead(const uint8_t* text, size_t length, const uint32_t* index, size_t count,
                  simdjson::dom::document& document, size_t tape_mapped_already) {
  std::byte* const tape = reinterpret_cast<std::byte*>(document.tape.get());
  std::byte* const strings = reinterpret_cast<std::byte*>(document.string_buf.get());
  constexpr size_t kStretch = size_t{1} << 16;
  constexpr size_t kMinMap = size_t{1} << 20;
  // Never past the buffers simdjson allocated for `length` bytes (at least
  // length + 3 tape words, 5/3 of length string bytes): a text stage 1 takes
  // and stage 2 refuses (two strings with nothing between) can count more.
  const TapeSizes capacity{(length + 3) * sizeof(uint64_t), 5 * length / 3};
  TapeSizes needed{kRootTapeBytes, 0}, mapped{tape_mapped_already, 0};
  // Maps [mapped, needed) of a buffer once it is a megabyte, or at the end.
  auto map_up_to = [](std::byte* buffer, size_t needed_bytes, size_t& mapped_bytes, bool last) {
    if (needed_bytes < mapped_bytes + kMinMap && !(last && needed_bytes > mapped_bytes)) return;
    PopulatePages(buffer + mapped_bytes, needed_bytes - mapped_bytes);
    mapped_bytes = needed_bytes;
  };
  for (size_t begin = 0; begin < count; begin += kStretch) {
    const size_t end = std::min(count, begin + kStretch);
    const TapeSizes stretch = CountTape(text, length, index, begin, end, count);
    needed.tape_bytes = std::min(capacity.tape_bytes, needed.tape_bytes + stretch.tape_bytes);
    needed.string_bytes = std::min(capacity.string_bytes, needed.string_bytes + stretch.string_bytes);
    map_up_to(tape, needed.tape_bytes, mapped.tape_bytes, end == count);
    map_up_to(strings, needed.string_bytes, mapped.string_bytes, end == count);
  }
}

// `parser` has the capacity for `length` bytes; `text` is followed by
// SIMDJSON_PADDING readable bytes when `padded` (and is copied otherwise).
simdjson::error_code ParseIntoDocument(simdjson::dom::parser& parser, simdjson::dom::document& document,
                                       const uint8_t* text, size_t length, bool padded) {
  if (length < MapTapeFrom()) return parser.parse_into_document(document, text, length, !padded).error();
  simdjson::padded_string copy;
  if (!padded) {
    copy = simdjson::padded_string(reinterpret_cast<const char*>(text), length);
    text = reinterpret_cast<const uint8_t*>(copy.data());
  }
  if (simdjson::error_code error = document.allocate(length)) return error;
  simdjson::internal::dom_parser_implementation& stages = *parser.implementation;
  // The first `length` bytes of the structural index and of the tape, mapped
  // while stage 1 runs (the buffers hold 4 and 8 bytes a text byte).
  const size_t early_bytes = length;
  enum : int { kStage1Running, kStage1Done, kStage1Failed };
  std::atomic<int> stage1{kStage1Running};
  std::thread mapper;
  try {
    mapper = std::thread([&] {
      PopulatePages(stages.structural_indexes.get(), early_bytes);
      PopulatePages(document.tape.get(), early_bytes);
      stage1.wait(kStage1Running, std::memory_order_acquire);
      if (stage1.load(std::memory_order_acquire) != kStage1Done) return;
      MapTapeAhead(text, length, stages.structural_indexes.get(), stages.n_structural_indexes, document, early_bytes);
    });
  } catch (const std::system_error&) {
    // No second thread: the stages touch their pages themselves, as parse_into_document does.
  }
  simdjson::error_code error = stages.stage1(text, length, simdjson::stage1_mode::regular);
  stage1.store(error ? kStage1Failed : kStage1Done, std::memory_order_release);
  stage1.notify_all();
  if (!error) error = stages.stage2(document);
  if (mapper.joinable()) {
    mapper.join();
    // The tape stage 2 did not fill (all of it after an error) goes back: its
    // root word holds the index past its last word.
    constexpr uint64_t kTapeValueMask = 0x00FFFFFFFFFFFFFFull;
    const size_t used = error ? 0 : static_cast<size_t>(document.tape[0] & kTapeValueMask) * sizeof(uint64_t);
    if (used < early_bytes) ReleasePages(reinterpret_cast<std::byte*>(document.tape.get()) + used, early_bytes - used);
  }
  return error;
}

// A parser and a document allocated for a text of `capacity` bytes before
// the text is read, and a warmer mapping their buffers meanwhile (Note
// [Warming pages ahead]), for texts of WarmPagesFrom() bytes up to
// kMapOnAnotherThreadFrom (larger ones map their own, Note [Populated tape]).
// The warmer then maps the node arena while the graph is built.
// FXREMAT_WARM_PAGES_FROM=N: from N bytes (benchmarks compare with it off,
// tests turn it on for small documents); 1 MB by default (Note [Warming pages
// ahead]).
inline size_t WarmPagesFrom() { return SizeFromEnv("FXREMAT_WARM_PAGES_FROM", size_t{1} << 20); }
struct PreparedParse {
  simdjson::dom::parser parser;
  simdjson::dom::document document;
  size_t capacity = 0;  // 0: nothing allocated
  PageWarmer warmer;

  // What stage 1 and 2 write for a text of `length` bytes, estimated from the
  // graphs we read: 4 bytes an index entry, 8 a tape word, the strings'
  // characters; synth_10k has 1.10, 1.49 and 1.01 times its length of each,
  // the transformers graphs 0.4-0.6, 0.6-0.8 and 0.65-0.76. Estimates err
  // high: a page mapped but not written costs the warmer, not the reader.
  static constexpr size_t Estimate(size_t length, size_t tenths) { return length / 10 * tenths; }

  void Prepare(size_t length) {
    if (length < WarmPagesFrom() || length >= kMapOnAnotherThreadFrom) return;
    if (parser.allocate(length, kMaxJsonDepth) != simdjson::SUCCESS || document.allocate(length) != simdjson::SUCCESS)
      return;
    capacity = length;
    simdjson::internal::dom_parser_implementation& stages = *parser.implementation;
    // In the order stage 1 and 2 write them: the index, then the tape and the
    // strings side by side, a stretch of each at a time. Never past what
    // simdjson allocated (at least 4 and 8 bytes a text byte of index and tape,
    // 5/3 of one of strings).
    std::byte* const index = reinterpret_cast<std::byte*>(stages.structural_indexes.get());
    std::byte* const tape = reinterpret_cast<std::byte*>(document.tape.get());
    std::byte* const strings = reinterpret_cast<std::byte*>(document.string_buf.get());
    warmer.Queue(index, std::min(Estimate(length, 12), 4 * length));
    const size_t tape_bytes = std::min(Estimate(length, 16), 8 * length);
    const size_t string_bytes = std::min(Estimate(length, 11), 5 * length / 3);
    constexpr size_t kStretches = 8;
    for (size_t i = 0; i < kStretches; ++i) {
      const size_t t0 = tape_bytes * i / kStretches, t1 = tape_bytes * (i + 1) / kStretches;
      const size_t s0 = string_bytes * i / kStretches, s1 = string_bytes * (i + 1) / kStretches;
      warmer.Queue(tape + t0, t1 - t0);
      warmer.Queue(strings + s0, s1 - s0);
    }
  }
};

// `owned`: null, or the string `text` views, with SIMDJSON_PADDING bytes of
// spare capacity (simdjson then reads it in place). Once parsed, the tape
// holds every value, and the string's buffer becomes the graph's node arena
// (Note [Recycled text pages]): the text and the IR are never both held.
//
// Note [Recycled text pages]
// At a million nodes the text is 291 MB of pages mapped while it was read,
// and the node arena 568 MB of fresh pages, each a page fault (or a share of
// a MADV_POPULATE_WRITE) to map, after the text's were unmapped. The reader
// now hands the text's buffer to Graph::adoptNodeMemory before it reserves
// the arena: the first nodes go where the text was, on pages mapped already,
// and the text is never unmapped while the graph lives (what the nodes do not
// need of it is given back with MADV_DONTNEED).
//
// `prepared`: null, or buffers LoadGraphFile allocated (and queued to be
// mapped) before it read the text (Note [Warming pages ahead]); used when
// they were allocated for the text's length or more.
Expected<std::unique_ptr<Graph>> ReadJson(std::string_view text, std::string* owned, const std::string& sidecar_dir,
                                          PreparedParse* prepared = nullptr) {
  // simdjson skips a byte-order mark, nlohmann and Python's json refuse it:
  // the readers agree on refusing it.
  if (text.starts_with("\xEF\xBB\xBF"))
    return Status::BadInput("malformed JSON: a UTF-8 byte-order mark opens the file (JSON text has none; "
                            "write it without one)",
                            "line 1, column 1");
  if (UseNlohmannIo()) return ReadWithNlohmann(text, sidecar_dir);
  const bool use_prepared = prepared && prepared->capacity >= text.size();
  simdjson::dom::document own_document;
  simdjson::dom::document& document = use_prepared ? prepared->document : own_document;
  bool parsed = false;
  std::shared_ptr<uint32_t[]> index;  // the parser's structural index, once parsed
  size_t index_bytes = 0, index_written = 0;
  {
    ScopedPhase phase("parse-json");
    // The parser's depth limit is kMaxJsonDepth: whatever it accepts, CheckJsonDepth does.
    // Its buffers go at the end of this block, but for the index the graph takes (below);
    // the document keeps the tape and strings.
    simdjson::dom::parser parser = use_prepared ? std::move(prepared->parser) : simdjson::dom::parser();
    parsed = (use_prepared || parser.allocate(text.size(), kMaxJsonDepth) == simdjson::SUCCESS) &&
             ParseIntoDocument(parser, document, reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                               /*padded=*/owned != nullptr) == simdjson::SUCCESS;
    // The warmer may still be mapping the parser's index or the tape: it stops
    // before the index is freed.
    if (prepared) prepared->warmer.Drain();
    // Note [Recycled index pages]
    // Stage 1's structural index (4 bytes a structural: 1.1 times the text's
    // length on synth graphs, 0.4-0.6 on transformers graphs) is read by
    // stage 2 and then freed, while the node arena maps as much fresh memory
    // again. Its pages are mapped already: the graph takes the buffer as arena
    // chunks after the text's (Note [Recycled text pages]). simdjson sizes it
    // for the parser's capacity, at least 4 bytes a byte of it.
    simdjson::internal::dom_parser_implementation& stages = *parser.implementation;
    if (parsed && stages.structural_indexes) {
      index_bytes = 4 * parser.capacity();
      index_written = std::min(index_bytes, sizeof(uint32_t) * size_t{stages.n_structural_indexes});
      index = std::shared_ptr<uint32_t[]>(stages.structural_indexes.release());
    }
  }
  if (!parsed) return ReadWithNlohmann(text, sidecar_dir);
  ScopedPhase phase("build-graph");
  GraphReader<SimdValue> reader(sidecar_dir);
  if (owned) reader.RecycleText(std::move(*owned));
  if (index) reader.RecycleIndex(std::move(index), index_bytes, index_written);
  // Only a warmer that had buffers to map (a text of WarmPagesFrom() bytes or
  // more) maps the arena: for a smaller one, starting its thread now costs
  // more than the arena's few pages (synth_1k: see the commit).
  if (use_prepared) reader.WarmNodeMemoryWith(&prepared->warmer);
  return reader.Read(SimdValue(document.root()));
}

}  // namespace

Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text, const std::string& sidecar_dir) {
  return ReadJson(text, /*owned=*/nullptr, sidecar_dir);
}

std::vector<std::string_view> KnownFieldKeysForTesting() { return {std::begin(kFieldKeys), std::end(kFieldKeys)}; }
int KnownFieldSlotForTesting(std::string_view key) { return KnownFieldSlot(key); }

std::optional<std::pair<TapeSizes, TapeSizes>> MeasureTapeForTesting(std::string_view json) {
  const simdjson::padded_string text(json);
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(text.data());
  simdjson::dom::parser parser;
  simdjson::dom::document document;
  if (parser.allocate(json.size(), kMaxJsonDepth) || document.allocate(json.size())) return std::nullopt;
  simdjson::internal::dom_parser_implementation& stages = *parser.implementation;
  if (stages.stage1(bytes, json.size(), simdjson::stage1_mode::regular)) return std::nullopt;
  TapeSizes counted =
      CountTape(bytes, json.size(), stages.structural_indexes.get(), 0, stages.n_structural_indexes,
                stages.n_structural_indexes);
  counted.tape_bytes += kRootTapeBytes;
  if (stages.stage2(document)) return std::nullopt;
  // The tape's first word (the root) holds the tape's length; a string's
  // word holds its offset in the string buffer, where its length comes first;
  // a number is its kind's word and then its value's.
  const uint64_t* tape = document.tape.get();
  const size_t words = static_cast<size_t>(tape[0] & simdjson::internal::JSON_VALUE_MASK);
  TapeSizes written{words * sizeof(uint64_t), 0};
  for (size_t i = 0; i < words; ++i) {
    const char type = static_cast<char>(tape[i] >> 56);
    if (type == 'l' || type == 'u' || type == 'd') ++i;  // a number's value: the next word, any bits
    if (type != '"') continue;
    const size_t offset = static_cast<size_t>(tape[i] & simdjson::internal::JSON_VALUE_MASK);
    uint32_t string_length;
    std::memcpy(&string_length, document.string_buf.get() + offset, sizeof(string_length));
    written.string_bytes = std::max(written.string_bytes, offset + sizeof(uint32_t) + string_length + 1);
  }
  return std::make_pair(counted, written);
}

Expected<std::unique_ptr<Graph>> GraphFromJsonDocument(const nlohmann::json& doc, const std::string& sidecar_dir) {
  try {
    GraphReader<NlohmannValue> reader(sidecar_dir);
    return reader.Read(NlohmannValue(doc));
  } catch (const json::exception& e) {
    return Status::BadInput(fmt::format("malformed graph document: {}", e.what()));
  }
}

std::string GraphToJson(const Graph& graph, int indent) {
  if (UseNlohmannIo()) return GraphToJsonDocument(graph).dump(indent) + "\n";
  JsonStreamWriter writer(nullptr, indent);
  WriteGraphJson(writer, graph, "", nullptr);
  return writer.Take();
}

std::string SidecarNameFor(const std::string& graph_path) {
  std::string name = std::filesystem::path(graph_path).filename().string();
  for (std::string_view ext : {".gz", ".json", ".fxir"})
    if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
      name.resize(name.size() - ext.size());
  return name + ".constants.safetensors";
}

// Note [Compact large graphs]
// A graph file is written as nlohmann's dump(1) prints it, one value a line,
// so that it reads and diffs well -- up to kCompactGraphNodes nodes. A larger
// one (a million-node graph's backward: 409 MB, 38% of it indentation) is
// written compact, as dump() prints it: nobody reads it by eye, and the
// indentation was a third of its writing, in the writer and in the kernel's
// copy into the page cache. Any JSON reader reads both; the choice depends on
// the graph alone, so the same graph still gives the same bytes.
constexpr size_t kCompactGraphNodes = 50'000;

Status WriteGraphFile(const std::string& path, const Graph& graph) {
  const std::string sidecar_name = SidecarNameFor(path);
  const int indent = graph.size() > kCompactGraphNodes ? -1 : 1;
  if (UseNlohmannIo()) {  // the document built first, then written (bench/io_bench.py's "old")
    std::map<std::string, SafetensorsEntry> sidecar;
    const std::string json = GraphToJsonDocument(graph, sidecar_name, &sidecar).dump(indent) + "\n";
    if (!sidecar.empty()) {
      const std::string sidecar_path = (std::filesystem::path(path).parent_path() / sidecar_name).string();
      FXREMAT_RETURN_IF_ERROR(WriteFileAtomically(sidecar_path, WriteSafetensors(sidecar)));
    }
    return WriteFileAtomically(path, json);
  }
  // The document streams into a temporary file (Note [Streaming writer]); the
  // sidecar is written, then the document renamed into place: a reader never
  // sees a document whose sidecar is missing.
  std::map<std::string, SafetensorsEntry> sidecar;
  return WriteThroughTemporary(
      path,
      [&](const FileSink& sink) {
        ScopedPhase phase("write-graph");
        JsonStreamWriter writer(sink, indent);
        return WriteGraphJson(writer, graph, sidecar_name, &sidecar);
      },
      [&]() -> Status {
        if (sidecar.empty()) return Status::Ok();
        const std::string sidecar_path = (std::filesystem::path(path).parent_path() / sidecar_name).string();
        return WriteFileAtomically(sidecar_path, WriteSafetensors(sidecar));
      });
}

nlohmann::ordered_json GraphToJsonDocument(const Graph& graph) { return GraphToJsonDocument(graph, "", nullptr); }

std::string GraphToJsonBrief(const Graph& graph, const std::function<bool(const Node&)>& brief) {
  JsonStreamWriter writer;
  WriteGraphObject(writer, graph, /*nested=*/false, "", nullptr, &brief);
  writer.AppendText("\n");
  writer.Flush(/*all=*/true);
  return writer.Take();
}

namespace {

ojson GraphObjectToJson(const Graph& graph, bool nested, const std::string& sidecar_name,
                        std::map<std::string, SafetensorsEntry>* sidecar) {
  ojson doc;
  if (!nested) {
    doc["format"] = "fxremat.graph";
    doc["version"] = {kFormatMajorVersion, kFormatMinorVersion};
  }
  if (!graph.name().empty()) doc["name"] = graph.name();
  doc["kind"] = std::string(GraphKindName(graph.kind()));
  if (graph.returnsList()) doc["returns_list"] = true;
  if (graph.kind() == GraphKind::kJoint) {
    ojson joint;
    joint["num_fwd_outputs"] = graph.joint().num_fwd_outputs;
    if (!graph.joint().output_paths.empty()) {
      ojson paths = ojson::array();
      for (const auto& p : graph.joint().output_paths) paths.push_back(p ? ojson(*p) : ojson(nullptr));
      joint["output_paths"] = paths;
    }
    joint["tangent_outputs"] = graph.joint().tangent_outputs;
    doc["joint"] = joint;
  }
  if (!graph.symbols().empty()) {
    ojson symbols = ojson::object();
    for (const auto& [sym, hint] : graph.symbols()) symbols[sym] = hint;
    doc["symbols"] = symbols;
  }
  ojson ops = ojson::object();
  for (const auto& [target, info] : graph.ops()) {
    ojson facts;
    facts["schema"] = info.schema_text;
    facts["tags"] = info.tags;
    if (!info.packet_tags.empty()) facts["packet_tags"] = info.packet_tags;
    ops[target] = facts;
  }
  doc["ops"] = ops;
  if (!graph.constants().empty()) {
    ojson constants = ojson::object();
    for (const auto& [target, c] : graph.constants()) {
      ojson j;
      if (c.kind == Constant::Kind::kOpaque) {
        j["opaque"] = c.type_name;
      } else {
        ValueFacts v;
        v.kind = ValueFacts::Kind::kTensor;
        v.tensor = c.facts;
        j["val"] = ValueFactsToJson(v);
        if (!c.hasData()) {
          j["by_reference"] = true;
        } else if (sidecar && !sidecar_name.empty() && static_cast<int64_t>(c.data->size()) > kInlineConstantBytes &&
                   !SafetensorsDType(c.facts.dtype).empty()) {  // Note [Dtypes without a safetensors name]
          j["file"] = sidecar_name;
          j["key"] = target;
          j["crc32"] = Crc32(*c.data);  // Note [Sidecar checksums]
          std::vector<int64_t> shape;
          for (const Dim& d : c.facts.shape) shape.push_back(d.hint);
          (*sidecar)[target] = SafetensorsEntry{std::string(SafetensorsDType(c.facts.dtype)), shape, *c.data};
        } else {
          j["data"] = Base64Encode(*c.data);
        }
      }
      constants[target] = std::move(j);
    }
    doc["constants"] = std::move(constants);
  }
  if (!graph.subgraphs().empty()) {
    ojson subgraphs = ojson::object();
    for (const auto& [target, sub] : graph.subgraphs())
      subgraphs[target] = GraphObjectToJson(*sub, /*nested=*/true, "", nullptr);
    doc["subgraphs"] = std::move(subgraphs);
  }
  const StackTraceTable traces(graph);  // Note [Stack-trace table]
  if (!traces.empty()) {
    ojson table = ojson::array();
    for (const std::string* t : traces.texts()) table.push_back(*t);
    doc["stack_traces"] = std::move(table);
  }
  ojson nodes = ojson::array();
  for (const auto& up : graph.nodes()) {
    const Node& n = *up;
    ojson j;
    j["name"] = n.name();
    j["op"] = std::string(OpKindName(n.op()));
    j["target"] = n.target();
    if (n.isPlaceholder()) {
      j["role"] = std::string(PlaceholderRoleName(n.role()));
      if (!n.path().empty()) j["path"] = n.path();
    }
    if (!n.args().empty()) {
      ojson args = ojson::array();
      for (const Argument& a : n.args()) args.push_back(ArgumentToJson(a));
      j["args"] = args;
    }
    if (!n.kwargs().empty()) {
      ojson kwargs = ojson::object();
      for (const auto& [k, v] : n.kwargs()) kwargs[k] = ArgumentToJson(v);
      j["kwargs"] = kwargs;
    }
    ojson meta = ojson::object();
    if (n.val().kind != ValueFacts::Kind::kUnknown) meta["val"] = ValueFactsToJson(n.val());
    const NodeMeta& m = n.meta();
    if (m.recompute != Decision::kNone) meta["recompute"] = std::string(DecisionName(m.recompute));
    if (m.rare().ac_graph_id) meta["ac_graph_id"] = *m.rare().ac_graph_id;
    if (m.partitioner_tag != PartitionerTag::kNone) meta["partitioner_tag"] = std::string(PartitionerTagName(m.partitioner_tag));
    if (!m.stack_trace.empty()) meta["stack_trace_index"] = traces.IndexOf(m.stack_trace);
    if (m.rare().value_range) meta["value_range"] = {m.rare().value_range->first, m.rare().value_range->second};
    if (!m.names.empty()) meta["names"] = m.names;
    if (m.offload_requested) meta["offload_requested"] = true;
    if (m.mutated) meta["mutated"] = true;
    if (m.no_vc_check) meta["saved_tensor_with_no_vc_check"] = true;
    if (m.has_backward_hook) meta["has_backward_hook"] = true;
    if (m.rare().written_back_from) meta["written_back_from"] = *m.rare().written_back_from;
    if (m.rare().memory_budget) meta["memory_budget"] = *m.rare().memory_budget;
    if (m.rare().region_memory_budget) meta["region_memory_budget"] = *m.rare().region_memory_budget;
    if (!meta.empty()) j["meta"] = meta;
    nodes.push_back(std::move(j));
  }
  doc["nodes"] = std::move(nodes);
  return doc;
}

}  // namespace

nlohmann::ordered_json GraphToJsonDocument(const Graph& graph, const std::string& sidecar_name,
                                           std::map<std::string, SafetensorsEntry>* sidecar) {
  return GraphObjectToJson(graph, /*nested=*/false, sidecar_name, sidecar);
}

// ---------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------

// The capacity a file's text is read into: its length, simdjson's padding
// and a NUL; from half an arena chunk on, rounded up to whole chunks. The
// graph takes the text's buffer as node arena in whole chunks (Note [Recycled
// text pages]); without the rounding the text's last, partly filled chunk was
// left out (all of synth_1k's 288 KB, a few KB short of a chunk) and the nodes
// went to fresh pages instead. Address space only: the pages past the text
// are mapped when nodes reach them.
size_t TextCapacity(size_t length) {
  const size_t needed = length + simdjson::SIMDJSON_PADDING + 1;
  constexpr size_t kChunkBytes = Graph::NodeChunkBytes();
  if (2 * length < kChunkBytes) return needed;
  return (needed + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
}

#ifdef FXREMAT_HAVE_LIBDEFLATE
// A whole gzip file (one or more members) decompressed by libdeflate into a
// string of `isize` bytes (the last member's trailer) plus simdjson's padding;
// nullopt when the file cannot be read, is corrupt or truncated, or inflates to
// another length (members before the last, or 4 GiB and more: ISIZE is the
// length mod 2^32), so that the caller's zlib loop reads it and reports why.
// One call over the whole buffer is ~4x zlib's streaming inflate and CRC.
std::optional<std::string> InflateWhole(const std::string& path, size_t file_size, size_t isize) {
  std::string compressed(file_size, '\0');
  std::FILE* raw = std::fopen(path.c_str(), "rb");
  if (!raw) return std::nullopt;
  const size_t got = std::fread(compressed.data(), 1, file_size, raw);
  std::fclose(raw);
  if (got != file_size) return std::nullopt;
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                              libdeflate_free_decompressor);
  if (!d) return std::nullopt;
  std::string out;
  out.reserve(TextCapacity(isize));
  // Note [Populated pages]. ISIZE is the file's word: the pages mapped ahead
  // are bounded by what deflate plausibly gives (graph JSON compresses 10-20
  // times); a file that claims more maps the rest by faults, as before.
  PopulatePagesOnTwoThreads(out.data(), std::min(isize, 32 * file_size));
  out.resize(isize);
  size_t in_at = 0, out_at = 0;
  while (in_at < file_size) {
    size_t in_used = 0, out_made = 0;
    if (libdeflate_gzip_decompress_ex(d.get(), compressed.data() + in_at, file_size - in_at, out.data() + out_at,
                                      out.size() - out_at, &in_used, &out_made) != LIBDEFLATE_SUCCESS)
      return std::nullopt;
    in_at += in_used;
    out_at += out_made;
  }
  if (out_at != isize) return std::nullopt;
  return out;
}
#endif

// A file that is not gzip, read straight into a string with SIMDJSON_PADDING
// spare bytes: its pages mapped first (Note [Populated pages]), then its two
// halves copied out of the page cache by two threads at once. gzread reads
// such files too, but through its own buffer into a string it grows by
// doubling, faulting page by page: on a 291 MB graph 510 ms against about 90
// here. nullopt when the file does not read as exactly `file_size` bytes (it
// changed meanwhile, or cannot be read): the caller reads it again with
// gzread, which sizes by what it gets and names the fault.
std::optional<std::string> ReadPlainWhole(const std::string& path, size_t file_size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct CloseAtReturn {
    int fd;
    ~CloseAtReturn() { ::close(fd); }
  } close_at_return{fd};
  std::string out;
  out.reserve(TextCapacity(file_size));
  PopulatePagesOnTwoThreads(out.data(), file_size);
  out.resize(file_size);
  auto read_range = [&](size_t from, size_t to) {
    while (from < to) {
      const ssize_t got = ::pread(fd, out.data() + from, to - from, static_cast<off_t>(from));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      from += static_cast<size_t>(got);
    }
    return true;
  };
  char past_the_end;
  if (!SplitOverTwoThreads(file_size, read_range) || ::pread(fd, &past_the_end, 1, static_cast<off_t>(file_size)) != 0)
    return std::nullopt;
  return out;
}

namespace {

// Note [Input size limit]
// Loading a graph holds about seven bytes of memory per byte of its JSON
// (synth_1m and synth_2m: 1.84 and 3.61 GB resident for 291 and 585 MB of
// text: the text recycled as node arena, simdjson's index, tape and strings,
// the IR), and a gzip file inflates up to about a thousand times: a 3 MB file
// of 3 GB of spaces before a graph took 10.5 GB resident and 70 s, and a 10 MB
// one would have been killed for memory, with nothing said. A text longer
// than an eighth of the machine's physical memory is refused before it is
// read whole (a plain file by its size; a gzip file as soon as inflating it
// passes the limit), as bad input naming the file, the limit and how to
// raise it. FXREMAT_MAX_INPUT_BYTES=N sets the limit (tests use a small one).
// Constants sidecars (safetensors) are not texts and take no such multiple:
// they are read without the limit.
constexpr size_t kMemoryPerTextByte = 8;

// The limit FXREMAT_MAX_INPUT_BYTES sets, if it is set and holds a number.
std::optional<size_t> TextLimitFromEnv() {
  const size_t limit = SizeFromEnv("FXREMAT_MAX_INPUT_BYTES", kNoLimit);
  return limit == kNoLimit ? std::nullopt : std::optional<size_t>(limit);
}

// A set FXREMAT_MAX_INPUT_BYTES that is no whole number of bytes ("abc", "-1",
// "1e6") is bad input: it fell back to the default limit without a word, so a
// user who meant to raise the limit was refused by the one they had not set.
Status CheckTextLimitFromEnv() {
  const char* v = std::getenv("FXREMAT_MAX_INPUT_BYTES");
  if (v == nullptr || *v == '\0') return Status::Ok();
  const std::string_view text(v);
  size_t limit = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), limit);
  if (ec != std::errc() || end != text.data() + text.size() || limit == kNoLimit)
    return Status::BadInput(fmt::format("expected a whole number of bytes, got '{}'", text), "FXREMAT_MAX_INPUT_BYTES");
  return Status::Ok();
}

size_t MaxTextBytes() {
  if (std::optional<size_t> limit = TextLimitFromEnv()) return *limit;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return kNoLimit;
  return static_cast<size_t>(pages) * static_cast<size_t>(page_size) / kMemoryPerTextByte;
}

Status TextTooLong(const std::string& path, std::string_view what, size_t limit) {
  if (TextLimitFromEnv())
    return Status::BadInput(fmt::format("{} more than {} bytes, the limit FXREMAT_MAX_INPUT_BYTES sets", what, limit),
                            path);
  return Status::BadInput(
      fmt::format("{} more than {} bytes, more than this machine can load (loading a graph takes up to about {} "
                  "bytes of memory per byte of its text, and the limit is an eighth of the machine's physical "
                  "memory; FXREMAT_MAX_INPUT_BYTES=N sets another)",
                  what, limit, kMemoryPerTextByte),
      path);
}

// gzread ignores bytes after the last gzip member; Python's gzip refuses
// them ("Not a gzipped file"), though not zero padding. The members are walked
// again (output discarded) to find where they end: only files libdeflate did
// not read in one pass come here, and libdeflate refuses such bytes.
Status CheckNothingAfterGzipMembers(const std::string& path) {
  std::string compressed;
  {
    std::FILE* raw = std::fopen(path.c_str(), "rb");
    if (!raw) return Status::BadInput("cannot open file", path);
    char buffer[1 << 16];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, raw)) > 0;) compressed.append(buffer, n);
    std::fclose(raw);
  }
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return Status::Ok();
  std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
  size_t at = 0;
  std::vector<unsigned char> sink(1 << 16);
  while (at < compressed.size()) {
    if (compressed.size() - at < 2 || static_cast<unsigned char>(compressed[at]) != 0x1f ||
        static_cast<unsigned char>(compressed[at + 1]) != 0x8b) {
      if (std::all_of(compressed.begin() + static_cast<std::ptrdiff_t>(at), compressed.end(), [](char c) { return c == 0; }))
        return Status::Ok();  // zero padding, as Python's gzip allows
      return Status::BadInput(fmt::format("corrupt gzip data: {} bytes after the gzip stream (from byte {}) that "
                                          "are not a gzip member",
                                          compressed.size() - at, at),
                              path);
    }
    inflateReset(&z);
    auto feed = [&] {  // zlib counts input in 32 bits
      z.next_in = reinterpret_cast<Bytef*>(compressed.data() + at);
      z.avail_in = static_cast<uInt>(std::min<size_t>(compressed.size() - at, size_t{1} << 30));
    };
    feed();
    while (true) {
      z.next_out = sink.data();
      z.avail_out = static_cast<uInt>(sink.size());
      const int rc = inflate(&z, Z_NO_FLUSH);
      at = static_cast<size_t>(reinterpret_cast<const char*>(z.next_in) - compressed.data());
      if (rc == Z_STREAM_END) break;
      const bool more_input = z.avail_in == 0 && at < compressed.size();
      if (rc == Z_OK || (rc == Z_BUF_ERROR && more_input)) {
        if (z.avail_in == 0) {
          if (!more_input) return Status::Ok();
          feed();
        }
        continue;
      }
      return Status::Ok();  // gzread read it: what this walk cannot follow is not judged here
    }
  }
  return Status::Ok();
}

// ReadFileContents; on_size(n), when given, is called with the text's
// expected length (the file's size, or a gzip file's stated one) before the
// text is read. A text over `max_bytes` is refused (Note [Input size limit]).
Expected<std::string> ReadFileContents(const std::string& path, const std::function<void(size_t)>& on_size,
                                       size_t max_bytes) {
  ScopedPhase phase("read-file");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return Status::BadInput("no such file (or not a regular file)", path);
  // gzread reads plain files transparently. The text is read straight into the
  // string, sized by the file (or the gzip trailer's length) and with spare
  // capacity for simdjson's padding, so that the JSON reader copies nothing.
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  size_t expected = ec ? 0 : static_cast<size_t>(file_size);
  [[maybe_unused]] std::optional<size_t> gzip_isize;  // the gzip trailer's length, for a gzip file
  bool gzip_magic = false;
  if (std::FILE* raw = std::fopen(path.c_str(), "rb")) {
    unsigned char head[4] = {0, 0, 0, 0}, tail[4] = {0, 0, 0, 0};
    const size_t head_size = std::fread(head, 1, 4, raw);
    gzip_magic = head_size >= 2 && head[0] == 0x1f && head[1] == 0x8b;
    if (!ec && head_size == 4 && gzip_magic && file_size >= 18 && std::fseek(raw, -4, SEEK_END) == 0 &&
        std::fread(tail, 1, 4, raw) == 4) {
      // ISIZE: the uncompressed length mod 2^32 of the last member; only a hint.
      const size_t isize = tail[0] | (tail[1] << 8) | (tail[2] << 16) | (static_cast<size_t>(tail[3]) << 24);
      // Note [Implausible gzip lengths]: the buffers are sized by ISIZE before
      // a byte is inflated, and ISIZE is only the file's word: bytes after the
      // stream (which zlib reads past) are taken for it. A 1.6 KB graph with
      // "\xff\xff\xff\xff" appended made the CLI zero-fill 4 GiB for the
      // text and the parser (29 s, 4.2 GB resident) before reading the graph.
      // Graph JSON compresses 10-50 times (the largest in testdata/: 51); a
      // length over kMostTrustedInflation times the file is not believed: the
      // file is read by zlib, whose buffer grows with what it inflates.
      constexpr size_t kMostTrustedInflation = 128;
      if (isize <= kMostTrustedInflation * static_cast<size_t>(file_size)) {
        expected = std::max(expected, isize);
        // libdeflate skips a header CRC (FLG.FHCRC) without checking it; zlib
        // checks it, so such a file is left to zlib.
        constexpr unsigned char kHeaderCrcFlag = 0x02;
        if (!(head[3] & kHeaderCrcFlag)) gzip_isize = isize;
      }
    }
    std::fclose(raw);
  }
  if (!ec && !gzip_magic && file_size > max_bytes) return TextTooLong(path, "the file is", max_bytes);
  // A gzip file's stated length over the limit is not believed either: its
  // text is inflated by zlib, which stops at the limit.
  if (expected > max_bytes) {
    expected = 0;
    gzip_isize.reset();
  }
  if (on_size && expected > 0) on_size(expected);
  if (!ec && !gzip_magic) {
    if (std::optional<std::string> contents = ReadPlainWhole(path, static_cast<size_t>(file_size)))
      return std::move(*contents);
  }
#ifdef FXREMAT_HAVE_LIBDEFLATE
  if (gzip_isize) {
    if (std::optional<std::string> contents = InflateWhole(path, static_cast<size_t>(file_size), *gzip_isize))
      return std::move(*contents);
    // Anything libdeflate refuses is read again by zlib, which names the fault.
  }
#endif
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return Status::BadInput("cannot open file", path);
  gzbuffer(f, 1 << 18);
  std::string contents;
  contents.reserve(expected + simdjson::SIMDJSON_PADDING + 1);
  constexpr size_t kReadAhead = (1 << 16) + 1;
  const size_t most_held = max_bytes > kNoLimit - kReadAhead ? kNoLimit : max_bytes + kReadAhead;
  size_t size = 0;
  while (true) {
    // Never more than a read past the limit (Note [Input size limit]).
    if (contents.size() - size < (1 << 16))
      contents.resize(std::min(std::max<size_t>(contents.size() * 2, size + (1 << 16)), most_held));
    if (contents.size() < expected + 1) contents.resize(expected + 1);
    const size_t room = std::min<size_t>(contents.size() - size, 1u << 30);
    int n = gzread(f, contents.data() + size, static_cast<unsigned>(room));
    if (n < 0) {
      int errnum = 0;
      std::string message = gzerror(f, &errnum);
      gzclose(f);
      return Status::BadInput(fmt::format("cannot read compressed file: {}", message), path);
    }
    if (n == 0) break;
    size += static_cast<size_t>(n);
    if (size > max_bytes) {
      gzclose(f);
      return TextTooLong(path, gzip_magic ? "the file inflates to" : "the file is", max_bytes);
    }
  }
  contents.resize(size);
  // A truncated gzip stream reads short without an error from gzread; gzclose
  // and gzeof tell whether the stream ended cleanly.
  int close_status = gzclose(f);
  if (close_status != Z_OK && close_status != Z_BUF_ERROR)
    return Status::BadInput("cannot read compressed file (truncated or corrupt)", path);
  if (close_status == Z_BUF_ERROR)
    return Status::BadInput("truncated compressed file (the gzip stream ends early)", path);
  if (gzip_magic) FXREMAT_RETURN_IF_ERROR(CheckNothingAfterGzipMembers(path));
  return contents;
}

}  // namespace

Status WriteFileAtomically(const std::string& path, std::string_view contents) {
  return WriteThroughTemporary(path, [&](const FileSink& sink) { return sink(contents); });
}

Expected<std::string> ReadFileContents(const std::string& path) {
  FXREMAT_RETURN_IF_ERROR(CheckTextLimitFromEnv());
  return ReadFileContents(path, nullptr, MaxTextBytes());
}

Expected<std::unique_ptr<Graph>> LoadGraphFile(const std::string& path) {
  bool is_text = path.size() >= 5 && path.compare(path.size() - 5, 5, ".fxir") == 0;
  // Note [Warming pages ahead]: the parser's buffers, allocated before the
  // text is read, are mapped while it is.
  PreparedParse prepared;
  std::function<void(size_t)> prepare;
  if (!is_text && !UseNlohmannIo()) prepare = [&prepared](size_t length) { prepared.Prepare(length); };
  FXREMAT_RETURN_IF_ERROR(CheckTextLimitFromEnv());
  FXREMAT_ASSIGN_OR_RETURN(std::string contents, ReadFileContents(path, prepare, MaxTextBytes()));
  size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (contents[first] == '#' || contents[first] == 'd')) is_text = true;
  if (first == std::string::npos) return Status::BadInput("empty file", path);
  if (!is_text && contents.capacity() < contents.size() + simdjson::SIMDJSON_PADDING)
    contents.reserve(contents.size() + simdjson::SIMDJSON_PADDING);
  auto graph = is_text ? ParseGraph(contents)
                       : ReadJson(contents, &contents, std::filesystem::absolute(path).parent_path().string(),
                                  &prepared);
  prepared.warmer.Stop();
  if (!graph.ok()) return graph.status().WithContext(path);
  return graph;
}

}  // namespace fxremat
