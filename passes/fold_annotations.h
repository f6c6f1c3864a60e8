// fold_annotations: the naming ops (fxremat::checkpoint_name, xla::name_tensor,
// xla::offload_name; IsAnnotationOp) become names on the value they annotate.
#pragma once

#include "fxremat/ir.h"
#include "fxremat/status.h"

namespace fxremat {

struct FoldAnnotationsOptions {
  // Keep the ops: the name then sits on the op's own result (a copy of its
  // input), which the policy sees as the named value. Default: fold them away,
  // so the annotated input carries the name and no copy is made.
  bool keep_annotations = false;
};

// Given:   %n = fxremat.checkpoint_name.default(%mm, 'a');  %s = aten.sin(%n)
// Execute: FoldAnnotations(g, {})
// Result:  %mm names=[a];  %s = aten.sin(%mm)
// xla::offload_name also sets meta().offload_requested. A name that is not a
// string constant is a bad-input error naming the node. Returns "changed?".
Expected<bool> FoldAnnotations(Graph& g, const FoldAnnotationsOptions& options);

}  // namespace fxremat
