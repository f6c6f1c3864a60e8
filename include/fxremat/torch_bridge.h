// The libtorch bridge: what fxremat asks of PyTorch's C++ runtime. Op facts
// from the dispatcher, and running graphs op by op through the dispatcher for
// numeric verification. This header is libtorch-free so that callers compile
// fast; only src/torch_bridge/*.cpp include libtorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// Fills graph.ops() for every call_function target that has no entry, from the
// libtorch dispatcher's registered schema and tags. Targets that are Python
// callables (_operator.*) are skipped. A target unknown to the dispatcher (and
// not one of the annotation ops, see IsAnnotationOp) is a bad-input error naming
// the node. Returns whether anything was added.
Expected<bool> CompleteOpFactsFromDispatcher(Graph& graph);

// The identity naming ops (IsAnnotationOp in op_schema.h, implemented in
// fxremat::core) run as identity; their facts are built in.

struct VerifyOptions {
  uint64_t seed = 0;
  // Tolerances scale with dtype; these multiply the defaults (see verify.cpp).
  double tolerance_scale = 1.0;
  // A file of real inputs (safetensors, or a dict saved by torch.save as .pt),
  // keyed by joint placeholder name ("primals_1", "tangents_1") or by a primal's
  // pytree path ("args[0]", "params['fc1.weight']"); a SymInt input as a 0-d
  // integer tensor. Inputs it lacks are drawn
  // at random; a key that names no input, or a tensor whose dtype or shape
  // differs from the graph's, is bad input.
  std::string inputs_file;
};

struct VerifyReport {
  bool passed = false;
  int64_t values_compared = 0;
  // One line per compared value: "forward output 0 (sigmoid): max abs err 0 ok".
  std::vector<std::string> lines;
};

// Runs the joint graph and forward→backward on the same seeded random inputs
// (primals, tangents; integer inputs inside their value_range), with the same
// RNG seed for both runs, and compares forward outputs and gradients with
// dtype-aware tolerances. Also checks saved values' runtime shapes against the
// signature. A mismatch is reported in the VerifyReport (passed=false), not as
// an error; errors are for graphs that cannot run (bad input).
Expected<VerifyReport> VerifyPartition(const Graph& joint, const Graph& forward,
                                       const Graph& backward, const Signature& signature,
                                       const VerifyOptions& options);

}  // namespace fxremat
