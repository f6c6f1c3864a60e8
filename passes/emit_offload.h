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
//          partitioning). Synchronous with the compute stream; overlapping it
//          (torch's ao::offload / ao::reload on a side stream) is not done yet;
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
Expected<bool> EmitOffload(Partition& p, OffloadTarget target);

}  // namespace fxremat
