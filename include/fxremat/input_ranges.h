// Which values a random integer input may take so that the graph can run
// (Note [Valid integer inputs] in src/input_ranges.cpp). Shared by `verify`
// (C++) and the Python test harnesses, so both draw the same kind of inputs.
#pragma once

#include <cstdint>
#include <utility>

#include "fxremat/ir.h"

namespace fxremat {

// [low, high) for the integer placeholder `input`: the range of every index
// argument its values reach (embedding ids, class targets, gather/index
// indices, one_hot classes), intersected with its recorded value_range; the
// value_range alone when no index argument constrains it; {0, 0} when neither.
std::pair<int64_t, int64_t> IntegerInputRange(const Node& input);

}  // namespace fxremat
