"""torch._functorch.config and fxremat.partition_fn: the ambient min-cut knobs are
honoured (explicit options override them), knobs fxremat cannot honour are errors that
name them, the callable takes exactly PyTorch's partitioner's arguments, and the
fallback names what it drops (Note [Ambient functorch config] in _partition_fn.py).
"""

from __future__ import annotations

import copy
import inspect
import warnings

import pytest
import torch
import torch._functorch.config as functorch_config

import fxremat
from fxremat._partition_fn import _MINCUT_DEFAULTS, _UNHONOURED_CONFIG, MINCUT_OPTIONS, partition_records


pytestmark = pytest.mark.usefixtures("fresh_compile_state")


def _sin_mm(a, w):
    a = torch.sin(a)
    a = a @ w
    a = torch.cos(a)
    return torch.sigmoid(a @ w), a.sum()


@pytest.fixture(scope="module")
def joint():
    """The joint graph AOTAutograd hands a partition_fn for _sin_mm, with its keywords."""
    from functorch.compile import aot_function, make_boxed_func
    from torch._functorch.partitioners import default_partition

    got = {}

    def capture(joint, joint_inputs, **kw):
        got.update(joint=copy.deepcopy(joint), kw=kw)
        return default_partition(joint, joint_inputs, **kw)

    a, w = (torch.randn(4, 4, requires_grad=True) for _ in range(2))
    aot_function(_sin_mm, lambda gm, _: make_boxed_func(gm.forward), partition_fn=capture)(a, w)
    return got["joint"], got["kw"]


def _saved(pf, joint):
    gm, kw = joint
    fw, _ = pf(copy.deepcopy(gm), None, **kw)
    return [n.name for n in fw.graph.output_node().args[0][kw["num_fwd_outputs"]:]]


def test_cpp_defaults_are_functorchs():
    assert set(_MINCUT_DEFAULTS) == set(MINCUT_OPTIONS) - {"max_flow", "memory_budget_bytes", "budget_objective",
                                                           "recompute_flops_per_byte", "budget_milp_max_variables",
                                                           "budget_milp_max_nodes", "peak_model",
                                                           "offload_bandwidth_gbps", "device_memory_bandwidth_gbps",
                                                           "device_tflops"}
    for name, value in _MINCUT_DEFAULTS.items():
        assert functorch_config._config[name].default == value, name
    for name, (value, _, _) in _UNHONOURED_CONFIG.items():
        assert hasattr(functorch_config, name), name
        assert functorch_config._config[name].default == value, name


@pytest.mark.parametrize("config", [
    {"recompute_views": True, "aggressive_recomputation": True},
    {"cse": False},
    {"ban_recompute_materialized_backward": False},
])
def test_ambient_config_is_honoured_as_pytorch_honours_it(joint, config):
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    pf = fxremat.partition_fn()  # made outside the patch: the config is read when it is called
    with functorch_config.patch(config):
        want = _saved(min_cut_rematerialization_partition, joint)
        got = _saved(pf, joint)
    assert got == want
    assert _saved(pf, joint) == _saved(min_cut_rematerialization_partition, joint) != want


def test_explicit_options_override_ambient_config(joint):
    plain = _saved(fxremat.partition_fn(), joint)
    assert plain != ["primals_1", "primals_2"]
    with functorch_config.patch(activation_memory_budget=0.0):
        assert _saved(fxremat.partition_fn(options={"activation_memory_budget": 1.0}), joint) == plain
    # PyTorch's meaning of a budget (saved bytes) on request, over an ambient fraction
    with functorch_config.patch(activation_memory_budget=0.5):
        pf = fxremat.partition_fn(options={"activation_memory_budget": 0.0, "budget_objective": "saved"})
        assert _saved(pf, joint) == ["primals_1", "primals_2"]


@pytest.mark.parametrize("fraction", [0.0, 0.5])
def test_ambient_budget_bounds_the_peak(joint, fraction):
    """Note [Peak budget]: the ambient activation_memory_budget is a fraction of the
    range from the smallest peak to the min cut's, and the partition states its budget."""
    pf = fxremat.partition_fn()
    _saved(pf, joint)
    plain = partition_records()[-1].signature["peak"]
    assert "budget_bytes" not in plain
    with functorch_config.patch(activation_memory_budget=fraction):
        _saved(pf, joint)
    peak = partition_records()[-1].signature["peak"]
    assert peak["bytes"] <= peak["budget_bytes"] <= plain["bytes"]


def test_default_partitioner_reads_no_min_cut_knob(joint):
    from torch._functorch.partitioners import default_partition

    want = _saved(default_partition, joint)
    with functorch_config.patch(activation_memory_budget=0.5, activation_memory_budget_solver="greedy", cse=False):
        assert _saved(fxremat.partition_fn("default"), joint) == want


@pytest.mark.parametrize("partitioner,knob,value", [
    ("mincut", "_sync_decision_cross_ranks", True),
    ("mincut", "enable_activation_offloading", True),
    ("default", "enable_activation_offloading", True),
    ("default", "unsafe_allow_optimization_of_collectives", True),
])
def test_config_fxremat_cannot_honour_is_an_error_naming_it(joint, partitioner, knob, value):
    pf = fxremat.partition_fn(partitioner)
    with functorch_config.patch({knob: value}):
        with pytest.raises(ValueError, match=rf"torch\._functorch\.config\.{knob}={value!r}"):
            _saved(pf, joint)


@pytest.mark.parametrize("knob,value,match", [
    ("activation_memory_budget", 2.0, r"outside \[0, 1\]"),
    ("max_dist_from_bw", 2.5, "takes a whole number of nodes"),
])
def test_a_bad_ambient_value_is_an_error_naming_the_config(joint, knob, value, match):
    # The same value as an explicit option gives the same message without the config's name.
    pf = fxremat.partition_fn()
    with functorch_config.patch({knob: value}):
        with pytest.raises(ValueError, match=rf"torch\._functorch\.config\.{knob}={value!r} cannot be honoured: .*{match}"):
            _saved(pf, joint)
    with pytest.raises(ValueError, match=match):
        fxremat.partition_fn(options={knob: value})


def test_explicit_byte_budget_replaces_the_ambient_fraction(joint):
    """Two budgets given explicitly are refused; an ambient fraction under an explicit
    byte budget is not a second budget: the bytes bound the peak."""
    by_bytes = fxremat.partition_fn(options={"memory_budget_bytes": 1 << 40})
    min_cut = _saved(fxremat.partition_fn(), joint)
    with functorch_config.patch(activation_memory_budget=0.0):
        assert _saved(fxremat.partition_fn(), joint) != min_cut  # the ambient fraction alone matters here
        assert _saved(by_bytes, joint) == min_cut  # 1 TiB: the min cut


def test_budget_solver_knobs_do_not_matter_at_budget_one(joint):
    """PyTorch reads the knapsack's knobs only for a fractional budget."""
    plain = _saved(fxremat.partition_fn(), joint)
    with functorch_config.patch(activation_memory_budget_solver="greedy",
                                activation_memory_budget_runtime_estimator="profile"):
        assert _saved(fxremat.partition_fn(), joint) == plain


def test_backend_honours_ambient_config():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    x = torch.randn(8, 16)
    with functorch_config.patch(activation_memory_budget=0.0):
        c = torch.compile(copy.deepcopy(model), backend="fxremat", options={"compiler": "aot_eager"})
        c(x).sum().backward()
    (rec,) = partition_records()
    assert rec.signature["peak"]["bytes"] <= rec.signature["peak"]["budget_bytes"]

    torch._dynamo.reset()
    with functorch_config.patch(activation_memory_budget=0.5):
        c = torch.compile(copy.deepcopy(model), backend="fxremat", options={"compiler": "aot_eager"})
        c(x).sum().backward()
    assert partition_records()[-1].signature["peak"]["budget_bytes"] >= rec.signature["peak"]["budget_bytes"]


def test_arguments_are_pytorchs(joint):
    gm, kw = joint
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        fxremat.partition_fn()(copy.deepcopy(gm), None, bogus=1, **kw)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'num_fwd_outputs'"):
        fxremat.partition_fn()(copy.deepcopy(gm), None)
    # min_cut_rematerialization_partition takes compiler; default_partition does not ...
    fxremat.partition_fn()(copy.deepcopy(gm), None, "inductor", **kw)
    fxremat.partition_fn()(copy.deepcopy(gm), None, compiler="nvfuser", **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'compiler'"):
        fxremat.partition_fn("default")(copy.deepcopy(gm), None, compiler="inductor", **kw)
    # ... but takes static_lifetime_input_nodes
    fxremat.partition_fn("default")(copy.deepcopy(gm), None, static_lifetime_input_nodes=None, **kw)
    with pytest.raises(TypeError, match="unexpected keyword argument 'static_lifetime_input_nodes'"):
        fxremat.partition_fn()(copy.deepcopy(gm), None, static_lifetime_input_nodes=None, **kw)
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    for name, ref in (("mincut", min_cut_rematerialization_partition), ("default", default_partition)):
        ours = inspect.signature(fxremat.partition_fn(name)).parameters
        assert [(p.name, p.kind, p.default) for p in ours.values()] == \
            [(p.name, p.kind, p.default) for p in inspect.signature(ref).parameters.values()]


def _unencodable(joint):
    """The joint graph with an unused get_attr of a submodule (a higher-order op's body,
    which the format cannot encode; PyTorch's partitioner drops it as dead code)."""
    gm = copy.deepcopy(joint[0])
    gm.add_module("_body", torch.nn.Linear(1, 1))
    with gm.graph.inserting_before(gm.graph.output_node()):
        gm.graph.get_attr("_body")
    gm.recompile()
    return gm, joint[1]


def test_fallback_names_what_it_drops(joint, tmp_path):
    gm, kw = _unencodable(joint)
    pf = fxremat.partition_fn(options={"activation_memory_budget": 0.0}, policy="save_only_these_names:a,b",
                              offload_target="xla", barrier=True, dump_dir=tmp_path, fallback=True)
    with pytest.warns(UserWarning, match="using PyTorch's mincut partitioner") as record:
        fw, _ = pf(copy.deepcopy(gm), None, **kw)
    (message,) = [str(w.message) for w in record if "fxremat" in str(w.message)]
    for dropped in ("policy=save_only_these_names:a,b", "offload_target='xla'", "barrier=True", str(tmp_path)):
        assert dropped in message
    assert "activation_memory_budget" not in message  # explicit options are applied as config patches
    assert [n.name for n in fw.graph.output_node().args[0][kw["num_fwd_outputs"]:]] == ["primals_1", "primals_2"]
    assert list(tmp_path.iterdir()) == []
    assert partition_records()[-1].fallback is not None

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fxremat.partition_fn(fallback=True)(copy.deepcopy(gm), None, **kw)
    (message,) = [str(w.message) for w in record if "fxremat" in str(w.message)]
    assert "using PyTorch's mincut partitioner" in message and "drops" not in message


def test_cache_key_follows_ambient_config():
    pf = fxremat.partition_fn()
    key = pf.uuid()
    with functorch_config.patch(recompute_views=True):
        assert pf.uuid() != key
    assert pf.uuid() == key
