// The partition pipeline (Note [Partition pipeline] in fxremat/pipeline.h).
#include "fxremat/pipeline.h"
#include "fxremat/phases.h"

#include <optional>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "fxremat/pass.h"
#include "fxremat/peak_model.h"
#include "passes/budget_partition.h"
#include "passes/default_partition.h"
#include "passes/cse.h"
#include "passes/eliminate_dead_code.h"
#include "passes/force_saves.h"
#include "passes/min_cut_partition.h"
#include "passes/protect_mutations.h"
#include "src/partition_internal.h"

namespace fxremat {

Expected<OffloadTarget> OffloadTargetFromName(std::string_view name) {
  if (name == "torch") return OffloadTarget::kTorch;
  if (name == "xla") return OffloadTarget::kXla;
  if (name == "torch_async") return OffloadTarget::kTorchAsync;
  return Status::BadInput(fmt::format("unknown offload target '{}' (torch, torch_async or xla)", name));
}

std::string_view OffloadTargetName(OffloadTarget t) {
  switch (t) {
    case OffloadTarget::kXla: return "xla";
    case OffloadTarget::kTorchAsync: return "torch_async";
    case OffloadTarget::kTorch: break;
  }
  return "torch";
}

namespace {

// Note [Classified while searching]
// At 20,000 nodes and more, PrepareForCut searches for common subexpressions
// on a second thread, and this one, once its own checks are made, would wait
// for it (at a million nodes ~90 ms of checks beside ~250 ms of search). When
// those checks found nothing to change, the joint graph is cut as it is unless
// the search finds duplicates, so this thread classifies the joint graph
// (ClassifyJoint only reads it, as the search does) and the cut takes that
// classification if no copy was made; a copy, or a classification that
// failed, is classified again by the cut, as before.

// The min cut's preparation stages on a copy of `joint`; null when none has
// work (the joint graph is cut as it is). `classified_joint`, if given, may
// receive ClassifyJoint(joint) (Note [Classified while searching]).
Expected<std::unique_ptr<Graph>> PrepareForCut(const Graph& joint, const MinCutOptions& options,
                                               std::optional<JointClassification>* classified_joint = nullptr) {
  if (options.static_lifetime_input_indices) {
    int64_t primals = 0;
    for (const Node* p : joint.placeholders()) primals += p->role() == PlaceholderRole::kPrimal;
    for (int64_t k : *options.static_lifetime_input_indices)
      if (k < 0 || k >= primals)
        return Status::BadInput(fmt::format("index {} is out of range of the graph's {} primals", k, primals),
                                "static_lifetime_input_indices");
  }
  ScopedPhase phase("prepare");
  // Found on the joint graph, the merges are made on its copy without a second
  // search (a copy keeps node indices) unless dead-code elimination runs first.
  // A large graph's search runs on a second thread while this one makes the
  // other checks (they all only read the joint graph); its result is dropped
  // if there is dead code. At a million nodes: ~230 ms beside ~90 ms.
  std::vector<DuplicateNode> duplicates;
  PhaseLog* const log = CurrentPhaseLog();
  PhaseLog search_log;
  std::jthread search;
  if (options.cse && joint.size() >= ExtractOptions{}.parallel_from_nodes) {
    try {
      search = std::jthread([&] {
        ScopedPhaseLog install(log ? &search_log : nullptr);
        duplicates = FindCommonSubexpressions(joint);
      });
    } catch (const std::system_error&) {  // no thread: searched below
    }
  }
  const bool searching = search.joinable();
  FXREMAT_ASSIGN_OR_RETURN(bool has_recomputable, HasRecomputableOps(joint));
  // The reference mutates the joint graph (dead code, CSE, tags, forced saves);
  // fxremat works on a copy, made only when one of those steps has something
  // to change.
  const bool has_dead = !FindDeadCode(joint).empty();
  const bool has_forced = NeedsForcedSaves(joint);
  const bool has_mutations = HasForwardMutations(joint);
  bool has_demands = options.policy.has_value();
  for (const auto& up : joint.nodes())
    has_demands = has_demands || up->meta().recompute != Decision::kNone || up->meta().offload_requested;
  // Nothing for the stages to change but what the search may find.
  const bool only_cse_may_change = !has_recomputable && !has_dead && !has_forced && !has_demands && !has_mutations;
  if (searching) {
    if (classified_joint && only_cse_may_change)
      if (Expected<JointClassification> c = ClassifyJoint(joint); c.ok()) *classified_joint = std::move(*c);
    search.join();
    if (log) log->Merge(search_log);
  } else if (options.cse && !has_dead) {
    duplicates = FindCommonSubexpressions(joint);
  }
  if (has_dead) duplicates.clear();
  const bool has_duplicates = options.cse && (has_dead || !duplicates.empty());
  if (only_cse_may_change && !has_duplicates) return std::unique_ptr<Graph>();
  // Note [Min-cut preparation]: the reference's steps before its cut, in its
  // order, each a registered pass (fxremat/pass.h), run when it has work.
  const std::pair<std::string_view, bool> stages[] = {
      {"eliminate-dead-code", has_dead},        {"cse", has_duplicates},
      {"protect-mutations", has_mutations},     {"cleanup-recompute-tags", has_recomputable},
      {"force-saves", has_forced},              {"apply-policy", has_demands},
      {"check-mutation-demands", has_mutations},
  };
  std::unique_ptr<Graph> g = CloneGraph(joint);
  PassOptions pass_options;
  pass_options.policy = options.policy ? &*options.policy : nullptr;
  // cse is the first stage to run on the copy unless eliminate-dead-code ran.
  pass_options.cse_duplicates = has_dead ? nullptr : &duplicates;
  for (const auto& [pass, needed] : stages)
    if (needed) FXREMAT_RETURN_IF_ERROR(RunGraphPass(pass, *g, pass_options).status());
  return g;
}

// Step 1 of the pipeline: the annotation ops folded on a copy; null when the
// graph has none.
Expected<std::unique_ptr<Graph>> FoldAnnotationsIfAny(const Graph& joint, const PassOptions& pass_options) {
  bool has_annotations = false;
  for (const auto& up : joint.nodes()) has_annotations = has_annotations || (up->isCallFunction() && IsAnnotationOp(up->target()));
  if (!has_annotations) return std::unique_ptr<Graph>();
  std::unique_ptr<Graph> folded = CloneGraph(joint);
  FXREMAT_RETURN_IF_ERROR(RunGraphPass("fold-annotations", *folded, pass_options).status());
  return folded;
}

// Whether a saved random op's value was saved because fxremat would not
// recompute it (untagged, or its draw cannot be replayed), rather than by the
// partitioner's choice between saving and replaying it (Note [Replaying random
// ops] in passes/functionalize_rng.h).
// A tag asking to recompute it that is not honoured is reported, by op.
bool RandomOpSavedAsDrawn(Partition& p, const Node& op, const SavedValue& v) {
  if (v.decision.find("RECOMPUTE") == std::string::npos) return true;
  if (RandomOpReplayable(op)) return false;  // the partitioner chose to save it (a PREFER_RECOMPUTE weight)
  p.signature.notes.push_back(fmt::format(
      "'{}' ({}) is tagged {} but is saved: {}; the saved value keeps the gradients exact, at {} bytes", v.name,
      op.target(), v.decision, UnreplayableReason(op), v.bytes));
  return true;
}


// Note [Saved-value rules]
// Every saved value carries the rule that decided it (SavedValue::rule; the
// residual report prints it, the signature stores it). In order of precedence:
//   "input"                          a primal: the backward may always read it;
//   "policy <DECISION>"              a policy or tag that saves or offloads it;
//   "random op (never replayed)"     its op draws random numbers and fxremat
//                                    would not replay it (RandomOpSavedAsDrawn);
//   "reads a mutated input"          Note [Mutated inputs];
//   "must be in the forward"         the op may not run in the backward;
//   "forward output"                 the caller holds it anyway;
//   "RNG state of <op>"              the generator state a replayed random op
//                                    draws from (set by functionalize-rng,
//                                    after this function);
// otherwise the partitioner's own choice: "min cut", "default partition" (what
// the backward reads of the forward), or "budget: <candidate>" (the peak-budget
// solver's winning candidate, e.g. "segments of <= 4096 B + local search",
// which CutPreparedGraph leaves in SavedValue::rule for this function).
void AssignSavedValueRules(Partition& p, const Graph& g, const std::string& partitioner_rule) {
  ScopedPhase phase("assign-saved-value-rules");
  std::vector<bool> is_forward_output(g.size(), false);
  const std::vector<Node*> outputs = g.outputValues();
  for (size_t i = 0; i < outputs.size() && i < static_cast<size_t>(p.signature.num_fwd_outputs); ++i)
    if (outputs[i]) is_forward_output[outputs[i]->index()] = true;
  // The joint node of each saved value, found on one walk of g (looking each
  // up by name would build g's name index: a million entries for a million nodes).
  std::unordered_map<std::string_view, size_t> saved_by_name;
  saved_by_name.reserve(p.signature.saved.size());
  for (size_t i = 0; i < p.signature.saved.size(); ++i) saved_by_name.emplace(p.signature.saved[i].name, i);
  std::vector<const Node*> saved_nodes(p.signature.saved.size(), nullptr);
  for (const auto& up : g.nodes())
    if (auto it = saved_by_name.find(up->name()); it != saved_by_name.end()) saved_nodes[it->second] = up.get();
  for (size_t i = 0; i < p.signature.saved.size(); ++i) {
    SavedValue& v = p.signature.saved[i];
    const std::string own = v.rule.empty() ? partitioner_rule : v.rule;
    const Node* n = saved_nodes[i];
    const Node* tuple = n && n->isGetItem() && !n->inputs().empty() ? n->inputs()[0] : nullptr;
    auto any = [&](auto pred) { return (n && pred(*n)) || (tuple && pred(*tuple)); };
    if (n && n->isPlaceholder()) v.rule = "input";
    else if (v.decision.find("SAVE") != std::string::npos || v.decision.find("OFFLOAD") != std::string::npos)
      v.rule = "policy " + v.decision;  // a PREFER_RECOMPUTE value saved anyway is the partitioner's choice
    else if (const Node* op = tuple && IsRandomOp(*tuple) ? tuple : (n && IsRandomOp(*n) ? n : nullptr);
             op && RandomOpSavedAsDrawn(p, *op, v)) {
      v.rule = "random op (never replayed)";
    } else if (any([](const Node& x) { return !x.meta().rare().reads_mutated.empty(); })) v.rule = "reads a mutated input";
    else if (any([](const Node& x) { return MustBeInForward(x); })) v.rule = "must be in the forward";
    else if (n && is_forward_output[n->index()]) v.rule = "forward output";
    else v.rule = own;
    // Note [Snapshots of mutated inputs]
    constexpr std::string_view kCopied = "copied before the write";
    if (v.snapshot && v.rule.find(kCopied) == std::string::npos)
      v.rule = v.rule.empty() ? std::string(kCopied) : fmt::format("{}, {}", v.rule, kCopied);
  }
}

}  // namespace

Expected<Partition> RunMinCutStages(const Graph& joint, const MinCutOptions& options) {
  std::optional<JointClassification> classified_joint;
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> prepared, PrepareForCut(joint, options, &classified_joint));
  if (prepared) return CutPreparedGraph(*prepared, options);
  return CutPreparedGraph(joint, options, std::move(classified_joint));
}

Expected<std::unique_ptr<Graph>> PrepareMinCutGraph(const Graph& joint, const MinCutOptions& options) {
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> prepared, PrepareForCut(joint, options));
  return prepared ? std::move(prepared) : CloneGraph(joint);
}

Expected<std::unique_ptr<Graph>> PrepareBudgetGraph(const Graph& joint, const PartitionRequest& request) {
  if (request.partitioner != "mincut")
    return Status::BadInput("the peak budget needs the mincut partitioner (the default partition has no choice)");
  PassOptions pass_options;
  pass_options.offload = request.mincut.OffloadOptionsFor(request.offload_target);
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> folded, FoldAnnotationsIfAny(joint, pass_options));
  const Graph& g = folded ? *folded : joint;
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> prepared, PrepareForCut(g, request.mincut));
  if (prepared) return prepared;
  return folded ? std::move(folded) : CloneGraph(joint);
}

Expected<std::vector<FrontPoint>> RunPeakFront(const Graph& joint, const PartitionRequest& request, int points) {
  if (points < 1 || points > 1000) return Status::BadInput(fmt::format("--points takes 1 to 1000, not {}", points));
  // The front spans every budget on the peak (activation_memory_budget, which
  // the ambient config may set, is not read); a byte budget or PyTorch's
  // saved-bytes objective would be ignored, so it is refused.
  if (request.mincut.memory_budget_bytes)
    return Status::BadInput(fmt::format("the front spans every budget: memory_budget_bytes ({}) does not apply to it; "
                                        "use partition for one budget",
                                        *request.mincut.memory_budget_bytes));
  if (request.mincut.budget_objective != "peak")
    return Status::BadInput(fmt::format("the front is of the peak objective: budget_objective={} does not apply to it",
                                        request.mincut.budget_objective));
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> prepared, PrepareBudgetGraph(joint, request));
  MinCutOptions mincut = request.mincut;
  mincut.offload_target = request.offload_target;
  return PeakFront(*prepared, mincut, points);
}

Expected<Partition> RunPartition(const Graph& joint, const PartitionRequest& request) {
  if (request.partitioner != "mincut" && request.partitioner != "default")
    return Status::BadInput(fmt::format("unknown partitioner '{}' (available: mincut, default)", request.partitioner));
  FXREMAT_RETURN_IF_ERROR(CheckMinCutOptions(request.mincut));
  if (request.partitioner == "default" && request.mincut.policy)
    return Status::BadInput("a policy needs the mincut partitioner: the default partition saves what the forward "
                            "computes and the backward uses, with no choice to constrain");
  if (request.mincut.offload_bandwidth_gbps > 0 && request.offload_target == OffloadTarget::kXla)
    return Status::BadInput("offload_bandwidth_gbps lets the budget solver offload with the torch targets' transfers "
                            "(torch, torch_async); it cannot be combined with --offload-target xla");
  if (request.barrier && request.offload_target != OffloadTarget::kXla)
    return Status::BadInput("--barrier inserts xla::optimization_barrier and needs the xla target (--offload-target xla)");

  PassOptions pass_options;
  pass_options.keep_annotations = request.keep_annotations;
  pass_options.offload = request.mincut.OffloadOptionsFor(request.offload_target);
  // 1. The annotation ops are folded on a copy; graphs without any skip the copy.
  FXREMAT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> folded, FoldAnnotationsIfAny(joint, pass_options));
  const Graph* g = folded ? folded.get() : &joint;

  // 2. The partitioner.
  Partition p;
  if (request.partitioner == "default") {
    // The default partition has no choice to make, but it honours
    // xla::offload_name: a saved value that carries the request is offloaded.
    // apply-policy (no policy) rejects requests that cannot be honoured.
    bool offload_requests = false;
    for (const auto& up : g->nodes()) offload_requests = offload_requests || up->meta().offload_requested;
    if (offload_requests) {
      if (!folded) {
        folded = CloneGraph(joint);
        g = folded.get();
      }
      FXREMAT_RETURN_IF_ERROR(RunGraphPass("apply-policy", *folded, pass_options).status());
    }
    FXREMAT_ASSIGN_OR_RETURN(p, DefaultPartition(*g));
    // So is a value tagged for CPU offload (saved by the default partition).
    for (SavedValue& v : p.signature.saved)
      if (const Node* n = g->findNode(v.name); n && (n->meta().offload_requested || IsOffload(n->meta().recompute)))
        v.offloaded = true;
    AssignSavedValueRules(p, *g, "default partition");
  } else {
    MinCutOptions mincut = request.mincut;
    mincut.offload_target = request.offload_target;
    FXREMAT_ASSIGN_OR_RETURN(p, MinCutPartition(*g, mincut));
    AssignSavedValueRules(p, *g, "min cut");  // unless the budget solver named its own (CutPreparedGraph)
  }
  // The order AOTAutograd's reference gives its graphs: the min cut always
  // mimics the autograd engine in the backward, the default partition when
  // checkpoint tags made it recompute; getitems follow their producers.
  // (The min cut needs no look: it reorders either way.)
  bool reorder = request.partitioner == "mincut";
  if (!reorder) {
    FXREMAT_ASSIGN_OR_RETURN(reorder, HasRecomputableOps(*g));
  }
  // 3., 4. and 5.
  FXREMAT_RETURN_IF_ERROR(RunPartitionPass("functionalize-rng", p, pass_options).status());
  if (reorder)
    FXREMAT_RETURN_IF_ERROR(RunGraphPass("reorder-backward", *p.backward, pass_options).status());
  FXREMAT_RETURN_IF_ERROR(RunGraphPass("raise-getitems", *p.forward, pass_options).status());
  FXREMAT_RETURN_IF_ERROR(RunGraphPass("raise-getitems", *p.backward, pass_options).status());
  // 6. and 7.
  FXREMAT_RETURN_IF_ERROR(RunPartitionPass("emit-offload", p, pass_options).status());
  if (request.barrier) FXREMAT_RETURN_IF_ERROR(RunPartitionPass("insert-barriers", p, pass_options).status());
  // 8. What the step's peak will be.
  if (request.simulate_peak) FXREMAT_RETURN_IF_ERROR(AttachStepPeak(p, request));
  return p;
}

Status AttachStepPeak(Partition& p, const PartitionRequest& request) {
  // Note [Peak model].
  Expected<PeakEstimate> simulated = [&] {
    ScopedPhase phase("simulate-peak");
    return SimulatePeak(p, request.mincut.peak_model);
  }();
  FXREMAT_ASSIGN_OR_RETURN(PeakEstimate peak, std::move(simulated));
  PeakSummary summary;
  if (p.signature.peak) summary.budget_bytes = p.signature.peak->budget_bytes;
  // Note [Peak budget]: never over budget, checked on what is emitted.
  if (summary.budget_bytes && peak.peak_bytes > *summary.budget_bytes)
    return Status::Internal(fmt::format("the emitted partition's simulated peak, {} B, is over the budget of {} B",
                                        peak.peak_bytes, *summary.budget_bytes));
  summary.bytes = peak.peak_bytes;
  summary.node = peak.peak_node;
  summary.graph = peak.peak_graph;
  summary.live_after_forward_bytes = peak.live_after_forward_bytes;
  p.signature.peak = summary;
  return Status::Ok();
}

}  // namespace fxremat
