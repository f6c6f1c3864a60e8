// Helpers shared by the partition sources (private to src/ and passes/).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition.h"
#include "fxremat/status.h"

namespace fxremat {

// partitioner_tag / mutable-schema rules of the reference's _must_be_in_backward
// and _must_be_in_forward.
bool MustBeInBackward(const Node& n);
bool MustBeInForward(const Node& n);
// A higher-order op whose body returns one of its own inputs (or a view of
// one): Note [Bodies that return their inputs].
bool HopReturnsItsInputs(const Node& n);
bool IsSymNode(const Node& n);
// recompute is MUST_RECOMPUTE or PREFER_RECOMPUTE (the reference's must_recompute).
bool MustRecompute(const Node& n);
// A SymBool whose only users are aten._assert_scalar: never needed by the backward.
bool IsAssertOnlySymBool(const Node& n);
// Whether any node must be recomputed; an error naming the node if that node is
// a random op marked MUST_RECOMPUTE that cannot be replayed
// (RandomOpReplayable).
Expected<bool> HasRecomputableOps(const Graph& graph);
// A random op (the reference's native_dropout / rand_like / randn_like, or any op
// tagged nondeterministic_seeded): recomputing it plainly would draw different
// numbers.
bool IsRandomOp(const Node& n);
// The device of a node's first tensor value ("cpu", "cuda", without an index),
// or "" when it has none.
std::string RandomOpDevice(const Node& n);
// A random op whose draw the backward can replay exactly: its device's generator
// state is one torch's run_and_save_rng_state / run_with_rng_state read and set
// (cpu, cuda). Note [Replaying random ops] in passes/functionalize_rng.h.
bool RandomOpReplayable(const Node& n);
// Why a random op's draw cannot be replayed, for messages: "its device ('xla')
// has no generator state fxremat can replay (cpu, cuda)".
std::string UnreplayableReason(const Node& n);
// A random op (or a getitem of one) that must be saved rather than recomputed:
// not tagged MUST_/PREFER_RECOMPUTE, or not replayable.
bool RandomOpMustBeSaved(const Node& n);
// A view op: its result aliases an input (schema `Tensor(a)` return, not `Tensor(a!)`).
bool IsViewOp(const Node& n);
// An effect token: the first argument of a with_effects call, or the token
// result of one (its getitem 0). Never saved (Note [Effect tokens are never
// saved] in src/extract_partition.cpp).
bool IsEffectToken(const Node& n);
// Ops with side effects (a mutable schema): never dropped as dead code.
bool IsImpure(const Node& n);

enum class Subgraph { kForward, kBackward };

// The reference's _extract_graph_with_inputs_outputs: a new graph that takes
// `inputs` (joint nodes, turned into placeholders in this order, keeping their
// names) and returns `outputs` (nullptr = None), copying every joint node whose
// arguments are all available, then removing dead code. An output that cannot
// be computed from the inputs is a bad-input error naming it. `sides` is
// ClassifySides(joint) (JointClassification::sides), made once for every graph
// extracted from one joint graph. With `share_op_facts` the new nodes use the
// joint's op facts (ExtractOptions::scratch): the graph must not outlive it.
NodeSides ClassifySides(const Graph& joint);
Expected<std::unique_ptr<Graph>> ExtractSubgraph(const Graph& joint, const std::vector<Node*>& inputs,
                                                 const std::vector<PlaceholderRole>& input_roles,
                                                 const std::vector<Node*>& outputs, Subgraph which,
                                                 const NodeSides& sides, bool share_op_facts = false);

// The name a naming op (xla.name_tensor, fxremat.checkpoint_name, ...) gives
// this value: as the op's result or as its annotated input. Empty if none.
std::string AnnotationName(const Node& n);

// Registers op facts for a target the passes create (aten._to_copy, the xla
// transfer and barrier ops) unless the graph already has facts for it, so that
// emitted documents are complete without the dispatcher.
// Marks the saved values of `p` that these joint nodes are as offloaded (the
// budget solver's choice, Note [Offload in the budget]).
void MarkOffloadedValues(Partition& p, const std::vector<Node*>& values);

// Replaces `old` by a new call_function node made right before `anchor` from
// `target`, `args` and `kwargs`, which takes over old's name, facts, meta and
// uses (a node moved, or rewritten as another op).
Node* ReplaceNode(Graph& g, Node* old, Node* anchor, std::string target, std::vector<Argument> args, Kwargs kwargs);

void EnsureOpFacts(Graph& g, const std::string& target, const std::string& schema,
                   std::vector<std::string> tags, std::vector<std::string> packet_tags = {});

// "prog.py:12 (f)" from an FX stack trace: the last `File "X", line N, in F`
// frame (the innermost), X by its base name. Empty when there is none.
std::string OriginLocation(std::string_view stack_trace);

}  // namespace fxremat
