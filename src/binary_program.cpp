// The exact 0/1 program solver (src/binary_program.h).
#include "src/binary_program.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#ifdef FXREMAT_HAVE_CBC
#include <Cbc_C_Interface.h>
#endif

namespace fxremat {

bool BinaryProgramSolverAvailable() {
#ifdef FXREMAT_HAVE_CBC
  return true;
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
  Cbc_Model* model = Cbc_newModel();
  Cbc_setLogLevel(model, 0);
  Cbc_loadProblem(model, static_cast<int>(n), static_cast<int>(p.row_lower.size()), start.data(), index.data(),
                  value.data(), p.lower.data(), p.upper.data(), p.objective.data(), p.row_lower.data(),
                  p.row_upper.data());
  for (size_t j = 0; j < n; ++j) Cbc_setInteger(model, static_cast<int>(j));
  Cbc_setMaximumNodes(model, static_cast<int>(std::min<int64_t>(max_nodes, 1 << 30)));
  Cbc_setParameter(model, "threads", "1");
  // Measured on the budget MILPs of the random corpus: CBC's cut generation
  // costs more time than it saves within a small node limit.
  Cbc_setParameter(model, "cuts", "off");
  Cbc_solve(model);
  std::optional<std::vector<double>> out;
  if (!Cbc_isProvenInfeasible(model) && Cbc_bestSolution(model) != nullptr) {
    const double* x = Cbc_bestSolution(model);
    out = std::vector<double>(x, x + n);
  }
  Cbc_deleteModel(model);
  return out;
#else
  (void)max_nodes;
  return std::optional<std::vector<double>>();
#endif
}

}  // namespace fxremat
