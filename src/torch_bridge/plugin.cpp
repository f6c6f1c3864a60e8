// The libtorch bridge as a loadable plugin for the CLI: libtorch's shared
// objects take about half a second to load, so `fxremat partition` and
// `inspect` never load them unless a graph lacks op facts; `verify` always does.
// These entry points have C linkage for dlsym; they pass C++ objects, which is
// safe because the plugin and the CLI come from one build.
#include "fxremat/torch_bridge.h"

extern "C" {

__attribute__((visibility("default"))) void fxremat_plugin_complete_op_facts(fxremat::Graph* graph,
                                                                               fxremat::Status* status) {
  auto result = fxremat::CompleteOpFactsFromDispatcher(*graph);
  *status = result.ok() ? fxremat::Status::Ok() : result.status();
}

__attribute__((visibility("default"))) void fxremat_plugin_verify(const fxremat::Graph* joint,
                                                                    const fxremat::Graph* forward,
                                                                    const fxremat::Graph* backward,
                                                                    const fxremat::Signature* signature,
                                                                    const fxremat::VerifyOptions* options,
                                                                    fxremat::Status* status,
                                                                    fxremat::VerifyReport* report) {
  auto result = fxremat::VerifyPartition(*joint, *forward, *backward, *signature, *options);
  if (!result.ok()) {
    *status = result.status();
    return;
  }
  *status = fxremat::Status::Ok();
  *report = std::move(result).value();
}

}  // extern "C"
