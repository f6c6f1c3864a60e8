// Constant data in the format (docs/format.md, "constants"): base64 for small
// tensors inline in the document, a safetensors sidecar for large ones. Private
// to src/.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Tensors up to this many bytes are written inline (base64) in the document;
// larger ones go to the sidecar when the writer has one.
inline constexpr int64_t kInlineConstantBytes = 64 * 1024;

std::string Base64Encode(std::string_view bytes);
// Errors (bad input) name `where`.
Expected<std::string> Base64Decode(std::string_view text, const std::string& where);

// safetensors dtype names ("F32", "I64", "BOOL", ...).
std::string_view SafetensorsDType(DType dtype);

struct SafetensorsEntry {
  std::string dtype;  // as the file names it
  std::vector<int64_t> shape;
  std::string data;
};
// Parses a whole safetensors file (8-byte little-endian header length, JSON
// header, data). Errors name `path` and the entry.
Expected<std::map<std::string, SafetensorsEntry>> ParseSafetensors(std::string_view contents, const std::string& path);
// Writes tensors, keys in order, deterministic bytes.
std::string WriteSafetensors(const std::map<std::string, SafetensorsEntry>& entries);

}  // namespace fxremat
