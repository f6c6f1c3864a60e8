// A 0/1 integer linear program and an exact solver for it (COIN-OR CBC, when
// fxremat is built with it: CMake finds `cbc` through pkg-config; Debian's
// coinor-libcbc-dev, installed by tools/setup.sh). The budget solver uses it
// for Note [Budget MILP] on small graphs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fxremat/status.h"

namespace fxremat {

// minimize objective . x  subject to  row_lower <= A x <= row_upper,
// lower <= x <= upper, x integral (every variable is 0/1 in practice).
// A is given as triplets (rows[i], cols[i], coefs[i]).
struct BinaryProgram {
  std::vector<std::string> variables;
  std::vector<double> objective, lower, upper;
  std::vector<int64_t> rows, cols;
  std::vector<double> coefs;
  std::vector<double> row_lower, row_upper;
};

// Whether SolveBinaryProgram can solve anything: this build has CBC and its
// library opens (Note [CBC loaded on demand] in src/binary_program.cpp).
bool BinaryProgramSolverAvailable();

// Whether this build was configured with CBC (whatever the run-time loader
// then finds).
bool BinaryProgramSolverBuilt();

// The best solution CBC finds within `max_nodes` branch-and-bound nodes (a
// node limit, not a time limit: the answer must not depend on the machine's
// speed), single-threaded; nullopt when it finds none (infeasible, or the
// limit hit first) or when the build has no solver.
Expected<std::optional<std::vector<double>>> SolveBinaryProgram(const BinaryProgram& program, int64_t max_nodes);

}  // namespace fxremat
