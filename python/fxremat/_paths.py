"""Pytree path strings: ``args[1]['weights']``, ``params['fc1.weight']``, ``[0]['a']``.

A path is an optional root name followed by keys: ``[INT]``, ``['STR']`` (a Python string
literal) or ``.NAME`` (an attribute, e.g. of a dataclass). Input paths are rooted at
``params``, ``buffers``, ``args`` or ``kwargs``; output paths have no root.
"""

from __future__ import annotations

import ast
import re
from typing import Any, Iterable

_ROOT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_KEY = re.compile(
    r"""\[(-?\d+|'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]|\.([A-Za-z_][A-Za-z_0-9]*)"""
)


def format_key(key: Any) -> str:
    """One path component: ``[0]`` for ints, ``['a']`` for strings."""
    if isinstance(key, bool) or not isinstance(key, (int, str)):
        raise TypeError(f"cannot write pytree key {key!r} ({type(key).__name__}) in a path")
    return f"[{key!r}]"


def format_path(root: str, keys: Iterable[Any]) -> str:
    """``format_path('args', [1, 'weights'])`` -> ``"args[1]['weights']"``."""
    return root + "".join(format_key(k) for k in keys)


def keypath_to_str(keypath) -> str:
    """Render a ``torch.utils._pytree`` key path (from ``tree_flatten_with_path``)."""
    from torch.utils import _pytree as pytree

    parts = []
    for k in keypath:
        if isinstance(k, pytree.SequenceKey):
            parts.append(format_key(k.idx))
        elif isinstance(k, pytree.MappingKey):
            parts.append(format_key(k.key))
        elif isinstance(k, pytree.GetAttrKey):
            parts.append("." + k.name)
        else:  # other key classes print themselves in the same style
            parts.append(str(k))
    return "".join(parts)


def parse_path(path: str) -> tuple[str | None, list[tuple[str, Any]]]:
    """Split a path into its root (or None) and ``[("item", key) | ("attr", name)]``."""
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {path!r}")
    pos = 0
    root = None
    m = _ROOT.match(path)
    if m:
        root = m.group(0)
        pos = m.end()
    keys: list[tuple[str, Any]] = []
    while pos < len(path):
        m = _KEY.match(path, pos)
        if not m:
            raise ValueError(f"malformed pytree path {path!r} at offset {pos}")
        if m.group(1) is not None:
            keys.append(("item", ast.literal_eval(m.group(1))))
        else:
            keys.append(("attr", m.group(2)))
        pos = m.end()
    return root, keys


def resolve_path(path: str, obj: Any) -> Any:
    """Follow ``path`` into ``obj``.

    For a rooted path (``args[0]``) ``obj`` is a mapping holding the root, for example
    ``{"params": dict(model.named_parameters()), "buffers": {...}, "args": args,
    "kwargs": kwargs}``; for an output path (``[0]['a']``) it is the output itself.
    """
    root, keys = parse_path(path)
    cur = obj[root] if root is not None else obj
    for kind, key in keys:
        cur = cur[key] if kind == "item" else getattr(cur, key)
    return cur
