"""fxremat: export, serialize and partition PyTorch AOTAutograd joint graphs.

Importing the package is cheap: torch and the optional compiled extension ``fxremat._C``
are only imported when a function that needs them is first used.

Public API
----------
- :func:`export_joint` -- trace a function or ``nn.Module`` into a :class:`JointGraph`
  (joint forward/backward FX graph through Dynamo + AOTAutograd, fake tensors only).
- :func:`save` / :func:`load` -- write / read the JSON format of ``docs/format.md``
  (``.json`` or ``.json.gz``) for any ``torch.fx.GraphModule``.
- :func:`to_json` / :func:`from_json` -- the same on in-memory documents.
- :func:`load_joint` -- :func:`load` wrapped as a :class:`JointGraph`.
- :func:`resolve_path` -- look up a recorded pytree path (``args[1]['weights']``).
- :func:`partition` / :func:`to_text` -- the C++ library through ``fxremat._C``.
- :func:`checkpoint_name` -- name a value (``fxremat::checkpoint_name``) for policies.
- :mod:`fxremat.policies` -- checkpoint policies (JAX's and PyTorch's vocabulary).
- :func:`print_saved_residuals` / :func:`saved_residuals` -- what a policy saves.
- :class:`FormatError`, :class:`ExportError`, :class:`UnsupportedGraphError`.

``fxremat::checkpoint_name`` is registered with PyTorch when ``import fxremat`` runs
after ``import torch`` (the usual order); otherwise on first use of
:func:`checkpoint_name` or of anything that reads graphs.
"""

from ._errors import ExportError, FormatError, UnsupportedGraphError

__version__ = "0.1.0"

FORMAT_VERSION = (1, 7)  # the version the writers write (fxremat._format.VERSION)

_LAZY = {
    "export_joint": "._export",
    "JointGraph": "._export",
    "save": "._format",
    "load": "._format",
    "to_json": "._format",
    "from_json": "._format",
    "load_joint": "._export",
    "resolve_path": "._paths",
    "format_path": "._paths",
    # C++ partitioner through the compiled extension fxremat._C (imported on first use)
    "partition": "._partition",
    "Partition": "._partition",
    "to_text": "._partition",
    "pareto": "._partition",
    # drop-in AOTAutograd partition_fn, its records, and fw/bw extraction
    "partition_fn": "._partition_fn",
    "PartitionRecord": "._partition_fn",
    "partition_records": "._partition_fn",
    "extract": "._extract",
    # named values and checkpoint policies (issue 4)
    "checkpoint_name": "._names",
    "policies": ".policies",
    "xla_compat": ".xla_compat",
    "print_saved_residuals": "._residuals",
    "saved_residuals": "._residuals",
    "Residual": "._residuals",
}

__all__ = [
    "ExportError",
    "FORMAT_VERSION",
    "FormatError",
    "UnsupportedGraphError",
    *sorted(_LAZY),
]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fxremat' has no attribute {name!r}")
    import importlib

    mod = importlib.import_module(module, __name__)
    value = mod if module == "." + name else getattr(mod, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def _register_ops_if_torch_is_loaded() -> None:
    import sys

    if "torch" in sys.modules:
        from . import _names  # noqa: F401  (defines fxremat::checkpoint_name)
        from . import _offload_ops  # noqa: F401  (fxremat::offload / reload / wait_tensor)


_register_ops_if_torch_is_loaded()
