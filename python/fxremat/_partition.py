"""Partitioning from Python: the joint graph goes to the C++ library through the
``fxremat._C`` extension; the forward and backward graphs come back as runnable
``torch.fx.GraphModule`` objects with the signature that fixes their positions.
"""

from __future__ import annotations

import json
import operator
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

_REBUILD_HINT = "rebuild it with `make build` (or `make test`) from the fxremat checkout"


def _extension():
    """The compiled extension, or a clear error that says how to rebuild it."""
    from . import __version__

    try:
        from . import _C  # type: ignore[attr-defined]
    except ImportError as e:
        raise ImportError(f"fxremat's C++ extension fxremat._C is missing or cannot be loaded ({e}); {_REBUILD_HINT}") from e
    if getattr(_C, "__version__", None) != __version__:
        raise ImportError(
            f"fxremat._C is version {getattr(_C, '__version__', '?')} but the Python package is {__version__}; "
            f"{_REBUILD_HINT}"
        )
    return _C


@dataclass
class Partition:
    """The result of :func:`partition`.

    ``forward(*primals)`` returns the user outputs followed by the saved values;
    ``backward(*backward_inputs)`` takes the saved symints, saved tensors and tangents
    in the order ``signature`` states and returns one gradient (or None) per primal.
    """

    forward: Any
    backward: Any
    signature: dict

    @property
    def saved_bytes(self) -> int:
        return int(self.signature["saved_bytes"])

    def run(self, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[list, list]:
        """Runs forward then backward, wiring every value by the signature's indices.

        Returns ``(forward_outputs, gradients)``.
        """
        fw_out = list(self.forward(*primals))
        grads = list(self.backward(*self.backward_inputs(primals, fw_out, tangents)))
        return fw_out[: self.signature["num_fwd_outputs"]], grads

    def backward_inputs(self, primals: Sequence[Any], fw_out: Sequence[Any], tangents: Sequence[Any]) -> list:
        """The backward's arguments after the forward returned ``fw_out``: the saved
        values and ``tangents`` at the signature's positions. First writes mutated
        inputs back into ``primals``, as AOTAutograd's epilogue does before the backward
        runs (Note [Mutated inputs] in passes/protect_mutations.h)."""
        sig = self.signature
        if len(fw_out) != sig["forward"]["num_outputs"]:
            raise ValueError(f"forward returned {len(fw_out)} values, signature says {sig['forward']['num_outputs']}")
        import torch

        with torch.no_grad():
            for p in sig["primals"]:
                k = p.get("written_back_from")
                if k is not None:
                    primals[p["forward_input_index"]].copy_(fw_out[k])
        bw_in: list[Any] = [None] * sig["backward"]["num_inputs"]
        for s in sig["saved"]:
            bw_in[s["backward_input_index"]] = fw_out[s["forward_output_index"]]
        if len(tangents) != len(sig["tangents"]):
            raise ValueError(f"{len(tangents)} tangents given, signature has {len(sig['tangents'])}")
        for t, value in zip(sig["tangents"], tangents):
            bw_in[t["backward_input_index"]] = value
        for o in sig.get("opaque_inputs", []):  # Note [Opaque inputs]: the caller's object
            bw_in[o["backward_input_index"]] = primals[o["forward_input_index"]]
        return bw_in


def _document_source(joint: Any) -> tuple[dict, str, str | None]:
    """``(document, sidecar_dir, path)``: for a path, the file's document, the directory
    its constants sidecar lies in and the path (for messages); otherwise
    ``(_document(joint), "", None)``."""
    if isinstance(joint, (str, os.PathLike)):
        from ._format import _read_doc

        return _read_doc(joint), os.path.dirname(os.path.abspath(os.fspath(joint))), os.fspath(joint)
    return _document(joint), "", None


def _refused_document(e: Exception, path: str | None) -> ValueError:
    """The C++ reader's refusal of a document: :class:`FormatError` naming the file
    when it came from one (as :func:`fxremat.load` raises), else
    :class:`UnsupportedGraphError` (Note [Refused joint documents])."""
    from ._errors import FormatError, UnsupportedGraphError

    if path is not None:
        return FormatError(f"{path}: {e}")
    return UnsupportedGraphError(f"fxremat's reader refuses the joint graph's document: {e}")


def _document(joint: Any) -> dict:
    """The format's document (a dict) for a path, a JointGraph or a GraphModule."""
    from ._export import JointGraph
    from ._format import to_json

    if isinstance(joint, (str, os.PathLike)):
        from ._format import _read_doc

        return _read_doc(joint)
    if isinstance(joint, JointGraph):
        return joint.to_json()
    import torch.fx as fx

    if isinstance(joint, fx.GraphModule):
        return to_json(joint)
    raise TypeError(f"expected a JointGraph, a joint fx.GraphModule or a path, got {type(joint).__name__}")


def _document_text(joint: Any) -> str:
    from ._format import dumps

    return dumps(_document(joint))


def flag_option(name: str, value: Any, who: str = "fxremat") -> bool:
    """An on/off option's value: a bool, 0 or 1, or the texts the C++ options take
    ("true"/"True"/"1", "false"/"False"/"0"). Anything else is an error: ``bool()``
    would read the text "false" as on."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value in ("true", "True", "1"):
        return True
    if isinstance(value, str) and value in ("false", "False", "0"):
        return False
    raise ValueError(f"{who}: option {name} takes True or False, not {value!r}")


def check_mincut_options(options: dict[str, str]) -> None:
    """Checks min-cut options (``{name: text}``) with the C++ reader of options, so a
    bad value is an error when the options are given, not at the first compile."""
    if options:
        _extension().check_options(options)


# The options whose C++ value is a comma-separated list of indices (SetMinCutOption
# in passes/min_cut_partition.cpp); every other option takes one value.
INDEX_LIST_OPTIONS = ("static_lifetime_input_indices",)


def options_mapping(options: Any, who: str = "fxremat") -> Mapping:
    """``options`` (None: none), checked to be a mapping of names to values: a list of
    pairs or a text such as ``"cse=false"`` is an error naming ``options``, not an
    AttributeError from deep inside."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{who}: options must be a dict of option names to values, not {type(options).__name__}")
    return options


def _option_text(name: str, value: Any, who: str = "fxremat") -> str:
    """The C++ text of option ``name``'s value. A list or tuple is an index list, for
    the options that take one only, and each element must be an int: ``int()`` would
    read 0.5 as 0 (a budget of 0) and 1.7 as index 1."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        if name not in INDEX_LIST_OPTIONS:
            raise TypeError(f"{who}: option {name} takes one value, not a {type(value).__name__} ({value!r})")
        return ",".join(str(_index(name, v, who)) for v in value)
    return str(value)


def _index(name: str, v: Any, who: str) -> int:
    """An element of an index list: an int or another integer type (numpy's), never a
    bool or a float."""
    if not isinstance(v, bool):
        try:
            return operator.index(v)
        except TypeError:
            pass
    raise TypeError(f"{who}: option {name} takes a list of int indices; {v!r} ({type(v).__name__}) is not one")


OFFLOAD_TARGETS = ("torch", "torch_async", "xla")


@dataclass(frozen=True)
class PipelineRequest:
    """What the pipeline does besides partitioning (Note [Partition pipeline] in
    ``include/fxremat/pipeline.h``): the policy (its JSON text), the offload target, the
    XLA optimization barriers and whether the naming ops stay in the graphs."""

    policy: str | None = None
    offload_target: str = "torch"
    barrier: bool = False
    keep_annotations: bool = False

    @classmethod
    def make(cls, policy: Any = None, offload_target: str = "torch", barrier: bool = False,
             keep_annotations: bool = False) -> "PipelineRequest":
        import json

        from .policies import as_policy_json

        if offload_target not in OFFLOAD_TARGETS:
            raise ValueError(f"fxremat: unknown offload_target {offload_target!r} (available: {', '.join(OFFLOAD_TARGETS)})")
        barrier = flag_option("barrier", barrier)
        keep_annotations = flag_option("keep_annotations", keep_annotations)
        if barrier and offload_target != "xla":
            raise ValueError("fxremat: barrier=True inserts xla::optimization_barrier and needs offload_target='xla'")
        doc = as_policy_json(policy)
        return cls(None if doc is None else json.dumps(doc), offload_target, barrier, keep_annotations)

    @property
    def is_default(self) -> bool:
        return self == PipelineRequest()

    def describe(self) -> str:
        return repr((self.policy, self.offload_target, self.barrier, self.keep_annotations))


def partition_document(document: dict, partitioner: str, options: dict[str, str],
                       request: PipelineRequest | None = None, *, brief: bool = False, sidecar_dir: str = "",
                       path: str | None = None) -> tuple[dict, dict, dict]:
    """``fxremat._C.partition_document`` with the pipeline's arguments; a clear error
    when the extension predates them. ``brief``: for a caller that holds the joint
    graph (partition_fn), a node copied from it comes back as its name, op, target and
    recompute decision only (``GraphToJsonBrief``), most of the answer's size; the
    full documents serve such a caller as well (the dict path below).

    The C++ reader refusing the document fxremat's encoder wrote raises
    :class:`UnsupportedGraphError` (Note [Refused joint documents] in
    src/python/bindings.cpp): the graph holds something the format cannot carry yet,
    which ``fallback=True`` hands to PyTorch's partitioner. A document read from the
    file ``path`` raises :class:`FormatError` naming it; ``sidecar_dir`` is where that
    file's constants sidecar lies."""
    _C = _extension()
    try:
        return _partition_document(_C, document, partitioner, options, request, brief, sidecar_dir)
    except getattr(_C, "DocumentError", ()) as e:  # () catches nothing: an extension that predates it
        raise _refused_document(e, path) from e


def _partition_document(_C, document: dict, partitioner: str, options: dict[str, str],
                        request: PipelineRequest | None, brief: bool, sidecar_dir: str) -> tuple[dict, dict, dict]:
    request = request or PipelineRequest()
    # The document goes over as JSON text and the answers come back as JSON text:
    # json's C encoder and decoder, C++'s simdjson reader and streaming writer beat
    # walking the dicts object by object through nlohmann's DOM (bench/
    # partition_fn_bench.py: 2.35 -> 1.75 ms for an 82-node graph). A document
    # json cannot write (it has no such values today) takes the dict path.
    try:
        text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = None
    if text is not None:
        try:
            answers = _C.partition(text, partitioner, options, policy=request.policy,
                                   offload_target=request.offload_target, barrier=request.barrier,
                                   keep_annotations=request.keep_annotations, brief=brief,
                                   **({"sidecar_dir": sidecar_dir} if sidecar_dir else {}))
        except TypeError as e:
            if "incompatible function arguments" not in str(e):
                raise
        else:
            return tuple(json.loads(a) for a in answers)  # type: ignore[return-value]
    try:
        return _C.partition_document(document, partitioner, options, policy=request.policy,
                                     offload_target=request.offload_target, barrier=request.barrier,
                                     keep_annotations=request.keep_annotations,
                                     **({"sidecar_dir": sidecar_dir} if sidecar_dir else {}))
    except TypeError as e:
        if "incompatible function arguments" not in str(e):
            raise
        if not request.is_default:
            raise ImportError(f"fxremat._C does not take policies or offload options (it predates them); "
                              f"{_REBUILD_HINT}") from e
        return _C.partition_document(document, partitioner, options)


def partition(
    joint: Any,
    partitioner: str = "mincut",
    options: dict | None = None,
    static_lifetime_input_indices: Sequence[int] | None = None,
    *,
    policy: Any = None,
    offload_target: str = "torch",
    barrier: bool = False,
    keep_annotations: bool = False,
) -> Partition:
    """Partitions a joint graph with the C++ partitioner named ``partitioner``.

    ``joint`` is a :class:`fxremat.JointGraph`, a joint ``fx.GraphModule`` loaded by
    :func:`fxremat.load`, or a path to a saved graph. ``partitioner`` is ``"mincut"``
    (functorch's ``min_cut_rematerialization_partition``) or ``"default"`` (functorch's
    ``default_partition``). ``options`` holds min-cut knobs under functorch's config
    names (``recompute_views``, ``aggressive_recomputation``, ``ban_recompute_*``,
    ``treat_parameters_as_free_to_save``, ``cse``, ``max_dist_from_bw``, ...).
    ``static_lifetime_input_indices`` lists the primals that are parameters (free to
    save); by default, the primals whose pytree path starts with ``params[`` or
    ``buffers[``. Errors in the graph raise ``ValueError`` with the library's message
    (it names the node or JSON path).

    ``policy``: a checkpoint policy (:mod:`fxremat.policies` object, its text form
    ``"save_only_these_names:a,b"`` or JSON form; ``docs/policies.md``), mincut only.
    ``offload_target``: how offloaded values move (``"torch"``: ``prims.device_put``
    to cpu and back; ``"torch_async"``: ``fxremat::offload`` / ``reload`` on a side
    stream, overlapped with the compute; ``"xla"``: ``xla::place_to_host`` /
    ``place_to_device``).
    ``barrier``: with the xla target, pass the inputs of recomputed regions through
    ``xla::optimization_barrier``. ``keep_annotations``: keep the naming ops
    (``fxremat::checkpoint_name``, ``xla::name_tensor``) in the graphs. Contradictory
    demands (a value both MUST_SAVE and MUST_RECOMPUTE, ...) raise ``ValueError``.
    """
    from ._format import from_json

    request = PipelineRequest.make(policy, offload_target, barrier, keep_annotations)
    opts = {str(k): _option_text(str(k), v) for k, v in options_mapping(options).items()}
    if static_lifetime_input_indices is not None:
        opts["static_lifetime_input_indices"] = _option_text("static_lifetime_input_indices",
                                                             list(static_lifetime_input_indices))
    doc, sidecar_dir, path = _document_source(joint)
    fw_doc, bw_doc, signature = partition_document(doc, partitioner, opts, request, sidecar_dir=sidecar_dir, path=path)
    for note in signature.get("notes") or ():
        import warnings

        warnings.warn(f"fxremat: {note}", stacklevel=2)
    return Partition(forward=from_json(fw_doc, written_by_cpp=True), backward=from_json(bw_doc, written_by_cpp=True),
                     signature=signature)


def peak_front(doc: dict, opts: dict[str, str], policy_json: str | None, points: int, *, sidecar_dir: str = "",
               path: str | None = None) -> list[dict]:
    """The extension's front of a joint-graph document, given validated extension
    options and the policy's JSON text (``PipelineRequest.policy``); ``sidecar_dir``
    and ``path`` as for :func:`partition_document`."""
    try:  # JSON text: the extension's fast reader (as partition_document)
        text: Any = json.dumps(doc, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = doc
    _C = _extension()
    try:
        return list(_C.peak_front(text, opts, policy=policy_json, points=int(points),
                                  **({"sidecar_dir": sidecar_dir} if sidecar_dir else {})))
    except getattr(_C, "DocumentError", ()) as e:
        raise _refused_document(e, path) from e


def pareto(joint: Any, points: int = 20, options: dict | None = None, *, policy: Any = None,
           plot: Any = None) -> list[dict]:
    """The step-peak / recompute-cost front of a joint graph (Note [Peak budget],
    ``docs/budget.md``): the candidates the budget solver weighs (the min cut, "inputs
    only", segmentations), then ``points`` budgets evenly spaced from the smallest peak
    to the min cut's, each solved. Returns one dict per point: ``label``,
    ``peak_bytes`` (simulated, above the inputs), ``recompute_cost``
    (flops-equivalent), ``saved_bytes``. ``plot``: a path; the front is drawn there
    with matplotlib (any format it writes, e.g. ``front.svg``). Same as
    ``fxremat pareto``."""
    from ._partition_fn import check_partitioner

    request = PipelineRequest.make(policy)
    opts = check_partitioner("mincut", options)
    doc, sidecar_dir, path = _document_source(joint)
    front = peak_front(doc, opts, request.policy, points, sidecar_dir=sidecar_dir, path=path)
    if plot is not None:
        plot_front(front, plot, title=getattr(joint, "name", None) or "joint graph")
    return front


def plot_front(front: Sequence[dict], path: Any, title: str = "", extra: Sequence[dict] = ()) -> None:
    """Draws a front (``pareto``'s points, plus ``extra`` points such as PyTorch's
    budgets, each a dict with ``label``, ``peak_bytes``, ``recompute_cost`` and an
    optional ``color``) into ``path`` with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    mib = 1024 * 1024
    cands = [p for p in front if not p["label"].startswith("budget")]
    budgets = [p for p in front if p["label"].startswith("budget")]
    ax.scatter([p["recompute_cost"] for p in cands], [p["peak_bytes"] / mib for p in cands], s=12, c="grey",
               label="solver candidates")
    ax.plot([p["recompute_cost"] for p in budgets], [p["peak_bytes"] / mib for p in budgets], "o-", c="steelblue",
            label="fxremat budgets")
    for p in front:
        if p["label"] in ("min cut", "inputs only"):
            ax.scatter([p["recompute_cost"]], [p["peak_bytes"] / mib], s=40, c="red" if p["label"] == "min cut" else "orange",
                       label=p["label"])
    for p in extra:
        ax.scatter([p["recompute_cost"]], [p["peak_bytes"] / mib], s=40, marker="x", c=p.get("color", "black"),
                   label=p["label"])
    ax.set_xlabel("recompute cost (flops-equivalent)")
    ax.set_ylabel("step peak above the inputs (MiB)")
    ax.set_title(f"{title}: peak vs recompute cost")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)


def to_text(graph: Any) -> str:
    """The IR text form (FX ``graph.code`` style, with fxremat's facts) of a graph."""
    return _extension().to_text(_document_text(graph))
