// cleanup_recompute_tags: region outputs that feed a later checkpoint region,
// and (default partition) region inputs, become MUST_SAVE. Assumes recompute
// tags and ac_graph_id as torch.compile's selective checkpointing sets them.
#include "passes/cleanup_recompute_tags.h"

#include "src/partition_internal.h"

namespace fxremat {

Expected<bool> CleanupRecomputeTags(Graph& graph, bool is_default_partition) {
  bool changed = false;
  auto make_must_save = [&](Node& n) {
    if (n.meta().recompute != Decision::kMustSave) {
      n.meta().recompute = Decision::kMustSave;
      changed = true;
    }
  };
  for (const auto& up : graph.nodes()) {
    Node& node = *up;
    if (MustRecompute(node)) {
      bool user_recomputes = false;
      for (Node* user : node.users()) {
        user_recomputes = user_recomputes || MustRecompute(*user);
        if (MustRecompute(*user) && user->meta().rare().ac_graph_id && node.meta().rare().ac_graph_id &&
            *user->meta().rare().ac_graph_id > *node.meta().rare().ac_graph_id)
          make_must_save(node);
      }
      // A region output with a backward hook (FSDP's all-gather hooks) is saved:
      // recomputing it would need its own gradient's hook first, a cycle.
      if (node.meta().has_backward_hook && !user_recomputes) make_must_save(node);
      continue;
    }
    if (!is_default_partition || node.meta().rare().ac_graph_id || node.isOutput()) continue;
    bool feeds_region = false;
    for (Node* user : node.users()) feeds_region = feeds_region || MustRecompute(*user);
    if (!feeds_region) continue;
    // A getitem of a multi-output node that lives inside a region is not saved.
    if (node.isGetItem() && !node.args().empty() && node.args()[0].is_node() &&
        node.args()[0].node->meta().rare().ac_graph_id)
      continue;
    make_must_save(node);
  }
  return changed;
}

}  // namespace fxremat
