// Reading and writing graphs: the versioned JSON format of docs/format.md
// (optionally gzip compressed) and, through text.h, the IR text form.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

inline constexpr int kFormatMajorVersion = 1;
// 1.4: subgraphs and operator arguments (higher-order ops); 1.5: the stack-trace
// table (Note [Stack-trace table] in src/json_io.cpp).
inline constexpr int kFormatMinorVersion = 7;

// Parses a graph document. Every error names its JSON path ("/nodes/3/args/0")
// or node. The result passes VerifyGraph.
Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text);
// As above; constants the document keeps in a sidecar file are read from
// `sidecar_dir` (docs/format.md, "constants").
Expected<std::unique_ptr<Graph>> GraphFromJson(std::string_view text, const std::string& sidecar_dir);

// Serializes a graph; deterministic (same graph → byte-identical text). Every
// constant's data is inline.
// `indent`: spaces per level (nlohmann's dump(indent)); -1 writes it compact,
// as graph files of more than 50,000 nodes are (Note [Compact large graphs]).
std::string GraphToJson(const Graph& graph, int indent = 1);
// As GraphToJson, but a node for which `brief` is true is written as its name,
// op, target and recompute decision only (no arguments, facts or other
// metadata): what partition_fn needs of a node it copies from the joint graph
// it holds (src/python/bindings.cpp). Not a readable graph document.
std::string GraphToJsonBrief(const Graph& graph, const std::function<bool(const Node&)>& brief);

// "dir/model.json.gz" -> "model.constants.safetensors".
std::string SidecarNameFor(const std::string& graph_path);
// Writes the document (gzip for ".gz") and its sidecar beside it, each atomically.
Status WriteGraphFile(const std::string& path, const Graph& graph);

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
