// The partitioners' options: the min cut's knobs under their functorch config
// names (MinCutOptions), and the max-flow algorithm that solves the cut. Public:
// the pipeline (pipeline.h), the CLI and the Python extension set them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fxremat/policy.h"
#include "fxremat/status.h"

namespace fxremat {

// Which max-flow implementation solves the cut (src/max_flow.h); all give the same cut.
enum class MaxFlowAlgorithm { kBoykovKolmogorov, kPushRelabel, kDinic };
std::string_view MaxFlowAlgorithmName(MaxFlowAlgorithm algorithm);
bool MaxFlowAlgorithmFromName(std::string_view name, MaxFlowAlgorithm& out);

// How the peak model (Note [Peak model], fxremat/peak_model.h) counts a
// pointwise op's result: always allocated (kEager: what the GraphModules do
// when they run op by op), or, where Inductor would inline it into the
// kernels that read it, never allocated (kInductor: Note [Inductor fusion in
// the peak model]).
enum class PeakModelKind { kEager, kInductor };

// Where offloaded values go (pipeline.h, passes/emit_offload.h).
enum class OffloadTarget : uint8_t {
  kTorch,       // prims.device_put to cpu (non_blocking) and back, on the compute stream
  kXla,         // xla::place_to_host / xla::place_to_device
  kTorchAsync,  // fxremat::offload / reload / wait_tensor: a side stream (Note [Overlapped offload])
};

// How EmitOffload (passes/emit_offload.h) emits the transfers.
struct OffloadOptions {
  OffloadTarget target = OffloadTarget::kTorch;
  // torch_async's time model (Note [Overlapped offload]): an op takes its
  // flops at device_flops_per_second plus the bytes it reads and writes at
  // device_bytes_per_second; a transfer its bytes at link_bytes_per_second.
  double device_flops_per_second = 989e12;
  double device_bytes_per_second = 3350e9;
  double link_bytes_per_second = 50e9;
};
// PyTorch's activation_offload_cpu_gpu_bw (PCIe 5 x16 in practice).
inline constexpr double kDefaultOffloadBandwidthGbps = 50.0;

// The reference's config knobs (torch._functorch.config), same names and
// defaults. Every field can be set from the CLI (`--config NAME=VALUE`) and
// from Python (`options={...}`).
struct MinCutOptions {
  // Views are never saved (infinite weight) and never banned from recompute.
  bool recompute_views = false;
  // Turns off every ban_recompute_* heuristic except ban_recompute_reductions.
  bool aggressive_recomputation = false;
  // Ban recomputing a fusible user that runs after an unfusible use of its input.
  bool ban_recompute_used_far_apart = true;
  // Ban recomputing the end of a fusible chain longer than 100 forward ops.
  bool ban_recompute_long_fusible_chains = true;
  // Ban recomputing a value that must be materialized in the backward anyway.
  bool ban_recompute_materialized_backward = true;
  // Only ops on the recomputable allowlist (and pointwise ops) may be recomputed.
  bool ban_recompute_not_in_allowlist = true;
  // Ban recomputing ops whose output is 4x smaller than their inputs.
  bool ban_recompute_reductions = true;
  // Static-lifetime inputs (parameters, buffers) cost nothing to save.
  bool treat_parameters_as_free_to_save = true;
  // Common-subexpression elimination before partitioning.
  bool cse = true;
  // Ban recomputing forward ops farther than this from the backward.
  int64_t max_dist_from_bw = 1000;
  // Note [Peak budget] (passes/budget_partition.h): with budget_objective
  // "peak", the step's simulated peak above the inputs may be at most
  // smallest + activation_memory_budget * (min cut's - smallest), where
  // smallest is the lowest peak the budget solver reaches; 1.0 is the min cut
  // itself. With "saved" (PyTorch's meaning, for side-by-side runs) only 1.0
  // and 0.0 (save only the inputs) are supported.
  double activation_memory_budget = 1.0;
  // The same bound in bytes (the activation peak above the inputs); takes
  // precedence over the fraction. Unset: no byte budget.
  std::optional<int64_t> memory_budget_bytes;
  // "peak" or "saved" (see activation_memory_budget).
  std::string budget_objective = "peak";
  // The budget solver's recompute cost of an op: its flops (matmul,
  // convolution, attention, from shapes) plus this many flops per byte it
  // reads and writes (what makes memory-bound ops cost something).
  double recompute_flops_per_byte = 64.0;
  // The peak model the budget bounds and the report states (option peak_model:
  // "eager" or "inductor"). The torch.compile backend sets "inductor" when
  // Inductor compiles the graphs: measured on a GPU, the eager model put the
  // peak of a 32-layer Llama step 1.21-1.24x above Inductor's
  // (docs/benchmarks_gpu.md), in fused cross-entropy kernels.
  PeakModelKind peak_model = PeakModelKind::kEager;
  // Note [Budget MILP]: on graphs whose budget MILP has at most this many
  // variables, the budget solver also solves it (COIN-OR CBC, at most
  // budget_milp_max_nodes branch-and-bound nodes: a node limit keeps the
  // answer deterministic) and weighs the partition that saves its choice with
  // the other candidates. Off by default (0): on 20 random programs it cut the
  // recompute cost of some fronts 2-4x but made a 5-point front take up to
  // 25 s instead of 0.5 s (docs/benchmarks_budget_milp.md).
  int64_t budget_milp_max_variables = 0;
  int64_t budget_milp_max_nodes = 100;
  // Note [Offload in the budget] (passes/budget_partition.cpp): with a peak
  // budget on an accelerator, the solver may offload saved values to host at
  // this host-link bandwidth (GB/s; 0, the default: never). A byte offloaded
  // costs, there and back, 2 * recompute_flops_per_byte *
  // device_memory_bandwidth_gbps / offload_bandwidth_gbps flops-equivalent
  // (defaults: an H100's 3,350 GB/s of HBM; PCIe 5 x16 gives about 50 GB/s).
  double offload_bandwidth_gbps = 0;
  double device_memory_bandwidth_gbps = 3350;
  // The device's dense matmul throughput at the step's dtype, TFLOP/s (an
  // H100's or H200's in bf16: 989), for the time model that places and prices
  // torch_async transfers (Note [Overlapped offload]). Measured on an H200,
  // reading the recompute cost as time (recompute_flops_per_byte at
  // device_memory_bandwidth_gbps) made a bf16 matmul about 3x too slow and
  // the solver's overlapped offload slower than none (docs/benchmarks_gpu.md).
  double device_tflops = 989;
  // How the budget solver's offloaded values move: set by the pipeline from
  // PartitionRequest::offload_target (torch or torch_async). With torch_async
  // an offload costs only the transfer time the compute does not hide
  // (ExposedTransferSeconds, Note [Overlapped offload]), not the whole transfer.
  OffloadTarget offload_target = OffloadTarget::kTorch;
  // The OffloadOptions these knobs give for `target`.
  OffloadOptions OffloadOptionsFor(OffloadTarget target) const;
  // Indices (among primals) of static-lifetime inputs. Unset: the primals whose
  // pytree path starts with params[ or buffers[, which is what torch.compile
  // passes for an nn.Module's parameters and buffers.
  std::optional<std::vector<int64_t>> static_lifetime_input_indices;
  // Which max-flow implementation solves the cut; all give the same cut. Dinic
  // (fxremat's own) is the default: bench/max_flow_bench.py measures the whole
  // solver 1.2-1.7x faster with it than with Boost's Boykov-Kolmogorov and
  // 1.8-2.3x faster than with push-relabel (docs/benchmarks_max_flow.md).
  MaxFlowAlgorithm max_flow = MaxFlowAlgorithm::kDinic;
  // The checkpoint policy (policy.h); unset: only the nodes' recompute tags and
  // offload annotations constrain the cut.
  std::optional<PolicySpec> policy;
  // Note [Policy demands in the cut]: recomputing a PREFER_SAVE or
  // PREFER_CPU_OFFLOAD value costs prefer_save_factor times the cost of saving
  // it (> 1: saved whenever it is needed and can be saved, JAX's "saveable");
  // saving a PREFER_RECOMPUTE value costs prefer_recompute_factor times its
  // usual cost (large: saved only where it cannot be recomputed).
  double prefer_save_factor = 2.0;
  double prefer_recompute_factor = 1024.0;
};

// Sets one option by its functorch config name ("recompute_views", "true").
Status SetMinCutOption(MinCutOptions& options, const std::string& name, const std::string& value);

// A byte size as memory_budget_bytes and the CLI's --memory-budget take it:
// "4096", "64MiB", "1.5GB" (units B, KB, MB, GB, KiB, MiB, GiB; the value
// times the unit a whole number of bytes, at most 2^63 - 1). `what` names the
// option in errors ("--memory-budget", "option memory_budget_bytes").
Expected<int64_t> ParseByteSize(const std::string& text, std::string_view what);
// What no single option shows: two budgets at once (memory_budget_bytes and an
// activation_memory_budget below 1) are refused rather than one silently winning.
Status CheckMinCutOptions(const MinCutOptions& options);

}  // namespace fxremat
