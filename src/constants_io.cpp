// Constant data encodings (constants_io.h).
#include "src/constants_io.h"

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include <limits>

#include <zlib.h>

namespace fxremat {

namespace {
constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}  // namespace

uint32_t Crc32(std::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<z_size_t>(bytes.size())));
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (rest == 2) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Expected<std::string> Base64Decode(std::string_view text, const std::string& where) {
  if (text.size() % 4 != 0)
    return Status::BadInput(fmt::format("base64 data of {} characters (not a multiple of 4)", text.size()), where);
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      uint32_t d = 0;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
      } else {
        const size_t pos = kAlphabet.find(c);
        if (pos == std::string_view::npos || pad > 0)
          return Status::BadInput(fmt::format("invalid base64 character at offset {}", i + k), where);
        d = static_cast<uint32_t>(pos);
      }
      v = (v << 6) | d;
    }
    out.push_back(static_cast<char>((v >> 16) & 0xFF));
    if (pad < 2) out.push_back(static_cast<char>((v >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(v & 0xFF));
  }
  return out;
}

std::string_view SafetensorsDType(DType dtype) { return DTypeSafetensorsName(dtype); }

Expected<SafetensorsFile> IndexSafetensors(std::string file_contents, const std::string& path) {
  SafetensorsFile file;
  file.contents = std::move(file_contents);
  const std::string_view contents = file.contents;
  if (contents.size() < 8) return Status::BadInput("not a safetensors file (shorter than its 8-byte header size)", path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(contents[static_cast<size_t>(i)]);
  if (n > contents.size() - 8)
    return Status::BadInput(fmt::format("safetensors header of {} bytes in a file of {}", n, contents.size()), path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(contents.substr(8, n));
  } catch (const nlohmann::json::exception&) {
    return Status::BadInput("malformed safetensors header (not JSON)", path);
  }
  if (!header.is_object()) return Status::BadInput("malformed safetensors header (not an object)", path);
  const std::string_view data = contents.substr(8 + n);
  std::map<std::string, SafetensorsEntry>& out = file.entries;
  for (const auto& [key, e] : header.items()) {
    if (key == "__metadata__") continue;
    const std::string where = fmt::format("{}: tensor '{}'", path, key);
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2)
      return Status::BadInput("expected {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}", where);
    SafetensorsEntry entry;
    entry.dtype = e["dtype"].get<std::string>();
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Status::BadInput("shape entries must be non-negative 64-bit integers", where);
      entry.shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      return Status::BadInput("data_offsets must be non-negative integers", where);
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data.size())
      return Status::BadInput(fmt::format("data_offsets [{}, {}] outside the {} data bytes", begin, end, data.size()),
                              where);
    file.ranges.emplace(key, std::pair<size_t, size_t>(8 + n + begin, 8 + n + end));
    out.emplace(key, std::move(entry));
  }
  return file;
}

Expected<std::map<std::string, SafetensorsEntry>> ParseSafetensors(std::string contents, const std::string& path) {
  FXREMAT_ASSIGN_OR_RETURN(SafetensorsFile file, IndexSafetensors(std::move(contents), path));
  for (auto& [key, entry] : file.entries) entry.data = std::string(file.Data(key));
  return std::move(file.entries);
}

std::string WriteSafetensors(const std::map<std::string, SafetensorsEntry>& entries) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t offset = 0;
  for (const auto& [key, e] : entries) {
    header[key] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.data.size()}}};
    offset += e.data.size();
  }
  std::string text = header.dump();
  // The data starts 8-byte aligned, as the safetensors writers pad the header.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += text;
  for (const auto& [key, e] : entries) out += e.data;
  return out;
}

}  // namespace fxremat
