// The default partition on every testdata joint graph: the emitted graphs obey
// their signature, output is deterministic, and the checker catches a swapped index.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>

#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "passes/default_partition.h"
#include "passes/cse.h"
#include "passes/min_cut_partition.h"
#include "fxremat/pass.h"
#include "fxremat/phases.h"
#include "fxremat/pipeline.h"
#include "fxremat/text.h"

#include <fmt/format.h>

#include "joint_text.h"

#include <limits>

namespace fs = std::filesystem;
using namespace fxremat;

std::vector<std::string> TestdataFiles();

// testdata/'s graphs, then the random programs of testdata/random.
std::vector<std::string> TestdataAndRandomFiles() {
  std::vector<std::string> files = TestdataFiles();
  std::vector<std::string> random;
  for (const auto& e : fs::directory_iterator(fs::path(FXREMAT_SOURCE_DIR) / "testdata" / "random"))
    if (e.path().string().find(".json") != std::string::npos) random.push_back(e.path().string());
  std::sort(random.begin(), random.end());  // directory order is not deterministic
  files.insert(files.end(), random.begin(), random.end());
  return files;
}

TEST_CASE("default partition of every testdata graph satisfies its signature, deterministically") {
  for (const std::string& file : TestdataFiles()) {
    INFO(file);
    auto joint = LoadGraphFile(file);
    REQUIRE(joint.ok());
    auto p = DefaultPartition(**joint);
    INFO(p.status().ToString());
    REQUIRE(p.ok());
    CHECK(CheckSignature(*p->forward, *p->backward, p->signature).ok());
    CHECK(p->signature.forward_num_inputs == static_cast<int64_t>(p->forward->placeholders().size()));
    auto again = DefaultPartition(**joint);
    REQUIRE(again.ok());
    CHECK(GraphToJson(*again->forward) == GraphToJson(*p->forward));
    CHECK(GraphToJson(*again->backward) == GraphToJson(*p->backward));
    CHECK(SignatureToJson(again->signature) == SignatureToJson(p->signature));
    // The signature survives its JSON form.
    auto parsed = SignatureFromJson(SignatureToJson(p->signature), "sig");
    REQUIRE(parsed.ok());
    CHECK(CheckSignature(*p->forward, *p->backward, *parsed).ok());
    // Emitted graphs are themselves valid documents.
    CHECK(GraphFromJson(GraphToJson(*p->forward)).ok());
    CHECK(GraphFromJson(GraphToJson(*p->backward)).ok());
  }
}

TEST_CASE("the signature checker catches a deliberately swapped index") {
  auto joint = LoadGraphFile((fs::path(FXREMAT_SOURCE_DIR) / "testdata" / "sin_mm.json.gz").string());
  REQUIRE(joint.ok());
  auto p = DefaultPartition(**joint);
  REQUIRE(p.ok());
  REQUIRE(p->signature.saved.size() >= 2);
  SECTION("backward input indices of two saved tensors swapped") {
    Signature sig = p->signature;
    std::swap(sig.saved[0].backward_input_index, sig.saved[1].backward_input_index);
    Status st = CheckSignature(*p->forward, *p->backward, sig);
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(st.ToString().find("declared at backward input") != std::string::npos);
    CHECK(st.ToString().find(sig.saved[0].name) != std::string::npos);
  }
  SECTION("forward output index moved onto a user output") {
    Signature sig = p->signature;
    sig.saved[0].forward_output_index = 0;
    Status st = CheckSignature(*p->forward, *p->backward, sig);
    REQUIRE_FALSE(st.ok());
    INFO(st.ToString());
    CHECK(st.ToString().find("index 0 is claimed twice") != std::string::npos);
  }
  SECTION("tangent index swapped with a saved value") {
    Signature sig = p->signature;
    std::swap(sig.tangents[0].backward_input_index, sig.saved.back().backward_input_index);
    REQUIRE_FALSE(CheckSignature(*p->forward, *p->backward, sig).ok());
  }
}

// Note [Extracting both sides at once]: building the forward and the backward
// on two threads emits what building them in turn does, on the saved sets of
// both partitioners (the random programs included).
TEST_CASE("two-thread extraction emits the same partition as one thread") {
  const std::vector<std::string> files = TestdataAndRandomFiles();
  int compared = 0;
  for (const std::string& file : files) {
    INFO(file);
    auto joint = LoadGraphFile(file);
    REQUIRE(joint.ok());
    if ((*joint)->kind() != GraphKind::kJoint) continue;
    auto c = ClassifyJoint(**joint);
    if (!c.ok()) continue;
    std::vector<std::vector<Node*>> saved_sets;
    if (auto saved = ChooseDefaultSavedValues(**joint); saved.ok()) saved_sets.push_back(*saved);
    if (auto cut = SolveMinCut(**joint, *c, MinCutOptions{}); cut.ok()) saved_sets.push_back(cut->saved_values);
    for (const std::vector<Node*>& saved : saved_sets) {
      ExtractOptions one_thread, two_threads;
      one_thread.parallel_from_nodes = std::numeric_limits<size_t>::max();
      two_threads.parallel_from_nodes = 0;
      auto a = ExtractPartition(**joint, *c, saved, "mincut", one_thread);
      auto b = ExtractPartition(**joint, *c, saved, "mincut", two_threads);
      REQUIRE(a.ok() == b.ok());
      if (!a.ok()) {
        CHECK(a.status().ToString() == b.status().ToString());
        continue;
      }
      CHECK(GraphToJson(*a->forward) == GraphToJson(*b->forward));
      CHECK(GraphToJson(*a->backward) == GraphToJson(*b->backward));
      CHECK(SignatureToJson(a->signature) == SignatureToJson(b->signature));
      ++compared;
    }
  }
  CHECK(compared >= 40);
}

// The min cut's preparation finds CSE's merges on the joint graph and makes
// them on its copy (PassOptions::cse_duplicates): the same graph as the cse
// pass searching the copy itself, on every graph with something to merge.
TEST_CASE("cse with the merges found on the original equals cse searching the copy") {
  const std::vector<std::string> files = TestdataAndRandomFiles();
  int merged = 0;
  for (const std::string& file : files) {
    INFO(file);
    auto joint = LoadGraphFile(file);
    REQUIRE(joint.ok());
    const std::vector<DuplicateNode> duplicates = FindCommonSubexpressions(**joint);
    std::unique_ptr<Graph> searched = CloneGraph(**joint), given = CloneGraph(**joint);
    auto a = RunGraphPass("cse", *searched, PassOptions{});
    PassOptions with_duplicates;
    with_duplicates.cse_duplicates = &duplicates;
    auto b = RunGraphPass("cse", *given, with_duplicates);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(*a == *b);
    CHECK(*a == !duplicates.empty());
    CHECK(GraphToJson(*searched) == GraphToJson(*given));
    merged += *a;
  }
  CHECK(merged >= 1);
}

// The text form's header of a joint graph of one primal and one tangent, each
// f32[4]; the body follows.
static std::string OneInputJointHeader() {
  return "# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]\n"
         "# input primals_1 role=primal tag=is_forward\n"
         "# input tangents_1 role=tangent tag=is_backward\n"
         "def forward(self, primals_1: \"f32[4][1]cpu rg\", tangents_1: \"f32[4][1]cpu\"):\n";
}

// PrepareForCut (src/pipeline.cpp) searches a large graph for common
// subexpressions on a second thread while it makes its other checks: the
// merges are the ones the cse pass makes, here every b_i = sin(...) into a_i.
TEST_CASE("the min cut's preparation merges duplicates of a graph large enough for its search thread") {
  constexpr int kBlocks = 7000;  // 3 nodes each: over ExtractOptions::parallel_from_nodes
  REQUIRE(3 * kBlocks >= static_cast<int>(ExtractOptions{}.parallel_from_nodes));
  std::string text = OneInputJointHeader();
  std::string prev = "primals_1";
  for (int i = 0; i < kBlocks; ++i) {
    text += fmt::format("    a{0}: \"f32[4][1]cpu rg\" = torch.ops.aten.sin.default({1})  # tag=is_forward\n"
                        "    b{0}: \"f32[4][1]cpu rg\" = torch.ops.aten.sin.default({1})  # tag=is_forward\n"
                        "    c{0}: \"f32[4][1]cpu rg\" = torch.ops.aten.add.Tensor(a{0}, b{0})  # tag=is_forward\n",
                        i, prev);
    prev = fmt::format("c{}", i);
  }
  text += fmt::format("    mul: \"f32[4][1]cpu\" = torch.ops.aten.mul.Tensor(tangents_1, {})  # tag=is_backward\n", prev);
  text += fmt::format("    return ({}, mul)\n", prev);
  auto joint = ParseGraph(text);
  INFO(joint.status().ToString());
  REQUIRE(joint.ok());
  auto prepared = PrepareMinCutGraph(**joint, MinCutOptions{});
  INFO(prepared.status().ToString());
  REQUIRE(prepared.ok());
  CHECK((*prepared)->size() == (*joint)->size() - kBlocks);
  CHECK((*prepared)->findNode("b0") == nullptr);
  CHECK((*prepared)->findNode(fmt::format("b{}", kBlocks - 1)) == nullptr);
  const Node* last = (*prepared)->findNode(fmt::format("c{}", kBlocks - 1));
  REQUIRE(last != nullptr);
  REQUIRE(last->args().size() == 2);
  CHECK(last->args()[0].node == last->args()[1].node);
  CHECK(last->args()[0].node->name() == fmt::format("a{}", kBlocks - 1));
  // The same graph as the cse pass searching a copy itself.
  std::unique_ptr<Graph> searched = CloneGraph(**joint);
  REQUIRE(RunGraphPass("cse", *searched, PassOptions{}).ok());
  CHECK(GraphToJson(**prepared) == GraphToJson(*searched));
}

// Note [Classified while searching] (src/pipeline.cpp): with nothing for the
// preparation to change, the joint graph is classified while the CSE search
// runs, once, before the cut; the partition is the one the cut makes when it
// classifies the graph itself.
TEST_CASE("a large joint graph classified while its CSE search runs gives the same partition") {
  constexpr int kBlocks = 7000;  // 3 nodes each (two forward, one backward), no two alike
  REQUIRE(3 * kBlocks >= static_cast<int>(ExtractOptions{}.parallel_from_nodes));
  std::string text = OneInputJointHeader();
  std::string prev = "primals_1", grad = "tangents_1";
  for (int i = 0; i < kBlocks; ++i) {
    text += fmt::format("    a{0}: \"f32[4][1]cpu rg\" = torch.ops.aten.sin.default({1})  # tag=is_forward\n"
                        "    c{0}: \"f32[4][1]cpu rg\" = torch.ops.aten.mul.Tensor(a{0}, {1})  # tag=is_forward\n",
                        i, prev);
    prev = fmt::format("c{}", i);
  }
  for (int i = kBlocks; i-- > 0;) {
    text += fmt::format("    g{0}: \"f32[4][1]cpu\" = torch.ops.aten.mul.Tensor({1}, a{0})  # tag=is_backward\n", i, grad);
    grad = fmt::format("g{}", i);
  }
  text += fmt::format("    return ({}, {})\n", prev, grad);
  auto joint = ParseGraph(text);
  INFO(joint.status().ToString());
  REQUIRE(joint.ok());
  REQUIRE((*joint)->size() >= ExtractOptions{}.parallel_from_nodes);
  PhaseLog log;
  Expected<Partition> staged = Status::Internal("not run");
  {
    ScopedPhaseLog install(&log);
    staged = RunMinCutStages(**joint, MinCutOptions{});
  }
  INFO(staged.status().ToString());
  REQUIRE(staged.ok());
  auto index_of = [&](std::string_view name) {
    for (size_t i = 0; i < log.entries().size(); ++i)
      if (log.entries()[i].name == name) return std::make_pair(i, log.entries()[i].count);
    return std::make_pair(log.entries().size(), int64_t{0});
  };
  CHECK(index_of("classify").first < index_of("cut").first);  // classified before the cut began
  CHECK(index_of("classify").second == 1);                    // and not again by it
  auto classified_by_cut = CutPreparedGraph(**joint, MinCutOptions{});
  REQUIRE(classified_by_cut.ok());
  CHECK(GraphToJson(*staged->forward) == GraphToJson(*classified_by_cut->forward));
  CHECK(GraphToJson(*staged->backward) == GraphToJson(*classified_by_cut->backward));
  CHECK(SignatureToJson(staged->signature) == SignatureToJson(classified_by_cut->signature));
  CHECK(!staged->signature.saved.empty());
}

namespace {

// The partition that saves the named values, extracted with
// ExtractOptions::save_shared_storages_once = dedup; checked.
Partition ExtractSaved(const Graph& g, const std::vector<std::string>& names, bool dedup) {
  std::vector<Node*> saved;
  for (const std::string& n : names) saved.push_back(g.findNode(n));
  ExtractOptions options;
  options.save_shared_storages_once = dedup;
  Expected<JointClassification> c = ClassifyJoint(g);
  REQUIRE(c.ok());
  Expected<Partition> p = ExtractPartition(g, *c, saved, "mincut", options);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  REQUIRE(CheckSignature(*p->forward, *p->backward, p->signature).ok());
  return std::move(*p);
}

std::vector<std::string> SortedSavedNames(const Partition& p) {
  std::vector<std::string> out;
  for (const SavedValue& s : p.signature.saved) out.push_back(s.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// Note [Saved values never alias each other] (src/extract_partition.cpp): with
// save_shared_storages_once (the budget solver's extractions), two saved values
// on one storage (a value and its view) are saved as the value that allocated
// it, and the backward recomputes the view; a lone view is saved as asked, and
// so is a view of an input.
TEST_CASE("extraction saves a storage two saved values share once, as its root") {
  const std::string text =
      std::string(testing::kOneInputJointHeader) + testing::kCommonOpSchemas +
      "def forward(self, primals_1: \"f32[4][1]cpu rg\", tangents_1: \"f32[4][1]cpu\"):\n"
      "    a: \"f32[4][1]cpu rg\" = torch.ops.aten.sin.default(primals_1)  # tag=is_forward\n"
      "    v: \"f32[2, 2][2, 1]cpu rg\" = torch.ops.aten.view.default(a, [2, 2])  # tag=is_forward\n"
      "    w: \"f32[2, 2][1, 2]cpu rg\" = torch.ops.aten.permute.default(v, [1, 0])  # tag=is_forward\n"
      "    pv: \"f32[2, 2][2, 1]cpu rg\" = torch.ops.aten.view.default(primals_1, [2, 2])  # tag=is_forward\n"
      "    o: \"f32[4][1]cpu rg\" = torch.ops.aten.cos.default(a)  # tag=is_forward\n"
      "    m1: \"f32[4][1]cpu\" = torch.ops.aten.mul.Tensor(tangents_1, a)  # tag=is_backward\n"
      "    m2: \"f32[2, 2][2, 1]cpu\" = torch.ops.aten.mul.Tensor(v, w)  # tag=is_backward\n"
      "    m3: \"f32[2, 2][2, 1]cpu\" = torch.ops.aten.mul.Tensor(m2, pv)  # tag=is_backward\n"
      "    m4: \"f32[4][1]cpu\" = torch.ops.aten.view.default(m3, [4])  # tag=is_backward\n"
      "    g: \"f32[4][1]cpu\" = torch.ops.aten.add.Tensor(m1, m4)  # tag=is_backward\n"
      "    return (o, g)\n";
  auto joint = ParseGraph(text);
  INFO(joint.status().ToString());
  REQUIRE(joint.ok());
  const Graph& g = **joint;
  auto saved_names = [&](std::vector<std::string> names, bool dedup = true) {
    return SortedSavedNames(ExtractSaved(g, names, dedup));
  };
  // a, its view v and v's permutation w share one storage: a alone is saved.
  CHECK(saved_names({"primals_1", "a", "v", "w"}) == std::vector<std::string>{"a", "primals_1"});
  CHECK(saved_names({"primals_1", "v", "w"}) == std::vector<std::string>{"a", "primals_1"});
  // One saved value on a storage: as asked.
  CHECK(saved_names({"primals_1", "a", "w"}) == std::vector<std::string>{"a", "primals_1"});
  CHECK(saved_names({"primals_1", "w"}) == std::vector<std::string>{"primals_1", "w"});
  // A view of an input shares the input's storage, which AOTAutograd never donates.
  CHECK(saved_names({"primals_1", "pv", "w"}) == std::vector<std::string>{"primals_1", "pv", "w"});
  // Without the option (the min cut, the default partition): as asked, as PyTorch's.
  CHECK(saved_names({"primals_1", "a", "v", "w"}, false) == std::vector<std::string>{"a", "primals_1", "v", "w"});
}

// The same rule with a dynamic shape: the views of the root read a size that
// comes from a tensor nothing saves (a padded input's sym_size, as a chunked
// attention over a padded sequence has it). Saved as the root, the size goes
// with it as a symint; before, the backward needed the unsaved tensor and
// extraction failed ("cannot be computed from its inputs").
TEST_CASE("a storage saved once as its root takes the symbolic sizes of its views along") {
  const std::string text =
      "# fxremat.graph v1 kind=joint num_fwd_outputs=1 tangent_outputs=[0]\n"
      "# symbol s0=6\n"
      "# input primals_1 role=primal tag=is_forward\n"
      "# input tangents_1 role=tangent tag=is_backward\n" +
      std::string(testing::kCommonOpSchemas) +
      "def forward(self, primals_1: \"f32[s0][1]cpu rg\", tangents_1: \"f32[s0][1]cpu\"):\n"
      "    p: \"f32[s0][1]cpu rg\" = torch.ops.aten.cos.default(primals_1)  # tag=is_forward\n"
      "    n: \"Sym(s0)\" = torch.ops.aten.sym_size.int(p, 0)  # tag=is_forward\n"
      "    a: \"f32[s0][1]cpu rg\" = torch.ops.aten.sin.default(primals_1)  # tag=is_forward\n"
      "    v: \"f32[s0][1]cpu rg\" = torch.ops.aten.view.default(a, [n])  # tag=is_forward\n"
      "    w: \"f32[s0][1]cpu rg\" = torch.ops.aten.view.default(v, [n])  # tag=is_forward\n"
      "    o: \"f32[s0][1]cpu rg\" = torch.ops.aten.mul.Tensor(w, p)  # tag=is_forward\n"
      "    m1: \"f32[s0][1]cpu\" = torch.ops.aten.mul.Tensor(tangents_1, v)  # tag=is_backward\n"
      "    m2: \"f32[s0][1]cpu\" = torch.ops.aten.mul.Tensor(m1, w)  # tag=is_backward\n"
      "    return (o, m2)\n";
  auto joint = ParseGraph(text);
  INFO(joint.status().ToString());
  REQUIRE(joint.ok());
  Partition p = ExtractSaved(**joint, {"v", "w"}, /*dedup=*/true);
  CHECK(SortedSavedNames(p) == std::vector<std::string>{"a", "n"});
  // The backward recomputes v and w from a, with the saved size.
  CHECK(p.backward->findNode("p") == nullptr);
  CHECK(p.backward->findNode("v") != nullptr);
}

// A saved set the backward cannot run from is refused with the value that
// nothing provides named, not only the output that needs it.
TEST_CASE("an extraction error names the value nothing provides") {
  const std::string text =
      std::string(testing::kOneInputJointHeader) + testing::kCommonOpSchemas +
      "def forward(self, primals_1: \"f32[4][1]cpu rg\", tangents_1: \"f32[4][1]cpu\"):\n"
      "    a: \"f32[4][1]cpu rg\" = torch.ops.aten.sin.default(primals_1)  # tag=is_forward\n"
      "    b: \"f32[4][1]cpu rg\" = torch.ops.aten.cos.default(a)  # tag=is_forward\n"
      "    g: \"f32[4][1]cpu\" = torch.ops.aten.mul.Tensor(tangents_1, b)  # tag=is_backward\n"
      "    return (b, g)\n";
  auto joint = ParseGraph(text);
  REQUIRE(joint.ok());
  Expected<JointClassification> c = ClassifyJoint(**joint);
  REQUIRE(c.ok());
  Expected<Partition> p = ExtractPartition(**joint, *c, {}, "mincut", ExtractOptions{});
  REQUIRE(!p.ok());
  CHECK(p.status().ToString().find("'g' is an output of the backward graph but cannot be computed from its inputs "
                                   "('primals_1' is neither an input of the backward graph nor computable there)") !=
        std::string::npos);
}
