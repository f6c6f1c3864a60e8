// Op facts: a parsed PyTorch function schema (with alias annotations) and the
// op's torch.Tag names. They come from PyTorch itself: written by the exporter
// from `op._schema` / `op.tags`, or filled from the libtorch dispatcher
// (torch_bridge.h) for a file that lacks them. Never from a hand-kept list.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fxremat/status.h"

namespace fxremat {

struct SchemaArgument {
  std::string name;
  std::string type;        // as written, without the alias annotation: "Tensor?", "SymInt[]"
  std::string alias_set;   // "a" for Tensor(a) / Tensor(a!); empty if none
  bool is_write = false;   // Tensor(a!): the op mutates this argument
  std::optional<std::string> default_value;  // as written: "1", "None", "[0, 0]"
  bool kwarg_only = false;
};

struct OpSchema {
  std::string name;      // "aten::mm"
  std::string overload;  // "default" when the schema has none
  std::vector<SchemaArgument> arguments;
  std::vector<SchemaArgument> returns;

  // Any argument annotated as written (a!): like torch's FunctionSchema.is_mutable.
  bool isMutable() const;
  // Some return aliases an input (Tensor(a) without !): a view op.
  bool returnsAlias() const;
  // Position of an argument by name, or -1.
  int argumentIndex(std::string_view name) const;
};

// Parses "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor".
Expected<OpSchema> ParseOpSchema(std::string_view text);

struct OpInfo {
  std::string target;       // "aten.mm.default"
  std::string schema_text;  // as PyTorch printed it; empty if unknown
  std::vector<std::string> tags;
  std::vector<std::string> packet_tags;  // union of tags over the op's overload packet
  OpSchema schema;          // parsed from schema_text (empty when schema_text is)

  bool hasSchema() const { return !schema_text.empty(); }
  bool hasTag(std::string_view tag) const;
  // A tag on any overload of the packet ("aten.add" for "aten.add.Tensor").
  bool packetHasTag(std::string_view tag) const;
};

// Op facts keyed by target string, in target order (deterministic output).
using OpTable = std::map<std::string, OpInfo, std::less<>>;

// The identity naming ops (xla.name_tensor, xla.offload_name,
// fxremat.checkpoint_name): they attach a name to a value and compute nothing.
bool IsAnnotationOp(std::string_view target);

// Builds an OpInfo, parsing the schema. Errors name the target.
Expected<OpInfo> MakeOpInfo(std::string target, std::string schema_text,
                            std::vector<std::string> tags);

}  // namespace fxremat
