// `fxremat inspect`: counts, classification and activation bytes of a graph.
#include "fxremat/inspect.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "fxremat/partition.h"
#include "fxremat/pipeline.h"

namespace fxremat {

namespace {
std::string Bytes(int64_t b) {
  if (b >= (int64_t{1} << 20)) return fmt::format("{} B ({:.2f} MiB)", b, static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{} B ({:.1f} KiB)", b, static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}
}  // namespace

Expected<std::string> InspectGraph(const Graph& graph) {
  std::string out;
  out += fmt::format("graph {}: kind {}, {} nodes\n", graph.name().empty() ? "(unnamed)" : graph.name(),
                     GraphKindName(graph.kind()), graph.size());
  std::map<std::string, int64_t> op_counts;
  std::map<std::string, int64_t> role_counts;
  int64_t call_functions = 0;
  for (const auto& up : graph.nodes()) {
    if (up->isCallFunction()) { ++call_functions; ++op_counts[up->target()]; }
    if (up->isPlaceholder()) ++role_counts[std::string(PlaceholderRoleName(up->role()))];
  }
  out += fmt::format("  placeholders: {}\n", graph.placeholders().size());
  for (const auto& [role, n] : role_counts) out += fmt::format("    {:<8} {}\n", role, n);
  out += fmt::format("  ops: {} calls, {} distinct targets\n", call_functions, op_counts.size());
  std::vector<std::pair<std::string, int64_t>> sorted(op_counts.begin(), op_counts.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [target, n] : sorted) out += fmt::format("    {:>5}  {}\n", n, target);
  if (graph.kind() != GraphKind::kJoint) return out;

  FXREMAT_ASSIGN_OR_RETURN(JointClassification c, ClassifyJoint(graph));
  int64_t forward = 0, backward = 0, other = 0;
  for (const auto& up : graph.nodes()) {
    if (!up->isCallFunction()) continue;
    if (c.required_by_forward[up->index()]) ++forward;
    else if (c.in_tangents_closure[up->index()]) ++backward;
    else ++other;
  }
  out += fmt::format("  classification (call_function nodes):\n");
  out += fmt::format("    forward  (needed by the forward outputs)   {}\n", forward);
  out += fmt::format("    backward (depend on tangents)              {}\n", backward);
  out += fmt::format("    other    (backward-only, from primals)     {}\n", other);
  int64_t primal_bytes = 0, primals_with_grad = 0;
  for (Node* p : c.primals) primal_bytes += p->val().nbytes();
  for (Node* g : c.backward_outputs) primals_with_grad += g != nullptr;
  out += fmt::format("  primals: {} ({} with gradients), {}\n", c.primals.size(), primals_with_grad, Bytes(primal_bytes));
  out += fmt::format("  forward outputs: {}, tangents: {}\n", c.forward_outputs.size(), c.tangents.size());
  // The partition `fxremat partition --partitioner default` emits, by the same
  // pipeline (its extraction alone refused joints the pipeline partitions, such
  // as a random op tagged MUST_RECOMPUTE, whose tag the pipeline clears).
  PartitionRequest request;
  request.partitioner = "default";
  request.simulate_peak = false;
  FXREMAT_ASSIGN_OR_RETURN(Partition p, RunPartition(graph, request));
  int64_t activation = 0, from_primals = 0;
  for (const SavedValue& s : p.signature.saved) {
    const Node* n = graph.findNode(s.name);
    if (n && n->isPlaceholder()) from_primals += s.bytes;
    else activation += s.bytes;
  }
  out += fmt::format("  saved for backward (default partition): {} values, {}\n", p.signature.saved.size(),
                     Bytes(p.signature.savedBytes()));
  out += fmt::format("    activations {}, primals {}\n", Bytes(activation), Bytes(from_primals));
  return out;
}

}  // namespace fxremat
