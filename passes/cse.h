// cse: common-subexpression elimination before partitioning, as the
// reference's fx_graph_cse (torch/_functorch/compile_utils.py, torch 2.13).
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

#include <vector>

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

// A node EliminateCommonSubexpressions removes, and the earlier node that
// takes its uses, by index in the graph they were found in.
struct DuplicateNode {
  size_t duplicate;
  size_t representative;
};

// The merges EliminateCommonSubexpressions makes, in graph order, without
// changing the graph (so callers can skip copying a graph that has none).
std::vector<DuplicateNode> FindCommonSubexpressions(const Graph& graph);

// Makes the merges FindCommonSubexpressions found on `graph`, or on a graph
// `graph` is a clone of (CloneGraph keeps node indices), so that finding and
// merging walk the graph once between them. Returns whether anything merged.
Expected<bool> MergeCommonSubexpressions(Graph& graph, const std::vector<DuplicateNode>& duplicates);

}  // namespace fxremat
