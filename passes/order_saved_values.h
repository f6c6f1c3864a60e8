// order_saved_values: the final list and order of the saved values, as
// functorch's _extract_fwd_bwd_modules settles them (torch/_functorch/
// partitioners.py) after the partitioner chose what to save. Every partitioner
// goes through it (ExtractPartition), so the CLI and partition_fn agree.
//
// Note [Symbol bindings]
// With dynamic shapes the backward's compiler binds every symbol that appears
// in an input's shape from a saved SymInt that *is* that symbol (a SymInt
// placeholder whose expression is the bare symbol). BindSavedSymbols walks the
// saved symints that are not bindings, then the saved tensors, then the
// tangents; for each symbol not yet bound (in name order) it saves the joint
// graph's first binding node of it. Bindings come first among the saved
// symints, then the derived ones, as the reference orders them.
//
// Note [Activations with no version counter checks in eager]
// A saved tensor marked no_vc_check (meta saved_tensor_with_no_vc_check) is
// stashed on ctx rather than saved with save_for_backward; AOTAutograd expects
// those in one slice after the others: OrderNoVcCheckLast.
#pragma once

#include <vector>

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

// The symbols (keys of joint.symbols()) that appear in a value's facts: a
// symint's expression, a tensor's shape and strides, a tuple's items.
std::vector<std::string> FreeSymbols(const Graph& joint, const ValueFacts& val);

// Given:   saved_syms = {}; saved_tensors = {%mul: f32[s0, 4]}; %s0 = placeholder: Sym(s0)
// Execute: BindSavedSymbols(joint, tangents, saved_tensors, saved_syms)
// Result:  saved_syms = {%s0}
// Returns whether saved_syms changed (a binding added or moved to the front).
Expected<bool> BindSavedSymbols(const Graph& joint, const std::vector<Node*>& tangents,
                                const std::vector<Node*>& saved_tensors, std::vector<Node*>& saved_syms);

// Stable partition: tensors without no_vc_check first. Returns whether the
// order changed.
bool OrderNoVcCheckLast(std::vector<Node*>& saved_tensors);

}  // namespace fxremat
