// fold_annotations: turns the naming ops (IsAnnotationOp: fxremat.checkpoint_name,
// xla.name_tensor, xla.offload_name) into names on values (meta().names) and, by
// default, removes them. Assumes a verified graph; the ops compute nothing (an
// identity), so folding one away changes no value.
#include "passes/fold_annotations.h"

#include <algorithm>

#include <fmt/format.h>

namespace fxremat {

namespace {

// The name a naming op gives: its second argument or its `name` keyword, a
// string constant.
Expected<std::string> NameOf(const Node& op) {
  const Argument* name = op.args().size() >= 2 ? &op.args()[1] : op.kwarg("name");
  if (name == nullptr || name->kind != Argument::Kind::kString)
    return Status::BadInput(fmt::format("naming op '{}' takes a string constant as its name", op.target()),
                            fmt::format("node '{}'", op.name()));
  return name->text.str();
}

void AddName(NodeMeta& meta, const std::string& name, bool offload) {
  if (std::find(meta.names.begin(), meta.names.end(), name) == meta.names.end()) meta.names.push_back(name);
  meta.offload_requested = meta.offload_requested || offload;
}

}  // namespace

Expected<bool> FoldAnnotations(Graph& g, const FoldAnnotationsOptions& options) {
  std::vector<Node*> ops;
  for (const auto& up : g.nodes())
    if (up->isCallFunction() && IsAnnotationOp(up->target())) ops.push_back(up.get());
  if (ops.empty()) return false;
  // Check every op before editing anything: an error leaves the graph as it was.
  for (Node* op : ops) {
    FXREMAT_RETURN_IF_ERROR(NameOf(*op).status());
    if (op->args().empty() || !op->args()[0].is_node())
      return Status::BadInput(fmt::format("naming op '{}' must annotate a value (its first argument)", op->target()),
                              fmt::format("node '{}'", op->name()));
  }
  // Graph order: in a chain name(name(%mm, 'a'), 'b') the inner op folds first,
  // so the outer one then annotates %mm and %mm gets [a, b].
  for (Node* op : ops) {
    const std::string name = NameOf(*op).value();
    const bool offload = op->target() == "xla.offload_name.default";
    if (options.keep_annotations) {
      AddName(op->meta(), name, offload);
      continue;
    }
    Node* annotated = op->args()[0].node;
    AddName(annotated->meta(), name, offload);
    g.replaceAllUsesWith(op, annotated);
  }
  if (!options.keep_annotations) g.eraseNodes(ops);
  return true;
}

}  // namespace fxremat
