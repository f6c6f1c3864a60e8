// libFuzzer target for the graph readers: any byte string must give a graph
// that passes VerifyGraph or a Status error, never a crash, hang or UB.
// Build: cmake -DCMAKE_CXX_COMPILER=clang++ -DFXREMAT_BUILD_FUZZ=ON ...; run:
//   build-fuzz/tests/fxremat_fuzz_loader tests/bad_inputs -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/default_partition.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (auto graph : {fxremat::GraphFromJson(text), fxremat::ParseGraph(text)}) {
    if (!graph.ok()) continue;
    if (!fxremat::VerifyGraph(**graph).ok()) __builtin_trap();
    // Whatever parses must print, and partition or fail cleanly.
    (void)fxremat::PrintGraph(**graph);
    if ((*graph)->kind() == fxremat::GraphKind::kJoint) (void)fxremat::DefaultPartition(**graph);
  }
  return 0;
}
