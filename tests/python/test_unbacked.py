"""Data-dependent sizes (unbacked SymInts: nonzero, boolean indexing, MoE routing) in
the joint graph (Note [Unbacked symbols] in python/fxremat/_format.py)."""

from __future__ import annotations

import pytest
import torch

import fxremat


@pytest.fixture
def dynamic_output_shapes():
    import torch._dynamo.config

    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        yield


def _select_rows(x, w):
    h = torch.relu(x @ w)
    idx = (h.sum(1) > 0).nonzero().squeeze(1)
    return (h[idx].sin() ** 2).sum()


class _TinyMoE(torch.nn.Module):
    """Top-1 routing to 4 experts; each expert runs on the rows routed to it (a
    data-dependent count) and scatters its result back."""

    def __init__(self, d: int = 16, experts: int = 4):
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(d, experts)
        self.experts = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(experts))

    def forward(self, x):
        weight, choice = torch.softmax(self.router(x), -1).max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = (choice == e).nonzero().squeeze(1)
            out = out.index_add(0, rows, torch.nn.functional.gelu(expert(x[rows])) * weight[rows, None])
        return out.pow(2).mean()


def _run(fn, args, backend, options=None):
    import torch._dynamo

    torch._dynamo.reset()
    args = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    compiled = torch.compile(fn, backend=backend, options=options, fullgraph=True) if options else \
        torch.compile(fn, backend=backend, fullgraph=True)
    out = compiled(*args)
    out.backward()
    return out.detach(), [a.grad for a in args if a.requires_grad]


@pytest.mark.usefixtures("fresh_compile_state", "dynamic_output_shapes")
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_nonzero_rows_partition_like_pytorch(compiler):
    x = torch.randn(32, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    want, want_grads = _run(_select_rows, [x, w], "aot_eager")
    got, got_grads = _run(_select_rows, [x, w], "fxremat", {"compiler": compiler})
    torch.testing.assert_close(got, want)
    for g, h in zip(got_grads, want_grads):
        torch.testing.assert_close(g, h)
    rec = fxremat.partition_records()[-1]
    assert rec.fallback is None


@pytest.mark.usefixtures("fresh_compile_state", "dynamic_output_shapes")
def test_moe_routing_trains_like_eager():
    model = _TinyMoE()
    ref = _TinyMoE()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(64, 16)
    out = torch.compile(model, backend="fxremat", options={"compiler": "aot_eager"}, fullgraph=True)(x)
    out.backward()
    want = ref(x)
    want.backward()
    torch.testing.assert_close(out, want)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"{name}: {m}")
    assert fxremat.partition_records()[-1].fallback is None


@pytest.mark.usefixtures("dynamic_output_shapes")
def test_unbacked_symbols_get_a_hint_inside_their_value_range():
    """nonzero of 32 rows: at most 32, so the stand-in hint (PyTorch's fallback 8192)
    is clamped to 32; the runtime assert that binds the symbol stays in the forward."""
    x = torch.randn(32, 16, requires_grad=True)
    w = torch.randn(16, 16, requires_grad=True)
    joint = fxremat.export_joint(_select_rows, x, w)
    doc = fxremat.to_json(joint.gm, num_fwd_outputs=joint.num_fwd_outputs)
    unbacked = {k: v for k, v in doc.get("symbols", {}).items() if k.startswith("u")}
    assert unbacked and all(0 < v <= 32 for v in unbacked.values()), doc.get("symbols")
    part = fxremat.partition(joint)
    fw_targets = [n.target for n in part.forward.graph.nodes if n.op == "call_function"]
    bw_targets = [n.target for n in part.backward.graph.nodes if n.op == "call_function"]
    asserts = [t for t in fw_targets + bw_targets if "assert" in str(t) or "constrain" in str(t)]
    assert asserts and all(t in fw_targets for t in asserts), (fw_targets, bw_targets)


class _ItemSize(torch.nn.Module):
    """``.item()`` used as a size: the unbacked symbol's range is [0, int_oo] (torch's
    IntInfinity, whose int() raises AttributeError, not OverflowError)."""

    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 8)

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        return torch.tanh(self.l(x)).pow(2).mean() * (1 + torch.ones(k).sum())


class _WhileLoop(torch.nn.Module):
    """while_loop's backward reads its counter with .item(): an unbounded unbacked symbol."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.w = torch.nn.Parameter(torch.randn(16, 16) * 0.2)

    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop

        _, h = while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, torch.tanh(h @ self.w) + h),
                          (torch.tensor(0), self.a(x)))
        return h.pow(2).mean()


@pytest.mark.usefixtures("fresh_compile_state", "dynamic_output_shapes")
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize("cls,args", [(_ItemSize, (torch.randn(6, 8), torch.tensor(4))),
                                      (_WhileLoop, (torch.randn(4, 16),))], ids=["item_size", "while_loop"])
def test_unbounded_unbacked_symbols(cls, args, compiler):
    torch.manual_seed(0)
    ref = cls()
    m = cls()
    m.load_state_dict(ref.state_dict())
    ref(*args).backward()
    torch._dynamo.reset()
    torch.compile(m, backend="fxremat", options={"compiler": compiler})(*args).backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda s: f"{name}: {s}")


class _ItemScalar(torch.nn.Module):
    """A scalar read with .item() (an unbacked symbol u0) enters the backward only
    through an expression of it (u0 + 2 multiplies a tensor): the backward needs u0
    itself, as PyTorch's is_symbol_binding_fx_node has it; saved as `u0 + 2` alone,
    Inductor's generated backward named an undefined u0."""

    def __init__(self, square: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(16, 16)
        self.square = square

    def forward(self, x):
        h = self.lin(x)
        u = (h.detach().abs().sum() > 10).long().item()
        torch._check(u >= 0)
        torch._check(u <= 1)
        k = u * u + 3 if self.square else u + 2
        return ((h * k).tanh() + h.sigmoid()).pow(2).mean()


@pytest.mark.usefixtures("fresh_compile_state", "dynamic_output_shapes")
@pytest.mark.parametrize("budget", [None, 0.0])
@pytest.mark.parametrize("square", [False, True], ids=["u_plus_2", "u_squared_plus_3"])
def test_an_unbacked_symbol_reaches_the_backward_bound(square, budget):
    x = torch.randn(8, 16)
    ref, m = _ItemScalar(square), _ItemScalar(square)
    ref(x).backward()
    options = {} if budget is None else {"activation_memory_budget": budget}
    torch._dynamo.reset()
    torch.compile(m, backend="fxremat", options=options)(x).backward()
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda s: f"{name}: {s}")
    if budget is None:  # budget 0.0 reads the scalar again in the backward instead
        saved = fxremat.partition_records()[-1].signature["saved"]
        assert any(s["kind"] == "symint" and s["name"].startswith("_local_scalar_dense") for s in saved), saved
