// cse: common-subexpression elimination before partitioning, as the
// reference's fx_graph_cse (torch/_functorch/compile_utils.py, torch 2.13).
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Given:   %a = aten.sin(%x); %b = aten.sin(%x); %c = aten.add(%a, %b)
// Execute: EliminateCommonSubexpressions(graph)
// Result:  %a = aten.sin(%x); %c = aten.add(%a, %a)
// Two call_function nodes are merged when target, arguments (after earlier
// merges) and keyword arguments are equal and no mutating op lies between them.
// Never merged: random ops, aten.empty, nodes whose storage aliases a graph
// output (outputs must stay distinct tensors). The first node is kept with its
// metadata. Returns whether anything was merged.
Expected<bool> EliminateCommonSubexpressions(Graph& graph);

// The nodes EliminateCommonSubexpressions would remove, without changing the
// graph (so callers can skip copying a graph that has none).
std::vector<Node*> FindCommonSubexpressions(const Graph& graph);

}  // namespace fxremat
