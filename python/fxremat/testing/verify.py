"""Numeric check of a joint graph against eager PyTorch autograd.

The joint graph runs on the program's real inputs (primals, in recorded path order) and
seeded random tangents; eager runs the program and ``torch.autograd.grad`` with the same
tangents as ``grad_outputs``. Forward outputs and gradients must agree within dtype-aware
tolerances, and every gradient the joint graph leaves out (None) must belong to an input
that does not require grad.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from .._paths import resolve_path
from .programs import Program

# (rtol, atol) per dtype
TOLERANCES = {
    torch.float64: (1e-9, 1e-11),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return TOLERANCES.get(dtype, (0.0, 0.0))


@dataclass
class Report:
    """What :func:`check_joint` compared; ``problems`` is empty when everything agreed."""

    compared_outputs: int = 0
    compared_grads: int = 0
    none_grads: int = 0
    problems: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.problems


def _facts(gm: fx.GraphModule, facts: dict | None) -> dict:
    facts = dict(facts or gm.meta.get("fxremat") or {})
    if facts.get("kind") not in (None, "joint") or "num_fwd_outputs" not in facts:
        raise ValueError("not a joint graph: need num_fwd_outputs, input_paths, output_paths, tangent_outputs")
    return facts


def placeholders_of(gm: fx.GraphModule, role: str) -> list[fx.Node]:
    """The placeholders of a joint graph with this role ("primal", "tangent"), in order."""
    from .._format import derive_role

    return [n for n in gm.graph.nodes
            if n.op == "placeholder" and (n.meta.get("fxremat_role") or derive_role(n.name, "joint")) == role]


def random_primals(gm: fx.GraphModule, seed: int = 0) -> list[Any]:
    """Seeded primals by their value facts: floats standard normal, integers where the
    graph can take them (:func:`integer_input_ranges`: the recorded value_range
    narrowed to valid indices; else {0, 1}), with the recorded strides; SymInts at
    their hint."""
    gen = torch.Generator().manual_seed(seed)
    ranges: dict | None = None  # read from the C++ library only when an integer input needs them
    out: list[Any] = []
    for n in placeholders_of(gm, "primal"):
        v = n.meta["val"]
        if not isinstance(v, torch.Tensor):
            out.append(int(v.node.hint) if isinstance(v, torch.SymInt) else int(v))
            continue
        shape = tuple(int(s) for s in v.shape)
        if v.dtype.is_floating_point or v.dtype.is_complex:
            t = torch.randn(shape, generator=gen, dtype=torch.float64).to(v.dtype)
        elif v.dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=gen).bool()
        else:
            ranges = integer_input_ranges(gm) if ranges is None else ranges
            lo, hi = ranges.get(n.name, (0, 0))
            if hi <= lo:
                lo, hi = 0, 2
            t = torch.randint(int(lo), int(hi), shape, generator=gen, dtype=v.dtype)
        strided = torch.empty_strided(shape, tuple(int(s) for s in v.stride()), dtype=v.dtype)
        out.append(strided.copy_(t))
    return out


def assert_same(got: Any, want: Any, what: str) -> None:
    """``got`` equals ``want`` (None, or a tensor of the same shape and dtype within the
    dtype's tolerance); the assertion names ``what``."""
    if want is None:
        assert got is None, f"{what}: expected None, got a value"
        return
    assert got is not None, f"{what}: got None"
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
    rtol, atol = tolerance(want.dtype)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"{what}: {m}")


def random_tangents(gm: fx.GraphModule, seed: int = 0) -> list[torch.Tensor]:
    """Seeded standard-normal tangents with the shapes/dtypes of the tangent placeholders."""
    from .._format import derive_role

    gen = torch.Generator().manual_seed(seed)
    out = []
    for n in gm.graph.nodes:
        if n.op != "placeholder" or (n.meta.get("fxremat_role") or derive_role(n.name, "joint")) != "tangent":
            continue
        v = n.meta["val"]
        t = torch.randn(tuple(int(s) for s in v.shape), generator=gen, dtype=torch.float64)
        out.append(t.to(v.dtype))
    return out


def _as_output_tree(out: Any) -> Any:
    return (out,) if pytree.tree_is_leaf(out) else out


def _compare(what: str, got: Any, want: Any, report: Report) -> None:
    if not isinstance(got, torch.Tensor) or not isinstance(want, torch.Tensor):
        if got != want:
            report.problems.append(f"{what}: {got!r} != {want!r}")
        return
    if got.shape != want.shape or got.dtype != want.dtype:
        report.problems.append(f"{what}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
        return
    rtol, atol = tolerance(want.dtype)
    if not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        err = (got.double() - want.double()).abs().max().item()
        report.problems.append(f"{what}: max abs error {err:.3g} (rtol {rtol}, atol {atol})")


def check_joint(gm: fx.GraphModule, program: Program, *, facts: dict | None = None, seed: int = 0) -> Report:
    """Run joint graph ``gm`` (``gm(*primals, *tangents)``) and compare with eager autograd."""
    facts = _facts(gm, facts)
    nfo = facts["num_fwd_outputs"]
    input_paths = facts["input_paths"]
    output_paths = facts.get("output_paths") or [None] * nfo
    tangent_outputs = facts["tangent_outputs"]
    report = Report()
    if any(p is None for p in input_paths):
        raise ValueError(f"joint graph lacks input paths: {input_paths}")

    roots = program.roots()
    primals = [resolve_path(p, roots) for p in input_paths]
    tangents = random_tangents(gm, seed)
    if len(tangents) != len(tangent_outputs):
        raise ValueError(f"{len(tangents)} tangent placeholders but {len(tangent_outputs)} tangent_outputs")

    with torch.no_grad():
        joint_out = gm(*[p.detach() if isinstance(p, torch.Tensor) else p for p in primals], *tangents)
    joint_out = list(joint_out)
    if len(joint_out) != nfo + len(primals):
        report.problems.append(f"joint graph returned {len(joint_out)} values, expected {nfo} + {len(primals)}")
        return report

    with torch.enable_grad():
        eager_tree = _as_output_tree(program())
        eager_fwd = [resolve_path(p, eager_tree) if p is not None else None for p in output_paths]
        for j, (p, want) in enumerate(zip(output_paths, eager_fwd)):
            if p is None:
                continue
            _compare(f"forward output {j} ({p})", joint_out[j], want.detach() if isinstance(want, torch.Tensor) else want, report)
            report.compared_outputs += 1
        # A mutated input's new value (AOTAutograd writes it back after the forward):
        # the eager run has mutated the input itself.
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for n, prim in zip(phs, primals):
            j = n.meta.get("fxremat_written_back_from")
            if j is not None and output_paths[j] is None:
                _compare(f"forward output {j} (the new value of {n.name})", joint_out[j], prim.detach(), report)
                report.compared_outputs += 1
        for t, j in enumerate(tangent_outputs):
            if eager_fwd[j] is None:
                raise ValueError(f"tangent {t} belongs to forward output {j}, which has no path")
        diff = [k for k, p in enumerate(primals) if isinstance(p, torch.Tensor) and p.requires_grad]
        eager_grads: list[Any] = [None] * len(primals)
        if diff and tangent_outputs:
            grads = torch.autograd.grad(
                [eager_fwd[j] for j in tangent_outputs],
                [primals[k] for k in diff],
                grad_outputs=tangents,
                allow_unused=True,
            )
            for k, gr in zip(diff, grads):
                eager_grads[k] = gr

    for k, path in enumerate(input_paths):
        got = joint_out[nfo + k]
        want = eager_grads[k]
        requires = isinstance(primals[k], torch.Tensor) and primals[k].requires_grad
        if got is None:
            report.none_grads += 1
            if requires and want is not None:
                report.problems.append(f"gradient of {path}: joint graph gives None, eager gives a gradient")
            continue
        if not requires:
            report.problems.append(f"gradient of {path}: joint graph gives one, but the input does not require grad")
            continue
        if want is None:  # unused input: eager says None, the joint graph may return zeros
            want = torch.zeros_like(primals[k])
        _compare(f"gradient of {path}", got, want, report)
        report.compared_grads += 1
    return report


def integer_input_ranges(gm: "torch.fx.GraphModule") -> dict[str, tuple[int, int]]:
    """``[low, high)`` per integer placeholder of ``gm`` where random values let the
    graph run (embedding ids below the vocabulary, class targets below the class count,
    ...), as ``fxremat verify`` draws them: the C++ rule of include/fxremat/input_ranges.h.
    ``(0, 0)`` when nothing bounds an input."""
    from .._format import to_json
    from .._partition import _extension

    facts = gm.meta.get("fxremat", {}) if isinstance(getattr(gm, "meta", None), dict) else {}
    doc = to_json(gm, kind=facts.get("kind"), constants="reference")
    return {k: (int(lo), int(hi)) for k, (lo, hi) in _extension().integer_input_ranges(doc).items()}


def capturing_backend():
    """``(joints, backend, capture)``: a ``torch.compile`` backend that records each joint
    graph AOTAutograd hands the partitioner (a deep copy, with its keyword arguments) and
    partitions it with PyTorch's min cut; ``capture`` is that partition function."""
    import copy

    from torch._functorch.aot_autograd import aot_module_simplified
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    joints: list = []

    def capture(joint, inputs, **kw):
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():  # a real constant is copied outside the fake mode
            joints.append((copy.deepcopy(joint), kw))
        return min_cut_rematerialization_partition(joint, inputs, **kw)

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=lambda g, _: g, bw_compiler=lambda g, _: g,
                                     partition_fn=capture)

    return joints, backend, capture
