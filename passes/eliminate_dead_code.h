// eliminate_dead_code: removes the values nothing uses before partitioning, as
// the reference's min cut does first (joint_module.graph.eliminate_dead_code(),
// torch/_functorch/partitioners.py). A dead user would otherwise shift the
// min cut's weights and bans: it counts as a backward use, as a distance of 0
// from the backward, as a non-fusible use.
#pragma once

#include <vector>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// The call_function and get_attr nodes with no users, transitively, that are
// not impure in FX's sense (op_categories.h, IsFxImpure): asserts, mutations,
// effectful and profiler ops stay. Random ops are pure here, as FX treats them
// inside torch.compile's tracing context (Inductor's fallback_random off).
std::vector<Node*> FindDeadCode(const Graph& graph);

// Given:   %a = sin(%x); %b = cos(%a); %c = neg(%x); return (%c)
// Execute: EliminateDeadCode(graph)
// Result:  %c = neg(%x); return (%c)
// Constants no get_attr reads any more are dropped. Returns whether anything
// was removed.
Expected<bool> EliminateDeadCode(Graph& graph);

}  // namespace fxremat
