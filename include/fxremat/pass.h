// The pass interface: every graph transformation of the pipeline is a named
// pass that runs on a graph (or on an emitted partition) and says whether it
// changed it, or fails with an error. The registry (passes/registry.cpp) lists
// them; the pipeline (pipeline.h, Note [Partition pipeline]) runs them by name
// in order, and the golden tests (tests/golden/*.test, `// RUN: NAME`) look
// them up by the same name.
#pragma once

#include <string_view>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/policy.h"
#include "fxremat/status.h"

namespace fxremat {

struct DuplicateNode;  // passes/cse.h

// Every option any pass reads, in one place.
struct PassOptions {
  // fold-annotations: keep the naming ops in the graph (only record the names).
  bool keep_annotations = false;
  // cleanup-recompute-tags: the default partitioner's extra rule (the inputs of
  // a checkpoint region become MUST_SAVE); the min cut does not apply it.
  bool default_partition = false;
  // apply-policy: the checkpoint policy; null applies only the nodes' own tags
  // and annotations.
  const PolicySpec* policy = nullptr;
  // emit-offload: where offloaded values go, and how (torch_async's placement).
  OffloadOptions offload;
  // cse: the merges FindCommonSubexpressions (passes/cse.h) already found on
  // the graph this one is a clone of (CloneGraph keeps node indices), made
  // without searching again; null searches the graph.
  const std::vector<DuplicateNode>* cse_duplicates = nullptr;
};

// A pass over one graph (a joint graph before partitioning, or an emitted one).
struct GraphPass {
  std::string_view name;     // "cse": the name the pipeline and the golden tests use
  std::string_view purpose;  // one line, for `fxremat passes` and error messages
  Expected<bool> (*run)(Graph& graph, const PassOptions& options);
};

// A pass over an emitted partition (both graphs and the signature).
struct PartitionPass {
  std::string_view name;
  std::string_view purpose;
  Expected<bool> (*run)(Partition& partition, const PassOptions& options);
};

// The registries, in pipeline order.
const std::vector<GraphPass>& GraphPasses();
const std::vector<PartitionPass>& PartitionPasses();
const GraphPass* FindGraphPass(std::string_view name);
const PartitionPass* FindPartitionPass(std::string_view name);

// Runs a registered pass; an unknown name is an internal error.
Expected<bool> RunGraphPass(std::string_view name, Graph& graph, const PassOptions& options);
Expected<bool> RunPartitionPass(std::string_view name, Partition& partition, const PassOptions& options);

}  // namespace fxremat
