"""Checkpoint policies: which forward values to save, recompute or offload.

The vocabulary is JAX's (``jax.checkpoint_policies``) plus PyTorch's
(``torch.utils.checkpoint.CheckpointPolicy`` and the op list of
``create_selective_checkpoint_contexts``). A policy here is a *description* (the C++
policy engine, ``include/fxremat/policy.h``, evaluates it on every forward value of the
joint graph); every object has :meth:`Policy.to_json` (the JSON form of
``docs/policies.md``) and a readable ``repr``.

>>> from fxremat import policies as P
>>> P.save_only_these_names("attn_out", "mlp_out")
save_only_these_names('attn_out', 'mlp_out')
>>> P.dots_saveable & P.save_only_these_names("a")
all_of(dots_saveable, save_only_these_names('a'))
>>> P.save_from_both_policies(P.dots_saveable, P.save_only_these_names("a")).to_json()["policy"]
'save_from_both_policies'

Boolean policies (JAX's: a value is saveable or not): :data:`everything_saveable`,
:data:`nothing_saveable`, :data:`dots_saveable` (alias :data:`checkpoint_dots`),
:data:`dots_with_no_batch_dims_saveable`, :func:`save_only_these_names`,
:func:`save_any_names_but_these`, :func:`save_anything_except_these_names`; offloading
ones: :func:`save_and_offload_only_these_names`, :func:`offload_dot_with_no_batch_dims`;
combinations: :func:`save_from_both_policies`, :func:`all_of` (``p1 & p2``); PyTorch's:
:func:`save_ops`, :func:`checkpoint_policy`.

:func:`as_policy_json` turns any accepted spelling (a :class:`Policy`, the command-line
text form ``"save_only_these_names:a,b"``, a JSON dict or list, or None) into the JSON
form the extension takes.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

DECISIONS = ("MUST_SAVE", "PREFER_SAVE", "MUST_RECOMPUTE", "PREFER_RECOMPUTE", "MUST_CPU_OFFLOAD",
             "PREFER_CPU_OFFLOAD")

KINDS = (
    "everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
    "dots_with_no_batch_dims_saveable", "checkpoint_dots_with_no_batch_dims", "save_only_these_names", "save_any_names_but_these",
    "save_anything_except_these_names", "save_and_offload_only_these_names",
    "offload_dot_with_no_batch_dims", "save_from_both_policies", "save_ops", "checkpoint_policy", "all_of",
)

_MEMORY_KINDS = ("device", "pinned_host")
_NAME_KINDS = ("save_only_these_names", "save_any_names_but_these", "save_anything_except_these_names")
_BOOLEAN_KINDS = ("everything_saveable", "nothing_saveable", "dots_saveable", "checkpoint_dots",
                  "dots_with_no_batch_dims_saveable", *_NAME_KINDS, "save_from_both_policies")


class Policy:
    """One checkpoint policy, or a combination (``kind == "all_of"``).

    Build them with the module's functions and constants, not directly. Fields mirror
    the C++ ``PolicySpec``: ``names``, ``offload_names``, ``ops``, ``by_name``,
    ``by_op``, ``default``, ``offload_src``, ``offload_dst``, ``policies`` (children).
    """

    __slots__ = ("kind", "names", "offload_names", "ops", "by_name", "by_op", "default", "offload_src",
                 "offload_dst", "policies")

    def __init__(self, kind: str, *, names: Iterable[str] = (), offload_names: Iterable[str] = (),
                 ops: Iterable[str] = (), by_name: Mapping[str, str] | None = None,
                 by_op: Mapping[str, str] | None = None, default: str | None = None,
                 offload_src: str = "device", offload_dst: str = "pinned_host",
                 policies: Iterable["Policy"] = ()) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown checkpoint policy {kind!r} (known: {', '.join(KINDS)})")
        self.kind = kind
        self.names = tuple(names)
        self.offload_names = tuple(offload_names)
        self.ops = tuple(ops)
        self.by_name = dict(by_name or {})
        self.by_op = dict(by_op or {})
        self.default = default
        self.offload_src = offload_src
        self.offload_dst = offload_dst
        self.policies = tuple(policies)

    # ---- combination ------------------------------------------------------------------
    def __and__(self, other: Any) -> "Policy":
        if not isinstance(other, Policy):
            return NotImplemented
        return all_of(self, other)

    # ---- forms ------------------------------------------------------------------------
    def to_json(self) -> dict:
        """The JSON form (``docs/policies.md``): ``{"policy": kind, ...}`` with only the
        fields this kind uses."""
        d: dict[str, Any] = {"policy": self.kind}
        k = self.kind
        if k in _NAME_KINDS or k == "save_and_offload_only_these_names":
            d["names"] = list(self.names)
        if k == "save_and_offload_only_these_names":
            d["offload_names"] = list(self.offload_names)
        if k in ("save_and_offload_only_these_names", "offload_dot_with_no_batch_dims"):
            d["offload_src"] = self.offload_src
            d["offload_dst"] = self.offload_dst
        if k == "save_ops":
            d["ops"] = list(self.ops)
        if k == "checkpoint_policy":
            d["by_name"] = dict(self.by_name)
            d["by_op"] = dict(self.by_op)
            if self.default is not None:
                d["default"] = self.default
        if k in ("all_of", "save_from_both_policies"):
            d["policies"] = [p.to_json() for p in self.policies]
        return d

    def to_json_text(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def from_json(cls, doc: Any, where: str = "policy") -> "Policy":
        """The inverse of :meth:`to_json`; a list is ``all_of`` its items."""
        if isinstance(doc, list):
            return all_of(*(cls.from_json(x, f"{where}[{i}]") for i, x in enumerate(doc)))
        if not isinstance(doc, dict):
            raise ValueError(f"{where}: a policy is a JSON object or a list of them, got {doc!r}")
        known = {"policy", "names", "offload_names", "ops", "by_name", "by_op", "default", "offload_src",
                 "offload_dst", "policies"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"{where}: unknown policy field(s) {unknown} (known: {', '.join(sorted(known))})")
        kind = doc.get("policy")
        if not isinstance(kind, str):
            raise ValueError(f"{where}.policy: the policy kind must be a string, got {kind!r}")
        kind = {"checkpoint_dots": "dots_saveable",
                "checkpoint_dots_with_no_batch_dims": "dots_with_no_batch_dims_saveable"}.get(kind, kind)
        def strings(key: str) -> list:
            # One string is a list of one, as the C++ reader (src/policy.cpp StringList)
            # takes it: "names": "ab" was the two names 'a' and 'b' here and one in C++.
            value = doc.get(key, [])
            if isinstance(value, str):
                return [value]
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{where}.{key}: expected a list of strings, got {value!r}")
            return list(value)

        kids = [cls.from_json(c, f"{where}.policies[{i}]") for i, c in enumerate(doc.get("policies", []))]
        if kind == "all_of":
            return all_of(*kids)
        if kind == "save_from_both_policies":
            if len(kids) != 2:
                raise ValueError(f"{where}.policies: save_from_both_policies takes two policies, got {len(kids)}")
            return save_from_both_policies(*kids)
        if kind == "save_and_offload_only_these_names":
            return save_and_offload_only_these_names(
                names_which_can_be_saved=strings("names"), names_which_can_be_offloaded=strings("offload_names"),
                offload_src=doc.get("offload_src", "device"), offload_dst=doc.get("offload_dst", "pinned_host"))
        if kind == "offload_dot_with_no_batch_dims":
            return offload_dot_with_no_batch_dims(doc.get("offload_src", "device"), doc.get("offload_dst", "pinned_host"))
        if kind in _NAME_KINDS:
            return globals()[kind](*strings("names"))
        if kind == "save_ops":
            return save_ops(*strings("ops"))
        if kind == "checkpoint_policy":
            return checkpoint_policy(by_name=doc.get("by_name"), by_op=doc.get("by_op"), default=doc.get("default"))
        return Policy(kind)

    def __repr__(self) -> str:
        k = self.kind
        if k in _NAME_KINDS:
            return f"{k}({', '.join(map(repr, self.names))})"
        if k == "save_and_offload_only_these_names":
            return (f"{k}(names_which_can_be_saved={list(self.names)!r}, "
                    f"names_which_can_be_offloaded={list(self.offload_names)!r}, "
                    f"offload_src={self.offload_src!r}, offload_dst={self.offload_dst!r})")
        if k == "offload_dot_with_no_batch_dims":
            return f"{k}({self.offload_src!r}, {self.offload_dst!r})"
        if k == "save_ops":
            return f"{k}({', '.join(map(repr, self.ops))})"
        if k == "checkpoint_policy":
            parts = []
            if self.by_name:
                parts.append(f"by_name={self.by_name!r}")
            if self.by_op:
                parts.append(f"by_op={self.by_op!r}")
            if self.default is not None:
                parts.append(f"default={self.default!r}")
            return f"{k}({', '.join(parts)})"
        if k in ("all_of", "save_from_both_policies"):
            return f"{k}({', '.join(map(repr, self.policies))})"
        return k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_json(), sort_keys=True))


# --------------------------------------------------------------------------------------
# JAX's policies
# --------------------------------------------------------------------------------------

#: Every forward value the backward needs is saved (JAX without ``jax.checkpoint``).
everything_saveable = Policy("everything_saveable")
#: Nothing is saved that can be recomputed (``jax.checkpoint`` without a policy).
nothing_saveable = Policy("nothing_saveable")
#: The outputs of matrix products (``aten.mm``, ``addmm``, ``bmm``, ``mv``, ...) are saveable.
dots_saveable = Policy("dots_saveable")
#: JAX's alias of :data:`dots_saveable`.
checkpoint_dots = dots_saveable
#: Matrix products without batch dimensions (``mm``, ``addmm``, ``mv``, ``dot``; not ``bmm``).
dots_with_no_batch_dims_saveable = Policy("dots_with_no_batch_dims_saveable")


def _names(fn: str, names: tuple, *, at_least_one: bool = False) -> tuple[str, ...]:
    out: list[str] = []
    for n in names:
        if isinstance(n, str):
            if not n:  # no value is named '' (the C++ Validate refuses it, but only when partitioning)
                raise ValueError(f"policy {fn}: an empty name ('') names no value")
            out.append(n)
        elif isinstance(n, Iterable):
            out.extend(_names(fn, tuple(n)))
        else:
            raise TypeError(f"{fn}: names must be strings, got {n!r}")
    if at_least_one and not out:
        raise ValueError(f"policy {fn} needs at least one name")
    return tuple(out)


def save_only_these_names(*names: str) -> Policy:
    """Only values named (by :func:`fxremat.checkpoint_name`) with one of ``names`` are saveable."""
    return Policy("save_only_these_names", names=_names("save_only_these_names", names, at_least_one=True))


def save_any_names_but_these(*names: str) -> Policy:
    """Named values are saveable unless their name is one of ``names``; unnamed values are not."""
    return Policy("save_any_names_but_these", names=_names("save_any_names_but_these", names, at_least_one=True))


def save_anything_except_these_names(*names: str) -> Policy:
    """Every value is saveable except the ones named with one of ``names``."""
    return Policy("save_anything_except_these_names", names=_names("save_anything_except_these_names", names, at_least_one=True))


def _memory_kind(fn: str, what: str, value: Any) -> str:
    if value not in _MEMORY_KINDS:
        raise ValueError(f"{fn}: {what} must be one of {_MEMORY_KINDS}, got {value!r}")
    return value


def save_and_offload_only_these_names(*, names_which_can_be_saved: Iterable[str],
                                      names_which_can_be_offloaded: Iterable[str], offload_src: str = "device",
                                      offload_dst: str = "pinned_host") -> Policy:
    """Values named in ``names_which_can_be_saved`` are saved, those named in
    ``names_which_can_be_offloaded`` are saved in host memory (``offload_dst``), the
    rest is recomputed. The two lists must not share a name (``ValueError``, as JAX)."""
    fn = "save_and_offload_only_these_names"
    saved = _names(fn, (names_which_can_be_saved,))
    offloaded = _names(fn, (names_which_can_be_offloaded,))
    both = sorted(set(saved) & set(offloaded))
    if both:
        raise ValueError(
            f"{fn}: the names in names_which_can_be_saved and names_which_can_be_offloaded must be exclusive; "
            f"both contain {', '.join(map(repr, both))} (names_which_can_be_saved={list(saved)}, "
            f"names_which_can_be_offloaded={list(offloaded)})")
    return Policy(fn, names=saved, offload_names=offloaded, offload_src=_memory_kind(fn, "offload_src", offload_src),
                  offload_dst=_memory_kind(fn, "offload_dst", offload_dst))


def offload_dot_with_no_batch_dims(offload_src: str = "device", offload_dst: str = "pinned_host") -> Policy:
    """The outputs of matrix products without batch dimensions are saved in host memory."""
    fn = "offload_dot_with_no_batch_dims"
    return Policy(fn, offload_src=_memory_kind(fn, "offload_src", offload_src),
                  offload_dst=_memory_kind(fn, "offload_dst", offload_dst))


def save_from_both_policies(policy_1: Policy, policy_2: Policy) -> Policy:
    """A value is saveable if either (boolean) policy says so."""
    for i, p in enumerate((policy_1, policy_2), 1):
        if not isinstance(p, Policy):
            raise TypeError(f"save_from_both_policies: policy_{i} must be a policy, got {p!r}")
        if p.kind not in _BOOLEAN_KINDS:
            raise ValueError(f"save_from_both_policies: policy_{i} must be a saveable/not-saveable policy "
                             f"({', '.join(_BOOLEAN_KINDS)}), got {p!r}")
    return Policy("save_from_both_policies", policies=(policy_1, policy_2))


def all_of(*policies: Policy) -> Policy:
    """Every policy applies; their demands merge (Note [Merging demands] in
    ``include/fxremat/policy.h``: MUST beats PREFER, SAVE/OFFLOAD beat RECOMPUTE, two
    different MUSTs are an error). ``p1 & p2`` is ``all_of(p1, p2)``."""
    flat: list[Policy] = []
    for p in policies:
        if not isinstance(p, Policy):
            raise TypeError(f"all_of: expected policies, got {p!r}")
        flat.extend(p.policies if p.kind == "all_of" else (p,))
    if len(flat) == 1:
        return flat[0]
    return Policy("all_of", policies=flat)


# --------------------------------------------------------------------------------------
# PyTorch's vocabulary
# --------------------------------------------------------------------------------------


def op_name(op: Any) -> str:
    """``"aten.mm"`` for ``torch.ops.aten.mm``, ``"aten.mm.default"`` for an overload;
    strings are normalized (``"aten::mm"``, ``"torch.ops.aten.mm"`` -> ``"aten.mm"``)."""
    if isinstance(op, str):
        s = op.strip().removeprefix("torch.ops.").replace("::", ".")
        parts = s.split(".")
        if not 2 <= len(parts) <= 3 or not all(p.isidentifier() for p in parts):
            raise ValueError(f"not an operator name: {op!r} (expected 'aten.mm' or 'aten.mm.default')")
        return s
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        raise TypeError(f"not an operator: {op!r}") from None
    if isinstance(op, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(op)
    raise TypeError(f"not an operator: {op!r} (pass torch.ops.aten.mm, torch.ops.aten.mm.default or 'aten.mm')")


def decision_name(d: Any) -> str:
    """``"MUST_SAVE"`` for ``CheckpointPolicy.MUST_SAVE``, ``"MUST_SAVE"``,
    ``"CheckpointPolicy.MUST_SAVE"``; ValueError for anything else."""
    name = getattr(d, "name", d)
    if isinstance(name, str):
        name = name.removeprefix("CheckpointPolicy.")
        if name in DECISIONS:
            return name
    raise ValueError(f"unknown checkpoint decision {d!r} (one of {', '.join(DECISIONS)}, "
                     "or a torch.utils.checkpoint.CheckpointPolicy)")


def save_ops(*ops: Any) -> Policy:
    """``create_selective_checkpoint_contexts(ops)``'s policy: MUST_SAVE for the outputs
    of the listed ops (a packet ``torch.ops.aten.mm`` / ``"aten.mm"`` means every
    overload), PREFER_RECOMPUTE for every other forward value."""
    flat: list[Any] = []
    for o in ops:
        flat.extend(o) if isinstance(o, (list, tuple, set, frozenset)) else flat.append(o)
    if not flat:
        # Without ops it would be "recompute everything" spelled by accident; the C++
        # Validate refuses it too, but only when partitioning. nothing_saveable says that.
        raise ValueError("policy save_ops needs at least one op (to save no op's outputs: nothing_saveable)")
    return Policy("save_ops", ops=[op_name(o) for o in flat])


def checkpoint_policy(by_name: Mapping[str, Any] | None = None, by_op: Mapping[Any, Any] | None = None,
                      default: Any = None) -> Policy:
    """A PyTorch policy function as a table: a value's decision is ``by_name`` of one of
    its names, else ``by_op`` of its op, else ``default`` (None: no demand). Decisions
    are ``torch.utils.checkpoint.CheckpointPolicy`` values or their names."""
    bn = {str(k): decision_name(v) for k, v in (by_name or {}).items()}
    bo = {op_name(k): decision_name(v) for k, v in (by_op or {}).items()}
    return Policy("checkpoint_policy", by_name=bn, by_op=bo, default=None if default is None else decision_name(default))


# --------------------------------------------------------------------------------------
# The command-line text form
# --------------------------------------------------------------------------------------


def parse(text: str) -> Policy:
    """The command-line form (``include/fxremat/policy.h``, ``ParsePolicy``):
    ``NAME[:ARGS]``, several joined by ``+`` (all_of). See ``docs/policies.md``. The C++
    library parses it, so the grammar and the messages are the CLI's."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"empty policy {text!r}")
    from ._partition import _extension

    return Policy.from_json(json.loads(_extension().parse_policy(text.strip())))


def as_policy_json(policy: Any) -> dict | None:
    """The JSON form of ``policy``: a :class:`Policy`, the command-line text form
    (parsed by the C++ library, so messages are the CLI's), a JSON dict or list (list = all_of), a JSON text, or None."""
    if policy is None:
        return None
    if isinstance(policy, Policy):
        return policy.to_json()
    if isinstance(policy, (dict, list)):
        return Policy.from_json(policy).to_json()
    if isinstance(policy, str):
        text = policy.strip()
        if text.startswith(("{", "[")):
            try:
                doc = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"malformed policy JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
            return Policy.from_json(doc).to_json()
        return parse(text).to_json()
    if callable(policy):
        raise TypeError(
            "fxremat: a Python policy function cannot run inside the C++ partitioner; describe it with "
            "fxremat.policies.checkpoint_policy(by_name=..., by_op=..., default=...) or save_ops(...)")
    raise TypeError(f"fxremat: not a checkpoint policy: {policy!r} (a fxremat.policies object, a policy string "
                    "such as 'save_only_these_names:a,b', a JSON dict, or None)")


def as_policy(policy: Any) -> Policy | None:
    """Like :func:`as_policy_json`, as a :class:`Policy` object."""
    d = as_policy_json(policy)
    return None if d is None else Policy.from_json(d)
