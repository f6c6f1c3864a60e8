// min_cut_partition: the saved values are a minimum cut of a flow network
// built over the joint graph, exactly as the reference builds it
// (torch/_functorch/partitioners.py, torch 2.13: classify_nodes,
// solve_min_cut, min_cut_rematerialization_partition). Assumes a verified joint
// graph with op facts (schemas, tags and packet tags) for every aten op.
//
// Note [Min-cut network]
// Every node X becomes two vertices X_in and X_out joined by an edge whose
// capacity is the cost of saving X (its bytes, scaled by distance from the
// backward; infinite when X cannot be saved). Data edges X_out -> Y_in are
// infinite. source -> X_in (infinite) bans recomputing X; X_in -> sink forces X
// into the backward; X_out -> sink says X's value must be available to the
// backward. A minimum cut then picks the cheapest set of X_in -> X_out edges
// separating the forward's inputs from what the backward needs: the saved values.
//
// Note [Policy demands in the cut]
// ApplyPolicy (fxremat/policy.h) leaves one decision per value in
// meta().recompute; the network honours it as follows.
//   MUST_RECOMPUTE      X_in -> sink (infinite), as the reference does.
//   PREFER_RECOMPUTE    the save edge costs prefer_recompute_factor times its
//                       usual weight, and no heuristic bans X (the reference's
//                       must_recompute also skips them); a random op is
//                       banned only where its draw cannot be replayed (Note
//                       [Replaying random ops] in functionalize_rng.h), so it
//                       is saved rather than recomputed with new numbers. The
//                       reference treats PREFER_RECOMPUTE as MUST_RECOMPUTE.
//   MUST_SAVE           banned from recomputation (source -> X_in, infinite).
//   MUST_CPU_OFFLOAD    as MUST_SAVE; saved values are then offloaded.
//   PREFER_SAVE         source -> X_in with prefer_save_factor times the save
//                       edge's weight: recomputing X is charged more than saving
//                       it, so with a factor above 1 X is saved whenever the
//                       backward needs it and it can be saved (JAX's
//                       "saveable"); X is still never saved when nothing needs
//                       it. The reference ignores PREFER_SAVE.
//   PREFER_CPU_OFFLOAD  as PREFER_SAVE; saved values are then offloaded.
#include "passes/min_cut_partition.h"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "fxremat/op_categories.h"
#include "fxremat/phases.h"
#include "fxremat/pass.h"
#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "passes/budget_partition.h"
#include "passes/default_partition.h"
#include "src/facts_check.h"
#include "src/max_flow.h"
#include "src/partition_internal.h"

namespace fxremat {

namespace {

// ---------------------------------------------------------------------------
// Op categories (the reference's get_default_op_list), by overload packet.
// ---------------------------------------------------------------------------

// Per-node op categories, computed once.
struct OpCategory {
  bool recomputable = false;
  bool fusible = false;  // recomputable or random
  bool random = false;
  bool compute_intensive = false;
  bool view = false;
  bool cat = false;
};

OpCategory Categorize(const Node& n) {
  OpCategory c;
  if (!n.isCallFunction()) return c;
  std::string_view p = PacketOf(n.target());
  const OpInfo* info = n.opInfo();
  // Python callables in aten graphs are SymInt arithmetic (the reference's
  // magic methods) and getitem: all recomputable.
  c.recomputable = IsPythonCallableTarget(n.target()) || InDefaultRecomputableOps(p) ||
                   (info && info->packetHasTag("pointwise"));
  c.random = InDefaultRandomOps(p);
  c.fusible = c.recomputable || c.random;
  c.compute_intensive = InDefaultComputeIntensiveOps(p);
  c.view = InDefaultViewOps(p);
  c.cat = p == "aten.cat";
  return c;
}


// The reference's _size_of (Note [Size of a value] in partition.h).
int64_t SizeOf(const Node& n) {
  if (n.val().is_sym()) return 1;
  return n.val().nbytes();
}

// Why an infinite edge exists, for the infeasible-cut explanation.
enum class EdgeReason : uint8_t {
  kNone, kCannotRecompute, kCannotSave, kDataDependency, kAvailableForBackward, kComputedInBackward, kMustRecompute,
  kPreferSave,
};

// a * factor, saturating below the infinite capacity.
int64_t Scaled(int64_t a, double factor) {
  const double v = static_cast<double>(a) * factor;
  const double cap = static_cast<double>(kInfiniteCapacity) / 4;
  return v >= cap ? static_cast<int64_t>(cap) : static_cast<int64_t>(v);
}

class NetworkBuilder {
 public:
  NetworkBuilder(const Graph& joint, const JointClassification& c, const MinCutOptions& options)
      : joint_(joint), c_(c), options_(options), n_(joint.size()), network_(static_cast<int32_t>(2 * n_ + 2)) {}

  Expected<MinCutSolution> Solve();

 private:
  int32_t In(const Node& n) const { return static_cast<int32_t>(2 * n.index()); }
  int32_t Out(const Node& n) const { return static_cast<int32_t>(2 * n.index() + 1); }
  int32_t Source() const { return static_cast<int32_t>(2 * n_); }
  int32_t Sink() const { return static_cast<int32_t>(2 * n_ + 1); }
  bool RequiredFw(const Node& n) const { return c_.required_by_forward[n.index()] && !n.isOutput(); }
  int64_t FwOrder(const Node& n) const { return fw_order_[n.index()]; }
  void ComputeNodeFacts();
  void AddNodeEdges(const Node& node);
  void BanUsedFarApart();
  void BanLongFusibleChains();

  // Why an edge cannot be cut, as its parts: a message is only built for the
  // edges of an infinite path (ExplainInfinitePath), and building one per
  // banned node cost a string and a map node each (a third of a million at
  // a million nodes).
  struct EdgeDetail {
    int32_t edge;
    const char* kind;    // "cannot recompute", "cannot save"
    const char* reason;  // static text; with `about`, a format string taking it
    std::string_view about;  // a node name or an interned text, alive while the builder is
  };
  void AddEdge(int32_t from, int32_t to, int64_t capacity, EdgeReason reason, const char* kind = nullptr,
               const char* detail = nullptr, std::string_view about = {}) {
    network_.addEdge(from, to, capacity);
    reasons_.push_back(reason);
    if (kind) details_.push_back({static_cast<int32_t>(reasons_.size() - 1), kind, detail, about});
  }
  // The message of edge e's detail, "?" if it has none.
  std::string DetailText(int32_t e) const;
  bool IsFusible(const Node& a, const Node& b) const {
    if (cat_[b.index()].cat) return true;
    return cat_[a.index()].fusible && cat_[b.index()].fusible;
  }
  bool IsMaterializedBackwards(const Node& node) const;
  const char* ShouldBanRecomputation(const Node& node) const;
  bool IsMaterialized(const Node& node) const;
  // `forced` bans even a PREFER_RECOMPUTE value (primals, random ops); the
  // heuristics do not.
  // `reason`: static text, or with `about` a format string taking it.
  bool BanRecomputationIfAllowed(const Node& node, const char* reason, std::string_view about = {},
                                 bool forced = false);
  Decision DecisionOf(const Node& n) const { return decision_[n.index()]; }
  int64_t FindFirstUnfusible(const std::vector<Node*>& start_nodes, int64_t max_range) const;
  Status ExplainInfinitePath(const std::vector<int32_t>& path) const;
  std::string VertexName(int32_t v) const;

  const Graph& joint_;
  const JointClassification& c_;
  const MinCutOptions& options_;
  size_t n_;
  FlowNetwork network_;
  std::vector<EdgeReason> reasons_;
  std::vector<EdgeDetail> details_;  // by edge, ascending
  std::vector<OpCategory> cat_;
  std::vector<int64_t> dist_from_bw_, fw_order_;
  std::vector<bool> banned_, required_bw_, static_lifetime_;
  std::vector<Decision> decision_;
  std::vector<Node*> banned_order_;
  std::vector<const Node*> order_to_node_;  // required-forward nodes by fw order
  // Effective heuristics (aggressive_recomputation turns most off).
  bool ban_used_far_apart_ = true, ban_long_chains_ = true, ban_materialized_ = true, ban_not_in_allowlist_ = true;
};

bool NetworkBuilder::IsMaterializedBackwards(const Node& node) const {
  if (cat_[node.index()].view) return false;
  std::vector<const Node*> cur_nodes{&node};
  while (!cur_nodes.empty()) {
    const Node* cur = cur_nodes.back();
    cur_nodes.pop_back();
    for (const Node* user : cur->users()) {
      if (!RequiredFw(*user) && !IsFusible(*cur, *user)) return true;
      if (cat_[user->index()].view) cur_nodes.push_back(user);
    }
  }
  return false;
}

const char* NetworkBuilder::ShouldBanRecomputation(const Node& node) const {
  if (!node.isCallFunction() || node.isGetItem()) return nullptr;
  if (node.meta().recompute == Decision::kMustSave) return "marked MUST_SAVE";
  if (node.meta().recompute == Decision::kMustOffload) return "marked MUST_CPU_OFFLOAD";
  const OpCategory& c = cat_[node.index()];
  if (options_.recompute_views && c.view) return nullptr;
  if (node.target() == "aten.lift_fresh_copy.default" || node.target() == "aten.lift_fresh.default") return nullptr;
  if (ban_not_in_allowlist_) {
    if (!c.recomputable) return "not in recomputable allowlist";
  } else {
    if (c.random) return "random op";
    if (c.compute_intensive) return "compute intensive op";
  }
  if (ban_materialized_ && IsMaterializedBackwards(node)) return "materialized in backward";
  const int64_t dist = dist_from_bw_[node.index()];
  if (dist < 1000 && dist > options_.max_dist_from_bw) return "too far from backward";
  if (options_.ban_recompute_reductions) {
    int64_t input_size = 0;
    for (const Argument& a : node.args())
      if (a.is_node()) input_size += SizeOf(*a.node);
    if (SizeOf(node) * 4 < input_size) return "reduction op";
  }
  return nullptr;
}

bool NetworkBuilder::IsMaterialized(const Node& node) const {
  if (node.isPlaceholder()) return true;
  for (const Node* user : node.users())
    if (!IsFusible(node, *user)) return true;
  return false;
}

bool NetworkBuilder::BanRecomputationIfAllowed(const Node& node, const char* reason, std::string_view about,
                                               bool forced) {
  if (cat_[node.index()].view) return false;
  if (DecisionOf(node) == Decision::kMustRecompute) return false;
  if (DecisionOf(node) == Decision::kPreferRecompute && !forced) return false;
  if (node.val().kind == ValueFacts::Kind::kSymFloat) return false;
  if (banned_[node.index()]) return true;  // one source edge per node
  banned_[node.index()] = true;
  banned_order_.push_back(const_cast<Node*>(&node));
  AddEdge(Source(), In(node), kInfiniteCapacity, EdgeReason::kCannotRecompute, "cannot recompute", reason, about);
  return true;
}

std::string NetworkBuilder::DetailText(int32_t e) const {
  auto it = std::lower_bound(details_.begin(), details_.end(), e,
                             [](const EdgeDetail& d, int32_t edge) { return d.edge < edge; });
  if (it == details_.end() || it->edge != e) return "?";
  if (!it->reason || !*it->reason) return it->kind;
  const std::string reason = it->about.empty() ? std::string(it->reason) : fmt::format(fmt::runtime(it->reason), it->about);
  return fmt::format("{}: {}", it->kind, reason);
}

// Position of the first unfusible use in the chain of forward users starting at
// `start_nodes`, or max_range. The reference keeps a heap of (order, node,
// is_fusible) tuples; on equal order (the same node) the unfusible entry pops
// first, which the (order, fusible) pair ordering reproduces.
int64_t NetworkBuilder::FindFirstUnfusible(const std::vector<Node*>& start_nodes, int64_t max_range) const {
  using Entry = std::pair<int64_t, bool>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::set<Entry> in_heap;  // the reference skips pushing a tuple already in the heap
  auto push = [&](const Node& n, bool fusible) {
    Entry e{FwOrder(n), fusible};
    if (in_heap.insert(e).second) heap.push(e);
  };
  for (const Node* n : start_nodes) push(*n, true);
  while (!heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    in_heap.erase(top);
    if (!top.second) return top.first;
    const Node& node = *order_to_node_[static_cast<size_t>(top.first)];
    for (const Node* user : node.users()) {
      if (!RequiredFw(*user) || FwOrder(*user) > max_range) continue;
      push(*user, IsFusible(node, *user));
    }
  }
  return max_range;
}

void NetworkBuilder::ComputeNodeFacts() {
  cat_.resize(n_);
  PerTarget<OpCategory> by_target;  // Note [Facts per target]
  for (const auto& up : joint_.nodes())
    if (up->isCallFunction()) cat_[up->index()] = by_target.get(*up, Categorize);  // others: Categorize's default
  required_bw_ = c_.in_tangents_closure;
  for (Node* o : c_.backward_outputs)
    if (o && !o->isOutput()) required_bw_[o->index()] = true;
  fw_order_.assign(n_, -1);
  for (const auto& up : joint_.nodes()) {
    if (!RequiredFw(*up)) continue;
    fw_order_[up->index()] = static_cast<int64_t>(order_to_node_.size());
    order_to_node_.push_back(up.get());
  }
  // Distance (in ops) to the nearest use outside the forward, in reverse order.
  constexpr int64_t kFar = 1000000000;
  dist_from_bw_.assign(n_, kFar);
  for (size_t i = n_; i-- > 0;) {
    const Node& node = *joint_.nodes()[i];
    if (node.isOutput()) { dist_from_bw_[i] = kFar; continue; }
    if (!RequiredFw(node)) { dist_from_bw_[i] = 0; continue; }
    int64_t d = kFar;
    for (const Node* user : node.users()) d = std::min(d, dist_from_bw_[user->index()] + 1);
    dist_from_bw_[i] = d;
  }
  static_lifetime_.assign(n_, false);
  if (options_.static_lifetime_input_indices) {
    for (int64_t k : *options_.static_lifetime_input_indices)
      if (k >= 0 && static_cast<size_t>(k) < c_.primals.size()) static_lifetime_[c_.primals[static_cast<size_t>(k)]->index()] = true;
  } else {
    for (Node* p : c_.primals)
      if (p->path().rfind("params[", 0) == 0 || p->path().rfind("buffers[", 0) == 0) static_lifetime_[p->index()] = true;
  }
  banned_.assign(n_, false);
  decision_.assign(n_, Decision::kNone);
  for (const auto& up : joint_.nodes()) decision_[up->index()] = up->meta().recompute;
  ban_used_far_apart_ = options_.ban_recompute_used_far_apart && !options_.aggressive_recomputation;
  ban_long_chains_ = options_.ban_recompute_long_fusible_chains && !options_.aggressive_recomputation;
  ban_materialized_ = options_.ban_recompute_materialized_backward && !options_.aggressive_recomputation;
  ban_not_in_allowlist_ = options_.ban_recompute_not_in_allowlist && !options_.aggressive_recomputation;
}

void NetworkBuilder::AddNodeEdges(const Node& node) {
  const size_t i = node.index();
  // Note [Opaque inputs] (fxremat/partition.h): the backward gets an opaque
  // primal from the caller, so nothing needs to be cut to have it there.
  if (node.isPlaceholder() && node.val().kind == ValueFacts::Kind::kOpaque) return;
  if (required_bw_[i]) {
    // See the reference's Note [tangents_closure vs required_bw_nodes].
    if (!c_.in_tangents_closure[i]) {
      AddEdge(Out(node), Sink(), kInfiniteCapacity, EdgeReason::kAvailableForBackward);
    } else {
      AddEdge(In(node), Sink(), kInfiniteCapacity, EdgeReason::kComputedInBackward);
      return;
    }
  }
  const Decision decision = DecisionOf(node);
  if (decision == Decision::kMustRecompute) {
    AddEdge(In(node), Sink(), kInfiniteCapacity, EdgeReason::kMustRecompute);
    return;
  }
  const bool prefer_recompute = decision == Decision::kPreferRecompute;
  // Note [Mutated inputs]: recomputed in the backward it would read overwritten data.
  if (!node.meta().rare().reads_mutated.empty())
    BanRecomputationIfAllowed(node, "reads '{}' before the forward overwrites it (Note [Mutated inputs])",
                              node.meta().rare().reads_mutated.str(), /*forced=*/true);
  if (node.role() == PlaceholderRole::kPrimal) BanRecomputationIfAllowed(node, "primal input", {}, /*forced=*/true);
  else if (node.role() == PlaceholderRole::kFwdRng) BanRecomputationIfAllowed(node, "forward RNG seed", {}, /*forced=*/true);
  if (prefer_recompute && IsRandomOp(node) && !RandomOpReplayable(node))
    BanRecomputationIfAllowed(node, "random op whose draw cannot be replayed on its device", {}, /*forced=*/true);
  if (node.meta().partitioner_tag == PartitionerTag::kIsForward && HopReturnsItsInputs(node))
    BanRecomputationIfAllowed(node, "its body returns its inputs (Note [Bodies that return their inputs])", {},
                              /*forced=*/true);
  if (RequiredFw(node) && !prefer_recompute)
    if (const char* reason = ShouldBanRecomputation(node)) BanRecomputationIfAllowed(node, reason);

  int64_t weight = 0;
  const char* cannot_save = nullptr;
  const ValueFacts& val = node.val();
  if (val.is_sym()) {
    weight = val.kind == ValueFacts::Kind::kSymFloat ? 4 : 1;
  } else if (val.kind == ValueFacts::Kind::kConst && node.isPlaceholder()) {
    weight = 1;  // a Python scalar input (specialized int): saved as the reference saves it
  } else if (!val.is_tensor()) {
    cannot_save = "non-tensor output";
  } else if (options_.treat_parameters_as_free_to_save && static_lifetime_[i]) {
    weight = 0;
  } else if (options_.recompute_views && cat_[i].view) {
    cannot_save = "view op (recompute_views=True)";
  } else {
    // Bias towards saving values close to the backward (the reference's guess).
    const int64_t exponent = std::max<int64_t>(std::min<int64_t>(dist_from_bw_[i], 100), 1);
    // Saturating: sizes up to 2^63 bytes times 1.1^100 must not wrap (a
    // wrapped weight would be a negative capacity).
    weight = Scaled(SizeOf(node), std::pow(1.1, static_cast<double>(exponent)));
    if (!IsMaterialized(node)) weight = Scaled(weight, 2.0);
  }
  if (cannot_save) {
    AddEdge(In(node), Out(node), kInfiniteCapacity, EdgeReason::kCannotSave, "cannot save", cannot_save);
  } else {
    if (prefer_recompute) weight = Scaled(std::max<int64_t>(weight, 1), options_.prefer_recompute_factor);
    AddEdge(In(node), Out(node), weight, EdgeReason::kNone);
    // Note [Policy demands in the cut]: recomputing a preferred-saved value costs more than saving it.
    if ((decision == Decision::kPreferSave || decision == Decision::kPreferOffload) && !banned_[i])
      AddEdge(Source(), In(node), Scaled(std::max<int64_t>(weight, 1), options_.prefer_save_factor),
              EdgeReason::kPreferSave);
  }
  for (const Node* user : node.users())
    if (!user->isOutput())  // the output node's vertex is a dead end
      AddEdge(Out(node), In(*user), kInfiniteCapacity, EdgeReason::kDataDependency);
}

// A fusible use of a value that comes after the first unfusible use of it is
// unlikely to fuse with the earlier uses if recomputed: ban recomputing it.
void NetworkBuilder::BanUsedFarApart() {
  for (const Node* used : order_to_node_) {
    std::vector<Node*> fw_users;
    int64_t max_order = -1;
    for (Node* user : used->users()) {
      if (!RequiredFw(*user)) continue;
      fw_users.push_back(user);
      max_order = std::max(max_order, FwOrder(*user));
    }
    if (fw_users.empty()) continue;
    const int64_t first_unfusible_use = FindFirstUnfusible(fw_users, max_order);
    for (Node* user : used->users()) {
      if (RequiredFw(*user) && FwOrder(*user) > first_unfusible_use && IsFusible(*used, *user)) {
        if (banned_[user->index()]) continue;
        BanRecomputationIfAllowed(*user, "a fusible use of '{}' after its first unfusible use "
                                         "(ban_recompute_used_far_apart)", used->name());
      }
    }
  }
}

// A chain of more than 100 fusible forward ops (residual streams) is cut by
// banning recomputation at its end.
void NetworkBuilder::BanLongFusibleChains() {
  std::vector<bool> visited(n_, false);
  using Entry = std::pair<int64_t, const Node*>;
  auto cmp = [](const Entry& a, const Entry& b) { return a.first > b.first; };
  for (const Node* start : order_to_node_) {
    std::priority_queue<Entry, std::vector<Entry>, decltype(cmp)> fusible(cmp);
    const int64_t start_order = FwOrder(*start);
    fusible.push({start_order, start});
    while (!fusible.empty()) {
      const Node* cur = fusible.top().second;
      fusible.pop();
      if (visited[cur->index()]) continue;
      visited[cur->index()] = true;
      if (FwOrder(*cur) > start_order + 100 && fusible.empty()) {
        BanRecomputationIfAllowed(*cur, "ends a fusible chain of over 100 ops from '{}' "
                                        "(ban_recompute_long_fusible_chains)", start->name());
        break;
      }
      for (const Node* user : cur->users())
        if (RequiredFw(*user) && IsFusible(*cur, *user) && !banned_[user->index()])
          fusible.push({FwOrder(*user), user});
    }
  }
}

std::string NetworkBuilder::VertexName(int32_t v) const {
  if (v == Source()) return "source";
  if (v == Sink()) return "sink";
  const Node& node = *joint_.nodes()[static_cast<size_t>(v / 2)];
  return node.name() + (v % 2 == 0 ? "_in" : "_out");
}

Status NetworkBuilder::ExplainInfinitePath(const std::vector<int32_t>& path) const {
  std::string lines;
  std::string raw = "source";
  for (int32_t e : path) {
    const int32_t from = network_.from(e), to = network_.to(e);
    raw += " -> " + VertexName(to);
    const Node& node = *joint_.nodes()[static_cast<size_t>((to == Sink() ? from : to) / 2)];
    std::string reason;
    switch (reasons_[static_cast<size_t>(e)]) {
      case EdgeReason::kCannotRecompute:
      case EdgeReason::kCannotSave: reason = DetailText(e); break;
      case EdgeReason::kDataDependency:
        reason = fmt::format("depends on '{}'", joint_.nodes()[static_cast<size_t>(from / 2)]->name());
        break;
      case EdgeReason::kAvailableForBackward:
        reason = "must be available for backward: input required for gradient";
        break;
      case EdgeReason::kComputedInBackward: {
        // Name the tangent (or backward-only value) that forces it there.
        const Node* cause = &node;
        while (cause->role() != PlaceholderRole::kTangent && !MustBeInBackward(*cause)) {
          const Node* next = nullptr;
          for (const Node* input : cause->inputs())
            if (c_.in_tangents_closure[input->index()]) { next = input; break; }
          if (!next) break;
          cause = next;
        }
        reason = cause == &node ? "must be computed in backward: required for gradient"
                                : fmt::format("must be computed in backward: depends on {}", cause->name());
        break;
      }
      case EdgeReason::kMustRecompute: reason = "must recompute: marked MUST_RECOMPUTE"; break;
      case EdgeReason::kPreferSave: reason = "?"; break;
      case EdgeReason::kNone: reason = "?"; break;
    }
    lines += fmt::format("\n  {}: {}", node.name(), reason);
  }
  return Status::BadInput(
      fmt::format("infeasible partition: the minimum cut is infinite. A value the backward needs can be "
                  "neither saved nor recomputed. The infinite path from source to sink:{}\n  [path] {}",
                  lines, raw),
      fmt::format("node '{}'", joint_.nodes()[static_cast<size_t>(network_.to(path.front()) / 2)]->name()));
}

Expected<MinCutSolution> NetworkBuilder::Solve() {
  {
    ScopedPhase phase("build-network");
    ComputeNodeFacts();
    for (const auto& up : joint_.nodes())
      if (!up->isOutput()) AddNodeEdges(*up);
    if (ban_used_far_apart_) BanUsedFarApart();
    if (ban_long_chains_) BanLongFusibleChains();
  }

  MinCutSolution solution;
  solution.network_nodes = network_.numVertices();
  solution.network_edges = network_.numEdges();
  solution.banned_nodes = banned_order_;
  std::vector<int32_t> infinite_path = [&] {
    ScopedPhase phase("find-infinite-path");
    return FindInfinitePath(network_, Source(), Sink());
  }();
  if (!infinite_path.empty()) return ExplainInfinitePath(infinite_path);
  Expected<MinCut> solved = [&] {
    ScopedPhase phase("max-flow");
    return fxremat::SolveMinCut(network_, Source(), Sink(), options_.max_flow);
  }();
  FXREMAT_ASSIGN_OR_RETURN(MinCut cut, std::move(solved));
  solution.cut_value = cut.value;
  std::vector<bool> saved(n_, false);
  for (int32_t e = 0; e < network_.numEdges(); ++e) {
    const int32_t from = network_.from(e), to = network_.to(e);
    if (!cut.source_side[static_cast<size_t>(from)] || cut.source_side[static_cast<size_t>(to)]) continue;
    if (from % 2 != 0 || to != from + 1 || from == Source())
      return Status::Internal(fmt::format("cut edge {} -> {} is not a node's save edge", VertexName(from), VertexName(to)));
    saved[static_cast<size_t>(from / 2)] = true;
  }
  for (const auto& up : joint_.nodes())
    if (saved[up->index()]) solution.saved_values.push_back(up.get());
  return solution;
}

}  // namespace

OffloadOptions MinCutOptions::OffloadOptionsFor(OffloadTarget target) const {
  OffloadOptions o;
  o.target = target;
  o.device_flops_per_second = device_tflops * 1e12;
  o.device_bytes_per_second = device_memory_bandwidth_gbps * 1e9;
  o.link_bytes_per_second = (offload_bandwidth_gbps > 0 ? offload_bandwidth_gbps : kDefaultOffloadBandwidthGbps) * 1e9;
  return o;
}

Status CheckMinCutOptions(const MinCutOptions& options) {
  if (options.memory_budget_bytes && options.activation_memory_budget < 1.0)
    return Status::BadInput(fmt::format(
        "two budgets given: memory_budget_bytes={} and activation_memory_budget={}; give one (bytes of peak above the "
        "inputs, or a fraction between the smallest peak and the min cut's)",
        *options.memory_budget_bytes, options.activation_memory_budget));
  return Status::Ok();
}

// "64MiB", "1.5GB", "4096" -> bytes. Digits and a decimal point only:
// std::stod also took "0x10" (as 16), " 5", "1e3", "+5" and "-0". The value
// times the unit must be a whole number of bytes ("1.5GiB" is, "1.9" is not):
// a double rounded it down without a word, so "0.3" (meant as a fraction of
// the range, which --config activation_memory_budget takes) became a budget
// of 0 bytes. The product is worked out on the decimal digits, exactly, which
// "1.1KB" needs to come out whole.
Expected<int64_t> ParseByteSize(const std::string& text, std::string_view what) {
  const Status malformed =
      Status::BadInput(fmt::format("{} takes a byte size such as 4096, 64MiB or 1.5GB, not '{}'", what, text));
  auto is_digit = [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; };
  size_t end = 0;
  while (end < text.size() && is_digit(text[end])) ++end;
  const std::string whole = text.substr(0, end);
  std::string fraction;
  if (end < text.size() && text[end] == '.') {
    const size_t fraction_begin = ++end;
    while (end < text.size() && is_digit(text[end])) ++end;
    fraction = text.substr(fraction_begin, end - fraction_begin);
  }
  if (whole.empty() && fraction.empty()) return malformed;
  const std::string unit = text.substr(end);
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"", 1},           {"B", 1},           {"KB", 1000},       {"MB", 1000000}, {"GB", 1000000000},
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
  };
  const auto* found =
      std::find_if(std::begin(kUnits), std::end(kUnits), [&](const auto& u) { return unit == u.first; });
  if (found == std::end(kUnits)) return malformed;
  const bool below_one = whole.find_first_not_of('0') == std::string::npos &&
                         fraction.find_first_not_of('0') != std::string::npos;
  if (below_one && unit.empty())
    return Status::BadInput(fmt::format("{} takes a whole number of bytes, not '{}'; a fraction of the "
                                        "range from the smallest peak to the min cut's is --config "
                                        "activation_memory_budget={}",
                                        what, text, text));
  // The digits times the unit, most significant first; the last
  // fraction.size() of them lie after the point and must be zeros.
  std::string digits = whole + fraction;
  uint64_t carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    const uint64_t d = static_cast<uint64_t>(*it - '0') * found->second + carry;
    *it = static_cast<char>('0' + d % 10);
    carry = d / 10;
  }
  for (; carry > 0; carry /= 10) digits.insert(digits.begin(), static_cast<char>('0' + carry % 10));
  if (digits.find_first_not_of('0', digits.size() - fraction.size()) != std::string::npos)
    return Status::BadInput(fmt::format("{} {} is not a whole number of bytes", what, text));
  digits.resize(digits.size() - fraction.size());
  int64_t bytes = 0;
  if (digits.empty()) return bytes;
  if (auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), bytes); ec != std::errc())
    return Status::BadInput(fmt::format("{} {} is more than 2^63 - 1 bytes", what, text));
  return bytes;
}

Status SetMinCutOption(MinCutOptions& options, const std::string& name, const std::string& value) {
  auto as_bool = [&](bool& out) -> Status {
    if (value == "true" || value == "True" || value == "1") { out = true; return Status::Ok(); }
    if (value == "false" || value == "False" || value == "0") { out = false; return Status::Ok(); }
    return Status::BadInput(fmt::format("option {} takes true or false, not '{}'", name, value));
  };
  if (name == "recompute_views") return as_bool(options.recompute_views);
  if (name == "aggressive_recomputation") return as_bool(options.aggressive_recomputation);
  if (name == "ban_recompute_used_far_apart") return as_bool(options.ban_recompute_used_far_apart);
  if (name == "ban_recompute_long_fusible_chains") return as_bool(options.ban_recompute_long_fusible_chains);
  if (name == "ban_recompute_materialized_backward") return as_bool(options.ban_recompute_materialized_backward);
  if (name == "ban_recompute_not_in_allowlist") return as_bool(options.ban_recompute_not_in_allowlist);
  if (name == "ban_recompute_reductions") return as_bool(options.ban_recompute_reductions);
  if (name == "treat_parameters_as_free_to_save") return as_bool(options.treat_parameters_as_free_to_save);
  if (name == "cse") return as_bool(options.cse);
  if (name == "prefer_save_factor" || name == "prefer_recompute_factor") {
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(v >= 0))
      return Status::BadInput(fmt::format("option {} takes a non-negative number, not '{}'", name, value));
    (name == "prefer_save_factor" ? options.prefer_save_factor : options.prefer_recompute_factor) = v;
    return Status::Ok();
  }
  if (name == "max_dist_from_bw") {
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    // Beyond int64 (or nan) the cast would be undefined; any distance above
    // the graph's size means "no limit" anyway.
    // A whole number (functorch's knob is an int): 2.5 would be truncated silently.
    if (value.empty() || *end != '\0' || !(v >= -9.2e18 && v <= 9.2e18) || v != std::floor(v))
      return Status::BadInput(fmt::format("option {} takes a whole number of nodes, not '{}'", name, value));
    options.max_dist_from_bw = static_cast<int64_t>(v);
    return Status::Ok();
  }
  if (name == "activation_memory_budget" || name == "recompute_flops_per_byte") {
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v))
      return Status::BadInput(fmt::format("option {} takes a number, not '{}'", name, value));
    if (name == "recompute_flops_per_byte") {
      if (v < 0) return Status::BadInput(fmt::format("option {} takes a non-negative number, not '{}'", name, value));
      options.recompute_flops_per_byte = v;
      return Status::Ok();
    }
    if (v < 0 || v > 1)
      return Status::BadInput(fmt::format("activation_memory_budget={} is outside [0, 1] (a fraction between the "
                                          "smallest peak and the min cut's; memory_budget_bytes takes bytes)", value));
    options.activation_memory_budget = v;
    return Status::Ok();
  }
  if (name == "offload_bandwidth_gbps" || name == "device_memory_bandwidth_gbps" || name == "device_tflops") {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    const bool zero_allowed = name == "offload_bandwidth_gbps";
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || (v == 0 && !zero_allowed))
      return Status::BadInput(fmt::format("option {} takes a {} number of {}, not '{}'", name,
                                          zero_allowed ? "non-negative" : "positive",
                                          name == "device_tflops" ? "TFLOP/s" : "GB/s", value));
    (name == "offload_bandwidth_gbps"         ? options.offload_bandwidth_gbps
     : name == "device_memory_bandwidth_gbps" ? options.device_memory_bandwidth_gbps
                                              : options.device_tflops) = v;
    return Status::Ok();
  }
  if (name == "budget_milp_max_variables" || name == "budget_milp_max_nodes") {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || errno == ERANGE || v < 0)
      return Status::BadInput(fmt::format("option {} takes a non-negative integer, not '{}'", name, value));
    (name == "budget_milp_max_variables" ? options.budget_milp_max_variables : options.budget_milp_max_nodes) = v;
    return Status::Ok();
  }
  if (name == "memory_budget_bytes") {  // with the CLI's --memory-budget units (ParseByteSize)
    FXREMAT_ASSIGN_OR_RETURN(int64_t bytes, ParseByteSize(value, "option memory_budget_bytes"));
    options.memory_budget_bytes = bytes;
    return Status::Ok();
  }
  if (name == "peak_model") {
    if (value == "eager") options.peak_model = PeakModelKind::kEager;
    else if (value == "inductor") options.peak_model = PeakModelKind::kInductor;
    else return Status::BadInput(fmt::format("option peak_model takes eager or inductor, not '{}'", value));
    return Status::Ok();
  }
  if (name == "budget_objective") {
    if (value != "peak" && value != "saved")
      return Status::BadInput(fmt::format("option budget_objective takes peak or saved, not '{}'", value));
    options.budget_objective = value;
    return Status::Ok();
  }
  if (name == "static_lifetime_input_indices") {
    std::vector<int64_t> indices;
    size_t start = 0;
    while (start < value.size()) {
      size_t comma = value.find(',', start);
      std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      char* end = nullptr;
      long long v = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0') return Status::BadInput(fmt::format("option {}: '{}' is not an index", name, item));
      indices.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    options.static_lifetime_input_indices = indices;
    return Status::Ok();
  }
  if (name == "max_flow") {
    if (!MaxFlowAlgorithmFromName(value, options.max_flow))
      return Status::BadInput(fmt::format("unknown max_flow '{}' (dinic, boykov_kolmogorov or push_relabel)", value));
    return Status::Ok();
  }
  return Status::BadInput(fmt::format("unknown min-cut option '{}'", name));
}

Expected<MinCutSolution> SolveMinCut(const Graph& joint, const MinCutOptions& options) {
  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(joint));
  return SolveMinCut(joint, c, options);
}

Expected<MinCutSolution> SolveMinCut(const Graph& joint, const JointClassification& c, const MinCutOptions& options) {
  ScopedPhase phase("solve-min-cut");
  if (options.budget_objective == "saved" && options.activation_memory_budget == 0.0) {
    MinCutSolution s;
    s.saved_values = c.primals;
    s.saved_values.insert(s.saved_values.end(), c.fwd_rng.begin(), c.fwd_rng.end());
    // Note [Mutated inputs]: a value that reads overwritten data is saved
    // instead of recomputed, wherever the backward would recompute it.
    std::vector<bool> seen(joint.size(), false), extra(joint.size(), false);
    std::vector<const Node*> stack;
    for (const auto& up : joint.nodes())
      if (c.in_tangents_closure[up->index()] && !up->isOutput())
        for (const Node* in : up->inputs()) stack.push_back(in);
    for (Node* o : c.backward_outputs)
      if (o) stack.push_back(o);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (seen[n->index()] || c.in_tangents_closure[n->index()] || n->isPlaceholder()) continue;
      seen[n->index()] = true;
      // A getitem of a multi-output op that reads overwritten data (BatchNorm's
      // results) carries the same data: it is saved; the tuple itself never is.
      // Random ops are never replayed (they would draw again): their results
      // are saved too -- where PyTorch would functionalize the RNG instead.
      const Node* tuple = n->isGetItem() && !n->inputs().empty() ? n->inputs()[0] : nullptr;
      // So are the values that must be saved (Note [Forced saves]: effects,
      // collectives, the results of a call that stays in the forward) and a
      // value that cannot leave the forward: the backward cannot recompute them.
      const bool marked = !n->meta().rare().reads_mutated.empty() || (tuple && !tuple->meta().rare().reads_mutated.empty()) ||
                          IsRandomOp(*n) || (tuple && IsRandomOp(*tuple)) || n->meta().recompute == Decision::kMustSave ||
                          MustBeInForward(*n) || (tuple && MustBeInForward(*tuple));
      if (marked && n->val().is_tensor()) { extra[n->index()] = true; continue; }
      for (const Node* in : n->inputs()) stack.push_back(in);
    }
    for (const auto& up : joint.nodes())
      if (extra[up->index()]) s.saved_values.push_back(up.get());
    return s;
  }
  NetworkBuilder builder(joint, c, options);
  return builder.Solve();
}

namespace {

// A saved value whose decision (ExtractPartition copies it from the node) is an
// offload decision goes to host memory.
void MarkOffloaded(Partition& p) {
  for (SavedValue& v : p.signature.saved) {
    auto d = DecisionFromName(v.decision);
    v.offloaded = d.ok() && IsOffload(*d);
  }
}

}  // namespace

// Partitions `g`, which the preparation stages already ran on.
Expected<MinCutOptions> ResolveRegionBudget(const Graph& g, const JointClassification& c, MinCutOptions options) {
  // Note [Region budgets]: in increasing precedence, the option (or ambient
  // config), the first node's legacy memory_budget, the region budget.
  for (const auto& up : g.nodes())
    if (up->meta().rare().memory_budget) {
      options.activation_memory_budget = *up->meta().rare().memory_budget;
      break;
    }
  std::set<double> budgets;
  std::vector<const Node*> unannotated;  // named only in the error: most graphs have no budget
  for (const auto& up : g.nodes()) {
    if (up->meta().rare().region_memory_budget) budgets.insert(*up->meta().rare().region_memory_budget);
    else if (up->isCallFunction() && c.required_by_forward[up->index()]) unannotated.push_back(up.get());
  }
  // As the reference (torch 2.13), a budget must cover the higher-order ops'
  // bodies too (Note [Higher-order ops]): every node of every subgraph, nested
  // ones included, carries it, or the budget did not cover that op.
  std::function<void(const Graph&, int)> visit = [&](const Graph& graph, int depth) {
    for (const auto& [name, sub] : graph.subgraphs()) {
      if (depth > kMaxSubgraphNesting) return;
      for (const auto& up : sub->nodes()) {
        if (up->meta().rare().region_memory_budget) budgets.insert(*up->meta().rare().region_memory_budget);
        else if (up->isCallFunction()) unannotated.push_back(up.get());
      }
      visit(*sub, depth + 1);
    }
  };
  visit(g, 0);
  // Python's repr of a float: 0.0, 0.5, 1e-05.
  auto py_float = [](double d) {
    std::string s = fmt::format("{}", d);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  };
  std::vector<std::string> printed;
  for (double b : budgets) printed.push_back(py_float(b));
  auto quoted = [](const std::vector<const Node*>& nodes) {  // a Python list of str
    std::vector<std::string> out;
    for (const Node* n : nodes) out.push_back("'" + n->name() + "'");
    return out;
  };
  if (budgets.size() > 1)
    return Status::BadInput(fmt::format(
        "torch.autograd.graph.region_activation_memory_budget: conflicting budgets within a single joint graph "
        "(including nested subgraphs): [{}]. Use a graph break to separate regions that need different budgets.",
        fmt::join(printed, ", ")));
  if (!budgets.empty()) {
    if (!unannotated.empty())
      return Status::BadInput(fmt::format(
          "torch.autograd.graph.region_activation_memory_budget: must cover the entire forward of a graph "
          "(including HOP bodies), but {} forward op(s) are unannotated. Wrap the whole forward in a single region; "
          "use a graph break to scope different budgets to different graphs. Note that a graph break inside the "
          "annotated region can also cause unannotated ops here. Unannotated ops: [{}].",
          unannotated.size(), fmt::join(quoted(unannotated), ", ")));
    options.activation_memory_budget = *budgets.begin();
  }
  if (options.activation_memory_budget < 0 || options.activation_memory_budget > 1)
    return Status::BadInput(fmt::format("memory budget {} (a node's memory_budget) is outside [0, 1]",
                                        options.activation_memory_budget));
  return options;
}

Expected<Partition> CutPreparedGraph(const Graph& g, const MinCutOptions& given_options,
                                     std::optional<JointClassification> classified) {
  ScopedPhase phase("cut");
  if (!classified) {
    Expected<JointClassification> fresh = ClassifyJoint(g);
    if (!fresh.ok()) return fresh.status();
    classified = std::move(*fresh);
  }
  JointClassification c = std::move(*classified);
  FXREMAT_ASSIGN_OR_RETURN(const MinCutOptions options, ResolveRegionBudget(g, c, given_options));
  bool any_required_bw = false;
  for (size_t i = 0; i < g.size() && !any_required_bw; ++i) any_required_bw = c.in_tangents_closure[i];
  for (Node* o : c.backward_outputs) any_required_bw = any_required_bw || o != nullptr;
  if (!any_required_bw) {
    // Nothing depends on a tangent: as the reference, hand over to the default partition.
    FXREMAT_ASSIGN_OR_RETURN(std::vector<Node*> saved, ChooseDefaultSavedValues(g));
    return ExtractPartition(g, c, saved, "mincut");
  }
  if (options.budget_objective == "saved" &&
      ((options.activation_memory_budget != 0.0 && options.activation_memory_budget != 1.0) ||
       options.memory_budget_bytes))
    return Status::BadInput(fmt::format(
        "budget_objective=saved (PyTorch's meaning) supports activation_memory_budget 1.0 and 0.0 only, not {}; "
        "the peak objective (the default) takes any fraction and memory_budget_bytes",
        options.memory_budget_bytes ? fmt::format("memory_budget_bytes={}", *options.memory_budget_bytes)
                                    : fmt::format("{}", options.activation_memory_budget)));
  if (WantsPeakBudget(options)) {
    // Note [Peak budget]
    FXREMAT_ASSIGN_OR_RETURN(BudgetSolution budget, SolvePeakBudget(g, options));
    ExtractOptions extract;
    extract.save_shared_storages_once = true;  // Note [Saved values never alias each other]
    FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractPartition(g, c, budget.saved_values, "mincut", extract));
    MarkOffloaded(p);
    MarkOffloadedValues(p, budget.offloaded_values);  // Note [Offload in the budget]
    // Note [Saved-value rules]: the solver's own rule; the pipeline puts the
    // rules that take precedence (inputs, policies, forced saves) over it.
    for (SavedValue& v : p.signature.saved) v.rule = "budget: " + budget.label;
    PeakSummary summary;
    summary.budget_bytes = budget.budget_bytes;
    p.signature.peak = summary;
    return p;
  }
  FXREMAT_ASSIGN_OR_RETURN(MinCutSolution solution, SolveMinCut(g, c, options));
  std::vector<Node*> saved;
  for (Node* n : solution.saved_values)
    if (!IsAssertOnlySymBool(*n)) saved.push_back(n);
  FXREMAT_ASSIGN_OR_RETURN(Partition p, ExtractPartition(g, c, saved, "mincut"));
  MarkOffloaded(p);
  return p;
}

Expected<Partition> MinCutPartition(const Graph& joint, const MinCutOptions& options) {
  return RunMinCutStages(joint, options);  // Note [Partition pipeline], step 2
}

}  // namespace fxremat
