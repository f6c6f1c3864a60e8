// Constant data in the format (docs/format.md, "constants"): base64 for small
// tensors inline in the document, a safetensors sidecar for large ones. Private
// to src/.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

// Note [Sidecar checksums]
// A constant kept in a safetensors sidecar carries the CRC-32 (zlib's, of the
// bytes as stored) of its data in the document (format key `crc32`, since
// 1.7), and readers compare it. The sidecar's name comes from the graph's
// (model.json and model.json.gz both use model.constants.safetensors), so a
// second graph saved beside the first under the other extension overwrote
// the first's sidecar; a constant of the same dtype and shape then loaded the
// other graph's numbers without a word. Python's writer and reader
// (_move_large_constants, _decode_constants in python/fxremat/_format.py) do
// the same with zlib.crc32.
uint32_t Crc32(std::string_view bytes);
// Errors (bad input) name `where`.
Expected<std::string> Base64Decode(std::string_view text, const std::string& where);

// safetensors dtype names ("F32", "I64", "BOOL", ...); empty for a dtype
// safetensors has no name for.
//
// Note [Dtypes without a safetensors name]
// Quantized (qint8, ...), packed-bit (bits8, ...), sub-byte (int1-int7,
// uint1-uint7) and float4_e2m1fn_x2 tensors have no safetensors dtype (or one
// whose shapes count other elements), so a constant of such a dtype is always
// written inline, whatever its size: the C++ writers and Python's
// (_move_large_constants) alike; a sidecar entry never names one.
std::string_view SafetensorsDType(DType dtype);

struct SafetensorsEntry {
  std::string dtype;  // as the file names it
  std::vector<int64_t> shape;
  std::string data;
};
// Parses a whole safetensors file (8-byte little-endian header length, JSON
// header, data). Errors name `path` and the entry.
Expected<std::map<std::string, SafetensorsEntry>> ParseSafetensors(std::string contents, const std::string& path);

// A safetensors file whose entries' data is not copied out of it: each entry's
// `data` is empty, and Data(key) views its bytes in `contents`. Entries may
// share or overlap byte ranges: a file of 1,500 entries over one 2 MB range
// took 2.95 GB when each was copied, though a graph names one or two of them.
struct SafetensorsFile {
  std::string contents;
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::pair<size_t, size_t>> ranges;  // key -> [begin, end) in contents

  std::string_view Data(const std::string& key) const {
    const auto& [begin, end] = ranges.at(key);
    return std::string_view(contents).substr(begin, end - begin);
  }
  // Data(key) as a constant's bytes: one copy for each range, shared by the
  // constants that name it or another key over the same bytes.
  std::shared_ptr<const std::string> SharedData(const std::string& key) {
    std::shared_ptr<const std::string>& copy = copies[ranges.at(key)];
    if (!copy) copy = std::make_shared<const std::string>(Data(key));
    return copy;
  }

 private:
  std::map<std::pair<size_t, size_t>, std::shared_ptr<const std::string>> copies;
};
// As ParseSafetensors, the same checks and errors.
Expected<SafetensorsFile> IndexSafetensors(std::string contents, const std::string& path);
// Writes tensors, keys in order, deterministic bytes.
std::string WriteSafetensors(const std::map<std::string, SafetensorsEntry>& entries);

}  // namespace fxremat
