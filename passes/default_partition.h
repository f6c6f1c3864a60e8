// default_partition: the forward keeps the ops the user's forward ran; every
// forward value the backward reads is saved. Mirrors functorch's
// default_partition (torch/_functorch/partitioners.py, torch 2.13).
#pragma once

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// Chooses the saved values (see the .cpp for the rules) and extracts the
// forward and backward graphs with ExtractPartition. The joint graph is not
// modified.
Expected<Partition> DefaultPartition(const Graph& joint);

// Only the choice of saved values, in emission order (for tests and `inspect`).
Expected<std::vector<Node*>> ChooseDefaultSavedValues(const Graph& joint);

}  // namespace fxremat
