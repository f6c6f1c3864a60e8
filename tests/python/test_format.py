"""The reader/writer of docs/format.md: errors, value kinds, targets, partitioner use."""

from __future__ import annotations

import copy
import gzip
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.fx as fx
from torch.fx.experimental.proxy_tensor import make_fx

import fxremat
from fxremat import FormatError, UnsupportedGraphError
from fxremat._format import _read_doc, from_json, to_json
from fxremat.testing import testdata


@pytest.fixture(scope="module")
def sin_mm_doc():
    return _read_doc(testdata.path_of("sin_mm"))


def _node(doc, name):
    return next(n for n in doc["nodes"] if n["name"] == name)


def _load_doc(doc, tmp_path, gz=False):
    path = tmp_path / ("g.json.gz" if gz else "g.json")
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return fxremat.load(path)


def test_format_error_is_value_error():
    assert issubclass(FormatError, ValueError)


def test_plain_json_and_gzip_both_load(sin_mm_doc, tmp_path):
    a = _load_doc(sin_mm_doc, tmp_path)
    b = _load_doc(sin_mm_doc, tmp_path, gz=True)
    assert a.code == b.code


def test_unknown_major_version(sin_mm_doc, tmp_path):
    doc = dict(sin_mm_doc, version=[2, 0])
    with pytest.raises(FormatError, match=r"version 2\.0.*major version 1"):
        _load_doc(doc, tmp_path)


def test_newer_minor_version_and_unknown_keys_are_accepted(sin_mm_doc, tmp_path):
    doc = copy.deepcopy(sin_mm_doc)
    doc["version"] = [1, 9]
    doc["future_key"] = {"anything": 1}
    doc["nodes"][0]["meta"]["future_meta"] = 3
    gm = _load_doc(doc, tmp_path)
    assert gm.meta["fxremat"]["num_fwd_outputs"] == 1


def test_unknown_op_target(sin_mm_doc, tmp_path):
    doc = copy.deepcopy(sin_mm_doc)
    _node(doc, "sin")["target"] = "aten.no_such_op.default"
    with pytest.raises(FormatError, match=r"nodes\[\d+\] \('sin'\).*aten\.no_such_op\.default"):
        _load_doc(doc, tmp_path)


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "aten.sin", "torch.load"])
def test_disallowed_targets(sin_mm_doc, tmp_path, target):
    doc = copy.deepcopy(sin_mm_doc)
    _node(doc, "sin")["target"] = target
    with pytest.raises(FormatError, match=re_escape(target)):
        _load_doc(doc, tmp_path)


def re_escape(s):
    import re

    return re.escape(s)


def test_dangling_node_reference(sin_mm_doc, tmp_path):
    doc = copy.deepcopy(sin_mm_doc)
    _node(doc, "mm")["args"][0] = {"node": "nowhere"}
    with pytest.raises(FormatError, match=r"/nodes/4: node 'mm' references 'nowhere', which is not a node of this graph"):
        _load_doc(doc, tmp_path)


def test_reference_to_a_later_node(sin_mm_doc, tmp_path):
    doc = copy.deepcopy(sin_mm_doc)
    _node(doc, "sin")["args"][0] = {"node": "sigmoid"}
    with pytest.raises(FormatError, match="cycle in the graph: sin -> sigmoid"):
        _load_doc(doc, tmp_path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(format="other"), r"\$\.format"),
        (lambda d: d.update(version="1.0"), r"\$\.version"),
        (lambda d: d.update(kind="weird"), r"\$\.kind"),
        (lambda d: d.pop("joint"), r"/joint: a joint graph needs"),
        (lambda d: d.update(nodes=[]), r"\$\.nodes"),
        (lambda d: d["nodes"].append(dict(copy.deepcopy(d["nodes"][0]), name="extra")), "follows the output node"),
        (lambda d: d["nodes"].pop(), "no output node"),
        (lambda d: d["nodes"][3].update(name="primals_1"), "duplicate node name"),
        (lambda d: d["nodes"][3].update(name="renamed"), "references 'sin', which is not a node"),
        (lambda d: d["nodes"][3].update(name="not valid"), "node name 'not valid' is not a Python identifier"),
        (lambda d: d["nodes"][3].update(op="call_method"), "unknown op 'call_method'"),
        (lambda d: d["nodes"][3]["meta"].pop("val"), "has no value facts"),
        (lambda d: d["nodes"][0]["meta"]["val"].update(dtype="float99"), "unknown dtype 'float99'"),
        (lambda d: d["nodes"][0]["meta"]["val"].update(kind="blob"), "unknown value kind 'blob'"),
        (lambda d: d["nodes"][0].update(role="boss"), "unknown placeholder role"),
        (lambda d: d["nodes"][3]["args"].append({"dtype": "nope"}), "unknown dtype 'nope'"),
        (lambda d: d["nodes"][3]["args"].append({"what": 1}), "unsupported argument"),
        (lambda d: d["nodes"][3]["meta"].update(recompute="SOMETIMES"), "unknown checkpoint policy"),
        (lambda d: d["joint"].update(num_fwd_outputs=2), r"num_fwd_outputs is 2"),
        (lambda d: d["joint"].update(num_fwd_outputs=2, output_paths=None, tangent_outputs=None), r"num_fwd_outputs is 2"),
        (lambda d: d["joint"].update(tangent_outputs=[5]), "tangent_outputs"),
    ],
)
def test_malformed_documents(sin_mm_doc, tmp_path, mutate, message):
    doc = copy.deepcopy(sin_mm_doc)
    mutate(doc)
    with pytest.raises(FormatError, match=message):
        _load_doc(doc, tmp_path)


def test_not_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        fxremat.load(p)
    p = tmp_path / "bad.json.gz"
    p.write_bytes(b"\x1f\x8b" + b"garbage")
    with pytest.raises(FormatError, match="gzip"):
        fxremat.load(p)


def test_roles_derived_when_absent(sin_mm_doc, tmp_path):
    doc = copy.deepcopy(sin_mm_doc)
    for n in doc["nodes"]:
        n.pop("role", None)
    gm = _load_doc(doc, tmp_path)
    roles = [n.meta["fxremat_role"] for n in gm.graph.nodes if n.op == "placeholder"]
    assert roles == ["primal", "primal", "tangent"]


# ---- writer ---------------------------------------------------------------------------


def test_values_args_and_python_targets_round_trip(tmp_path):
    def f(x):
        y = x.masked_fill(x > 0, float("inf")).clamp(min=-math.inf, max=1e30)
        z = torch.zeros(3, dtype=torch.float64, layout=torch.strided, device="cpu")
        w = x.contiguous(memory_format=torch.contiguous_format)
        parts = torch.split(w, 2)  # multi-output op: getitem nodes, tuple values
        return y, z, parts[0], torch.isnan(x * float("nan"))

    x = torch.randn(4)
    gm = make_fx(f)(x)
    doc = to_json(gm)
    assert doc["kind"] == "plain"
    text = json.dumps(doc)
    for needle in ('{"float": "inf"}', '{"float": "-inf"}', '{"float": "nan"}', '{"dtype": "float64"}',
                   '{"device": "cpu"}', '{"layout": "strided"}', '"_operator.getitem"', '"kind": "tuple"'):
        assert needle in text, needle
    assert all(n["role"] == "input" for n in doc["nodes"] if n["op"] == "placeholder")
    back = from_json(json.loads(text))
    for got, want in zip(back(x), f(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
    assert to_json(back) == doc


def test_symbolic_shapes_round_trip(tmp_path):
    def f(x):
        return (x.view(x.shape[0] * 2, -1).sum(0) * (x.shape[0] + 1),)

    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 6))
    path = tmp_path / "sym.json"
    fxremat.save(gm, path)
    doc = json.loads(path.read_text())
    assert sorted(doc["symbols"].values()) == [4, 6]
    assert any(n["target"] == "_operator.mul" for n in doc["nodes"])
    assert any(isinstance(d, dict) for d in doc["nodes"][0]["meta"]["val"]["shape"])
    back = fxremat.load(path)
    x = torch.randn(6, 8)  # another shape: the graph is symbolic
    torch.testing.assert_close(back(x)[0], f(x)[0])
    assert isinstance(back.graph.find_nodes(op="placeholder")[0].meta["val"].shape[0], torch.SymInt)


def test_get_attr_tensor_is_encoded_with_its_data():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("c", torch.tensor([1.0, -2.0, 3.5]))

        def forward(self, x):
            return (x + self.c,)

    gm = fx.symbolic_trace(M())
    for n in gm.graph.nodes:
        n.meta["val"] = torch.empty(3)
    doc = to_json(gm)
    assert doc["constants"]["c"]["val"]["shape"] == [3]
    back = from_json(json.loads(json.dumps(doc)))
    x = torch.randn(3)
    torch.testing.assert_close(back(x)[0], x + torch.tensor([1.0, -2.0, 3.5]))
    assert to_json(back) == doc


def test_get_attr_of_a_submodule_is_refused():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Identity()

        def forward(self, x):
            return (x,)

    gm = fx.symbolic_trace(M())
    gm.add_module("body", torch.nn.Identity())  # a higher-order op's body is such a submodule
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.get_attr("body")
    for n in gm.graph.nodes:
        n.meta["val"] = torch.empty(3)
    with pytest.raises(UnsupportedGraphError, match=r"get_attr of the submodule 'body'"):
        to_json(gm)


def test_unknown_argument_type_is_refused():
    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(4)
    y = g.call_function(torch.ops.aten.sin.default, (x,))
    y.meta["val"] = torch.empty(4)
    z = g.call_function(torch.ops.aten.add.Tensor, (y, slice(1, 2)), name="bad_add")
    z.meta["val"] = torch.empty(4)
    g.output((z,))
    with pytest.raises(UnsupportedGraphError, match=r"node .bad_add. args\[1\].*builtins.slice"):
        to_json(fx.GraphModule(torch.nn.Module(), g))


def test_missing_val_and_single_output_of_a_joint_graph_are_refused():
    gm = fx.symbolic_trace(lambda x: (torch.sin(x),))
    with pytest.raises(UnsupportedGraphError, match="no meta\\['val'\\]"):
        to_json(gm)
    gm = make_fx(lambda x: torch.sin(x))(torch.randn(2))
    with pytest.raises(UnsupportedGraphError, match="tuple or list"):
        to_json(gm, num_fwd_outputs=1)


def test_a_plain_graph_returns_a_single_value_or_a_list():
    """Note [Single-value outputs] (format 1.6): a plain graph (a HOP's subgraph, such
    as flex_attention's score_mod) keeps the Python form of what it returns."""
    single = make_fx(lambda x: torch.sin(x))(torch.randn(2))
    doc = to_json(single)
    assert doc["nodes"][-1]["args"] == [{"node": "sin"}] and "returns_list" not in doc
    back = from_json(doc)
    assert isinstance(back.graph.output_node().args[0], fx.Node)
    as_list = make_fx(lambda x: [torch.sin(x), torch.cos(x)])(torch.randn(2))
    doc = to_json(as_list)
    assert doc["returns_list"] is True
    assert isinstance(from_json(doc).graph.output_node().args[0], list)
    as_tuple = make_fx(lambda x: (torch.sin(x), torch.cos(x)))(torch.randn(2))
    assert "returns_list" not in to_json(as_tuple)
    assert isinstance(from_json(to_json(as_tuple)).graph.output_node().args[0], tuple)


# ---- loaded graphs are usable joint graphs ---------------------------------------------


@pytest.mark.parametrize("partitioner", ["default_partition", "min_cut_rematerialization_partition"])
def test_torch_partitioners_accept_a_loaded_joint_graph(partitioner):
    from torch._functorch import partitioners

    from fxremat.testing import programs, verify

    gm = fxremat.load(testdata.path_of("simple_mlp_ckpt"))
    facts = gm.meta["fxremat"]
    nfo = facts["num_fwd_outputs"]
    fw, bw = getattr(partitioners, partitioner)(gm, None, num_fwd_outputs=nfo)
    program = programs.build("simple_mlp_ckpt")
    primals = [fxremat.resolve_path(p, program.roots()).detach() for p in facts["input_paths"]]
    tangents = verify.random_tangents(gm)
    with torch.no_grad():
        joint_out = gm(*primals, *tangents)
        fw_out = fw(*primals)
        saved = fw_out[nfo:]
        grads = bw(*saved, *tangents)
    for got, want in zip(list(fw_out[:nfo]) + list(grads), joint_out):
        if want is None:
            assert got is None
        else:
            torch.testing.assert_close(got, want)


# ---- process-level behaviour -----------------------------------------------------------


def _run_python(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_import_is_lazy():
    out = _run_python(
        "import sys, fxremat\n"
        "assert issubclass(fxremat.FormatError, ValueError)\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('fxremat._C')))\n"
    )
    assert out.strip() == "[]"


def test_load_registers_xla_name_tensor():
    path = testdata.path_of("name_tensor")
    out = _run_python(
        "import torch, fxremat\n"
        "from fxremat import xla_compat\n"
        "assert not xla_compat.is_registered()\n"
        f"gm = fxremat.load({str(path)!r})\n"
        "assert xla_compat.is_registered()\n"
        "x = torch.randn(10); t = torch.randn(10)\n"
        "out, grad = gm(x, t)\n"
        "ref = torch.sin(x) ** 2 + 3\n"
        "assert torch.allclose(out, ref), (out, ref)\n"
        "assert torch.allclose(grad, t * 2 * torch.sin(x) * torch.cos(x), atol=1e-6)\n"
        "assert torch.equal(torch.ops.xla.name_tensor(x, 'n'), x)\n"
        "print(sum(n.target is torch.ops.xla.name_tensor.default for n in gm.graph.nodes))\n"
    )
    assert int(out) >= 1


def test_bad_input_corpus_is_refused(repo_root):
    """The C++ reader's bad-input corpus (tests/bad_inputs) is refused here as well."""
    corpus = repo_root / "tests" / "bad_inputs"
    files = sorted(p for p in corpus.glob("*.json*")) if corpus.is_dir() else []
    if not files:
        pytest.skip("no bad-input corpus")
    for path in files:
        with pytest.raises(FormatError):
            fxremat.load(path)


# ---- version 1.1: packet_tags and storage ids ------------------------------------------


def _tensor_facts(doc):
    """(node name, tensor facts) for every tensor value, tuple items included, in order."""
    out = []

    def walk(name, v):
        if v["kind"] == "tensor":
            out.append((name, v))
        elif v["kind"] == "tuple":
            for x in v["items"]:
                walk(name, x)

    for n in doc["nodes"]:
        if "val" in n.get("meta", {}):
            walk(n["name"], n["meta"]["val"])
    return out


def _strip_1_1(doc):
    """The same document as a version 1.0 writer would have written it."""
    doc = copy.deepcopy(doc)
    doc["version"] = [1, 0]
    for facts in doc.get("ops", {}).values():
        facts.pop("packet_tags", None)
    for _, v in _tensor_facts(doc):
        v.pop("storage", None)
    return doc


def test_writer_writes_version_1_7(sin_mm_doc):
    from fxremat import _format

    assert _format.VERSION == (1, 7)
    assert fxremat.FORMAT_VERSION == (1, 7)
    gm = make_fx(lambda x: (x.sin(),))(torch.randn(2))
    assert to_json(gm)["version"] == [1, 7]


def test_packet_tags_are_the_union_over_the_overload_packet():
    from fxremat._format import packet_tag_names

    assert packet_tag_names(torch.ops.aten.add.Tensor) == ["core", "generated", "out", "pointwise", "pt2_compliant_tag"]
    # aten.rsub.Tensor is not pointwise itself, but its packet is (rsub.Scalar is): the
    # reference partitioner's pointwise_ops() works by packet, so rsub is recomputable.
    assert torch.Tag.pointwise not in torch.ops.aten.rsub.Tensor.tags
    assert "pointwise" in packet_tag_names(torch.ops.aten.rsub.Tensor)
    assert packet_tag_names(torch.ops.aten.t.default) == ["pt2_compliant_tag"]

    from torch._functorch.partitioners import pointwise_ops

    pointwise = set(pointwise_ops())
    for name in ("add", "rsub", "max", "where", "mm", "sum", "view", "native_dropout"):
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            assert ("pointwise" in packet_tag_names(op)) == (packet in pointwise), op


def test_every_op_of_the_testdata_has_packet_tags():
    from fxremat._format import resolve_target
    from fxremat.testing import programs

    for name in programs.names():
        doc = _read_doc(testdata.path_of(name))
        for target, facts in doc["ops"].items():
            op = resolve_target(target)
            want = sorted({t.name for o in op.overloadpacket.overloads()
                           for t in getattr(op.overloadpacket, o).tags})
            assert facts["packet_tags"] == want, (name, target)
            assert set(facts["tags"]) <= set(facts["packet_tags"])
            assert list(facts) == ["schema", "tags", "packet_tags"]


def test_storage_ids_number_aliasing_storages_in_order():
    def f(x):
        a = x.sin()
        parts = torch.split(a.cos(), 1)  # tuple value: one storage for both items
        return a.view(-1), a.view(-1), parts[0], parts[1].exp()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3))
    doc = to_json(gm)
    ids = [(name, v["storage"]) for name, v in _tensor_facts(doc)]
    assert ids == [
        ("x_1", 0), ("sin", 1), ("cos", 2), ("split", 2), ("split", 2),
        ("getitem", 2), ("getitem_1", 2), ("view", 1), ("view_1", 1), ("exp", 3),
    ]
    for _, v in _tensor_facts(doc):
        assert list(v)[-2:] == ["requires_grad", "storage"]


def test_loaded_tensors_alias_as_in_the_file_and_cse_agrees():
    """fx_graph_cse (torch/_functorch/compile_utils.py) keeps nodes that alias a graph
    output; a loaded graph must give it the same storages as the traced one."""
    from torch._functorch.compile_utils import fx_graph_cse
    from torch.multiprocessing.reductions import StorageWeakRef

    def f(x):
        a = x.sin()
        return a.view(-1), a.view(-1), x.cos().view(-1), x.cos().view(-1).exp()

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 3))
    doc = to_json(gm)
    back = from_json(copy.deepcopy(doc))
    storages = {n.name: StorageWeakRef(n.meta["val"].untyped_storage())
                for n in back.graph.nodes if n.op != "output"}
    assert storages["sin"] == storages["view"] == storages["view_1"]
    assert storages["cos"] == storages["view_2"] != storages["cos_1"]
    assert storages["x_1"] != storages["sin"]
    view = next(n for n in back.graph.nodes if n.name == "view")
    assert tuple(view.meta["val"].shape) == (6,) and view.meta["val"].stride() == (1,)
    assert to_json(back) == doc

    traced = len(fx_graph_cse(gm.graph).nodes)
    assert len(fx_graph_cse(back.graph).nodes) == traced
    # Without the storage facts (a 1.0 file) view and view_1 would be merged.
    assert len(fx_graph_cse(from_json(_strip_1_1(doc)).graph).nodes) == traced - 1


def test_version_1_0_documents_still_load(sin_mm_doc, tmp_path):
    old = _strip_1_1(sin_mm_doc)
    gm = _load_doc(old, tmp_path)
    new = _load_doc(sin_mm_doc, tmp_path)
    assert gm.code == new.code
    x, w, t = torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)
    for a, b in zip(gm(x, w, t), new(x, w, t)):
        if a is None:
            assert b is None
        else:
            torch.testing.assert_close(a, b)
    again = to_json(gm)  # written as 1.3, with storage ids again (one per storage now)
    assert again["version"] == [1, 7]
    assert all("storage" in v for _, v in _tensor_facts(again))
    assert all("packet_tags" in f for f in again["ops"].values())


def test_testdata_round_trips_exactly_with_storage_ids():
    for name in ("sin_mm", "carry_x", "gpt2_2l"):
        doc = _read_doc(testdata.path_of(name))
        assert any(v["storage"] != w["storage"] for (_, v), (_, w) in zip(_tensor_facts(doc), _tensor_facts(doc)[1:]))
        assert to_json(from_json(doc)) == doc, name


def test_unrebuildable_values_keep_their_storage_ids(sin_mm_doc):
    doc = copy.deepcopy(sin_mm_doc)
    aliased = [n for n in doc["nodes"] if n["name"] in ("sigmoid", "detach", "detach_1")]
    assert len({n["meta"]["val"]["storage"] for n in aliased}) == 1
    for n in aliased:
        n["meta"]["val"]["device"] = "hpu"  # fake tensors cannot be made for it here
    gm = from_json(doc)
    assert sorted(n.name for n in gm.graph.nodes if "fxremat_val" in n.meta) == ["detach", "detach_1", "sigmoid"]
    assert to_json(gm) == doc


@pytest.mark.parametrize("bad", ["0", 1.5, True, [0]])
def test_malformed_storage_id(sin_mm_doc, tmp_path, bad):
    doc = copy.deepcopy(sin_mm_doc)
    doc["nodes"][3]["meta"]["val"]["storage"] = bad
    with pytest.raises(FormatError, match=r"/nodes/3/meta/val/storage: expected an integer"):
        _load_doc(doc, tmp_path)


def test_save_is_deterministic(tmp_path):
    from fxremat.testing import testdata as td

    jg = td.export_program("sin_mm")
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    jg.save(a)
    jg.save(b)
    assert a.read_bytes() == b.read_bytes() == testdata.path_of("sin_mm").read_bytes()


def test_stack_trace_table(sin_mm_doc, tmp_path):
    """Format 1.5 (Note [Stack-trace table]): a document may list its distinct stack
    traces once and name them by index; the C++ writer always does, and what the
    partitioner emits comes back to FX with every node's trace."""
    doc = copy.deepcopy(sin_mm_doc)
    doc["version"] = [1, 5]
    doc["stack_traces"] = ['File "model.py", line 7, in forward\n    y = x.sin()\n']
    calls = [n for n in doc["nodes"] if n["op"] == "call_function"]
    for n in calls:
        n.setdefault("meta", {})["stack_trace_index"] = 0
    gm = _load_doc(doc, tmp_path)
    traced = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert traced and all(n.meta["stack_trace"] == doc["stack_traces"][0] for n in traced)
    # The partitioner's graphs (written by C++ with a table) keep the traces.
    p = fxremat.partition(gm)
    emitted = [n for g in (p.forward, p.backward) for n in g.graph.nodes if n.op == "call_function"]
    assert any(n.meta.get("stack_trace") == doc["stack_traces"][0] for n in emitted)
    # An index outside the table is refused where it is written.
    calls[0]["meta"]["stack_trace_index"] = 3
    with pytest.raises(FormatError, match=r'3 is not an index of "stack_traces" \(which has 1\)'):
        _load_doc(doc, tmp_path)


def test_returns_list_with_a_single_value_is_refused():
    doc = to_json(make_fx(lambda x: torch.sin(x))(torch.randn(2)))
    doc["returns_list"] = True
    with pytest.raises(FormatError, match="returns_list.*single value"):
        from_json(doc)


def test_load_then_save_keeps_the_files_symbol_names(tmp_path):
    """fxremat.load makes the file's size symbols under their own names (s33 stays s33),
    so load -> save of a dynamic-shape joint graph is byte-identical."""
    import copy

    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    got = {}

    def capture(joint, joint_inputs, **kw):
        got.update(joint=copy.deepcopy(joint), kw=kw)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)

    torch._dynamo.reset()
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    compiled = torch.compile(net, backend=aot_autograd(fw_compiler=boxed_nop, partition_fn=capture), dynamic=True)
    compiled(torch.randn(6, 8)).sum().backward()
    torch._dynamo.reset()
    src = tmp_path / "dyn.json.gz"
    fxremat.save(got["joint"], src, num_fwd_outputs=got["kw"]["num_fwd_outputs"])
    symbols = json.loads(gzip.decompress(src.read_bytes()))["symbols"]
    assert symbols  # a dynamic batch: at least one size symbol
    out = tmp_path / "again.json.gz"
    fxremat.save(fxremat.load(src), out)
    assert json.loads(gzip.decompress(out.read_bytes()))["symbols"] == symbols
    assert out.read_bytes() == src.read_bytes()
