"""Seeded random PyTorch programs, for differential tests of the partitioners.

>>> p = generate(7)                 # the same seed always gives the same program
>>> print(p.source())              # readable Python
>>> jg = p.export()                # its joint graph (fxremat.export_joint)
>>> write_corpus("testdata/random", count=40, seed=0)

Design
------
A program is straight-line Python over a few random-shaped float32 inputs: positional
arguments (some requiring grad, some not) or, in the *module* variant, an ``nn.Module``
whose parameters (and sometimes a buffer or a frozen parameter) are primals with paths
``params['w0']``/``buffers['b0']`` beside its arguments. The body is a seeded random
stack of

- pointwise ops: sin, cos, exp, tanh, sigmoid, relu, gelu, add/sub/mul/div (tensor with
  broadcasting, or scalar), pow (scalar or tensor exponent), where;
- matmuls: mm, ``@``, bmm (also ``a @ a^T`` attention style), matmul, linear (weights
  and biases are taken from earlier values of the right shape, or added as new inputs);
- reductions: sum, mean, amax over one or more dims, with or without keepdim;
- views: view, reshape, transpose, t, permute, unsqueeze, squeeze, expand, slicing,
  narrow, select, flatten;
- softmax, log_softmax, layer_norm (with or without affine inputs), cat, stack;
- dropout in train mode (p 0.1..0.5): random ops the partitioners must never recompute.

Every candidate line is evaluated on **meta tensors** (shapes, strides, requires_grad;
no data) as it is generated, so the shapes are tracked by PyTorch itself and a line
that does not type-check is thrown away before it is kept; the tensor sizes stay small
(at most ``MAX_NUMEL`` elements, rank <= 4). Operands are the newest value (half the
time), a value nobody uses yet, or any earlier value (long-range uses). A rough
magnitude (standard deviation) estimate per value keeps the numbers finite for standard-normal inputs:
exp/pow only take small operands, and values that grew large are squashed (tanh,
sigmoid, layer_norm, softmax, a scalar scale) first. Values left unused at the end are
folded into the outputs, so every op reaches an output and every input is used. A
program returns one or two tensors (the first, or both, may be reduced to a scalar
loss); an output is never a view or an input.

Structural choices use ``random.Random(seed)`` only (never tensor values), and the
example inputs come from a ``torch.Generator`` with the same seed, so a seed always gives
the same source text, the same joint graph and the same file bytes.
"""

from __future__ import annotations

import linecache
import math
import random
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .programs import Program

SUFFIX = ".json.gz"
MAX_NUMEL = 2048
MAX_RANK = 4
SIZES = (2, 3, 4, 5, 6, 8, 12, 16)
NAME_PREFIX = "random_"


def name_of(seed: int) -> str:
    return f"{NAME_PREFIX}{seed:04d}"


def seed_of(name: str) -> int:
    """The seed a corpus name (``random_0007``, or a file name) records."""
    stem = Path(name).name.removesuffix(SUFFIX)
    if not stem.startswith(NAME_PREFIX):
        raise ValueError(f"{name!r} is not a random program name ({NAME_PREFIX}SEED)")
    return int(stem[len(NAME_PREFIX):])


def default_dir() -> Path:
    from .testdata import TESTDATA_DIR

    return TESTDATA_DIR / "random"


# --------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------


@dataclass
class InputSpec:
    """One input: a positional argument ``xK``, a parameter ``wK`` or a buffer ``bK``."""

    name: str
    shape: tuple[int, ...]
    requires_grad: bool
    kind: str  # "arg", "param" or "buffer"

    @property
    def ref(self) -> str:
        """How the program's source refers to it."""
        return self.name if self.kind == "arg" else f"self.{self.name}"


@dataclass
class RandomProgram:
    """A generated program: source lines over ``inputs``, returning ``outputs``."""

    seed: int
    module: bool
    inputs: list[InputSpec]
    body: list[str]
    outputs: list[str]
    ops: dict[str, int] = field(default_factory=dict)  # op kind -> count, for reports

    @property
    def name(self) -> str:
        return name_of(self.seed)

    @property
    def args(self) -> list[InputSpec]:
        return [i for i in self.inputs if i.kind == "arg"]

    @property
    def num_dropouts(self) -> int:
        return self.ops.get("dropout", 0)

    def source(self) -> str:
        """The program as Python: ``def program(x0, ...)`` or ``def forward(self, x0, ...)``."""
        params = ", ".join(i.name for i in self.args)
        if self.module:
            head = f"def forward(self{', ' if params else ''}{params}):"
        else:
            head = f"def program({params}):"
        lines = [f"# {self.name}: seed {self.seed}, {'module' if self.module else 'function'} variant"]
        if self.module:
            for i in self.inputs:
                if i.kind != "arg":
                    rg = "" if i.requires_grad or i.kind == "buffer" else ", requires_grad=False"
                    lines.append(f"# self.{i.name}: {i.kind} {list(i.shape)}{rg}")
        for i in self.args:
            lines.append(f"# {i.name}: {list(i.shape)}{'' if i.requires_grad else ', no grad'}")
        lines.append(head)
        lines += [f"    {line}" for line in self.body]
        ret = self.outputs[0] if len(self.outputs) == 1 else ", ".join(self.outputs)
        lines.append(f"    return {ret}")
        return "\n".join(lines) + "\n"

    def _compile(self) -> Callable[..., Any]:
        filename = f"<{self.name}>"
        src = self.source()
        # register the text so that tracebacks and FX stack traces show the lines
        linecache.cache[filename] = (len(src), None, src.splitlines(keepends=True), filename)
        ns: dict[str, Any] = {"torch": torch, "F": F}
        exec(compile(src, filename, "exec"), ns)
        return ns["forward" if self.module else "program"]

    def example_inputs(self) -> dict[str, torch.Tensor]:
        """Seeded standard-normal values for every input, by name (global RNG untouched)."""
        gen = torch.Generator().manual_seed(self.seed)
        return {i.name: torch.randn(i.shape, generator=gen) for i in self.inputs}

    def build(self) -> Program:
        """The runnable program with its seeded example inputs."""
        fn = self._compile()
        values = self.example_inputs()
        if self.module:
            # the generated function is the class's own forward: no wrapper frame (in
            # this file) shows in the stack traces
            module = type("RandomModule", (nn.Module,), {"forward": fn, "__module__": __name__})()
            for i in self.inputs:
                if i.kind == "param":
                    module.register_parameter(i.name, nn.Parameter(values[i.name], requires_grad=i.requires_grad))
                elif i.kind == "buffer":
                    module.register_buffer(i.name, values[i.name])
            module.train()
            target: Callable[..., Any] = module
        else:
            target = fn
        args = tuple(values[i.name].requires_grad_(i.requires_grad) for i in self.args)
        return Program(name=self.name, fn=target, args=args, description=self.describe())

    def describe(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.ops.items()))
        return f"{'module' if self.module else 'function'}; {len(self.body)} lines; {kinds}"

    def export(self):
        """The joint graph (:func:`fxremat.export_joint`), stack traces made portable."""
        import fxremat

        from .testdata import portable_stack_trace

        p = self.build()
        jg = fxremat.export_joint(p.fn, *p.args, name=self.name)
        for n in jg.gm.graph.nodes:
            st = n.meta.get("stack_trace")
            if st:
                n.meta["stack_trace"] = portable_stack_trace(st)
        return jg


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------

UNARY = ("sin", "cos", "exp", "tanh", "sigmoid", "relu", "gelu")
SQUASH = ("tanh", "sigmoid", "sin", "layer_norm", "softmax", "scale")


class _Rejected(Exception):
    pass


class _Builder:
    def __init__(self, seed: int, max_ops: int | None = None) -> None:
        self.seed = seed
        self.max_ops = max_ops
        self.rng = random.Random(seed)
        self.module = self.rng.random() < 0.35
        self.inputs: list[InputSpec] = []
        self.body: list[str] = []
        self.ops: dict[str, int] = {}
        # values (inputs and computed), in creation order; all by source reference
        self.values: list[str] = []
        self.meta: dict[str, torch.Tensor] = {}
        self.scale: dict[str, float] = {}  # rough std of a value for standard-normal inputs
        self.kind: dict[str, str] = {}  # "input", "view", "compute"
        self.uses: dict[str, int] = {}
        self.self_ns = types.SimpleNamespace()
        self.n_args = self.n_params = self.n_buffers = self.n_vals = 0

    # ---- values -----------------------------------------------------------------------

    def new_input(self, shape: tuple[int, ...], *, weight: bool = False, allow_buffer: bool = True,
                  kind: str | None = None) -> str:
        """A new input; ``weight``: a matmul weight / affine input (a parameter in the
        module variant, an argument that usually requires grad otherwise)."""
        rng = self.rng
        if kind is not None:
            pass
        elif self.module and weight:
            kind = "param"
        elif self.module and allow_buffer and rng.random() < 0.12:
            kind = "buffer"
        elif self.module and not weight and rng.random() < 0.3:
            kind = "param"
        else:
            kind = "arg"
        if kind == "param":
            rg = rng.random() >= 0.1  # sometimes a frozen parameter
            name = f"w{self.n_params}"
            self.n_params += 1
        elif kind == "buffer":
            rg = False
            name = f"b{self.n_buffers}"
            self.n_buffers += 1
        else:
            rg = rng.random() < (0.8 if weight else 0.65)
            name = f"x{self.n_args}"
            self.n_args += 1
        spec = InputSpec(name=name, shape=tuple(shape), requires_grad=rg, kind=kind)
        self.inputs.append(spec)
        t = torch.empty(shape, device="meta", requires_grad=rg)
        if kind != "arg":
            setattr(self.self_ns, name, t)
        ref = spec.ref
        self.values.append(ref)
        self.meta[ref] = t
        self.scale[ref] = 1.0
        self.kind[ref] = "input"
        self.uses[ref] = 0
        return ref

    def emit(self, expr: str, scale: float, *, kind: str = "compute", op: str = "") -> str:
        """Evaluate ``expr`` on the meta values; keep it as a new line if it type-checks."""
        env: dict[str, Any] = {"torch": torch, "F": F, "self": self.self_ns}
        env.update({r: t for r, t in self.meta.items() if not r.startswith("self.")})
        try:
            with torch.enable_grad():
                t = eval(expr, env)  # noqa: S307 - our own generated text
        except (RuntimeError, IndexError, ValueError, TypeError):
            raise _Rejected(expr) from None
        if not isinstance(t, torch.Tensor) or t.numel() == 0 or t.numel() > MAX_NUMEL or t.dim() > MAX_RANK:
            raise _Rejected(expr)
        name = f"v{self.n_vals}"
        self.n_vals += 1
        self.body.append(f"{name} = {expr}")
        for r in self.meta:
            if _mentions(expr, r):
                self.uses[r] += 1
        self.values.append(name)
        self.meta[name] = t
        self.scale[name] = float(min(scale, 1e6))
        self.kind[name] = kind
        self.uses[name] = 0
        if op:
            self.ops[op] = self.ops.get(op, 0) + 1
        return name

    def pick(self, pred: Callable[[str], bool] = lambda r: True) -> str:
        """An operand: the newest value, an unused one, or any (a long-range use)."""
        cands = [r for r in self.values if pred(r)]
        if not cands:
            raise _Rejected("no operand")
        u = self.rng.random()
        if u < 0.5:
            return cands[-1]
        if u < 0.8:
            unused = [r for r in cands if self.uses[r] == 0 and self.kind[r] != "input"]
            if unused:
                return self.rng.choice(unused)
        return self.rng.choice(cands)

    def shape(self, r: str) -> tuple[int, ...]:
        return tuple(self.meta[r].shape)

    def rank(self, r: str) -> int:
        return self.meta[r].dim()

    def random_shape(self, rank: int | None = None) -> tuple[int, ...]:
        rng = self.rng
        if rank is None:
            rank = rng.choices([1, 2, 3, 4], weights=[2, 5, 3, 1])[0]
        while True:
            shape = tuple(rng.choice(SIZES) for _ in range(rank))
            if math.prod(shape) <= MAX_NUMEL // 2:
                return shape

    def compatible(self, a: str, *, same_shape: bool = False) -> list[str]:
        """Values that broadcast with ``a`` to ``a``'s shape (or to one not too big)."""
        sa = self.shape(a)
        out = []
        for r in self.values:
            if r == a:
                continue
            sb = self.shape(r)
            if same_shape:
                if sb == sa:
                    out.append(r)
                continue
            try:
                s = tuple(torch.broadcast_shapes(sa, sb))
            except RuntimeError:
                continue
            if math.prod(s) <= MAX_NUMEL and len(s) <= MAX_RANK and (s == sa or self.rng.random() < 0.5):
                out.append(r)
        return out

    def operand_like(self, a: str) -> str | None:
        """A tensor operand for a binary op with ``a``: existing, sometimes a new input."""
        cands = self.compatible(a)
        if cands and self.rng.random() < 0.85:
            recent = cands[-4:]
            return self.rng.choice(recent if self.rng.random() < 0.6 else cands)
        if self.rng.random() < 0.3:
            sa = self.shape(a)
            k = self.rng.randint(0, len(sa))
            return self.new_input(sa[k:] if sa[k:] else sa)
        return None

    # ---- ops --------------------------------------------------------------------------

    def op_unary(self, a: str | None = None, fn: str | None = None) -> str:
        rng = self.rng
        a = a or self.pick()
        s = self.scale[a]
        fn = fn or rng.choice(UNARY)
        if fn == "exp" and s > 1.5:
            fn = "tanh"
        forms = {
            "sin": (["torch.sin({a})", "{a}.sin()"], 1.0),
            "cos": (["torch.cos({a})", "{a}.cos()"], 1.0),
            "exp": (["torch.exp({a})", "{a}.exp()"], math.exp(min(s, 30.0))),
            "tanh": (["torch.tanh({a})", "{a}.tanh()"], 1.0),
            "sigmoid": (["torch.sigmoid({a})", "{a}.sigmoid()"], 1.0),
            "relu": (["torch.relu({a})", "F.relu({a})"], s),
            "gelu": (["F.gelu({a})", "F.gelu({a}, approximate='tanh')"], s),
        }
        templates, out_scale = forms[fn]
        return self.emit(rng.choice(templates).format(a=a), out_scale, op=fn)

    def op_binary(self) -> str:
        rng = self.rng
        a = self.pick()
        sa = self.scale[a]
        op = rng.choice(["add", "sub", "mul", "div"])
        b = None if rng.random() < 0.3 else self.operand_like(a)
        if b is None:
            c = rng.choice([0.5, 1.5, 2.0, 3.0, 0.25])
            form, scale = {
                "add": (rng.choice([f"{a} + {c}", f"{c} + {a}"]), sa + c),
                "sub": (rng.choice([f"{a} - {c}", f"{c} - {a}"]), sa + c),
                "mul": (rng.choice([f"{a} * {c}", f"{c} * {a}", f"torch.mul({a}, {c})"]), sa * c),
                "div": (f"{a} / {c}", sa / c),
            }[op]
            return self.emit(form, scale, op=op)
        sb = self.scale[b]
        form, scale = {
            "add": (rng.choice([f"{a} + {b}", f"torch.add({a}, {b})", f"torch.add({a}, {b}, alpha=0.5)"]), sa + sb),
            "sub": (rng.choice([f"{a} - {b}", f"torch.sub({a}, {b})"]), sa + sb),
            "mul": (rng.choice([f"{a} * {b}", f"torch.mul({a}, {b})"]), sa * sb),
            # the denominator stays >= 1
            "div": (rng.choice([f"{a} / ({b}.abs() + 1.0)", f"{a} / (torch.sigmoid({b}) + 0.5)"]), 2 * sa),
        }[op]
        return self.emit(form, scale, op=op)

    def op_pow(self) -> str:
        rng = self.rng
        a = self.pick()
        s = self.scale[a]
        u = rng.random()
        if u < 0.45 and s <= 2:
            e = rng.choice([2, 3]) if s <= 1.5 else 2
            return self.emit(rng.choice([f"{a}.pow({e})", f"{a} ** {e}", f"torch.pow({a}, {e})"]), s**e, op="pow")
        if u < 0.75:
            e = rng.choice([0.5, 1.5])
            return self.emit(f"({a}.abs() + 1.0).pow({e})", (s + 1) ** e, op="pow")
        b = self.operand_like(a)
        if b is None:
            raise _Rejected("pow")
        return self.emit(f"torch.pow({a}.abs() + 1.0, torch.tanh({b}))", s + 1, op="pow")

    def op_where(self) -> str:
        rng = self.rng
        a = self.pick()
        cond_src = self.operand_like(a) or a
        b = self.operand_like(a) if rng.random() < 0.7 else None
        other = b if b is not None else str(rng.choice([0.0, 1.0, -1.0]))
        cmp = rng.choice([f"{cond_src} > 0", f"{cond_src} < 0.5", f"{cond_src} > {a}" if cond_src != a else f"{a} > 0"])
        scale = max(self.scale[a], self.scale[b] if b else 1.0)
        return self.emit(f"torch.where({cmp}, {a}, {other})", scale, op="where")

    def weight(self, shape: tuple[int, ...]) -> str:
        """An existing value of exactly ``shape`` (half the time), else a new input."""
        cands = [r for r in self.values if self.shape(r) == shape]
        if cands and self.rng.random() < 0.5:
            return self.rng.choice(cands)
        return self.new_input(shape, weight=True)

    def op_matmul(self) -> str:
        rng = self.rng
        kind = rng.choice(["mm", "mm", "bmm", "matmul", "linear", "linear"])
        if kind == "mm":
            a = self.pick(lambda r: self.rank(r) == 2)
            m, k = self.shape(a)
            n = rng.choice(SIZES)
            reuse = [r for r in self.values if self.rank(r) == 2 and self.shape(r)[0] == k]
            w = rng.choice(reuse) if reuse and rng.random() < 0.4 else self.new_input((k, n), weight=True)
            form = rng.choice([f"torch.mm({a}, {w})", f"{a} @ {w}"])
        elif kind == "bmm":
            a = self.pick(lambda r: self.rank(r) == 3)
            bsz, m, k = self.shape(a)
            u = rng.random()
            if u < 0.35:
                w = f"{a}.transpose(1, 2)"
            else:
                reuse = [r for r in self.values if self.rank(r) == 3 and self.shape(r)[:2] == (bsz, k)]
                w = rng.choice(reuse) if reuse and u < 0.7 else self.new_input((bsz, k, rng.choice(SIZES)), weight=True)
            form = rng.choice([f"torch.bmm({a}, {w})", f"{a} @ {w}"])
        elif kind == "matmul":
            a = self.pick(lambda r: self.rank(r) >= 1)
            k = self.shape(a)[-1]
            w = self.weight((k,) if rng.random() < 0.15 else (k, rng.choice(SIZES)))
            form = f"torch.matmul({a}, {w})"
        else:
            a = self.pick(lambda r: self.rank(r) >= 1)
            k = self.shape(a)[-1]
            n = rng.choice(SIZES)
            w = self.weight((n, k))
            if rng.random() < 0.6:
                b = self.weight((n,))
                form = f"F.linear({a}, {w}, {b})"
            else:
                form = f"F.linear({a}, {w})"
            kind = "linear"
        # operand scales: the weight is the last name in the form
        k = self.shape(a)[-1]
        sw = max((self.scale[r] for r in self.meta if _mentions(form, r) and r != a), default=self.scale[a])
        return self.emit(form, self.scale[a] * sw * math.sqrt(k), op=kind)

    def op_reduce(self) -> str:
        rng = self.rng
        a = self.pick(lambda r: self.rank(r) >= 1)
        shape = self.shape(a)
        rank = len(shape)
        fn = rng.choice(["sum", "sum", "mean", "amax"])
        n_dims = 1 if rank == 1 or rng.random() < 0.7 else rng.randint(1, rank - 1)
        dims = sorted(rng.sample(range(rank), n_dims))
        keepdim = rng.random() < 0.4
        if n_dims == rank and not keepdim and rank > 0:
            keepdim = True  # keep values rank >= 1 inside the program
        dims = [d - rank if rng.random() < 0.3 else d for d in dims]
        dim = dims[0] if len(dims) == 1 and rng.random() < 0.5 else dims
        reduced = math.prod(shape[d] for d in dims)
        s = self.scale[a]
        scale = {"sum": s * math.sqrt(reduced), "mean": s, "amax": s}[fn]
        kd = f", keepdim={keepdim}" if keepdim or rng.random() < 0.3 else ""
        form = rng.choice([f"{a}.{fn}({dim}{kd})", f"torch.{fn}({a}, {dim}{kd})"])
        return self.emit(form, scale, op=fn)

    def op_view(self) -> str:
        rng = self.rng
        a = self.pick(lambda r: self.rank(r) >= 1)
        shape = self.shape(a)
        rank = len(shape)
        t = self.meta[a]
        s = self.scale[a]
        kind = rng.choice(["view", "view", "transpose", "permute", "unsqueeze", "squeeze",
                           "expand", "slice", "slice", "select", "flatten"])
        if kind == "view":
            new = _factorize(math.prod(shape), rng)
            if len(new) > 1 and rng.random() < 0.2:
                new = (-1, *new[1:])
            how = "view" if t.is_contiguous() and rng.random() < 0.7 else "reshape"
            form = f"{a}.{how}({', '.join(map(str, new))})"
            kind = how
        elif kind == "transpose":
            if rank < 2:
                raise _Rejected("transpose")
            if rank == 2 and rng.random() < 0.4:
                form = f"{a}.t()"
            else:
                d0, d1 = rng.sample(range(rank), 2)
                form = rng.choice([f"{a}.transpose({d0}, {d1})", f"torch.transpose({a}, {d0}, {d1})"])
        elif kind == "permute":
            if rank < 2:
                raise _Rejected("permute")
            perm = list(range(rank))
            while perm == sorted(perm):
                rng.shuffle(perm)
            form = f"{a}.permute({', '.join(map(str, perm))})"
        elif kind == "unsqueeze":
            d = rng.randint(0, rank)
            form = f"{a}.unsqueeze({d})"
        elif kind == "squeeze":
            ones = [d for d, n in enumerate(shape) if n == 1]
            if not ones or rank == 1:
                raise _Rejected("squeeze")
            form = f"{a}.squeeze({rng.choice(ones)})"
        elif kind == "expand":
            ones = [d for d, n in enumerate(shape) if n == 1]
            if ones:
                new = list(shape)
                for d in ones:
                    new[d] = rng.choice(SIZES)
                form = f"{a}.expand({', '.join(map(str, new))})"
            else:
                n = rng.choice(SIZES[:4])
                form = f"{a}.unsqueeze(0).expand({n}, {', '.join(['-1'] * rank)})"
        elif kind == "slice":
            d = rng.randrange(rank)
            n = shape[d]
            if n < 2:
                raise _Rejected("slice")
            start = rng.randint(0, n - 1)
            stop = rng.randint(start + 1, n)
            step = rng.choice([1, 1, 2])
            sl = f"{start}:{stop}" + (f":{step}" if step != 1 else "")
            if rng.random() < 0.25 and step == 1:
                form = f"{a}.narrow({d}, {start}, {stop - start})"
                kind = "narrow"
            else:
                form = f"{a}[{', '.join([':'] * d + [sl])}]"
        elif kind == "select":
            if rank < 2:
                raise _Rejected("select")
            d = rng.randrange(rank)
            i = rng.randrange(shape[d])
            form = f"{a}[{', '.join([':'] * d + [str(i)])}]"
        else:
            if rank < 2:
                raise _Rejected("flatten")
            form = f"{a}.flatten({rng.randrange(rank - 1)})"
        return self.emit(form, s, kind="view", op=kind)

    def op_softmax(self, a: str | None = None) -> str:
        rng = self.rng
        a = a or self.pick(lambda r: self.rank(r) >= 1)
        rank = self.rank(a)
        if rank == 0:
            raise _Rejected("softmax of a 0-d value")
        d = rng.choice([-1, rank - 1, rng.randrange(rank)])
        if rng.random() < 0.65:
            form = rng.choice([f"torch.softmax({a}, dim={d})", f"F.softmax({a}, dim={d})", f"{a}.softmax({d})"])
            return self.emit(form, 1.0, op="softmax")
        n = self.shape(a)[d]
        form = rng.choice([f"torch.log_softmax({a}, dim={d})", f"F.log_softmax({a}, dim={d})"])
        return self.emit(form, self.scale[a] + math.log(n), op="log_softmax")

    def op_layer_norm(self, a: str | None = None) -> str:
        rng = self.rng
        a = a or self.pick(lambda r: self.rank(r) >= 1)
        shape = self.shape(a)
        if not shape:
            raise _Rejected("layer_norm of a 0-d value")
        n_norm = 2 if len(shape) >= 2 and rng.random() < 0.25 else 1
        norm = shape[-n_norm:]
        affine = rng.random()
        if affine < 0.5:
            w, b = self.weight(norm), self.weight(norm)
            form = f"F.layer_norm({a}, {list(norm)}, {w}, {b})"
            scale = self.scale[w] + self.scale[b]
        elif affine < 0.7:
            w = self.weight(norm)
            form = f"F.layer_norm({a}, {list(norm)}, {w})"
            scale = self.scale[w]
        else:
            form = f"F.layer_norm({a}, {list(norm)})"
            scale = 1.0
        return self.emit(form, scale, op="layer_norm")

    def op_cat(self) -> str:
        rng = self.rng
        a = self.pick(lambda r: self.rank(r) >= 1)
        shape = self.shape(a)
        rank = len(shape)
        if rng.random() < 0.6:
            d = rng.randrange(rank)
            cands = [r for r in self.values if r != a and self.rank(r) == rank
                     and all(x == y for i, (x, y) in enumerate(zip(shape, self.shape(r))) if i != d)]
            parts = [a] + (rng.sample(cands, min(len(cands), rng.choice([1, 1, 2]))) if cands else [a])
            rng.shuffle(parts)
            d_src = d - rank if rng.random() < 0.3 else d
            form = f"torch.cat([{', '.join(parts)}], {'dim=' if rng.random() < 0.5 else ''}{d_src})"
            op = "cat"
        else:
            d = rng.randint(0, rank)
            cands = self.compatible(a, same_shape=True)
            b = rng.choice(cands) if cands else a
            form = f"torch.stack([{a}, {b}], dim={d})"
            op = "stack"
        scale = max(self.scale[r] for r in self.meta if _mentions(form, r))
        return self.emit(form, scale, op=op)

    def op_dropout(self) -> str:
        rng = self.rng
        # not on tiny tensors: two seeds would too often draw the same mask
        a = self.pick(lambda r: self.meta[r].numel() >= 16)
        p = rng.choice([0.1, 0.2, 0.25, 0.3, 0.5])
        form = rng.choice([f"F.dropout({a}, p={p}, training=True)", f"torch.dropout({a}, {p}, True)"])
        return self.emit(form, self.scale[a] / (1 - p), op="dropout")

    def op_squash(self, a: str) -> str:
        how = self.rng.choice(SQUASH)
        if how == "layer_norm":
            return self.op_layer_norm(a)
        if how == "softmax":
            return self.op_softmax(a)
        if how == "scale":
            c = float(f"{1.0 / self.scale[a]:.2g}")
            return self.emit(f"{a} * {c}", self.scale[a] * c, op="mul")
        return self.op_unary(a, how)

    # ---- driver -----------------------------------------------------------------------

    OPS = (
        ("op_unary", 20), ("op_binary", 20), ("op_pow", 4), ("op_where", 4), ("op_matmul", 12),
        ("op_reduce", 7), ("op_view", 16), ("op_softmax", 4), ("op_layer_norm", 3), ("op_cat", 5),
        ("op_dropout", 3),
    )

    def step(self) -> None:
        rng = self.rng
        names, weights = zip(*self.OPS)
        for _ in range(50):
            big = [r for r in self.values[-6:] if self.scale[r] > 20 and self.kind[r] != "input"]
            snapshot = (len(self.inputs), len(self.values))
            try:
                if big and rng.random() < 0.8:
                    self.op_squash(big[-1])
                else:
                    getattr(self, rng.choices(names, weights)[0])()
                return
            except _Rejected:
                self.rollback(*snapshot)
        raise RuntimeError(f"seed {self.seed}: no op could be generated")  # pragma: no cover

    def rollback(self, n_inputs: int, n_values: int) -> None:
        """Forget the inputs a rejected op added (the op itself emitted nothing)."""
        for spec in self.inputs[n_inputs:]:
            ref = spec.ref
            for table in (self.meta, self.scale, self.kind, self.uses):
                del table[ref]
            if spec.kind != "arg":
                delattr(self.self_ns, spec.name)
            if spec.kind == "param":
                self.n_params -= 1
            elif spec.kind == "buffer":
                self.n_buffers -= 1
            else:
                self.n_args -= 1
        del self.inputs[n_inputs:]
        del self.values[n_values:]

    def build(self) -> RandomProgram:
        rng = self.rng
        n_ops = int(round(math.exp(rng.uniform(math.log(2), math.log(55)))))
        if self.max_ops is not None:  # drawn all the same: the rest of the stream is unchanged
            n_ops = min(n_ops, self.max_ops)
        # initial inputs: at least one that requires grad
        n_first = rng.randint(1, 3)
        for _ in range(n_first):
            self.new_input(self.random_shape(), allow_buffer=False)
        if not any(i.requires_grad for i in self.inputs):
            first = self.inputs[0]
            first.requires_grad = True
            self.meta[first.ref].requires_grad_(True)
        if self.module and self.n_params == 0 and rng.random() < 0.5:
            self.new_input(self.random_shape(), weight=True)
        if self.module and rng.random() < 0.4:  # a buffer (running statistics, a mask, ...)
            self.new_input(self.random_shape(), kind="buffer")
        # the first op reads a grad-requiring input, so that the program has a gradient
        start = next(i.ref for i in self.inputs if i.requires_grad)
        self.op_unary(start)
        for _ in range(n_ops - 1):
            self.step()
        return self.finish()

    def finish(self) -> RandomProgram:
        rng = self.rng
        last = self.values[-1]
        if self.kind[last] != "compute":
            last = self.op_unary(last)
        outputs = [last]
        if rng.random() < 0.3:  # a scalar loss
            outputs[0] = self.emit(rng.choice([f"{last}.pow(2).mean()", f"{last}.sum()", f"{last}.mean()"]),
                                   self.scale[last], op="loss")
        # everything nobody uses (inputs included) is folded into a second output, or the first
        leftovers = [r for r in self.values if self.uses[r] == 0 and r not in outputs and r != last]
        if leftovers:
            terms = [f"{r}.sum()" if rng.random() < 0.7 else f"{r}.mean()" for r in leftovers]
            if rng.random() < 0.35:  # one output: the leftovers are added to it
                outputs[0] = self.emit(f"{outputs[0]} + ({' + '.join(terms)}) * 0.125", self.scale[outputs[0]],
                                       op="fold")
            else:
                expr = " + ".join(terms) if len(terms) > 1 else f"{terms[0]} * 1.0"
                outputs.append(self.emit(expr, 1.0, op="fold"))
        elif rng.random() < 0.3:
            try:
                a = self.pick(lambda r: self.kind[r] != "input" and r not in outputs)
                outputs.append(self.op_unary(a, rng.choice(["tanh", "sigmoid", "sin"])))
            except _Rejected:
                pass
        if not any(self.meta[o].requires_grad for o in outputs):  # pragma: no cover - start has grad
            raise RuntimeError(f"seed {self.seed}: no output requires grad")
        # args first as positional parameters; order them by name (x0, x1, ...)
        return RandomProgram(seed=self.seed, module=self.module, inputs=list(self.inputs),
                             body=list(self.body), outputs=outputs, ops=dict(sorted(self.ops.items())))


def _mentions(expr: str, ref: str) -> bool:
    """Whether ``expr`` names ``ref`` as a whole token."""
    import re

    return re.search(rf"(?<![\w.]){re.escape(ref)}(?!\w)", expr) is not None


def _factorize(n: int, rng: random.Random) -> tuple[int, ...]:
    """A random shape (rank 1..4) with ``n`` elements."""
    primes = []
    m, p = n, 2
    while m > 1:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    rank = rng.randint(1, min(MAX_RANK, max(1, len(primes))))
    dims = [1] * rank
    for q in primes:
        dims[rng.randrange(rank)] *= q
    return tuple(dims)


def generate(seed: int, max_ops: int | None = None) -> RandomProgram:
    """The random program of ``seed`` (deterministic); ``max_ops`` caps the number of
    ops drawn (small, fast programs for the soak test, tests/python/test_soak.py)."""
    return _Builder(seed, max_ops).build()


# --------------------------------------------------------------------------------------
# Checks and corpus
# --------------------------------------------------------------------------------------


def check_against_eager(program: RandomProgram, jg, *, rng_seed: int = 0) -> list[str]:
    """Run the joint graph and eager autograd on the example inputs (``torch.manual_seed``
    before each, so that dropout draws the same masks); returns the problems found."""
    from . import verify

    p = program.build()
    roots = p.roots()
    from .._paths import resolve_path

    primals = [resolve_path(path, roots) for path in jg.input_paths]
    tangents = verify.random_tangents(jg.gm, seed=rng_seed + 1)
    problems: list[str] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(rng_seed)
        with torch.no_grad():
            got = list(jg.gm(*[t.detach() for t in primals], *tangents))
        torch.manual_seed(rng_seed)
        with torch.enable_grad():
            out = p()
    outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    nfo = jg.num_fwd_outputs
    if len(outs) != nfo:
        return [f"{len(outs)} eager outputs, joint graph has {nfo}"]
    for j, (g, w) in enumerate(zip(got[:nfo], outs)):
        _close(f"output {j}", g, w.detach(), problems)
    diff = [k for k, t in enumerate(primals) if t.requires_grad]
    if diff and jg.tangent_outputs:
        grads = torch.autograd.grad([outs[j] for j in jg.tangent_outputs], [primals[k] for k in diff],
                                    grad_outputs=tangents, allow_unused=True)
        for k, gr in zip(diff, grads):
            g = got[nfo + k]
            if g is None:
                if gr is not None:
                    problems.append(f"gradient of {jg.input_paths[k]}: None in the joint graph")
            else:  # an unused input: eager says None, the joint graph may give zeros
                _close(f"gradient of {jg.input_paths[k]}", g, gr if gr is not None else torch.zeros_like(g), problems)
    for o in got:
        if isinstance(o, torch.Tensor) and not torch.isfinite(o).all():
            problems.append("non-finite values in the joint graph's outputs")
            break
    return problems


def _close(what: str, got: torch.Tensor, want: torch.Tensor, problems: list[str]) -> None:
    from .verify import tolerance

    if got.shape != want.shape:
        problems.append(f"{what}: shape {list(got.shape)} != {list(want.shape)}")
        return
    rtol, atol = tolerance(want.dtype)
    if not torch.allclose(got, want, rtol=rtol * 10, atol=atol * 10, equal_nan=True):
        err = (got.double() - want.double()).abs().max().item()
        problems.append(f"{what}: max abs error {err:.3g}")


def file_bytes(program: RandomProgram) -> tuple[bytes, Any]:
    """The exact bytes of ``program``'s corpus file, and its joint graph."""
    import tempfile

    jg = program.export()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{program.name}{SUFFIX}"
        jg.save(path)
        return path.read_bytes(), jg


def write_program(seed: int, out: Path | str, *, check: bool = True) -> dict:
    """Generate, export (and check numerically) program ``seed``; write it to ``out``."""
    program = generate(seed)
    data, jg = file_bytes(program)
    problems = check_against_eager(program, jg) if check else []
    if problems:
        raise RuntimeError(f"{program.name}: joint graph disagrees with eager: {problems}")
    path = Path(out) / f"{program.name}{SUFFIX}"
    path.write_bytes(data)
    return _row(program, jg, len(data))


def _row(program: RandomProgram, jg, size: int) -> dict:
    return {
        "file": f"{program.name}{SUFFIX}",
        "seed": program.seed,
        "variant": "module" if program.module else "function",
        "nodes": len(jg.gm.graph.nodes),
        "primals": len(jg.input_paths),
        "outputs": jg.num_fwd_outputs,
        "dropouts": program.num_dropouts,
        "bytes": size,
    }


def readme(rows: list[dict], seed: int, count: int) -> str:
    lines = [
        "# testdata/random",
        "",
        "Joint graphs of seeded random programs (python/fxremat/testing/random_programs.py),",
        "for the differential test tests/python/test_differential.py. Generated, do not edit:",
        "",
        "```sh",
        f".venv/bin/python tools/random_programs.py --out testdata/random --count {count} --seed {seed}",
        ".venv/bin/python tools/random_programs.py --show SEED    # a program's source",
        "```",
        "",
        "The file name records the program's seed. Same seed, same bytes.",
        "",
        "| file | seed | variant | nodes | primals | outputs | dropouts | bytes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{r['file']}` | {r['seed']} | {r['variant']} | {r['nodes']} | {r['primals']} | "
                     f"{r['outputs']} | {r['dropouts']} | {r['bytes']} |")
    total = sum(r["bytes"] for r in rows)
    nodes = [r["nodes"] for r in rows]
    if rows:
        lines += ["", f"{len(rows)} programs, {min(nodes)}..{max(nodes)} nodes, {total} bytes in all."]
    lines.append("")
    return "\n".join(lines)


def write_corpus(out: Path | str, *, count: int, seed: int, check: bool = True,
                 log: Callable[[str], None] | None = None) -> list[dict]:
    """Programs ``seed .. seed + count - 1`` into ``out`` (plus README.md)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for s in range(seed, seed + count):
        row = write_program(s, out, check=check)
        rows.append(row)
        if log:
            log(f"wrote {row['file']}: {row['nodes']} nodes, {row['primals']} primals, {row['bytes']} bytes")
    (out / "README.md").write_text(readme(rows, seed, count))
    return rows


def corpus_files(directory: Path | str | None = None) -> list[Path]:
    d = Path(directory) if directory is not None else default_dir()
    return sorted(d.glob(f"{NAME_PREFIX}*{SUFFIX}"))


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="random_programs.py",
        description="Write a deterministic corpus of random programs' joint graphs "
                    "(files NAME.json.gz, seeds SEED .. SEED+COUNT-1, and README.md).")
    ap.add_argument("--out", default=None, help="output directory (default: testdata/random)")
    ap.add_argument("--count", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0, help="seed of the first program")
    ap.add_argument("--show", type=int, metavar="SEED", help="print the source of program SEED and exit")
    ap.add_argument("--check", action="store_true",
                    help="compare the corpus in --out with what the generator produces; write nothing")
    ap.add_argument("--no-eager-check", action="store_true", help="skip the joint-vs-eager numeric check")
    ns = ap.parse_args(argv)

    if ns.show is not None:
        sys.stdout.write(generate(ns.show).source())
        return 0
    out = Path(ns.out) if ns.out else default_dir()
    if ns.check:
        stale = []
        for s in range(ns.seed, ns.seed + ns.count):
            program = generate(s)
            path = out / f"{program.name}{SUFFIX}"
            data, _ = file_bytes(program)
            ok = path.exists() and path.read_bytes() == data
            print(f"{'ok   ' if ok else 'STALE'} {path}")
            if not ok:
                stale.append(str(path))
        return 1 if stale else 0
    rows = write_corpus(out, count=ns.count, seed=ns.seed, check=not ns.no_eager_check, log=print)
    nodes = [r["nodes"] for r in rows]
    print(f"{len(rows)} programs, {min(nodes)}..{max(nodes)} nodes, {sum(r['bytes'] for r in rows)} bytes")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
