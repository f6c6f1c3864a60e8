// IR edit functions keep use lists consistent; the verifier names what is wrong.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "fxremat/ir.h"
#include "src/facts_check.h"

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
  REQUIRE(a->users() == NodeList{out, b});
  REQUIRE(b->inputs() == NodeList{a});
}

TEST_CASE("a node used twice is one user; setInputs and replaceAllUsesWith update use lists") {
  Graph g;
  Node* a = g.createNode(OpKind::kPlaceholder, "a", "a");
  Node* b = g.createNode(OpKind::kPlaceholder, "b", "b");
  Node* c = g.createNode(OpKind::kCallFunction, "c", "aten.mul.Tensor", {Argument::NodeRef(a), Argument::NodeRef(a)});
  REQUIRE(a->users().size() == 1);
  REQUIRE(c->inputs().size() == 1);
  g.setInputs(c, {Argument::NodeRef(b), Argument::List({Argument::NodeRef(a)})});
  REQUIRE(b->users() == NodeList{c});
  REQUIRE(c->inputs() == NodeList{b, a});
  g.replaceAllUsesWith(a, b);
  REQUIRE(a->users().empty());
  REQUIRE(c->inputs() == NodeList{b});
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

TEST_CASE("UniqueNames gives the names successive uniqueName calls give, each suffix probed once") {
  Graph g;
  g.createNode(OpKind::kPlaceholder, "barrier", "barrier");
  g.createNode(OpKind::kPlaceholder, "barrier_2", "barrier_2");
  UniqueNames names(g, "barrier");
  std::vector<std::string> got, want;
  for (int i = 0; i < 4; ++i) {
    want.push_back(g.uniqueName("barrier"));
    got.push_back(names.next());
    REQUIRE(got.back() == want.back());
    g.createNode(OpKind::kPlaceholder, got.back(), got.back());
  }
  CHECK(got == std::vector<std::string>{"barrier_1", "barrier_3", "barrier_4", "barrier_5"});
  UniqueNames fresh(g, "other");
  CHECK(fresh.next() == "other");
  CHECK(fresh.next() == "other_1");  // nothing created meanwhile: still a new name each call
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

TEST_CASE("InternedString: one copy per text, compared by text") {
  const InternedString a("aten.mm.default"), b(std::string("aten.mm.default")), c("aten.addmm.default");
  REQUIRE(&a.str() == &b.str());  // the same interned copy
  REQUIRE(a == b);
  REQUIRE_FALSE(a == c);
  REQUIRE(a == std::string("aten.mm.default"));
  REQUIRE(a == std::string_view("aten.mm.default"));
  REQUIRE(a == "aten.mm.default");
  const InternedString empty, also_empty("");
  REQUIRE(empty.empty());
  REQUIRE(also_empty.empty());
  REQUIRE(empty == also_empty);
  REQUIRE(empty.str().empty());
  REQUIRE_FALSE(empty == a);
  REQUIRE(CpuDeviceName() == "cpu");
  REQUIRE(TensorFacts().device == "cpu");
}

TEST_CASE("Note [Node arena]: nodes keep their addresses across chunks, erasures and reorders") {
  Graph g;
  constexpr int kNodes = 3 * 512 + 7;  // several chunks
  std::vector<Node*> created;
  Node* x = g.createNode(OpKind::kPlaceholder, "x", "x");
  created.push_back(x);
  for (int i = 1; i < kNodes; ++i)
    created.push_back(g.createNode(OpKind::kCallFunction, fmt::format("n{}", i), "aten.sin.default",
                                   {Argument::NodeRef(created.back())}));
  g.createNode(OpKind::kOutput, "output", "output", {Argument::List({Argument::NodeRef(created.back())})});
  for (int i = 0; i < kNodes; ++i) {
    REQUIRE(g.nodes()[static_cast<size_t>(i)].get() == created[static_cast<size_t>(i)]);
    REQUIRE(created[static_cast<size_t>(i)]->name() == (i == 0 ? "x" : fmt::format("n{}", i)));
  }
  REQUIRE(created[700]->inputs() == NodeList{created[699]});
  REQUIRE(g.findNode("n1000") == created[1000]);
  // A node created after others are erased gets a fresh slot; the survivors stay put.
  Node* side = g.createNode(OpKind::kCallFunction, "side", "aten.cos.default", {Argument::NodeRef(x)});
  g.eraseNode(side);
  Node* again = g.createNode(OpKind::kCallFunction, "again", "aten.cos.default", {Argument::NodeRef(x)});
  REQUIRE(again->name() == "again");
  REQUIRE(x->users() == NodeList{created[1], again});
  for (const auto& up : g.nodes())
    if (!up->isOutput()) up->val() = F32({4});
  const Status verified = VerifyGraph(g);
  INFO(verified.ToString());
  REQUIRE(verified.ok());
  std::unique_ptr<Graph> copy = CloneGraph(g);
  REQUIRE(copy->size() == g.size());
  REQUIRE(copy->findNode("n1000")->inputs()[0]->name() == "n999");
}

// Note [Node arena]: reserve(n) allocates the arena for the nodes to come, and
// unusedNodeMemory() hands out the chunks no node uses yet, in the order new
// nodes fill them (a second thread maps their pages ahead: Note [Populated pages]).
TEST_CASE("reserve allocates the node arena ahead; unusedNodeMemory is the part not yet used") {
  Graph g;
  CHECK(g.unusedNodeMemory().empty());
  g.reserve(1000);
  const auto reserved = g.unusedNodeMemory();
  size_t bytes = 0;
  for (const auto& [begin, size, mapped] : reserved) bytes += size;
  CHECK(bytes >= 1000 * sizeof(Node));
  CHECK(bytes < (1000 + 512) * sizeof(Node));  // whole chunks, no more than needed
  auto inside = [&](const Node* n) {
    const std::byte* p = reinterpret_cast<const std::byte*>(n);
    for (const auto& [begin, size, mapped] : reserved)
      if (p >= begin && p + sizeof(Node) <= begin + size) return true;
    return false;
  };
  std::vector<Node*> made;
  for (int i = 0; i < 1000; ++i) {
    Node* n = g.createNode(OpKind::kPlaceholder, fmt::format("p{}", i), fmt::format("p{}", i));
    n->val().kind = ValueFacts::Kind::kTensor;
    made.push_back(n);
  }
  for (const Node* n : made) CHECK(inside(n));
  CHECK(made[0] == reinterpret_cast<const Node*>(reserved[0].begin));  // the first node starts the first chunk
  CHECK(g.unusedNodeMemory().empty());
  // Room for more, counted from the nodes there are: the current chunk has 24
  // slots left (1000 of 2 x 512 used), so 600 more take two new chunks.
  g.reserve(g.size() + 600);
  const auto more = g.unusedNodeMemory();
  CHECK(more.size() == 2);
  Node* last = nullptr;
  for (int i = 0; i < 25; ++i) last = g.createNode(OpKind::kPlaceholder, fmt::format("q{}", i), fmt::format("q{}", i));
  CHECK(last == reinterpret_cast<const Node*>(more[0].begin));  // the 25th starts the first new chunk
  CHECK(g.unusedNodeMemory().size() == 1);
}

// Names and targets are ASCII identifiers, whatever the process's C locale.
TEST_CASE("IsPythonIdentifier and IsDottedName take ASCII identifiers only") {
  for (const char* ok : {"a", "_x", "A9", "primals_1", "__getitem__"}) CHECK(IsPythonIdentifier(ok));
  for (const char* bad : {"", "1a", "a-b", "a.b", "a b", "\xc3\xa9", "x\xff"}) CHECK_FALSE(IsPythonIdentifier(bad));
  CHECK(IsDottedName("aten.sin.default"));
  CHECK(IsDottedName("getattr_1"));
  for (const char* bad : {"", ".x", "x.", "aten..sin", "aten.1sin", "aten.s-in"}) CHECK_FALSE(IsDottedName(bad));
}

// Note [Recycled text pages]: adoptNodeMemory takes a string's buffer as arena
// chunks for the nodes to come -- as many whole chunks as it holds, no more
// than the nodes need -- before reserve() adds the rest; a buffer smaller than
// a chunk is left to its owner.
TEST_CASE("adoptNodeMemory places the first nodes in the adopted buffer and reserve the rest") {
  constexpr size_t kChunk = 512;  // Graph::kNodesPerChunk
  auto in = [](const Node* n, const std::byte* begin, size_t size) {
    const std::byte* p = reinterpret_cast<const std::byte*>(n);
    return p >= begin && p + sizeof(Node) <= begin + size;
  };
  {
    Graph g;
    std::string small(kChunk * sizeof(Node) - 1, 'x');
    g.adoptNodeMemory(std::move(small), 10);
    CHECK(small.size() == kChunk * sizeof(Node) - 1);  // not taken
    CHECK(g.unusedNodeMemory().empty());
  }
  Graph g;
  std::string text(2 * kChunk * sizeof(Node) + 100, 'x');  // two whole chunks and a bit
  const std::byte* const buffer = reinterpret_cast<const std::byte*>(text.data());
  const size_t buffer_size = text.capacity();
  g.adoptNodeMemory(std::move(text), 3 * kChunk);
  const auto adopted = g.unusedNodeMemory();
  REQUIRE(adopted.size() == 2);
  CHECK(adopted[0].begin == buffer);
  CHECK(adopted[1].begin == buffer + kChunk * sizeof(Node));
  g.reserve(3 * kChunk);  // one chunk more
  REQUIRE(g.unusedNodeMemory().size() == 3);
  std::vector<Node*> made;
  for (size_t i = 0; i < 3 * kChunk; ++i) {
    Node* n = g.createNode(OpKind::kPlaceholder, fmt::format("p{}", i), fmt::format("p{}", i));
    n->val() = ValueFacts();
    made.push_back(n);
  }
  for (size_t i = 0; i < 2 * kChunk; ++i) CHECK(in(made[i], buffer, buffer_size));
  for (size_t i = 2 * kChunk; i < 3 * kChunk; ++i) CHECK_FALSE(in(made[i], buffer, buffer_size));
  CHECK(made[0]->name() == "p0");
  CHECK(made[2 * kChunk - 1]->name() == fmt::format("p{}", 2 * kChunk - 1));
  // A graph needing fewer nodes than the buffer holds takes one chunk of it.
  Graph h;
  std::string more(3 * kChunk * sizeof(Node), 'y');
  h.adoptNodeMemory(std::move(more), 7);
  CHECK(h.unusedNodeMemory().size() == 1);
}

// Note [Recycled index pages]: a second buffer (kept alive by its owner) adds
// chunks after the first's, only as many as the nodes still need; one the
// nodes do not need is dropped at once.
TEST_CASE("adoptNodeMemory takes a second buffer after the first, for the nodes the first cannot hold") {
  constexpr size_t kChunk = 512;  // Graph::kNodesPerChunk
  constexpr size_t kChunkBytes = kChunk * sizeof(Node);
  Graph g;
  std::string text(kChunkBytes + 10, 'x');  // one chunk
  const std::byte* const first = reinterpret_cast<const std::byte*>(text.data());
  g.adoptNodeMemory(std::move(text), 4 * kChunk);
  REQUIRE(g.unusedNodeMemory().size() == 1);
  std::shared_ptr<std::byte[]> index(new std::byte[5 * kChunkBytes]);  // five chunks; three are needed
  std::weak_ptr<std::byte[]> index_alive = index;
  std::byte* const second = index.get();
  g.adoptNodeMemory(index, second, 5 * kChunkBytes, kChunkBytes, 4 * kChunk);
  index.reset();
  CHECK_FALSE(index_alive.expired());  // the graph keeps it
  const auto chunks = g.unusedNodeMemory();
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[0].begin == first);
  for (size_t c = 1; c < 4; ++c) CHECK(chunks[c].begin == second + (c - 1) * kChunkBytes);
  // Mapped: the text's chunk (its bytes were written) and the second buffer's
  // first chunk (kChunkBytes of it said to be); not the other two.
  CHECK(chunks[0].mapped_bytes == kChunkBytes);
  CHECK(chunks[1].mapped_bytes == kChunkBytes);
  CHECK(chunks[2].mapped_bytes == 0);
  CHECK(chunks[3].mapped_bytes == 0);
  g.reserve(4 * kChunk);  // nothing more to allocate
  CHECK(g.unusedNodeMemory().size() == 4);
  for (size_t i = 0; i < 4 * kChunk; ++i) g.createNode(OpKind::kPlaceholder, fmt::format("p{}", i), "t")->val() = ValueFacts();
  CHECK(reinterpret_cast<const std::byte*>(g.nodes().back().get()) >= second);
  // Enough chunks already: a further buffer is not used, and its owner lets go of it.
  std::shared_ptr<std::byte[]> spare(new std::byte[kChunkBytes]);
  std::weak_ptr<std::byte[]> spare_alive = spare;
  Graph h;
  h.adoptNodeMemory(std::string(2 * kChunkBytes, 'z'), 3);
  h.adoptNodeMemory(std::move(spare), spare_alive.lock().get(), kChunkBytes, kChunkBytes, 3);
  CHECK(spare_alive.expired());
  CHECK(h.unusedNodeMemory().size() == 1);
  // A buffer written part of the way into a chunk says how far: a text that
  // fills one chunk and a third of the next (its capacity is whole chunks).
  Graph t;
  std::string text2;
  text2.reserve(2 * kChunkBytes);
  text2.resize(kChunkBytes + kChunkBytes / 3, 't');
  t.adoptNodeMemory(std::move(text2), 2 * kChunk);
  const auto parts = t.unusedNodeMemory();
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].mapped_bytes == kChunkBytes);
  CHECK(parts[1].mapped_bytes == kChunkBytes / 3);
}

// Note [Populated pages]: a chunk's pages are mapped when nodes start using
// it, but only those of the nodes reserve() expects: a small graph (or a
// copy of one) does not map the whole 512-node chunk. mincore() tells which
// pages are resident; the chunk is fresh memory unless malloc reused some,
// in which case only the pages that became resident count.
TEST_CASE("a chunk maps the pages of the reserved nodes only") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto resident = [&](const std::byte* begin, size_t size) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
    const size_t pages = (reinterpret_cast<uintptr_t>(begin) + size - first + page - 1) / page;
    std::vector<unsigned char> in(pages);
    REQUIRE(mincore(reinterpret_cast<void*>(first), pages * page, in.data()) == 0);
    return in;
  };
  Graph g;
  g.reserve(10);
  const auto chunks = g.unusedNodeMemory();
  REQUIRE(chunks.size() == 1);
  const std::vector<unsigned char> before = resident(chunks[0].begin, chunks[0].size);
  for (int i = 0; i < 10; ++i) g.createNode(OpKind::kPlaceholder, fmt::format("p{}", i), "t");
  const std::vector<unsigned char> after = resident(chunks[0].begin, chunks[0].size);
  REQUIRE(before.size() == after.size());
  size_t newly = 0;
  for (size_t i = 0; i < after.size(); ++i) newly += (after[i] & 1) && !(before[i] & 1);
  // Ten nodes span at most this many pages (and their neighbours' partial pages).
  CHECK(newly <= (10 * sizeof(Node)) / page + 2);
}
