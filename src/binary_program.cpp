// The exact 0/1 program solver (src/binary_program.h).
#include "src/binary_program.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#ifdef FXREMAT_HAVE_CBC
#include <dlfcn.h>

#include <Cbc_C_Interface.h>
#endif

namespace fxremat {

#ifdef FXREMAT_HAVE_CBC
namespace {

// Note [CBC loaded on demand]
// CBC is linked at run time, not at build time: a process linked against
// libCbcSolver loads it and eleven libraries under it (Clp, Cgl, Osi,
// CoinUtils, LAPACK, BLAS, gfortran, ...) at start and binds their symbols,
// about 8 ms of a CLI run that needs ~3 ms for a small graph, and every later
// lazy symbol look-up searches them too. Only the budget MILP candidate
// (budget_milp_max_variables > 0, off by default) calls CBC, so it is opened
// with dlopen the first time the MILP is asked whether it can run, local to
// this file (RTLD_LOCAL): first by the soname of the library CMake found
// (FXREMAT_CBC_SONAME, through the loader's search path), then by its path
// (FXREMAT_CBC_PATH), then by the development link name. Where none opens, the build
// behaves as one without CBC: the candidate is skipped.
struct CbcApi {
  decltype(&Cbc_newModel) newModel = nullptr;
  decltype(&Cbc_setLogLevel) setLogLevel = nullptr;
  decltype(&Cbc_loadProblem) loadProblem = nullptr;
  decltype(&Cbc_setInteger) setInteger = nullptr;
  decltype(&Cbc_setMaximumNodes) setMaximumNodes = nullptr;
  decltype(&Cbc_setParameter) setParameter = nullptr;
  decltype(&Cbc_solve) solve = nullptr;
  decltype(&Cbc_isProvenInfeasible) isProvenInfeasible = nullptr;
  decltype(&Cbc_bestSolution) bestSolution = nullptr;
  decltype(&Cbc_deleteModel) deleteModel = nullptr;
};

template <typename Fn>
bool Bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  return fn != nullptr;
}

// The API, opened once (thread-safe: the budget front solves on two threads);
// null when CBC cannot be opened. The library stays open for the process.
const CbcApi* Cbc() {
  static const CbcApi* const api = []() -> const CbcApi* {
    void* library = nullptr;
    for (const char* name : {FXREMAT_CBC_SONAME, FXREMAT_CBC_PATH, "libCbcSolver.so"})
      if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (library == nullptr) return nullptr;
    static CbcApi loaded;
    const bool bound = Bind(library, "Cbc_newModel", loaded.newModel) &&
                       Bind(library, "Cbc_setLogLevel", loaded.setLogLevel) &&
                       Bind(library, "Cbc_loadProblem", loaded.loadProblem) &&
                       Bind(library, "Cbc_setInteger", loaded.setInteger) &&
                       Bind(library, "Cbc_setMaximumNodes", loaded.setMaximumNodes) &&
                       Bind(library, "Cbc_setParameter", loaded.setParameter) &&
                       Bind(library, "Cbc_solve", loaded.solve) &&
                       Bind(library, "Cbc_isProvenInfeasible", loaded.isProvenInfeasible) &&
                       Bind(library, "Cbc_bestSolution", loaded.bestSolution) &&
                       Bind(library, "Cbc_deleteModel", loaded.deleteModel);
    return bound ? &loaded : nullptr;
  }();
  return api;
}

}  // namespace
#endif

bool BinaryProgramSolverBuilt() {
#ifdef FXREMAT_HAVE_CBC
  return true;
#else
  return false;
#endif
}

bool BinaryProgramSolverAvailable() {
#ifdef FXREMAT_HAVE_CBC
  return Cbc() != nullptr;
#else
  return false;
#endif
}

Expected<std::optional<std::vector<double>>> SolveBinaryProgram(const BinaryProgram& p, int64_t max_nodes) {
  const size_t n = p.variables.size();
  if (p.objective.size() != n || p.lower.size() != n || p.upper.size() != n || p.rows.size() != p.cols.size() ||
      p.rows.size() != p.coefs.size() || p.row_lower.size() != p.row_upper.size())
    return Status::Internal("binary program: inconsistent array sizes");
#ifdef FXREMAT_HAVE_CBC
  const CbcApi* cbc = Cbc();
  if (cbc == nullptr) return std::optional<std::vector<double>>();
  if (n == 0) return std::optional<std::vector<double>>(std::vector<double>{});
  // Compressed sparse columns, as Cbc_loadProblem takes them.
  std::vector<size_t> order(p.rows.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.cols[a] < p.cols[b]; });
  std::vector<CoinBigIndex> start(n + 1, 0);
  std::vector<int> index;
  std::vector<double> value;
  index.reserve(order.size());
  value.reserve(order.size());
  for (size_t k : order) {
    ++start[static_cast<size_t>(p.cols[k]) + 1];
    index.push_back(static_cast<int>(p.rows[k]));
    value.push_back(p.coefs[k]);
  }
  for (size_t j = 0; j < n; ++j) start[j + 1] += start[j];
  Cbc_Model* model = cbc->newModel();
  cbc->setLogLevel(model, 0);
  cbc->loadProblem(model, static_cast<int>(n), static_cast<int>(p.row_lower.size()), start.data(), index.data(),
                   value.data(), p.lower.data(), p.upper.data(), p.objective.data(), p.row_lower.data(),
                   p.row_upper.data());
  for (size_t j = 0; j < n; ++j) cbc->setInteger(model, static_cast<int>(j));
  cbc->setMaximumNodes(model, static_cast<int>(std::min<int64_t>(max_nodes, 1 << 30)));
  cbc->setParameter(model, "threads", "1");
  // Measured on the budget MILPs of the random corpus: CBC's cut generation
  // costs more time than it saves within a small node limit.
  cbc->setParameter(model, "cuts", "off");
  cbc->solve(model);
  std::optional<std::vector<double>> out;
  if (!cbc->isProvenInfeasible(model) && cbc->bestSolution(model) != nullptr) {
    const double* x = cbc->bestSolution(model);
    out = std::vector<double>(x, x + n);
  }
  cbc->deleteModel(model);
  return out;
#else
  (void)max_nodes;
  return std::optional<std::vector<double>>();
#endif
}

}  // namespace fxremat
