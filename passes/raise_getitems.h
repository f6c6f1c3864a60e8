// raise_getitems: every getitem moves right after the node it reads, as
// PyTorch's raise_getitems (torch/_functorch/compile_utils.py) does to both
// emitted graphs, so a multi-output op's results are named where it runs and a
// compiler sees them together.
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Given:   %t = aten.max.dim(%x, 0); %a = sin(%x); %v = getitem(%t, 0); %i = getitem(%t, 1)
// Execute: RaiseGetitems(graph)
// Result:  %t = aten.max.dim(%x, 0); %v = getitem(%t, 0); %i = getitem(%t, 1); %a = sin(%x)
// The getitems are visited last to first and each is put right after its
// producer's current place (the reference's `parent.append(node)`), which keeps
// their relative order. A getitem of a placeholder stays where it is (the IR
// keeps placeholders first). Returns whether the order changed.
Expected<bool> RaiseGetitems(Graph& graph);

}  // namespace fxremat
