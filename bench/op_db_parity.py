"""op_db parity corpus: every op of PyTorch's OpInfo database (``op_db``) whose samples
AOTAutograd can trace is partitioned by fxremat's drop-in ``partition_fn`` and by
PyTorch's ``min_cut_rematerialization_partition``; the forward outputs and the input
gradients of the two must agree.

    .venv/bin/python bench/op_db_parity.py                                  # all ops, static shapes
    .venv/bin/python bench/op_db_parity.py --ops sin,nn.functional.conv2d --samples 3
    .venv/bin/python bench/op_db_parity.py --dynamic --limit 150 --out /tmp/op_db_dynamic.md
    .venv/bin/python bench/op_db_parity.py --json /tmp/r.json --fail-on-differs

For each OpInfo (CPU, float32, ``supports_autograd``) the first ``--samples`` samples of
``op.sample_inputs("cpu", torch.float32, requires_grad=True)`` are run. The tensors of
``(sample.input, sample.args, sample.kwargs)`` are the inputs of a function ``f`` (those
that require grad are the ones differentiated; the others are inputs too, because
``aot_function`` refuses real tensors closed over); everything else is closed over. ``f`` calls the op the way PyTorch's own
gradient tests do (``op.gradcheck_wrapper`` and ``sample.output_process_fn_grad``) and
returns the tensors of the result. The loss is the sum of the floating (or complex)
outputs that require grad, each weighted by a fixed random tensor of its shape (a sum
that also sees permuted or misplaced gradients); the gradients are those of that loss
with respect to ``f``'s inputs.

Modes:

- ``static``: ``aot_function(f, nop, nop, partition_fn=P)``;
- ``dynamic`` (``--dynamic``): ``torch.compile(f, backend=aot_autograd(fw_compiler=nop,
  bw_compiler=nop, partition_fn=P), dynamic=True)``, Dynamo reset before every compile.

each with P = PyTorch's min cut and P = ``fxremat.partition_fn()``, both under the same
RNG seed, and also eager autograd (recorded only: AOTAutograd's decompositions may round
differently from eager kernels, so an eager mismatch does not classify a row).

Each (op, sample, mode) is one row, classified as

- ``equal``: outputs and gradients agree (``torch.testing.assert_close`` at the dtype's
  default tolerances, equal NaN positions equal);
- ``differs``: fxremat's outputs or gradients differ from PyTorch's, or fxremat's graphs
  raised at run time after partitioning -- a bug;
- ``fxremat_refused``: fxremat's partition_fn raised while PyTorch's partitioner succeeded
  (the exception type and the first line of its message);
- ``pytorch_failed``: PyTorch's own path raised (at or after partitioning);
- ``skipped``: no float32, no autograd, no sample, nothing differentiable, partitioner
  never called (AOTAutograd's inference path), tracing failed before partitioning on
  both paths, or the op's time limit (``--timeout``, 20 s) ran out.

An op whose outputs alias its inputs (a view op) gives AOTAutograd no joint graph; such
a sample is run again with ``f`` returning clones of the outputs (``Row.note``).

``--out`` writes a markdown report, ``--json`` the raw rows. Prints a one-line summary.
Exit status 0 (it is a report) unless ``--fail-on-differs`` is given and a ``differs``
or ``fxremat_refused`` row exists (then 1).

The per-op logic is importable (``sys.path.insert(0, "bench"); import op_db_parity``):
:func:`load_op_db`, :func:`select_ops`, :func:`run_op`, :func:`run_corpus`.
Not part of ``make test`` (the whole corpus takes many minutes); the bounded version is
tests/python/test_op_db_parity.py.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

REPO = Path(__file__).resolve().parents[1]
try:
    import fxremat  # noqa: F401
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

CLASSES = ("equal", "differs", "fxremat_refused", "pytorch_failed", "skipped")
MODES = ("static", "dynamic")
DTYPE = torch.float32
DEFAULT_TIMEOUT_S = 20
SEED = 0


@dataclass
class Row:
    """One (op, sample, mode) result."""

    op: str                      # op.name, plus ".variant_test_name" when there is one
    sample: int                  # index of the sample (-1: the op was skipped before any sample)
    mode: str                    # "static" or "dynamic"
    cls: str                     # one of CLASSES
    reason: str = ""             # why (for everything but "equal"), or what differs
    max_error: float | None = None  # max |fxremat - pytorch| over outputs and grads (both ran)
    eager: str = ""              # eager autograd comparison (informative only)
    partitions: int = 0          # partition_fn calls on the PyTorch path
    note: str = ""               # "outputs cloned" when the op's outputs alias its inputs
    seconds: float = 0.0


# --------------------------------------------------------------------------------------
# op_db
# --------------------------------------------------------------------------------------


def load_op_db() -> list:
    """``common_methods_invocations.op_db``. Its import chain (common_utils) needs the
    ``expecttest`` package, which requirements-dev.txt installs."""
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def select_ops(ops: Sequence, names: Iterable[str] | None = None, limit: int | None = None) -> list:
    """Deterministic selection: ``ops`` sorted by (name, variant_test_name); with
    ``names``, only those (a name matches ``op.name`` -- every variant -- or the full
    ``name.variant``); with ``limit`` K, every len/K-th op of that order (K ops spread
    over the alphabet)."""
    ordered = sorted(ops, key=lambda o: (o.name, o.variant_test_name))
    if names:
        wanted = {n.strip() for n in names if n.strip()}
        ordered = [o for o in ordered if o.name in wanted or op_key(o) in wanted]
        missing = wanted - {o.name for o in ordered} - {op_key(o) for o in ordered}
        if missing:
            raise SystemExit(f"op_db_parity: no OpInfo named {', '.join(sorted(missing))}")
    if limit is not None and 0 < limit < len(ordered):
        n = len(ordered)
        ordered = [ordered[(i * n) // limit] for i in range(limit)]
    return ordered


# --------------------------------------------------------------------------------------
# one sample
# --------------------------------------------------------------------------------------


class OpTimeout(BaseException):
    """The op's time limit ran out (a BaseException, so that torch's ``except Exception``
    handlers do not swallow it)."""


def _nop(gm, _example_inputs):
    return gm


class _Recorder:
    """Wraps a partition_fn: counts calls and keeps the first exception raised inside it,
    so that a failure can be placed before, in, or after partitioning."""

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        self.calls = 0
        self.error: BaseException | None = None

    def __call__(self, *args: Any, **kwargs: Any):
        self.calls += 1
        try:
            return self.fn(*args, **kwargs)
        except Exception as e:
            if self.error is None:
                self.error = e
            raise


def _pytorch_partition_fn():
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return min_cut_rematerialization_partition


def _fxremat_partition_fn():
    import fxremat

    return fxremat.partition_fn()


PARTITIONERS = {"pytorch": _pytorch_partition_fn, "fxremat": _fxremat_partition_fn}


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0].strip() if text else ""
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def _root_cause(e: BaseException) -> BaseException:
    """Dynamo wraps backend errors (BackendCompilerFailed); the original is the reason."""
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        inner = getattr(e, "inner_exception", None)
        if isinstance(inner, BaseException):
            e = inner
            continue
        break
    return e


def _clone_leaf(x):
    if isinstance(x, torch.Tensor):
        c = x.detach().clone()
        if x.requires_grad:
            c.requires_grad_(True)
        return c
    return x


class _Case:
    """A sample made into ``f(*tensors)``: every tensor leaf of (input, args, kwargs) is an
    input of ``f`` (fresh copies per run, so an op that writes into one cannot leak into
    the next run); the other leaves (numbers, strings, dtypes...) are closed over. The
    gradients are taken with respect to the inputs that require grad.

    (Tensors that do not require grad are inputs too rather than closed over:
    ``aot_function`` traces with fake tensors and refuses a real tensor it meets in a
    closure -- "Please convert all Tensors to FakeTensors first" -- and Dynamo lifts
    closed-over tensors to graph inputs anyway.)"""

    def __init__(self, op, sample) -> None:
        self.op = op
        self.sample = sample
        self.leaves, self.spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
        self.tensor_positions = [i for i, x in enumerate(self.leaves) if isinstance(x, torch.Tensor)]
        self.grad_positions = [i for i in self.tensor_positions if self.leaves[i].requires_grad]
        # Outputs that alias inputs (view ops) give AOTAutograd no joint graph to
        # partition; such a sample is run again with f returning clones of them.
        self.clone_outputs = False

    def fresh(self) -> tuple[Callable, list[torch.Tensor], list[torch.Tensor]]:
        """``f``, its inputs, and the inputs that require grad."""
        leaves = [_clone_leaf(x) for x in self.leaves]
        inputs = [leaves[i] for i in self.tensor_positions]
        grad_inputs = [leaves[i] for i in self.grad_positions]
        positions, spec, sample, clone = self.tensor_positions, self.spec, self.sample, self.clone_outputs
        fn, wrapper = self.op.get_op(), self.op.gradcheck_wrapper  # as test_ops_gradients calls them

        def f(*tensors):
            current = list(leaves)
            for i, t in zip(positions, tensors):
                current[i] = t
            inp, args, kwargs = pytree.tree_unflatten(current, spec)
            out = wrapper(fn, inp, *args, **kwargs)
            out = sample.output_process_fn_grad(out)
            outs = tuple(x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))
            return tuple(x.clone() for x in outs) if clone else outs

        return f, inputs, grad_inputs


def _differentiable(outs: Sequence[torch.Tensor]) -> list[int]:
    return [i for i, o in enumerate(outs)
            if isinstance(o, torch.Tensor) and o.requires_grad and (o.is_floating_point() or o.is_complex())]


def _weights(outs: Sequence[torch.Tensor], positions: Sequence[int]) -> dict[int, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    w = {}
    for i in positions:
        o = outs[i]
        shape = tuple(o.shape) + ((2,) if o.is_complex() else ())
        w[i] = torch.randn(shape, generator=g, dtype=torch.float64).to(o.real.dtype if o.is_complex() else o.dtype)
    return w


def _loss(outs, weights: dict[int, torch.Tensor]) -> torch.Tensor:
    total = None
    for i, w in weights.items():
        o = outs[i]
        if o.is_complex():
            o = torch.view_as_real(o.resolve_conj())
        term = (o * w).sum()
        total = term if total is None else total + term
    return total


@dataclass
class _Run:
    outs: list | None = None
    grads: list | None = None
    error: BaseException | None = None
    partition_calls: int = 0
    partition_error: BaseException | None = None
    differentiable: list[int] = field(default_factory=list)


def _execute(case: _Case, mode: str, which: str | None, weights: dict[int, torch.Tensor] | None) -> _Run:
    """One forward + backward: eager (``which`` None) or through AOTAutograd with the
    named partitioner."""
    from torch._functorch.aot_autograd import aot_function

    run = _Run()
    rec = None
    try:
        f, inputs, grad_inputs = case.fresh()
        if which is None:
            fn = f
        else:
            rec = _Recorder(PARTITIONERS[which]())
            if mode == "static":
                fn = aot_function(f, fw_compiler=_nop, bw_compiler=_nop, partition_fn=rec)
            else:
                from torch._dynamo.backends.common import aot_autograd

                torch._dynamo.reset()
                fn = torch.compile(f, backend=aot_autograd(fw_compiler=_nop, bw_compiler=_nop, partition_fn=rec),
                                   dynamic=True)
        torch.manual_seed(SEED)
        outs = list(fn(*inputs))
        run.outs = [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]
        run.differentiable = _differentiable(outs)
        w = weights if weights is not None else _weights(outs, run.differentiable)
        if run.differentiable:
            loss = _loss(outs, w)
            grads = torch.autograd.grad(loss, grad_inputs, allow_unused=True, materialize_grads=True)
            run.grads = [g.detach() for g in grads]
    except Exception as e:
        run.error = e
    finally:
        if rec is not None:
            run.partition_calls = rec.calls
            run.partition_error = rec.error
    return run


def _max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.numel() == 0:
        return 0.0
    if a.is_complex():
        a, b = torch.view_as_real(a.resolve_conj()), torch.view_as_real(b.resolve_conj())
    a64, b64 = a.double(), b.double()
    same = (a64 == b64) | (torch.isnan(a64) & torch.isnan(b64))
    diff = torch.where(same, torch.zeros_like(a64), (a64 - b64).abs())
    return float(diff.max())


def compare(got: Sequence, want: Sequence, what: str, rtol: float | None = None,
            atol: float | None = None) -> tuple[str | None, float]:
    """None if ``got`` matches ``want`` (assert_close, equal NaN positions equal), else
    the first mismatch; and the max abs error over all tensors."""
    problem = None
    worst = 0.0
    if len(got) != len(want):
        return f"{what}: {len(got)} values vs {len(want)}", float("inf")
    for i, (a, b) in enumerate(zip(got, want)):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dtype != b.dtype or a.shape != b.shape:
                problem = problem or f"{what}[{i}]: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
                worst = float("inf")
                continue
            err = _max_error(a, b) if (a.is_floating_point() or a.is_complex()) else \
                (0.0 if torch.equal(a, b) else float("inf"))
            worst = max(worst, err)
            try:
                torch.testing.assert_close(a, b, equal_nan=True, rtol=rtol, atol=atol, check_stride=False)
            except AssertionError as e:
                if problem is None:
                    problem = f"{what}[{i}]: max abs error {err:.3g} ({str(e).strip().splitlines()[0]})"
        elif a != b:
            problem = problem or f"{what}[{i}]: {a!r} vs {b!r}"
    return problem, worst


NO_JOINT = "partitioner never called (no joint graph: inference path)"
CLONED = "outputs alias inputs: compared with f returning clones of them"


def run_sample(op, sample, index: int, mode: str) -> Row:
    """One (op, sample, mode) row. Exceptions other than OpTimeout are classified. When
    the op's outputs alias its inputs (no joint graph), the sample is run again with
    clones of the outputs (``Row.note``)."""
    t0 = time.perf_counter()
    row = Row(op=op_key(op), sample=index, mode=mode, cls="skipped")
    try:
        case = _Case(op, sample)
        if not case.grad_positions:
            row.reason = "no input tensor requires grad"
            return row
        _classify(case, mode, row)
        if row.cls == "skipped" and row.reason == NO_JOINT:
            case.clone_outputs = True
            row = Row(op=op_key(op), sample=index, mode=mode, cls="skipped", note=CLONED)
            _classify(case, mode, row)
        return row
    except OpTimeout:
        raise
    except Exception as e:  # noqa: BLE001  (a harness problem: never stop the run)
        row.cls = "skipped"
        row.reason = "harness error: " + _first_line(e)
        return row
    finally:
        row.seconds = round(time.perf_counter() - t0, 3)


def _classify(case: _Case, mode: str, row: Row) -> None:
    """Runs eager, PyTorch's and fxremat's paths and fills in ``row``."""
    eager = _execute(case, mode, None, None)
    if eager.error is not None:
        # The reference itself could not run: compare the compiled paths anyway, but
        # without weights from eager outputs.
        weights = None
    elif not eager.differentiable:
        row.reason = "no differentiable output"
        return
    else:
        weights = _weights(eager.outs, eager.differentiable)

    pt = _execute(case, mode, "pytorch", weights)
    row.partitions = pt.partition_calls
    if pt.error is not None:
        fx = _execute(case, mode, "fxremat", weights)
        if pt.partition_calls == 0 and fx.partition_calls == 0 and fx.error is not None:
            row.reason = "tracing failed before partitioning: " + _first_line(_root_cause(pt.error))
        elif pt.partition_calls == 0 and fx.partition_calls == 0:
            row.reason = "PyTorch path failed before partitioning, fxremat path ran: " + \
                _first_line(_root_cause(pt.error))
        else:
            row.cls = "pytorch_failed"
            row.reason = _first_line(pt.partition_error or _root_cause(pt.error))
        return
    if pt.partition_calls == 0:
        row.reason = NO_JOINT
        return
    if weights is None and not pt.differentiable:
        row.reason = "no differentiable output"
        return

    fx = _execute(case, mode, "fxremat", weights)
    if fx.error is not None:
        if fx.partition_error is not None:
            row.cls = "fxremat_refused"
            row.reason = _first_line(fx.partition_error)
        elif fx.partition_calls:
            row.cls = "differs"
            row.reason = "fxremat's graphs raised at run time: " + _first_line(_root_cause(fx.error))
        else:
            row.cls = "differs"
            row.reason = "fxremat path raised before partitioning (PyTorch's did not): " + \
                _first_line(_root_cause(fx.error))
        return
    if fx.partition_calls != pt.partition_calls:
        row.cls = "differs"
        row.reason = f"partition_fn called {fx.partition_calls} times with fxremat, {pt.partition_calls} with PyTorch"
        return

    p_out, e_out = compare(fx.outs, pt.outs, "output")
    p_grad, e_grad = compare(fx.grads or [], pt.grads or [], "grad")
    row.max_error = max(e_out, e_grad)
    row.eager = _eager_note(eager, pt, fx)
    if p_out or p_grad:
        row.cls = "differs"
        row.reason = "; ".join(p for p in (p_out, p_grad) if p)
    else:
        row.cls = "equal"
        row.reason = "" if row.max_error == 0 else f"max abs error {row.max_error:.3g}"
    return


def _eager_note(eager: _Run, pt: _Run, fx: _Run) -> str:
    if eager.error is not None:
        return "eager failed: " + _first_line(eager.error)
    notes = []
    for name, run in (("pytorch", pt), ("fxremat", fx)):
        p1, _ = compare(run.outs, eager.outs, "output")
        p2, _ = compare(run.grads or [], eager.grads or [], "grad")
        if p1 or p2:
            notes.append(f"{name}!=eager")
    return ", ".join(notes) if notes else "match"


# --------------------------------------------------------------------------------------
# one op, the corpus
# --------------------------------------------------------------------------------------


@contextlib.contextmanager
def _time_limit(seconds: int | None):
    if not seconds or not hasattr(signal, "SIGALRM"):
        yield
        return

    def handler(signum, frame):
        raise OpTimeout()

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(int(seconds))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def _quiet():
    """No AOTAutograd cache (every compile really partitions), no warnings noise."""
    import logging

    with warnings.catch_warnings(), torch._functorch.config.patch(enable_autograd_cache=False):
        warnings.simplefilter("ignore")
        old = logging.getLogger("torch").level
        logging.getLogger("torch").setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            logging.getLogger("torch").setLevel(old)


def run_op(op, modes: Sequence[str] = ("static",), samples: int = 1,
           timeout: int | None = DEFAULT_TIMEOUT_S) -> list[Row]:
    """All rows of one OpInfo: up to ``samples`` samples x ``modes``, within ``timeout``
    seconds in all (the rest of the op is then one ``skipped`` row per mode)."""
    key = op_key(op)
    if not op.supports_autograd:
        return [Row(key, -1, m, "skipped", "no autograd") for m in modes]
    try:
        has_f32 = op.supports_dtype(DTYPE, "cpu")
    except Exception as e:  # noqa: BLE001
        return [Row(key, -1, m, "skipped", "dtypes unknown: " + _first_line(e)) for m in modes]
    if not has_f32:
        return [Row(key, -1, m, "skipped", "no float32") for m in modes]

    rows: list[Row] = []
    done: set[str] = set()
    mode_now = modes[0]
    t0 = time.perf_counter()
    try:
        with _quiet(), _time_limit(timeout):
            torch.manual_seed(SEED)
            try:
                sample_list = list(itertools.islice(op.sample_inputs("cpu", DTYPE, requires_grad=True), samples))
            except Exception as e:  # noqa: BLE001
                return [Row(key, -1, m, "skipped", "sample_inputs failed: " + _first_line(e)) for m in modes]
            if not sample_list:
                return [Row(key, -1, m, "skipped", "no sample") for m in modes]
            for mode in modes:
                mode_now = mode
                for i, sample in enumerate(sample_list):
                    rows.append(run_sample(op, sample, i, mode))
                done.add(mode)
    except OpTimeout:
        elapsed = time.perf_counter() - t0
        rows.append(Row(key, len([r for r in rows if r.mode == mode_now]), mode_now, "skipped",
                        f"time limit ({timeout} s) ran out after {elapsed:.0f} s"))
        for m in modes:
            if m not in done and m != mode_now:
                rows.append(Row(key, 0, m, "skipped", f"time limit ({timeout} s) ran out"))
    finally:
        with contextlib.suppress(Exception):
            torch._dynamo.reset()
    return rows


def run_corpus(ops: Sequence, modes: Sequence[str] = ("static",), samples: int = 1,
               timeout: int | None = DEFAULT_TIMEOUT_S, progress: Callable[[str], None] | None = None) -> list[Row]:
    rows: list[Row] = []
    t0 = time.perf_counter()
    for n, op in enumerate(ops, 1):
        t = time.perf_counter()
        try:
            got = run_op(op, modes, samples, timeout)
        except Exception as e:  # noqa: BLE001  (belt and braces: one op never stops the run)
            got = [Row(op_key(op), -1, m, "skipped", "harness error: " + _first_line(e)) for m in modes]
        rows.extend(got)
        if progress is not None:
            classes = ",".join(sorted({r.cls for r in got}))
            progress(f"[{n}/{len(ops)} {time.perf_counter() - t0:.0f}s] {op_key(op)}: {classes} "
                     f"({time.perf_counter() - t:.1f}s)")
    return rows


# --------------------------------------------------------------------------------------
# reports
# --------------------------------------------------------------------------------------


def totals(rows: Sequence[Row]) -> dict[str, collections.Counter]:
    out: dict[str, collections.Counter] = {}
    for r in rows:
        out.setdefault(r.mode, collections.Counter())[r.cls] += 1
    return out


def summary_line(rows: Sequence[Row], n_ops: int, seconds: float) -> str:
    parts = []
    for mode, c in totals(rows).items():
        parts.append(f"{mode}: " + " ".join(f"{k}={c.get(k, 0)}" for k in CLASSES))
    return f"op_db parity: {n_ops} ops, {len(rows)} rows; " + "; ".join(parts) + f"; {seconds:.0f} s"


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout.strip()
        return head + (" (dirty)" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"


def _command_line(argv: Sequence[str]) -> str:
    exe = sys.executable
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(exe)
        if not rel.startswith(".."):
            exe = rel
    script = os.path.relpath(__file__) if not os.path.relpath(__file__).startswith("..") else __file__
    return " ".join(shlex.quote(a) for a in [exe, script, *argv])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Sequence[Row], meta: dict) -> str:
    lines = [
        "# op_db parity: fxremat.partition_fn vs PyTorch's min cut",
        "",
        "Generated by `bench/op_db_parity.py`. Every OpInfo of "
        "`torch.testing._internal.common_methods_invocations.op_db` (CPU, float32, `supports_autograd`) is "
        "traced by AOTAutograd and partitioned by `fxremat.partition_fn()` and by "
        "`min_cut_rematerialization_partition`; forward outputs and input gradients must agree "
        "(`torch.testing.assert_close`, float32 defaults, equal NaN positions equal).",
        "",
        f"- command: `{meta['command']}`",
        f"- torch: {meta['torch']}",
        f"- commit: {meta['commit']}",
        f"- ops: {meta['ops']}, samples per op: {meta['samples']}, modes: {', '.join(meta['modes'])}, "
        f"time limit per op: {meta['timeout']} s",
        f"- wall time: {meta['seconds']:.0f} s",
        "",
        "## Totals (rows = op x sample x mode)",
        "",
        "| mode | " + " | ".join(CLASSES) + " | total |",
        "|---|" + "---:|" * (len(CLASSES) + 1),
    ]
    for mode, c in totals(rows).items():
        lines.append(f"| {mode} | " + " | ".join(str(c.get(k, 0)) for k in CLASSES) + f" | {sum(c.values())} |")
    cloned = collections.Counter(r.mode for r in rows if r.note == CLONED)
    if cloned:
        lines += ["", "Rows whose op returns aliases of its inputs (view ops: AOTAutograd builds no joint graph for "
                  "them) were run again with `f` returning clones of the outputs: "
                  + ", ".join(f"{n} {m}" for m, n in cloned.items()) + "."]
    bad = [r for r in rows if r.cls in ("differs", "fxremat_refused")]
    lines += ["", "## differs and fxremat_refused", ""]
    if bad:
        lines += ["| op | sample | mode | class | reason | max error |", "|---|---:|---|---|---|---:|"]
        for r in sorted(bad, key=lambda r: (r.cls, r.op, r.sample, r.mode)):
            err = "" if r.max_error is None else f"{r.max_error:.3g}"
            reason = r.reason + (f" ({r.note})" if r.note else "")
            lines.append(f"| `{r.op}` | {r.sample} | {r.mode} | {r.cls} | {_cell(reason)} | {err} |")
    else:
        lines.append("None.")
    for cls in ("pytorch_failed", "skipped"):
        grouped = collections.Counter((r.mode, r.reason) for r in rows if r.cls == cls)
        lines += ["", f"## {cls}, by reason", ""]
        if not grouped:
            lines.append("None.")
            continue
        lines += ["| count | mode | reason | ops (first 5) |", "|---:|---|---|---|"]
        for (mode, reason), count in sorted(grouped.items(), key=lambda kv: (-kv[1], kv[0])):
            ops = sorted({r.op for r in rows if r.cls == cls and r.mode == mode and r.reason == reason})
            lines.append(f"| {count} | {mode} | {_cell(reason)} | "
                         + ", ".join(f"`{o}`" for o in ops[:5]) + (" ..." if len(ops) > 5 else "") + " |")
    eager = [r for r in rows if r.cls == "equal" and r.eager not in ("", "match")]
    lines += ["", "## Informative: equal rows whose compiled result differs from eager autograd", ""]
    if eager:
        lines.append("Both partitioners agree with each other; AOTAutograd's decompositions differ from the eager "
                     "kernels (or a random op). Not a partitioner problem.")
        lines.append("")
        grouped_eager = collections.Counter((r.op, r.mode, r.eager) for r in eager)
        lines.append(", ".join(f"`{op}` ({mode}, {note}" + (f", {n} samples)" if n > 1 else ")")
                               for (op, mode, note), n in sorted(grouped_eager.items())))
    else:
        lines.append("None.")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", help="comma-separated OpInfo names (op.name, or name.variant_test_name)")
    ap.add_argument("--limit", type=int, help="K ops spread over the alphabet (every len/K-th of the sorted op_db)")
    ap.add_argument("--dynamic", action="store_true", help="dynamic shapes through torch.compile (instead of static)")
    ap.add_argument("--modes", help="comma-separated modes to run (static,dynamic); overrides --dynamic")
    ap.add_argument("--samples", type=int, default=1, help="samples per op (default 1)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S, help="seconds per op (default 20)")
    ap.add_argument("--out", help="write the markdown report here")
    ap.add_argument("--json", help="write the raw rows here")
    ap.add_argument("--fail-on-differs", action="store_true",
                    help="exit 1 if any row is differs or fxremat_refused")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-op progress lines")
    args = ap.parse_args(argv)

    modes = [m.strip() for m in args.modes.split(",")] if args.modes else ["dynamic" if args.dynamic else "static"]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (modes: {', '.join(MODES)})")

    import fxremat

    fxremat.partition_fn()  # fail early if the extension is missing
    commit = _git_commit()  # the code this run imported, before any edit during it
    ops = select_ops(load_op_db(), args.ops.split(",") if args.ops else None, args.limit)
    t0 = time.perf_counter()
    progress = None if args.quiet else (lambda s: print(s, flush=True))
    rows = run_corpus(ops, modes, args.samples, args.timeout, progress)
    seconds = time.perf_counter() - t0
    meta = {
        "command": _command_line(argv),
        "torch": torch.__version__,
        "commit": commit,
        "ops": len(ops),
        "samples": args.samples,
        "modes": modes,
        "timeout": args.timeout,
        "seconds": seconds,
        "totals": {m: dict(c) for m, c in totals(rows).items()},
    }
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(markdown(rows, meta))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"meta": meta, "rows": [asdict(r) for r in rows]}, indent=1) + "\n")
    print(summary_line(rows, len(ops), seconds), flush=True)
    if args.fail_on_differs and any(r.cls in ("differs", "fxremat_refused") for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
