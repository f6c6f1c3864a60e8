// fxremat._C: the pybind11 extension. It links fxremat::core only (no libtorch),
// takes graphs as JSON or IR text, and raises ValueError with the library's
// message on any error (the Python edge of the single error channel).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <map>
#include <optional>

#include <string>
#include <tuple>

#include "fxremat/input_ranges.h"
#include "fxremat/inspect.h"
#include "fxremat/partition.h"
#include "fxremat/pipeline.h"
#include "fxremat/policy.h"
#include "fxremat/residuals.h"
#include "fxremat/serialize.h"
#include "fxremat/text.h"
#include "passes/budget_partition.h"
#include "passes/min_cut_partition.h"
#include "src/json_internal.h"

namespace py = pybind11;
using namespace fxremat;

namespace {

template <typename T>
T Unwrap(Expected<T> e) {
  if (!e.ok()) throw py::value_error(e.status().ToString());
  return std::move(e).value();
}

// Note [Refused joint documents]
// The reader refusing the joint graph's document -- not the options, not the
// partition -- raises fxremat._C.DocumentError, a ValueError: partition_fn's
// document comes from fxremat's own encoder, so a refusal means the graph
// holds something the format cannot carry yet (as "unknown dtype 'qint8'" did
// before every dtype was in the table), and Python turns it into
// UnsupportedGraphError, which fallback=True hands to PyTorch's partitioner.
struct DocumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T UnwrapDocument(Expected<T> e) {
  if (!e.ok()) throw DocumentError(e.status().ToString());
  return std::move(e).value();
}

// Python objects (what fxremat.to_json builds) -> nlohmann values, without
// text. Errors are DocumentError (a ValueError, Note [Refused joint
// documents]) naming the document path: a value
// nested deeper than kMaxJsonDepth, an int outside int64, a key that is not a
// string, an object of another type.
nlohmann::json FromPython(const py::handle& o, const std::string& path = "$", int depth = 0) {
  if (depth > kMaxJsonDepth)
    throw DocumentError(fmt::format("fxremat: {}: the document nests deeper than {} levels", path, kMaxJsonDepth));
  if (o.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(o)) return o.cast<bool>();
  if (py::isinstance<py::int_>(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
    if (overflow != 0)
      throw DocumentError(fmt::format("fxremat: {}: the integer {} is outside int64", path,
                                        std::string(py::str(o)).substr(0, 40)));
    return static_cast<int64_t>(v);
  }
  if (py::isinstance<py::float_>(o)) return o.cast<double>();
  if (py::isinstance<py::str>(o)) {
    Py_ssize_t size = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(o.ptr(), &size);
    if (!utf8) {
      PyErr_Clear();
      throw DocumentError(fmt::format("fxremat: {}: a string that is not valid Unicode (lone surrogates)", path));
    }
    return std::string(utf8, static_cast<size_t>(size));
  }
  if (py::isinstance<py::dict>(o)) {
    nlohmann::json j = nlohmann::json::object();
    for (auto item : o.cast<py::dict>()) {
      if (!py::isinstance<py::str>(item.first))
        throw DocumentError(fmt::format("fxremat: {}: a key that is not a string", path));
      std::string key = FromPython(item.first, path, depth + 1).get<std::string>();
      j[key] = FromPython(item.second, path + "." + key, depth + 1);
    }
    return j;
  }
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) {
    nlohmann::json j = nlohmann::json::array();
    size_t k = 0;
    for (auto item : o) j.push_back(FromPython(item, fmt::format("{}[{}]", path, k++), depth + 1));
    return j;
  }
  throw py::type_error("fxremat: " + path + ": a graph document holds only dict, list, str, int, float, bool and None, not " +
                       std::string(py::str(py::type::of(o))));
}

// A C++ string as Python text: invalid UTF-8 (a name read from a file) is shown
// with backslash escapes instead of raising UnicodeDecodeError.
py::str Text(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "backslashreplace");
  if (!o) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(o);
}

py::object ToPython(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return py::none();
    case nlohmann::ordered_json::value_t::boolean: return py::bool_(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return py::int_(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: return py::float_(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return py::str(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::array: {
      py::list list(j.size());
      for (size_t i = 0; i < j.size(); ++i) list[i] = ToPython(j[i]);
      return std::move(list);
    }
    case nlohmann::ordered_json::value_t::object: {
      py::dict dict;
      for (const auto& [k, v] : j.items()) dict[py::str(k)] = ToPython(v);
      return std::move(dict);
    }
    default: return py::none();
  }
}

// Min-cut options by their functorch config names; raises ValueError.
MinCutOptions MinCutOptionsFrom(const std::map<std::string, std::string>& options) {
  MinCutOptions mincut;
  for (const auto& [name, value] : options) {
    Status st = SetMinCutOption(mincut, name, value);
    if (!st.ok()) throw py::value_error(st.ToString());
  }
  return mincut;
}

// The pipeline request of a Python call (checked while the GIL is held: it
// raises). `policy` is the policy's JSON text (fxremat.policies), or None.
PartitionRequest MakeRequest(const std::string& partitioner, const std::map<std::string, std::string>& options,
                             const std::optional<std::string>& policy, const std::string& offload_target,
                             bool barrier, bool keep_annotations) {
  PartitionRequest request;
  request.partitioner = partitioner;
  request.mincut = MinCutOptionsFrom(options);
  if (partitioner == "default" && !options.empty())
    throw py::value_error("options apply to the mincut partitioner only");
  if (policy) request.mincut.policy = Unwrap(PolicyFromJson(*policy, "policy"));
  request.offload_target = Unwrap(OffloadTargetFromName(offload_target));
  request.barrier = barrier;
  request.keep_annotations = keep_annotations;
  return request;
}

// RunPartition without the GIL; its error becomes a ValueError once it is back.
Partition RunWithoutGil(const Graph& joint, const PartitionRequest& request) {
  Expected<Partition> p = Status::Internal("not run");
  {
    py::gil_scoped_release release;
    p = RunPartition(joint, request);
  }
  return Unwrap(std::move(p));
}

// `sidecar_dir`: where the document's constants sidecar lies (the directory of
// the file a Python caller read it from); "" for a document from no file.
std::unique_ptr<Graph> Parse(const std::string& text, const std::string& sidecar_dir = "") {
  size_t first = text.find_first_not_of(" \t\r\n");
  bool is_text = first != std::string::npos && (text[first] == '#' || text[first] == 'd');
  return UnwrapDocument(is_text ? ParseGraph(text) : GraphFromJson(text, sidecar_dir));
}

}  // namespace

// Whether two arguments are the same, node references compared by name (an
// emitted graph's nodes are copies of the joint graph's, in another graph).
static bool SameArgument(const Argument& a, const Argument& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Argument::Kind::kNode: return a.node->name() == b.node->name();
    case Argument::Kind::kList:
    case Argument::Kind::kDict:
      if (a.list.size() != b.list.size()) return false;
      for (size_t i = 0; i < a.list.size(); ++i)
        if (!SameArgument(a.list[i], b.list[i])) return false;
      return true;
    case Argument::Kind::kDouble:
    case Argument::Kind::kComplex:
      return (a.double_value == b.double_value || (a.double_value != a.double_value && b.double_value != b.double_value)) &&
             (a.imag_value == b.imag_value || (a.imag_value != a.imag_value && b.imag_value != b.imag_value));
    default: return a.int_value == b.int_value && a.text == b.text;
  }
}

// A node partition_fn can copy from the joint graph it holds: an input (it
// needs the name only), or a node of the joint graph with the same target and
// arguments (not one a pass made or rewrote).
static bool CopiedFromJoint(const Node& n, const Graph& joint) {
  if (n.isPlaceholder()) return true;
  if (n.isOutput()) return false;
  const Node* j = joint.findNode(n.name());
  if (!j || j->op() != n.op() || j->target() != n.target() || j->args().size() != n.args().size() ||
      j->kwargs().size() != n.kwargs().size())
    return false;
  for (size_t i = 0; i < n.args().size(); ++i)
    if (!SameArgument(n.args()[i], j->args()[i])) return false;
  for (size_t i = 0; i < n.kwargs().size(); ++i)
    if (n.kwargs()[i].first != j->kwargs()[i].first || !SameArgument(n.kwargs()[i].second, j->kwargs()[i].second))
      return false;
  return true;
}

PYBIND11_MODULE(_C, m) {
  m.doc() = "fxremat C++ core (IR, I/O, partitioners)";
  py::register_exception<DocumentError>(m, "DocumentError", PyExc_ValueError);
  m.attr("__version__") = FXREMAT_VERSION;
  m.def("to_text", [](const std::string& graph) { return Text(PrintGraph(*Parse(graph))); },
        py::arg("graph"), "IR text form of a graph given as JSON or text.");
  m.def("to_json", [](const std::string& graph) { return GraphToJson(*Parse(graph)); },
        py::arg("graph"), "JSON form of a graph given as JSON or text.");
  m.def("inspect", [](const std::string& graph) { return Text(Unwrap(InspectGraph(*Parse(graph)))); },
        py::arg("graph"));
  m.def(
      "partition",
      [](const std::string& graph, const std::string& partitioner, const std::map<std::string, std::string>& options,
         const std::optional<std::string>& policy, const std::string& offload_target, bool barrier,
         bool keep_annotations, bool brief, const std::string& sidecar_dir) {
        PartitionRequest request = MakeRequest(partitioner, options, policy, offload_target, barrier, keep_annotations);
        std::unique_ptr<Graph> joint = Parse(graph, sidecar_dir);
        Partition p = RunWithoutGil(*joint, request);
        if (!brief) return std::make_tuple(GraphToJson(*p.forward), GraphToJson(*p.backward), SignatureToJson(p.signature));
        auto copied = [&](const Node& n) { return CopiedFromJoint(n, *joint); };
        return std::make_tuple(GraphToJsonBrief(*p.forward, copied), GraphToJsonBrief(*p.backward, copied),
                               SignatureToJson(p.signature));
      },
      py::arg("graph"), py::arg("partitioner") = "mincut", py::arg("options") = std::map<std::string, std::string>{},
      py::arg("policy") = py::none(), py::arg("offload_target") = "torch", py::arg("barrier") = false,
      py::arg("keep_annotations") = false, py::arg("brief") = false, py::arg("sidecar_dir") = "",
      "Partition a joint graph through the pipeline (include/fxremat/pipeline.h); `policy` is the policy's JSON "
      "text. Returns (forward_json, backward_json, signature_json). `brief`: every node that is a copy of a "
      "joint-graph node (same target and arguments) or an input is written as its name, op, target and recompute "
      "decision only: what partition_fn, which holds the joint graph, needs (GraphToJsonBrief). `sidecar_dir`: "
      "where a constants sidecar the document names lies (the emitted graphs hold such constants inline).");
  m.def(
      "partition_document",
      [](const py::dict& document, const std::string& partitioner, const std::map<std::string, std::string>& options,
         const std::optional<std::string>& policy, const std::string& offload_target, bool barrier,
         bool keep_annotations, const std::string& sidecar_dir) {
        PartitionRequest request = MakeRequest(partitioner, options, policy, offload_target, barrier, keep_annotations);
        // Python dicts in, Python dicts out: no JSON text on this path.
        nlohmann::json doc = FromPython(document);
        Expected<std::unique_ptr<Graph>> joint = Status::Internal("not read");
        {
          py::gil_scoped_release release;
          joint = GraphFromJsonDocument(doc, sidecar_dir);
        }
        std::unique_ptr<Graph> graph = UnwrapDocument(std::move(joint));
        Partition p = RunWithoutGil(*graph, request);
        return py::make_tuple(ToPython(GraphToJsonDocument(*p.forward)), ToPython(GraphToJsonDocument(*p.backward)),
                              ToPython(SignatureToJsonDocument(p.signature)));
      },
      py::arg("document"), py::arg("partitioner") = "mincut", py::arg("options") = std::map<std::string, std::string>{},
      py::arg("policy") = py::none(), py::arg("offload_target") = "torch", py::arg("barrier") = false,
      py::arg("keep_annotations") = false, py::arg("sidecar_dir") = "",
      "Partition a joint graph given as the fxremat document dict (fxremat.to_json) through the pipeline; returns "
      "(forward_doc, backward_doc, signature) as dicts.");
  m.def(
      "peak_front",
      [](const py::object& document, const std::map<std::string, std::string>& options,
         const std::optional<std::string>& policy, int points, const std::string& sidecar_dir) {
        PartitionRequest request = MakeRequest("mincut", options, policy, "torch", false, false);
        // JSON text takes the fast reader (as `partition`); a dict is walked through nlohmann's DOM.
        std::unique_ptr<Graph> graph =
            py::isinstance<py::str>(document)
                ? Parse(document.cast<std::string>(), sidecar_dir)
                : UnwrapDocument(GraphFromJsonDocument(FromPython(document.cast<py::dict>()), sidecar_dir));
        Expected<std::vector<FrontPoint>> front = Status::Internal("not run");
        {
          py::gil_scoped_release release;
          front = RunPeakFront(*graph, request, points);
        }
        py::list out;
        for (const FrontPoint& p : Unwrap(std::move(front))) {
          py::dict d;
          d["label"] = p.label;
          d["peak_bytes"] = p.peak_bytes;
          d["recompute_cost"] = p.recompute_cost;
          d["saved_bytes"] = p.saved_bytes;
          out.append(d);
        }
        return out;
      },
      py::arg("document"), py::arg("options") = std::map<std::string, std::string>{}, py::arg("policy") = py::none(),
      py::arg("points") = 20, py::arg("sidecar_dir") = "",
      "The peak / recompute-cost front of a joint graph document (Note [Peak budget]): a list of dicts with "
      "label, peak_bytes, recompute_cost, saved_bytes.");
  m.def(
      "budget_milp",
      [](const py::dict& document, const std::map<std::string, std::string>& options,
         const std::optional<std::string>& policy, int64_t budget_bytes) {
        PartitionRequest request = MakeRequest("mincut", options, policy, "torch", false, false);
        std::unique_ptr<Graph> graph = Unwrap(GraphFromJsonDocument(FromPython(document)));
        std::unique_ptr<Graph> prepared = Unwrap(PrepareBudgetGraph(*graph, request));
        BudgetMilp m = Unwrap(BuildBudgetMilp(*prepared, request.mincut, budget_bytes));
        py::dict d;
        d["variables"] = m.program.variables;
        d["objective"] = m.program.objective;
        d["lower"] = m.program.lower;
        d["upper"] = m.program.upper;
        d["rows"] = m.program.rows;
        d["cols"] = m.program.cols;
        d["coefs"] = m.program.coefs;
        d["row_lower"] = m.program.row_lower;
        d["row_upper"] = m.program.row_upper;
        d["save_variables"] = m.save_variables;
        d["save_names"] = m.save_names;
        d["constant_infeasible"] = m.constant_infeasible;
        return d;
      },
      py::arg("document"), py::arg("options") = std::map<std::string, std::string>{}, py::arg("policy") = py::none(),
      py::arg("budget_bytes") = 0,
      "The budget MILP (Note [Budget MILP] in passes/budget_partition.h) of a joint graph document at a byte "
      "budget, as sparse arrays for scipy.optimize.milp; all variables binary.");
  m.def("budget_milp_solver_available", &BinaryProgramSolverAvailable,
        "Whether this build solves the budget MILP itself (COIN-OR CBC, opened on first use; option "
        "budget_milp_max_variables).");
  m.def("budget_milp_solver_built", &BinaryProgramSolverBuilt,
        "Whether this build was configured with COIN-OR CBC (budget_milp_solver_available says whether it opens).");
  m.def(
      "evaluate_saved",
      [](const py::dict& document, const std::vector<std::string>& saved, const std::map<std::string, std::string>& options,
         const std::optional<std::string>& policy) {
        PartitionRequest request = MakeRequest("mincut", options, policy, "torch", false, false);
        std::unique_ptr<Graph> graph = Unwrap(GraphFromJsonDocument(FromPython(document)));
        std::unique_ptr<Graph> prepared = Unwrap(PrepareBudgetGraph(*graph, request));
        FrontPoint p = Unwrap(EvaluateSavedSet(*prepared, request.mincut, saved));
        py::dict d;
        d["peak_bytes"] = p.peak_bytes;
        d["recompute_cost"] = p.recompute_cost;
        d["saved_bytes"] = p.saved_bytes;
        d["label"] = p.label;
        return d;
      },
      py::arg("document"), py::arg("saved"), py::arg("options") = std::map<std::string, std::string>{},
      py::arg("policy") = py::none(),
      "Peak, recompute cost and saved bytes of the partition that saves the named values (plus the inputs and the "
      "values that may never be recomputed), emitted and simulated as the budget solver does.");
  m.def(
      "recompute_cost",
      [](const py::dict& forward, const py::dict& backward, double flops_per_byte) {
        std::unique_ptr<Graph> f = Unwrap(GraphFromJsonDocument(FromPython(forward)));
        std::unique_ptr<Graph> b = Unwrap(GraphFromJsonDocument(FromPython(backward)));
        return PartitionRecomputeCost(*f, *b, flops_per_byte);
      },
      py::arg("forward"), py::arg("backward"), py::arg("flops_per_byte") = 64.0,
      "The recompute cost (Note [Peak budget]) of a partition: the ops its backward runs again (also in the "
      "forward, by node name); lets a benchmark price any partitioner's graphs (PyTorch's too) as the solver does.");
  m.def(
      "integer_input_ranges",
      [](const py::dict& document) {
        std::unique_ptr<Graph> graph = Unwrap(GraphFromJsonDocument(FromPython(document)));
        std::map<std::string, std::pair<int64_t, int64_t>> out;
        for (Node* p : graph->placeholders())
          if (p->val().is_tensor() && DTypeIsIntegral(p->val().tensor.dtype) && p->val().tensor.dtype != DType::kBool)
            out[p->name()] = IntegerInputRange(*p);
        return out;
      },
      py::arg("document"),
      "[low, high) for each integer placeholder of a graph document: where random values let the graph run "
      "(include/fxremat/input_ranges.h); (0, 0) when nothing bounds it.");
  m.def(
      "parse_policy", [](const std::string& text) { return PolicyToJson(Unwrap(ParsePolicy(text))); },
      py::arg("text"), "A policy's command-line form (NAME[:ARGS], POLICY+POLICY) as its JSON text.");
  m.def(
      "check_options",
      [](const std::map<std::string, std::string>& options) {
        if (Status st = CheckMinCutOptions(MinCutOptionsFrom(options)); !st.ok()) throw py::value_error(st.ToString());
      },
      py::arg("options"),
      "Checks min-cut options ({functorch config name: text}) as a partition would read them; raises "
      "ValueError with the message a partition would give, before any graph is compiled.");
  m.def(
      "residual_report",
      [](const std::string& signature) { return Text(ResidualReport(Unwrap(SignatureFromJson(signature, "signature")))); },
      py::arg("signature"), "The residual report (include/fxremat/residuals.h) of a signature given as JSON text.");
  m.def(
      "check_document",
      [](const py::dict& document, const std::string& sidecar_dir) {
        nlohmann::json doc = FromPython(document);
        Expected<std::unique_ptr<Graph>> g = GraphFromJsonDocument(doc, sidecar_dir);
        if (!g.ok()) throw py::value_error(g.status().ToString());
      },
      py::arg("document"), py::arg("sidecar_dir") = "",
      "Reads a graph document with the C++ reader (every check of docs/format.md); raises ValueError "
      "with the located message the CLI prints.");
  m.def(
      "dtypes",
      [] {
        std::vector<std::tuple<std::string, std::string, int64_t, std::string>> out;
        for (DType d : AllDTypes())
          out.emplace_back(DTypeName(d), DTypeShortName(d), DTypeItemSize(d), DTypeSafetensorsName(d));
        return out;
      },
      "The dtype table: (name, short name, item size, safetensors name) per dtype.");
  m.def(
      "describe_residuals",
      [](const std::string& signature) {
        Signature sig = Unwrap(SignatureFromJson(signature, "signature"));
        std::map<std::string, std::pair<std::string, std::string>> out;
        for (const SavedValue& s : sig.saved) {
          ResidualDescription d = DescribeResidual(s, sig);
          out[s.name] = {d.short_type, d.origin};
        }
        return out;
      },
      py::arg("signature"),
      "{saved value name: (short type, origin)} as the residual report words them.");
  m.def(
      "check_signature",
      [](const std::string& forward, const std::string& backward, const std::string& signature) {
        Signature sig = Unwrap(SignatureFromJson(signature, "signature"));
        Status st = CheckSignature(*Parse(forward), *Parse(backward), sig);
        if (!st.ok()) throw py::value_error(st.ToString());
      },
      py::arg("forward"), py::arg("backward"), py::arg("signature"));
}
