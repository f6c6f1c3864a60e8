// Private to the libtorch bridge (src/torch_bridge/*.cpp): finding an fxremat
// target string in the libtorch dispatcher, and naming its tags.
//
// Note: these TUs must not use {fmt}. libtorch's include directory ships its own
// fmt headers (a different major version than the system libfmt that
// fxremat::core links), and which one an `#include <fmt/...>` picks depends on
// include order. Plain std::string building keeps the bridge clear of that.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/dispatch/Dispatcher.h>

namespace fxremat::torch_bridge {

// "aten.add.Tensor" -> {"aten::add", "Tensor"}; "aten.mm.default" ->
// {"aten::mm", ""} (the dispatcher spells the default overload as ""). Nullopt
// unless the target has the form ns.name.overload.
std::optional<c10::OperatorName> DispatcherNameOf(std::string_view target);

// The dispatcher's handle for a target, if an op with a schema is registered.
// Never throws.
std::optional<c10::OperatorHandle> FindDispatcherOp(std::string_view target);

// The torch.Tag name of a tag ("pointwise", "core", ...).
std::string_view TagName(at::Tag tag);

// Python callables FX records as call_function targets (SymInt arithmetic):
// "_operator.mul", "math.sqrt", "builtins.min", "torch.sym_max". They have no
// op facts and are not dispatcher ops.
bool IsPythonCallableTarget(std::string_view target);

}  // namespace fxremat::torch_bridge
