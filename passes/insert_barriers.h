// insert_barriers: for XLA, the inputs of every recomputed region of the
// backward pass through xla::optimization_barrier, so that XLA's CSE cannot
// merge the recomputation back into the forward (seed 000: torch_xla's
// checkpoint wraps the recompute inputs in xm.optimization_barrier_).
#pragma once

#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// Given (backward):  %s = aten.sin(%mm) ... %m = aten.mul(%tangents_1, %s)
//   where %mm is a saved value and %s is recomputed
// Execute: InsertBarriers(p)
// Result:  %b = xla.optimization_barrier.default([%mm]); %b0 = getitem(%b, 0);
//          %s = aten.sin(%b0) ...
// Returns "changed?" (false when nothing is recomputed).
Expected<bool> InsertBarriers(Partition& p);

}  // namespace fxremat
