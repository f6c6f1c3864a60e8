// The rules docs/format.md sets for sizes (private to src/): one implementation,
// applied by VerifyGraph (located at the node) and by the JSON reader (located at
// the field's JSON path, "/nodes/3/meta/val/shape/0").
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// The first size rule a tensor's facts break: dims and strides not negative, the
// tensor's bytes (numel * item size, symbolic dims at their hints) within int64.
struct FactsProblem {
  std::string field;  // "shape" or "stride"
  size_t index = 0;   // which dim or stride
  std::string message;
};
std::optional<FactsProblem> FindTensorFactsProblem(const TensorFacts& t);

// How deep a node's arguments (lists) and its value facts (tuples) may nest, in
// both forms: well below the JSON reader's overall limit (kMaxJsonDepth = 256),
// with room for the levels around them, so that whatever one reader accepts, the
// other form of it reads back ("/nodes/3/args/..." adds 4 levels; each tuple 2,
// {"items": [...]}). A text annotation of 200 nested tuples was accepted and its
// JSON form refused (found by tests/fuzz/fuzz_loader.cpp). FX graphs nest a few.
inline constexpr int kMaxArgumentNesting = 128;
// How deep subgraphs (of higher-order ops) may nest in one document.
inline constexpr int kMaxSubgraphNesting = 16;
inline constexpr int kMaxTupleNesting = 64;

// The layouts and memory formats an argument may name: torch's, as str() prints
// them without "torch." (docs/format.md, "Arguments"). Both readers refuse
// others, so that each form's reader reads what the other's writer wrote.
bool IsLayoutName(std::string_view name);
bool IsMemoryFormatName(std::string_view name);
// A device as torch's str(device) prints it: a type of lowercase letters,
// digits and underscores, starting with a letter, then optionally ":" and an
// index. (The text form writes a tensor's device bare, so a device "# op cpu"
// read from JSON made text its reader refused; found by tests/fuzz/fuzz_loader.cpp.)
bool IsDeviceName(std::string_view name);

// Node names are Python identifiers; call_function targets and get_attr paths
// are identifiers joined by dots (docs/format.md, "nodes"): the text form writes
// them as code. (A target "aten.gelu.d-efault" was read from JSON and its text
// form refused; found by tests/fuzz/fuzz_loader.cpp.)
bool IsPythonIdentifier(std::string_view name);
bool IsDottedName(std::string_view name);
// Python's reserved words ("def", "None", ...): a node named one reads from
// JSON but its forward.py / the FX graph Python builds from it does not
// compile (fxremat.load refused such a file that the CLI had written).
bool IsPythonKeyword(std::string_view name);
// "" for a good node name (an identifier, not a keyword), else what is wrong.
std::string NodeNameProblem(std::string_view name);

// Text read from users (the IR text form, --policy) is UTF-8, as the JSON form
// that graphs and policies are written to must be: bad input at "line L, col C"
// (columns count bytes) otherwise. Overlong forms, surrogates and code points
// above U+10FFFF are not UTF-8. `what`: "the text form", "a policy".
Status CheckUtf8(std::string_view text, std::string_view what);

// A placeholder's value_range [low, high) is not empty.
std::optional<std::string> ValueRangeProblem(int64_t low, int64_t high);

}  // namespace fxremat
