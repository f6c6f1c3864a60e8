// The IR text form: FX's graph.code with the facts fxremat needs, and a parser
// that reads it back. print → parse → print is the identity; golden tests are
// written in it. Example:
//
//   # fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
//   # op aten.sin.default "aten::sin(Tensor self) -> Tensor" [core, pointwise]
//   # input primals_1 role=primal path="args[0]"
//   def forward(self, primals_1: "f32[4, 4][4, 1]cpu", tangents_1: "f32[4, 4][4, 1]cpu"):
//       sin: "f32[4, 4][4, 1]cpu" = torch.ops.aten.sin.default(primals_1)  # tag=is_forward
//       ...
//       return (sin, mul)
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

std::string PrintGraph(const Graph& graph);

// Parses the text form. Errors carry "line:col". The result passes VerifyGraph.
Expected<std::unique_ptr<Graph>> ParseGraph(std::string_view text);

// Formats value facts as FX type annotations do ("f32[4, s0][s0, 1]cpu").
std::string FormatValueFacts(const ValueFacts& facts);

}  // namespace fxremat
