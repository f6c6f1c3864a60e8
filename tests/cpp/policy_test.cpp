// Checkpoint policies: both input forms, validation errors, and what the min cut
// saves under each policy on a two-layer program (seed 003's g(W, x) = sin(W x),
// written as the joint graph AOTAutograd traces).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "fxremat/partition.h"
#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/min_cut_partition.h"

using namespace fxremat;

namespace {

// y1 = W1 @ x; s1 = sin(y1) ("a"); y2 = W2 @ s1; s2 = sin(y2) ("b"); out = s2.
// The backward needs cos(y1), cos(y2), s1 (for W2's gradient), x, W1^T, W2^T.
constexpr const char* kTwoLayers = R"(# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
# op aten.cos.default 'aten::cos(Tensor self) -> Tensor' [core, pointwise]
# op aten.mm.default 'aten::mm(Tensor self, Tensor mat2) -> Tensor' [core]
# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]
# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]
# op aten.t.default 'aten::t(Tensor(a) self) -> Tensor(a)' [core]
# op aten.native_dropout.default 'aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)' [core, nondeterministic_seeded]
# input primals_1 role=primal path='args[0]' tag=is_forward
# input primals_2 role=primal path='args[1]' tag=is_forward
# input primals_3 role=primal path='args[2]' tag=is_forward
# input tangents_1 role=tangent tag=is_backward
def forward(self, primals_1: "f32[5, 4][4, 1]cpu rg", primals_2: "f32[6, 5][5, 1]cpu rg", primals_3: "f32[4, 1][1, 1]cpu rg", tangents_1: "f32[6, 1][1, 1]cpu"):
    mm: "f32[5, 1][1, 1]cpu rg" = torch.ops.aten.mm.default(primals_1, primals_3)  # tag=is_forward
    sin: "f32[5, 1][1, 1]cpu rg" = torch.ops.aten.sin.default(mm)  # tag=is_forward
    mm_1: "f32[6, 1][1, 1]cpu rg" = torch.ops.aten.mm.default(primals_2, sin)  # tag=is_forward
    sin_1: "f32[6, 1][1, 1]cpu rg" = torch.ops.aten.sin.default(mm_1)  # tag=is_forward
    cos: "f32[6, 1][1, 1]cpu" = torch.ops.aten.cos.default(mm_1)  # tag=is_backward
    mul: "f32[6, 1][1, 1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, cos)  # tag=is_backward
    t: "f32[1, 5][1, 1]cpu" = torch.ops.aten.t.default(sin)  # tag=is_backward
    mm_2: "f32[6, 5][5, 1]cpu" = torch.ops.aten.mm.default(mul, t)  # tag=is_backward
    t_1: "f32[5, 6][1, 5]cpu" = torch.ops.aten.t.default(primals_2)  # tag=is_backward
    mm_3: "f32[5, 1][1, 1]cpu" = torch.ops.aten.mm.default(t_1, mul)  # tag=is_backward
    cos_1: "f32[5, 1][1, 1]cpu" = torch.ops.aten.cos.default(mm)  # tag=is_backward
    mul_1: "f32[5, 1][1, 1]cpu" = torch.ops.aten.mul.Tensor(mm_3, cos_1)  # tag=is_backward
    t_2: "f32[1, 4][1, 1]cpu" = torch.ops.aten.t.default(primals_3)  # tag=is_backward
    mm_4: "f32[5, 4][4, 1]cpu" = torch.ops.aten.mm.default(mul_1, t_2)  # tag=is_backward
    t_3: "f32[4, 5][1, 4]cpu" = torch.ops.aten.t.default(primals_1)  # tag=is_backward
    mm_5: "f32[4, 1][1, 1]cpu" = torch.ops.aten.mm.default(t_3, mul_1)  # tag=is_backward
    return (sin_1, mm_4, mm_2, mm_5)
)";

std::unique_ptr<Graph> TwoLayers() {
  auto g = ParseGraph(kTwoLayers);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  (*g)->findNode("sin")->meta().names = {"a"};
  (*g)->findNode("sin_1")->meta().names = {"b"};
  return std::move(*g);
}

struct Saved {
  std::set<std::string> device, host;
};

Saved SavedUnder(const std::string& policy_text, const std::function<void(Graph&)>& edit = {}) {
  std::unique_ptr<Graph> g = TwoLayers();
  if (edit) edit(*g);
  MinCutOptions options;
  if (!policy_text.empty()) {
    auto spec = ParsePolicy(policy_text);
    INFO(spec.status().ToString());
    REQUIRE(spec.ok());
    options.policy = *spec;
  }
  auto p = MinCutPartition(*g, options);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  Saved s;
  for (const SavedValue& v : p->signature.saved) (v.offloaded ? s.host : s.device).insert(v.name);
  return s;
}

std::string ErrorUnder(const std::string& policy_text, const std::function<void(Graph&)>& edit = {}) {
  std::unique_ptr<Graph> g = TwoLayers();
  if (edit) edit(*g);
  MinCutOptions options;
  auto spec = ParsePolicy(policy_text);
  if (!spec.ok()) return spec.status().ToString();
  options.policy = *spec;
  auto p = MinCutPartition(*g, options);
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == ErrorCode::kBadInput);
  return p.status().ToString();
}

using Set = std::set<std::string>;
const Set kInputs = {"primals_1", "primals_2", "primals_3"};
Set With(Set s, std::initializer_list<std::string> more) {
  s.insert(more.begin(), more.end());
  return s;
}

}  // namespace

TEST_CASE("policies: the command-line form and the JSON form give the same spec") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"everything_saveable", R"({"policy": "everything_saveable"})"},
      {"save_only_these_names:attn_out,mlp_out", R"({"policy": "save_only_these_names", "names": ["attn_out", "mlp_out"]})"},
      {"save_and_offload_only_these_names:save=y;offload=z",
       R"({"policy": "save_and_offload_only_these_names", "names_which_can_be_saved": ["y"],
           "names_which_can_be_offloaded": ["z"], "offload_src": "device", "offload_dst": "pinned_host"})"},
      {"offload_dot_with_no_batch_dims:device,pinned_host", R"({"policy": "offload_dot_with_no_batch_dims"})"},
      {"save_ops:aten.mm,aten.addmm", R"({"policy": "save_ops", "ops": ["aten.mm", "aten.addmm"]})"},
      {"checkpoint_policy:a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE",
       R"({"policy": "checkpoint_policy", "by_name": {"a": "MUST_SAVE", "b": "CheckpointPolicy.PREFER_RECOMPUTE"},
           "by_op": {"aten.mm": "MUST_SAVE"}, "default": "PREFER_RECOMPUTE"})"},
      {"save_from_both_policies:dots_saveable|save_only_these_names:a",
       R"({"policy": "save_from_both_policies", "policies": [{"policy": "dots_saveable"},
           {"policy": "save_only_these_names", "names": ["a"]}]})"},
      {"dots_saveable+save_only_these_names:a",
       R"([{"policy": "dots_saveable"}, {"policy": "save_only_these_names", "names": "a"}])"},
  };
  for (const auto& [cli, json] : cases) {
    INFO(cli);
    auto a = ParsePolicy(cli);
    auto b = PolicyFromJson(json, "policy.json");
    INFO(a.status().ToString() << " / " << b.status().ToString());
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(*a == *b);
    // The JSON written back reads as the same spec.
    auto c = PolicyFromJson(PolicyToJson(*a), "round trip");
    REQUIRE(c.ok());
    CHECK(*c == *a);
  }
  CHECK(ParsePolicy("save_only_these_names:a,b")->ToString() == "save_only_these_names('a', 'b')");
}

TEST_CASE("policies: malformed specs are bad input that names the problem") {
  auto error = [](auto e) {
    REQUIRE_FALSE(e.ok());
    CHECK(e.status().code() == ErrorCode::kBadInput);
    return e.status().ToString();
  };
  CHECK_THAT(error(ParsePolicy("save_everything")), Catch::Contains("unknown policy 'save_everything'"));
  CHECK_THAT(error(ParsePolicy("save_only_these_names")), Catch::Contains("needs at least one name"));
  CHECK_THAT(error(ParsePolicy("save_and_offload_only_these_names:save=a,b;offload=b")),
             Catch::Contains("'b' is both in names_which_can_be_saved"));
  CHECK_THAT(error(ParsePolicy("save_from_both_policies:dots_saveable|offload_dot_with_no_batch_dims")),
             Catch::Contains("save_from_both_policies combines policies that answer saveable or not"));
  CHECK_THAT(error(ParsePolicy("checkpoint_policy:a=SAVE_PLEASE")), Catch::Contains("unknown checkpoint policy decision"));
  CHECK_THAT(error(PolicyFromJson("{\"policy\": ", "p.json")), Catch::Contains("malformed policy JSON"));
  CHECK_THAT(error(PolicyFromJson("{\"policy\":\n  \"dots_saveable\",,}", "p.json")),
             Catch::Contains("line 2, column"));
  CHECK_THAT(error(PolicyFromJson(R"({"policy": "save_only_these_names", "name": ["a"]})", "p.json")),
             Catch::Contains("unknown key 'name'"));
  CHECK_THAT(error(PolicyFromJson(R"([{"policy": "dots_saveable"}, {"policy": "nope"}])", "p.json")),
             Catch::Contains("p.json/policies[1]: unknown policy 'nope'"));
  // What policies.py's constructors refuse, the CLI refuses too (found by an audit).
  CHECK_THAT(error(ParsePolicy("offload_dot_with_no_batch_dims:foo,bar")),
             Catch::Contains("an offload place must be 'device' or 'pinned_host', not 'foo'"));
  CHECK_THAT(error(ParsePolicy("save_and_offload_only_these_names:save=y;offload=z;src=foo")),
             Catch::Contains("not 'foo'"));
  CHECK_THAT(error(ParsePolicy("save_only_these_names:a,,b")), Catch::Contains("an empty name"));
  CHECK_THAT(error(ParsePolicy("save_ops:mm")), Catch::Contains("not an operator name: 'mm'"));
  CHECK_THAT(error(ParsePolicy("checkpoint_policy:default=MUST_SAVE;default=MUST_RECOMPUTE")),
             Catch::Contains("'default' is given twice"));
  CHECK_THAT(error(ParsePolicy("checkpoint_policy:a=MUST_SAVE,a=PREFER_RECOMPUTE")),
             Catch::Contains("'a' is given twice"));
  CHECK_THAT(error(ParsePolicy("checkpoint_policy:op:aten.mm=MUST_SAVE;op:aten::mm=PREFER_RECOMPUTE")),
             Catch::Contains("the op aten.mm is given twice"));
}

TEST_CASE("policies: ops in PyTorch's other spellings name the graph's op, as in policies.py") {
  // "aten::mv" on the command line matched nothing while Python's op_name made it
  // "aten.mv": the same policy saved different values from the CLI and Python.
  for (const char* spelling : {"aten::mm", "torch.ops.aten.mm", " aten.mm "}) {
    INFO(spelling);
    auto p = ParsePolicy(std::string("save_ops:") + spelling);
    REQUIRE(p.ok());
    CHECK(p->ops == std::vector<std::string>{"aten.mm"});
    auto j = PolicyFromJson(fmt::format(R"({{"policy": "checkpoint_policy", "by_op": {{"{}": "MUST_SAVE"}}}})", spelling),
                            "p.json");
    REQUIRE(j.ok());
    CHECK(j->by_op.count("aten.mm") == 1);
  }
  CHECK(ParsePolicy("save_ops:aten::mm.default")->ops == std::vector<std::string>{"aten.mm.default"});
  CHECK(SavedUnder("save_ops:aten::mm").device == SavedUnder("save_ops:aten.mm").device);
}

TEST_CASE("policies: what the min cut saves under each JAX policy") {
  SECTION("everything_saveable saves what the backward reads, as JAX without remat does") {
    // JAX's list for this program: the arguments, sin of layer 1 (W2's gradient
    // reads it) and both cosines (sin's derivative); here the cosines are the
    // joint graph's cos and cos_1.
    CHECK(SavedUnder("everything_saveable").device == With(kInputs, {"sin", "cos", "cos_1"}));
  }
  SECTION("nothing_saveable saves only the arguments") {
    CHECK(SavedUnder("nothing_saveable").device == kInputs);
  }
  SECTION("dots_saveable saves the matmul outputs; sin and cos are recomputed from them") {
    CHECK(SavedUnder("dots_saveable").device == With(kInputs, {"mm", "mm_1"}));
    CHECK(SavedUnder("checkpoint_dots").device == With(kInputs, {"mm", "mm_1"}));
    CHECK(SavedUnder("dots_with_no_batch_dims_saveable").device == With(kInputs, {"mm", "mm_1"}));
  }
  SECTION("save_only_these_names saves the named value; the rest is recomputed") {
    CHECK(SavedUnder("save_only_these_names:a").device == With(kInputs, {"sin"}));
    // 'b' is the forward output; the backward does not read it.
    CHECK(SavedUnder("save_only_these_names:b").device == kInputs);
  }
  SECTION("save_any_names_but_these / save_anything_except_these_names") {
    CHECK(SavedUnder("save_any_names_but_these:b").device == With(kInputs, {"sin"}));
    CHECK(SavedUnder("save_any_names_but_these:a").device == kInputs);
    // Everything but 'a' may be saved: the backward gets cos(y1) and cos(y2)
    // saved and recomputes sin (JAX's own version would save sin anyway).
    Saved s = SavedUnder("save_anything_except_these_names:a");
    CHECK(s.device.count("sin") == 0);
    // sin is recomputed from mm, which may be saved.
    CHECK(s.device == With(kInputs, {"cos", "cos_1", "mm"}));
  }
  SECTION("save_from_both_policies and all_of take the union of what is saveable") {
    CHECK(SavedUnder("save_from_both_policies:dots_saveable|save_only_these_names:a").device ==
          With(kInputs, {"mm", "mm_1", "sin"}));
    CHECK(SavedUnder("dots_saveable+save_only_these_names:a").device == With(kInputs, {"mm", "mm_1", "sin"}));
  }
  SECTION("save_and_offload_only_these_names offloads the offload names") {
    Saved s = SavedUnder("save_and_offload_only_these_names:save=b;offload=a");
    CHECK(s.device == kInputs);
    CHECK(s.host == Set{"sin"});
  }
  SECTION("offload_dot_with_no_batch_dims offloads the matmul outputs") {
    Saved s = SavedUnder("offload_dot_with_no_batch_dims:device,pinned_host");
    CHECK(s.device == kInputs);
    CHECK(s.host == Set{"mm", "mm_1"});
  }
}

TEST_CASE("policies: PyTorch's CheckpointPolicy side") {
  SECTION("save_ops: the listed ops are MUST_SAVE, everything else PREFER_RECOMPUTE") {
    CHECK(SavedUnder("save_ops:aten.mm").device == With(kInputs, {"mm", "mm_1"}));
    CHECK(SavedUnder("save_ops:aten.sin.default").device == With(kInputs, {"sin"}));
  }
  SECTION("checkpoint_policy by name and by op") {
    CHECK(SavedUnder("checkpoint_policy:a=MUST_SAVE;default=PREFER_RECOMPUTE").device == With(kInputs, {"sin"}));
    CHECK(SavedUnder("checkpoint_policy:a=MUST_CPU_OFFLOAD;default=PREFER_RECOMPUTE").host == Set{"sin"});
    CHECK(SavedUnder("checkpoint_policy:op:aten.mm.default=MUST_SAVE").device.count("mm_1") == 1);
  }
  SECTION("PREFER_SAVE is honoured (the reference ignores it)") {
    // Without a policy the cut saves mm and recomputes cos(mm) (cos_1) from it;
    // a PREFER_SAVE tag on cos_1 makes recomputing it cost more than saving it.
    Saved plain = SavedUnder("");
    CHECK(plain.device.count("cos_1") == 0);
    CHECK(plain.device.count("mm") == 1);
    Saved tagged = SavedUnder("", [](Graph& g) { g.findNode("cos_1")->meta().recompute = Decision::kPreferSave; });
    CHECK(tagged.device.count("cos_1") == 1);
    CHECK(tagged.device.count("mm") == 0);
  }
  SECTION("MUST beats PREFER") {
    Saved s = SavedUnder("checkpoint_policy:default=PREFER_SAVE", [](Graph& g) {
      g.findNode("sin")->meta().recompute = Decision::kMustRecompute;
    });
    CHECK(s.device.count("sin") == 0);
  }
  SECTION("tags beat a policy's PREFER demands: a checkpoint region stays recomputed") {
    Saved s = SavedUnder("everything_saveable", [](Graph& g) {
      for (const char* n : {"mm", "sin"}) {
        g.findNode(n)->meta().recompute = Decision::kPreferRecompute;
        g.findNode(n)->meta().mutableRare().ac_graph_id = 1;
      }
    });
    CHECK(s.device.count("sin") == 0);
    CHECK(s.device.count("mm") == 0);
  }
}

TEST_CASE("policies: contradictions are bad input naming the value and both demands") {
  SECTION("MUST_SAVE and MUST_RECOMPUTE on one value") {
    std::string e = ErrorUnder("checkpoint_policy:a=MUST_SAVE+checkpoint_policy:a=MUST_RECOMPUTE");
    CHECK_THAT(e, Catch::Contains("contradictory demands on value 'sin' (named 'a')"));
    CHECK_THAT(e, Catch::Contains("MUST_SAVE (policy checkpoint_policy({'a': MUST_SAVE}))"));
    CHECK_THAT(e, Catch::Contains("MUST_RECOMPUTE (policy checkpoint_policy({'a': MUST_RECOMPUTE}))"));
  }
  SECTION("a tag against a policy") {
    std::string e = ErrorUnder("checkpoint_policy:a=MUST_RECOMPUTE", [](Graph& g) {
      g.findNode("sin")->meta().recompute = Decision::kMustSave;
    });
    CHECK_THAT(e, Catch::Contains("MUST_SAVE (recompute tag MUST_SAVE) and MUST_RECOMPUTE"));
  }
  SECTION("saved by one policy, offloaded by another") {
    std::string e = ErrorUnder("save_only_these_names:a+save_and_offload_only_these_names:save=b;offload=a");
    CHECK_THAT(e, Catch::Contains("contradictory policies on value 'sin'"));
    CHECK_THAT(e, Catch::Contains("PREFER_SAVE"));
    CHECK_THAT(e, Catch::Contains("PREFER_CPU_OFFLOAD"));
  }
  SECTION("offload of a value that cannot move: an input") {
    std::string e = ErrorUnder("nothing_saveable", [](Graph& g) {
      g.findNode("primals_3")->meta().names = {"x"};
      g.findNode("primals_3")->meta().offload_requested = true;
    });
    CHECK_THAT(e, Catch::Contains("value 'primals_3' (named 'x')"));
    CHECK_THAT(e, Catch::Contains("it is an input of the graph"));
  }
  SECTION("a policy's offload of a named input") {
    for (const char* policy : {"save_and_offload_only_these_names:save=b;offload=x",
                               "checkpoint_policy:x=MUST_CPU_OFFLOAD"}) {
      std::string e = ErrorUnder(policy, [](Graph& g) { g.findNode("primals_3")->meta().names = {"x"}; });
      CHECK_THAT(e, Catch::Contains("value 'primals_3' (named 'x')"));
      CHECK_THAT(e, Catch::Contains("it is an input of the graph"));
    }
    // Saving a named input is what happens anyway: no error.
    CHECK(SavedUnder("save_only_these_names:x", [](Graph& g) { g.findNode("primals_3")->meta().names = {"x"}; })
              .device == kInputs);
  }
  SECTION("offload of a view of an input") {
    std::string e = ErrorUnder("save_and_offload_only_these_names:save=b;offload=xt", [](Graph& g) {
      // Make t_2 (x transposed) a forward value the policy sees, aliasing x.
      g.findNode("t_2")->meta().names = {"xt"};
      g.findNode("t_2")->meta().partitioner_tag = PartitionerTag::kIsForward;
      g.findNode("primals_3")->val().tensor.storage = 7;
      g.findNode("t_2")->val().tensor.storage = 7;
    });
    CHECK_THAT(e, Catch::Contains("it is a view of the input primals_3"));
  }
}

// The min cut of `g` under the policy `policy_text` (which must succeed).
Partition PartitionUnder(const Graph& g, const std::string& policy_text) {
  MinCutOptions options;
  options.policy = ParsePolicy(policy_text).value();
  auto p = MinCutPartition(g, options);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  return std::move(*p);
}

std::set<std::string> SavedNames(const Partition& p) {
  std::set<std::string> saved;
  for (const SavedValue& v : p.signature.saved) saved.insert(v.name);
  return saved;
}

TEST_CASE("policies: MUST_RECOMPUTE on a random op replays it where it can, else is a contradiction; PREFER_RECOMPUTE then saves it") {
  constexpr const char* kDropout = R"IR(# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]
# op aten.native_dropout.default 'aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)' [core, nondeterministic_seeded]
# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]
# input primals_1 role=primal path='args[0]' tag=is_forward
# input tangents_1 role=tangent tag=is_backward
def forward(self, primals_1: "f32[8][1]cpu rg", tangents_1: "f32[8][1]cpu"):
    native_dropout: "(f32[8][1]cpu, b8[8][1]cpu)" = torch.ops.aten.native_dropout.default(primals_1, 0.5, True)  # tag=is_forward
    getitem: "f32[8][1]cpu rg" = native_dropout[0]  # tag=is_forward
    getitem_1: "b8[8][1]cpu" = native_dropout[1]  # tag=is_forward
    sin: "f32[8][1]cpu rg" = torch.ops.aten.sin.default(getitem)  # tag=is_forward
    mul: "f32[8][1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, getitem_1)  # tag=is_backward
    return (sin, mul)
)IR";
  auto g = ParseGraph(kDropout);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  // On the CPU the draw can be replayed (Note [Replaying random ops]): the demand
  // is honoured, the mask is recomputed from the input.
  const char* must_recompute = "checkpoint_policy:op:aten.native_dropout=MUST_RECOMPUTE";
  CHECK(SavedNames(PartitionUnder(**g, must_recompute)) == std::set<std::string>{"primals_1"});
  // On a device whose generator state cannot be replayed (xla) it is a contradiction...
  std::string on_xla = kDropout;
  for (size_t at; (at = on_xla.find("]cpu")) != std::string::npos;) on_xla.replace(at, 4, "]xla:0");
  auto x = ParseGraph(on_xla);
  INFO(x.status().ToString());
  REQUIRE(x.ok());
  MinCutOptions options;
  options.policy = ParsePolicy(must_recompute).value();
  auto p = MinCutPartition(**x, options);
  REQUIRE_FALSE(p.ok());
  CHECK_THAT(p.status().ToString(), Catch::Contains("value 'native_dropout', output of aten.native_dropout.default: MUST_RECOMPUTE"));
  CHECK_THAT(p.status().ToString(), Catch::Contains("it is a random op, and its device ('xla') has no generator state"));
  // ... and PREFER_RECOMPUTE saves it.
  CHECK(SavedNames(PartitionUnder(**x, "nothing_saveable")) == std::set<std::string>{"getitem_1"});
}

TEST_CASE("policies: Inductor's seed op is no value of the program: saved, never replayed") {
  // Note [Inductor's seeds are not the program's] (src/policy.cpp): a policy does
  // not class prims.inductor_seeds; the min cut saves it as the untagged random op
  // it is, and recomputes the deterministic inductor_random from the saved seed.
  constexpr const char* kSeeds = R"IR(# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]
# op prims.inductor_seeds.default 'prims::inductor_seeds(int count, Device device) -> Tensor' [nondeterministic_seeded]
# op prims.inductor_lookup_seed.default 'prims::inductor_lookup_seed(Tensor seeds, int index) -> Tensor' [pt2_compliant_tag]
# op prims.inductor_random.default 'prims::inductor_random(SymInt[] size, Tensor seed, str mode, *, ScalarType? align_dtype=None) -> Tensor' [pt2_compliant_tag]
# op aten.gt.Scalar 'aten::gt.Scalar(Tensor self, Scalar other) -> Tensor' [core, pointwise]
# op aten.mul.Tensor 'aten::mul.Tensor(Tensor self, Tensor other) -> Tensor' [core, pointwise]
# op aten.sin.default 'aten::sin(Tensor self) -> Tensor' [core, pointwise]
# input primals_1 role=primal path='args[0]' tag=is_forward
# input tangents_1 role=tangent tag=is_backward
def forward(self, primals_1: "f32[8][1]cpu rg", tangents_1: "f32[8][1]cpu"):
    seeds: "i64[2][1]cpu" = torch.ops.prims.inductor_seeds.default(2, device(type='cpu'))  # tag=is_forward
    seed: "i64[][]cpu" = torch.ops.prims.inductor_lookup_seed.default(seeds, 0)  # tag=is_forward
    rand: "f32[8][1]cpu" = torch.ops.prims.inductor_random.default([8], seed, 'rand')  # tag=is_forward
    keep: "b8[8][1]cpu" = torch.ops.aten.gt.Scalar(rand, 0.5)  # tag=is_forward
    dropped: "f32[8][1]cpu rg" = torch.ops.aten.mul.Tensor(primals_1, keep)  # tag=is_forward
    sin: "f32[8][1]cpu rg" = torch.ops.aten.sin.default(dropped)  # tag=is_forward
    mul: "f32[8][1]cpu" = torch.ops.aten.mul.Tensor(tangents_1, keep)  # tag=is_backward
    return (sin, mul)
)IR";
  auto g = ParseGraph(kSeeds);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  for (const char* policy : {"nothing_saveable", "dots_saveable"}) {
    INFO(policy);
    const Partition p = PartitionUnder(**g, policy);
    CHECK(SavedNames(p) == std::set<std::string>{"seeds"});
    for (const auto& n : p.forward->nodes()) CHECK(n->target() != "higher_order.run_and_save_rng_state");
  }
}

TEST_CASE("policies: a name survives CSE when it sat on the duplicate") {
  std::string text = kTwoLayers;
  // A second sin(mm), named, feeding W2's gradient; CSE keeps the first one.
  const std::string t_line = "    t: \"f32[1, 5][1, 1]cpu\" = torch.ops.aten.t.default(sin)  # tag=is_backward\n";
  const size_t at = text.find(t_line);
  REQUIRE(at != std::string::npos);
  text.replace(at, t_line.size(),
               "    sin_dup: \"f32[5, 1][1, 1]cpu\" = torch.ops.aten.sin.default(mm)  # tag=is_backward\n"
               "    t: \"f32[1, 5][1, 1]cpu\" = torch.ops.aten.t.default(sin_dup)  # tag=is_backward\n");
  auto g = ParseGraph(text);
  INFO(g.status().ToString());
  REQUIRE(g.ok());
  // Each name once, the kept copy's first, in the order given.
  (*g)->findNode("sin")->meta().names = {"b", "a"};
  (*g)->findNode("sin_dup")->meta().names = {"a", "c", "c"};
  MinCutOptions options;
  options.policy = ParsePolicy("save_only_these_names:a").value();
  auto p = MinCutPartition(**g, options);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  std::set<std::string> saved;
  for (const SavedValue& v : p->signature.saved) {
    saved.insert(v.name);
    if (v.name == "sin") CHECK(v.names == std::vector<std::string>{"b", "a", "c"});
  }
  CHECK(saved == With(kInputs, {"sin"}));
}

TEST_CASE("policies on the bundled 2-layer GPT-2: nothing_saveable keeps only inputs, dots keep the matmuls") {
  auto joint = LoadGraphFile(std::string(FXREMAT_SOURCE_DIR) + "/testdata/gpt2_2l.json.gz");
  REQUIRE(joint.ok());
  auto saved_ops = [&](const std::string& policy) {
    MinCutOptions options;
    options.policy = ParsePolicy(policy).value();
    auto p = MinCutPartition(**joint, options);
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    std::set<std::string> ops;
    for (const SavedValue& v : p->signature.saved) ops.insert(v.origin_op.empty() ? "input" : v.origin_op);
    return ops;
  };
  // Layer norm and softmax are multi-output or banned by the heuristics without
  // a policy; under one, they are recomputed like everything else.
  CHECK(saved_ops("nothing_saveable") == std::set<std::string>{"input"});
  CHECK(saved_ops("dots_with_no_batch_dims_saveable") ==
        std::set<std::string>{"input", "aten.addmm.default", "aten.mm.default"});
  CHECK(saved_ops("dots_saveable") ==
        std::set<std::string>{"input", "aten.addmm.default", "aten.mm.default", "aten.bmm.default"});
}

TEST_CASE("pipeline: the default partitioner honours offload requests and rejects impossible ones") {
  PartitionRequest request;
  request.partitioner = "default";
  std::unique_ptr<Graph> g = TwoLayers();
  g->findNode("sin")->meta().offload_requested = true;
  auto p = RunPartition(*g, request);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  int offloaded = 0;
  for (const SavedValue& v : p->signature.saved) {
    CHECK(v.offloaded == (v.name == "sin"));
    offloaded += v.offloaded;
  }
  CHECK(offloaded == 1);
  CHECK(p->signature.offloadedBytes() == 20);
  // The forward copies it to host; the backward reloads it.
  bool copies = false;
  for (const auto& up : p->forward->nodes()) copies = copies || up->target() == "prims.device_put.default";
  CHECK(copies);

  std::unique_ptr<Graph> h = TwoLayers();
  h->findNode("primals_1")->meta().offload_requested = true;
  auto q = RunPartition(*h, request);
  REQUIRE_FALSE(q.ok());
  CHECK_THAT(q.status().ToString(), Catch::Contains("it is an input of the graph"));

  request.mincut.policy = ParsePolicy("nothing_saveable").value();
  auto r = RunPartition(*TwoLayers(), request);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.status().ToString(), Catch::Contains("a policy needs the mincut partitioner"));
}

TEST_CASE("policies: mutated specs parse or fail cleanly, and what parses round-trips") {
  // A cheap in-tree fuzz: every prefix and single-character mutation of valid
  // specs, in both forms. Nothing may crash; every accepted spec must survive
  // PolicyToJson -> PolicyFromJson unchanged.
  const std::vector<std::string> seeds = {
      "save_and_offload_only_these_names:save=y,w;offload=z;src=device;dst=pinned_host",
      "checkpoint_policy:a=MUST_SAVE,b=PREFER_RECOMPUTE;op:aten.mm=MUST_SAVE;default=PREFER_RECOMPUTE",
      "save_from_both_policies:dots_saveable|save_only_these_names:a+offload_dot_with_no_batch_dims:device,pinned_host",
      R"([{"policy": "save_ops", "ops": ["aten.mm"]}, {"policy": "checkpoint_policy", "by_name": {"a": "MUST_SAVE"},
          "default": "PREFER_RECOMPUTE"}, {"policy": "save_from_both_policies", "policies": [{"policy": "dots_saveable"},
          {"policy": "save_only_these_names", "names": ["a"]}]}])",
  };
  const std::string alphabet = ":;,|+=[]{}\"' aX_";
  size_t accepted = 0, tried = 0;
  auto check = [&](const std::string& text) {
    ++tried;
    for (auto spec : {ParsePolicy(text), PolicyFromJson(text, "fuzz")}) {
      if (!spec.ok()) {
        CHECK(spec.status().code() == ErrorCode::kBadInput);
        continue;
      }
      ++accepted;
      auto again = PolicyFromJson(PolicyToJson(*spec), "round trip");
      INFO(text);
      REQUIRE(again.ok());
      CHECK(*again == *spec);
    }
  };
  for (const std::string& seed : seeds) {
    for (size_t n = 0; n <= seed.size(); ++n) check(seed.substr(0, n));
    for (size_t i = 0; i < seed.size(); ++i)
      for (char c : alphabet) {
        std::string m = seed;
        m[i] = c;
        check(m);
      }
  }
  CHECK(tried > 5000);
  CHECK(accepted > 100);
}
