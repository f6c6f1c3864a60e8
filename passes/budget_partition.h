// budget_partition: choose the saved values so that the step's simulated peak
// (fxremat/peak_model.h) stays within a budget, at the least recompute cost.
//
// Note [Peak budget]
// Saving fewer bytes does not lower the peak by itself: "save only the inputs"
// makes the backward replay the whole forward before its first gradient, and
// every activation is alive again at once. What lowers the peak is where the
// backward recomputes: one segment of the forward at a time, each from values
// saved at its start (per-layer checkpointing, found here without annotations).
// The solver
//   1. sweeps the forward in graph order and measures the frontier at each
//      position: the bytes of the values defined up to there that later forward
//      ops read. Positions where the frontier is locally smallest (layer
//      boundaries, residual streams) are the candidate checkpoints;
//   2. for a range of segment sizes T, picks by dynamic programming the
//      checkpoints with the fewest frontier bytes such that no segment between
//      two of them allocates more than T; the saved set is the union of their
//      frontiers (plus what may never be recomputed: random ops no tag asks
//      to recompute or whose draw cannot be replayed, values that read mutated
//      inputs, MUST_SAVE; a tagged random op that is recomputed replays its
//      draw, and the saved RNG state counts: Note [Replaying random ops]);
//   3. adds the min cut's solution and "only the inputs" to the candidates,
//      emits each (extraction and the autograd-engine order, exactly what the
//      pipeline emits) and simulates its peak and its recompute cost (the ops
//      that run in both graphs: flops of matmul / convolution / attention from
//      shapes, plus recompute_flops_per_byte per byte moved); from the lowest
//      of them, a local search that takes only moves lowering the simulated
//      peak adds one more (Note [Peak descent] in budget_partition.cpp);
//   4. keeps the cheapest candidate within the budget, then adds saved values
//      back, the most recompute cost avoided per byte first, as long as the
//      simulated peak stays within the budget; drops saved values from the min
//      cut likewise; searches locally (single and pair moves), then anneals,
//      rebuilds, inserts-and-repairs and oscillates across the budget's edge
//      (Note [Searching the saved set] in budget_partition.cpp; graphs of up
//      to 4,096 nodes);
//   5. when budget_milp_max_variables allows, solves Note [Budget MILP] with
//      CBC and searches locally from its saved set too; the cheaper wins;
//   6. when offload_bandwidth_gbps is set and the step runs on an accelerator,
//      offloads saved values to host where that is cheaper than recomputing
//      (Note [Offload in the budget] in budget_partition.cpp).
// The budget is memory_budget_bytes, or smallest + activation_memory_budget *
// (min cut - smallest), where smallest is the lowest peak among the
// candidates. A budget below it is met by the budget-0 solve when the searches
// from the lowest candidate come in lower; otherwise it is a bad-input error
// that states the peak that solve reaches. The emitted partition's peak is checked again after extraction
// (RunPartition): the budget holds by construction, never by luck.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/partition_options.h"
#include "fxremat/peak_model.h"
#include "fxremat/status.h"
#include "src/binary_program.h"

namespace fxremat {

struct BudgetSolution {
  std::vector<Node*> saved_values;  // joint-graph nodes, in graph order
  // The saved values to offload to host (Note [Offload in the budget] in
  // budget_partition.cpp); empty unless offload_bandwidth_gbps is set.
  std::vector<Node*> offloaded_values;
  int64_t offloaded_bytes = 0;
  int64_t budget_bytes = 0;         // the bound applied
  int64_t peak_bytes = 0;           // the chosen partition's simulated peak
  int64_t smallest_peak_bytes = 0;  // the lowest among the candidates' and the chosen partition's
  int64_t min_cut_peak_bytes = 0;   // the min cut's
  double recompute_cost = 0;        // flops-equivalent recomputed in the backward
  double min_cut_recompute_cost = 0;
  int64_t candidates_evaluated = 0;
  std::string label;  // the winning candidate ("segments of <= 4096 B + local search")
};

// Whether the options ask for a peak budget (budget_objective "peak" and a
// fraction below 1 or a byte budget).
bool WantsPeakBudget(const MinCutOptions& options);

// Solves the budget on a graph the min cut's preparation stages already ran on.
Expected<BudgetSolution> SolvePeakBudget(const Graph& prepared, const MinCutOptions& options);

// The front (FrontPoint, fxremat/peak_model.h): the candidate partitions the
// solver weighs, each with its peak and recompute cost, then `points` budgets.
Expected<std::vector<FrontPoint>> PeakFront(const Graph& prepared, const MinCutOptions& options, int points);

// The reference the solver is tested against: every subset of the forward
// values that allocate (at most `max_candidates` of them, else bad input), each
// emitted and simulated as the solver's candidates are; returns the Pareto
// front (for each peak, the least recompute cost), by increasing peak.
Expected<std::vector<FrontPoint>> ExhaustiveFront(const Graph& prepared, const MinCutOptions& options,
                                                  int max_candidates);

// Note [Budget MILP]
// The reference the solver is cross-checked against (tests/python/
// test_budget_milp.py solves it with scipy's HiGHS milp): Checkmate's
// formulation (Jain et al., 2020) restricted to the execution model every
// fxremat partition has -- the forward runs once, in graph order; the backward
// runs its own ops in the autograd-engine order; recomputation happens only in
// the backward. The time steps are the backward ops that read a forward value
// ("use points", taken from the nothing-recomputed partition). Per allocating
// forward value v (its storage: views are free and share it):
//   s_v      saved by the forward (fixed to 1 for user outputs, which the
//            caller holds anyway, and for untagged or unreplayable
//            random ops / values that read mutated inputs / MUST_SAVE, to 0
//            for MUST_RECOMPUTE);
//   a_{v,k}  resident at use point k;  r_{v,k}  recomputed just before it.
// Constraints: a_{v,k} <= a_{v,k-1} + r_{v,k} (a_{v,0} = s_v); s_v + sum_k
// r_{v,k} <= 1 (the emitted backward runs each node once and keeps a saved
// value until its last read: nothing is dropped and recomputed later, nothing
// recomputed twice); what op k reads is resident; a recompute's inputs are
// resident at its point; at each use point the resident bytes plus the
// backward's own live bytes (the most since the previous point; a tuple op's
// items allocated at the op, with its inputs) plus the forward outputs are
// within the budget; at each forward op the live bytes plus the saved values
// the forward no longer reads are within it. Objective: sum of r_{v,k} *
// RecomputeCost. It is a model, not the simulator: a value recomputed at a
// point counts for the whole point (the simulator frees a recompute-only
// intermediate sooner), a tuple op's items each pay the op, and the backward's
// own bytes are those of the nothing-recomputed order. The test therefore
// compares costs at equal budgets and also simulates the MILP's saved set
// (EvaluateSavedSet).
struct BudgetMilp {
  // Variables "s:<value>", "a:<value>@<point>", "r:<value>@<point>", all 0/1.
  BinaryProgram program;
  std::vector<int64_t> save_variables;  // the s_v, with the value names below
  std::vector<std::string> save_names;
  bool constant_infeasible = false;  // what nothing can free is already over the budget
  bool too_large = false;            // not built: over the variable limit asked for
};
Expected<BudgetMilp> BuildBudgetMilp(const Graph& prepared, const MinCutOptions& options, int64_t budget_bytes);

// The partition that saves the inputs, the forced values and the named ones,
// emitted and simulated as the solver does: its peak, cost and saved bytes.
Expected<FrontPoint> EvaluateSavedSet(const Graph& prepared, const MinCutOptions& options,
                                      const std::vector<std::string>& saved_names);

// The recompute cost of one op (Note [Peak budget], step 3).
double RecomputeCost(const Node& n, double flops_per_byte);

// The recompute cost of a partition: the ops its backward runs again, i.e. the
// call_function nodes of `backward` that `forward` also runs (the same name and
// target: both graphs come from one joint graph), as the solver prices a
// candidate. Work the backward does once (ops outside the forward) is free.
double PartitionRecomputeCost(const Graph& forward, const Graph& backward, double flops_per_byte);

}  // namespace fxremat
