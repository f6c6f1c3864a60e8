// The schema parser reads what str(op._schema) prints, alias annotations included.
#include <catch2/catch.hpp>

#include "fxremat/op_schema.h"

using namespace fxremat;

TEST_CASE("parses arguments, keyword-only marker and defaults") {
  auto s = ParseOpSchema("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  REQUIRE(s.ok());
  REQUIRE(s->name == "aten::add");
  REQUIRE(s->overload == "Tensor");
  REQUIRE(s->arguments.size() == 3);
  REQUIRE(s->arguments[2].name == "alpha");
  REQUIRE(s->arguments[2].kwarg_only);
  REQUIRE(s->arguments[2].default_value == "1");
  REQUIRE(s->returns.size() == 1);
  REQUIRE_FALSE(s->isMutable());
  REQUIRE_FALSE(s->returnsAlias());
}

TEST_CASE("alias annotations: views and mutation") {
  auto view = ParseOpSchema("aten::t(Tensor(a) self) -> Tensor(a)");
  REQUIRE(view.ok());
  REQUIRE(view->overload == "default");
  REQUIRE(view->arguments[0].alias_set == "a");
  REQUIRE(view->returnsAlias());
  auto inplace = ParseOpSchema("aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)");
  REQUIRE(inplace.ok());
  REQUIRE(inplace->isMutable());
  REQUIRE_FALSE(inplace->returnsAlias());
  auto split = ParseOpSchema("aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]");
  REQUIRE(split.ok());
  REQUIRE(split->arguments[0].alias_set == "a");
  REQUIRE(split->returns[0].type == "Tensor[]");
}

TEST_CASE("tuple returns, list defaults, string defaults, optional types") {
  auto s = ParseOpSchema(
      "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
      "-> (Tensor, Tensor, Tensor)");
  REQUIRE(s.ok());
  REQUIRE(s->returns.size() == 3);
  REQUIRE(s->arguments[1].type == "SymInt[]");
  REQUIRE(s->arguments[2].type == "Tensor?");
  auto g = ParseOpSchema("aten::gelu(Tensor self, *, str approximate='none') -> Tensor");
  REQUIRE(g.ok());
  REQUIRE(g->arguments[1].default_value == "'none'");
  auto c = ParseOpSchema("aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
                         "SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor");
  REQUIRE(c.ok());
  REQUIRE(c->argumentIndex("groups") == 8);
  auto d = ParseOpSchema("aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0) -> Tensor");
  REQUIRE(d.ok());
  REQUIRE(d->arguments[2].default_value == "[]");
}

TEST_CASE("malformed schemas are errors") {
  REQUIRE_FALSE(ParseOpSchema("aten::mm(Tensor self").ok());
  REQUIRE_FALSE(ParseOpSchema("mm(Tensor self) -> Tensor").ok());
  auto info = MakeOpInfo("aten.bad.default", "aten::bad(Tensor) -> Tensor", {});
  REQUIRE_FALSE(info.ok());
  REQUIRE(info.status().ToString().find("aten.bad.default") != std::string::npos);
}
