// JSON documents as nlohmann values (private to src/ and the Python binding):
// the binding converts Python dicts to and from these directly, with no JSON
// text in between.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

struct SafetensorsEntry;

// Documents nest values a few levels deep (node arguments, value facts, policy
// combinations); anything deeper than this is refused before parsing, so that
// no reader recurses without bound.
inline constexpr int kMaxJsonDepth = 256;
// Bad input naming the line and column where `text` nests deeper than kMaxJsonDepth.
Status CheckJsonDepth(std::string_view text, const std::string& what);
// sidecar_dir: where sidecar files named by "constants" are (empty: none may be).
Expected<std::unique_ptr<Graph>> GraphFromJsonDocument(const nlohmann::json& doc, const std::string& sidecar_dir = "");
nlohmann::ordered_json GraphToJsonDocument(const Graph& graph);
// Large constants go to `sidecar` (named `sidecar_name` in the document) when given.
nlohmann::ordered_json GraphToJsonDocument(const Graph& graph, const std::string& sidecar_name,
                                           std::map<std::string, SafetensorsEntry>* sidecar);
nlohmann::ordered_json SignatureToJsonDocument(const Signature& signature);
// A dim as both documents hold it: a static one as its size, a symbolic one as
// {"sym": expression, "hint": example value} (docs/format.md; WriteDim in
// src/json_stream_writer.h writes the same as text).
inline nlohmann::ordered_json DimToJson(const Dim& d) {
  if (d.is_static()) return d.hint;
  return nlohmann::ordered_json{{"sym", d.expr.str()}, {"hint", d.hint}};
}

// Note [Populated tape]: the tape and string bytes simdjson's stage 2 writes
// for a document, as the mapping thread counts them ahead of it (`first`) and
// as the parse really wrote them (`second`); nullopt for a malformed document.
struct TapeSizes {
  size_t tape_bytes = 0;
  size_t string_bytes = 0;
};
std::optional<std::pair<TapeSizes, TapeSizes>> MeasureTapeForTesting(std::string_view json);

// Note [Known field keys]: the keys the reader looks up by slot, in slot order,
// and the slot the reader finds for `key` (-1: not one of them).
std::vector<std::string_view> KnownFieldKeysForTesting();
int KnownFieldSlotForTesting(std::string_view key);

}  // namespace fxremat
