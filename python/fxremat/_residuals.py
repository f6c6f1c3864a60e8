"""The residual report: what the forward saves for the backward, value by value.

    fxremat.print_saved_residuals(f, W1, W2, W3, x, policy=fxremat.policies.save_only_these_names("a"))

prints one line per saved value, as JAX's ``jax.ad_checkpoint.print_saved_residuals``
does, then the totals::

    f32[5,4] from the argument primals_1 (W1)        saved      fw_out 1  bw_in 0
    f32[5] named 'a' (prog.py:12 (f4))               saved      fw_out 5  bw_in 4
    2 residuals: 100 B saved on device, 0 B offloaded to host

The program is traced as :func:`fxremat.extract` traces it (fake tensors: nothing is
computed) and partitioned with the policy. :func:`saved_residuals` returns the same as
:class:`Residual` records.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass
class Residual:
    """One saved value.

    ``kind`` is ``"argument"`` (an input of the program; ``what`` is its argument
    name, ``W1``, ``params[0]``, ``fc1.weight``), ``"named"`` (a value named by
    :func:`fxremat.checkpoint_name`; ``what`` is the name), ``"op"`` (``what`` is the
    op's short name, ``sin``) or ``"symint"``. :attr:`key` is ``(shape, kind, what)``.
    """

    shape: str  # "f32[5,4]"
    kind: str
    what: str
    name: str  # the node's name in the graphs
    names: list[str] = field(default_factory=list)
    op: str | None = None  # "aten.sin.default"
    location: str | None = None  # "prog.py:12 (g)"
    decision: str = ""
    rule: str = ""  # why it is saved (Note [Saved-value rules]): "input", "min cut", "budget: ..."
    offloaded: bool = False
    forward_output_index: int = -1
    backward_input_index: int = -1
    bytes: int = 0
    origin: str = ""  # "output of aten.sin (prog.py:6 (g))", as the report words it

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.shape, self.kind, self.what)

    def describe(self) -> str:
        """The report's description of the value (the C++ ``DescribeResidual``)."""
        return f"{self.shape} {self.origin}"


def _location_of(node: Any) -> str | None:
    """``file.py:12 (fn)`` from the innermost frame of a node's stack trace."""
    st = getattr(node, "meta", {}).get("stack_trace") if node is not None else None
    if not st:
        return None
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', st)
    if not frames:
        return None
    f, line, fn = frames[-1]
    return f"{os.path.basename(f)}:{line} ({fn})"


def _packet(op: str) -> str:
    """``aten.sin`` for ``aten.sin.default``."""
    parts = op.split(".")
    return ".".join(parts[:2]) if len(parts) == 3 else op


def _short_op(op: str) -> str:
    """``sin`` for ``aten.sin.default``, ``mm`` for ``aten.mm.default``."""
    parts = op.split(".")
    return parts[1] if len(parts) == 3 else op


def argument_text(path: str | None, fn: Any) -> str | None:
    """The user's spelling of an input path: ``args[0]`` of ``f(W1, ...)`` is ``W1``,
    ``args[0][1]`` of ``loss(params, x, y)`` is ``params[1]``, ``params['fc1.weight']`` is
    ``fc1.weight``."""
    if not path:
        return None
    from ._paths import parse_path

    try:
        root, keys = parse_path(path)
    except ValueError:
        return path

    def rest(ks: list) -> str:
        return "".join(f"[{k!r}]" if kind == "item" else f".{k}" for kind, k in ks)

    if root in ("params", "buffers") and keys and keys[0][0] == "item":
        return str(keys[0][1]) + rest(keys[1:])
    if root == "kwargs" and keys and keys[0][0] == "item":
        return str(keys[0][1]) + rest(keys[1:])
    if root == "args" and keys and keys[0][0] == "item" and isinstance(keys[0][1], int):
        target = fn.forward if hasattr(fn, "forward") and not inspect.isfunction(fn) else fn
        try:
            params = list(inspect.signature(target).parameters.values())
        except (TypeError, ValueError):
            return path
        i = keys[0][1]
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if i < len(positional):
            return positional[i].name + rest(keys[1:])
        var = [p for p in params if p.kind == p.VAR_POSITIONAL]
        if var:
            return f"{var[0].name}[{i - len(positional)}]" + rest(keys[1:])
    return path


def _signature_to_describe(signature: dict, fn: Any) -> dict:
    """The signature as the C++ residual describers take it: input paths spelled as
    ``fn``'s argument names, and no opaque objects (Note [Saved opaque objects] in
    _partition_fn.py: a DeviceMesh is no residual to describe)."""
    sig = dict(signature)
    sig["saved"] = [s for s in signature["saved"] if s.get("kind") != "opaque"]
    sig["primals"] = [dict(p, path=argument_text(p.get("path"), fn) or p.get("path")) for p in
                      signature.get("primals", [])]
    return sig


def residuals_from_signature(signature: dict, joint_gm: Any = None, fn: Any = None) -> list[Residual]:
    """:class:`Residual` records for a signature's saved values, in forward-output
    order. ``joint_gm`` (the joint graph) supplies ops and locations the signature
    lacks; ``fn`` turns input paths into argument names."""
    from ._partition import _extension

    nodes = {n.name: n for n in joint_gm.graph.nodes} if joint_gm is not None else {}
    primals = {p["name"]: p for p in signature.get("primals", [])}
    sig = _signature_to_describe(signature, fn)
    described = _extension().describe_residuals(json.dumps(sig))
    out = []
    for s in sorted(sig["saved"], key=lambda s: s["forward_output_index"]):
        name = s["name"]
        names = list(s.get("names") or ([s["annotation"]] if s.get("annotation") else []))
        node = nodes.get(name)
        op = s.get("origin_op") or None
        if op is None and node is not None and node.op == "call_function":
            op = str(node.target)
        location = s.get("origin_location") or _location_of(node) or None
        if s.get("kind") != "tensor":
            kind, what = "symint", name
        elif name in primals:
            kind = "argument"
            what = argument_text(primals[name].get("path"), fn) or name
        elif names:
            kind, what = "named", names[0]
        else:
            kind, what = "op", _short_op(op) if op else name
        short_type, origin = described[name]
        out.append(Residual(shape=short_type, origin=origin, kind=kind, what=what, name=name, names=names, op=op,
                            location=location, decision=s.get("decision", "") or "", rule=s.get("rule", "") or "",
                            offloaded=bool(s.get("offloaded", False)),
                            forward_output_index=int(s["forward_output_index"]),
                            backward_input_index=int(s["backward_input_index"]), bytes=int(s.get("bytes", 0))))
    return out


def residual_report(signature: dict, joint_gm: Any = None, fn: Any = None) -> str:
    """The report for a signature: the C++ library's (``fxremat._C.residual_report``,
    the text ``fxremat residuals`` prints), with input paths spelled as argument names."""
    from ._partition import _extension

    sig = _signature_to_describe(signature, fn)
    return _extension().residual_report(json.dumps(sig))


def _trace(fn: Callable[..., Any], args: tuple, kwargs: dict, policy: Any, partitioner: str, offload_target: str):
    from ._extract import _extract

    _, _, sig, joint = _extract(fn, args, kwargs, policy=policy, partitioner=partitioner,
                                offload_target=offload_target, barrier=False, keep_annotations=False)
    return sig, joint


def saved_residuals(fn: Callable[..., Any], *args: Any, policy: Any = None, partitioner: str = "mincut",
                    offload_target: str = "torch", **kwargs: Any) -> list[Residual]:
    """What the forward of ``fn(*args, **kwargs)`` saves under ``policy``, as
    :class:`Residual` records in forward-output order (traced on fake tensors, as
    :func:`fxremat.extract`)."""
    sig, joint = _trace(fn, args, kwargs, policy, partitioner, offload_target)
    return residuals_from_signature(sig, joint.gm, fn)


def print_saved_residuals(fn: Callable[..., Any], *args: Any, policy: Any = None, partitioner: str = "mincut",
                          offload_target: str = "torch", file: Any = None, **kwargs: Any) -> str:
    """Prints (to ``file``, default stdout) and returns the residual report of
    ``fn(*args, **kwargs)`` under ``policy``: JAX's ``print_saved_residuals`` for
    PyTorch programs. Keyword arguments named ``policy``, ``partitioner``,
    ``offload_target`` or ``file`` are not passed to ``fn``."""
    sig, joint = _trace(fn, args, kwargs, policy, partitioner, offload_target)
    text = residual_report(sig, joint.gm, fn)
    print(text, end="", file=file)
    return text
