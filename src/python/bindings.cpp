// fxremat._C: the pybind11 extension. It links fxremat::core only (no libtorch),
// takes graphs as JSON or IR text, and raises ValueError with the library's
// message on any error (the Python edge of the single error channel).
#include <pybind11/pybind11.h>

#include <string>
#include <tuple>

#include "fxremat/inspect.h"
#include "fxremat/partition.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/default_partition.h"

namespace py = pybind11;
using namespace fxremat;

namespace {

template <typename T>
T Unwrap(Expected<T> e) {
  if (!e.ok()) throw py::value_error(e.status().ToString());
  return std::move(e).value();
}

std::unique_ptr<Graph> Parse(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  bool is_text = first != std::string::npos && (text[first] == '#' || text[first] == 'd');
  return Unwrap(is_text ? ParseGraph(text) : GraphFromJson(text));
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "fxremat C++ core (IR, I/O, partitioners)";
  m.attr("__version__") = FXREMAT_VERSION;
  m.def("to_text", [](const std::string& graph) { return PrintGraph(*Parse(graph)); },
        py::arg("graph"), "IR text form of a graph given as JSON or text.");
  m.def("to_json", [](const std::string& graph) { return GraphToJson(*Parse(graph)); },
        py::arg("graph"), "JSON form of a graph given as JSON or text.");
  m.def("inspect", [](const std::string& graph) { return Unwrap(InspectGraph(*Parse(graph))); },
        py::arg("graph"));
  m.def(
      "partition",
      [](const std::string& graph, const std::string& partitioner) {
        std::unique_ptr<Graph> joint = Parse(graph);
        if (partitioner != "default") throw py::value_error("unknown partitioner '" + partitioner + "' (available: default)");
        Partition p = Unwrap(DefaultPartition(*joint));
        return std::make_tuple(GraphToJson(*p.forward), GraphToJson(*p.backward), SignatureToJson(p.signature));
      },
      py::arg("graph"), py::arg("partitioner") = "default",
      "Partition a joint graph; returns (forward_json, backward_json, signature_json).");
  m.def(
      "check_signature",
      [](const std::string& forward, const std::string& backward, const std::string& signature) {
        Signature sig = Unwrap(SignatureFromJson(signature, "signature"));
        Status st = CheckSignature(*Parse(forward), *Parse(backward), sig);
        if (!st.ok()) throw py::value_error(st.ToString());
      },
      py::arg("forward"), py::arg("backward"), py::arg("signature"));
}
