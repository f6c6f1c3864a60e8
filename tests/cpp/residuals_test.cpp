// The residual report and the signature's names/offload keys: exact text for a
// hand-made signature, JSON round trips, and the report of a real partition.
#include <catch2/catch.hpp>

#include <filesystem>

#include "fxremat/partition.h"
#include "fxremat/residuals.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/emit_offload.h"
#include "passes/fold_annotations.h"
#include "src/partition_internal.h"

namespace fs = std::filesystem;
using namespace fxremat;

namespace {

ValueFacts F32(DimVector shape) {
  ValueFacts v;
  v.kind = ValueFacts::Kind::kTensor;
  v.tensor.shape = std::move(shape);
  return v;
}

// Given: a saved primal, a named value with a location, an offloaded unnamed
// one, a symint, in forward-output order.
Signature HandMade() {
  Signature sig;
  sig.num_fwd_outputs = 1;
  PrimalEntry w;
  w.name = "primals_1";
  w.path = "W1";
  sig.primals.push_back(w);
  SavedValue primal;
  primal.name = "primals_1";
  primal.facts = F32({Dim::Static(5), Dim::Static(4)});
  primal.bytes = 80;
  primal.forward_output_index = 1;
  primal.backward_input_index = 1;
  SavedValue named;
  named.name = "mm";
  named.names = {"a", "b"};
  named.annotation = "a";
  named.origin_op = "aten.mm.default";
  named.origin_location = "prog.py:12 (f4)";
  named.facts = F32({Dim{8, "s0"}});
  named.bytes = 32;
  named.forward_output_index = 2;
  named.backward_input_index = 2;
  SavedValue offloaded;
  offloaded.name = "sin";
  offloaded.origin_op = "aten.sin.default";
  offloaded.origin_location = "prog.py:6 (g)";
  offloaded.offloaded = true;
  offloaded.facts = F32({Dim::Static(5)});
  offloaded.bytes = 20;
  offloaded.forward_output_index = 3;
  offloaded.backward_input_index = 3;
  SavedValue sym;
  sym.name = "sym_size";
  sym.kind = SavedValue::Kind::kSymInt;
  sym.origin_op = "aten.sym_size.int";
  sym.facts.kind = ValueFacts::Kind::kSymInt;
  sym.facts.expr = "s0";
  sym.bytes = 1;
  sym.forward_output_index = 4;
  sym.backward_input_index = 0;
  sig.saved = {primal, named, offloaded, sym};
  return sig;
}

}  // namespace

TEST_CASE("the residual report names each saved value the way JAX does") {
  // Execute / Result:
  CHECK(ResidualReport(HandMade()) ==
        "f32[5,4] from the argument primals_1 (W1)  saved      fw_out 1  bw_in 1\n"
        "f32[s0] named 'a', 'b' (prog.py:12 (f4))   saved      fw_out 2  bw_in 2\n"
        "f32[5] output of aten.sin (prog.py:6 (g))  offloaded  fw_out 3  bw_in 3\n"
        "Sym(s0) output of aten.sym_size            saved      fw_out 4  bw_in 0\n"
        "4 residuals: 112 B saved on device, 20 B offloaded to host, 1 symint on the autograd context\n");
  Signature empty;
  CHECK(ResidualReport(empty) == "0 residuals: 0 B saved on device, 0 B offloaded to host\n");
}

TEST_CASE("the report names the rule that saved each value when the signature has it") {
  // Note [Saved-value rules]
  Signature sig = HandMade();
  for (SavedValue& v : sig.saved) v.rule = v.name == "primals_1" ? "input" : "min cut";
  CHECK(ResidualReport(sig) ==
        "f32[5,4] from the argument primals_1 (W1)  input    saved      fw_out 1  bw_in 1\n"
        "f32[s0] named 'a', 'b' (prog.py:12 (f4))   min cut  saved      fw_out 2  bw_in 2\n"
        "f32[5] output of aten.sin (prog.py:6 (g))  min cut  offloaded  fw_out 3  bw_in 3\n"
        "Sym(s0) output of aten.sym_size            min cut  saved      fw_out 4  bw_in 0\n"
        "4 residuals: 112 B saved on device, 20 B offloaded to host, 1 symint on the autograd context\n");
  auto parsed = SignatureFromJson(SignatureToJson(sig), "sig");
  REQUIRE(parsed.ok());
  CHECK(ResidualReport(*parsed) == ResidualReport(sig));
}

TEST_CASE("the signature's names and offload keys survive JSON; old files read without them") {
  Signature sig = HandMade();
  const std::string json = SignatureToJson(sig);
  CHECK(json.find("\"name_in_output_indices\": {\n    \"a\": 2,\n    \"b\": 2\n  }") != std::string::npos);
  CHECK(json.find("\"name_in_input_names\": {\n    \"a\": \"mm\",") != std::string::npos);
  CHECK(json.find("\"offloaded_bytes\": 20") != std::string::npos);
  auto parsed = SignatureFromJson(json, "sig");
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  CHECK(SignatureToJson(*parsed) == json);
  CHECK(ResidualReport(*parsed) == ResidualReport(sig));

  // A signature written before names and offload: annotation only.
  std::string old = R"({"format": "fxremat.signature", "version": [1, 0], "partitioner": "default",
    "forward": {"num_inputs": 1, "num_outputs": 2}, "backward": {"num_inputs": 2, "num_outputs": 1},
    "num_fwd_outputs": 1, "primals": [], "forward_outputs": [],
    "saved": [{"name": "sin", "kind": "tensor", "annotation": "foo", "forward_output_index": 1,
               "backward_input_index": 0, "shape": [4], "dtype": "float32", "bytes": 16}],
    "tangents": [], "saved_bytes": 16})";
  auto legacy = SignatureFromJson(old, "old.json");
  REQUIRE(legacy.ok());
  CHECK(legacy->saved[0].names == std::vector<std::string>{"foo"});
  CHECK_FALSE(legacy->saved[0].offloaded);
  CHECK(legacy->offloadedBytes() == 0);
}

TEST_CASE("the report of a partition of the seed's name_tensor graph") {
  auto joint = LoadGraphFile((fs::path(FXREMAT_SOURCE_DIR) / "testdata" / "name_tensor.json.gz").string());
  REQUIRE(joint.ok());
  REQUIRE(FoldAnnotations(**joint, {}).ok());
  std::vector<Node*> saved;
  for (Node* p : (*joint)->placeholders())
    if (p->role() == PlaceholderRole::kPrimal) saved.push_back(p);
  auto p = ExtractPartition(**joint, saved, "test");
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE_FALSE(p->signature.saved.empty());
  p->signature.saved[0].offloaded = true;
  REQUIRE(EmitOffload(*p, OffloadTarget::kTorch).ok());
  const std::string report = ResidualReport(p->signature);
  INFO(report);
  CHECK(report.find("from the argument " + p->signature.saved[0].name) != std::string::npos);
  CHECK(report.find("offloaded  fw_out") != std::string::npos);
}

TEST_CASE("origin locations come from the innermost stack frame") {
  CHECK(OriginLocation("  File \"/home/u/prog.py\", line 12, in f4\n    y = a(x)\n"
                       "  File \"/usr/lib/torch/nn/linear.py\", line 125, in forward\n    return F.linear(x)\n") ==
        "linear.py:125 (forward)");
  CHECK(OriginLocation("  File \"prog.py\", line 6, in <lambda>\n") == "prog.py:6 (<lambda>)");
  CHECK(OriginLocation("File \"prog.py\"") == "prog.py");
  CHECK(OriginLocation("no frames here").empty());
  CHECK(OriginLocation("").empty());
}
