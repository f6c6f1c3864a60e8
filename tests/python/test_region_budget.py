"""Region budgets (Note [Region budgets], passes/min_cut_partition.h): the budget of
torch.autograd.graph.region_activation_memory_budget and the legacy
node.meta["memory_budget"], with PyTorch's precedence and errors, through
torch.compile(backend="fxremat"), partition_fn, the format and the CLI."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest
import torch
import torch._dynamo

import fxremat
from fxremat._partition_fn import partition_records

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
region = torch.autograd.graph.region_activation_memory_budget


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x)) + x
        return x.sum()


def _compile_and_step(fn, model, x):
    torch._dynamo.reset()
    out = torch.compile(fn, backend="fxremat", options={"compiler": "aot_eager"})(model, x)
    out.backward()
    return out


def test_region_covering_the_forward_sets_the_budget():
    torch.manual_seed(0)
    model, x = Net(), torch.randn(16, 32)

    def whole(m, x):
        with region(0.0):
            return m(x)

    out = _compile_and_step(whole, model, x)
    want = copy.deepcopy(model)
    ref = want(x)
    ref.backward()
    torch.testing.assert_close(out, ref)
    for p, q in zip(model.parameters(), want.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    peak = partition_records()[-1].signature["peak"]
    assert peak["bytes"] <= peak["budget_bytes"]
    torch._dynamo.reset()
    torch.compile(lambda m, x: m(x), backend="fxremat", options={"compiler": "aot_eager"})(Net(), x).backward()
    plain = partition_records()[-1].signature["peak"]
    assert "budget_bytes" not in plain and peak["budget_bytes"] < plain["bytes"]


def test_conflicting_region_budgets_are_refused():
    def two(m, x):
        with region(0.0):
            x = m.layers[0](x)
        with region(0.5):
            x = m.layers[1](x)
        return x.sum()

    with pytest.raises(Exception, match=r"conflicting budgets within a single joint graph \(including nested subgraphs\): \[0\.0, 0\.5\]"):
        _compile_and_step(two, Net(), torch.randn(4, 32))


def test_partial_region_is_refused():
    def partial(m, x):
        with region(0.0):
            x = m.layers[0](x)
        return m.layers[1](x).sum()

    with pytest.raises(Exception, match=r"must cover the entire forward of a graph \(including HOP bodies\), but \d+ forward op\(s\) are "
                                        r"unannotated"):
        _compile_and_step(partial, Net(), torch.randn(4, 32))


def test_format_and_cli_carry_region_budgets(tmp_path):
    """The budgets travel in the format (meta memory_budget / region_memory_budget), and
    the CLI applies them: the legacy marker, then the region budget over it."""
    joint = fxremat.load(os.path.join(REPO, "testdata", "budget", "llama_4l.json.gz"))
    plain = fxremat.partition(joint).signature["peak"]["bytes"]
    marked = copy.deepcopy(joint)
    for n in marked.graph.nodes:
        if n.op == "call_function":
            n.meta.setdefault("custom", {})["_region_activation_memory_budget"] = 0.0
    first = next(n for n in marked.graph.nodes if n.op == "call_function")
    first.meta["memory_budget"] = 0.9  # legacy marker: the region budget wins over it
    path = tmp_path / "marked.json.gz"
    fxremat.save(marked, path)
    doc_nodes = fxremat._format.load_document(path)["nodes"] if hasattr(fxremat._format, "load_document") else None
    if doc_nodes is not None:
        assert any(n.get("meta", {}).get("region_memory_budget") == 0.0 for n in doc_nodes)
    again = fxremat.load(path)
    assert next(n for n in again.graph.nodes if n.op == "call_function").meta["memory_budget"] == 0.9
    out = subprocess.run([os.path.join(REPO, "build", "fxremat"), "partition", str(path), "-o", str(tmp_path / "p")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    sig = json.loads((tmp_path / "p" / "signature.json").read_text())
    smallest = fxremat.partition(joint, options={"activation_memory_budget": 0.0}).signature["peak"]
    assert sig["peak"]["budget_bytes"] == smallest["budget_bytes"] < plain
    # the legacy marker alone
    for n in marked.graph.nodes:
        n.meta.pop("custom", None)
    legacy = fxremat.partition(marked).signature["peak"]
    ninety = fxremat.partition(joint, options={"activation_memory_budget": 0.9}).signature["peak"]
    assert legacy["budget_bytes"] == ninety["budget_bytes"]
    # a partial annotation through the CLI: exit 2 with PyTorch's message
    first.meta.pop("memory_budget")
    first.meta["custom"] = {"_region_activation_memory_budget": 0.5}
    fxremat.save(marked, tmp_path / "partial.json.gz")
    bad = subprocess.run([os.path.join(REPO, "build", "fxremat"), "partition", str(tmp_path / "partial.json.gz")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "must cover the entire forward" in bad.stderr


@pytest.mark.parametrize("case", ["partial", "conflict"])
def test_region_errors_inside_a_nested_compile_region(case):
    """The body of a torch.compiler.nested_compile_region is a joint graph of its own
    (the invoke_subgraph body): its region budgets are checked as PyTorch checks them,
    with the same message."""

    @torch.compiler.nested_compile_region
    def block(x, w):
        with region(0.0):
            y = torch.tanh(x @ w)
        if case == "partial":
            return torch.sin(y @ w)
        with region(0.5):
            return torch.sin(y @ w)

    def f(x, ws):
        for w in ws:
            x = block(x, w)
        return x.sum()

    ws = [torch.randn(16, 16, requires_grad=True) for _ in range(2)]
    x = torch.randn(8, 16)
    messages = []
    for backend, options in (("aot_eager", None), ("fxremat", {"compiler": "aot_eager"})):
        torch._dynamo.reset()
        compiled = torch.compile(f, backend=backend, options=options) if options else torch.compile(f, backend=backend)
        with pytest.raises(Exception) as raised:
            compiled(x, ws).backward()
        (line,) = [ln for ln in str(raised.value).splitlines() if "region_activation_memory_budget:" in ln]
        messages.append(line.split("region_activation_memory_budget:", 1)[1].strip())
    torch._dynamo.reset()
    want, got = messages
    assert got == want
    assert ("conflicting budgets" in got) == (case == "conflict")
