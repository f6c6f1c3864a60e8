"""The torch.compile backend "fxremat" and the drop-in fxremat.partition_fn.

Compiles here are small (an MLP; GPT-2 lives in test_training.py) except the
subprocess test, which trains the 2-layer GPT-2 with Inductor and aot_eager from a
script that never imports fxremat. The AOTAutograd cache is off in these tests so that
every compile really partitions (a cache hit skips the partition_fn).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import fxremat
from fxremat import backend as fx_backend
from fxremat._partition_fn import partition_records


pytestmark = pytest.mark.usefixtures("fresh_compile_state")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))


def _compare_step(model, options, batch=8, dynamic=None):
    """One forward+backward of a compiled copy against eager; exact for aot_eager/eager,
    rtol 1e-4 / atol 1e-5 for Inductor (fused kernels reassociate float sums)."""
    ref = model
    mod = copy.deepcopy(model)
    c = torch.compile(mod, backend="fxremat", options=options, dynamic=dynamic)
    x = torch.randn(batch, 16, generator=torch.Generator().manual_seed(batch))
    got = c(x).pow(2).sum()
    got.backward()
    want = ref(x).pow(2).sum()
    want.backward()
    tol = dict(rtol=1e-4, atol=1e-5) if options.get("compiler", "inductor") == "inductor" else dict(rtol=0, atol=0)
    torch.testing.assert_close(got, want, **tol)
    for (n, a), b in zip(mod.named_parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad, **tol, msg=lambda m: f"grad of {n}: {m}")
        b.grad = None
    return c


@pytest.mark.parametrize("compiler", ["aot_eager", "eager", "inductor"])
def test_backend_matches_eager(compiler):
    _compare_step(_mlp(), {"compiler": compiler})
    (rec,) = partition_records()
    assert rec.partitioner == "mincut" and rec.fallback is None
    assert rec.saved_bytes == rec.signature["saved_bytes"] > 0
    assert set(rec.seconds) >= {"to_json", "cpp", "build", "total"}


def _dynamo_joint(model, x, dynamic):
    """The joint graph torch.compile hands to a partition_fn, with its arguments."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    got = {}

    def capture(joint, joint_inputs, **kw):
        got.update(joint=copy.deepcopy(joint), kw=kw)
        return min_cut_rematerialization_partition(joint, joint_inputs, **kw)

    torch.compile(model, backend=aot_autograd(fw_compiler=boxed_nop, partition_fn=capture), dynamic=dynamic)(x)
    torch._dynamo.reset()
    return got["joint"], got["kw"]


def test_checkpoint_regions_through_the_backend():
    """torch.utils.checkpoint under torch.compile: the region is recomputed, so less is saved."""
    from fxremat.testing import programs

    saved = {}
    for name in ("simple_mlp", "simple_mlp_ckpt"):
        torch._dynamo.reset()
        p = programs.build(name)
        model = p.fn
        mod = copy.deepcopy(model)
        got = torch.compile(mod, backend="fxremat", options={"compiler": "aot_eager"})(*p.args)
        want = model(*p.args)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        got.sum().backward()
        want.sum().backward()
        for a, b in zip(mod.parameters(), model.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-7)
        saved[name] = partition_records()[-1].saved_bytes
    assert saved["simple_mlp_ckpt"] < saved["simple_mlp"]


def test_inference_graphs_need_no_partition():
    model = _mlp()
    c = torch.compile(copy.deepcopy(model), backend="fxremat", options={"compiler": "aot_eager"})
    x = torch.randn(3, 16)
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x), rtol=0, atol=0)
    assert partition_records() == []


class _ReluMM(torch.nn.Module):
    """Its backward reads no symint, but saved tensors and the tangent have the
    symbolic batch size: the symbol's binding must be saved anyway."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        return torch.relu(x @ self.w)


@pytest.mark.parametrize("make", [_mlp, _ReluMM], ids=["mlp", "relu_mm"])
def test_dynamic_shapes(make):
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    model = make()
    mod = copy.deepcopy(model)
    c = torch.compile(mod, backend="fxremat", options={"compiler": "aot_eager"}, dynamic=True)
    for batch in (8, 5):
        x = torch.randn(batch, 16)
        got, want = c(x), model(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
        for a, b in zip(mod.parameters(), model.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
            a.grad = b.grad = None
    (rec,) = partition_records()  # one graph for both batch sizes
    kinds = [s["kind"] for s in rec.signature["saved"]]
    assert kinds[-1] == "symint" and kinds.index("symint") == len(kinds) - kinds.count("symint")
    # the same saved values, symints included, at the same positions as PyTorch's
    joint, kw = _dynamo_joint(copy.deepcopy(model), torch.randn(8, 16), dynamic=True)
    for name, ref in (("mincut", min_cut_rematerialization_partition), ("default", default_partition)):
        rfw, rbw = ref(copy.deepcopy(joint), None, **kw)
        fw, bw = fxremat.partition_fn(name)(copy.deepcopy(joint), None, **kw)
        assert [str(n) for n in fw.graph.output_node().args[0]] == [str(n) for n in rfw.graph.output_node().args[0]]
        assert [n.name for n in bw.graph.nodes] == [n.name for n in rbw.graph.nodes]


def test_dump_dir_writes_graphs_signature_and_residual_report(tmp_path):
    _compare_step(_mlp(), {"compiler": "aot_eager", "dump_dir": str(tmp_path)})
    (rec,) = partition_records()
    (d,) = tmp_path.iterdir()
    assert rec.dump_dir == str(d)
    assert sorted(p.name for p in d.iterdir()) == ["backward.json.gz", "forward.json.gz", "residuals.txt", "signature.json"]
    sig = json.loads((d / "signature.json").read_text())
    assert sig == rec.signature
    fw = fxremat.load(d / "forward.json.gz")
    bw = fxremat.load(d / "backward.json.gz")
    assert fw.meta["fxremat"]["kind"] == "forward" and bw.meta["fxremat"]["kind"] == "backward"
    assert len(fw.graph.output_node().args[0]) == sig["forward"]["num_outputs"]
    # the one residual report (the C++ library's, as `fxremat residuals` prints it)
    lines = (d / "residuals.txt").read_text().splitlines()
    body = lines[:-2]
    assert len(body) == len(sig["saved"])
    for ln, s in zip(body, sorted(sig["saved"], key=lambda s: s["forward_output_index"])):
        fields = ln.split()
        assert fields[-4:] == ["fw_out", str(s["forward_output_index"]), "bw_in", str(s["backward_input_index"])]
    assert lines[-2].startswith(f"{len(sig['saved'])} residuals: {sig['saved_bytes']} B saved on device")
    assert lines[-1].startswith(f"step peak (simulated): {sig['peak']['bytes']} B above the inputs")
    with gzip.open(d / "forward.json.gz", "rt") as f:
        assert json.load(f)["format"] == "fxremat.graph"


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"policy": "save_matmuls"}, ValueError, "unknown policy 'save_matmuls'"),
        ({"policy": print}, TypeError, "cannot run inside the C\\+\\+ partitioner"),
        ({"offload": "cpu"}, ValueError, r"unknown option\(s\) \['offload'\]"),
        ({"offload_target": "gpu"}, ValueError, "unknown offload_target 'gpu'"),
        ({"barrier": True}, ValueError, "needs offload_target='xla'"),
        ({"partitioner": "default", "policy": "dots_saveable"}, ValueError, "policy needs the mincut partitioner"),
        ({"partitioner": "greedy"}, ValueError, "unknown partitioner 'greedy'"),
        ({"compiler": "tvm"}, ValueError, "unknown compiler 'tvm'"),
        ({"recompute_view": True}, ValueError, r"unknown option\(s\) \['recompute_view'\]"),
        ({"partitioner": "default", "recompute_views": True}, ValueError, "do not apply to partitioner 'default'"),
        ({"mode": "fastest"}, ValueError, "unknown mode 'fastest'"),
        ({"compiler": "aot_eager", "mode": "max-autotune"}, ValueError, "is the inductor compiler's"),
        # On/off options take what the C++ options take; bool("false") would be True.
        ({"fallback": "maybe"}, ValueError, "option fallback takes True or False, not 'maybe'"),
        ({"dump": "yes"}, ValueError, "option dump takes True or False"),
        ({"keep_annotations": 2}, ValueError, "option keep_annotations takes True or False"),
        ({"barrier": "on"}, ValueError, "option barrier takes True or False"),
        # Min-cut option values are checked when the options are given, not at the first compile.
        ({"activation_memory_budget": 2.0}, ValueError, r"activation_memory_budget=2\.0 is outside \[0, 1\]"),
        ({"max_dist_from_bw": 2.5}, ValueError, "max_dist_from_bw takes a whole number of nodes, not '2.5'"),
        ({"memory_budget_bytes": -1}, ValueError, "memory_budget_bytes takes a byte size such as 4096, 64MiB or 1.5GB"),
        ({"memory_budget_bytes": 1 << 20, "activation_memory_budget": 0.5}, ValueError,
         "two budgets given: memory_budget_bytes=1048576 and activation_memory_budget=0.5"),
    ],
)
def test_options_are_checked(options, error, match):
    with pytest.raises(error, match=match):
        fx_backend.BackendOptions.parse(options)


@pytest.mark.parametrize("text, on", [("false", False), ("False", False), ("0", False), (0, False), (False, False),
                                      ("true", True), ("True", True), ("1", True), (1, True), (True, True)])
def test_on_off_options_read_text_as_the_cpp_options_do(text, on, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    o = fx_backend.BackendOptions.parse({"fallback": text, "keep_annotations": text, "dump": text})
    assert (o.fallback, o.keep_annotations, o.dump_dir is not None) == (on, on, on)
    assert fxremat.partition_fn(fallback=text).fallback is on


def test_errors_reach_the_user_through_torch_compile():
    c = torch.compile(_mlp(), backend="fxremat", options={"policy": "everything"})
    with pytest.raises(Exception, match="unknown policy 'everything'"):
        c(torch.randn(2, 16))


def test_mode_goes_in_the_options_with_other_options(monkeypatch, fresh_compile_state):
    """torch.compile refuses mode= beside options=: options={"mode": ...} gives Inductor
    the mode's settings together with fxremat's options."""
    import torch._inductor.compile_fx as inductor_compile

    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(_mlp(), backend="fxremat", mode="max-autotune-no-cudagraphs", options={"cse": True})
    seen = []
    real = inductor_compile.compile_fx

    def recording(gm, example_inputs, config_patches=None, **kw):
        seen.append(dict(config_patches or {}))
        return real(gm, example_inputs, config_patches=config_patches, **kw)

    monkeypatch.setattr(inductor_compile, "compile_fx", recording)
    _compare_step(_mlp(), {"mode": "max-autotune-no-cudagraphs", "activation_memory_budget": 0.5})
    want = torch._inductor.list_mode_options("max-autotune-no-cudagraphs")
    # the backend's call (compile_fx calls itself again once its patches are in force)
    assert seen and seen[0].items() >= want.items() and "custom_partitioner_fn" in seen[0]
    assert partition_records()


def test_mincut_options_are_passed_through():
    """activation_memory_budget=0 with PyTorch's objective saves only the inputs:
    everything else is recomputed."""
    _compare_step(_mlp(), {"compiler": "aot_eager", "activation_memory_budget": 0.0, "budget_objective": "saved"})
    (rec,) = partition_records()
    assert all(s["name"].startswith("primals_") for s in rec.signature["saved"])


def _joint_of(fn, *args):
    """A joint graph as AOTAutograd hands it to a partition_fn, with its arguments."""
    from functorch.compile import aot_function, make_boxed_func

    got = {}

    def capture(joint, joint_inputs, **kw):
        from torch._functorch.partitioners import default_partition

        got.update(joint=copy.deepcopy(joint), kw=kw)
        return default_partition(joint, joint_inputs, **kw)

    aot_function(fn, lambda gm, _: make_boxed_func(gm.forward), partition_fn=capture)(*args)
    return got["joint"], got["kw"]


def _sin_mm(a, w):
    a = torch.sin(a)
    a = a @ w
    a = torch.cos(a)
    return torch.sigmoid(a @ w), a.sum()


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
def test_partition_fn_is_a_drop_in_for_functorch(partitioner):
    """Same saved values at the same positions, same node order as PyTorch's own
    partitioner on the same joint graph; and usable with aot_function."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    a = torch.randn(4, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    joint, kw = _joint_of(_sin_mm, a, w)
    ref = min_cut_rematerialization_partition if partitioner == "mincut" else default_partition
    rfw, rbw = ref(copy.deepcopy(joint), None, **kw)
    # keep_annotations: PyTorch keeps naming ops (xla::name_tensor) as clones.
    fw, bw = fxremat.partition_fn(partitioner, keep_annotations=True)(copy.deepcopy(joint), None, **kw)
    assert [n.name for n in fw.graph.nodes] == [n.name for n in rfw.graph.nodes]
    assert [n.name for n in bw.graph.nodes] == [n.name for n in rbw.graph.nodes]

    f = aot_function(_sin_mm, lambda gm, _: make_boxed_func(gm.forward), partition_fn=fxremat.partition_fn(partitioner))
    out = f(a, w)
    (out[0].sum() + out[1]).backward()
    ga, gw = a.grad, w.grad
    a.grad = w.grad = None
    ref_out = _sin_mm(a, w)
    (ref_out[0].sum() + ref_out[1]).backward()
    torch.testing.assert_close(ga, a.grad, rtol=0, atol=0)
    torch.testing.assert_close(gw, w.grad, rtol=0, atol=0)


def test_partition_fn_passes_static_lifetime_inputs_through():
    """Parameters are free to save: with w marked static, min-cut saves w itself."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    a = torch.randn(4, 4, requires_grad=True)
    w = torch.randn(4, 4, requires_grad=True)
    joint, kw = _joint_of(_sin_mm, a, w)
    for static in ([], [1]):
        kw["static_lifetime_input_indices"] = static
        rfw, _ = min_cut_rematerialization_partition(copy.deepcopy(joint), None, **kw)
        fw, _ = fxremat.partition_fn()(copy.deepcopy(joint), None, **kw)
        assert [n.name for n in fw.graph.output_node().args[0]] == [n.name for n in rfw.graph.output_node().args[0]]


def test_unsupported_graph_errors_or_falls_back(monkeypatch):
    from fxremat import _format

    def refuse(*_a, **_k):
        raise fxremat.UnsupportedGraphError("node 'invoke_subgraph': higher-order operator")

    a = torch.randn(4, 4, requires_grad=True)
    joint, kw = _joint_of(_sin_mm, a, torch.randn(4, 4, requires_grad=True))
    monkeypatch.setattr(_format, "to_json", refuse)
    with pytest.raises(fxremat.UnsupportedGraphError, match="'fallback': True"):
        fxremat.partition_fn()(copy.deepcopy(joint), None, **kw)
    with pytest.warns(UserWarning, match="using PyTorch's mincut partitioner"):
        fw, bw = fxremat.partition_fn(fallback=True)(copy.deepcopy(joint), None, **kw)
    assert partition_records()[-1].fallback is not None


@pytest.mark.parametrize("problem", ["stale", "missing"])
def test_extension_problems_say_how_to_rebuild(monkeypatch, problem):
    import fxremat._C

    a = torch.randn(4, 4, requires_grad=True)
    joint, kw = _joint_of(_sin_mm, a, torch.randn(4, 4, requires_grad=True))
    if problem == "stale":
        monkeypatch.setattr(fxremat._C, "__version__", "0.0.0-stale")
    else:
        monkeypatch.delattr(fxremat, "_C")
        monkeypatch.setitem(sys.modules, "fxremat._C", None)  # makes the import fail
    with pytest.raises(ImportError, match="make build"):
        fxremat.partition_fn()(joint, None, **kw)


def test_importing_fxremat_and_its_backend_loads_no_extension():
    code = ("import sys, fxremat, fxremat.backend; fxremat.partition_fn; fxremat.extract; "
            "assert 'fxremat._C' not in sys.modules, 'extension imported'; "
            "assert 'torch._inductor.compile_fx' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# A script that never imports fxremat: torch finds backend="fxremat" through the
# torch_dynamo_backends entry point. It builds the 2-layer GPT-2 of
# fxremat.testing.programs ("gpt2_2l") from its transformers config.
_NO_IMPORT_SCRIPT = textwrap.dedent(
    """
    import copy, json, sys
    import torch, transformers

    assert "fxremat" not in sys.modules
    VOCAB = 512
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
        use_cache=False, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
        attn_implementation="eager",
    )

    class LMLoss(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids, labels=input_ids).loss

    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(cfg)
    gpt2.loss_type = "ForCausalLM"
    results = {}
    for options in ({}, {"compiler": "aot_eager"}):
        ref = LMLoss(copy.deepcopy(gpt2))
        mod = copy.deepcopy(ref)
        compiled = torch.compile(mod, backend="fxremat", options=options)
        gen = torch.Generator().manual_seed(1)
        worst = 0.0
        for step in range(2):
            ids = torch.randint(0, VOCAB, (2, 16), generator=gen)
            got, want = compiled(ids), ref(ids)
            got.backward()
            want.backward()
            worst = max(worst, abs(got.item() - want.item()))
            for a, b in zip(mod.parameters(), ref.parameters()):
                worst = max(worst, (a.grad - b.grad).abs().max().item())
                a.grad = b.grad = None
        results[options.get("compiler", "inductor")] = worst
    records = sys.modules["fxremat._partition_fn"].partition_records()
    print(json.dumps({"worst": results, "partitions": [r.partitioner for r in records],
                      "saved_bytes": [r.saved_bytes for r in records]}))
    """
)


def test_backend_by_name_without_importing_fxremat(tmp_path):
    assert "import fxremat" not in _NO_IMPORT_SCRIPT and "from fxremat" not in _NO_IMPORT_SCRIPT
    script = tmp_path / "train.py"
    script.write_text(_NO_IMPORT_SCRIPT)
    env = dict(os.environ, TORCHINDUCTOR_AUTOGRAD_CACHE="0")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["partitions"] == ["mincut", "mincut"], out
    assert out["worst"]["aot_eager"] == 0.0, out
    assert out["worst"]["inductor"] < 1e-4, out


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
@pytest.mark.parametrize("name", __import__("fxremat.testing.programs", fromlist=["names"]).names())
def test_partition_fn_builds_what_pytorch_builds_on_testdata(name, partitioner):
    """On every bundled joint graph: the same forward and backward (node names in the
    same order, same outputs) as PyTorch's partitioner of that name, and forward then
    backward reproduce the joint graph's outputs and gradients."""
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    from fxremat._paths import resolve_path
    from fxremat.testing import programs, testdata, verify

    joint = fxremat.load(testdata.path_of(name))
    facts = joint.meta["fxremat"]
    nfo = facts["num_fwd_outputs"]
    static = [i for i, p in enumerate(facts["input_paths"]) if p and p.startswith(("params[", "buffers["))]
    kw = dict(num_fwd_outputs=nfo, static_lifetime_input_indices=static)
    ref = min_cut_rematerialization_partition if partitioner == "mincut" else default_partition
    rfw, rbw = ref(copy.deepcopy(joint), None, **kw)
    # keep_annotations: PyTorch keeps naming ops (xla::name_tensor) as clones.
    fw, bw = fxremat.partition_fn(partitioner, keep_annotations=True)(copy.deepcopy(joint), None, **kw)
    assert [n.name for n in fw.graph.nodes] == [n.name for n in rfw.graph.nodes]
    assert [n.name for n in bw.graph.nodes] == [n.name for n in rbw.graph.nodes]
    assert [str(n) for n in fw.graph.output_node().args[0]] == [str(n) for n in rfw.graph.output_node().args[0]]

    program = programs.build(name)
    primals = [resolve_path(p, program.roots()) for p in facts["input_paths"]]
    primals = [p.detach() if isinstance(p, torch.Tensor) else p for p in primals]
    tangents = verify.random_tangents(joint, 3)
    with torch.no_grad():
        want = list(joint(*primals, *tangents))
        fw_out = list(fw(*primals))
        saved = fw_out[nfo:]  # AOTAutograd's contract: forward saves tensors then symints,
        n_t = sum(isinstance(x, torch.Tensor) for x in saved)  # backward takes symints first
        grads = list(bw(*saved[n_t:], *saved[:n_t], *tangents))
    for i, (g, w) in enumerate(zip(fw_out[:nfo] + grads, want)):
        if w is None:
            assert g is None, f"output {i}"
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=lambda m: f"output {i}: {m}")


class _Jagged(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, nt):
        return self.b(torch.nn.functional.gelu(self.a(nt))).values().pow(2).mean()


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize("options", [{}, {"activation_memory_budget": 0.0}], ids=["min_cut", "budget0"])
def test_jagged_nested_tensor_input(compiler, options, fresh_compile_state):
    """Note [Gradients of flattened inputs]: a jagged nested tensor input is four primals
    and a symint, and the joint graph returns a gradient per user input, not per primal."""
    def inp():
        g = torch.Generator().manual_seed(1)
        return torch.nested.nested_tensor([torch.randn(n, 8, generator=g) for n in (3, 1, 5)], layout=torch.jagged)

    torch.manual_seed(0)
    ref = _Jagged()
    m = _Jagged()
    m.load_state_dict(ref.state_dict())
    ref(inp()).backward()
    torch.compile(m, backend="fxremat", options={"compiler": compiler, **options})(inp()).backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda s: f"{name}: {s}")


def test_an_encoder_failure_names_the_node_and_may_fall_back(monkeypatch, fresh_compile_state):
    """A value the encoder fails on in an unforeseen way (as a nested int's int() did) is
    an UnsupportedGraphError naming the node, so that fallback=True can hand the graph
    to PyTorch's partitioner, instead of a bare TypeError."""
    from fxremat import _format

    real = _format._Encoder.val

    def failing(self, v, where):
        if "node 'mul" in where:
            raise TypeError("Cannot convert symbols to int")
        return real(self, v, where)

    monkeypatch.setattr(_format._Encoder, "val", failing)

    def f(x):
        return (x.sin() * 2).sum()

    x = torch.randn(4, requires_grad=True)
    with pytest.raises(Exception, match=r"node 'mul.*cannot encode it \(TypeError: Cannot convert symbols to int\)"):
        torch.compile(f, backend="fxremat", options={"compiler": "aot_eager"})(x).backward()
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="PyTorch's"):
        torch.compile(f, backend="fxremat", options={"compiler": "aot_eager", "fallback": True})(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())


def test_a_document_the_reader_refuses_may_fall_back(monkeypatch, fresh_compile_state):
    """Note [Refused joint documents]: when the C++ reader refuses the document the
    encoder wrote (a dtype the table lacked: "unknown dtype 'qint8'" before every
    dtype was in it), partition_fn raises UnsupportedGraphError with the reader's
    message, and fallback=True hands the graph to PyTorch's partitioner."""
    from fxremat import _format

    real = _format._dtype_name
    monkeypatch.setattr(_format, "_dtype_name",
                        lambda d: "float_from_the_future" if d == torch.float32 else real(d))

    def f(x):
        return (x.sin() * 2).sum()

    x = torch.randn(4, requires_grad=True)
    with pytest.raises(Exception, match=r"fxremat's reader refuses the joint graph's document: .*unknown dtype "
                                        r"'float_from_the_future'.*'fallback': True"):
        torch.compile(f, backend="fxremat", options={"compiler": "aot_eager"})(x).backward()
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="PyTorch's"):
        torch.compile(f, backend="fxremat", options={"compiler": "aot_eager", "fallback": True})(x).backward()
    torch.testing.assert_close(x.grad, 2 * x.detach().cos())
    assert "unknown dtype 'float_from_the_future'" in partition_records()[-1].fallback
    # The document handed over as Python objects (the path for values json cannot
    # write) is refused the same way.
    from fxremat._partition import partition_document
    with pytest.raises(fxremat.UnsupportedGraphError, match=r"refuses the joint graph's document: .*outside int64"):
        partition_document({"format": "fxremat.graph", "version": [1, 6], "n": 2**70, "opaque": object()},
                           "mincut", {})


class _SparseEmbedding(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(20, 8, sparse=True)
        self.l = torch.nn.Linear(8, 2)

    def forward(self, ids):
        return self.l(torch.tanh(self.e(ids))).pow(2).mean()


@pytest.mark.parametrize("options", [{"compiler": "aot_eager"}, {"compiler": "inductor"},
                                     {"compiler": "inductor", "activation_memory_budget": 0.0},
                                     {"compiler": "aot_eager", "partitioner": "default"}],
                         ids=["aot_eager", "inductor", "inductor-budget0", "default"])
def test_sparse_embedding_gradient(options, fresh_compile_state):
    """Note [Sparse values]: nn.Embedding(sparse=True)'s gradient is a sparse_coo tensor,
    an opaque value to the partitioner (it was refused, or needed fallback=True)."""
    ids = torch.tensor([[1, 2, 3], [3, 4, 19]])
    torch.manual_seed(0)
    ref = _SparseEmbedding()
    m = _SparseEmbedding()
    m.load_state_dict(ref.state_dict())
    ref(ids).backward()
    torch.compile(m, backend="fxremat", options=options)(ids).backward()
    assert m.e.weight.grad.layout == torch.sparse_coo
    torch.testing.assert_close(m.e.weight.grad.to_dense(), ref.e.weight.grad.to_dense())
    torch.testing.assert_close(m.l.weight.grad, ref.l.weight.grad)


@pytest.mark.parametrize("policy", ["dots_saveable", None])
def test_compiled_autograd_with_a_graph_break_after_a_recomputed_attention(policy):
    """Note [No recompute tags in the backward]: the backward graph kept the policy's
    recompute tags on the nodes it recomputes, an SDPA among them; compiled autograd
    inlines it, and the frame resumed after a graph break in a hook went through
    AOTAutograd's forward-loss-backward remat, which refused it: "does not support RNG
    ops in recompute regions"."""
    from torch._dynamo import compiled_autograd

    d, heads = 16, 2

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.qkv, self.o = torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return x + self.o(a.transpose(1, 2).reshape(b, t, d))

    def break_graph(g):
        torch._dynamo.graph_break()
        return g

    torch.manual_seed(0)
    model, x = Block(), torch.randn(2, 8, d)
    want = torch.autograd.grad(model(x).pow(2).mean(), list(model.parameters()))
    options = {"compiler": "aot_eager", "activation_memory_budget": 0.0} if policy is None else \
        {"compiler": "aot_eager", "policy": policy}
    compile_fn = lambda g: torch.compile(g, backend="fxremat", options=options)  # noqa: E731
    with compiled_autograd._enable(compile_fn):
        out = compile_fn(model)(x)
        out.register_hook(break_graph)
        out.pow(2).mean().backward()
    for w, p in zip(want, model.parameters()):
        torch.testing.assert_close(p.grad, w)
