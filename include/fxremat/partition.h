// Splitting a joint forward/backward graph into a forward and a backward graph,
// and the signature that fixes every argument position of the two.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "fxremat/partition_options.h"
#include "fxremat/status.h"

namespace fxremat {

// Note [AOTAutograd runtime contract]
// The emitted graphs are drop-in for AOTAutograd's runtime wrapper, so positions
// follow its convention exactly (torch/_functorch/partitioners.py,
// _extract_fwd_bwd_modules):
//   forward  inputs : primals (and fwd RNG seed/offset), in joint order
//   forward  outputs: user forward outputs (num_fwd_outputs of them),
//                     then saved tensors, then saved symints
//   backward inputs : saved symints, then saved tensors, then tangents
//                     (then bwd RNG seed/offset)
//   backward outputs: one gradient per primal, in primal order (None where the
//                     joint graph has none)
// Symints are kept apart from tensors because autograd's ctx.save_for_backward
// takes only tensors; symints are stashed on ctx.
//
// Note [Size of a value]
// The min cut's weights follow the reference's _size_of: a tensor is numel *
// itemsize (symbolic dims at their hint), a tuple the sum of its tensors, a
// symint 1 byte (so that saving a symint is never free but always cheaper than
// a tensor). Reports are honest instead: a saved symint lives on the autograd
// context, not in device memory, so SavedValue::bytes is 0 for it and the
// signature counts saved symints apart (savedSymInts, "saved_symints").

struct SavedValue {
  std::string name;                       // the joint graph's node name
  enum class Kind { kTensor, kSymInt } kind = Kind::kTensor;
  std::optional<std::string> annotation;  // first name given by a naming op, if any
  std::vector<std::string> names;         // every name given by naming ops, in order
  std::string decision;                   // policy/tag decision that applied ("PREFER_SAVE"), "" if none
  // Why it is saved, in words (Note [Saved-value rules] in src/pipeline.cpp):
  // "input", "policy MUST_SAVE", "random op (never replayed)", "RNG state of d", "min cut",
  // "budget: segments of <= 4096 B + local search", ...; "" when unknown.
  std::string rule;
  // Saved in host memory: the forward copies it to host, the backward reloads it
  // (Note [Offload] in passes/emit_offload.h). `facts` stay the device value's.
  bool offloaded = false;
  // Saved as a copy taken before the forward overwrites its data (Note
  // [Snapshots of mutated inputs] in passes/protect_mutations.h): the forward
  // returns `<name>_snapshot`, a clone of it; the backward's input keeps the name.
  bool snapshot = false;
  // Stashed on ctx without a version-counter check (AOTAutograd's
  // SavedForBackwardsNoVcCheckAOTOutput); such tensors come last among the
  // saved tensors (passes/order_saved_values.h).
  bool no_vc_check = false;
  std::string origin_op;        // joint-graph target that computed it ("aten.sin.default"); "" for inputs
  std::string origin_location;  // "file.py:12 (fn)" from the stack trace, "" when unknown
  int64_t forward_output_index = -1;
  int64_t backward_input_index = -1;
  ValueFacts facts;
  int64_t bytes = 0;
  // The node name at its forward output and backward input: the joint name, or
  // "<name>_host" (the host copy) when offloaded (Note [Offload]).
  std::string graphName() const { return offloaded ? name + "_host" : name; }
  // The forward's node of the device value: the joint name, or
  // "<name>_snapshot" for a snapshot.
  std::string deviceName() const { return snapshot ? name + "_snapshot" : name; }
  // The node name at its forward output: the host copy when offloaded.
  std::string forwardName() const { return offloaded ? graphName() : deviceName(); }
};

struct PrimalEntry {
  std::string name;
  int64_t forward_input_index = -1;
  std::string path;              // pytree path, may be empty
  int64_t gradient_index = -1;   // backward output index
  bool has_gradient = false;     // false where the joint graph returns None
  // The forward output the caller writes into this input after the forward
  // (AOTAutograd's input-mutation epilogue; Note [Mutated inputs]), if any.
  std::optional<int64_t> written_back_from;
};

struct ForwardOutputEntry {
  int64_t forward_output_index = -1;
  std::string name;                 // node name in the forward graph, empty for None
  std::optional<std::string> path;  // pytree path, if known
};

// Note [Opaque inputs]: a primal whose value is an object the graphs pass along
// without looking into it (AOTAutograd's BackwardState, which compiled autograd
// fills with the hooks the backward runs). It is a forward input like any primal,
// has no gradient, and the backward that reads it takes it as an input of its
// own, after the tangents (and RNG inputs), from the caller: it is never a
// forward output, never saved, never counted in bytes. The reference does the
// same (backward_state_inputs in _extract_fwd_bwd_modules). Script objects
// (a DTensor's DeviceMesh) are opaque inputs here too; inside torch.compile,
// partition_fn moves them to the saved-value slots AOTAutograd's runtime
// carries them in (Note [Saved opaque objects] in python/fxremat/_partition_fn.py).
struct OpaqueInputEntry {
  std::string name;
  int64_t forward_input_index = -1;   // the primal's position among the forward inputs
  int64_t backward_input_index = -1;
  std::string type;                   // e.g. "BackwardState"
};

struct TangentEntry {
  std::string name;
  int64_t backward_input_index = -1;
  int64_t forward_output_index = -1;  // the forward output it is the cotangent of
};

// The step's simulated peak (Note [Peak model] in fxremat/peak_model.h), as
// the signature reports it: bytes above the inputs and where it occurs, and
// the peak budget the partition was made under, when there was one.
struct PeakSummary {
  int64_t bytes = 0;
  std::string node;   // the node running at the peak ("" : the tangents' arrival)
  std::string graph;  // "forward" or "backward"
  int64_t live_after_forward_bytes = 0;
  std::optional<int64_t> budget_bytes;
  bool operator==(const PeakSummary&) const = default;
};

struct Signature {
  std::string partitioner;  // "default", "mincut", "budget"
  int64_t num_fwd_outputs = 0;
  int64_t forward_num_inputs = 0, forward_num_outputs = 0;
  int64_t backward_num_inputs = 0, backward_num_outputs = 0;
  std::vector<PrimalEntry> primals;
  std::vector<ForwardOutputEntry> forward_outputs;
  std::vector<SavedValue> saved;  // in forward-output order: tensors, then symints
  std::vector<TangentEntry> tangents;
  std::vector<OpaqueInputEntry> opaque_inputs;  // the backward's last inputs
  // What the partitioner wants the user to know (a fallback it took, a demand
  // it could not honour as asked); front ends show them as warnings.
  std::vector<std::string> notes;
  // Set by the pipeline (RunPartition) on every partition it emits.
  std::optional<PeakSummary> peak;
  int64_t savedBytes() const;    // every saved tensor (device and host); symints are not bytes
  int64_t savedSymInts() const;  // how many saved values are symints
  int64_t offloadedBytes() const;  // the offloaded ones
};

struct Partition {
  std::unique_ptr<Graph> forward;
  std::unique_ptr<Graph> backward;
  Signature signature;
};

// Where extraction may put each node of a joint graph (by index): nodes that
// must stay in the forward (MustBeInForward) or in the backward
// (MustBeInBackward), and side-effecting ones (never dropped as dead code).
struct NodeSides {
  std::vector<bool> forward_only, backward_only, impure;
};

// Classification of a joint graph's nodes that partitioners and `inspect` share.
struct JointClassification {
  std::vector<Node*> primals, tangents, fwd_rng, bwd_rng;
  std::vector<Node*> forward_outputs;   // nullptr entries for None
  std::vector<Node*> backward_outputs;  // one per primal, nullptr for None
  // Nodes the forward graph can compute: from the primals (and the forward's
  // RNG states) alone, none pinned to the backward. Indexed by Node::index().
  std::vector<bool> forward_computable;
  // Nodes the forward outputs need, computed from primals alone.
  std::vector<bool> required_by_forward;  // indexed by Node::index()
  // Nodes that depend on a tangent or must be in the backward.
  std::vector<bool> in_tangents_closure;
  NodeSides sides;
};
Expected<JointClassification> ClassifyJoint(const Graph& joint);

// Builds the forward and backward graphs for a chosen set of saved values
// (joint-graph nodes, tensors and symints; each listed once, in the order to
// emit) and the signature that describes them. Saved values the backward ends up
// not using are dropped, as the reference does. Forward nodes that are not saved
// but needed by the backward are recomputed there. Runs CheckSignature before
// returning: a violation is an internal error.
Expected<Partition> ExtractPartition(const Graph& joint, const std::vector<Node*>& saved_values,
                                     const std::string& partitioner_name);
// How ExtractPartition builds its graphs.
struct ExtractOptions {
  // A throwaway partition, evaluated while the joint graph lives (the budget
  // solver's candidates): its nodes use the joint's op facts instead of copies
  // in the new graphs' tables, and the signature check is left to the
  // extraction of the partition that is kept (RunPartition extracts it again).
  bool scratch = false;
  // Joint graphs of at least this many nodes build the forward and the backward
  // on two threads (Note [Extracting both sides at once] in
  // src/extract_partition.cpp); the output is the same either way.
  size_t parallel_from_nodes = 20000;
  // A storage two or more saved values share is saved once, as its root (Note
  // [Saved values never alias each other] in src/extract_partition.cpp): set
  // by the budget solver, whose saved sets are its own. The min cut and the
  // default partition save what PyTorch's do, aliases included.
  bool save_shared_storages_once = false;
};
// The same with the joint graph's classification already made (ClassifyJoint of
// `joint`): the budget solver extracts hundreds of candidates from one graph.
Expected<Partition> ExtractPartition(const Graph& joint, const JointClassification& classification,
                                     const std::vector<Node*>& saved_values, const std::string& partitioner_name,
                                     const ExtractOptions& options = {});

// Checks both graphs against the signature: counts, every saved value at its
// stated forward-output and backward-input index with matching facts, tangents
// and gradients in place, placeholders roles. Errors name the position.
Status CheckSignature(const Graph& forward, const Graph& backward, const Signature& signature);

// Signature <-> JSON text (docs/format.md, "Signature").
std::string SignatureToJson(const Signature& signature);
Expected<Signature> SignatureFromJson(const std::string& text, const std::string& where);

}  // namespace fxremat
