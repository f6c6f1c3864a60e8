// emit_offload: host-memory offload of the saved values the policy offloads.
//
// Note [Offload]
// For every saved value with `offloaded` set, the forward computes the value on
// the device as usual, copies it to host right after its last forward use and
// returns the host copy in the value's forward-output slot; the backward takes
// the host copy in the same input slot and reloads it to the device right before
// its first use. Targets:
//   torch: prims.device_put.default(v, cpu, non_blocking=True) and back to
//          v's device -- the transfer PyTorch's own activation offloading
//          emits, which Inductor lowers (aten._to_copy it does not, after
//          partitioning). Synchronous with the compute stream;
//   torch_async: the same transfers on a side stream, overlapped with the
//          compute (Note [Overlapped offload]);
//   xla:   xla.place_to_host.default(v) / xla.place_to_device.default(h)
//          (torch_xla's annotate_device_placement with "pinned_host").
// Nothing is recomputed from an offloaded value's device copy in the backward:
// the reload is the only source of it there.
#pragma once

#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// Rewrites p.forward and p.backward for every saved value with `offloaded` set:
// its forward-output and backward-input slots then hold the host copy, a node
// named "<name>_host" in both graphs (SavedValue::graphName); the signature
// entry keeps the joint name and the device value's facts (docs/format.md,
// "Signature"). Only tensors can be offloaded (bad input otherwise). Running it
// again changes nothing. Returns "changed?"; re-runs CheckSignature.
Expected<bool> EmitOffload(Partition& p, const OffloadOptions& options);
inline Expected<bool> EmitOffload(Partition& p, OffloadTarget target) { return EmitOffload(p, OffloadOptions{target}); }

// Note [Overlapped offload]
// With the torch_async target the transfers run on a side stream
// (fxremat::offload / fxremat::reload, defined by python/fxremat/_offload_ops.py
// after torch's ao::offload / ao::reload, which torch 2.11 lacks) and the
// compute stream waits for each only where it must (fxremat::wait_tensor):
//   forward:  h0 = offload(v) right after v is computed, or after the last
//             in-place update of its storage (LastInPlaceUpdate; the
//             synchronous targets' copy comes after it too),
//             h = wait_tensor(h0, keepalive=v) after v's last forward use, at
//             the first node by which the estimated compute since the copy
//             started covers it (the side stream runs the copies one after
//             another; the graph's end at the latest): v stays on the device
//             until the wait;
//   backward: r = reload(h, device) issued early (prefetch): the reloads in
//             the order their values are first used (the side stream runs
//             them in issue order), each where the estimated compute lets it
//             and the ones after it finish by their first uses,
//             v = wait_tensor(r, keepalive=h) right before v's first use.
// The estimates are a roofline sum (EstimatedSeconds): an op's flops at the
// device's matmul throughput (device_tflops) plus the bytes it reads and
// writes at its memory bandwidth; a transfer its bytes at the host link's
// (offload_bandwidth_gbps, else kDefaultOffloadBandwidthGbps). A sunk wait keeps its value
// on the device, a prefetched reload holds its device copy from the reload
// on: the simulated peak (which the budget bounds) sees both, since it
// simulates these graphs. keepalive keeps the
// transfer's source referenced until the wait, so that the caching allocator
// cannot hand its memory out while the side stream still reads it; the
// source dies by reference count after the wait, as any value does.
// Only values with a dense layout move on the side stream (a buffer with their
// strides holds exactly their elements); any other -- an expand, a strided
// slice -- moves synchronously as with the torch target, keeping its layout.
// ExposedTransferSeconds prices the transfers the compute does not hide.

// The time model's estimate for one node (its flops and the bytes it moves, as
// RecomputeCost counts them).
double EstimatedSeconds(const Node& n, const OffloadOptions& options);

// Seconds the compute waits for the side stream's transfers in the emitted
// graphs (torch_async; 0 for other targets' graphs): the forward then the
// backward, each in node order, compute advancing by EstimatedSeconds, one side
// stream running the transfers in issue order at the host link's speed.
double ExposedTransferSeconds(const Partition& p, const OffloadOptions& options);

}  // namespace fxremat
