// protect_mutations: marks every forward value that reads data the forward
// then overwrites, so that no partitioner recomputes it in the backward.
//
// Note [Mutated inputs]
// A joint graph is functional, but the program it runs is not: an input the
// program mutates (`counter.add_(1)`, a BatchNorm running mean) is written back
// after the forward, by AOTAutograd's epilogue (the placeholder carries
// meta().mutated) or by a mutating op in the graph (`copy_(primals_1, add)`).
// A value computed from the old data, such as `add = primals_1 + 1`, is only
// right when computed before the write. Recomputing it in the backward would
// read the new data and give wrong gradients silently, so:
//   1. ProtectMutations sets meta().rare().reads_mutated on every forward op that
//      reads (directly or through views) a value written later in the forward.
//      Views of such a value are aliases, not readers: their readers are.
//   2. Every partitioner honours it: the min cut bans recomputing the value
//      (even under PREFER_RECOMPUTE), the default partition saves it, and
//      activation_memory_budget=0 saves it on top of the inputs.
//   3. A MUST_RECOMPUTE demand (tag or policy) on such a value that the
//      backward needs is an error naming the mutation (CheckMutationDemands).
// Saving the mutated input itself is left as it is: the backward sees the new
// data, exactly as eager autograd would (which raises on a version-counter
// mismatch where that matters).
#pragma once

#include <string>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Whether the graph mutates anything in its forward (a mutated placeholder or a
// mutating op outside the backward): a cheap test before copying a graph.
bool HasForwardMutations(const Graph& joint);

// Given:   %p = placeholder (mutated); %a = aten.add(%p, 1); %m = aten.mul(%x, %a)
// Execute: ProtectMutations(joint)
// Result:  %a carries reads_mutated=p; %m (reads %a, not %p) does not.
// Returns whether any value was marked.
Expected<bool> ProtectMutations(Graph& joint);

// After the policy has decided (ApplyPolicy): a value marked by
// ProtectMutations that the backward needs and that is MUST_RECOMPUTE is a
// bad-input error naming the value and the mutation.
Status CheckMutationDemands(const Graph& joint);

// How the value `mutated` (a node name in `joint`) is overwritten, for
// messages: "node 'copy_' writes it" or "the program mutates this input ...".
std::string DescribeMutation(const Graph& joint, const std::string& mutated);

}  // namespace fxremat
