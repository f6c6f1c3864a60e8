// force_saves: values the reference always saves, whatever the policy or the
// cut would choose (torch/_functorch/partitioners.py, force_save_collectives
// and force_save_bw_mutation_src). Both partitioners run it.
//
// Note [Forced saves]
//   Collectives (_c10d_functional ops) are MUST_SAVE unless a checkpoint
//   region recomputes them: replaying a collective in the backward would need
//   every rank to replay it in the same order.
//   A value that the forward copies into an input which the backward mutates
//   again (a copy_ tagged must_be_in_forward into the same input as a copy_
//   tagged must_be_in_backward, both at the tail of the graph) is MUST_SAVE:
//   recomputing it in the backward would read the input after the backward's
//   own write.
//   The results of a forward with_effects (an effectful op in its token
//   chain, or an invoke_subgraph whose body runs one) are MUST_SAVE unless it
//   is tagged for recompute or is_backward: the effect happens once
//   (the reference's force_save_effectful_ops; Note [Higher-order ops]).
//   So are the results of a forward higher-order op whose body returns its own
//   inputs (Note [Bodies that return their inputs]), whatever a checkpoint
//   region's tags prefer: the call stays in the forward, so the backward can
//   only read its results saved.
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Whether ForceSaves would change anything (to skip copying a graph).
bool NeedsForcedSaves(const Graph& joint);

// Given:   %c = _c10d_functional.all_reduce(%x, ...)
// Execute: ForceSaves(joint)
// Result:  %c carries recompute=MUST_SAVE
// Returns whether any tag changed.
Expected<bool> ForceSaves(Graph& joint);

}  // namespace fxremat
