// Checkpoint policies: what the user says about which forward values to save,
// recompute or offload, in JAX's vocabulary (jax.checkpoint_policies) and in
// PyTorch's (CheckpointPolicy tags, the op list of
// create_selective_checkpoint_contexts). A policy is evaluated per forward value
// and turns into one demand per value; the min-cut solver then honours the
// demands (Note [Policy demands in the cut] in passes/min_cut_partition.cpp).
//
// Note [Policy semantics]
// JAX asks its policy, for every primitive in the checkpointed function, whether
// the output is saveable (or offloadable). fxremat asks the same question for
// every forward value of the joint graph (call_function nodes the forward
// computes; inputs are always available, as JAX's arguments are):
//   - "saveable"      -> PREFER_SAVE: saved whenever the backward needs it and it
//                        can be saved (recomputing it is charged more than saving
//                        it, MinCutOptions::prefer_save_factor);
//   - "not saveable"  -> PREFER_RECOMPUTE: never saved while recomputing it is
//                        possible (saving it is charged prefer_recompute_factor
//                        times its size); a value that cannot be recomputed (a
//                        random op, MUST_SAVE by a tag) is still saved;
//   - "offloadable"   -> PREFER_CPU_OFFLOAD: as saveable, and offloaded to host
//                        memory when saved.
// Under a policy, unnamed views (ops whose result aliases an input) are
// PREFER_RECOMPUTE whatever the policy says: recomputing a view is free, saving
// one keeps its base alive anyway, and JAX has no views; so the base is what
// gets saved (an input shows as "from the argument", not as its transpose).
// Symbolic scalars get none either: they are always cheap to save.
// A name is a property of the value (the annotation op is folded away), so
// "prim is name_p and name in names" reads "the value carries one of names".
// This makes save_anything_except_these_names do what its doc string says: in
// JAX it saves everything, because the unnamed producer of a named value is
// itself saveable (that version is not copied).
//
// Note [Merging demands]
// A value may get demands from several sources: the node's recompute tag (from
// torch.utils.checkpoint / selective activation checkpointing), an offload
// annotation (xla::offload_name), and the policies of a combined policy. Rules:
//   1. Two MUST demands that differ are a contradiction: a bad-input error that
//      names the value and both demands with their sources.
//   2. A MUST demand beats every PREFER demand.
//   3. Among PREFER demands, the node's own tag or annotation beats a policy
//      (the inner, more specific request wins, as nested checkpoints do).
//   4. Among the PREFER demands of a combined policy, SAVE and CPU_OFFLOAD beat
//      RECOMPUTE (a value is saveable if any policy says so, JAX's
//      save_from_both_policies); SAVE against CPU_OFFLOAD is a contradiction.
//   5. MUST_RECOMPUTE on a random op (without RNG functionalization it cannot be
//      replayed) and CPU_OFFLOAD of a value that cannot move (a symint, an input
//      or a view of one) are contradictions too.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// Decision, DecisionName and DecisionFromName (PyTorch's CheckpointPolicy
// values) are in fxremat/ir.h: a node's recompute tag is one.
bool IsMust(Decision d);
bool IsSave(Decision d);       // MUST_SAVE, PREFER_SAVE
bool IsRecompute(Decision d);  // MUST_RECOMPUTE, PREFER_RECOMPUTE
bool IsOffload(Decision d);    // MUST_CPU_OFFLOAD, PREFER_CPU_OFFLOAD

// One policy, or a combination of policies. Kinds (arguments in brackets):
//   everything_saveable, nothing_saveable, dots_saveable (alias checkpoint_dots),
//   dots_with_no_batch_dims_saveable,
//   save_only_these_names [names], save_any_names_but_these [names],
//   save_anything_except_these_names [names],
//   save_and_offload_only_these_names [names = names_which_can_be_saved,
//       offload_names = names_which_can_be_offloaded, offload_src, offload_dst],
//   offload_dot_with_no_batch_dims [offload_src, offload_dst],
//   save_from_both_policies [children: exactly two boolean policies],
//   save_ops [ops]: create_selective_checkpoint_contexts(ops): MUST_SAVE for the
//       listed ops ("aten.mm" = every overload, "aten.mm.default" = one),
//       PREFER_RECOMPUTE for every other forward op;
//   checkpoint_policy [by_name, by_op, default_decision]: a PyTorch-style policy
//       function as a table: a value's decision is by_name of one of its names,
//       else by_op of its op, else default_decision (kNone: no demand);
//   all_of [children]: every child policy applies; demands merge by
//       Note [Merging demands].
struct PolicySpec {
  std::string kind;
  std::vector<std::string> names;
  std::vector<std::string> offload_names;
  std::vector<std::string> ops;
  std::map<std::string, Decision> by_name;
  std::map<std::string, Decision> by_op;
  Decision default_decision = Decision::kNone;
  std::string offload_src = "device";
  std::string offload_dst = "pinned_host";
  std::vector<PolicySpec> children;

  // Readable form for messages and reports: "save_only_these_names('a', 'b')".
  std::string ToString() const;
  bool operator==(const PolicySpec&) const = default;
};

// The command-line form, `NAME[:ARGS]`:
//   save_only_these_names:attn_out,mlp_out
//   save_and_offload_only_these_names:save=y;offload=z
//   offload_dot_with_no_batch_dims[:device,pinned_host]
//   save_ops:aten.mm,aten.addmm
//   checkpoint_policy:a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE
//   save_from_both_policies:dots_saveable|save_only_these_names:a
//   POLICY+POLICY+...  (all_of)
// Validates as PolicyFromJson does.
Expected<PolicySpec> ParsePolicy(std::string_view text);

// The JSON form (a --policy-file, Python's fxremat.policies objects), documented
// in docs/policies.md: {"policy": "save_only_these_names", "names": ["a"]}, a
// list of such objects = all_of. Errors name the JSON path (`where`).
Expected<PolicySpec> PolicyFromJson(std::string_view text, std::string_view where);
std::string PolicyToJson(const PolicySpec& spec);

// What a policy made of one value, and why.
struct ValueDemand {
  Node* node = nullptr;
  Decision decision = Decision::kNone;
  // Why, for a demand that is not a policy's: "recompute tag", ...
  std::string reason;
  // The policy that made the demand, or null. Its text ("policy
  // save_only_these_names('a')") is built only when asked for: a policy of
  // 15,000 names, its text copied into each of 20,000 demands, took 2.75 GB.
  const PolicySpec* policy = nullptr;

  std::string Source() const { return policy ? "policy " + policy->ToString() : reason; }
};

// Applies `spec` (may be null: tags and annotations only) to `g`: evaluates it
// on every forward value, merges with the nodes' recompute tags and offload
// annotations (Note [Merging demands]) and writes the result into
// meta().recompute. Contradictions are bad-input errors naming the value.
// Returns the decided values in graph order (for reports); a policy's demands
// point into `*spec`, so they are valid while it lives. Expects annotation
// ops already folded (names in meta().names).
//
// Given:   %mm = aten.mm(%x, %w)  names=[a];  %s = aten.sin(%mm)
// Execute: ApplyPolicy(g, save_only_these_names('a'))
// Result:  %mm recompute=PREFER_SAVE;  %s recompute=PREFER_RECOMPUTE
Expected<std::vector<ValueDemand>> ApplyPolicy(Graph& g, const PolicySpec* spec);

}  // namespace fxremat
