// The peak-budget solver (Note [Peak budget] in passes/budget_partition.h).
#include "passes/budget_partition.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fxremat/op_categories.h"
#include "fxremat/peak_model.h"
#include "fxremat/phases.h"
#include "passes/emit_offload.h"
#include "passes/functionalize_rng.h"
#include "passes/min_cut_partition.h"
#include "passes/raise_getitems.h"
#include "passes/reorder_backward.h"
#include "src/partition_internal.h"

namespace fxremat {

// Threads the solver may use (Note [Threads in the front], Note [Candidates
// on several threads]): up to 4, at most the machine's cores or the
// environment's FXREMAT_THREADS.
static unsigned SolverThreads() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (const char* env = std::getenv("FXREMAT_THREADS")) {
    const long asked = std::strtol(env, nullptr, 10);
    if (asked >= 1) cores = static_cast<unsigned>(std::min(asked, 64L));
  }
  return std::min(cores, 4u);
}

// fn(i) for every i in [0, count), on up to `threads` threads (this one
// among them), each taking the next index; fewer when a thread cannot start.
template <typename Fn>
void ForEachOnThreads(unsigned threads, size_t count, const Fn& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < count;) fn(i);
  };
  std::vector<std::thread> pool;
  try {
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {
    // Fewer threads: the others take what is left.
  }
  work();
  for (std::thread& t : pool) t.join();
}

bool WantsPeakBudget(const MinCutOptions& options) {
  return options.budget_objective == "peak" &&
         (options.memory_budget_bytes.has_value() || options.activation_memory_budget < 1.0);
}

namespace {

// A value a checkpoint tag asks to recompute and that may be: every candidate
// recomputes it. A random op qualifies only where its draw is replayed (Note
// [Replaying random ops]); otherwise it is a forced save.
bool TaggedRecompute(const Node& n) { return MustRecompute(n) && !RandomOpMustBeSaved(n); }

int64_t ProductOf(const TensorFacts& t, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to && i < t.shape.size(); ++i) n *= std::max<int64_t>(t.shape[i].hint, 0);
  return n;
}

const TensorFacts* TensorArg(const Node& n, size_t i) {
  if (i >= n.args().size() || !n.args()[i].is_node()) return nullptr;
  const ValueFacts& v = n.args()[i].node->val();
  return v.is_tensor() ? &v.tensor : nullptr;
}

// Multiply-adds * 2 of the compute-bound ops, from shapes; 0 for the others.
double Flops(const Node& n) {
  const std::string& t = n.target();
  const ValueFacts& out = n.val();
  auto out_numel = [&]() -> double {
    if (out.is_tensor()) return static_cast<double>(out.tensor.numel());
    if (out.kind == ValueFacts::Kind::kTuple && !out.items.empty() && out.items[0].is_tensor())
      return static_cast<double>(out.items[0].tensor.numel());
    return 0;
  };
  auto inner = [&](size_t arg) -> double {  // the contracted dimension: the last of the left operand
    const TensorFacts* a = TensorArg(n, arg);
    return a && !a->shape.empty() ? static_cast<double>(a->shape.back().hint) : 0;
  };
  if (t == "aten.mm.default" || t == "aten.bmm.default") return 2 * out_numel() * inner(0);
  if (t == "aten.addmm.default" || t == "aten.baddbmm.default") return 2 * out_numel() * inner(1);
  if (t.rfind("aten.convolution", 0) == 0 || t.rfind("aten.cudnn_convolution", 0) == 0) {
    const TensorFacts* w = TensorArg(n, 1);
    if (!w || w->shape.empty() || w->shape[0].hint <= 0) return 0;
    return 2 * out_numel() * static_cast<double>(w->numel() / w->shape[0].hint);
  }
  if (t.find("scaled_dot_product") != std::string::npos || t.find("flash_attention") != std::string::npos ||
      t.find("efficient_attention") != std::string::npos) {
    const TensorFacts* q = TensorArg(n, 0);
    const TensorFacts* k = TensorArg(n, 1);
    if (!q || !k || q->shape.size() < 2 || k->shape.size() < 2) return 0;
    double lq = static_cast<double>(ProductOf(*q, 0, q->shape.size()));  // B*H*L*D
    double s = static_cast<double>(k->shape[k->shape.size() - 2].hint);
    return 4 * lq * s;
  }
  return 0;
}

}  // namespace

namespace {

double GraphCost(const Graph& g, double flops_per_byte) {
  double cost = 0;
  for (const auto& up : g.nodes()) cost += RecomputeCost(*up, flops_per_byte);
  return cost;
}

// Note [Higher-order ops]: a HOP costs what its bodies cost: cond the dearer
// branch, map_impl its body once per slice of its mapped inputs, any other
// (invoke_subgraph, ...) each body it calls once.
double HigherOrderCost(const Node& n, double flops_per_byte) {
  const Graph& owner = *n.owningGraph();
  double total = 0, dearest = 0;
  for (const Argument& a : n.args()) {
    if (!a.is_node()) continue;
    const Graph* body = owner.subgraphOf(*a.node);
    if (!body) continue;
    const double c = GraphCost(*body, flops_per_byte);
    total += c;
    dearest = std::max(dearest, c);
  }
  if (n.target() == "higher_order.cond") return dearest;
  if (n.target() == "higher_order.map_impl" && n.args().size() >= 2 && n.args()[1].kind == Argument::Kind::kList &&
      !n.args()[1].list.empty() && n.args()[1].list[0].is_node()) {
    const ValueFacts& xs = n.args()[1].list[0].node->val();
    if (xs.is_tensor() && !xs.tensor.shape.empty()) return total * static_cast<double>(xs.tensor.shape[0].hint);
  }
  return total;
}

// Note [Constant values are recomputed]: by node index, whether `g`'s value
// is computed from no input -- a call, neither random nor impure, whose
// inputs are all tensor constants (get_attr) or such values themselves.
std::vector<bool> ComputedFromNoInput(const Graph& g) {
  std::vector<bool> constant(g.size(), false);
  for (const auto& up : g.nodes()) {
    const Node& n = *up;
    if (!n.isCallFunction() || IsRandomOp(n) || IsImpure(n)) continue;
    bool from_nothing = true;
    for (const Node* x : n.inputs()) from_nothing = from_nothing && (x->op() == OpKind::kGetAttr || constant[x->index()]);
    constant[n.index()] = from_nothing;
  }
  return constant;
}

}  // namespace

double RecomputeCost(const Node& n, double flops_per_byte) {
  if (!n.isCallFunction() || n.isGetItem() || IsAliasOp(n)) return 0;
  if (IsHigherOrderTarget(n.target())) return HigherOrderCost(n, flops_per_byte);
  double bytes = static_cast<double>(n.val().nbytes());
  for (const Node* in : n.inputs())
    if (in->val().is_tensor()) bytes += static_cast<double>(in->val().tensor.nbytes());
  return Flops(n) + flops_per_byte * bytes;
}

double PartitionRecomputeCost(const Graph& forward, const Graph& backward, double flops_per_byte) {
  double cost = 0;
  // Note [Constant values are recomputed]: a value the backward computes from
  // no input costs nothing, as when it was saved (PyTorch's min cut prices it so).
  const std::vector<bool> constant = ComputedFromNoInput(backward);
  for (const auto& up : backward.nodes()) {
    if (!up->isCallFunction() || constant[up->index()]) continue;
    const Node* f = forward.findNode(up->name());
    if (f && f->isCallFunction() && f->target() == up->target()) cost += RecomputeCost(*up, flops_per_byte);
  }
  return cost;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Evaluation {
  int64_t peak = 0;
  double cost = 0;  // recompute cost, plus the transfers' (Note [Offload in the budget])
  int64_t saved_bytes = 0;
  int64_t offloaded_bytes = 0;
};

class BudgetSolver {
 public:
  BudgetSolver(const Graph& g, const MinCutOptions& options) : g_(g), options_(options) {}

  Status Prepare() {
    FXREMAT_ASSIGN_OR_RETURN(c_, ClassifyJoint(g_));
    // Note [Offload in the budget]: only a step on an accelerator has a host to
    // offload to.
    if (options_.offload_bandwidth_gbps > 0 && MainDevice(g_) != "cpu")
      offload_cost_per_byte_ = 2.0 * options_.recompute_flops_per_byte * options_.device_memory_bandwidth_gbps /
                               options_.offload_bandwidth_gbps;
    offload_ = options_.OffloadOptionsFor(options_.offload_target == OffloadTarget::kTorchAsync
                                              ? OffloadTarget::kTorchAsync
                                              : OffloadTarget::kTorch);
    const size_t n = g_.size();
    pos_.assign(n, -1);
    is_forward_.assign(n, false);
    for (const auto& up : g_.nodes()) {
      const Node* node = up.get();
      if (node->isCallFunction() && !c_.in_tangents_closure[node->index()] && c_.required_by_forward[node->index()]) {
        is_forward_[node->index()] = true;
        pos_[node->index()] = static_cast<int64_t>(forward_.size());
        forward_.push_back(node);
      }
    }
    // The allocating root of each value (views and aliases share it; inputs and
    // constants have none: they are the baseline).
    root_.assign(n, nullptr);
    for (const auto& up : g_.nodes()) {
      const Node* node = up.get();
      if (!node->isCallFunction()) continue;
      const Node* source = nullptr;
      if (SharesStorage(*node, &source)) root_[node->index()] = source ? root_[source->index()] : nullptr;
      else if (node->isGetItem() || node->val().kind != ValueFacts::Kind::kTuple) root_[node->index()] = node;
    }
    // Where each value is last read by the forward (its own position if never).
    last_fwd_.assign(n, -1);
    for (const Node* node : forward_) {
      int64_t last = pos_[node->index()];
      for (const Node* u : node->users())
        if (is_forward_[u->index()]) last = std::max(last, pos_[u->index()]);
      last_fwd_[node->index()] = last;
    }
    // Frontier bytes at each position: distinct roots alive across it.
    const size_t k = forward_.size();
    std::vector<int64_t> root_end(n, -1);
    for (const Node* node : forward_)
      if (const Node* r = root_[node->index()]; r && is_forward_[r->index()])
        root_end[r->index()] = std::max(root_end[r->index()], last_fwd_[node->index()]);
    std::vector<int64_t> delta(k + 1, 0);
    prefix_.assign(k + 1, 0);
    for (const Node* node : forward_) {
      const int64_t p = pos_[node->index()];
      const int64_t bytes = root_[node->index()] == node ? StorageBytesOf(*node) : 0;
      prefix_[static_cast<size_t>(p) + 1] = prefix_[static_cast<size_t>(p)] + bytes;
      if (root_[node->index()] == node && root_end[node->index()] > p) {
        delta[static_cast<size_t>(p)] += bytes;
        delta[static_cast<size_t>(root_end[node->index()])] -= bytes;
      }
    }
    frontier_.assign(k, 0);
    int64_t running = 0;
    for (size_t i = 0; i < k; ++i) frontier_[i] = running += delta[i];
    // Note [Constant values are recomputed]: a value computed from no input
    // (a full, an arange, an index tensor, and ops on those and on tensor
    // constants) costs the backward nothing to recompute and no saved input;
    // saving one hands the backward a runtime tensor where a constant was. The
    // min cut never saves one (no path from an input reaches it), and PyTorch's
    // partitions recompute them too. Saved by the budget solver (its "nothing
    // recomputed" candidate keeps every value the backward reads), such a value
    // became a backward input; Inductor then miscompiled Falcon's backward at
    // budget 0.3 (index_put with the saved negative index tensors [-2] and
    // [-1]: wrong gradients, heap corruption), where fw+bw run eagerly were
    // exact. Random and impure ops are never constants: a draw is not replayed.
    constant_ = ComputedFromNoInput(g_);
    // Values that may never be recomputed in the backward: always saved.
    is_forced_.assign(n, false);
    for (const auto& up : g_.nodes()) {
      const Node* node = up.get();
      if (!node->isCallFunction() || c_.in_tangents_closure[node->index()]) continue;
      if (!node->val().is_tensor() && !node->val().is_sym()) continue;
      const Node* tuple = node->isGetItem() && node->args()[0].is_node() ? node->args()[0].node : nullptr;
      const bool forced = RandomOpMustBeSaved(*node) || !node->meta().rare().reads_mutated.empty() ||
                          (tuple && !tuple->meta().rare().reads_mutated.empty()) || MustBeInForward(*node) ||
                          (tuple && MustBeInForward(*tuple)) || node->meta().recompute == Decision::kMustSave;
      if (forced) is_forced_[node->index()] = true;
    }
    BuildSearchArrays();
    return Status::Ok();
  }

  // The flat form SearchCost walks (Note [Searching the saved set]).
  void BuildSearchArrays() {
    const size_t n = g_.size();
    flags_.assign(n, 0);
    node_cost_.assign(n, 0.0);
    in_off_.assign(n + 1, 0);
    us_off_.assign(n + 1, 0);
    in_idx_.clear();
    us_idx_.clear();
    for (const auto& up : g_.nodes()) {
      const Node& node = *up;
      const size_t i = node.index();
      uint8_t f = 0;
      if (node.isPlaceholder()) f |= kPlaceholder;
      if (node.isOutput()) f |= kOutput;
      if (node.isCallFunction()) f |= kCall;
      if (c_.sides.forward_only[i]) f |= kForwardOnly;
      if (c_.sides.impure[i]) f |= kImpure;
      if (c_.in_tangents_closure[i]) f |= kTangentClosure;
      if (c_.forward_computable[i] && c_.sides.impure[i]) f |= kForwardSeed;  // the forward's plan keeps it
      flags_[i] = f;
      // A random op that the backward reruns is a replay of its draw, which
      // FunctionalizeRng renames on both sides (a getitem in the forward,
      // run_with_rng_state in the backward): PartitionRecomputeCost does not count it.
      node_cost_[i] = IsRandomOp(node) || constant_[i] ? 0.0 : RecomputeCost(node, options_.recompute_flops_per_byte);
      for (const Node* x : node.inputs()) in_idx_.push_back(static_cast<int32_t>(x->index()));
      for (const Node* u : node.users()) us_idx_.push_back(static_cast<int32_t>(u->index()));
      in_off_[i + 1] = static_cast<int32_t>(in_idx_.size());
      us_off_[i + 1] = static_cast<int32_t>(us_idx_.size());
    }
    // What the backward reads besides the saved values.
    for (const Node* t : c_.tangents) flags_[t->index()] |= kBwInput;
    for (const Node* r : c_.bwd_rng) flags_[r->index()] |= kBwInput;
    for (const Node* p : c_.primals)
      if (p->val().kind == ValueFacts::Kind::kOpaque) flags_[p->index()] |= kBwInput;
    bw_outputs_.clear();
    for (const Node* o : c_.backward_outputs)
      if (o) bw_outputs_.push_back(static_cast<int32_t>(o->index()));
    for (const Node* o : c_.forward_outputs)
      if (o) flags_[o->index()] |= kForwardSeed;
    const std::vector<bool> base = BaseSet();
    base_.assign(n, 0);
    for (const auto& up : g_.nodes()) base_[up->index()] = base[up->index()] && Collectable(*up);
  }

  int64_t StorageBytesOf(const Node& n) const {
    return n.val().is_tensor() ? StorageBytes(n.val().tensor) : 0;
  }

  // The saved set for checkpoints at `positions`: the values crossing each,
  // with MUST_RECOMPUTE values replaced by their inputs, plus the forced saves.
  std::vector<Node*> SavedForCheckpoints(const std::vector<int64_t>& positions) const {
    std::vector<bool> in = BaseSet();
    std::vector<const Node*> stack;
    for (int64_t t : positions)
      for (const Node* node : forward_) {
        const int64_t p = pos_[node->index()];
        if (p <= t && last_fwd_[node->index()] > t) stack.push_back(node);
      }
    std::vector<bool> seen(g_.size(), false);
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      if (seen[node->index()]) continue;
      seen[node->index()] = true;
      if (!node->isCallFunction() || !root_[node->index()] || root_[node->index()]->isPlaceholder()) continue;
      if (constant_[node->index()]) continue;  // Note [Constant values are recomputed]
      if (node->val().kind == ValueFacts::Kind::kTuple) {
        for (const Node* u : node->users()) stack.push_back(u);
        continue;
      }
      if (!node->val().is_tensor()) continue;  // symints are recomputed from what is saved
      if (TaggedRecompute(*node)) {
        for (const Node* i : node->inputs()) stack.push_back(i);
        continue;
      }
      in[node->index()] = true;
    }
    return Collect(in);
  }

  // What every candidate saves: the inputs (always available to the backward;
  // unused ones are dropped) and the values that may never be recomputed.
  std::vector<bool> BaseSet() const {
    std::vector<bool> in = is_forced_;
    for (const Node* p : c_.primals) in[p->index()] = true;
    for (const Node* p : c_.fwd_rng) in[p->index()] = true;
    return in;
  }

  // A value a search move may save or stop saving: a tensor the forward
  // computes, not MUST_RECOMPUTE, not a view of an input (those are free) and
  // not a constant (Note [Constant values are recomputed]).
  bool Saveable(const Node& n) const {
    return n.isCallFunction() && !c_.in_tangents_closure[n.index()] && n.val().is_tensor() && !TaggedRecompute(n) &&
           root_[n.index()] && !root_[n.index()]->isPlaceholder() && !constant_[n.index()];
  }

  // A get_attr (a tensor constant, a higher-order op's subgraph) is never
  // saved: extraction copies it into every graph that reads it, as the min
  // cut's partitions have it.
  static bool Collectable(const Node& n) { return n.op() != OpKind::kGetAttr && !IsAssertOnlySymBool(n); }

  // The saved set `in` marks, less what is never saved: get_attrs, and the
  // constants no tag or forced save asks to keep (Note [Constant values are
  // recomputed]): every candidate and every search goes through here.
  std::vector<Node*> Collect(const std::vector<bool>& in) const {
    std::vector<Node*> out;
    for (const auto& up : g_.nodes()) {
      const size_t i = up->index();
      if (in[i] && Collectable(*up) && !(constant_[i] && !is_forced_[i])) out.push_back(up.get());
    }
    return out;
  }

  // Extraction in the pipeline's form, then the peak model and the cost.
  Expected<Evaluation> Evaluate(const std::vector<Node*>& saved, const std::vector<Node*>& offloaded = {}) {
    // The front's budget points revisit the same saved sets (the same binary
    // searches from the same candidates): each set is emitted once.
    const size_t bits = g_.size() / 8 + 1;
    std::string key(offloaded.empty() ? bits : 2 * bits, '\0');
    auto mark = [&key](size_t offset, const Node* n) {
      char& byte = key[offset + n->index() / 8];
      byte = static_cast<char>(byte | (1 << (n->index() % 8)));
    };
    for (const Node* n : saved) mark(0, n);
    for (const Node* n : offloaded) mark(bits, n);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    }
    ++evaluations_;
    FXREMAT_ASSIGN_OR_RETURN(Partition p, Emit(saved, offloaded));
    FXREMAT_ASSIGN_OR_RETURN(PeakEstimate e, SimulatePeak(p, options_.peak_model));
    Evaluation ev;
    ev.peak = e.peak_bytes;
    ev.saved_bytes = p.signature.savedBytes();
    ev.offloaded_bytes = p.signature.offloadedBytes();
    ev.cost = PartitionRecomputeCost(*p.forward, *p.backward, options_.recompute_flops_per_byte);
    if (ev.offloaded_bytes > 0)
      // A second of waiting costs the flops the device does in it (the
      // recompute cost counts a flop as one, and what the solver trades
      // against the wait is mostly matmuls).
      ev.cost += offload_.target == OffloadTarget::kTorchAsync
                     ? ExposedTransferSeconds(p, offload_) * offload_.device_flops_per_second
                     : offload_cost_per_byte_ * static_cast<double>(ev.offloaded_bytes);
    {
      std::lock_guard<std::mutex> lock(cache_mutex_);
      cache_.emplace(std::move(key), ev);  // a twin computed meanwhile by another thread is equal
    }
    return ev;
  }

  // The partition as the pipeline emits it: extraction, the random ops'
  // replay, the autograd-engine order, getitems raised, then the transfers of
  // the `offloaded` saved values (they must be saved).
  Expected<Partition> Emit(const std::vector<Node*>& saved, const std::vector<Node*>& offloaded = {}) const {
    // A scratch extraction: the partition lives while the solver does (it is
    // simulated and dropped), and the one kept is extracted again by the pipeline.
    ExtractOptions scratch;
    scratch.scratch = true;
    scratch.save_shared_storages_once = true;  // as the partition kept is extracted (min_cut_partition.cpp)
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractPartition(g_, c_, saved, "mincut", scratch));
    FXREMAT_RETURN_IF_ERROR(FunctionalizeRng(p).status());  // the saved RNG states count (Note [Replaying random ops])
    FXREMAT_RETURN_IF_ERROR(ReorderBackward(*p.backward).status());
    FXREMAT_RETURN_IF_ERROR(RaiseGetitems(*p.forward).status());
    FXREMAT_RETURN_IF_ERROR(RaiseGetitems(*p.backward).status());
    if (!offloaded.empty()) {
      MarkOffloadedValues(p, offloaded);
      FXREMAT_RETURN_IF_ERROR(EmitOffload(p, offload_).status());
    }
    return p;
  }

  // Checkpoint positions for segments of at most `limit` bytes (Note [Peak
  // budget], step 2): the fewest frontier bytes, by dynamic programming over
  // the candidate positions with a sliding-window minimum.
  std::vector<int64_t> Checkpoints(int64_t limit) const {
    const int64_t k = static_cast<int64_t>(forward_.size());
    std::vector<int64_t> points = {-1};
    for (int64_t t = 0; t + 1 < k; ++t) {
      const int64_t f = frontier_[static_cast<size_t>(t)];
      const bool left = t == 0 || f <= frontier_[static_cast<size_t>(t - 1)];
      const bool right = f <= frontier_[static_cast<size_t>(t + 1)];
      if (left && right) points.push_back(t);
    }
    points.push_back(k - 1);
    auto at = [&](int64_t t) { return prefix_[static_cast<size_t>(t + 1)]; };
    auto cost = [&](int64_t t) { return t < 0 || t == k - 1 ? 0 : frontier_[static_cast<size_t>(t)]; };
    const size_t m = points.size();
    std::vector<int64_t> best(m, 0), parent(m, -1);
    std::deque<size_t> window;  // indices i < j with increasing best
    size_t lo = 0;
    window.push_back(0);
    for (size_t j = 1; j < m; ++j) {
      while (lo < j - 1 && at(points[j]) - at(points[lo]) > limit) ++lo;
      while (!window.empty() && window.front() < lo) window.pop_front();
      size_t from = window.empty() ? j - 1 : window.front();
      best[j] = best[from] + cost(points[j]);
      parent[j] = static_cast<int64_t>(from);
      while (!window.empty() && best[window.back()] >= best[j]) window.pop_back();
      window.push_back(j);
    }
    std::vector<int64_t> chosen;
    for (int64_t j = parent[m - 1]; j > 0; j = parent[static_cast<size_t>(j)]) chosen.push_back(points[static_cast<size_t>(j)]);
    std::reverse(chosen.begin(), chosen.end());
    return chosen;
  }

  struct Candidate {
    std::vector<Node*> saved;
    Evaluation ev;
    std::string label;
    std::vector<Node*> offloaded;  // among `saved` (Note [Offload in the budget])
  };

  // Step 3: the min cut, "only the inputs" and the segmentations.
  Status BuildCandidates() {
    MinCutOptions cut = options_;
    cut.activation_memory_budget = 1.0;
    cut.memory_budget_bytes.reset();
    FXREMAT_ASSIGN_OR_RETURN(MinCutSolution mc, SolveMinCut(g_, cut));
    std::vector<Node*> mc_saved;
    for (Node* n : mc.saved_values)
      if (Collectable(*n)) mc_saved.push_back(n);  // as CutPreparedGraph: the min cut unchanged
    FXREMAT_RETURN_IF_ERROR(Add(mc_saved, "min cut"));
    min_cut_ = candidates_.back();
    // The pool for step 4: what the min cut saves and what the backward reads.
    std::vector<bool> in(g_.size(), false);
    for (Node* n : mc_saved) in[n->index()] = true;
    for (const auto& up : g_.nodes())
      if (c_.in_tangents_closure[up->index()])
        for (Node* i : up->inputs())
          if (i->isCallFunction() && !c_.in_tangents_closure[i->index()]) in[i->index()] = true;
    for (const auto& up : g_.nodes()) {
      const Node* n = up.get();
      if (!in[n->index()] || !n->val().is_tensor() || TaggedRecompute(*n)) continue;
      if (!root_[n->index()] || root_[n->index()]->isPlaceholder() || constant_[n->index()]) continue;
      pool_.push_back(up.get());
    }
    auto by_density = [&](const Node* a, const Node* b) {
      auto density = [&](const Node* n) {
        return RecomputeCost(*n, options_.recompute_flops_per_byte) / static_cast<double>(std::max<int64_t>(1, StorageBytesOf(*n)));
      };
      return density(a) > density(b);
    };
    std::stable_sort(pool_.begin(), pool_.end(), by_density);
    // Step 4's moves: every value that may be saved (views of the inputs are free).
    for (const auto& up : g_.nodes())
      if (Saveable(*up)) movable_.push_back(up.get());
    std::stable_sort(movable_.begin(), movable_.end(), by_density);
    FXREMAT_RETURN_IF_ERROR(Add(NothingRecomputed(), "nothing recomputed"));
    FXREMAT_RETURN_IF_ERROR(Add(SavedForCheckpoints({}), "inputs only"));
    const int64_t total = prefix_.back();
    int64_t largest = 1;
    for (size_t i = 0; i + 1 < prefix_.size(); ++i) largest = std::max(largest, prefix_[i + 1] - prefix_[i]);
    // A geometric grid of segment sizes, fine enough to step from one
    // segmentation to the next: the peak jumps as the checkpoints change, and
    // the 24-point grid used before (20% steps) missed GPT-2's per-layer
    // segmentation. Limits that give the same checkpoints are evaluated once.
    std::set<std::vector<int64_t>> tried;
    std::vector<std::pair<std::vector<Node*>, int64_t>> segmentations;  // saved set, segment limit
    constexpr int kGrid = 120;
    for (int i = 0; i < kGrid && total > 0; ++i) {
      const double ratio = static_cast<double>(std::max(total, largest)) / static_cast<double>(largest);
      const auto limit = static_cast<int64_t>(static_cast<double>(largest) * std::pow(ratio, i / double(kGrid - 1)));
      std::vector<int64_t> chosen = Checkpoints(limit);
      if (chosen.empty() || !tried.insert(chosen).second) continue;
      segmentations.emplace_back(SavedForCheckpoints(chosen), limit);
    }
    // Note [Candidates on several threads]: the segmentations are evaluated
    // first on the solver's threads, then added in grid order from the cache.
    std::vector<const std::vector<Node*>*> sets;
    for (const auto& [saved, limit] : segmentations) sets.push_back(&saved);
    EvaluateOnThreads(sets);
    for (auto& [saved, limit] : segmentations)
      FXREMAT_RETURN_IF_ERROR(Add(std::move(saved), fmt::format("segments of <= {} B", limit)));
    return DescendPeak();
  }

  // Note [Candidates on several threads]
  // Every candidate is emitted and simulated (Evaluate), and on a large graph
  // that is most of a solve: a 40,000-node synth graph's budget-0.5 solve
  // spent 3.7 of its 8.7 s extracting 124 partitions, most of them the
  // segment candidates. They are independent, so they are evaluated on up to
  // SolverThreads() threads (as the front's budgets, Note [Threads in the
  // front]) into the evaluation cache, and then added one by one, in order,
  // from it: the candidates, their order and every error are what one thread
  // finds (an evaluation that failed on a worker is simply not cached, and
  // fails again when added).
  void EvaluateOnThreads(const std::vector<const std::vector<Node*>*>& sets) {
    const unsigned threads = std::min<unsigned>(SolverThreads(), static_cast<unsigned>(sets.size()));
    if (threads < 2) return;
    PrepareForThreads();
    ForEachOnThreads(threads, sets.size(), [&](size_t i) { (void)Evaluate(*sets[i]); });
  }

  // Note [Peak descent]
  // Every search of step 4 lowers the cost under a budget; none lowers the
  // peak. So the smallest peak fxremat reached -- the budget-0 target and the
  // low end of activation_memory_budget's range -- was the lowest candidate's,
  // and on branchy graphs the segment candidates miss it: every forward
  // position is crossed by large values read late in the forward, while the
  // low-peak saved sets keep a few small values scattered across the graph.
  // PyTorch's budget-0.5 partition of the random program random_0001 peaked at
  // 20,568 B, below fxremat's lowest candidate (22,552 B): a budget between
  // them was refused as below the smallest peak (docs/benchmarks_budget.md).
  // So the lowest candidate also starts a local search (single and pair
  // toggles of LocalSearch) that takes a move only when it lowers the
  // simulated peak, strictly: a move that keeps the peak and lowers the cost
  // spent the allowance on a plateau (random_0030 stayed at 900 B; strict, it
  // reaches PyTorch's 780 B). Its result joins the candidates, so the
  // budget-0 target, the range of a fraction, the front and the error for a
  // budget below the smallest peak all count it; step 4 then lowers its cost.
  Status DescendPeak() {
    const Candidate* lowest = &LowestCandidate();
    Candidate start = *lowest;
    start.label = "peak descent from " + start.label;
    FXREMAT_ASSIGN_OR_RETURN(Candidate descended,
                             LocalSearch(std::move(start), [](const Evaluation& ev, const Evaluation& current) {
                               return ev.peak < current.peak;
                             }));
    if (descended.ev.peak < lowest->ev.peak) candidates_.push_back(std::move(descended));
    return Status::Ok();
  }

  // Nothing recomputed: what the backward reads, saved (the default partition's choice).
  std::vector<Node*> NothingRecomputed() const {
    std::vector<bool> all = BaseSet();
    for (const auto& up : g_.nodes())
      if (c_.in_tangents_closure[up->index()] && !up->isOutput())
        for (Node* i : up->inputs())
          if (!c_.in_tangents_closure[i->index()]) all[i->index()] = true;
    std::vector<Node*> saved;
    for (Node* n : Collect(all))
      if (!TaggedRecompute(*n) && n->val().kind != ValueFacts::Kind::kTuple) saved.push_back(n);
    return saved;
  }

  Status Add(std::vector<Node*> saved, std::string label) {
    FXREMAT_ASSIGN_OR_RETURN(Evaluation ev, Evaluate(saved));
    candidates_.push_back({std::move(saved), ev, std::move(label)});
    return Status::Ok();
  }

  // The first candidate of the smallest peak.
  const Candidate& LowestCandidate() const {
    const Candidate* lowest = &candidates_.front();
    for (const Candidate& c : candidates_)
      if (c.ev.peak < lowest->ev.peak) lowest = &c;
    return *lowest;
  }
  int64_t SmallestPeak() const { return LowestCandidate().ev.peak; }

  int64_t Target() const {
    if (options_.memory_budget_bytes) return *options_.memory_budget_bytes;
    const int64_t lo = SmallestPeak(), hi = std::max(lo, min_cut_.ev.peak);
    return lo + static_cast<int64_t>(std::floor(options_.activation_memory_budget * static_cast<double>(hi - lo)));
  }

  // Step 4 for one target.
  // `relaxed_offload`: also try the relaxed bases of Note [Overlapped offload
  // in the budget] (off inside that search itself).
  Expected<Candidate> Choose(int64_t target, bool relaxed_offload = true) {
    std::vector<const Candidate*> feasible;
    for (const Candidate& c : candidates_)
      if (c.ev.peak <= target) feasible.push_back(&c);
    if (feasible.empty()) {
      FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> offloading, OffloadCandidate(target, std::nullopt));
      if (offloading) return std::move(*offloading);
    }
    if (feasible.empty()) {
      // Below every candidate: the budget-0 solve (the searches from the
      // lowest candidate) can still come in lower, and then the smallest peak
      // fxremat reaches is its. Stating that figure keeps the error consistent
      // with what activation_memory_budget=0 returns.
      FXREMAT_ASSIGN_OR_RETURN(Candidate lowest, Choose(SmallestPeak()));
      if (lowest.ev.peak <= target) return lowest;
      return Status::BadInput(fmt::format("memory budget {} B is below the smallest peak fxremat reaches on this graph, "
                                          "{} B above the inputs (the min cut's: {} B)",
                                          target, lowest.ev.peak, min_cut_.ev.peak));
    }
    std::stable_sort(feasible.begin(), feasible.end(),
                     [](const Candidate* a, const Candidate* b) { return a->ev.cost < b->ev.cost; });
    Candidate best = *feasible.front();
    constexpr size_t kRefined = 3;
    for (size_t f = 0; f < feasible.size() && f < kRefined; ++f) {
      const Candidate& base = *feasible[f];
      std::vector<bool> in = BaseSet();
      for (Node* n : base.saved) in[n->index()] = true;
      std::vector<Node*> extra;
      for (Node* n : pool_)
        if (!in[n->index()]) extra.push_back(n);
      // The longest prefix of `extra` that keeps the peak within the target.
      size_t lo = 0, hi = extra.size();
      Candidate found = base;
      while (lo < hi) {
        const size_t mid = lo + (hi - lo + 1) / 2;
        std::vector<bool> with = in;
        for (size_t i = 0; i < mid; ++i) with[extra[i]->index()] = true;
        std::vector<Node*> saved = Collect(with);
        FXREMAT_ASSIGN_OR_RETURN(Evaluation ev, Evaluate(saved));
        if (ev.peak <= target) {  // the saved set is a superset of the base's: always extractable
          lo = mid;
          if (ev.cost <= found.ev.cost) found = {std::move(saved), ev, base.label + " + saves"};
        } else {
          hi = mid - 1;
        }
      }
      if (found.ev.cost < best.ev.cost) best = std::move(found);
    }
    // From the other side: the min cut, dropping saved values (recomputing
    // them) -- the most bytes per recompute cost first -- by binary search on
    // the shortest prefix that brings the peak within the target.
    if (min_cut_.ev.peak > target) {
      const std::vector<bool>& forced = is_forced_;
      std::vector<Node*> droppable;
      for (Node* n : min_cut_.saved)
        if (n->isCallFunction() && !forced[n->index()] && !TaggedRecompute(*n) && n->val().is_tensor()) droppable.push_back(n);
      std::stable_sort(droppable.begin(), droppable.end(), [&](const Node* a, const Node* b) {
        auto ratio = [&](const Node* n) {
          return static_cast<double>(StorageBytesOf(*n)) / (1.0 + RecomputeCost(*n, options_.recompute_flops_per_byte));
        };
        return ratio(a) > ratio(b);
      });
      size_t lo = 1, hi = droppable.size();
      std::optional<Candidate> found;
      while (lo <= hi && hi > 0) {
        const size_t mid = lo + (hi - lo) / 2;
        std::vector<bool> in = BaseSet();
        for (Node* n : min_cut_.saved) in[n->index()] = true;
        for (size_t i = 0; i < mid; ++i) in[droppable[i]->index()] = false;
        std::vector<Node*> saved = Collect(in);
        Expected<Evaluation> ev = Evaluate(saved);
        if (!ev.ok() && ev.status().code() != ErrorCode::kBadInput) return ev.status();
        if (ev.ok() && ev->peak <= target) {
          found = Candidate{std::move(saved), *ev, "min cut - drops"};
          hi = mid - 1;
        } else {
          lo = mid + 1;
        }
      }
      if (found && found->ev.cost < best.ev.cost) best = std::move(*found);
    }
    FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> exact, MilpCandidate(target));
    FXREMAT_ASSIGN_OR_RETURN(Candidate improved, Improve(std::move(best), target));
    FXREMAT_ASSIGN_OR_RETURN(improved, Anneal(std::move(improved), target, WithinBudget()));
    FXREMAT_ASSIGN_OR_RETURN(improved, Rebuild(std::move(improved), target));
    FXREMAT_ASSIGN_OR_RETURN(improved, InsertAndRepair(std::move(improved), target));
    for (int round = 0; round < kOscillationRounds; ++round) {
      FXREMAT_ASSIGN_OR_RETURN(improved, Anneal(std::move(improved), target, Oscillation(round)));
    }
    if (exact) {
      FXREMAT_ASSIGN_OR_RETURN(Candidate from_exact, Improve(std::move(*exact), target));
      if (from_exact.ev.cost < improved.ev.cost) improved = std::move(from_exact);
    }
    FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> offloading, OffloadCandidate(target, improved.ev.cost));
    if (offloading && offloading->ev.cost < improved.ev.cost) improved = std::move(*offloading);
    if (relaxed_offload) {
      FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> relaxed, RelaxedOffloadCandidate(target, improved.ev.cost));
      if (relaxed) improved = std::move(*relaxed);
    }
    return improved;
  }

  // Note [Overlapped offload in the budget]
  // With torch_async transfers, offload pays in small doses: what the compute
  // hides costs nothing, and the forward hides about the bytes the host link
  // moves in the forward's estimated time. The min cut and the other cheap candidates
  // sit far above a tight target, so offloading them down to it moves more
  // than any compute hides. So for a target, the solver also solves a relaxed
  // target -- the target plus a quarter, half and all of those hideable
  // bytes, without offload -- and offloads from each answer (OffloadFrom) the
  // fewest values that bring its peak within the target; the cheapest that
  // beats `bound` is returned.
  Expected<std::optional<Candidate>> RelaxedOffloadCandidate(int64_t target, double bound) {
    std::optional<Candidate> best;
    if (offload_cost_per_byte_ <= 0 || offload_.target != OffloadTarget::kTorchAsync) return best;
    double forward_seconds = 0;
    for (const Node* n : forward_) forward_seconds += EstimatedSeconds(*n, offload_);
    const double hideable = forward_seconds * offload_.link_bytes_per_second;
    int64_t previous = -1;
    for (double share : {0.25, 0.5, 1.0}) {
      const int64_t relaxed = target + static_cast<int64_t>(share * hideable);
      if (relaxed <= target || relaxed == previous) continue;
      previous = relaxed;
      FXREMAT_ASSIGN_OR_RETURN(Candidate base, Choose(relaxed, false));
      if (base.ev.peak <= target || base.ev.cost >= bound) continue;
      FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> found, OffloadFrom(base, target));
      if (found && found->ev.cost < bound && (!best || found->ev.cost < best->ev.cost)) best = std::move(found);
    }
    return best;
  }

  // Note [Offload in the budget]
  // With offload_bandwidth_gbps set and the step on an accelerator, offloading
  // is the third choice: a saved value copied to host after its last forward
  // use and reloaded before its first backward use (passes/emit_offload.h)
  // leaves the device for that interval. It costs its bytes times
  // offload_cost_per_byte_: the transfers there and back at
  // offload_bandwidth_gbps, in the recompute cost's unit (flops-equivalent: a
  // byte moved in device memory costs recompute_flops_per_byte, at
  // device_memory_bandwidth_gbps), priced in full with the torch target, whose
  // transfers are synchronous; with torch_async only the part the compute does
  // not hide is (ExposedTransferSeconds: Note [Overlapped offload] in
  // passes/emit_offload.h). From the cheapest candidates (cheaper than `bound`), it
  // offloads the largest saved values first -- the fewest that bring the peak
  // within the target, by binary search (offloading more never raises the
  // device peak) -- and returns the cheapest such partition, if any.
  Expected<std::optional<Candidate>> OffloadCandidate(int64_t target, std::optional<double> bound) {
    std::optional<Candidate> best;
    if (offload_cost_per_byte_ <= 0) return best;
    std::vector<const Candidate*> bases;
    for (const Candidate& c : candidates_)
      if (!bound || c.ev.cost < *bound) bases.push_back(&c);
    std::stable_sort(bases.begin(), bases.end(),
                     [](const Candidate* a, const Candidate* b) { return a->ev.cost < b->ev.cost; });
    constexpr size_t kBases = 4;
    for (size_t b = 0; b < bases.size() && b < kBases; ++b) {
      FXREMAT_ASSIGN_OR_RETURN(std::optional<Candidate> found, OffloadFrom(*bases[b], target));
      if (found && (!best || found->ev.cost < best->ev.cost)) best = std::move(found);
    }
    return best;
  }

  // From `base`'s saved values, in the order below, the fewest to offload that
  // bring the peak within `target` (binary search: offloading more never
  // raises the device peak), if any.
  Expected<std::optional<Candidate>> OffloadFrom(const Candidate& base, int64_t target) {
    std::vector<Node*> movable;
    for (Node* n : base.saved)
      if (n->isCallFunction() && n->val().is_tensor() && root_[n->index()] == n && StorageBytesOf(*n) > 0 &&
          n->val().tensor.device != "cpu")
        movable.push_back(n);
    // Synchronous transfers cost by the byte: the largest values first, the
    // fewest transfers. Overlapped ones cost what the compute does not hide:
    // the values the forward computes first (the backward reads them last)
    // have the most compute around them in both graphs, and are off the device
    // through the whole stretch where the backward peaks.
    if (offload_.target == OffloadTarget::kTorchAsync)
      std::stable_sort(movable.begin(), movable.end(), [&](const Node* x, const Node* y) { return x->index() < y->index(); });
    else
      std::stable_sort(movable.begin(), movable.end(),
                       [&](const Node* x, const Node* y) { return StorageBytesOf(*x) > StorageBytesOf(*y); });
    size_t lo = 1, hi = movable.size();
    std::optional<Candidate> found;
    while (lo <= hi && hi > 0) {
      const size_t mid = lo + (hi - lo) / 2;
      std::vector<Node*> offloaded(movable.begin(), movable.begin() + static_cast<std::ptrdiff_t>(mid));
      FXREMAT_ASSIGN_OR_RETURN(Evaluation ev, Evaluate(base.saved, offloaded));
      if (ev.peak <= target) {
        found = Candidate{base.saved, ev, fmt::format("{} + offload of {} value(s)", base.label, mid), offloaded};
        hi = mid - 1;
      } else {
        lo = mid + 1;
      }
    }
    return found;
  }

  // Note [Budget MILP]: its choice, emitted and simulated; when the simulator
  // puts it over the target (the MILP's memory model is coarser), the MILP is
  // solved again with the budget lowered by the excess, twice at most.
  Expected<std::optional<Candidate>> MilpCandidate(int64_t target) {
    if (options_.budget_milp_max_variables <= 0 || !BinaryProgramSolverAvailable()) return std::optional<Candidate>();
    int64_t bound = target;
    for (int attempt = 0; attempt < 3 && bound > 0; ++attempt) {
      FXREMAT_ASSIGN_OR_RETURN(BudgetMilp m, BuildMilp(bound, options_.budget_milp_max_variables));
      if (m.too_large || m.constant_infeasible) break;
      FXREMAT_ASSIGN_OR_RETURN(auto x, SolveBinaryProgram(m.program, options_.budget_milp_max_nodes));
      if (!x) break;
      std::vector<bool> in = BaseSet();
      for (size_t i = 0; i < m.save_variables.size(); ++i)
        if ((*x)[static_cast<size_t>(m.save_variables[i])] > 0.5)
          if (const Node* n = g_.findNode(m.save_names[i])) in[n->index()] = true;
      std::vector<Node*> saved = Collect(in);
      Expected<Evaluation> ev = Evaluate(saved);
      if (!ev.ok()) {
        if (ev.status().code() != ErrorCode::kBadInput) return ev.status();
        break;
      }
      if (ev->peak <= target) return std::optional<Candidate>(Candidate{std::move(saved), *ev, "budget MILP"});
      bound -= ev->peak - target;
    }
    return std::optional<Candidate>();
  }

  // Step 4's local search from the chosen partition: save one more value, or
  // stop saving one, whenever that lowers the recompute cost within the
  // budget; first improvement, until none is left or the evaluation allowance
  // (inversely proportional to the graph's size) is spent.
  Expected<Candidate> Improve(Candidate best, int64_t target) {
    return LocalSearch(std::move(best), [target](const Evaluation& ev, const Evaluation& current) {
      return ev.peak <= target && ev.cost < current.cost;
    });
  }

  // Note [Searching the saved set]
  // Single and pair toggles (LocalSearch) stop at the first local optimum,
  // and on graphs with branches that optimum can cost several times the best:
  // going from one good saved set to a better one takes a chain of moves, some
  // of which cost more or leave the budget on the way (save a value's output
  // instead of its inputs, then stop saving the inputs' other consumers...).
  // Four searches walk such chains, in this order, all over the "free" values
  // (Saveable, not forced) and all deterministic:
  //  - Anneal: simulated annealing. A move toggles one free value, two, or
  //    exchanges one for an input or user of it in the other state; a move
  //    within the budget is taken when it is no costlier, else with
  //    probability exp(-increase / T), T cooling geometrically from
  //    kAnnealStart times the start's cost to 1e-4 of it.
  //  - Rebuild: ruin and recreate. Stop saving 1-3 random saved values, then
  //    save again, greedily, the value whose saving avoids the most recompute
  //    cost per byte (all values' gains from one post-dominator pass), as long
  //    as the peak stays within the budget (or comes closer to it, from a
  //    ruined state above it); keep the result when it is no costlier. Each
  //    step is emitted and simulated.
  //  - InsertAndRepair: the reverse exchange. Save one value the state
  //    recomputes (one with a gain, or all items of a tuple op it reruns: one
  //    item alone gains nothing while the op reruns for another), then, while
  //    the peak is over the budget, stop saving one of the other saved values
  //    -- of the kRepairTries whose recompute costs least per byte, the first
  //    whose drop lowers the simulated peak (Repair); keep the result when it
  //    is within the budget and cheaper. On the MILP
  //    corpus (docs/benchmarks_budget_milp.md) it found the points where the
  //    optimum saves one costly value instead of several cheap ones, which
  //    annealing and rebuilding never reach: their first step leaves the budget.
  //  - Oscillation (Anneal with a penalty, kOscillationRounds rounds, each
  //    from the best so far): the annealing's walk, but a state over the
  //    budget is allowed at a cost of lambda per byte over it, lambda
  //    adapting (up after each evaluated move that leaves the state over
  //    the budget, down after each that leaves it within), and most moves
  //    guided toward the budget's edge: over it, stop saving a value; within
  //    it, save one. Only states within the budget are recorded. It walks
  //    the exchanges whose every path leaves the budget for a few steps --
  //    save a costly value, then stop saving several cheap ones, or the
  //    reverse -- where insert-and-repair's fixed order of drops picks the
  //    wrong ones. On the MILP corpus it brought the points within 1% of the
  //    optimum from 159 to 168 of 174 (docs/benchmarks_budget_milp.md); the
  //    20-point fronts of the budget benchmark's 1,000-1,900-node models
  //    take about 1.7 times as long (docs/benchmarks_budget.md).
  // The annealing prices a move before emitting it (SearchCost: extraction's
  // plan on flat arrays, PartitionRecomputeCost's figure in O(nodes)) and
  // emits and simulates only the moves that pass on cost; every cost and peak
  // any search records comes from Evaluate. SearchCost is exact on static
  // shapes (checked against Evaluate on every graph of testdata/, the random
  // programs and the budget models included); with dynamic shapes it does not
  // model the symbol bindings extraction adds to the backward, so the
  // annealing applies the estimate's change to the exact figure of the current
  // state rather than the estimate itself. A saved value the backward does not
  // read is dropped from the state (extraction drops it), so a move that only
  // toggles such values is recognized as no move. The allowance of each
  // search is a number of attempts (SearchAllowance): thorough on small
  // graphs, nothing on the largest, where the segment candidates and the local
  // search decide. The generator (splitmix64) is seeded by the target and
  // every attempt counts whether or not the evaluation cache answers it, so a
  // front solved by several threads finds what one thread finds (Note
  // [Threads in the front]).
  using Mask = std::vector<uint8_t>;

  struct Scratch {
    Mask valid, live, fwd, used, sink;
    std::vector<int32_t> parent, depth;
    std::vector<double> subtree;
  };

  Mask MaskOf(const std::vector<Node*>& saved) const {
    Mask m = base_;
    for (const Node* n : saved) m[n->index()] = 1;
    return m;
  }

  std::vector<Node*> CollectMask(const Mask& in) const {
    std::vector<Node*> out;
    for (const auto& up : g_.nodes())
      if (in[up->index()] && Collectable(*up)) out.push_back(up.get());
    return out;
  }

  // The recompute cost of saving `in` (Note [Searching the saved set]): the
  // ops the backward's plan keeps (computable from the saved values, the
  // tangents and the backward's RNG states; needed by a gradient or impure)
  // that the forward also runs (needed by a forward output or a saved value).
  // With `used`: which of `in` the backward reads, plus the base set. With
  // `gains`: for each value, the cost that saving it too would avoid -- the
  // ops only it needs, i.e. those it post-dominates on the way to the
  // backward's outputs.
  double SearchCost(const Mask& in, Scratch& s, Mask* used = nullptr, std::vector<double>* gains = nullptr) const {
    const size_t n = g_.size();
    s.valid.assign(n, 0);
    s.live.assign(n, 0);
    s.fwd.assign(n, 0);
    auto is_input = [&](size_t i) { return in[i] || (flags_[i] & kBwInput); };
    for (size_t i = 0; i < n; ++i) {
      if (is_input(i)) { s.valid[i] = 1; continue; }
      if (flags_[i] & (kPlaceholder | kOutput | kForwardOnly)) continue;
      uint8_t ok = 1;
      for (int32_t k = in_off_[i]; k < in_off_[i + 1] && ok; ++k) ok = s.valid[static_cast<size_t>(in_idx_[k])];
      s.valid[i] = ok;
    }
    for (int32_t o : bw_outputs_)
      if (s.valid[static_cast<size_t>(o)]) s.live[static_cast<size_t>(o)] = 1;
    for (size_t i = n; i-- > 0;) {
      if (!s.valid[i] || is_input(i)) continue;
      bool keep = s.live[i] || (flags_[i] & kImpure);
      for (int32_t k = us_off_[i]; k < us_off_[i + 1] && !keep; ++k) {
        const auto u = static_cast<size_t>(us_idx_[k]);
        keep = s.live[u] && !is_input(u);
      }
      s.live[i] = keep;
    }
    // What the backward reads of `in` (extraction drops the rest), then what
    // the forward runs: its outputs, its impure ops and the saved values it
    // keeps, with their inputs.
    s.used.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (base_[i] && in[i]) s.used[i] = 1;
      if (!s.live[i] || is_input(i)) continue;
      for (int32_t k = in_off_[i]; k < in_off_[i + 1]; ++k)
        if (in[static_cast<size_t>(in_idx_[k])]) s.used[static_cast<size_t>(in_idx_[k])] = 1;
    }
    for (int32_t o : bw_outputs_)
      if (in[static_cast<size_t>(o)]) s.used[static_cast<size_t>(o)] = 1;
    for (size_t i = n; i-- > 0;) {
      if ((flags_[i] & kForwardSeed) || (in[i] && s.used[i] && !(flags_[i] & kTangentClosure))) s.fwd[i] = 1;
      if (s.fwd[i])
        for (int32_t k = in_off_[i]; k < in_off_[i + 1]; ++k) s.fwd[static_cast<size_t>(in_idx_[k])] = 1;
    }
    auto counted = [&](size_t i) { return s.live[i] && s.fwd[i] && (flags_[i] & kCall) && !is_input(i); };
    double cost = 0;
    for (size_t i = 0; i < n; ++i)
      if (counted(i)) cost += node_cost_[i];
    if (used) *used = s.used;
    if (gains) {
      // Post-dominators of the live computed values, toward a virtual sink
      // (index n) that every gradient and impure op reaches: users come after
      // their inputs, so one backward pass finds each immediate post-dominator
      // as the nearest common ancestor of its readers'.
      const auto root = static_cast<int32_t>(n);
      s.parent.assign(n + 1, -1);
      s.depth.assign(n + 1, 0);
      s.subtree.assign(n + 1, 0.0);
      s.sink.assign(n, 0);
      for (int32_t o : bw_outputs_) s.sink[static_cast<size_t>(o)] = 1;
      auto nca = [&](int32_t a, int32_t b) {
        while (a != b) {
          if (s.depth[static_cast<size_t>(a)] < s.depth[static_cast<size_t>(b)]) std::swap(a, b);
          a = s.parent[static_cast<size_t>(a)];
        }
        return a;
      };
      for (size_t i = n; i-- > 0;) {
        if (!s.live[i] || is_input(i)) continue;
        int32_t p = s.sink[i] || (flags_[i] & kImpure) ? root : -1;
        for (int32_t k = us_off_[i]; k < us_off_[i + 1] && p != root; ++k) {
          const auto u = static_cast<size_t>(us_idx_[k]);
          if (!s.live[u] || is_input(u)) continue;
          p = p < 0 ? static_cast<int32_t>(u) : nca(p, static_cast<int32_t>(u));
        }
        s.parent[i] = p;  // a live value is a sink, impure or read by a live one
        s.depth[i] = s.depth[static_cast<size_t>(p)] + 1;
        if (counted(i)) s.subtree[i] = node_cost_[i];
      }
      gains->assign(n, 0.0);
      for (size_t i = 0; i < n; ++i) {
        if (s.parent[i] < 0) continue;
        (*gains)[i] = s.subtree[i];
        s.subtree[static_cast<size_t>(s.parent[i])] += s.subtree[i];
      }
    }
    return cost;
  }

  // Attempts allowed to each search (Note [Searching the saved set]): an
  // attempt costs time proportional to the graph's size, so the allowance is
  // a number of node-evaluations divided by the size, capped; graphs above
  // kLargestSearched nodes get none. Each search: 1,000 attempts up to 150
  // nodes, 150 at 1,000, 37 at 4,000 (a rebuild's attempt is one emission of
  // its greedy pass, an insert-and-repair's one emission, its pricing aside:
  // Repair). Chosen on bench/budget_milp_bench.py's corpus and the
  // budget benchmark's models:
  // allowances that fell with the square of the size (3,000 attempts at 300
  // nodes) took twice the time for no better points on the small corpus and
  // left the 1,700-1,900-node models 3-12% costlier over a 20-point front.
  static constexpr double kSearchNodeEvaluations = 1.5e5, kSearchAttempts = 1000;
  static constexpr size_t kLargestSearched = 4096;
  static constexpr double kAnnealStart = 5.0;  // the first temperature, times the start's cost
  int64_t SearchAllowance() const {
    if (g_.size() > kLargestSearched) return 0;
    const double size = static_cast<double>(std::max<size_t>(g_.size(), 1));
    return static_cast<int64_t>(std::min(kSearchAttempts, kSearchNodeEvaluations / size));
  }

  std::vector<const Node*> FreeValues() const {
    std::vector<const Node*> free;
    for (const Node* v : movable_)
      if (!is_forced_[v->index()]) free.push_back(v);
    return free;
  }

  struct Random {  // splitmix64: the same stream on every platform
    uint64_t state;
    uint64_t next() {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return z ^ (z >> 31);
    }
    size_t below(size_t n) { return static_cast<size_t>(next() % n); }
    double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  };

  // Drops from `in` the values the backward does not read; returns the cost.
  double Normalize(Mask& in, Scratch& s, Mask& used) const {
    const double cost = SearchCost(in, s, &used);
    for (size_t i = 0; i < in.size(); ++i) in[i] = in[i] && used[i];
    return cost;
  }

  static std::string Labelled(const std::string& label, const char* step) {
    return label.find(step) == std::string::npos ? label + step : label;
  }

  // What each search of Note [Searching the saved set] starts from: `start`
  // normalized, its SearchCost estimate and exact cost, the allowance and the
  // free values; none when the graph is too large to search or nothing moves.
  struct Search {
    int64_t allowance = 0;
    std::vector<const Node*> free;
    Scratch scratch;
    Mask used, in;
    double estimate = 0;  // SearchCost of `in`
    Candidate best;
    double current = 0;   // the exact cost of `in`
  };
  std::optional<Search> StartSearch(Candidate& start) const {
    Search s;
    s.allowance = SearchAllowance();
    s.free = FreeValues();
    if (s.allowance < 8 || s.free.size() < 2 || start.ev.cost <= 0) return std::nullopt;
    s.in = MaskOf(start.saved);
    s.estimate = Normalize(s.in, s.scratch, s.used);
    s.best = std::move(start);
    s.current = s.best.ev.cost;
    return s;
  }

  // How Anneal walks (Note [Searching the saved set]): within the budget only,
  // or through states over it at a penalty (strategic oscillation).
  struct AnnealSchedule {
    bool penalized;  // over-budget states allowed, at lambda * excess bytes
    double start;    // the first temperature, times the start's cost
    uint64_t seed;
    const char* label;
  };
  static AnnealSchedule WithinBudget() { return {false, kAnnealStart, 0x9E3779B97F4A7C15ull, " + annealing"}; }
  static constexpr int kOscillationRounds = 3;
  // Chosen on the MILP corpus (bench/budget_milp_bench.py, 174 points): the
  // penalty scale (1, 2, 5, 10 gave 165, 165, 166, 164 points within 1% of the
  // optimum, unguided), the share of guided moves (0, 0.75, 0.9, 1.0: over
  // four seeds a mean of 164.3, 167.0, 166.8, 165.3 points; seed to seed the
  // count varies by +-2) and three rounds (one to three: 163, 165, 166; a
  // single round three times as long: 164).
  static constexpr double kOscillationStart = 0.5, kPenaltyScale = 5, kPenaltyStep = 1.1, kGuidedMoves = 0.75;
  static AnnealSchedule Oscillation(int round) {
    return {true, kOscillationStart, 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull * static_cast<uint64_t>(round),
            " + oscillation"};
  }

  Expected<Candidate> Anneal(Candidate start, int64_t target, const AnnealSchedule& schedule) {
    std::optional<Search> search = StartSearch(start);
    if (!search) return start;
    auto& [allowance, free, scratch, used, in, current_estimate, best, current] = *search;
    std::vector<int32_t> slot(g_.size(), -1);  // index in `free`
    for (size_t i = 0; i < free.size(); ++i) slot[free[i]->index()] = static_cast<int32_t>(i);
    Random rng{schedule.seed ^ static_cast<uint64_t>(target) * 0xBF58476D1CE4E5B9ull};
    // The penalty per byte over the budget starts at kPenaltyScale times the
    // larger of the free values' median recompute cost per byte and the
    // start's cost per budget byte; after each evaluated move it grows by
    // kPenaltyStep if the state is over the budget and shrinks by it if
    // within, kept within [1e-3, 1e3] times its start.
    double lambda0 = std::numeric_limits<double>::infinity();
    if (schedule.penalized) {
      std::vector<double> density;
      for (const Node* v : free)
        density.push_back(RecomputeCost(*v, options_.recompute_flops_per_byte) /
                          static_cast<double>(std::max<int64_t>(1, StorageBytesOf(*root_[v->index()]))));
      const auto mid = density.begin() + static_cast<std::ptrdiff_t>(density.size() / 2);
      std::nth_element(density.begin(), mid, density.end());
      lambda0 = kPenaltyScale * std::max(*mid, current / static_cast<double>(std::max<int64_t>(1, target)));
    }
    double lambda = lambda0;
    int64_t peak = best.ev.peak;
    auto penalized = [&](double cost, int64_t p) {
      return p <= target ? cost : cost + lambda * static_cast<double>(p - target);
    };
    const double t0 = schedule.start * current, t_end = 1e-4 * current;
    const double cooling = std::pow(t_end / t0, 1.0 / static_cast<double>(allowance));
    double temperature = t0;
    std::vector<const Node*> near;
    for (int64_t step = 0; step < allowance; ++step, temperature *= cooling) {
      Mask with = in;
      const double kind = rng.uniform();
      const Node* a = free[rng.below(free.size())];
      if (schedule.penalized && rng.uniform() < kGuidedMoves) {
        // Toward the budget's edge: over it, stop saving a value; within it,
        // save one more (the first of up to 16 draws in that state).
        const uint8_t saved_state = peak > target ? 1 : 0;
        for (int draw = 1; draw < 16 && in[a->index()] != saved_state; ++draw) a = free[rng.below(free.size())];
      }
      with[a->index()] ^= 1;
      if (kind < 0.25) {
        const Node* b = free[rng.below(free.size())];
        with[b->index()] ^= 1;
      } else if (kind < 0.6) {  // exchange with a neighbour in the other state
        near.clear();
        for (const Node* x : a->inputs())
          if (slot[x->index()] >= 0 && with[x->index()] == in[a->index()]) near.push_back(x);
        for (const Node* x : a->users())
          if (slot[x->index()] >= 0 && with[x->index()] == in[a->index()]) near.push_back(x);
        if (!near.empty()) with[near[rng.below(near.size())]->index()] ^= 1;
      }
      const double estimate = Normalize(with, scratch, used);
      if (with == in) continue;
      const double threshold = rng.uniform();
      // Within the budget only: the state always is, so `now` is its cost.
      const double now = schedule.penalized ? penalized(current, peak) : current;
      auto rejected = [&](double f) { return f > now && threshold >= std::exp(-(f - now) / temperature); };
      // The estimate's change applied to the exact figure: what SearchCost
      // does not model (Note [Searching the saved set]) mostly cancels. A
      // penalty only adds, so the cost alone can reject.
      if (rejected(current + (estimate - current_estimate))) continue;
      std::vector<Node*> saved = CollectMask(with);
      Expected<Evaluation> tried = Evaluate(saved);
      if (!tried.ok()) {
        if (tried.status().code() != ErrorCode::kBadInput) return tried.status();
        continue;
      }
      if (!schedule.penalized && tried->peak > target) continue;
      if (tried->peak <= target && tried->cost < best.ev.cost)
        best = {std::move(saved), *tried, Labelled(best.label, schedule.label)};
      if (!rejected(penalized(tried->cost, tried->peak))) {
        in = std::move(with);
        current = tried->cost;
        peak = tried->peak;
        current_estimate = estimate;
      }
      if (schedule.penalized)
        lambda = peak > target ? std::min(lambda * kPenaltyStep, lambda0 * 1e3)
                               : std::max(lambda / kPenaltyStep, lambda0 * 1e-3);
    }
    return std::move(best);  // a structured binding: not moved implicitly
  }

  Expected<Candidate> Rebuild(Candidate start, int64_t target) {
    std::optional<Search> search = StartSearch(start);
    if (!search) return start;
    auto& [allowance, free, scratch, used, in, estimate, best, current] = *search;
    Random rng{0x2545F4914F6CDD1Dull ^ static_cast<uint64_t>(target) * 0xBF58476D1CE4E5B9ull};
    std::vector<double> gains;
    std::vector<const Node*> saved_free;
    for (int64_t spent = 0; spent < allowance;) {
      Mask with = in;
      saved_free.clear();
      for (const Node* v : free)
        if (with[v->index()]) saved_free.push_back(v);
      for (size_t r = 0, k = 1 + rng.below(3); r < k && !saved_free.empty(); ++r) {
        const size_t j = rng.below(saved_free.size());
        with[saved_free[j]->index()] = 0;
        saved_free.erase(saved_free.begin() + static_cast<std::ptrdiff_t>(j));
      }
      Normalize(with, scratch, used);
      ++spent;
      Expected<Evaluation> ev = Evaluate(CollectMask(with));
      if (!ev.ok()) {
        if (ev.status().code() != ErrorCode::kBadInput) return ev.status();
        continue;
      }
      Evaluation now = *ev;
      Mask refused(g_.size(), 0);
      bool gains_current = false;  // `gains` are those of `with`
      while (spent < allowance) {
        if (!gains_current) SearchCost(with, scratch, nullptr, &gains);
        gains_current = true;
        const Node* pick = nullptr;
        double pick_ratio = 0;
        for (const Node* v : free) {
          const size_t i = v->index();
          if (with[i] || refused[i] || gains[i] <= 0) continue;
          const double ratio = gains[i] / static_cast<double>(std::max<int64_t>(1, StorageBytesOf(*root_[i])));
          if (ratio > pick_ratio) pick_ratio = ratio, pick = v;
        }
        if (!pick) break;
        Mask grown = with;
        grown[pick->index()] = 1;
        Normalize(grown, scratch, used);
        if (!grown[pick->index()]) {  // the backward would not read it (an impure op keeps it live)
          refused[pick->index()] = 1;
          continue;
        }
        ++spent;
        Expected<Evaluation> g = Evaluate(CollectMask(grown));
        if (!g.ok() && g.status().code() != ErrorCode::kBadInput) return g.status();
        // Within the budget, or closer to it from above.
        if (g.ok() && (g->peak <= target || (now.peak > target && g->peak < now.peak))) {
          with = std::move(grown);
          now = *g;
          gains_current = false;
        } else {
          refused[pick->index()] = 1;
        }
      }
      if (now.peak > target || now.cost > current) continue;
      in = std::move(with);
      current = now.cost;
      if (now.cost < best.ev.cost) best = {CollectMask(in), now, Labelled(best.label, " + rebuild")};
    }
    return std::move(best);  // a structured binding: not moved implicitly
  }

  // The multi-output op whose item `v` is, if it is one.
  static const Node* TupleOf(const Node& v) {
    return v.isGetItem() && !v.args().empty() && v.args()[0].is_node() ? v.args()[0].node : nullptr;
  }

  // Insert and repair (Note [Searching the saved set]): save one more value
  // the current state recomputes -- one whose saving avoids recompute cost,
  // or a tuple op's items together -- then Repair; keep the result when it
  // is within the budget and cheaper. The move Rebuild cannot make: a costly
  // value saved in exchange for several cheaper ones, where saving it first
  // leaves the budget.
  Expected<Candidate> InsertAndRepair(Candidate start, int64_t target) {
    std::optional<Search> search = StartSearch(start);
    if (!search) return start;
    auto& [allowance, free, scratch, used, in, estimate, best, current] = *search;
    Random rng{0x94D049BB133111EBull ^ static_cast<uint64_t>(target) * 0x9E3779B97F4A7C15ull};
    std::vector<uint8_t> is_free(g_.size(), 0);
    for (const Node* v : free) is_free[v->index()] = 1;
    std::vector<double> gains;
    std::vector<const Node*> options;
    for (int64_t spent = 0; spent < allowance;) {
      SearchCost(in, scratch, nullptr, &gains);
      // Saving one item of a tuple op avoids nothing while the op is
      // recomputed for another (its gain is 0): the items of an op the state
      // recomputes go in together.
      options.clear();
      for (const Node* v : free) {
        const Node* op = TupleOf(*v);
        if (!in[v->index()] && (gains[v->index()] > 0 || (op && gains[op->index()] > 0))) options.push_back(v);
      }
      if (options.empty()) break;
      const Node* pick = options[rng.below(options.size())];
      Mask with = in, inserted(g_.size(), 0);
      with[pick->index()] = inserted[pick->index()] = 1;
      if (const Node* op = TupleOf(*pick))
        for (const Node* item : op->users())
          if (item->isGetItem() && is_free[item->index()] && !in[item->index()]) with[item->index()] = inserted[item->index()] = 1;
      Normalize(with, scratch, used);
      ++spent;
      if (!with[pick->index()]) continue;
      Expected<Evaluation> ev = Evaluate(CollectMask(with));
      if (!ev.ok()) {
        if (ev.status().code() != ErrorCode::kBadInput) return ev.status();
        continue;
      }
      Evaluation now = *ev;
      FXREMAT_RETURN_IF_ERROR(Repair(*search, with, now, inserted, target, spent));
      if (now.peak > target || now.cost >= current) continue;
      in = std::move(with);
      current = now.cost;
      if (now.cost < best.ev.cost) best = {CollectMask(in), now, Labelled(best.label, " + insert and repair")};
    }
    return std::move(best);  // a structured binding: not moved implicitly
  }

  // While `now` (the evaluation of `with`) is over the target: prices every
  // saved free value not in `keep` by its recompute cost per byte
  // (SearchCost) and stops saving the first of the kRepairTries cheapest whose
  // drop lowers the simulated peak; ends when none does or the allowance is
  // spent. The pricing (one SearchCost per saved value) is not counted in the
  // allowance, which bounds the evaluations: on the 1,700-node GPT-2 it is
  // half of the search's time (a cheaper price, the value's own recompute
  // cost, gave costlier points: the commit log of 1722701).
  static constexpr size_t kRepairTries = 8;
  Status Repair(Search& search, Mask& with, Evaluation& now, const Mask& keep, int64_t target, int64_t& spent) {
    auto& [allowance, free, scratch, used, in, estimate, best, current] = search;
    double with_cost = SearchCost(with, scratch);
    std::vector<std::pair<double, const Node*>> drops;
    while (now.peak > target && spent < allowance) {
      drops.clear();
      for (const Node* u : free) {
        if (keep[u->index()] || !with[u->index()]) continue;
        Mask t = with;
        t[u->index()] = 0;
        const double c = SearchCost(t, scratch);
        drops.push_back({(c - with_cost) / static_cast<double>(std::max<int64_t>(1, StorageBytesOf(*root_[u->index()]))), u});
      }
      std::stable_sort(drops.begin(), drops.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      bool lowered = false;
      for (size_t d = 0; d < drops.size() && d < kRepairTries && spent < allowance && !lowered; ++d) {
        Mask t = with;
        t[drops[d].second->index()] = 0;
        const double t_cost = Normalize(t, scratch, used);
        ++spent;
        Expected<Evaluation> g = Evaluate(CollectMask(t));
        if (!g.ok()) {
          if (g.status().code() != ErrorCode::kBadInput) return g.status();
          continue;
        }
        if (g->peak < now.peak) {
          with = std::move(t);
          with_cost = t_cost;
          now = *g;
          lowered = true;
        }
      }
      if (!lowered) break;
    }
    return Status::Ok();
  }

  template <typename Better>
  Expected<Candidate> LocalSearch(Candidate best, Better better) {
    // Each evaluation costs time proportional to the graph: small graphs get a
    // thorough search, large ones a few moves.
    const int64_t allowance = std::clamp<int64_t>(20000 / static_cast<int64_t>(std::max<size_t>(g_.size(), 1)), 4, 500);
    int64_t spent = 0;
    const std::vector<bool>& forced = is_forced_;
    // Moves toggle one value, or two when no single toggle helps and the
    // graph is small enough for pairs (an exchange: save one, drop another).
    const size_t n = movable_.size();
    const bool pairs = n <= 32;
    bool improved = true;
    while (improved && spent < allowance) {
      improved = false;
      std::vector<bool> in = BaseSet();
      for (Node* v : best.saved) in[v->index()] = true;
      auto movable = [&](size_t i) { return !(in[movable_[i]->index()] && forced[movable_[i]->index()]); };
      for (size_t width = 1; width <= (pairs ? 2u : 1u) && !improved; ++width)
        for (size_t i = 0; i < n && !improved && spent < allowance; ++i) {
          if (!movable(i)) continue;
          for (size_t j = width == 1 ? i : i + 1; j < (width == 1 ? i + 1 : n) && !improved && spent < allowance; ++j) {
            if (!movable(j)) continue;
            std::vector<bool> with = in;
            with[movable_[i]->index()] = !in[movable_[i]->index()];
            if (j != i) with[movable_[j]->index()] = !in[movable_[j]->index()];
            std::vector<Node*> saved = Collect(with);
            ++spent;
            // Dropping a value can leave the backward without a source (a value
            // only the forward can compute): such a move is not a candidate.
            Expected<Evaluation> tried = Evaluate(saved);
            if (!tried.ok()) {
              if (tried.status().code() != ErrorCode::kBadInput) return tried.status();
              continue;
            }
            if (better(*tried, best.ev)) {
              best = {std::move(saved), *tried, best.label.find(" + local search") == std::string::npos
                                                    ? best.label + " + local search" : best.label};
              improved = true;
            }
          }
        }
    }
    return best;
  }


  // Note [Budget MILP] (passes/budget_partition.h): the Checkmate-style
  // reference over this solver's execution model.
  // max_variables > 0: stop before building a larger program (too_large set).
  Expected<BudgetMilp> BuildMilp(int64_t budget, int64_t max_variables = 0) {
    BudgetMilp m;
    FXREMAT_ASSIGN_OR_RETURN(Partition nothing, Emit(NothingRecomputed()));
    const Graph& bw = *nothing.backward;
    // Roots of the forward values that are always resident: user outputs (the
    // caller holds them to the end of the step).
    std::vector<bool> pinned(g_.size(), false);
    for (const Node* o : c_.forward_outputs)
      if (o && root_[o->index()]) pinned[root_[o->index()]->index()] = true;
    auto variable_root = [&](const Node* joint) -> const Node* {
      const Node* r = joint ? root_[joint->index()] : nullptr;
      if (!r || r->isPlaceholder() || !r->isCallFunction() || c_.in_tangents_closure[r->index()] || pinned[r->index()])
        return nullptr;
      return r;
    };
    // The backward of "nothing recomputed": which forward roots each op reads,
    // and the bytes of the backward's own storages live at each op.
    const size_t nb = bw.size();
    std::vector<const Node*> bw_fwd_root(nb, nullptr);  // forward root a backward value refers to
    std::vector<int64_t> bw_root(nb, -1);               // backward storage (index of its allocating node)
    std::vector<int64_t> bw_end(nb, -1);
    const int64_t end_of_step = static_cast<int64_t>(nb);
    for (const auto& up : bw.nodes()) {
      const Node* n = up.get();
      const size_t i = n->index();
      if (n->isPlaceholder()) {
        if (n->role() == PlaceholderRole::kTangent && n->val().is_tensor()) bw_root[i] = static_cast<int64_t>(i);
        else if (n->role() == PlaceholderRole::kSaved) bw_fwd_root[i] = variable_root(g_.findNode(n->name()));
        continue;
      }
      if (!n->isCallFunction()) continue;
      const Node* source = nullptr;
      if (SharesStorage(*n, &source)) {
        if (source) bw_root[i] = bw_root[source->index()], bw_fwd_root[i] = bw_fwd_root[source->index()];
      } else if (n->val().is_tensor()) {
        bw_root[i] = static_cast<int64_t>(i);
      }
    }
    for (const auto& up : bw.nodes()) {
      const Node* n = up.get();
      for (const Node* in : n->inputs()) {
        const int64_t r = bw_root[in->index()];
        if (r >= 0) bw_end[static_cast<size_t>(r)] = std::max(bw_end[static_cast<size_t>(r)],
                                                               n->isOutput() ? end_of_step : static_cast<int64_t>(n->index()));
      }
    }
    std::vector<int64_t> bw_delta(nb + 2, 0);
    for (const auto& up : bw.nodes()) {
      const size_t i = up->index();
      if (bw_root[i] != static_cast<int64_t>(i)) continue;
      const int64_t bytes = up->val().is_tensor() ? StorageBytes(up->val().tensor) : 0;
      // A tuple op's items are allocated by the op, while its inputs are alive.
      const Node* tuple_op = up->isGetItem() && up->args()[0].is_node() ? up->args()[0].node : nullptr;
      const size_t from = up->isPlaceholder() ? 0 : tuple_op ? tuple_op->index() : i;
      const size_t to = static_cast<size_t>(std::max<int64_t>(bw_end[i], static_cast<int64_t>(i))) + 1;
      bw_delta[from] += bytes;
      bw_delta[std::min(to, nb + 1)] -= bytes;
    }
    int64_t pinned_bytes = 0;
    for (const auto& up : g_.nodes())
      if (pinned[up->index()]) pinned_bytes += StorageBytesOf(*up);
    // Use points: the backward ops that read a forward root; each carries the
    // highest backward-own bytes since the previous one.
    struct UsePoint {
      std::vector<const Node*> reads;
      int64_t base = 0;
    };
    std::vector<UsePoint> points;
    int64_t running = 0, since = 0;
    for (const auto& up : bw.nodes()) {
      running += bw_delta[up->index()];
      since = std::max(since, running);
      if (!up->isCallFunction()) continue;
      std::vector<const Node*> reads;
      for (const Node* in : up->inputs())
        if (const Node* r = bw_fwd_root[in->index()]; r && std::find(reads.begin(), reads.end(), r) == reads.end())
          reads.push_back(r);
      if (reads.empty()) continue;
      points.push_back({std::move(reads), since});
      since = running;
    }
    int64_t tail = since;  // after the last use point: the backward's own bytes only
    // The forward roots each root's op reads (through views and tuples), and
    // the roots the model needs: ancestors of what the backward reads.
    // A root whose op is a tuple item: recomputing it reruns the tuple op.
    auto op_of = [&](const Node* r) { return r->isGetItem() && r->args()[0].is_node() ? r->args()[0].node : r; };
    std::vector<std::vector<const Node*>> root_inputs(g_.size());
    for (const auto& up : g_.nodes()) {
      const Node* node = up.get();
      if (!variable_root(node) || root_[node->index()] != node) continue;
      std::vector<const Node*>& ins = root_inputs[node->index()];
      for (const Node* in : op_of(node)->inputs())
        if (const Node* r = variable_root(in); r && r != node && std::find(ins.begin(), ins.end(), r) == ins.end())
          ins.push_back(r);
    }
    std::vector<bool> relevant(g_.size(), false);
    std::vector<const Node*> stack;
    for (const UsePoint& u : points)
      for (const Node* r : u.reads) stack.push_back(r);
    while (!stack.empty()) {
      const Node* r = stack.back();
      stack.pop_back();
      if (relevant[r->index()]) continue;
      relevant[r->index()] = true;
      for (const Node* in : root_inputs[r->index()]) stack.push_back(in);
    }
    // The variables' values, in graph order. A value outside the forward (the
    // backward computes it from the inputs, once) is never saved and costs
    // nothing there, as in the solver's cost (PartitionRecomputeCost).
    std::vector<const Node*> roots;
    for (const auto& up : g_.nodes())
      if (relevant[up->index()] && root_[up->index()] == up.get()) roots.push_back(up.get());

    // Variables.
    const size_t K = points.size();
    if (max_variables > 0 && static_cast<double>(roots.size()) * static_cast<double>(2 * K + 1) > static_cast<double>(max_variables)) {
      m.too_large = true;
      return m;
    }
    std::vector<int64_t> s_var(g_.size(), -1);
    std::vector<std::vector<int64_t>> a_var(g_.size()), r_var(g_.size());
    BinaryProgram& bp = m.program;
    auto add_var = [&](std::string name, double cost, double lo, double hi) {
      bp.variables.push_back(std::move(name));
      bp.objective.push_back(cost);
      bp.lower.push_back(lo);
      bp.upper.push_back(hi);
      return static_cast<int64_t>(bp.variables.size() - 1);
    };
    auto add_row = [&](std::vector<std::pair<int64_t, double>> terms, double lo, double hi) {
      const auto row = static_cast<int64_t>(bp.row_lower.size());
      for (const auto& [col, coef] : terms) {
        bp.rows.push_back(row);
        bp.cols.push_back(col);
        bp.coefs.push_back(coef);
      }
      bp.row_lower.push_back(lo);
      bp.row_upper.push_back(hi);
    };
    for (const Node* r : roots) {
      const size_t i = r->index();
      const bool in_forward = is_forward_[op_of(r)->index()];  // a tuple item: its op runs in the forward
      const bool forced = in_forward && (is_forced_[i] || is_forced_[op_of(r)->index()]);
      // Note [Constant values are recomputed]: as in the solver, never saved unless forced.
      const bool can_save = in_forward && !TaggedRecompute(*r) && !(constant_[i] && !forced);
      s_var[i] = add_var(fmt::format("s:{}", r->name()), 0.0, forced ? 1.0 : 0.0, can_save ? 1.0 : 0.0);
      m.save_variables.push_back(s_var[i]);
      m.save_names.push_back(r->name());
      const double cost = in_forward && !constant_[op_of(r)->index()] ? RecomputeCost(*op_of(r), options_.recompute_flops_per_byte) : 0.0;
      for (size_t k = 0; k < K; ++k) {
        a_var[i].push_back(add_var(fmt::format("a:{}@{}", r->name(), k), 0.0, 0.0, 1.0));
        r_var[i].push_back(add_var(fmt::format("r:{}@{}", r->name(), k), cost, 0.0, forced ? 0.0 : 1.0));
      }
    }
    // User outputs: resident anyway (pinned_bytes), so saving them costs
    // nothing, and the saved set the MILP answers must name them -- a backward
    // that does not receive one it reads recomputes it (extraction drops the
    // ones it does not read). Not one a tag asks to recompute: never saved.
    for (const auto& up : g_.nodes()) {
      const Node* r = up.get();
      if (!pinned[r->index()] || root_[r->index()] != r || !r->isCallFunction() || TaggedRecompute(*r)) continue;
      m.save_variables.push_back(add_var(fmt::format("s:{}", r->name()), 0.0, 1.0, 1.0));
      m.save_names.push_back(r->name());
    }
    // Residency: resident at a point only if resident at the previous one (the
    // first: saved) or recomputed there.
    for (const Node* r : roots) {
      const size_t i = r->index();
      for (size_t k = 0; k < K; ++k)
        add_row({{a_var[i][k], 1.0}, {k == 0 ? s_var[i] : a_var[i][k - 1], -1.0}, {r_var[i][k], -1.0}}, -kInf, 0.0);
    }
    // Once: a value is saved or recomputed at one point, not both, not twice.
    // The emitted backward runs each of its nodes once and keeps a saved value
    // until its last read; a model free to drop a value and recompute it later
    // finds partitions no fxremat backward runs (and objectives below any).
    for (const Node* r : roots) {
      std::vector<std::pair<int64_t, double>> terms;
      for (size_t k = 0; k < K; ++k) terms.push_back({r_var[r->index()][k], 1.0});
      terms.push_back({s_var[r->index()], 1.0});
      add_row(std::move(terms), -kInf, 1.0);
    }
    // Reads: what a backward op reads is resident; what a recompute reads too.
    for (size_t k = 0; k < K; ++k)
      for (const Node* r : points[k].reads) bp.lower[static_cast<size_t>(a_var[r->index()][k])] = 1.0;
    for (const Node* r : roots)
      for (const Node* in : root_inputs[r->index()])
        for (size_t k = 0; k < K; ++k)
          add_row({{r_var[r->index()][k], 1.0}, {a_var[in->index()][k], -1.0}}, -kInf, 0.0);
    // Backward memory at each use point.
    const auto B = static_cast<double>(budget);
    m.constant_infeasible = tail + pinned_bytes > budget;
    for (size_t k = 0; k < K; ++k) {
      std::vector<std::pair<int64_t, double>> terms;
      for (const Node* r : roots) terms.push_back({a_var[r->index()][k], static_cast<double>(StorageBytesOf(*r))});
      add_row(std::move(terms), -kInf, B - static_cast<double>(points[k].base + pinned_bytes));
    }
    // Forward memory at each forward op: what is alive anyway, plus the saved
    // values the forward no longer reads.
    std::vector<int64_t> root_end(g_.size(), -1);
    for (const Node* node : forward_)
      if (const Node* r = root_[node->index()]; r && is_forward_[r->index()])
        root_end[r->index()] = std::max(root_end[r->index()], last_fwd_[node->index()]);
    // Each storage the forward allocates: [defined, last forward read]; items
    // of a tuple op are allocated by the op.
    struct Life {
      int64_t def, end, bytes, s;
      bool pinned;
    };
    std::vector<Life> lives;
    for (const auto& up : g_.nodes()) {
      const Node* r = up.get();
      if (root_[r->index()] != r || !r->isCallFunction() || !is_forward_[op_of(r)->index()]) continue;
      const int64_t def = pos_[op_of(r)->index()];
      lives.push_back({def, std::max(def, root_end[r->index()]), StorageBytesOf(*r), s_var[r->index()], pinned[r->index()]});
    }
    for (const Node* node : forward_) {
      const int64_t p = pos_[node->index()];
      int64_t fixed = 0;
      std::vector<std::pair<int64_t, double>> terms;
      for (const Life& l : lives) {
        if (l.def > p) continue;
        if (l.end >= p || l.pinned) fixed += l.bytes;
        else if (l.s >= 0) terms.push_back({l.s, static_cast<double>(l.bytes)});
      }
      m.constant_infeasible = m.constant_infeasible || fixed > budget;
      if (!terms.empty()) add_row(std::move(terms), -kInf, B - static_cast<double>(fixed));
    }
    return m;
  }

  // Every subset of the allocating forward values (Note [Peak budget]'s
  // exhaustive reference), on top of the inputs and the forced saves.
  Expected<std::vector<FrontPoint>> Exhaustive(int max_candidates) {
    std::vector<Node*> values;
    for (const auto& up : g_.nodes())
      if (Saveable(*up) && !is_forced_[up->index()]) values.push_back(up.get());
    if (static_cast<int>(values.size()) > max_candidates)
      return Status::BadInput(fmt::format("{} candidate values, more than the {} an exhaustive search takes",
                                          values.size(), max_candidates));
    const std::vector<bool> base = BaseSet();
    std::map<int64_t, FrontPoint> best;  // peak -> cheapest
    for (uint64_t mask = 0; mask < (uint64_t{1} << values.size()); ++mask) {
      std::vector<bool> in = base;
      for (size_t i = 0; i < values.size(); ++i)
        if (mask >> i & 1) in[values[i]->index()] = true;
      FXREMAT_ASSIGN_OR_RETURN(Evaluation ev, Evaluate(Collect(in)));
      auto it = best.find(ev.peak);
      if (it == best.end() || ev.cost < it->second.recompute_cost)
        best[ev.peak] = {ev.peak, ev.cost, ev.saved_bytes, fmt::format("subset {}", mask)};
    }
    std::vector<FrontPoint> front;
    for (const auto& [peak, point] : best)
      if (front.empty() || point.recompute_cost < front.back().recompute_cost) front.push_back(point);
    return front;
  }

  // The base set plus the named values, emitted and simulated.
  Expected<FrontPoint> EvaluateNamed(const std::vector<std::string>& names) {
    std::vector<bool> in = BaseSet();
    for (const std::string& name : names) {
      const Node* n = g_.findNode(name);
      if (!n) return Status::BadInput(fmt::format("no node named '{}' in the graph", name));
      in[n->index()] = true;
    }
    FXREMAT_ASSIGN_OR_RETURN(Partition p, Emit(Collect(in)));
    FXREMAT_ASSIGN_OR_RETURN(PeakEstimate e, SimulatePeak(p, options_.peak_model));
    std::vector<std::string> recomputed;
    for (const auto& up : p.backward->nodes())
      if (const Node* f = up->isCallFunction() ? p.forward->findNode(up->name()) : nullptr;
          f && f->isCallFunction() && f->target() == up->target())
        recomputed.push_back(up->name());
    return FrontPoint{e.peak_bytes, PartitionRecomputeCost(*p.forward, *p.backward, options_.recompute_flops_per_byte),
                      p.signature.savedBytes(), fmt::format("recomputed: {}", fmt::join(recomputed, ", "))};
  }

  // Note [Threads in the front]: PeakFront solves its budgets in parallel.
  // Choose only reads the solver's state, but for its evaluation cache (a
  // mutex) and two caches the joint graph fills on first use, filled here
  // beforehand: the name index and each node's op facts.
  void PrepareForThreads() const {
    (void)g_.findNode("");
    for (const auto& up : g_.nodes()) (void)up->opInfo();
  }

  const Candidate& minCut() const { return min_cut_; }
  const std::vector<Candidate>& candidates() const { return candidates_; }
  int64_t evaluations() const { return evaluations_; }

 private:
  const Graph& g_;
  const MinCutOptions& options_;
  JointClassification c_;
  std::vector<int64_t> pos_, last_fwd_, frontier_, prefix_;
  std::vector<bool> is_forward_;
  std::vector<const Node*> root_;
  std::vector<const Node*> forward_;
  std::vector<bool> is_forced_;  // may never be recomputed: saved by every candidate
  std::vector<bool> constant_;   // computed from no input: never saved unless forced (Note [Constant values are recomputed])
  // Note [Searching the saved set]: the joint graph as flat arrays.
  enum : uint8_t {
    kPlaceholder = 1, kOutput = 2, kCall = 4, kForwardOnly = 8, kImpure = 16, kTangentClosure = 32,
    kBwInput = 64,  // tangents, backward RNG states, opaque inputs
    kForwardSeed = 128,  // a forward output, or an impure op the forward can run
  };
  std::vector<uint8_t> flags_, base_;
  std::vector<double> node_cost_;  // RecomputeCost of each node
  std::vector<int32_t> in_off_, in_idx_, us_off_, us_idx_, bw_outputs_;
  std::vector<Candidate> candidates_;
  Candidate min_cut_;
  std::vector<Node*> pool_, movable_;
  std::unordered_map<std::string, Evaluation> cache_;
  std::mutex cache_mutex_;  // Note [Threads in the front]
  std::atomic<int64_t> evaluations_{0};
  double offload_cost_per_byte_ = 0;  // 0: offload is not a choice (Note [Offload in the budget])
  OffloadOptions offload_;             // how the offloaded values move (torch or torch_async)
};

}  // namespace

Expected<BudgetSolution> SolvePeakBudget(const Graph& prepared, const MinCutOptions& options) {
  ScopedPhase phase("solve-peak-budget");
  BudgetSolver solver(prepared, options);
  FXREMAT_RETURN_IF_ERROR(solver.Prepare());
  FXREMAT_RETURN_IF_ERROR(solver.BuildCandidates());
  const int64_t target = solver.Target();
  FXREMAT_ASSIGN_OR_RETURN(auto chosen, solver.Choose(target));
  BudgetSolution s;
  s.saved_values = chosen.saved;
  s.offloaded_values = chosen.offloaded;
  s.offloaded_bytes = chosen.ev.offloaded_bytes;
  s.budget_bytes = target;
  s.peak_bytes = chosen.ev.peak;
  // The budget-0 solve can come in below every candidate (Choose); a
  // partition that offloads can too (its device peak).
  s.smallest_peak_bytes = std::min(solver.SmallestPeak(), chosen.ev.peak);
  s.min_cut_peak_bytes = solver.minCut().ev.peak;
  s.recompute_cost = chosen.ev.cost;
  s.min_cut_recompute_cost = solver.minCut().ev.cost;
  s.candidates_evaluated = solver.evaluations();
  s.label = chosen.label;
  return s;
}

Expected<std::vector<FrontPoint>> PeakFront(const Graph& prepared, const MinCutOptions& options, int points) {
  BudgetSolver solver(prepared, options);
  FXREMAT_RETURN_IF_ERROR(solver.Prepare());
  FXREMAT_RETURN_IF_ERROR(solver.BuildCandidates());
  std::vector<FrontPoint> front;
  for (const auto& c : solver.candidates())
    front.push_back({c.ev.peak, c.ev.cost, c.ev.saved_bytes, c.label});
  const int64_t lo = solver.SmallestPeak(), hi = std::max(lo, solver.minCut().ev.peak);
  std::vector<double> fractions;
  std::vector<int64_t> targets;
  for (int i = 0; i < points; ++i) {
    fractions.push_back(points == 1 ? 0.0 : i / double(points - 1));
    targets.push_back(lo + static_cast<int64_t>(std::floor(fractions.back() * static_cast<double>(hi - lo))));
  }
  // Note [Threads in the front]: the budgets are independent problems over the
  // same candidates; up to 4 threads solve them (at most the machine's cores, or
  // the environment's FXREMAT_THREADS; one with the MILP, whose solver library
  // is not known to be thread-safe). Each answer is what a single thread finds:
  // the shared cache only memoizes evaluations (tests/python/test_budget.py
  // compares the two).
  const unsigned threads = options.budget_milp_max_variables > 0 ? 1u
                                                                  : std::min(SolverThreads(), static_cast<unsigned>(points));
  std::vector<std::optional<Expected<BudgetSolver::Candidate>>> chosen(static_cast<size_t>(points));
  solver.PrepareForThreads();
  ForEachOnThreads(threads, static_cast<size_t>(points), [&](size_t i) { chosen[i] = solver.Choose(targets[i]); });
  for (int i = 0; i < points; ++i) {
    Expected<BudgetSolver::Candidate>& c = *chosen[static_cast<size_t>(i)];
    if (!c.ok()) return c.status();
    front.push_back({c->ev.peak, c->ev.cost, c->ev.saved_bytes, fmt::format("budget {:.2f}", fractions[static_cast<size_t>(i)])});
  }
  return front;
}

}  // namespace fxremat

namespace fxremat {

Expected<BudgetMilp> BuildBudgetMilp(const Graph& prepared, const MinCutOptions& options, int64_t budget_bytes) {
  BudgetSolver solver(prepared, options);
  FXREMAT_RETURN_IF_ERROR(solver.Prepare());
  return solver.BuildMilp(budget_bytes);
}

Expected<FrontPoint> EvaluateSavedSet(const Graph& prepared, const MinCutOptions& options,
                                      const std::vector<std::string>& saved_names) {
  BudgetSolver solver(prepared, options);
  FXREMAT_RETURN_IF_ERROR(solver.Prepare());
  return solver.EvaluateNamed(saved_names);
}

Expected<std::vector<FrontPoint>> ExhaustiveFront(const Graph& prepared, const MinCutOptions& options,
                                                  int max_candidates) {
  BudgetSolver solver(prepared, options);
  FXREMAT_RETURN_IF_ERROR(solver.Prepare());
  return solver.Exhaustive(max_candidates);
}

}  // namespace fxremat
