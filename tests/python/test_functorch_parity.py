"""Divergences from torch/_functorch/partitioners.py closed by issue 9, end to end.

Each rule also has a golden test of its pass (tests/golden/); these run the real
programs through torch.compile / partition_fn and compare with eager and PyTorch.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import fxremat


def _dropout_in_checkpoint(x, w):
    g = lambda x: F.dropout(torch.sin(x @ w), 0.5, training=True).cos()  # noqa: E731
    return torch.utils.checkpoint.checkpoint(g, x, use_reentrant=False)


def _grads(fn, x0, w0):
    x = x0.clone().requires_grad_()
    w = w0.clone().requires_grad_()
    torch.manual_seed(0)
    fn(x, w).sum().backward()
    return x.grad, w.grad


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
def test_random_op_in_a_checkpoint_region_is_not_replayed(partitioner, fresh_compile_state):
    """The default partition used to re-run dropout in the backward (new mask, wrong
    gradients); both partitioners now save its results."""
    from torch._dynamo.backends.common import aot_autograd

    torch.manual_seed(1)
    x0, w0 = torch.randn(64, 32), torch.randn(32, 32)
    want = _grads(_dropout_in_checkpoint, x0, w0)
    backend = aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                           partition_fn=fxremat.partition_fn(partitioner))
    got = _grads(torch.compile(_dropout_in_checkpoint, backend=backend, fullgraph=True), x0, w0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_partition_fn_uncalled_is_the_default_min_cut(fresh_compile_state):
    """partition_fn=fxremat.partition_fn (the factory itself, as a user passing
    PyTorch's min_cut_rematerialization_partition would write it) partitions like
    partition_fn(); other stray keywords are still a TypeError."""
    from torch._dynamo.backends.common import aot_autograd

    def f(x, w):
        return torch.tanh(x @ w).sin()

    torch.manual_seed(1)
    x0, w0 = torch.randn(8, 16), torch.randn(16, 16)
    want = _grads(f, x0, w0)
    n0 = len(fxremat.partition_records())
    backend = aot_autograd(fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                           partition_fn=fxremat.partition_fn)
    got = _grads(torch.compile(f, backend=backend, fullgraph=True), x0, w0)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert [r.partitioner for r in fxremat.partition_records()[n0:]] == ["mincut"]
    with pytest.raises(TypeError, match="num_fwd_outputs"):
        fxremat.partition_fn("mincut", num_fwd_outputs=1)


def test_unknown_recompute_tag_is_an_error():
    import torch.fx as fx

    from fxremat._format import to_json

    g = fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(2)
    y = g.call_function(torch.ops.aten.sin.default, (x,))
    y.meta.update(val=torch.empty(2), recompute="SAVE_PLEASE")
    g.output((y,))
    with pytest.raises(fxremat.UnsupportedGraphError, match="not a CheckpointPolicy"):
        to_json(fx.GraphModule(torch.nn.Module(), g))


def test_out_of_range_static_lifetime_index_is_an_error():
    from fxremat.testing import testdata

    gm = fxremat.load(testdata.path_of("sin_mm"))
    nfo = gm.meta["fxremat"]["num_fwd_outputs"]
    with pytest.raises(ValueError, match=r"static_lifetime_input_indices: index 7 is out of range of the graph's 2"):
        fxremat.partition_fn()(gm, None, num_fwd_outputs=nfo, static_lifetime_input_indices=[0, 7])


def test_default_partition_falls_back_to_mincut_on_a_non_functional_graph_with_tags(repo_root):
    """As PyTorch: checkpoint tags + an in-place op on an intermediate -> min cut, with
    a warning that says so."""
    from fxremat._format import from_json

    text = (repo_root / "tests" / "golden" / "default_partition.test").read_text()
    case = [c for c in text.split("// -----") if "not functional" in c][0]
    graph_text = "\n".join(line for line in case.splitlines() if not line.startswith("//"))
    doc = __import__("json").loads(fxremat._partition._extension().to_json(graph_text))
    gm = from_json(doc)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fw, _ = fxremat.partition_fn("default")(gm, None, num_fwd_outputs=1)
    assert any("falls back" in str(w.message) for w in record)
