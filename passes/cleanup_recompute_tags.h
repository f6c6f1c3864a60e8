// cleanup_recompute_tags: fixes activation-checkpoint tags at region
// boundaries before partitioning, as the reference's pass of the same name does
// (torch/_functorch/partitioners.py, torch 2.13).
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Given:   %a = f(%x) [MUST_RECOMPUTE, ac_graph_id=1]; %b = g(%a) [MUST_RECOMPUTE, ac_graph_id=2]
// Execute: CleanupRecomputeTags(graph, /*is_default_partition=*/...)
// Result:  %a is MUST_SAVE: the output of a region feeding a later region is
//          stashed at the boundary.
// With is_default_partition, a node outside every region (no ac_graph_id)
// whose user must be recomputed (an input of a region) becomes MUST_SAVE too,
// unless it is a getitem of a multi-output node inside a region.
// Returns whether any tag changed.
Expected<bool> CleanupRecomputeTags(Graph& graph, bool is_default_partition);

}  // namespace fxremat
