// reorder_backward: orders the backward graph the way the autograd engine runs
// it (the reference's reordering_to_mimic_autograd_engine, torch/_functorch/
// partitioners.py): recomputed forward ops run right before the first backward
// op that needs them, not all up front, so their results live only as long as
// they must.
//
// Note [Autograd-engine order]
// Starting from the first user of a tangent, each node in graph order is
// placed together with every input it still lacks (collected depth first,
// placed in their original order). Before that, any aten.copy_ ahead of the
// first tangent user is placed the same way (a copy_ need not read a tangent).
// Nodes reached by neither are dropped, as the reference drops them. A graph
// with no tangent user is left as it is.
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Given:   %t = placeholder (tangent); %r = cos(%s); %u = sin(%s); %g = mul(%t, %u); %h = mul(%g, %r)
// Execute: ReorderBackward(backward)
// Result:  %u = sin(%s); %g = mul(%t, %u); %r = cos(%s); %h = mul(%g, %r)
// Returns whether the order (or the node set) changed.
Expected<bool> ReorderBackward(Graph& backward);

}  // namespace fxremat
