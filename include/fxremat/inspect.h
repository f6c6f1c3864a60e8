// `fxremat inspect`: what a joint graph holds, for people.
#pragma once

#include <string>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// A readable multi-line report: node and op counts, forward/backward
// classification, input and activation bytes (what the default partition saves).
Expected<std::string> InspectGraph(const Graph& graph);

}  // namespace fxremat
