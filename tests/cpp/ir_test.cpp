// IR edit functions keep use lists consistent; the verifier names what is wrong.
#include <catch2/catch.hpp>

#include "fxremat/ir.h"

using namespace fxremat;

namespace {
ValueFacts F32(std::vector<int64_t> shape) {
  ValueFacts v;
  v.kind = ValueFacts::Kind::kTensor;
  for (int64_t d : shape) v.tensor.shape.push_back(Dim::Static(d));
  return v;
}
}  // namespace

TEST_CASE("createNode keeps the output node last and records users") {
  Graph g;
  Node* a = g.createNode(OpKind::kPlaceholder, "a", "a");
  Node* out = g.createNode(OpKind::kOutput, "output", "output", {Argument::List({Argument::NodeRef(a)})});
  Node* b = g.createNode(OpKind::kCallFunction, "b", "aten.sin.default", {Argument::NodeRef(a)});
  REQUIRE(g.nodes().back().get() == out);
  REQUIRE(b->index() == 1);
  REQUIRE(out->index() == 2);
  REQUIRE(a->users() == std::vector<Node*>{out, b});
  REQUIRE(b->inputs() == std::vector<Node*>{a});
}

TEST_CASE("a node used twice is one user; setInputs and replaceAllUsesWith update use lists") {
  Graph g;
  Node* a = g.createNode(OpKind::kPlaceholder, "a", "a");
  Node* b = g.createNode(OpKind::kPlaceholder, "b", "b");
  Node* c = g.createNode(OpKind::kCallFunction, "c", "aten.mul.Tensor", {Argument::NodeRef(a), Argument::NodeRef(a)});
  REQUIRE(a->users().size() == 1);
  REQUIRE(c->inputs().size() == 1);
  g.setInputs(c, {Argument::NodeRef(b), Argument::List({Argument::NodeRef(a)})});
  REQUIRE(b->users() == std::vector<Node*>{c});
  REQUIRE(c->inputs() == std::vector<Node*>{b, a});
  g.replaceAllUsesWith(a, b);
  REQUIRE(a->users().empty());
  REQUIRE(c->inputs() == std::vector<Node*>{b});
  REQUIRE(c->args()[1].list[0].node == b);
  g.eraseNode(a);
  REQUIRE(g.findNode("a") == nullptr);
  REQUIRE(b->index() == 0);
  REQUIRE(c->index() == 1);
}

TEST_CASE("uniqueName follows FX's base, base_1, base_2 scheme") {
  Graph g;
  g.createNode(OpKind::kPlaceholder, "mm", "mm");
  g.createNode(OpKind::kPlaceholder, "mm_1", "mm_1");
  REQUIRE(g.uniqueName("mm") == "mm_2");
  REQUIRE(g.uniqueName("sin") == "sin");
}

TEST_CASE("VerifyGraph names the problem") {
  SECTION("missing output") {
    Graph g;
    g.createNode(OpKind::kPlaceholder, "a", "a")->val() = F32({2});
    REQUIRE(VerifyGraph(g).message().find("no output node") != std::string::npos);
  }
  SECTION("missing value facts") {
    Graph g;
    Node* a = g.createNode(OpKind::kPlaceholder, "a", "a");
    g.createNode(OpKind::kOutput, "output", "output", {Argument::List({Argument::NodeRef(a)})});
    Status st = VerifyGraph(g);
    REQUIRE(st.where() == "node 'a'");
    REQUIRE(st.message().find("missing value facts") != std::string::npos);
  }
  SECTION("joint facts: one gradient per primal") {
    Graph g;
    g.setKind(GraphKind::kJoint);
    Node* p = g.createNode(OpKind::kPlaceholder, "primals_1", "primals_1");
    p->val() = F32({2});
    p->setRole(PlaceholderRole::kPrimal);
    g.createNode(OpKind::kOutput, "output", "output", {Argument::List({Argument::NodeRef(p)})});
    g.joint().num_fwd_outputs = 1;
    Status st = VerifyGraph(g);
    REQUIRE(st.where() == "joint.num_fwd_outputs");
    REQUIRE(st.message().find("0 gradient outputs for 1 primals") != std::string::npos);
  }
}

TEST_CASE("byte counts use dtype sizes and symbolic hints") {
  ValueFacts v = F32({64, 32});
  REQUIRE(v.nbytes() == 64 * 32 * 4);
  v.tensor.dtype = DType::kBFloat16;
  v.tensor.shape[0] = Dim{8, "s0"};
  REQUIRE(v.nbytes() == 8 * 32 * 2);
  ValueFacts t;
  t.kind = ValueFacts::Kind::kTuple;
  t.items = {F32({2}), F32({3})};
  REQUIRE(t.nbytes() == 20);
  REQUIRE(DTypeFromShortName("bf16") == DType::kBFloat16);
  REQUIRE(DTypeName(DType::kInt64) == "int64");
}

TEST_CASE("CloneGraph copies nodes, facts and metadata") {
  Graph g;
  Node* a = g.createNode(OpKind::kPlaceholder, "a", "a");
  a->val() = F32({4});
  a->meta().recompute = Decision::kMustSave;
  Node* b = g.createNode(OpKind::kCallFunction, "b", "aten.sin.default", {Argument::NodeRef(a)});
  b->val() = F32({4});
  g.createNode(OpKind::kOutput, "output", "output", {Argument::List({Argument::NodeRef(b)})});
  auto copy = CloneGraph(g);
  REQUIRE(copy->size() == 3);
  Node* cb = copy->findNode("b");
  REQUIRE(cb->inputs()[0] == copy->findNode("a"));
  REQUIRE(copy->findNode("a")->meta().recompute == Decision::kMustSave);
  REQUIRE(VerifyGraph(*copy).ok());
}
