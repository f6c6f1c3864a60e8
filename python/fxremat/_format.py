"""Reader and writer of the fxremat graph format (docs/format.md, version 1.1).

``save``/``to_json`` turn any ``torch.fx.GraphModule`` whose nodes carry ``meta["val"]``
into the JSON document; ``load``/``from_json`` rebuild a runnable GraphModule with the same
nodes, names, targets and arguments, and with ``meta["val"]`` rebuilt as fake tensors.
"""

from __future__ import annotations

import base64
import functools
import gzip
import importlib
import io
import json
import keyword
import math
import os
import re
import sys
import zlib
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from ._errors import FormatError, UnsupportedGraphError

FORMAT_NAME = "fxremat.graph"
# written; a reader accepts any 1.x (1.3: complex constants; 1.4: subgraphs, operator
# arguments; 1.5: the stack-trace table)
VERSION = (1, 7)
# Tensor constants up to this many bytes are written inline; larger ones go to the
# safetensors sidecar when the writer has a file (docs/format.md, "constants").
INLINE_CONSTANT_BYTES = 64 * 1024
KINDS = ("joint", "forward", "backward", "plain")
ROLES = ("primal", "tangent", "fwd_rng", "bwd_rng", "saved", "input")
NODE_OPS = ("placeholder", "call_function", "get_attr", "output")
PARTITIONER_TAGS = ("is_forward", "is_backward", "must_be_in_forward", "must_be_in_backward")

# Python callables a file may name as a call_function target, by module. Anything else
# is refused by both the writer and the reader (a file must not be able to name, say,
# os.system). SymInt arithmetic in FX graphs uses these.
_PY_TARGET_MODULES = ("_operator", "operator", "math")
_PY_TORCH_TARGETS = (
    "sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sum",
    "_sym_sqrt",
)

# Ops that are not in a stock PyTorch and that fxremat knows how to provide.
def _xla_provider(name: str) -> Callable[[], None]:
    def provide() -> None:
        from . import xla_compat

        xla_compat.register_op(name)

    return provide


def _register_checkpoint_name() -> None:
    from . import _names  # noqa: F401  (importing it registers the op)


def _register_offload_ops() -> None:
    from . import _offload_ops  # noqa: F401  (importing it registers the torch_async target's ops)


_OP_PROVIDERS: dict[str, Callable[[], None]] = {
    **{f"xla.{name}.default": _xla_provider(name)
       for name in ("name_tensor", "offload_name", "place_to_host", "place_to_device", "optimization_barrier")},
    "fxremat.checkpoint_name.default": _register_checkpoint_name,
    **{f"fxremat.{name}.default": _register_offload_ops for name in ("offload", "reload", "wait_tensor")},
}


# --------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------


def derive_role(name: str, kind: str) -> str:
    """The placeholder role the format derives from a name when ``role`` is absent."""
    if kind == "plain":
        return "input"
    if "tangents" in name:
        return "tangent"
    if "fwd_seed" in name or "fwd_base_offset" in name:
        return "fwd_rng"
    if "bwd_seed" in name or "bwd_base_offset" in name:
        return "bwd_rng"
    return {"joint": "primal", "forward": "primal", "backward": "saved"}[kind]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


_TARGET_STR: dict[Any, str] = {}  # OpOverload -> its name: str() costs microseconds


def target_to_str(target: Any, node_name: str = "?") -> str:
    """``aten.mm.default`` for OpOverloads, ``module.qualname`` for Python callables."""
    if isinstance(target, torch._ops.OpOverload):
        s = _TARGET_STR.get(target)
        if s is None:
            s = _TARGET_STR[target] = str(target)
        return s
    if isinstance(target, torch._ops.OpOverloadPacket):
        raise UnsupportedGraphError(
            f"node {node_name!r}: target {target} is an overload packet, not an overload; "
            "AOTAutograd graphs name overloads (e.g. aten.mm.default)"
        )
    if isinstance(target, torch._ops.HigherOrderOperator):
        # Note [Higher-order ops] (include/fxremat/ir.h): "higher_order.NAME"
        name = target.name()
        if getattr(torch.ops.higher_order, name, None) is not target:
            raise UnsupportedGraphError(
                f"node {node_name!r}: higher-order operator {name!r} is not registered as "
                f"torch.ops.higher_order.{name}")
        return f"higher_order.{name}"
    mod = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None)
    if callable(target) and mod and qual:
        s = f"{mod}.{qual}"
        try:
            ok = resolve_target(s) is target
        except FormatError:
            ok = False
        if not ok:
            raise UnsupportedGraphError(
                f"node {node_name!r}: Python callable target {s!r} is not one the format "
                f"allows (modules {', '.join(_PY_TARGET_MODULES)} and torch.sym_* only)"
            )
        return s
    raise UnsupportedGraphError(f"node {node_name!r}: unsupported target {target!r}")


def resolve_target(s: str) -> Any:
    """Inverse of :func:`target_to_str`. Raises FormatError for unknown targets."""
    if not isinstance(s, str) or not s:
        raise FormatError(f"target must be a non-empty string, got {s!r}")
    head, _, rest = s.partition(".")
    if head in _PY_TARGET_MODULES:
        if not rest.isidentifier():
            raise FormatError(f"unknown Python target {s!r}")
        mod = importlib.import_module(head)
        fn = getattr(mod, rest, None)
        if fn is None or not callable(fn):
            raise FormatError(f"unknown Python target {s!r}")
        return fn
    if head == "torch" and rest in _PY_TORCH_TARGETS:
        return getattr(torch, rest)
    if head == "higher_order":
        hop = getattr(torch.ops.higher_order, rest, None) if rest.isidentifier() else None
        if not isinstance(hop, torch._ops.HigherOrderOperator):
            raise FormatError(f"unknown higher-order operator {s!r}")
        return hop
    parts = s.split(".")
    if len(parts) != 3 or not all(p.isidentifier() for p in parts):
        raise FormatError(
            f"unknown operator {s!r}: expected 'namespace.name.overload' or an allowed "
            "Python callable such as '_operator.getitem'"
        )
    provider = _OP_PROVIDERS.get(s)
    if provider is not None:
        provider()
    ns, name, overload = parts
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        op = getattr(packet, overload)
    except (AttributeError, RuntimeError) as e:
        raise FormatError(f"unknown operator {s!r} (not registered with PyTorch: {e})") from None
    if not isinstance(op, torch._ops.OpOverload):
        raise FormatError(f"unknown operator {s!r}: resolves to {type(op).__name__}")
    return op


# --------------------------------------------------------------------------------------
# Writer
# --------------------------------------------------------------------------------------


def packet_tag_names(op: torch._ops.OpOverload) -> list[str]:
    """Sorted union of the ``torch.Tag`` names over every overload of ``op``'s packet.

    For ``aten.add.Tensor``: the tags of all of ``torch.ops.aten.add``'s overloads. This
    is what torch/_functorch/partitioners.py's ``pointwise_ops()`` looks at: an
    OpOverloadPacket is pointwise when any of its overloads has ``Tag.pointwise``.
    """
    packet = op.overloadpacket
    names = {tag.name for tag in op.tags}
    for overload in packet.overloads():
        try:
            other = getattr(packet, overload)
        except (AttributeError, RuntimeError):  # listed but not resolvable: no tags to add
            continue
        names.update(tag.name for tag in other.tags)
    return sorted(names)


@functools.lru_cache(maxsize=None)
def _op_facts(op: torch._ops.OpOverload) -> dict:
    """An op's facts for the document's op table, computed once per process: the
    packet's tag union walks every overload, which cost a third of partition_fn's time
    on small graphs."""
    return {
        "schema": str(op._schema),
        "tags": [tag.name for tag in op.tags],
        "packet_tags": packet_tag_names(op),
    }


def _storage_ref(t: torch.Tensor) -> Any:
    """The address of ``t``'s storage (what ``StorageWeakRef(t.untyped_storage()).cdata``
    is: equal for tensors that alias one storage, as torch/_functorch/compile_utils.py's
    fx_graph_cse compares them), or None when the storage cannot be queried. The
    encoder keeps each storage alive while it encodes (_Encoder._storage_refs), so no
    address is reused; without the weak-reference object, which cost a third of
    encoding a tensor."""
    try:
        storage = t.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return None
    return storage


class _Encoder:
    def __init__(self) -> None:
        self.symbols: dict[str, int] = {}
        # storage key -> id, numbered 0, 1, 2, ... in order of first appearance. Keys are
        # ("storage", StorageWeakRef.cdata) for tensors and ("file", id) for ids copied
        # from a loaded file; the weak references are kept alive in _storage_refs so that
        # no storage address is reused while encoding.
        self.storages: dict[tuple[str, int], int] = {}
        self._storage_refs: list[Any] = []
        # A symbolic graph repeats a few expressions (s0, 16*s0, ...) in every shape and
        # stride: each is printed (SymPy's printer is slow) and hinted once.
        self._dim_cache: dict[Any, Any] = {}

    def storage_id(self, key: tuple[str, int]) -> int:
        sid = self.storages.get(key)
        if sid is None:
            sid = self.storages[key] = len(self.storages)
        return sid

    def copied_val(self, v: Any) -> Any:
        """Value facts a loaded graph kept as JSON (``meta["fxremat_val"]``), with storage
        ids renumbered into this document's numbering."""
        if isinstance(v, dict):
            out = {k: self.copied_val(x) for k, x in v.items()}
            if v.get("kind") == "tensor" and _is_int(v.get("storage")):
                out["storage"] = self.storage_id(("file", v["storage"]))
            return out
        if isinstance(v, list):
            return [self.copied_val(x) for x in v]
        return v

    # ---- arguments ------------------------------------------------------------------
    def arg(self, a: Any, where: str) -> Any:
        if isinstance(a, fx.Node):
            return {"node": a.name}
        if a is None or isinstance(a, (bool, str)):
            return a
        if isinstance(a, int):
            return int(a)
        if isinstance(a, float):
            return _enc_float(a)
        if isinstance(a, complex):  # a complex scalar (polar's backward multiplies by 1j)
            return {"complex": [_enc_float(a.real), _enc_float(a.imag)]}
        if isinstance(a, (list, tuple)):
            return [self.arg(x, f"{where}[{i}]") for i, x in enumerate(a)]
        if isinstance(a, dict) and all(isinstance(k, str) for k in a):
            # a dict with string keys (flex_attention's kernel_options), in order (format 1.6)
            return {"dict": [[k, self.arg(v, f"{where}[{k!r}]")] for k, v in a.items()]}
        if isinstance(a, torch.dtype):
            return {"dtype": _dtype_name(a)}
        if isinstance(a, torch.device):
            return {"device": str(a)}
        if isinstance(a, torch.layout):
            return {"layout": str(a).removeprefix("torch.")}
        if isinstance(a, torch.memory_format):
            return {"memory_format": str(a).removeprefix("torch.")}
        if isinstance(a, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
            # an operator as a value: auto_functionalized's mutable op, with_effects' op
            return {"op": target_to_str(a, where)}
        raise UnsupportedGraphError(
            f"{where}: argument of type {type(a).__module__}.{type(a).__qualname__} "
            f"({a!r}) cannot be encoded in the fxremat format"
        )

    # ---- value facts ----------------------------------------------------------------
    def _sym_expr(self, s: Any, where: str) -> str:
        node = s.node
        expr = node.expr
        shape_env = getattr(node, "shape_env", None)
        for sym in sorted(expr.free_symbols, key=str):
            name = str(sym)
            if name in self.symbols:
                continue
            hint = None
            if shape_env is not None:
                table = getattr(shape_env, "backed_var_to_val", None)
                if table is None:
                    table = shape_env.var_to_val
                hint = table.get(sym)
            try:
                hint = int(hint) if hint is not None else None
            except (TypeError, ValueError):  # no integer value: a jagged tensor's nested int (j1)
                hint = None
            if hint is None:
                hint = _unbacked_hint(sym, shape_env)
            self.symbols[name] = int(hint)
        return str(expr)

    def expr_hint(self, d: Any) -> int:
        """The hint of a compound symbolic expression, from the symbols table (which
        holds the unbacked symbols' stand-in hints too)."""
        shape_env = d.node.shape_env
        # torch 2.13 deprecates size_hint (a FutureWarning per call) for
        # guarding_hint_or_throw, which older versions lack; both read the hint
        # without adding a guard, and raise on an unbacked symbol.
        hint_of = getattr(shape_env, "guarding_hint_or_throw", None) or shape_env.size_hint
        try:
            return int(hint_of(d.node.expr))
        except Exception:  # an unbacked symbol in it: substitute the table's hints
            import sympy

            subs = {sym: self.symbols[str(sym)] for sym in d.node.expr.free_symbols if str(sym) in self.symbols}
            value = sympy.sympify(d.node.expr).xreplace({k: sympy.Integer(v) for k, v in subs.items()})
            return int(value)

    def dim(self, d: Any, where: str) -> Any:
        if isinstance(d, torch.SymInt):
            c = d.node.maybe_as_int()
            if c is not None:
                return int(c)
            key = d.node.expr
            cached = self._dim_cache.get(key)
            if cached is not None:
                return dict(cached)
            expr = self._sym_expr(d, where)
            if expr in self.symbols:  # a bare symbol: its hint is in the symbols table
                out = {"sym": expr}
            else:
                # A compound expression (16*s77) carries its own hint: readers need not
                # evaluate SymPy to size the tensor.
                out = {"sym": expr, "hint": self.expr_hint(d)}
            self._dim_cache[key] = out
            return dict(out)
        return int(d)

    def val(self, v: Any, where: str) -> Any:
        if isinstance(v, torch.Tensor):
            if v.layout != torch.strided:
                # Note [Sparse values]: a sparse tensor (nn.Embedding(sparse=True)'s
                # gradient) is a value the partitioner passes along without sizing it,
                # as an opaque one; one that would have to cross into the backward is
                # refused there (C++ saves tensors and symints only).
                return {"kind": "opaque", "type": f"torch.Tensor.{str(v.layout).removeprefix('torch.')}"}
            facts = {
                "kind": "tensor",
                "dtype": _dtype_name(v.dtype),
                "shape": [self.dim(d, where) for d in v.shape],
                "stride": [self.dim(d, where) for d in v.stride()],
                "device": str(v.device),
                "requires_grad": bool(v.requires_grad),
            }
            ref = _storage_ref(v)
            if ref is not None:
                self._storage_refs.append(ref)
                facts["storage"] = self.storage_id(("storage", ref._cdata))
            return facts
        if isinstance(v, torch.SymInt):
            c = v.node.maybe_as_int()
            if c is not None:
                return {"kind": "const", "value": int(c)}
            return {"kind": "symint", "expr": self._sym_expr(v, where)}
        if isinstance(v, torch.SymFloat):
            return {"kind": "symfloat", "expr": self._sym_expr(v, where)}
        if isinstance(v, torch.SymBool):
            return {"kind": "symbool", "expr": self._sym_expr(v, where)}
        if v is None:
            return {"kind": "none"}
        if isinstance(v, (bool, int)):
            return {"kind": "const", "value": v if isinstance(v, bool) else int(v)}
        if isinstance(v, float):
            return {"kind": "const", "value": _enc_float(v)}
        if isinstance(v, (list, tuple)):
            return {"kind": "tuple", "items": [self.val(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if _is_opaque_input(v):  # Note [Opaque inputs] (include/fxremat/partition.h)
            return {"kind": "opaque", "type": type(v).__name__}
        raise UnsupportedGraphError(
            f"{where}: meta['val'] of type {type(v).__module__}.{type(v).__qualname__} "
            "cannot be encoded"
        )


def _is_opaque_input(v: Any) -> bool:
    """An object a joint graph passes along without looking into it: AOTAutograd's
    BackwardState (the hooks compiled autograd runs in the backward), or a script or
    opaque object such as the DeviceMesh a DTensor flattens to (Note [Saved opaque
    objects] in _partition_fn.py), as AOTAutograd's is_opaque_node tells them."""
    from torch.fx.experimental._backward_state import BackwardState

    if isinstance(v, BackwardState):
        return True
    from torch._library.fake_class_registry import FakeScriptObject

    if isinstance(v, (torch.ScriptObject, FakeScriptObject)):
        return True
    try:
        from torch._library.opaque_object import is_opaque_value
    except ImportError:  # an older torch: no opaque values
        return False
    return bool(is_opaque_value(v))


def in_process_target(target: Any, node_name: str = "?") -> str:
    """The format's name of a call target, or, for a Python callable it cannot name
    (a closure Dynamo made, such as the hook trampoline compiled autograd traces), a
    dotted name only a document that never leaves the process carries
    (``in_process.<module>.<qualname>``): the graphs built from the document take the
    joint node's own target."""
    try:
        return target_to_str(target, node_name)
    except UnsupportedGraphError:
        if isinstance(target, (torch._ops.OpOverloadPacket,)) or not callable(target):
            raise
        mod = getattr(target, "__module__", None) or "unknown"
        qual = getattr(target, "__qualname__", None) or type(target).__name__
        parts = [p if p.isidentifier() else "_" for p in re.split(r"[.<>]+", f"{mod}.{qual}") if p]
        return "in_process." + ".".join(parts)


def _create_symbol_named(shape_env: Any, name: str, hint: int, source: Any, dynamic_dim: Any) -> Any:
    """A size symbol for the file's ``name`` (``s33``), made by ``shape_env`` so that it
    is called ``name`` too: torch names a symbol by a hash of its source, so a loaded
    and saved graph would otherwise have its symbols renamed (s33 -> s89). The name is
    chosen through the ShapeEnv's id generator, for this one call; where that is not
    possible (another form of name, its id taken, a torch without the generator) the
    symbol keeps torch's name, which is still correct, only not the file's."""
    match = re.fullmatch(r"s(\d+)", name)
    wanted = int(match.group(1)) if match else None
    ids = getattr(shape_env, "unique_ids", None)
    if wanted is None or not isinstance(ids, set) or wanted in ids or not hasattr(shape_env, "_generate_unique_id"):
        return shape_env.create_symbol(hint, source=source, dynamic_dim=dynamic_dim)

    def generate(_source_name: str) -> int:
        ids.add(wanted)
        return wanted

    shape_env._generate_unique_id = generate  # an instance attribute: this ShapeEnv only
    try:
        return shape_env.create_symbol(hint, source=source, dynamic_dim=dynamic_dim)
    finally:
        del shape_env._generate_unique_id


def _unbacked_hint(sym: Any, shape_env: Any) -> int:
    """Note [Unbacked symbols]: a data-dependent size (nonzero, boolean indexing, MoE
    routing) has no hint. Sizes and costs use PyTorch's stand-in,
    ``torch._inductor.config.unbacked_symint_fallback`` (what its partitioner's
    size hints fall back to), clamped into the symbol's value range (so ``nonzero`` of
    32 rows counts at most 32). The graph keeps the runtime asserts that bind the
    symbol where they are (they are never recomputed)."""
    fallback = 8192
    try:
        import torch._inductor.config as inductor_config

        fallback = int(inductor_config.unbacked_symint_fallback)
    except Exception:  # noqa: BLE001 -- Inductor unavailable: PyTorch's default
        pass
    lower, upper = 0, None
    ranges = getattr(shape_env, "var_to_range", {}) if shape_env is not None else {}
    vr = ranges.get(sym)
    if vr is not None:
        # An unbounded end is sympy's oo or torch's int_oo, whose int() raises
        # TypeError, OverflowError or AttributeError (IntInfinity has no _mpf_).
        try:
            lower = int(vr.lower)
        except Exception:  # noqa: BLE001 -- -oo, -int_oo
            lower = 0
        try:
            upper = int(vr.upper)
        except Exception:  # noqa: BLE001 -- oo, int_oo
            upper = None
    hint = max(fallback, lower)
    if upper is not None:
        hint = min(hint, upper)
    return max(hint, 0)


def _enc_float(x: float) -> Any:
    if math.isnan(x):
        return {"float": "nan"}
    if math.isinf(x):
        return {"float": "inf" if x > 0 else "-inf"}
    return float(x)


def _placeholders(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def _tangent_target(desc: Any) -> Any:
    """The output descriptor a tangent's input descriptor names: ``TangentAOTInput(output=X)``
    is X's tangent; ``SubclassGetAttrAOTInput(base=<tangent of X>, attr=a)`` (an inner
    tensor of a tensor-subclass tangent) is the tangent of ``SubclassGetAttrAOTOutput(X, a)``,
    the matching inner tensor of the flattened output. None when it names none."""
    if desc is None:
        return None
    if type(desc).__name__ == "SubclassGetAttrAOTInput":
        base = _tangent_target(getattr(desc, "base", None))
        if base is None:
            return None
        try:
            from torch._functorch._aot_autograd.descriptors import SubclassGetAttrAOTOutput
        except ImportError:
            return None
        return SubclassGetAttrAOTOutput(base=base, attr=desc.attr)
    return getattr(desc, "output", None)


def _infer_tangent_outputs(graph: fx.Graph, num_fwd_outputs: int) -> list[int] | None:
    """From AOTAutograd's input/output descriptors (meta["desc"]), when they are there
    (None otherwise: the C++ reader then maps tangents by position, Note [Tangents
    without descriptors] in src/ir.cpp)."""
    out = graph.output_node()
    out_descs = out.meta.get("desc")
    if not isinstance(out_descs, (list, tuple)):
        return None
    result = []
    for n in _placeholders(graph):
        desc = n.meta.get("desc")
        if "tangents" not in n.name:
            continue
        if type(desc).__name__ == "BackwardTokenAOTInput":  # Note [Effect tokens]: no output's
            result.append(-1)
            continue
        target = _tangent_target(desc)
        if target is None:
            return None
        matches = [i for i, d in enumerate(out_descs[:num_fwd_outputs]) if d == target]
        if len(matches) != 1:
            return None
        result.append(matches[0])
    return result


def effect_tokens(graph: fx.Graph) -> list[fx.Node]:
    """The effect-token inputs of a joint graph (AOTAutograd's ForwardTokenAOTInput;
    without descriptors, a primal whose only readers are with_effects calls taking it
    as their token). Note [Effect tokens]: a token is a forward input with no gradient;
    AOTAutograd's joint graph returns no gradient slot for it, the format returns None
    there, and the built backward drops that slot again."""
    tokens = []
    for n in _placeholders(graph):
        desc = n.meta.get("desc")
        if desc is not None:
            if type(desc).__name__ == "ForwardTokenAOTInput":
                tokens.append(n)
            continue
        if "tangents" in n.name or not n.users:
            continue
        if all(u.op == "call_function" and u.target is torch.ops.higher_order.with_effects and u.args
               and u.args[0] is n for u in n.users):
            tokens.append(n)
    return tokens


def _joint_primals(graph: fx.Graph) -> list[fx.Node]:
    return [n for n in _placeholders(graph) if derive_role(n.name, "joint") == "primal"
            and n.meta.get("fxremat_role", "primal") == "primal"]


def gradient_slots(graph: fx.Graph, num_fwd_outputs: int) -> list[int | None] | None:
    """Note [Gradients of flattened inputs]: for each primal, the position among the joint
    graph's gradient outputs of its gradient (None: it has none), when the joint graph
    does not return one gradient per primal and AOTAutograd's descriptors say which is
    whose; else None. A tensor-subclass input (a jagged nested tensor) is flattened into
    several primals (SubclassGetAttrAOTInput), and a symint input is a primal, while the
    gradient outputs follow the user's inputs (GradAOTOutput(grad_of=PlainAOTInput(i)),
    None where an input has no gradient). The format returns one gradient per primal
    (None for the others), and the built backward returns AOTAutograd's slots again."""
    out = graph.output_node()
    outs = out.args[0] if out.args else None
    descs = out.meta.get("desc")
    if not isinstance(outs, (list, tuple)) or not isinstance(descs, (list, tuple)) or len(descs) != len(outs):
        return None
    if effect_tokens(graph):
        return None  # Note [Effect tokens] lays those out
    primals = _joint_primals(graph)
    grads = list(range(int(num_fwd_outputs), len(outs)))
    if len(grads) == len(primals):
        return None
    where = {}
    for j, p in enumerate(primals):
        d = p.meta.get("desc")
        if d is None:
            return None
        where[_input_key(d)] = j
    slots: list[int | None] = [None] * len(primals)
    for k, i in enumerate(grads):
        d, v = descs[i], outs[i]
        if v is None:
            continue
        key = _gradient_key(d)
        j = where.get(key) if key is not None else None
        if j is None or slots[j] is not None:
            return None  # a gradient that is no primal's: leave the graph as it is (refused later)
        slots[j] = k
    return slots


def _input_key(d: Any) -> Any:
    """A joint input's descriptor as a key that _gradient_key can name too: a
    tensor-subclass input's flattened parts (SubclassGetAttrAOTInput, e.g. a DTensor
    parameter's ``_local_tensor`` and ``device_mesh``) by their base and attribute."""
    if type(d).__name__ == "SubclassGetAttrAOTInput":
        return ("attr", _input_key(d.base), d.attr)
    return d


def _gradient_key(d: Any) -> Any:
    """The _input_key of the input a gradient output is (part of) the gradient of, or
    None: GradAOTOutput(grad_of=X) is X's; a flattened tensor-subclass gradient
    (SubclassGetAttrAOTOutput(base=GradAOTOutput(grad_of=X), attr=A), a DTensor
    gradient's local tensor and mesh) is the part A of X's."""
    kind = type(d).__name__
    if kind == "GradAOTOutput":
        return _input_key(d.grad_of)
    if kind == "SubclassGetAttrAOTOutput":
        base = _gradient_key(d.base)
        return None if base is None else ("attr", base, d.attr)
    return None


def with_token_gradients(outs: Sequence[Any], num_fwd_outputs: int, graph: fx.Graph) -> list[Any]:
    """``outs`` with a None gradient for each effect token (Note [Effect tokens]),
    when the joint graph returns one gradient per non-token primal; else unchanged."""
    tokens = set(effect_tokens(graph))
    outs = list(outs)
    if not tokens:
        return outs
    primals = _joint_primals(graph)
    # the backward's own tokens come after the gradients
    bw_tokens = sum(1 for n in _placeholders(graph) if type(n.meta.get("desc")).__name__ == "BackwardTokenAOTInput")
    if len(outs) != num_fwd_outputs + len(primals) - len(tokens) + bw_tokens:
        return outs
    grads = iter(outs[num_fwd_outputs:len(outs) - bw_tokens])
    return (outs[:num_fwd_outputs] + [None if p in tokens else next(grads) for p in primals]
            + outs[len(outs) - bw_tokens:])


def mutated_inputs(graph: fx.Graph) -> dict[fx.Node, int | None]:
    """The placeholders the program mutates (Note [Mutated inputs] in
    passes/protect_mutations.h), each with the forward output AOTAutograd writes back
    into it after the forward (None when unknown). AOTAutograd's
    ``InputMutationAOTOutput`` descriptors name them; a loaded or exported graph marks
    them ``meta["fxremat_mutated"]`` / ``meta["fxremat_written_back_from"]``."""
    phs = _placeholders(graph)
    out: dict[fx.Node, int | None] = {n: n.meta.get("fxremat_written_back_from")
                                      for n in phs if n.meta.get("fxremat_mutated")}
    out_descs = graph.output_node().meta.get("desc")
    if isinstance(out_descs, (list, tuple)):
        try:
            from torch._functorch._aot_autograd.descriptors import InputMutationAOTOutput
        except ImportError:  # an older torch: no descriptors
            return out
        targets = [(j, d.mutated_input) for j, d in enumerate(out_descs) if isinstance(d, InputMutationAOTOutput)]
        if targets:
            for n in phs:
                desc = n.meta.get("desc")
                for j, t in targets:
                    if desc is not None and desc == t:
                        out[n] = j
    return out


def to_json(
    gm: fx.GraphModule,
    *,
    num_fwd_outputs: int | None = None,
    kind: str | None = None,
    input_paths: Sequence[str | None] | dict[str, str] | None = None,
    output_paths: Sequence[str | None] | None = None,
    tangent_outputs: Sequence[int] | None = None,
    name: str | None = None,
    constants: str = "data",
) -> dict:
    """The fxremat JSON document (a dict) for ``gm``. See :func:`save`.

    ``constants``: how the tensors ``get_attr`` nodes read are written: ``"data"``
    (their bytes, base64, in ``doc["constants"]``) or ``"reference"`` (their facts only:
    the caller keeps the tensors; in process, where nothing is serialized). Other
    objects (script objects, opaque values) can only be carried by reference."""
    if constants not in ("data", "reference"):
        raise ValueError(f"constants must be 'data' or 'reference', not {constants!r}")
    if not isinstance(gm, fx.GraphModule):
        raise TypeError(f"expected a torch.fx.GraphModule, got {type(gm).__name__}")
    graph = gm.graph
    facts = gm.meta.get("fxremat", {}) if isinstance(getattr(gm, "meta", None), dict) else {}
    if kind is None:
        kind = "joint" if num_fwd_outputs is not None else facts.get("kind", "plain")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "joint":
        if num_fwd_outputs is None:
            num_fwd_outputs = facts.get("num_fwd_outputs")
        if num_fwd_outputs is None:
            raise ValueError("a joint graph needs num_fwd_outputs")
        if input_paths is None:
            input_paths = facts.get("input_paths")
        if output_paths is None:
            output_paths = facts.get("output_paths")
        if tangent_outputs is None:
            tangent_outputs = facts.get("tangent_outputs")
        if tangent_outputs is None:
            tangent_outputs = _infer_tangent_outputs(graph, num_fwd_outputs)
    if name is None:
        name = facts.get("name")

    phs = _placeholders(graph)
    roles = {n: n.meta.get("fxremat_role") or derive_role(n.name, kind) for n in phs}
    primals = [n for n in phs if roles[n] == "primal"]
    # paths a loaded graph carries on its placeholders, unless input_paths says otherwise
    paths: dict[fx.Node, str] = {n: n.meta["fxremat_path"] for n in phs if n.meta.get("fxremat_path")}
    if input_paths is not None:
        paths = {}
        if isinstance(input_paths, dict):
            by_name = {n.name: n for n in primals}
            for k, p in input_paths.items():
                if k not in by_name:
                    raise ValueError(f"input_paths names {k!r}, which is not a primal placeholder")
                if p is not None:
                    paths[by_name[k]] = p
        else:
            input_paths = list(input_paths)
            if len(input_paths) != len(primals):
                raise ValueError(
                    f"input_paths has {len(input_paths)} entries for {len(primals)} primals"
                )
            for n, p in zip(primals, input_paths):
                if p is not None:
                    paths[n] = p

    out_node = graph.output_node()
    outs = out_node.args[0] if out_node.args else None
    # A plain graph may return one value itself (format 1.6): the subgraphs of
    # flex_attention (score_mod, mask_mod) return a tensor, not a tuple.
    single_output = kind == "plain" and isinstance(outs, fx.Node)
    returns_list = kind == "plain" and isinstance(outs, list)  # flex_attention_backward's joint subgraph
    if single_output:
        outs = (outs,)
    if not isinstance(outs, (list, tuple)):
        raise UnsupportedGraphError(
            "output node: the graph must return a tuple or list of values "
            f"(got {type(outs).__name__}); wrap a single result in a tuple"
        )

    if kind == "joint":
        outs = with_token_gradients(outs, int(num_fwd_outputs), graph)
        slots = gradient_slots(graph, int(num_fwd_outputs))
        if slots is not None:  # Note [Gradients of flattened inputs]
            nfo = int(num_fwd_outputs)
            outs = list(outs[:nfo]) + [None if k is None else outs[nfo + k] for k in slots]

    doc: dict[str, Any] = {"format": FORMAT_NAME, "version": list(VERSION)}
    if name is not None:
        doc["name"] = str(name)
    doc["kind"] = kind
    if returns_list:
        doc["returns_list"] = True
    if kind == "joint":
        nfo = int(num_fwd_outputs)
        if not 0 <= nfo <= len(outs):
            raise ValueError(f"num_fwd_outputs={nfo} but the graph has {len(outs)} outputs")
        joint: dict[str, Any] = {"num_fwd_outputs": nfo}
        if output_paths is not None:
            output_paths = list(output_paths)
            if len(output_paths) != nfo:
                raise ValueError(f"output_paths has {len(output_paths)} entries for {nfo} forward outputs")
            joint["output_paths"] = [None if p is None else str(p) for p in output_paths]
        if tangent_outputs is not None:
            tangent_outputs = [int(i) for i in tangent_outputs]
            ntan = sum(1 for n in phs if roles[n] == "tangent")
            if len(tangent_outputs) != ntan:
                raise ValueError(f"tangent_outputs has {len(tangent_outputs)} entries for {ntan} tangents")
            if any(not (0 <= i < nfo or i == -1) for i in tangent_outputs):
                raise ValueError(f"tangent_outputs {tangent_outputs} out of range of {nfo} forward outputs")
            joint["tangent_outputs"] = tangent_outputs
        doc["joint"] = joint

    mutated = mutated_inputs(graph) if kind == "joint" else {}
    constant_entries: dict[str, dict] = {}
    subgraph_entries: dict[str, dict] = {}
    enc = _Encoder()
    ops: dict[str, dict] = {}
    nodes = []
    # Placeholders first: AOTAutograd adds a backward effect token's input
    # (tangents_token) after other nodes; a placeholder reads nothing, so moving it
    # up keeps every reference defined before its use, and the format wants inputs first.
    ordered = phs + [n for n in graph.nodes if n.op != "placeholder"]
    for node in ordered:
        where = f"node {node.name!r}"
        entry: dict[str, Any] = {"name": node.name, "op": node.op}
        if node.op == "placeholder":
            entry["target"] = str(node.target)
            entry["role"] = roles[node]
            if node in paths:
                entry["path"] = paths[node]
            if node.args:
                raise UnsupportedGraphError(f"{where}: placeholders with default values are not supported")
        elif node.op == "call_function":
            t = target_to_str(node.target, node.name) if constants != "reference" else \
                in_process_target(node.target, node.name)
            entry["target"] = t
            if isinstance(node.target, torch._ops.OpOverload) and t not in ops:
                ops[t] = dict(_op_facts(node.target))
        elif node.op == "output":
            entry["target"] = "output"
            for i, o in enumerate(outs):
                if o is not None and not isinstance(o, fx.Node):
                    raise UnsupportedGraphError(
                        f"output node: output {i} is {o!r}; only node references and None are supported"
                    )
        elif node.op == "get_attr":
            entry["target"] = str(node.target)
            sub = _get_attr(gm, node.target)
            if isinstance(sub, fx.GraphModule):
                # Note [Higher-order ops]: a subgraph a higher-order op runs, as a
                # nested document of its own
                if str(node.target) not in subgraph_entries:
                    subgraph_entries[str(node.target)] = _subgraph_document(sub, where, constants)
            elif node.target not in constant_entries:
                constant_entries[str(node.target)] = _encode_constant(enc, gm, node, where, constants)
        else:
            raise UnsupportedGraphError(f"{where}: node op {node.op!r} is not supported")

        if node.op == "output":
            entry["args"] = [enc.arg(outs[0] if single_output else list(outs), f"{where} args[0]")]
        else:
            if node.args:
                entry["args"] = [enc.arg(a, f"{where} args[{i}]") for i, a in enumerate(node.args)]
            if node.kwargs:
                entry["kwargs"] = {k: enc.arg(v, f"{where} kwargs[{k!r}]") for k, v in node.kwargs.items()}

        if node.op == "get_attr" and str(node.target) in subgraph_entries:
            pass  # a subgraph has no value facts
        elif node.op == "get_attr":
            if constant_entries[str(node.target)].get("opaque") is None:
                entry["meta"] = _encode_meta(enc, node, where, val=constant_entries[str(node.target)]["val"])
        elif node.op != "output":
            try:
                entry["meta"] = _encode_meta(enc, node, where)
            except (UnsupportedGraphError, ValueError):
                raise
            except Exception as e:  # noqa: BLE001 -- a value the encoder does not know (a nested int had no int())
                # As any other graph it cannot encode: named, and a fallback to PyTorch's
                # partitioner where the caller allows one.
                raise UnsupportedGraphError(f"{where} meta['val']: cannot encode it ({type(e).__name__}: {e})") from e
            if node in mutated:
                entry["meta"]["mutated"] = True
                if mutated[node] is not None:
                    entry["meta"]["written_back_from"] = int(mutated[node])
        nodes.append(entry)

    if enc.symbols:
        doc["symbols"] = {k: enc.symbols[k] for k in sorted(enc.symbols)}
    doc["ops"] = {k: ops[k] for k in sorted(ops)}
    if constant_entries:
        doc["constants"] = {k: constant_entries[k] for k in sorted(constant_entries)}
    if subgraph_entries:
        doc["subgraphs"] = {k: subgraph_entries[k] for k in sorted(subgraph_entries)}
    # Format 1.5 (Note [Stack-trace table] in src/json_io.cpp): each distinct trace
    # once, in the order nodes first use it; nodes name it by stack_trace_index.
    traces: dict[str, int] = {}
    for entry in nodes:
        meta = entry.get("meta")
        if meta is not None and "stack_trace" in meta:
            meta["stack_trace_index"] = traces.setdefault(meta.pop("stack_trace"), len(traces))
    if traces:
        doc["stack_traces"] = list(traces)
    doc["nodes"] = nodes
    return doc


def _subgraph_document(sub: fx.GraphModule, where: str, constants: str) -> dict:
    """The nested document of a higher-order op's subgraph: a plain graph without
    ``format`` and ``version`` (the enclosing document's apply)."""
    try:
        doc = to_json(sub, kind="plain", constants=constants)
    except UnsupportedGraphError as e:
        raise UnsupportedGraphError(f"{where}: in its subgraph: {e}") from None
    doc.pop("format", None)
    doc.pop("version", None)
    doc.pop("name", None)
    return doc


def _tensor_bytes(t: torch.Tensor) -> bytes:
    """The elements of ``t``, little-endian, contiguous in row-major order."""
    if t.is_quantized:
        # Its integers alone would read back without the scale and zero point.
        raise UnsupportedGraphError(f"a quantized tensor constant ({t.dtype}) cannot be written to a graph file "
                                    "(in process, torch.compile and partition_fn carry it by reference)")
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return b""
    return t.view(torch.uint8).numpy().tobytes()


def _encode_constant(enc: "_Encoder", gm: fx.GraphModule, node: fx.Node, where: str, mode: str) -> dict:
    """The ``constants`` entry for what ``node`` (a get_attr) reads."""
    obj = _get_attr(gm, node.target)
    if isinstance(obj, torch.nn.Module):
        raise UnsupportedGraphError(
            f"{where}: get_attr of the submodule {node.target!r} ({type(obj).__name__}): the format holds a "
            "higher-order operator's subgraphs (GraphModules), not other modules")
    if not isinstance(obj, torch.Tensor):
        if mode == "reference" and obj is not None:
            return {"opaque": f"{type(obj).__module__}.{type(obj).__qualname__}"}
        raise UnsupportedGraphError(
            f"{where}: get_attr of {node.target!r} ({type(obj).__name__}) cannot be encoded: the format holds tensor "
            "constants only (other objects are carried by reference in process)")
    from torch._subclasses.fake_tensor import is_fake

    facts_of = node.meta.get("val") if isinstance(node.meta.get("val"), torch.Tensor) else obj
    entry: dict[str, Any] = {"val": enc.val(facts_of, f"{where} constant {node.target!r}")}
    if mode == "reference" or is_fake(obj):
        if mode == "data":
            raise UnsupportedGraphError(f"{where}: constant {node.target!r} is a fake tensor: it has no data to write")
        entry["by_reference"] = True
    else:
        entry["data"] = base64.b64encode(_tensor_bytes(obj)).decode("ascii")
    return entry


def _get_attr(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in str(target).split("."):
        obj = getattr(obj, part, None)
    return obj


def _returns_nothing(node: fx.Node) -> bool:
    """A call of an op whose schema returns nothing (``-> ()``): tracing leaves no
    meta['val'] on it."""
    if node.op != "call_function":
        return False
    schema = getattr(node.target, "_schema", None)
    return schema is not None and len(schema.returns) == 0


def _encode_meta(enc: _Encoder, node: fx.Node, where: str, val: Any = None) -> dict:
    meta = node.meta
    out: dict[str, Any] = {}
    if val is not None:  # already encoded (a constant's facts)
        out["val"] = val
    elif "val" in meta:
        out["val"] = enc.val(meta["val"], f"{where} meta['val']")
    elif "fxremat_val" in meta:  # loaded, but the value could not be rebuilt as fake
        out["val"] = enc.copied_val(meta["fxremat_val"])
    elif _returns_nothing(node):  # runtime asserts (_assert_scalar, ...): no value to record
        out["val"] = {"kind": "none"}
    else:
        raise UnsupportedGraphError(
            f"{where}: no meta['val'] (run FakeTensorProp, or trace with make_fx/AOTAutograd)"
        )
    rc = meta.get("recompute")
    if rc is not None:
        from torch.utils.checkpoint import CheckpointPolicy

        if not isinstance(rc, CheckpointPolicy):
            raise UnsupportedGraphError(f"{where}: meta['recompute'] is {rc!r}, not a CheckpointPolicy")
        out["recompute"] = rc.name
    if meta.get("ac_graph_id") is not None:
        out["ac_graph_id"] = int(meta["ac_graph_id"])
    tag = meta.get("partitioner_tag")
    if tag is not None:
        out["partitioner_tag"] = str(tag)
    st = meta.get("stack_trace")
    if st:
        out["stack_trace"] = str(st)
    vr = meta.get("value_range")
    if vr is not None:
        out["value_range"] = [int(vr[0]), int(vr[1])]
    if meta.get("saved_tensor_with_no_vc_check"):
        out["saved_tensor_with_no_vc_check"] = True
    if meta.get("has_backward_hook"):
        out["has_backward_hook"] = True
    # Note [Region budgets]: PyTorch's legacy MemoryBudgetMode marker (a float, as
    # PyTorch reads it) and region_activation_memory_budget's annotation.
    if isinstance(meta.get("memory_budget"), float):
        out["memory_budget"] = float(meta["memory_budget"])
    custom = meta.get("custom")
    if isinstance(custom, dict) and custom.get(_REGION_BUDGET_KEY) is not None:
        out["region_memory_budget"] = float(custom[_REGION_BUDGET_KEY])
    return out


def dumps(doc: dict) -> str:
    """Deterministic text of a document: one space indentation, keys in writer order."""
    return json.dumps(doc, indent=1, ensure_ascii=True, allow_nan=False) + "\n"


def save(
    gm: fx.GraphModule,
    path: str | os.PathLike,
    *,
    num_fwd_outputs: int | None = None,
    kind: str | None = None,
    input_paths: Sequence[str | None] | dict[str, str] | None = None,
    output_paths: Sequence[str | None] | None = None,
    tangent_outputs: Sequence[int] | None = None,
    name: str | None = None,
) -> None:
    """Write ``gm`` in the fxremat format; ``.gz`` paths are gzip-compressed.

    ``kind`` defaults to ``"joint"`` when ``num_fwd_outputs`` is given, else to what
    ``gm.meta["fxremat"]`` says (a loaded graph), else ``"plain"``. For a joint graph,
    ``input_paths`` gives the pytree path of each primal (in placeholder order, or as a
    dict from placeholder name), ``output_paths`` that of each forward output, and
    ``tangent_outputs`` the forward output each tangent belongs to (inferred from
    AOTAutograd's ``meta["desc"]`` when absent). The same graph always gives the same
    bytes (gzip with mtime 0 and no file name). The graph and its constants sidecar
    are written to temporary files and renamed into place, the sidecar first: a
    failed save (a full disk) raises ``OSError`` naming the file and leaves the
    files of an earlier save as they were.
    """
    doc = to_json(
        gm,
        num_fwd_outputs=num_fwd_outputs,
        kind=kind,
        input_paths=input_paths,
        output_paths=output_paths,
        tangent_outputs=tangent_outputs,
        name=name,
    )
    path = os.fspath(path)
    sidecar = _move_large_constants(doc, sidecar_name(path))
    data = dumps(doc).encode("ascii")
    if path.endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
            f.write(data)
        data = buf.getvalue()
    files = [(path, data)]
    if sidecar is not None:
        # The sidecar is renamed into place before the graph (as WriteGraphFile in
        # src/json_io.cpp does): a reader never sees a graph whose sidecar is missing.
        files.insert(0, (os.path.join(os.path.dirname(path) or ".", sidecar_name(path)), sidecar))
    _write_through_temporaries(files)


def _write_through_temporaries(files: Sequence[tuple[str, bytes]]) -> None:
    """Writes each ``(path, data)`` to ``path.tmp.PID`` beside it, then, once all are
    complete, renames them into place in order (WriteThroughTemporary in
    src/json_io.cpp), so that a failed write (a full disk) leaves no truncated file:
    the temporaries are removed and the files already there are left as they were
    (only a rename that fails after an earlier one, as in C++, leaves the earlier
    file new). An OSError is raised again naming the file it was writing."""
    pending: list[str] = []  # temporaries not yet renamed into place
    target = files[0][0]
    try:
        for target, data in files:
            tmp = f"{target}.tmp.{os.getpid()}"
            with open(tmp, "wb") as f:
                pending.append(tmp)
                f.write(data)
        for target, _ in files:
            os.replace(pending[0], target)
            pending.pop(0)
    except BaseException as e:
        for tmp in pending:
            try:
                os.remove(tmp)
            except OSError:
                pass  # already gone: nothing of it is left
        if isinstance(e, OSError):
            # A failed write() names no file; a failed open() or rename names the
            # temporary. The message names the file the caller asked for.
            if e.errno is None:
                raise OSError(f"cannot write {target}: {e}") from e
            raise OSError(e.errno, f"cannot write {target}: {e.strerror or e}") from e
        raise


# --------------------------------------------------------------------------------------
# Reader
# --------------------------------------------------------------------------------------


def _safetensors_dtypes() -> dict[str, str]:
    """{dtype name: safetensors name}, from the C++ library's one dtype table."""
    from ._partition import _extension

    return {name: st for name, _short, _size, st in _extension().dtypes()}


def sidecar_name(graph_path: str | os.PathLike) -> str:
    """``dir/model.json.gz`` -> ``model.constants.safetensors`` (the file beside a graph
    that holds its constants over 64 KiB)."""
    name = os.path.basename(os.fspath(graph_path))
    for ext in (".gz", ".json", ".fxir"):
        if name.endswith(ext) and len(name) > len(ext):
            name = name[: -len(ext)]
    return name + ".constants.safetensors"


def _move_large_constants(doc: dict, file_name: str) -> bytes | None:
    """Moves the data of constants over INLINE_CONSTANT_BYTES from ``doc`` into a
    safetensors file named ``file_name`` (returned; None when there is none). The
    bytes equal what the C++ writer makes: keys sorted, compact header padded to 8."""
    large = {}
    safetensors_dtypes = _safetensors_dtypes()
    for key, c in (doc.get("constants") or {}).items():
        data = c.get("data")
        # Note [Dtypes without a safetensors name]: such constants stay inline.
        if data is not None and len(data) * 3 // 4 > INLINE_CONSTANT_BYTES and \
                safetensors_dtypes.get(c["val"]["dtype"]):
            large[key] = base64.b64decode(data)
    if not large:
        return None
    header: dict[str, Any] = {}
    offset = 0
    for key in sorted(large):
        c = doc["constants"][key]
        shape = [int(d) for d in c["val"]["shape"]]
        header[key] = {"dtype": safetensors_dtypes[c["val"]["dtype"]], "shape": shape,
                       "data_offsets": [offset, offset + len(large[key])]}
        offset += len(large[key])
        del c["data"]
        c["file"] = file_name
        c["key"] = key
        c["crc32"] = zlib.crc32(large[key])  # Note [Sidecar checksums] (src/constants_io.h)
    text = json.dumps(header, separators=(",", ":")).encode("ascii")
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(large[k] for k in sorted(large))


def _read_sidecar(path: str) -> dict[str, tuple[str, list[int], bytes]]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise FormatError(f"{path}: cannot read the constants file: {e.strerror}") from None
    if len(raw) < 8:
        raise FormatError(f"{path}: not a safetensors file")
    n = int.from_bytes(raw[:8], "little")
    try:
        header = json.loads(raw[8:8 + n])
    except (ValueError, UnicodeDecodeError):
        raise FormatError(f"{path}: malformed safetensors header") from None
    body = raw[8 + n:]
    out = {}
    for key, e in header.items():
        if key == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[key] = (e["dtype"], list(e["shape"]), body[b:end])
    return out


def _decode_constants(doc: dict, base_dir: str | None, dec: "_Decoder") -> dict[str, Any]:
    """The tensors of ``doc["constants"]`` by attribute path."""
    out: dict[str, Any] = {}
    consts = doc.get("constants") or {}
    _expect(isinstance(consts, dict), "$.constants", "expected an object")
    sidecars: dict[str, dict] = {}
    for key, c in consts.items():
        where = f"$.constants[{key!r}]"
        _expect(isinstance(c, dict), where, "expected an object")
        if "opaque" in c:
            raise _fail(where, f"an object of type {c['opaque']!r} held by reference: a file cannot carry it")
        _expect("val" in c, where, "missing 'val'")
        facts = c["val"]
        _expect(isinstance(facts, dict) and facts.get("kind") == "tensor", f"{where}.val", "expected tensor facts")
        dtype = getattr(torch, facts["dtype"], None) if isinstance(facts.get("dtype"), str) else None
        _expect(isinstance(dtype, torch.dtype) and facts["dtype"] in _safetensors_dtypes(), f"{where}.val.dtype",
                f"unknown dtype {facts.get('dtype')!r}")
        shape = facts.get("shape")
        _expect(isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape), f"{where}.val.shape",
                "a constant's shape holds non-negative integers")
        stride = facts.get("stride")
        if "data" in c:
            _expect(isinstance(c["data"], str), f"{where}.data", "expected base64 text")
            try:
                raw = base64.b64decode(c["data"], validate=True)
            except ValueError:
                raise _fail(f"{where}.data", "invalid base64") from None
        elif "file" in c:
            f = c["file"]
            _expect(isinstance(f, str) and f and os.path.basename(f) == f, f"{where}.file", "expected a file name")
            if base_dir is None:
                raise _fail(f"{where}.file", f"the constant is in {f!r}, but the document was not read from a file")
            if f not in sidecars:
                sidecars[f] = _read_sidecar(os.path.join(base_dir, f))
            entry = sidecars[f].get(c.get("key", key))
            _expect(entry is not None, f"{where}.key", f"{f!r} has no tensor {c.get('key', key)!r}")
            raw = entry[2]
            if "crc32" in c:  # Note [Sidecar checksums] (src/constants_io.h)
                want = c["crc32"]
                _expect(_is_int(want) and 0 <= want < 2**32, f"{where}.crc32",
                        "expected a CRC-32, an integer in [0, 2^32)")
                got = zlib.crc32(raw)
                _expect(got == want, f"{where}.crc32",
                        f"the sidecar {f!r} holds other data for {c.get('key', key)!r} than this document was "
                        f"written with (CRC-32 {got:08x}, the document's {want:08x}): it was overwritten since, "
                        "e.g. by another graph saved under the same name with the other extension (.json / .json.gz)")
        elif c.get("by_reference") is True:
            raise _fail(where, "the constant was handed over by reference: the document has no data for it")
        else:
            raise _fail(where, "expected 'data', 'file' or 'by_reference'")
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        _expect(len(raw) == numel * itemsize, where, f"{len(raw)} bytes of data for a tensor of {numel * itemsize} bytes")
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        t = flat.view(dtype).reshape(shape) if numel else torch.empty(shape, dtype=dtype)
        if isinstance(stride, list) and len(stride) == len(shape) and all(_is_int(s) for s in stride):
            t = torch.empty_strided(shape, stride, dtype=dtype).copy_(t)
        out[key] = t
    return out


def _parent_at(root: torch.nn.Module, path: str) -> tuple[torch.nn.Module, str]:
    """The module that holds attribute ``path`` of ``root`` (made on the way as empty
    modules) and the attribute's last name."""
    mod = root
    *parents, leaf = path.split(".")
    for p in parents:
        if not hasattr(mod, p):
            mod.add_module(p, torch.nn.Module())
        mod = getattr(mod, p)
    return mod, leaf


def _constant_root(constants: dict[str, Any]) -> torch.nn.Module:
    """A module that holds the constants at their attribute paths (as buffers)."""
    root = torch.nn.Module()
    for path, t in constants.items():
        mod, leaf = _parent_at(root, path)
        mod.register_buffer(leaf, t, persistent=False)
    return root


# torch.fx.traceback.MEMORY_BUDGET_ANNOTATION_KEY (torch 2.13).
_REGION_BUDGET_KEY = "_region_activation_memory_budget"

# Boolean node flags of the format: JSON meta key -> FX node.meta key.
_FLAG_META = {
    "saved_tensor_with_no_vc_check": "saved_tensor_with_no_vc_check",
    "has_backward_hook": "has_backward_hook",
    "mutated": "fxremat_mutated",
}


def _check_with_cpp_reader(doc: dict, base_dir: str | None) -> None:
    from ._partition import _extension

    try:
        ext = _extension()
    except ImportError:  # the extension is not built: the Python checks alone
        return
    if not hasattr(ext, "check_document"):
        return
    try:
        ext.check_document(doc, base_dir or "")
    except (ValueError, TypeError) as e:
        raise FormatError(str(e).removeprefix("fxremat: ")) from None


def max_input_bytes() -> int:
    """The longest graph text read from a file: FXREMAT_MAX_INPUT_BYTES, or an eighth of
    the machine's physical memory (the C++ reader's rule, Note [Input size limit] in
    src/json_io.cpp: a gzip file can inflate a thousand times, and reading a text takes
    several times its length)."""
    env = os.environ.get("FXREMAT_MAX_INPUT_BYTES", "")
    if env:
        # As the C++ reader (CheckTextLimitFromEnv): a set value that is no whole
        # number of bytes is an error, not the default limit in silence.
        if not (env.isascii() and env.isdigit()) or int(env) >= 2**64 - 1:
            raise FormatError(f"FXREMAT_MAX_INPUT_BYTES: expected a whole number of bytes, got {env!r}")
        return int(env)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 8
    except (ValueError, OSError, AttributeError):
        return sys.maxsize


def _too_long(path: str, what: str, limit: int) -> FormatError:
    how = ("the limit FXREMAT_MAX_INPUT_BYTES sets" if os.environ.get("FXREMAT_MAX_INPUT_BYTES", "").isdigit()
           else "an eighth of this machine's physical memory (FXREMAT_MAX_INPUT_BYTES=N sets another)")
    return FormatError(f"{path}: {what} more than {limit} bytes, {how}")


def _read_doc(path: str | os.PathLike) -> dict:
    path = os.fspath(path)
    limit = max_input_bytes()
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
        f.seek(0)
        if gzipped:
            # Inflated a piece at a time, never past the limit (a gzip file's stated
            # length is only its word).
            parts, size = [], 0
            try:
                with gzip.GzipFile(fileobj=f, mode="rb") as g:
                    while piece := g.read(1 << 24):
                        size += len(piece)
                        if size > limit:
                            raise _too_long(path, "the file inflates to", limit)
                        parts.append(piece)
            except (OSError, EOFError, zlib.error) as e:
                raise FormatError(f"{path}: corrupt gzip data: {e}") from None
            raw = b"".join(parts)
        else:
            raw = f.read(limit + 1)
            if len(raw) > limit:
                raise _too_long(path, "the file is", limit)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: not valid JSON: {e}") from None
    except RecursionError:
        raise FormatError(f"{path}: the JSON document nests too deeply to read") from None


def load(path: str | os.PathLike) -> fx.GraphModule:
    """Read a graph file (``.json`` or ``.json.gz``) into a runnable GraphModule.

    The module takes its placeholders flat, in file order (for a joint graph:
    ``gm(*primals, *tangents)``), and returns a tuple. File-level facts are in
    ``gm.meta["fxremat"]``: ``kind``, ``name``, ``num_fwd_outputs``, ``input_paths`` (one
    per primal, None where absent), ``output_paths``, ``tangent_outputs``, ``symbols``.
    Raises :class:`fxremat.FormatError` for malformed files.
    """
    doc = _read_doc(path)
    try:
        return from_json(doc, base_dir=os.path.dirname(os.path.abspath(os.fspath(path))))
    except RecursionError:
        raise FormatError(f"{os.fspath(path)}: the document nests too deeply to read") from None
    except FormatError as e:
        raise FormatError(f"{os.fspath(path)}: {e}") from None


def _fail(where: str, msg: str) -> FormatError:
    return FormatError(f"{where}: {msg}")


def _expect(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise _fail(where, msg)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@functools.cache
def _tuple_argument_hops() -> tuple:
    """Higher-order ops whose sequence arguments must be tuples: the format writes
    every sequence as a JSON list, and flex_attention (block_mask, the other-buffer
    operands) concatenates and checks them as tuples."""
    hops = torch.ops.higher_order
    return tuple(getattr(hops, n) for n in ("flex_attention", "flex_attention_backward") if hasattr(hops, n))


def _lists_to_tuples(a: Any) -> Any:
    if isinstance(a, (list, tuple)):
        return tuple(_lists_to_tuples(x) for x in a)
    return a


class _Unrebuildable(Exception):
    """Value facts that are well-formed but cannot be rebuilt as fake values here."""


class _Decoder:
    def __init__(self, symbols: dict[str, int]) -> None:
        self.symbols = symbols
        self._fake_mode = None
        self._sym_map: dict[str, Any] | None = None
        # storage id -> the first tensor rebuilt with it (later ones share its storage)
        self._storages: dict[int, torch.Tensor] = {}

    # ---- arguments ------------------------------------------------------------------
    def arg(self, a: Any, where: str, env: dict[str, fx.Node], later: Any) -> Any:
        if a is None or isinstance(a, (bool, str, int)):
            return a
        if isinstance(a, float):
            return a
        if isinstance(a, list):
            return [self.arg(x, f"{where}[{i}]", env, later) for i, x in enumerate(a)]
        if isinstance(a, dict):
            _expect(len(a) == 1, where, f"argument object must have exactly one key, got {sorted(a)}")
            (key, v), = a.items()
            if key == "node":
                _expect(isinstance(v, str), where, f"node reference must be a string, got {v!r}")
                if v in env:
                    return env[v]
                if v in later:
                    raise _fail(where, f"refers to node {v!r}, which is defined later (nodes must be in topological order)")
                raise _fail(where, f"refers to unknown node {v!r} (dangling reference)")
            if key == "float":
                _expect(v in ("inf", "-inf", "nan"), where, f"unknown float {v!r}")
                return float(v)
            if key == "complex":
                _expect(isinstance(v, list) and len(v) == 2, where, "a complex constant is {\"complex\": [real, imag]}")
                parts = [self.arg(x, f"{where}.complex[{i}]", env, later) for i, x in enumerate(v)]
                _expect(all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in parts), where,
                        f"complex parts must be numbers, got {v!r}")
                return complex(parts[0], parts[1])
            if key == "dict":
                _expect(isinstance(v, list) and all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str)
                                                    for x in v), where,
                        "a dict argument is {\"dict\": [[key, value], ...]} with string keys")
                out: dict[str, Any] = {}
                for k, x in v:
                    _expect(k not in out, where, f"the key {k!r} is given twice")
                    out[k] = self.arg(x, f"{where}.dict[{k!r}]", env, later)
                return out
            if key in ("dtype", "layout", "memory_format"):
                cls = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}[key]
                obj = getattr(torch, v, None) if isinstance(v, str) and v.isidentifier() else None
                _expect(isinstance(obj, cls), where, f"unknown {key} {v!r}")
                return obj
            if key == "device":
                try:
                    return torch.device(v)
                except (RuntimeError, TypeError):
                    raise _fail(where, f"unknown device {v!r}") from None
            if key == "op":
                _expect(isinstance(v, str), where, f"an operator is named by a string, got {v!r}")
                try:
                    return resolve_target(v)
                except FormatError as e:
                    raise _fail(where, str(e)) from None
            raise _fail(where, f"unknown argument object key {key!r}")
        raise _fail(where, f"unsupported JSON value {a!r}")

    # ---- value facts ----------------------------------------------------------------
    def _fake(self):
        if self._fake_mode is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            shape_env = None
            if self.symbols:
                from torch.fx.experimental.symbolic_shapes import ShapeEnv

                shape_env = ShapeEnv(duck_shape=False)
            self._fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
        return self._fake_mode

    def _sym(self, expr: str, where: str, cls: str):
        import sympy

        mode = self._fake()
        shape_env = mode.shape_env
        _expect(shape_env is not None, where, f"symbolic expression {expr!r} but no top-level symbols")
        if self._sym_map is None:
            from torch._dynamo.source import ConstantSource
            from torch.fx.experimental.symbolic_shapes import DimDynamic

            self._sym_map = {}
            for name in sorted(self.symbols):
                self._sym_map[name] = _create_symbol_named(shape_env, name, int(self.symbols[name]),
                                                           ConstantSource(f"fxremat_{name}"), DimDynamic.DYNAMIC)
        try:
            parsed = sympy.sympify(expr, locals=dict(self._sym_map))
        except Exception as e:  # a SymPy function this reader cannot rebuild
            raise _Unrebuildable(f"{where}: cannot parse symbolic expression {expr!r}: {e}") from None
        unknown = {str(s) for s in parsed.free_symbols} - {str(s) for s in self._sym_map.values()}
        _expect(not unknown, where, f"expression {expr!r} uses symbols {sorted(unknown)} not in the symbols table")
        hint = parsed.xreplace({s: self.symbols[n] for n, s in self._sym_map.items()})
        if cls == "int":
            return shape_env.create_symintnode(parsed, hint=int(hint))
        if cls == "float":
            return shape_env.create_symfloatnode(parsed, hint=float(hint))
        return shape_env.create_symboolnode(parsed)

    def dim(self, d: Any, where: str) -> Any:
        if _is_int(d):
            return d
        if isinstance(d, dict) and set(d) in ({"sym"}, {"sym", "hint"}) and isinstance(d["sym"], str):
            return self._sym(d["sym"], where, "int")
        raise _fail(where, f"dimension must be an integer or {{\"sym\": EXPR}}, got {d!r}")

    def _alias(self, sid: int | None, shape: list, stride: list, dtype: torch.dtype,
               device: torch.device) -> torch.Tensor | None:
        """A tensor over the storage of the first tensor rebuilt with storage id ``sid``
        (so that ``StorageWeakRef(t.untyped_storage())`` tells aliases apart as in the
        traced graph), or None when there is none yet or it cannot be made. The storage
        offset is not in the format: the alias starts at offset 0 (the storage grows if
        needed). It is a plain tensor, not an autograd view of the first."""
        base = self._storages.get(sid) if sid is not None else None
        if base is None or base.device != device:
            return None
        try:
            return torch.empty(0, dtype=dtype, device=device).set_(base.untyped_storage(), 0, shape, stride)
        except Exception:  # noqa: BLE001 - fall back to a tensor with its own storage
            return None

    def val(self, v: Any, where: str) -> Any:
        _expect(isinstance(v, dict) and isinstance(v.get("kind"), str), where, f"value facts must be an object with a kind, got {v!r}")
        k = v["kind"]
        if k == "tensor":
            for key in ("dtype", "shape", "device"):
                _expect(key in v, where, f"tensor facts lack {key!r}")
            dtype = getattr(torch, v["dtype"], None) if isinstance(v["dtype"], str) else None
            _expect(isinstance(dtype, torch.dtype), where, f"unknown dtype {v['dtype']!r}")
            # "stride" may be absent (unknown strides, as the C++ writer leaves them):
            # contiguous, as the C++ reader takes them.
            _expect(isinstance(v["shape"], list) and (
                "stride" not in v or (isinstance(v["stride"], list) and len(v["shape"]) == len(v["stride"]))),
                    where, "shape and stride must be lists of the same length")
            shape = [self.dim(d, f"{where}.shape[{i}]") for i, d in enumerate(v["shape"])]
            if "stride" in v:
                stride = [self.dim(d, f"{where}.stride[{i}]") for i, d in enumerate(v["stride"])]
            else:
                from torch._prims_common import make_contiguous_strides_for

                stride = list(make_contiguous_strides_for(shape)) if shape else []
            try:
                device = torch.device(v["device"])
            except (RuntimeError, TypeError):
                raise _fail(where, f"unknown device {v['device']!r}") from None
            sid = v.get("storage")
            _expect(sid is None or _is_int(sid), f"{where}.storage", f"expected an integer, got {sid!r}")
            if sid is not None and sid < 0:  # -1: unknown, as the C++ reader treats it
                sid = None
            with self._fake():
                t = self._alias(sid, shape, stride, dtype, device)
                if t is None:
                    t = torch.empty_strided(shape, stride, dtype=dtype, device=device)
                    if sid is not None:
                        self._storages[sid] = t
            if v.get("requires_grad"):
                t.requires_grad_(True)
            return t
        if k in ("symint", "symfloat", "symbool"):
            _expect(isinstance(v.get("expr"), str), where, f"{k} facts lack a string 'expr'")
            return self._sym(v["expr"], where, {"symint": "int", "symfloat": "float", "symbool": "bool"}[k])
        if k == "tuple":
            _expect(isinstance(v.get("items"), list), where, "tuple facts lack an 'items' list")
            return tuple(self.val(x, f"{where}.items[{i}]") for i, x in enumerate(v["items"]))
        if k == "none":
            return None
        if k == "const":
            _expect("value" in v, where, "const facts lack 'value'")
            c = v["value"]
            if isinstance(c, dict) and set(c) == {"float"}:
                return float(c["float"])
            _expect(c is None or isinstance(c, (bool, int, float, str)), where, f"unsupported constant {c!r}")
            return c
        raise _fail(where, f"unknown value kind {k!r}")


class _Later:
    """``name in later``: whether a node of that name comes after node ``i``."""

    def __init__(self, first_index: dict[str, int], i: int) -> None:
        self.first_index, self.i = first_index, i

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.first_index.get(name, -1) > self.i


def _check_top(doc: Any) -> None:
    _expect(isinstance(doc, dict), "$", "the document must be a JSON object")
    _expect(doc.get("format") == FORMAT_NAME, "$.format", f"expected {FORMAT_NAME!r}, got {doc.get('format')!r}")
    ver = doc.get("version")
    _expect(isinstance(ver, list) and len(ver) == 2 and all(_is_int(x) for x in ver),
            "$.version", f"expected [major, minor], got {ver!r}")
    if ver[0] != VERSION[0]:
        raise _fail(
            "$.version",
            f"unsupported format version {ver[0]}.{ver[1]}: this reader supports major "
            f"version {VERSION[0]} (up to {VERSION[0]}.{VERSION[1]})",
        )
    _expect(doc.get("kind") in KINDS, "$.kind", f"expected one of {list(KINDS)}, got {doc.get('kind')!r}")
    _expect(isinstance(doc.get("nodes"), list) and doc["nodes"], "$.nodes", "expected a non-empty list of nodes")


def from_json(doc: Any, base_dir: str | None = None, *, written_by_cpp: bool = False,
              _nested_at: str | None = None) -> fx.GraphModule:
    """Rebuild a GraphModule from a parsed document. See :func:`load`. ``base_dir``:
    where the sidecar file of large constants is (the graph file's directory).

    The document is first read by the C++ library's reader, so every check of
    docs/format.md applies here too, with the same located message as the CLI's;
    ``written_by_cpp``: the document is the C++ library's own output (an emitted
    forward or backward), which its reader would only read again."""
    if _nested_at is None:
        _check_top(doc)
        if not written_by_cpp:
            _check_with_cpp_reader(doc, base_dir)
    else:  # a subgraph's document: the enclosing one was checked, whole
        _expect(isinstance(doc, dict) and doc.get("kind") == "plain", _nested_at, "a subgraph is a plain graph document")
        _expect(isinstance(doc.get("nodes"), list) and doc["nodes"], f"{_nested_at}.nodes", "expected a non-empty list of nodes")
    kind = doc["kind"]
    symbols = doc.get("symbols") or {}
    _expect(isinstance(symbols, dict) and all(isinstance(k, str) and _is_int(v) for k, v in symbols.items()),
            "$.symbols", "expected an object of integer hints")

    facts: dict[str, Any] = {"kind": kind, "name": doc.get("name")}
    joint = doc.get("joint")
    if kind == "joint":
        _expect(isinstance(joint, dict), "$.joint", "a joint graph needs the 'joint' object")
        nfo = joint.get("num_fwd_outputs")
        _expect(_is_int(nfo) and nfo >= 0, "$.joint.num_fwd_outputs", f"expected a non-negative integer, got {nfo!r}")
        facts["num_fwd_outputs"] = nfo
        op_ = joint.get("output_paths")
        _expect(op_ is None or (isinstance(op_, list) and len(op_) == nfo and all(p is None or isinstance(p, str) for p in op_)),
                "$.joint.output_paths", f"expected {nfo} strings or nulls")
        facts["output_paths"] = op_
        to_ = joint.get("tangent_outputs")
        _expect(to_ is None or (isinstance(to_, list) and all(_is_int(i) and 0 <= i < nfo for i in to_)),
                "$.joint.tangent_outputs", f"expected forward-output indices below {nfo}")
        facts["tangent_outputs"] = to_
    facts["symbols"] = dict(symbols)

    dec = _Decoder(symbols)
    constants = _decode_constants(doc, base_dir, dec)
    subgraphs_j = doc.get("subgraphs") or {}
    _expect(isinstance(subgraphs_j, dict), "$.subgraphs", "expected an object")
    subgraphs = {k: from_json(v, base_dir, written_by_cpp=True, _nested_at=f"{_nested_at or '$'}.subgraphs.{k}")
                 for k, v in subgraphs_j.items()}
    # Format 1.5 (Note [Stack-trace table] in src/json_io.cpp): distinct stack
    # traces listed once; a node names one by meta.stack_trace_index (or holds a
    # string in meta.stack_trace).
    stack_traces = doc.get("stack_traces") or []
    _expect(isinstance(stack_traces, list) and all(isinstance(t, str) for t in stack_traces),
            f"{_nested_at or '$'}.stack_traces", "expected an array of strings")
    nodes_json = doc["nodes"]
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}
    names_seen: set[str] = set()
    first_index: dict[str, int] = {}
    for i, n in enumerate(nodes_json):
        if isinstance(n, dict) and isinstance(n.get("name"), str):
            first_index.setdefault(n["name"], i)
    input_paths: list[str | None] = []
    placeholder_roles = []
    has_output = False
    from torch.utils.checkpoint import CheckpointPolicy

    for i, nj in enumerate(nodes_json):
        where = f"nodes[{i}]"
        _expect(isinstance(nj, dict), where, "a node must be a JSON object")
        name = nj.get("name")
        _expect(isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name),
                f"{where}.name", f"expected a Python identifier, got {name!r}")
        where = f"nodes[{i}] ({name!r})"
        _expect(name not in names_seen, where, f"duplicate node name {name!r}")
        names_seen.add(name)
        later = _Later(first_index, i)
        op = nj.get("op")
        _expect(op in NODE_OPS, where, f"unknown node op {op!r}")
        _expect(not has_output, where, "nodes after the output node")
        target = nj.get("target")
        args_j = nj.get("args", [])
        kwargs_j = nj.get("kwargs", {})
        _expect(isinstance(args_j, list), f"{where}.args", "expected a list")
        _expect(isinstance(kwargs_j, dict), f"{where}.kwargs", "expected an object")
        meta_j = nj.get("meta", {})
        _expect(isinstance(meta_j, dict), f"{where}.meta", "expected an object")

        if op == "placeholder":
            _expect(isinstance(target, str) and target.isidentifier(), f"{where}.target", f"expected an identifier, got {target!r}")
            _expect(not args_j and not kwargs_j, where, "placeholders take no arguments")
            role = nj.get("role")
            _expect(role is None or role in ROLES, f"{where}.role", f"unknown role {role!r}")
            role = role or derive_role(target, kind)
            path = nj.get("path")
            _expect(path is None or isinstance(path, str), f"{where}.path", f"expected a string, got {path!r}")
            node = graph.placeholder(name)
            node.target = target
            node.meta["fxremat_role"] = role
            if path is not None:
                node.meta["fxremat_path"] = path
            placeholder_roles.append(role)
            if role == "primal":
                input_paths.append(path)
        elif op == "call_function":
            try:
                fn = resolve_target(target)
            except FormatError as e:
                raise _fail(f"{where}.target", str(e)) from None
            args = tuple(dec.arg(a, f"{where}.args[{j}]", env, later) for j, a in enumerate(args_j))
            if fn in _tuple_argument_hops():
                args = tuple(_lists_to_tuples(a) for a in args)
            kwargs = {}
            for k, v in kwargs_j.items():
                _expect(k.isidentifier(), f"{where}.kwargs", f"bad keyword {k!r}")
                kwargs[k] = dec.arg(v, f"{where}.kwargs[{k!r}]", env, later)
            node = graph.call_function(fn, args, kwargs, name=name)
        elif op == "get_attr":
            _expect(isinstance(target, str) and (target in constants or target in subgraphs), f"{where}.target",
                    f"get_attr of {target!r}, which neither $.constants nor $.subgraphs holds")
            _expect(not args_j and not kwargs_j, where, "a get_attr node takes no arguments")
            node = graph.create_node("get_attr", target, name=name)  # FX would name it after the target
        else:  # output
            if kind == "plain" and len(args_j) == 1 and isinstance(args_j[0], dict) and set(args_j[0]) == {"node"}:
                # format 1.6: a plain graph returning one value itself (a score_mod)
                node = graph.output(dec.arg(args_j[0], f"{where}.args[0]", env, later))
            else:
                _expect(len(args_j) == 1 and isinstance(args_j[0], list), f"{where}.args",
                        "the output node takes one argument, a list of node references or nulls"
                        + (" (or, in a plain graph, one node reference)" if kind == "plain" else ""))
                outs = []
                for j, a in enumerate(args_j[0]):
                    _expect(a is None or (isinstance(a, dict) and set(a) == {"node"}), f"{where}.args[0][{j}]",
                            f"expected a node reference or null, got {a!r}")
                    outs.append(dec.arg(a, f"{where}.args[0][{j}]", env, later))
                node = graph.output(list(outs) if doc.get("returns_list") is True else tuple(outs))
            has_output = True

        if node.name != name:
            raise _fail(where, f"name {name!r} cannot be used as an FX node name (FX chose {node.name!r})")
        env[name] = node

        if op != "output":
            if isinstance(meta_j.get("val"), dict) and meta_j["val"].get("kind") == "opaque":
                # Note [Opaque inputs]: the runtime supplies the object; kept as JSON
                _expect(isinstance(meta_j["val"].get("type"), str), f"{where}.meta.val.type", "expected a type name")
                node.meta["fxremat_val"] = meta_j["val"]
            elif "val" in meta_j:
                # Malformed facts are a FormatError. Well-formed facts that cannot be
                # rebuilt here (a SymPy function we cannot parse, a device fake tensors
                # cannot make) stay available, as JSON, in meta["fxremat_val"].
                try:
                    node.meta["val"] = dec.val(meta_j["val"], f"{where}.meta.val")
                except FormatError:
                    raise
                except Exception:
                    node.meta["fxremat_val"] = meta_j["val"]
            elif op in ("placeholder", "call_function"):
                raise _fail(f"{where}.meta", "missing 'val' (required on placeholders and call_function nodes)")
            rc = meta_j.get("recompute")
            if rc is not None:
                _expect(isinstance(rc, str) and rc in CheckpointPolicy.__members__, f"{where}.meta.recompute",
                        f"unknown policy {rc!r}")
                node.meta["recompute"] = CheckpointPolicy[rc]
            for key in ("memory_budget", "region_memory_budget"):
                if meta_j.get(key) is not None:
                    _expect(isinstance(meta_j[key], (int, float)) and not isinstance(meta_j[key], bool),
                            f"{where}.meta.{key}", "expected a number")
            if meta_j.get("memory_budget") is not None:
                node.meta["memory_budget"] = float(meta_j["memory_budget"])
            if meta_j.get("region_memory_budget") is not None:
                node.meta.setdefault("custom", {})[_REGION_BUDGET_KEY] = float(meta_j["region_memory_budget"])
            if meta_j.get("ac_graph_id") is not None:
                _expect(_is_int(meta_j["ac_graph_id"]), f"{where}.meta.ac_graph_id", "expected an integer")
                node.meta["ac_graph_id"] = meta_j["ac_graph_id"]
            tag = meta_j.get("partitioner_tag")
            if tag is not None:
                _expect(tag in PARTITIONER_TAGS, f"{where}.meta.partitioner_tag", f"unknown tag {tag!r}")
                node.meta["partitioner_tag"] = tag
            st = meta_j.get("stack_trace")
            if st is not None:
                _expect(isinstance(st, str), f"{where}.meta.stack_trace", "expected a string")
                node.meta["stack_trace"] = st
            sti = meta_j.get("stack_trace_index")
            if sti is not None:
                _expect(_is_int(sti), f"{where}.meta.stack_trace_index", "expected an integer")
                _expect(0 <= sti < len(stack_traces), f"{where}.meta.stack_trace_index",
                        f"{sti} is not an index of \"stack_traces\" (which has {len(stack_traces)})")
                node.meta["stack_trace"] = stack_traces[sti]
            vr = meta_j.get("value_range")
            if vr is not None:
                _expect(isinstance(vr, list) and len(vr) == 2 and all(_is_int(x) for x in vr),
                        f"{where}.meta.value_range", f"expected [low, high), got {vr!r}")
                node.meta["value_range"] = tuple(vr)
            for key, meta_key in _FLAG_META.items():  # boolean flags: present and true, or absent
                flag = meta_j.get(key)
                if flag is not None:
                    _expect(isinstance(flag, bool), f"{where}.meta.{key}", "expected a boolean")
                    if flag:
                        node.meta[meta_key] = True
            wb = meta_j.get("written_back_from")
            if wb is not None:
                _expect(_is_int(wb) and wb >= 0, f"{where}.meta.written_back_from", "expected a forward output index")
                node.meta["fxremat_written_back_from"] = wb

    _expect(has_output, "$.nodes", "no output node (exactly one, the last)")
    out_node = graph.output_node()
    if kind == "joint":
        nouts = len(out_node.args[0])
        _expect(facts["num_fwd_outputs"] <= nouts, "$.joint.num_fwd_outputs",
                f"{facts['num_fwd_outputs']} forward outputs but the output node has {nouts} entries")
        ntan = placeholder_roles.count("tangent")
        if facts["tangent_outputs"] is not None:
            _expect(len(facts["tangent_outputs"]) == ntan, "$.joint.tangent_outputs",
                    f"{len(facts['tangent_outputs'])} entries for {ntan} tangent placeholders")
        npri = placeholder_roles.count("primal")
        _expect(nouts == facts["num_fwd_outputs"] + npri, "$.nodes",
                f"a joint graph returns its forward outputs then one gradient per primal: "
                f"{nouts} outputs != {facts['num_fwd_outputs']} + {npri} primals")
        facts["input_paths"] = input_paths
        for n in graph.nodes:
            wb = n.meta.get("fxremat_written_back_from")
            if wb is not None:
                _expect(wb < facts["num_fwd_outputs"], f"$.nodes ({n.name!r}).meta.written_back_from",
                        f"written back from forward output {wb}, out of range of {facts['num_fwd_outputs']}")

    try:
        graph.lint()
    except Exception as e:  # pragma: no cover - guarded by the checks above
        raise FormatError(f"$.nodes: the rebuilt graph is invalid: {e}") from None
    root = _constant_root(constants)
    for path, sub in subgraphs.items():
        mod, leaf = _parent_at(root, path)
        mod.add_module(leaf, sub)
    gm = fx.GraphModule(root, graph)
    gm.meta["fxremat"] = facts
    return gm
