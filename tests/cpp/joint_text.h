// IR text the C++ tests build joint graphs from: the header of a joint graph
// with one primal and one tangent, and the schemas of the ops their bodies use
// (an op line the body does not use is harmless).
#pragma once

namespace fxremat::testing {

inline constexpr const char* kOneInputJointHeader =
    "# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]\n"
    "# input primals_1 role=primal tag=is_forward\n"
    "# input tangents_1 role=tangent tag=is_backward\n";

inline constexpr const char* kCommonOpSchemas =
    "# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]\n"
    "# op aten.cos.default 'aten::cos(Tensor self) -> Tensor' [core, pointwise]\n"
    "# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]\n"
    "# op aten.add.Tensor 'aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor' [core, "
    "pointwise]\n"
    "# op aten.view.default 'aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)' [core, view_copy]\n"
    "# op aten.permute.default 'aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)' [core, view_copy]\n"
    "# op aten.full.default 'aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? "
    "layout=None, Device? device=None, bool? pin_memory=None) -> Tensor' [core]\n"
    "# op aten.index_select.default 'aten::index_select(Tensor self, int dim, Tensor index) -> Tensor' [core]\n";

}  // namespace fxremat::testing
