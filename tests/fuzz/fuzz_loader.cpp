// libFuzzer target for every reader of user input: graph documents (JSON), the
// IR text form, policy files (JSON) and --policy strings, and signatures. Any
// byte string must be read or refused with a Status, never crash, hang, leak or
// hit undefined behaviour (the target is built with ASan + UBSan), and what is
// read must hold the readers' promises:
//   - a graph passes VerifyGraph, prints, and its JSON and text forms read back;
//   - a joint graph of bounded size partitions under the min cut (with and
//     without a policy) and the default partitioner, or fails with a Status;
//   - a policy writes to JSON and reads back equal.
// A broken promise is __builtin_trap(), a crash libFuzzer reports with its input.
//
// Build and run: `make fuzz` (build-fuzz/, clang, seed corpus from
// tests/fuzz/make_corpus.py, FUZZ_SECONDS=60); .ci/run runs it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fxremat/partition.h"
#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"

namespace {

// The partitioners run on graphs up to this many nodes (keeps executions fast;
// the readers see inputs of any size).
constexpr size_t kMaxPartitionNodes = 200;

void Check(bool ok) {
  if (!ok) __builtin_trap();
}

void Partition(const fxremat::Graph& graph, const fxremat::PolicySpec* policy) {
  fxremat::PartitionRequest request;
  if (policy) request.mincut.policy = *policy;
  auto partition = fxremat::RunPartition(graph, request);
  if (!partition.ok()) return;
  // What the pipeline emits is a valid pair of graphs with a consistent signature.
  Check(fxremat::VerifyGraph(*partition->forward).ok());
  Check(fxremat::VerifyGraph(*partition->backward).ok());
  Check(fxremat::CheckSignature(*partition->forward, *partition->backward, partition->signature).ok());
  (void)fxremat::SignatureFromJson(fxremat::SignatureToJson(partition->signature), "signature");
}

void Graph(const fxremat::Graph& graph) {
  Check(fxremat::VerifyGraph(graph).ok());
  const std::string text = fxremat::PrintGraph(graph);
  const std::string json = fxremat::GraphToJson(graph);
  // Both forms read back (a writer never emits what its reader refuses).
  Check(fxremat::ParseGraph(text).ok());
  Check(fxremat::GraphFromJson(json).ok());
  if (graph.kind() != fxremat::GraphKind::kJoint || graph.nodes().size() > kMaxPartitionNodes) return;
  Partition(graph, nullptr);
  if (auto policy = fxremat::ParsePolicy("nothing_saveable"); policy.ok()) Partition(graph, &*policy);
  fxremat::PartitionRequest request;
  request.partitioner = "default";
  (void)fxremat::RunPartition(graph, request);
}

void Policy(const fxremat::PolicySpec& spec) {
  (void)spec.ToString();
  auto back = fxremat::PolicyFromJson(fxremat::PolicyToJson(spec), "round trip");
  Check(back.ok());
  Check(*back == spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Every reader sees the input until one reads it (what one reads, the others
  // refuse: a graph document is no policy); that saves parsing it again.
  if (auto graph = fxremat::GraphFromJson(text); graph.ok()) return Graph(**graph), 0;
  if (auto graph = fxremat::ParseGraph(text); graph.ok()) return Graph(**graph), 0;
  if (auto policy = fxremat::PolicyFromJson(text, "--policy-file"); policy.ok()) return Policy(*policy), 0;
  if (auto policy = fxremat::ParsePolicy(text); policy.ok()) return Policy(*policy), 0;
  (void)fxremat::SignatureFromJson(std::string(text), "signature.json");
  return 0;
}
