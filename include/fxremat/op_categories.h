// Op categories: every list of targets that a rule of the partitioners reads,
// in one place, each named after the PyTorch list it copies (torch 2.13) so
// that a difference from the reference is a difference in one list.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "fxremat/ir.h"

namespace fxremat {

// Note [Facts per target]: what the lists below say of a call_function node
// depends on its target alone (its text and its graph's op facts), and a walk
// over a million nodes that asked them per node hashed the target's text into
// several sets each time. A walk keeps one PerTarget per fact instead: the
// fact is computed for the first node of each target and found after that by
// the interned target string's address (Graph interns call_function targets;
// two tables, as in the CLI and its libtorch plugin, only compute a fact twice).
template <typename T>
class PerTarget {
 public:
  // The fact of n's target: compute(n) for the first node of that target.
  template <typename Compute>
  const T& get(const Node& n, Compute compute) {
    auto [it, added] = facts_.try_emplace(&n.target());
    if (added) it->second = compute(n);
    return it->second;
  }

 private:
  std::unordered_map<const std::string*, T> facts_;
};

// A call_function target that is a Python callable rather than a dispatcher op:
// FX's SymInt arithmetic (_operator.mul, math.sqrt, torch.sym_max, ...) and
// _operator.getitem. Dispatcher targets are "ns.op.overload" and never start
// with these module names.
bool IsPythonCallableTarget(std::string_view target);

// "aten.mm" for "aten.mm.default"; a Python callable is its own packet.
std::string_view PacketOf(std::string_view target);

// torch/_functorch/compile_utils.py `rand_ops`: the ops fx_graph_cse never merges.
bool InRandOps(std::string_view target);

// torch/_functorch/partitioners.py get_default_op_list(): the min cut's lists,
// by overload packet.
bool InDefaultRecomputableOps(std::string_view packet);  // recomputable_ops (view ops included)
bool InDefaultViewOps(std::string_view packet);          // view_ops
bool InDefaultRandomOps(std::string_view packet);        // random_ops
bool InDefaultComputeIntensiveOps(std::string_view packet);  // compute_intensive_ops

// torch/fx/node.py `_side_effectful_functions` (targets that are dispatcher ops).
bool InSideEffectfulFunctions(std::string_view target);
// Ops torch._library registers with an effect (torch._higher_order_ops.effects):
// their calls are ordered and never dropped.
bool InEffectfulOps(std::string_view target);

// The asserts and profiler markers default_partition leaves out of the saved set.
bool InDefaultPartitionSkippedOps(std::string_view target);

// FX's Node.is_impure(impure_random) for a call_function: a mutable schema, a
// side-effectful function, an effectful op, or (when impure_random) a random
// op (tag nondeterministic_seeded). Dead code elimination keeps these.
bool IsFxImpure(const Node& n, bool impure_random);

// A call whose result shares an input's storage (a view, an alias,
// _unsafe_view): no compute, no bytes of its own. A getitem is not one (its
// tuple op is asked instead: SharesStorage).
bool IsAliasOp(const Node& n);
// Whether `n` shares another value's storage instead of allocating its own,
// and whose (`*source`; null when the graph holds no such value): a view's
// base, or for an item of an aliasing tuple op the op's input.
bool SharesStorage(const Node& n, const Node** source);

}  // namespace fxremat
