// emit_offload's time model for the torch_async target (Note [Overlapped
// offload]): what ExposedTransferSeconds reports for the emitted graphs as the
// host link gets slower, and that the device peak the budget bounds sees the
// transfers' placement. The emitted graphs themselves are golden cases
// (tests/golden/emit_offload.test).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "fxremat/partition.h"
#include "fxremat/peak_model.h"
#include "fxremat/text.h"
#include "passes/emit_offload.h"

using namespace fxremat;

namespace {

// A forward of two 4 MiB values and a backward that needs them in the
// reverse order, with a 1024^3 matmul on each side to hide transfers behind.
constexpr const char* kJoint = R"(# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
# input primals_1 role=primal
# input tangents_1 role=tangent
def forward(self, primals_1: "f32[1024, 1024][1024, 1]cuda:0 rg", tangents_1: "f32[1024, 1024][1024, 1]cuda:0"):
    sin: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.sin.default(primals_1)
    cos: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.cos.default(primals_1)
    mm: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.mm.default(sin, cos)
    mul: "f32[1024, 1024][1024, 1]cuda:0 rg" = torch.ops.aten.mul.Tensor(mm, 2)
    mm_1: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.mm.default(tangents_1, primals_1)
    mul_1: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.mul.Tensor(mm_1, cos)
    mul_2: "f32[1024, 1024][1024, 1]cuda:0" = torch.ops.aten.mul.Tensor(mul_1, sin)
    return (mul, mul_2)
)";

Partition Offloaded(const Graph& joint, const OffloadOptions& options) {
  std::vector<Node*> saved = {joint.findNode("sin"), joint.findNode("cos"), joint.findNode("primals_1")};
  auto p = ExtractPartition(joint, saved, "test");
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  for (SavedValue& s : p->signature.saved) s.offloaded = s.name == "sin" || s.name == "cos";
  auto changed = EmitOffload(*p, options);
  INFO(changed.status().ToString());
  REQUIRE(changed.ok());
  REQUIRE(*changed);
  return std::move(p).value();
}

OffloadOptions Async(double link_gbps) {
  OffloadOptions o;
  o.target = OffloadTarget::kTorchAsync;
  o.link_bytes_per_second = link_gbps * 1e9;
  return o;
}

}  // namespace

TEST_CASE("exposed transfer time grows as the host link slows, never past the transfers", "[offload]") {
  auto joint = ParseGraph(kJoint);
  REQUIRE(joint.ok());
  const double bytes = 2.0 * 4 * 1024 * 1024;  // sin and cos, each way
  double previous = -1;
  for (double gbps : {1e6, 500.0, 50.0, 5.0, 0.5}) {
    const Partition p = Offloaded(**joint, Async(gbps));
    const double exposed = ExposedTransferSeconds(p, Async(gbps));
    const double all = 2 * bytes / (gbps * 1e9);  // both transfers, both directions
    INFO(gbps << " GB/s: exposed " << exposed << " s of " << all << " s");
    CHECK(exposed >= previous);
    CHECK(exposed <= all * (1 + 1e-9));
    previous = exposed;
  }
  // A link this fast hides everything; one this slow hides almost nothing.
  CHECK(ExposedTransferSeconds(Offloaded(**joint, Async(1e6)), Async(1e6)) == 0);
  const double slow = ExposedTransferSeconds(Offloaded(**joint, Async(0.5)), Async(0.5));
  CHECK(slow > 0.9 * 2 * bytes / 0.5e9);
  // Other targets' transfers are not on a side stream: nothing to report.
  OffloadOptions sync;
  CHECK(ExposedTransferSeconds(Offloaded(**joint, sync), sync) == 0);
}

TEST_CASE("torch_async's placement is what the peak model counts", "[offload]") {
  auto joint = ParseGraph(kJoint);
  REQUIRE(joint.ok());
  // A fast link: copies are waited for as soon as the value is dead, reloads
  // issued right before their use: the synchronous target's device peak. A
  // slow one sinks waits and prefetches reloads, holding device copies
  // longer: the simulated peak can only grow, and says so.
  OffloadOptions sync;
  auto sync_peak = SimulatePeak(Offloaded(**joint, sync));
  auto fast_peak = SimulatePeak(Offloaded(**joint, Async(1e6)));
  auto slow_peak = SimulatePeak(Offloaded(**joint, Async(0.5)));
  REQUIRE(sync_peak.ok());
  REQUIRE(fast_peak.ok());
  REQUIRE(slow_peak.ok());
  CHECK(fast_peak->peak_bytes >= sync_peak->peak_bytes);
  CHECK(slow_peak->peak_bytes >= fast_peak->peak_bytes);
  CHECK(slow_peak->host_peak_bytes == 2 * 4 * 1024 * 1024);
}
