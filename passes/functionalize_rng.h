// functionalize_rng: a random op the backward recomputes replays the forward's
// draw exactly.
//
// Note [Replaying random ops]
// A random op (native_dropout, rand_like, ...) recomputed in the backward would
// draw new numbers, and the gradients would no longer be those of the forward
// that ran. The reference (torch/_functorch/partitioners.py, torch 2.13:
// functionalize_rng_ops) therefore rewrites every random op that a checkpoint
// tag asked to recompute (MUST_ / PREFER_RECOMPUTE) and that ends up in both
// emitted graphs:
//   forward:  %s, %r = run_and_save_rng_state(op, *args)   the generator's state
//             just before the draw, then the op's own result;
//   backward: %r = run_with_rng_state(%s, op, *args)       the same draw, with
//             the generator restored afterwards,
// and %s travels as one more saved tensor. fxremat applies the same rule:
//  - which random ops may be recomputed: those tagged for recompute whose device's
//    generator state the two higher-order ops can read and set (cpu, cuda:
//    RandomOpReplayable in src/partition_internal.h). The partitioners let the cut
//    recompute those and nothing else; every other random op is saved, and a tag
//    asking to recompute it is reported (Note [Saved-value rules]);
//  - this pass then rewrites every random op found in both graphs. It never meets
//    one it cannot replay (an internal error if it did);
//  - the state is a saved tensor placed after the version-checked saved tensors
//    (before the no_vc_check ones, Note [Activations with no version counter
//    checks in eager]) and before the symints, where AOTAutograd's runtime takes
//    saved tensors; the reference appends it after every saved tensor instead.
//    It is named "rng_state_<op's name>" in both graphs, its rule is
//    "RNG state of <op's name>", and it counts as saved bytes (5,056 B for the
//    CPU generator, 16 B for CUDA's).
// The graph-safe variant the reference uses on CUDA under cudagraphs
// (graphsafe_run_with_rng_state with generator inputs) is not emitted: the
// stateful pair above is what the reference falls back to, and what it uses on
// CPU.
#pragma once

#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// Given:   forward  %d = aten.native_dropout.default(%x, 0.5, True); ...
//          backward %d = aten.native_dropout.default(%x, 0.5, True); ... (recomputed)
// Execute: FunctionalizeRng(p)
// Result:  forward  %run_and_save_rng_state = higher_order.run_and_save_rng_state(aten.native_dropout.default, %x, 0.5, True)
//                   %rng_state_d = getitem(%run_and_save_rng_state, 0)
//                   %d = getitem(%run_and_save_rng_state, 1); ...; return (..., %rng_state_d, ...)
//          backward %rng_state_d = placeholder (saved)
//                   %d = higher_order.run_with_rng_state(%rng_state_d, aten.native_dropout.default, %x, 0.5, True)
// and the signature lists rng_state_d among the saved tensors. Returns "changed?";
// re-runs CheckSignature.
Expected<bool> FunctionalizeRng(Partition& p);

}  // namespace fxremat
