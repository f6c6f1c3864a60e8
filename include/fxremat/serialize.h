// Reading and writing graphs: the versioned JSON format of docs/format.md
// (optionally gzip compressed) and, through text.h, the IR text form.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

inline constexpr int kFormatMajorVersion = 1;
inline constexpr int kFormatMinorVersion = 1;

// Parses a graph document. Every error names its JSON path ("/nodes/3/args/0")
// or node. The result passes VerifyGraph.
Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text);

// Serializes a graph; deterministic (same graph → byte-identical text).
std::string GraphToJson(const Graph& graph);

// Reads a whole file; gzip-compressed files are decompressed transparently.
Expected<std::string> ReadFileContents(const std::string& path);

// Writes a file atomically (temporary file, then rename), gzip-compressed when
// the path ends in ".gz". Nothing is left behind on failure.
Status WriteFileAtomically(const std::string& path, std::string_view contents);

// Loads a graph from a file: JSON (.json, .json.gz) or IR text (.fxir, or any
// file whose first non-blank character is '#' or 'd'). Errors are prefixed with
// the path.
Expected<std::unique_ptr<Graph>> LoadGraphFile(const std::string& path);

}  // namespace fxremat
