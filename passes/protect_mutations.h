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
//   4. Note [Snapshots of mutated inputs]: AOTAutograd places a kept input
//      mutation (`copy_(primals_2, mul_1)`) at the very end of the joint
//      graph, after the backward, so the backward's reads of the input see the
//      old data; the partition runs that write in the forward (and
//      AOTAutograd's epilogue writes a `mutated` input between forward and
//      backward). A saved value aliasing the input (the input, or a view of
//      it) is then the very tensor the write overwrites, and the backward
//      reads the new data. A user's `s.clone()` before `s.mul_(3)` avoids this
//      in eager, but Inductor's joint-graph pass remove_noop_ops erases such a
//      clone before any partitioner runs, and PyTorch's partitioners then
//      compute wrong gradients silently (a MoCo-style queue, read by a matmul
//      and then enqueued in place, is the common case). So, after extraction
//      (SnapshotSavedMutatedData, whichever partitioner chose the saved
//      values), such a saved value whose backward readers stand before the
//      write in the joint graph is saved as a clone taken right after it in
//      the forward, and the signature says so in a note. The cost is the
//      clone's bytes, what the user's clone cost in eager. A backward that
//      reads it only after the write reads the new data in the joint graph,
//      and keeps it.
#pragma once

#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
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

// Note [Snapshots of mutated inputs]: called by ExtractPartition on the
// graphs it built, before their signature is checked. A saved value aliasing
// data the forward overwrites, read by the backward before the write in the
// joint graph, becomes a clone taken right after it in the forward.
//   Given:   saved primals_1, which copy_(primals_1, add) overwrites at the
//            end of the joint graph; the backward's mm(tangents_1, primals_1)
//   Result:  forward: primals_1_snapshot = aten.clone(primals_1), returned in
//            primals_1's place; the backward's input keeps its name
// `saved_tensors`: the joint graph's nodes of the saved tensors, in their
// forward-output order. Reads the joint graph without name look-ups, so that
// extractions may run on several threads.
Status SnapshotSavedMutatedData(const Graph& joint, const JointClassification& c,
                                const std::vector<Node*>& saved_tensors, Partition& p);

// How the value `mutated` (a node name in `joint`) is overwritten, for
// messages: "node 'copy_' writes it" or "the program mutates this input ...".
std::string DescribeMutation(const Graph& joint, const std::string& mutated);
std::string DescribeMutation(const Graph& joint, const Node& mutated_root);

}  // namespace fxremat
