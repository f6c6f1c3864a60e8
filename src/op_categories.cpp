// Op categories (fxremat/op_categories.h). Each list is copied from the named
// PyTorch list of torch 2.13; keep them in that list's order when updating.
#include "fxremat/op_categories.h"

#include <unordered_set>

namespace fxremat {

namespace {

bool In(const std::unordered_set<std::string_view>& list, std::string_view key) { return list.count(key) > 0; }

}  // namespace

bool IsPythonCallableTarget(std::string_view t) {
  return t.starts_with("_operator.") || t.starts_with("math.") || t.starts_with("builtins.") ||
         t.starts_with("torch.");
}

std::string_view PacketOf(std::string_view t) {
  if (IsPythonCallableTarget(t)) return t;
  const size_t last_dot = t.rfind('.');
  return last_dot == std::string_view::npos ? t : t.substr(0, last_dot);
}

bool InRandOps(std::string_view target) {
  static const std::unordered_set<std::string_view> kList = {
      "aten.dropout", "aten._fused_dropout", "aten._standard_gamma", "aten.bernoulli",
      "aten.multinomial", "aten.native_dropout", "aten.normal", "aten.poisson", "aten.binomial",
      "aten.rrelu", "aten.rand_like", "aten.rand", "aten.randint", "aten.randn", "aten.randperm"};
  return In(kList, PacketOf(target));
}

bool InDefaultViewOps(std::string_view p) {
  static const std::unordered_set<std::string_view> kList = {
      "aten.squeeze", "aten.unsqueeze", "aten.alias", "aten.view", "aten.slice", "aten.t",
      "prims.broadcast_in_dim", "aten.expand", "aten.as_strided", "aten.permute", "aten.select", "aten.split"};
  return In(kList, p);
}

bool InDefaultRecomputableOps(std::string_view p) {
  static const std::unordered_set<std::string_view> kList = {
      // default_recomputable_ops
      "aten.add", "aten.sub", "aten.div", "aten.atan2", "aten.mul", "aten.max", "aten.min", "aten.pow",
      "aten.remainder", "aten.fmod", "aten.__and__", "aten.__or__", "aten.__xor__", "aten.__lshift__",
      "aten.__rshift__", "aten.eq", "aten.ne", "aten.ge", "aten.gt", "aten.le", "aten.lt", "aten.abs",
      "aten.bitwise_not", "aten.ceil", "aten.floor", "aten.frac", "aten.neg", "aten.relu", "aten.round",
      "aten.silu", "aten.trunc", "aten.log", "aten.log10", "aten.log1p", "aten.log2", "aten.lgamma",
      "aten.exp", "aten.expm1", "aten.erf", "aten.erfc", "aten.cos", "aten.acos", "aten.cosh", "aten.sin",
      "aten.asin", "aten.sinh", "aten.tan", "aten.atan", "aten.tanh", "aten.atanh", "aten.sqrt",
      "aten.rsqrt", "aten.reciprocal", "aten.sigmoid", "aten.softplus", "aten.threshold",
      "aten.threshold_backward", "aten.clamp", "aten.where", "aten.lerp", "aten.addcmul", "aten.gelu",
      "aten.gelu_backward", "aten.sum", "aten.mean", "aten._grad_sum_to_size", "aten.sum_to_size",
      "aten.amax", "aten.to", "aten.type_as", "_operator.getitem", "aten.squeeze", "aten.unsqueeze",
      "aten.rsub", "aten._to_copy",
      // + view_ops
      "aten.alias", "aten.view", "aten.slice", "aten.t", "prims.broadcast_in_dim", "aten.expand",
      "aten.as_strided", "aten.permute", "aten.select", "aten.split",
      // recomputable_ops += [...]
      "prims.div", "prims.convert_element_type", "prims.prepare_softmax_online", "aten.clone",
      "aten.full_like", "prims.var", "prims.sum", "aten.var", "aten.std", "aten._unsafe_view",
      "aten.reshape", "aten.broadcast_tensors", "aten.scalar_tensor", "aten.ones", "aten.new_zeros",
      "aten.lift_fresh_copy", "aten.arange", "aten.triu", "aten.var_mean", "aten.isinf", "aten.any",
      "aten.full", "aten.zeros", "aten.empty", "aten.empty_like", "aten.argmax", "aten.maximum",
      "prims.iota", "prims._low_memory_max_pool_offsets_to_indices", "aten.index", "aten.gather",
      "aten.zeros_like"};
  return In(kList, p);
}

bool InDefaultRandomOps(std::string_view p) {
  return p == "aten.native_dropout" || p == "aten.rand_like" || p == "aten.randn_like";
}

bool InDefaultComputeIntensiveOps(std::string_view p) {
  static const std::unordered_set<std::string_view> kList = {
      "aten.mm", "aten.convolution", "aten.convolution_backward", "aten.bmm", "aten.addmm",
      "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
      "aten._flash_attention_forward", "aten._efficient_attention_forward", "aten.upsample_bilinear2d",
      "aten._scaled_mm"};
  return In(kList, p);
}

bool InSideEffectfulFunctions(std::string_view target) {
  static const std::unordered_set<std::string_view> kList = {
      "aten._assert_async.default", "aten._assert_async.msg", "aten._assert_scalar.default",
      "aten._assert_tensor_metadata.default", "aten.sym_constrain_range.default",
      "aten.sym_constrain_range_for_size.default", "profiler._record_function_enter.default",
      "profiler._record_function_enter_new.default", "profiler._record_function_exit._RecordFunction",
      "profiler._record_function_exit.default", "inductor.accumulate_grad_.default",
      "inductor.resize_storage_bytes_.default", "_operator.setitem"};
  return In(kList, target);
}

bool InEffectfulOps(std::string_view target) {
  return target == "aten._print.default" || target == "aten._linalg_check_errors.default";
}

bool InDefaultPartitionSkippedOps(std::string_view target) {
  static const std::unordered_set<std::string_view> kList = {
      "aten._assert_scalar.default", "aten._assert_async.default", "aten._assert_async.msg",
      "profiler._record_function_enter_new.default", "profiler._record_function_enter.default",
      "profiler._record_function_exit.default", "profiler._record_function_exit._RecordFunction"};
  return In(kList, target);
}

bool IsFxImpure(const Node& n, bool impure_random) {
  if (!n.isCallFunction()) return n.isPlaceholder() || n.isOutput();
  const std::string& t = n.target();
  if (InSideEffectfulFunctions(t) || InEffectfulOps(t)) return true;
  // Note [Higher-order ops]: with_effects runs an effectful op in its token
  // chain; it is never dropped (torch.fx's is_impure finds the wrapped op's
  // effect; its token output keeps it alive in AOTAutograd's graphs anyway).
  if (t == "higher_order.with_effects") return true;
  const OpInfo* info = n.opInfo();
  if (info && info->hasSchema() && info->schema.isMutable()) return true;
  return impure_random && info && info->hasTag("nondeterministic_seeded");
}

bool IsAliasOp(const Node& n) {
  if (n.isGetItem()) return false;
  if (n.target() == "aten._unsafe_view.default") return true;
  const OpInfo* info = n.opInfo();
  return info && info->hasSchema() && info->schema.returnsAlias() && n.val().kind != ValueFacts::Kind::kTuple;
}

bool SharesStorage(const Node& n, const Node** source) {
  const Node* first = !n.args().empty() && n.args()[0].is_node() ? n.args()[0].node : nullptr;
  *source = nullptr;
  if (IsAliasOp(n)) {
    *source = first;
    return true;
  }
  if (!n.isGetItem() || !first) return false;
  const OpInfo* info = first->opInfo();
  if (!info || !info->hasSchema() || !info->schema.returnsAlias()) return false;
  *source = first->inputs().empty() ? nullptr : first->inputs()[0];
  return true;
}

}  // namespace fxremat
