"""A drop-in ``partition_fn`` for AOTAutograd, backed by the C++ partitioner.

    fw, bw = fxremat.partition_fn()(joint_module, joint_inputs, num_fwd_outputs=n)

What the C++ library decides, and what Python builds
----------------------------------------------------
The joint graph is encoded as the format's document (``fxremat.to_json``, a dict) and
handed to ``fxremat._C.partition_document``, which runs the chosen partitioner (CSE,
recompute-tag cleanup, min cut or default choice, extraction) and returns the forward
and backward graphs *as documents* plus the signature. Those documents are the whole
decision: which joint nodes go into each graph, in which order, which node stands for
a CSE'd duplicate, which values are saved and at which positions.

Python then builds the two ``fx.GraphModule``s from the **original joint graph's
nodes**, looked up by name: every emitted node is a copy of the joint node of the same
name (same target, the same Python argument objects, ``meta`` shallow-copied as FX's
``node_copy`` does, so fake tensors, symbolic shapes, stack traces and AOTAutograd
descriptors are the ones AOTAutograd traced). Only where a joint argument refers to a
node the C++ CSE merged away is the document consulted, for the representative's name.
No fake tensor is rebuilt and nothing is re-traced.

Python decides nothing: the C++ pipeline already ordered both graphs as PyTorch's
``min_cut_rematerialization_partition`` does after extraction (the backward mimics the
autograd engine, ``passes/reorder_backward.h``; getitems follow their producers,
``passes/raise_getitems.h``) and settled the saved values (symbol-binding SymInts under
dynamic shapes, no-vc-check tensors last: ``passes/order_saved_values.h``). The modules
are built entry for entry, in the documents' order, so ``fxremat partition`` and this
``partition_fn`` emit the same graphs. Positions are then checked against the
signature. The modules honour AOTAutograd's runtime contract (Note [AOTAutograd runtime
contract] in ``include/fxremat/partition.h``): forward outputs = user outputs, saved
tensors, saved symints; backward inputs = saved symints, saved tensors, tangents.

Records of every partition (time per phase, saved bytes) are kept for reports:
:func:`partition_records`.
"""

from __future__ import annotations

import collections
import copy
import gc
import hashlib
import inspect
import operator
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

from ._errors import UnsupportedGraphError

PARTITIONERS = ("mincut", "default")

# The min-cut knobs the C++ library takes, by their torch._functorch.config names
# (passes/min_cut_partition.h, SetMinCutOption), plus fxremat's own max_flow and the
# peak budget's memory_budget_bytes, budget_objective, recompute_flops_per_byte,
# budget_milp_max_variables, budget_milp_max_nodes, peak_model, offload_bandwidth_gbps,
# device_memory_bandwidth_gbps, device_tflops (Note [Peak budget], docs/budget.md).
MINCUT_OPTIONS = (
    "activation_memory_budget",
    "aggressive_recomputation",
    "ban_recompute_long_fusible_chains",
    "ban_recompute_materialized_backward",
    "ban_recompute_not_in_allowlist",
    "ban_recompute_reductions",
    "ban_recompute_used_far_apart",
    "cse",
    "max_dist_from_bw",
    "max_flow",
    "recompute_views",
    "treat_parameters_as_free_to_save",
    "memory_budget_bytes",
    "budget_objective",
    "recompute_flops_per_byte",
    "budget_milp_max_variables",
    "budget_milp_max_nodes",
    "peak_model",
    "offload_bandwidth_gbps",
    "device_memory_bandwidth_gbps",
    "device_tflops",
)

def check_partitioner(partitioner: str, options: dict | None, who: str = "fxremat") -> dict[str, str]:
    """Validates ``partitioner`` and the min-cut ``options``; returns them as the
    extension's ``{name: text}`` map. ``who`` begins the messages of bad options."""
    from ._partition import _option_text, check_mincut_options, options_mapping

    if partitioner not in PARTITIONERS:
        raise ValueError(f"fxremat: unknown partitioner {partitioner!r} (available: {', '.join(PARTITIONERS)})")
    opts: dict[str, str] = {}
    for k, v in options_mapping(options, who).items():
        if k not in MINCUT_OPTIONS:
            raise ValueError(
                f"fxremat: unknown min-cut option {k!r}; the options are functorch config names: "
                + ", ".join(MINCUT_OPTIONS)
            )
        opts[k] = _option_text(k, v, who)
    if opts and partitioner != "mincut":
        raise ValueError(f"fxremat: min-cut options {sorted(opts)} do not apply to partitioner {partitioner!r}")
    check_mincut_options(opts)
    return opts


# --------------------------------------------------------------------------------------
# torch._functorch.config
# --------------------------------------------------------------------------------------
#
# Note [Ambient functorch config]
# PyTorch's partitioners read torch._functorch.config when they run, so the values set
# globally or under torch._functorch.config.patch(...) around a compile apply. An
# fxremat partition_fn reads them when it is called, too (never when it is made). Every
# knob partitioners.py (torch 2.13) reads is one of:
#
# - honoured, mincut only: the MINCUT_OPTIONS names (not max_flow, fxremat's own). A knob
#   whose ambient value differs from the C++ default (passes/min_cut_partition.h
#   MinCutOptions, the same defaults as functorch's) goes to the C++ min cut; an
#   explicit option of the same name overrides it. default_partition reads none of
#   them, so for partitioner="default" they are not read at all.
#   activation_memory_budget is any fraction in [0, 1]: with fxremat it bounds the
#   step's peak (Note [Peak budget], docs/budget.md), the objective PyTorch's knob
#   stands for; options={"budget_objective": "saved"} asks for PyTorch's meaning.
# - not honourable: _UNHONOURED_CONFIG below; with a partitioner that reads the knob,
#   any other value than the one listed (its default) is an error naming the knob and
#   the value. (Per-region budgets -- node.meta["memory_budget"],
#   region_activation_memory_budget annotations -- are graph content, not config, and
#   are not read by fxremat.)
# - irrelevant to the partition (ignored):
#   activation_memory_budget_solver, activation_memory_budget_runtime_estimator,
#     is_non_builtin_to_include, visualize_memory_budget_pareto, memory_budget_pareto_dir
#     (the knobs of PyTorch's knapsack over saved bytes; fxremat's peak solver replaces
#     it, and its front comes from `fxremat pareto` / fxremat.pareto / the backend's
#     pareto_dir);
#   debug_partitioner (logging only, read when partitioners.py is imported);
#   torch_compile_graph_format (file format of draw_graph's debug drawings);
#   unsafe_treat_script_objects_as_zero_size (_size_of of script objects: the format
#     cannot encode script objects, so such a graph never reaches the C++ partitioner);
#   graphsafe_rng_functionalization, and Inductor's fallback_random /
#     test_configs.graphsafe_rng_func_ignores_fallback_random (they choose how
#     functionalize_rng_ops replays a recomputed random op on CUDA: the graph-safe pair
#     graphsafe_run_with_rng_state on generator inputs, or the stateful
#     run_and_save_rng_state / run_with_rng_state that it uses on the CPU. fxremat
#     always emits the stateful pair, Note [Replaying random ops] in
#     passes/functionalize_rng.h: the draw is replayed exactly either way, but on CUDA
#     the two pairs can take numbers from the generator in another order, so the same seed
#     need not draw the same masks as PyTorch does by default; with the knob off PyTorch
#     uses the stateful pair too);
#   activation_offload_separate_stream and the other activation_offload_* /
#     activation_reload_* knobs (read only when enable_activation_offloading is on,
#     which is an error).
# Inductor's post_grad_fusion_options["activation_quantization_aten_pass"] also changes
# what the partitioners return (_extract_fwd_bwd_modules quantizes saved activations);
# fxremat does not, so it is an error too (checked when torch._inductor.config is loaded:
# otherwise it holds its default, {}).

# The C++ defaults of the honoured knobs (= torch._functorch.config's defaults).
_MINCUT_DEFAULTS: dict[str, Any] = {
    "activation_memory_budget": 1.0,
    "aggressive_recomputation": False,
    "ban_recompute_long_fusible_chains": True,
    "ban_recompute_materialized_backward": True,
    "ban_recompute_not_in_allowlist": True,
    "ban_recompute_reductions": True,
    "ban_recompute_used_far_apart": True,
    "cse": True,
    "max_dist_from_bw": 1000,
    "recompute_views": False,
    "treat_parameters_as_free_to_save": True,
}

# knob: (the only value fxremat implements, the partitioners that read the knob, why)
_UNHONOURED_CONFIG: dict[str, tuple[Any, tuple[str, ...], str]] = {
    # Inserts PyTorch's own offload/reload ops after partitioning; fxremat offloads by
    # policy (docs/policies.md) instead.
    "enable_activation_offloading": (False, ("mincut", "default"),
                                     "fxremat does not run PyTorch's activation offloading; a policy can offload "
                                     "instead, docs/policies.md"),
    # fxremat always saves collectives (never recomputes them outside checkpoint regions).
    "unsafe_allow_optimization_of_collectives": (False, ("mincut", "default"), "fxremat always saves collectives"),
    # Agrees on the saved set across ranks with a collective at compile time.
    "_sync_decision_cross_ranks": (False, ("mincut", "default"),
                                   "fxremat does not synchronize its decision across ranks"),
}

_QUANT_PASS = "activation_quantization_aten_pass"


def _knob(name: str) -> str:
    return f"torch._functorch.config.{name}"


def ambient_options(partitioner: str, explicit: dict | None = None) -> dict[str, str]:
    """The extension options the ambient ``torch._functorch.config`` asks for, read
    now, for the knobs not in ``explicit`` (Note [Ambient functorch config]); raises
    ``ValueError`` naming a knob set to a value fxremat cannot honour."""
    import sys

    from torch._functorch import config as cfg

    from ._partition import _option_text, check_mincut_options

    explicit = explicit or {}
    for name, (want, partitioners, why) in _UNHONOURED_CONFIG.items():
        value = getattr(cfg, name, want)
        if partitioner in partitioners and value != want:
            raise ValueError(
                f"fxremat: {_knob(name)}={value!r} is not supported ({why}); the {partitioner} partitioner "
                f"implements only {_knob(name)}={want!r}"
            )
    ind = sys.modules.get("torch._inductor.config")
    if ind is not None and (getattr(ind, "post_grad_fusion_options", None) or {}).get(_QUANT_PASS) is not None:
        raise ValueError(
            f"fxremat: torch._inductor.config.post_grad_fusion_options[{_QUANT_PASS!r}] is set: PyTorch's "
            "partitioners then quantize saved activations, which fxremat does not do"
        )
    if partitioner != "mincut":  # default_partition reads none of the min-cut knobs
        return {}
    opts: dict[str, str] = {}
    for name, default in _MINCUT_DEFAULTS.items():
        if name in explicit:
            continue
        if name == "activation_memory_budget" and "memory_budget_bytes" in explicit:
            continue  # an explicit byte budget replaces the ambient fraction (two budgets are refused)
        value = getattr(cfg, name, default)
        if value == default:
            continue
        opts[name] = _option_text(name, value)
        try:
            check_mincut_options({name: opts[name]})
        except ValueError as e:  # say where the value came from: no option of the call set it
            raise ValueError(f"fxremat: {_knob(name)}={value!r} cannot be honoured: {e}") from None
    return opts


def ambient_config_key() -> tuple:
    """The raw values of every knob Note [Ambient functorch config] reads, for cache keys."""
    from torch._functorch import config as cfg

    return tuple((k, repr(getattr(cfg, k, None))) for k in (*_MINCUT_DEFAULTS, *_UNHONOURED_CONFIG))


def _config_value(name: str, text: str) -> Any:
    """An extension option's text as the ``torch._functorch.config`` value (fallback)."""
    from ._partition import flag_option

    default = _MINCUT_DEFAULTS[name]
    if isinstance(default, bool):
        return flag_option(name, text)
    return type(default)(float(text))


# --------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------


@dataclass
class PartitionRecord:
    """What one call of an fxremat ``partition_fn`` did.

    ``seconds`` holds the wall time of each phase: ``to_json`` (encoding the joint
    graph), ``cpp`` (the extension call: decoding, partitioning, emitting documents),
    ``build`` (the GraphModules), ``dump`` and ``total``.
    """

    partitioner: str
    joint_nodes: int
    forward_nodes: int
    backward_nodes: int
    saved_bytes: int
    num_saved: int
    seconds: dict[str, float]
    signature: dict = field(repr=False)
    dump_dir: str | None = None
    fallback: str | None = None  # why the PyTorch partitioner was used instead, if it was
    pareto_dir: str | None = None  # where the front went (the backend's pareto_dir), if asked


_RECORDS: collections.deque[PartitionRecord] = collections.deque(maxlen=1024)
_RECORDS_LOCK = threading.Lock()


def partition_records() -> list[PartitionRecord]:
    """The records of the partitions done in this process (oldest first, at most 1024)."""
    with _RECORDS_LOCK:
        return list(_RECORDS)


def clear_partition_records() -> None:
    with _RECORDS_LOCK:
        _RECORDS.clear()


def _record(r: PartitionRecord) -> None:
    with _RECORDS_LOCK:
        _RECORDS.append(r)


# --------------------------------------------------------------------------------------
# Building GraphModules from the C++ documents and the joint graph's nodes
# --------------------------------------------------------------------------------------


def _refs(a: Any, out: list[str]) -> None:
    """Names of the nodes a document argument refers to."""
    if isinstance(a, list):
        for x in a:
            _refs(x, out)
    elif isinstance(a, dict):
        r = a.get("node")
        if r is not None:
            out.append(r)
        else:
            for v in a.values():
                if isinstance(v, (list, dict)):
                    _refs(v, out)


def _map_with_doc(a: Any, j: Any, env: dict[str, fx.Node], where: str) -> Any:
    """Maps a joint-graph argument, taking node references from the document's
    argument at the same position (where the C++ CSE replaced a duplicate)."""
    if isinstance(a, fx.Node):
        if not (isinstance(j, dict) and "node" in j):
            raise RuntimeError(f"fxremat internal error: {where}: the document has {j!r} where the joint graph has node {a.name}")
        return env[j["node"]]
    if isinstance(a, (list, tuple)):
        if not isinstance(j, list) or len(j) != len(a):
            raise RuntimeError(f"fxremat internal error: {where}: argument structure differs from the document's")
        items = [_map_with_doc(x, y, env, where) for x, y in zip(a, j)]
        return tuple(items) if isinstance(a, tuple) else items
    if isinstance(a, dict):  # a dict argument (format 1.6): the document's {"dict": [[key, value], ...]}
        items = dict(j["dict"]) if isinstance(j, dict) and isinstance(j.get("dict"), list) else {}
        return {k: _map_with_doc(v, items.get(k), env, where) for k, v in a.items()}
    return a


def _fast_create_node_available() -> bool:
    g = fx.Graph()
    return all(hasattr(g, a) for a in ("_graph_namespace", "_insert", "_find_nodes_lookup_table", "_len"))


# Graph.create_node walks every argument with pytree to warn about raw SymInt
# arguments; that walk is a third of the cost of copying a graph. Copies of a traced
# graph's nodes have no raw SymInts the original did not have, so the builder creates
# its nodes the way create_node does, without the walk (when this torch has the same
# internals; else through create_node).
_FAST_CREATE = _fast_create_node_available()


def _create_node(g: fx.Graph, op: str, target: Any, args: tuple, kwargs: dict, name: str, type_expr: Any) -> fx.Node:
    if not _FAST_CREATE or g.owning_module is not None:
        return g.create_node(op, target, args, kwargs, name, type_expr)
    ns = g._graph_namespace
    name = ns.create_name(name, None)
    n = fx.Node(g, name, op, target, args, kwargs, type_expr)
    ns.associate_name_with_obj(name, n)
    g._insert(n)
    g._find_nodes_lookup_table.insert(n)
    g._len += 1
    return n


_TARGET_TEXT: dict[Any, str] = {}


def _target_text(target: Any) -> str:
    """The format's name of a joint node's target (``aten.mm.default``), memoized."""
    s = _TARGET_TEXT.get(target)
    if s is None:
        if isinstance(target, str):
            return target
        from ._format import in_process_target

        try:
            s = in_process_target(target)
        except Exception:  # noqa: BLE001 - not encodable: the document cannot name it either
            s = repr(target)
        _TARGET_TEXT[target] = s
    return s


def _device_args(a: Any, key: str | None = None) -> Any:
    """A ``device`` keyword the document spells as a plain string (``"cpu"``) becomes
    the format's device object, so that the decoder makes a ``torch.device``."""
    if key == "device" and isinstance(a, str):
        return {"device": a}
    return a


def _fake_run(target: Any, args: tuple, kwargs: dict) -> Any:
    """``target`` run on the fake values of its node arguments (None when they have
    none, or when it fails: the value is then unknown, as for any node without meta)."""
    from torch._guards import detect_fake_mode

    vals: list[Any] = []

    def val(n: fx.Node) -> Any:
        v = n.meta.get("val")
        if v is None:
            raise LookupError(n.name)
        vals.append(v)
        return v

    try:
        a = fx.node.map_arg(args, val)
        k = fx.node.map_arg(kwargs, val)
    except LookupError:
        return None
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    try:
        if mode is None:
            return target(*a, **k) if target is operator.getitem else None
        with mode:
            out = target(*a, **k)
    except Exception:  # noqa: BLE001 - meta is best effort for the pipeline's nodes
        return None
    # run_and_save_rng_state's fake kernel returns the real generator state
    # (torch.get_rng_state()); as the reference does (get_sample_rng_state), the
    # node's value is its fake copy.
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t if isinstance(t, FakeTensor) else mode.from_tensor(t), out)


def _sync_recompute(meta: dict, entry: dict) -> None:
    """The checkpoint decision C++ settled for a node (recompute-tag cleanup, forced
    saves, the policy) replaces the joint node's tag, as PyTorch's partitioners leave
    their updated tags in the emitted graphs."""
    rc = (entry.get("meta") or {}).get("recompute")
    have = meta.get("recompute")
    if rc is None:
        meta.pop("recompute", None)
    elif getattr(have, "name", None) != rc:
        from torch.utils.checkpoint import CheckpointPolicy

        meta["recompute"] = CheckpointPolicy[rc]


class _Builder:
    """Builds a graph from a document's node list, copying joint nodes by name; nodes
    the pipeline added (offload transfers, barriers) are made from their entries."""

    def __init__(self, joint_nodes: dict[str, fx.Node], mark_backward: bool, force_new: set[str] | None = None) -> None:
        self.joint_nodes = joint_nodes
        self.force_new = force_new or set()
        self.mark_backward = mark_backward
        self.graph = fx.Graph()
        self.env: dict[str, fx.Node] = {}
        self.created: set[str] = set()  # names of the nodes made from document entries

    def joint_node(self, name: str) -> fx.Node:
        n = self.joint_nodes.get(name)
        if n is None:
            raise RuntimeError(f"fxremat internal error: the partitioner emitted node {name!r}, which the joint graph lacks")
        return n

    def placeholder(self, name: str, new_name: str | None = None, meta_from: fx.Node | None = None) -> fx.Node:
        """An input for joint node ``name`` (or, for a value the pipeline made, such
        as an offloaded value's host copy, for the forward's node ``meta_from``)."""
        src = meta_from if meta_from is not None else self.joint_node(name)
        p = self.graph.placeholder(new_name or name)
        # as _extract_graph_with_inputs_outputs: the input shares the joint node's meta
        p.meta = src.meta if meta_from is None else {k: v for k, v in src.meta.items() if k == "val"}
        self.env[name] = p
        return p

    def is_new(self, entry: dict) -> bool:
        """Whether the document's node is not a joint node: one the pipeline made
        (offload transfers, optimization barriers and their getitems)."""
        src = self.joint_nodes.get(entry["name"])
        if src is None or entry["name"] in self.force_new:
            return True
        return entry["op"] != src.op or entry.get("target") != _target_text(src.target)

    def create(self, entry: dict) -> fx.Node:
        """A node the pipeline added, made from its document entry; ``meta["val"]`` is
        computed by running the op on its inputs' fake values."""
        from ._format import _Decoder, resolve_target

        name = entry["name"]
        op = entry["op"]
        if op != "call_function":
            raise RuntimeError(f"fxremat internal error: the partitioner emitted {op} node {name!r}, "
                               "which the joint graph lacks")
        target = resolve_target(entry["target"])
        dec = _Decoder({})
        where = f"node {name!r}"
        args = tuple(dec.arg(_device_args(a), f"{where}.args", self.env, ()) for a in entry.get("args", []))
        kwargs = {k: dec.arg(_device_args(v, k), f"{where}.kwargs.{k}", self.env, ())
                  for k, v in (entry.get("kwargs") or {}).items()}
        n = _create_node(self.graph, "call_function", target, args, kwargs, name, None)
        val = _fake_run(target, args, kwargs)
        if val is not None:
            n.meta["val"] = val
        if self.mark_backward:
            n.meta["autograd_backward"] = True
        self.env[name] = n
        self.created.add(name)
        return n

    def copy(self, entry: dict) -> fx.Node:
        name = entry["name"]
        if self.is_new(entry):
            return self.create(entry)
        src = self.joint_node(name)
        env = self.env
        lookup = lambda n: env[n.name]  # noqa: E731
        try:
            args = fx.node.map_arg(src.args, lookup)
            kwargs = fx.node.map_arg(src.kwargs, lookup)
        except KeyError:  # an argument the C++ CSE merged into its representative
            where = f"node {name!r}"
            args = _map_with_doc(tuple(src.args), entry.get("args", []), env, where)
            doc_kwargs = entry.get("kwargs", {})
            kwargs = {k: _map_with_doc(v, doc_kwargs.get(k), env, where) for k, v in src.kwargs.items()}
        n = _create_node(self.graph, src.op, src.target, args, kwargs, name, src.type)
        n.meta = copy.copy(src.meta)
        _sync_recompute(n.meta, entry)
        if self.mark_backward:
            n.meta["autograd_backward"] = True
            # Note [No recompute tags in the backward] (src/extract_partition.cpp): C++
            # drops the tags, which _sync_recompute above follows; the region ids go too.
            n.meta.pop("ac_graph_id", None)
        env[name] = n
        return n

    def finish(self, outputs: list[fx.Node | None], descs: list[Any] | None) -> fx.Graph:
        g = self.graph
        out = g.output(tuple(outputs))
        if descs is not None:
            out.meta["desc"] = descs
        out.meta["output_stack_traces"] = [v.meta.get("stack_trace") if isinstance(v, fx.Node) else None for v in outputs]
        return g


@dataclass
class Split:
    """Forward and backward GraphModules and the signature that states their positions."""

    forward: fx.GraphModule
    backward: fx.GraphModule
    signature: dict
    seconds: dict[str, float]
    forward_nodes: int = 0
    backward_nodes: int = 0


def build_modules(
    joint_module: fx.GraphModule,
    num_fwd_outputs: int,
    fw_doc: dict,
    bw_doc: dict,
    signature: dict,
    *,
    tangent_slots: list[tuple[str, str | None, int]] | None = None,
) -> tuple[fx.GraphModule, fx.GraphModule, dict]:
    """The forward and backward GraphModules for the C++ partitioner's documents, built
    from ``joint_module``'s nodes (see the module docstring). Returns the modules and
    the signature.

    ``tangent_slots``, when given, lays out the backward's tangent inputs instead of
    one per joint tangent: one ``(placeholder name, joint tangent name or None,
    forward output index)`` per input; None makes an input the graph does not read.
    Every joint tangent must appear once, in order.
    """
    from torch._functorch._aot_autograd.descriptors import (
        SavedForBackwardsAOTOutput,
        SavedForBackwardsNoVcCheckAOTOutput,
    )

    from ._format import effect_tokens, gradient_slots

    graph = joint_module.graph
    joint_nodes = {n.name: n for n in graph.nodes}
    out_node = graph.output_node()
    joint_outs = list(out_node.args[0])
    joint_descs = out_node.meta.get("desc")
    if not isinstance(joint_descs, (list, tuple)) or len(joint_descs) != len(joint_outs):
        joint_descs = None

    sig = signature
    saved = sig["saved"]
    saved_tensors = [s["name"] for s in sorted((s for s in saved if s["kind"] == "tensor"),
                                                key=lambda s: s["forward_output_index"])]
    saved_syms = [s["name"] for s in sorted((s for s in saved if s["kind"] != "tensor"),
                                             key=lambda s: s["forward_output_index"])]
    tangents = [t["name"] for t in sig["tangents"]]
    sig, saved_opaques = _save_opaque_objects(sig, num_fwd_outputs, len(saved_tensors), len(saved_syms))

    # The C++ pipeline settled the saved values' order (symbol bindings, no-vc-check
    # tensors last: passes/order_saved_values.h) and both graphs' node order
    # (passes/reorder_backward.h, passes/raise_getitems.h): the documents are built
    # node for node, in their order.
    no_vc = [s["name"] for s in saved if s["kind"] == "tensor" and s.get("no_vc_check")]

    # Note [Offload] (passes/emit_offload.h): an offloaded value's slots hold its host
    # copy, a node the pipeline made (`<name>_host`); the backward's reload of it takes
    # the joint name. Note [Snapshots of mutated inputs] (passes/protect_mutations.h):
    # a snapshot's forward slot holds its clone (`<name>_snapshot`); the backward's
    # input keeps the name. The documents' output / placeholder at the signature's
    # indices name the slots.
    fw_slot = {n: n for n in (*saved_tensors, *saved_syms)}
    bw_slot = dict(fw_slot)
    force_fw: set[str] = set()
    force_bw: set[str] = set()
    renamed = [s for s in saved if s.get("offloaded") or s.get("snapshot")]
    if renamed:
        doc_outs = fw_doc["nodes"][-1]["args"][0]
        for s in renamed:
            fw_slot[s["name"]] = doc_outs[s["forward_output_index"]]["node"]
    offloaded = [s for s in saved if s.get("offloaded")]
    if offloaded:
        doc_ins = [e["name"] for e in bw_doc["nodes"] if e["op"] == "placeholder"]
        for s in offloaded:
            bw_slot[s["name"]] = doc_ins[s["backward_input_index"]]
            force_fw.add(fw_slot[s["name"]])
        hosts = {bw_slot[s["name"]] for s in offloaded}
        for e in bw_doc["nodes"]:
            refs: list[str] = []
            _refs(e.get("args", ()), refs)
            if e["op"] == "call_function" and hosts.intersection(refs):
                force_bw.add(e["name"])  # a reload (it may carry the joint name)

    # ---- forward ---------------------------------------------------------------------
    fb = _Builder(joint_nodes, mark_backward=False, force_new=force_fw)
    fw_entries = fw_doc["nodes"]
    for e in fw_entries:
        op = e["op"]
        if op == "placeholder":
            fb.placeholder(e["name"])
        elif op == "output":
            user_outs = [None if r is None else fb.env[r["node"]] for r in e["args"][0][:num_fwd_outputs]]
        else:
            fb.copy(e)
    fw_outs = user_outs + [fb.env[fw_slot.get(n, n)] for n in (*saved_tensors, *saved_opaques, *saved_syms)]
    fw_descs = None
    if joint_descs is not None:
        n_t = len(saved_tensors)
        first_no_vc = n_t - len(no_vc)
        fw_descs = list(joint_descs[:num_fwd_outputs]) + [
            SavedForBackwardsNoVcCheckAOTOutput(i) if first_no_vc <= i < n_t else SavedForBackwardsAOTOutput(i)
            for i in range(n_t + len(saved_opaques) + len(saved_syms))
        ]
    fw_graph = fb.finish(fw_outs, fw_descs)

    # ---- backward --------------------------------------------------------------------
    bb = _Builder(joint_nodes, mark_backward=True, force_new=force_bw)
    for n in (*saved_syms, *saved_tensors):
        f, b = fw_slot.get(n, n), bw_slot.get(n, n)
        bb.placeholder(b, meta_from=fb.env[f] if f in fb.created else None)
    for n in saved_opaques:
        bb.placeholder(n)
    tangent_nodes: list[fx.Node] = []
    if tangent_slots is None:
        for n in tangents:
            tangent_nodes.append(bb.placeholder(n))
    else:
        if [jn for _, jn, _ in tangent_slots if jn is not None] != tangents:
            raise ValueError(f"tangent_slots {tangent_slots} do not list the joint tangents {tangents} in order")
        for new_name, jn, _ in tangent_slots:
            tangent_nodes.append(bb.placeholder(jn, new_name) if jn is not None else bb.graph.placeholder(new_name))
    # Note [Opaque inputs]: the backward's last inputs, from the caller
    opaque_nodes = [bb.placeholder(o["name"]) for o in sig.get("opaque_inputs", [])]
    bw_outs: list[fx.Node | None] = []
    doc_placeholders = 0
    for e in bw_doc["nodes"]:
        op = e["op"]
        if op == "placeholder":
            doc_placeholders += 1
            if e["name"] not in bb.env:
                raise RuntimeError(f"fxremat internal error: backward input {e['name']!r} is not in the signature")
        elif op == "output":
            bw_outs = [None if r is None else bb.env[r["node"]] for r in e["args"][0]]
        else:
            bb.copy(e)
    token_names = {n.name for n in effect_tokens(graph)}
    if token_names and len(joint_outs) < num_fwd_outputs + len(bw_outs):
        # Note [Effect tokens] (_format.effect_tokens): the joint graph has no
        # gradient slot for a token; drop the None the document returned there.
        by_grad = sorted(sig["primals"], key=lambda p: p["gradient_index"])
        bw_outs = ([o for o, p in zip(bw_outs, by_grad) if p["name"] not in token_names]
                   + bw_outs[len(by_grad):])  # the backward's own tokens, after the gradients
        sig = dict(sig)
        k = 0
        primals = []
        for p in sig["primals"]:
            if p["name"] in token_names:
                primals.append(dict(p, gradient_index=-1, has_gradient=False))
            else:
                primals.append(dict(p, gradient_index=k))
                k += 1
        sig["primals"] = primals
        sig["backward"] = dict(sig["backward"], num_outputs=len(bw_outs))
    slots = gradient_slots(graph, num_fwd_outputs)
    if slots is not None:
        # Note [Gradients of flattened inputs] (_format.gradient_slots): the document
        # returned one gradient per primal; AOTAutograd's backward returns its own slots.
        n_grads = len(joint_outs) - num_fwd_outputs
        by_primal = sorted(sig["primals"], key=lambda p: p["gradient_index"])
        laid_out: list[fx.Node | None] = [None] * n_grads
        primals = []
        for p, o, k in zip(by_primal, bw_outs, slots):
            if k is not None:
                laid_out[k] = o
            primals.append(dict(p, gradient_index=-1 if k is None else k, has_gradient=k is not None and o is not None))
        order = {p["name"]: q for p, q in zip(by_primal, primals)}
        bw_outs = laid_out
        sig = dict(sig)
        sig["primals"] = [order[p["name"]] for p in sig["primals"]]
        sig["backward"] = dict(sig["backward"], num_outputs=n_grads)
    bw_descs = list(joint_descs[num_fwd_outputs:]) if joint_descs is not None else None
    bw_graph = bb.finish(bw_outs, bw_descs)

    if tangent_slots is not None:
        sig = dict(sig)
        n_saved = len(sig["saved"])
        sig["tangents"] = [
            {"name": t.name, "backward_input_index": n_saved + k, "forward_output_index": j, "used": jn is not None}
            for k, (t, (_, jn, j)) in enumerate(zip(tangent_nodes, tangent_slots))
        ]
        n_in = n_saved + len(tangent_slots)
        sig["opaque_inputs"] = [dict(o, backward_input_index=n_in + k) for k, o in enumerate(sig.get("opaque_inputs", []))]
        sig["backward"] = dict(sig["backward"], num_inputs=n_in + len(opaque_nodes))
    _check_positions(fw_graph, bw_graph, sig, fb.env, bb.env, tangent_nodes, fw_slot, bw_slot)

    from torch.fx._lazy_graph_module import _make_graph_module

    return _make_graph_module(joint_module, fw_graph), _make_graph_module(joint_module, bw_graph), sig



# Note [Saved opaque objects]
# A script or opaque object among the primals -- the DeviceMesh each DTensor parameter
# flattens to in a tensor-parallel model -- reaches the C++ partitioner as an opaque
# input (Note [Opaque inputs] in include/fxremat/partition.h): never cut, never priced,
# handed to the backward as an input of its own, after the tangents. That is where
# AOTAutograd's runtime puts a BackwardState, and where the CLI's graphs keep every
# opaque input. Other opaque objects its runtime carries as saved values instead
# (saved_opaque_nodes in partitioners.py; ctx.opaque_objects): the forward returns them
# after the saved tensors and before the saved symints, and the backward takes them
# after the saved tensors, before the tangents. Nothing is decided here, only where the
# object travels: build_modules moves each such input to that slot, and the signature
# lists it as a saved value of kind "opaque" (0 bytes) at the indices it then has.
def _save_opaque_objects(sig: dict, num_fwd_outputs: int, n_tensors: int, n_syms: int) -> tuple[dict, list[str]]:
    """The signature with its opaque inputs other than BackwardState made saved values
    (Note [Saved opaque objects]), and their names in order."""
    opaque = sig.get("opaque_inputs", [])
    moved = [o for o in opaque if o.get("type") != "BackwardState"]
    if not moved:
        return sig, []
    kept = [o for o in opaque if o.get("type") == "BackwardState"]
    n_o = len(moved)
    sig = dict(sig)
    saved = []
    for s in sig["saved"]:
        if s["kind"] != "tensor":  # symints come after the opaque objects among the forward's outputs
            s = dict(s, forward_output_index=s["forward_output_index"] + n_o)
        saved.append(s)
    for k, o in enumerate(moved):
        saved.append({
            "name": o["name"], "kind": "opaque", "type": o.get("type"), "annotation": None,
            "forward_output_index": num_fwd_outputs + n_tensors + k, "backward_input_index": n_syms + n_tensors + k,
            "shape": None, "dtype": None, "bytes": 0, "names": [], "decision": None, "offloaded": False,
            "origin_op": None, "origin_location": None,
        })
    sig["saved"] = saved
    sig["tangents"] = [dict(t, backward_input_index=t["backward_input_index"] + n_o) for t in sig["tangents"]]
    first = min((o["backward_input_index"] for o in opaque), default=0) + n_o
    sig["opaque_inputs"] = [dict(o, backward_input_index=first + j) for j, o in enumerate(kept)]
    sig["forward"] = dict(sig["forward"], num_outputs=sig["forward"]["num_outputs"] + n_o)
    return sig, [o["name"] for o in moved]


def _check_positions(fw: fx.Graph, bw: fx.Graph, sig: dict, fw_env: dict[str, fx.Node],
                     bw_env: dict[str, fx.Node], tangent_nodes: list[fx.Node], fw_slot: dict[str, str] | None = None,
                     bw_slot: dict[str, str] | None = None) -> None:
    """Every saved value at the forward-output and backward-input index the signature
    states, and the counts it states."""
    fw_out = fw.output_node().args[0]
    bw_in = bw.find_nodes(op="placeholder")
    problems = []
    if len(fw_out) != sig["forward"]["num_outputs"]:
        problems.append(f"forward returns {len(fw_out)} values, the signature says {sig['forward']['num_outputs']}")
    if len(bw_in) != sig["backward"]["num_inputs"]:
        problems.append(f"backward takes {len(bw_in)} inputs, the signature says {sig['backward']['num_inputs']}")
    n_opaque = len(sig.get("opaque_inputs", []))
    if len(bw_in) - len(sig["saved"]) - n_opaque != len(tangent_nodes):
        problems.append(f"backward has {len(bw_in) - len(sig['saved']) - n_opaque} tangent inputs, "
                        f"expected {len(tangent_nodes)}")
    if not problems:
        for s in sig["saved"]:
            f, b = s["forward_output_index"], s["backward_input_index"]
            fn = (fw_slot or {}).get(s["name"], s["name"])
            bn = (bw_slot or {}).get(s["name"], s["name"])
            if fw_out[f] is not fw_env.get(fn) or bw_in[b] is not bw_env.get(bn):
                problems.append(f"saved {s['name']!r} is not at forward output {f} / backward input {b}")
        for t, node in zip(sig["tangents"], tangent_nodes):
            if bw_in[t["backward_input_index"]] is not node:
                problems.append(f"tangent {t['name']!r} is not at backward input {t['backward_input_index']}")
    if problems:
        raise RuntimeError("fxremat internal error: the built graphs violate the signature: " + "; ".join(problems))


# --------------------------------------------------------------------------------------
# Splitting a joint graph
# --------------------------------------------------------------------------------------


def _hint_of(d: Any) -> int | None:
    if isinstance(d, torch.SymInt):
        hint = d.node.hint
        return int(hint) if hint is not None else None
    return int(d) if isinstance(d, int) else None


def _hint_facts(facts: Any, val: Any, symbols: dict) -> None:
    """Adds ``"hint"`` to the symbolic dims of ``facts`` that are expressions, not
    plain symbols (the C++ reader looks plain symbols up in ``symbols`` and needs the
    hint of anything else), from the fake value's symbolic sizes."""
    if not isinstance(facts, dict):
        return
    if facts.get("kind") == "tuple" and isinstance(val, (list, tuple)):
        for f, v in zip(facts.get("items", ()), val):
            _hint_facts(f, v, symbols)
        return
    if facts.get("kind") != "tensor" or not isinstance(val, torch.Tensor):
        return
    for key, dims in (("shape", val.shape), ("stride", val.stride())):
        for d, actual in zip(facts.get(key, ()), dims):
            if isinstance(d, dict) and "hint" not in d and d.get("sym") not in symbols:
                hint = _hint_of(actual)
                if hint is not None:
                    d["hint"] = hint


def _add_dim_hints(doc: dict, graph: fx.Graph) -> None:
    symbols = doc.get("symbols") or {}
    nodes = {n.name: n for n in graph.nodes}
    for entry in doc["nodes"]:
        meta = entry.get("meta")
        if meta and "val" in meta and entry["name"] in nodes:
            _hint_facts(meta["val"], nodes[entry["name"]].meta.get("val"), symbols)


class _NoGC:
    """Pauses the cyclic garbage collector: encoding a large graph allocates ~10^5
    acyclic objects (freed by reference counting), which otherwise triggers full
    collections that walk every object in the process (the occasional 0.4 s outlier)."""

    def __enter__(self):
        self.was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc):
        if self.was:
            gc.enable()


def joint_document(joint_module: fx.GraphModule, num_fwd_outputs: int) -> dict:
    """The document the extension partitions a joint graph from, symbol hints added."""
    from ._format import to_json

    doc = to_json(joint_module, kind="joint", num_fwd_outputs=num_fwd_outputs, constants="reference")
    # Stack traces are most of the document's text and the partitioner does
    # not read them; the built graphs take them from the joint graph's meta.
    doc.pop("stack_traces", None)
    for entry in doc["nodes"]:
        meta = entry.get("meta")
        if meta:
            meta.pop("stack_trace_index", None)
    if doc.get("symbols"):
        _add_dim_hints(doc, joint_module.graph)
    return doc


def split_joint(
    joint_module: fx.GraphModule,
    num_fwd_outputs: int,
    partitioner: str = "mincut",
    options: dict[str, str] | None = None,
    static_lifetime_input_indices: Sequence[int] | None = None,
    *,
    doc: dict | None = None,
    tangent_slots: list[tuple[str, str | None, int]] | None = None,
    request: Any = None,
) -> Split:
    """Partitions ``joint_module`` with the C++ partitioner and builds the two modules.

    ``options`` are already validated extension options (:func:`check_partitioner`).
    ``doc`` is the joint graph's document, when the caller has it. ``request``: the
    policy and the other pipeline settings (:class:`fxremat._partition.PipelineRequest`).
    """
    from ._partition import _option_text, partition_document

    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    with _NoGC():
        if doc is None:
            doc = joint_document(joint_module, num_fwd_outputs)
        elif doc.get("symbols"):
            _add_dim_hints(doc, joint_module.graph)
        t1 = time.perf_counter()
        opts = dict(options or {})
        if static_lifetime_input_indices is not None and partitioner == "mincut":
            opts["static_lifetime_input_indices"] = _option_text("static_lifetime_input_indices",
                                                                 list(static_lifetime_input_indices))
        fw_doc, bw_doc, signature = partition_document(doc, partitioner, opts, request, brief=True)
        t2 = time.perf_counter()
        if signature.get("notes"):
            import warnings

            for note in signature["notes"]:
                warnings.warn(f"fxremat: {note}", stacklevel=2)
        fw, bw, signature = build_modules(joint_module, num_fwd_outputs, fw_doc, bw_doc, signature,
                                          tangent_slots=tangent_slots)
        t3 = time.perf_counter()
    seconds.update(to_json=t1 - t0, cpp=t2 - t1, build=t3 - t2)
    return Split(fw, bw, signature, seconds, forward_nodes=len(fw_doc["nodes"]), backward_nodes=len(bw_doc["nodes"]))


# --------------------------------------------------------------------------------------
# Dumps
# --------------------------------------------------------------------------------------

_DUMP_COUNTER = 0
_DUMP_LOCK = threading.Lock()


def _new_dump_directory(parent: str | os.PathLike, kind: str, label: str | None) -> str:
    """A new directory ``<kind>_<pid>_<n>[_<compile id>]`` under ``parent``."""
    global _DUMP_COUNTER
    with _DUMP_LOCK:
        index = _DUMP_COUNTER
        _DUMP_COUNTER += 1
    if label is None:
        try:
            from torch._guards import CompileContext

            cid = CompileContext.current_compile_id()
            label = str(cid) if cid is not None else None
        except Exception:  # noqa: BLE001 - a label is cosmetic
            label = None
    name = f"{kind}_{os.getpid()}_{index:03d}" + (f"_{re.sub(r'[^A-Za-z0-9_.-]+', '_', label)}" if label else "")
    path = os.path.join(os.fspath(parent), name)
    os.makedirs(path, exist_ok=True)
    return path


# The options that fix one budget: the front spans them all (RunPeakFront refuses
# memory_budget_bytes and budget_objective=saved; activation_memory_budget is unused).
_ONE_BUDGET_OPTIONS = ("activation_memory_budget", "memory_budget_bytes", "budget_objective")


def write_front(pareto_dir: str | os.PathLike, joint_module: fx.GraphModule, num_fwd_outputs: int,
                options: dict[str, str], policy: Any = None,
                static_lifetime_input_indices: Sequence[int] | None = None, points: int = 20) -> str:
    """The backend's ``pareto_dir``: the joint graph's front (``fxremat.pareto``'s
    points, with the partition's options but its budget) as ``front.json`` and
    ``front.svg`` in a new directory under ``pareto_dir``; returns its path."""
    import json

    from ._partition import _option_text, peak_front, plot_front

    opts = {k: v for k, v in options.items() if k not in _ONE_BUDGET_OPTIONS}
    if static_lifetime_input_indices is not None:
        opts["static_lifetime_input_indices"] = _option_text("static_lifetime_input_indices",
                                                             list(static_lifetime_input_indices))
    front = peak_front(joint_document(joint_module, num_fwd_outputs), opts, policy, points)
    path = _new_dump_directory(pareto_dir, "front", None)
    with open(os.path.join(path, "front.json"), "w") as f:
        json.dump({"points": front}, f, indent=1)
        f.write("\n")
    plot_front(front, os.path.join(path, "front.svg"), title=os.path.basename(path))
    return path


def dump_partition(dump_dir: str | os.PathLike, fw: fx.GraphModule, bw: fx.GraphModule, signature: dict,
                   joint_module: fx.GraphModule | None = None, label: str | None = None) -> str:
    """Writes ``forward.json.gz``, ``backward.json.gz``, ``signature.json`` and
    ``residuals.txt`` to a new directory under ``dump_dir``; returns its path."""
    import json

    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from . import _residuals
    from ._format import save

    path = _new_dump_directory(dump_dir, "partition", label)
    # The partition_fn runs under AOTAutograd's fake mode; a constant's bytes are
    # read outside it (inside, detaching a real constant asserts "Please convert
    # all Tensors to FakeTensors first").
    with unset_fake_temporarily():
        save(fw, os.path.join(path, "forward.json.gz"), kind="forward")
        save(bw, os.path.join(path, "backward.json.gz"), kind="backward")
    with open(os.path.join(path, "signature.json"), "w") as f:
        json.dump(signature, f, indent=1)
        f.write("\n")
    with open(os.path.join(path, "residuals.txt"), "w") as f:
        f.write(_residuals.residual_report(signature, joint_module))
    return path


# --------------------------------------------------------------------------------------
# The partition_fn
# --------------------------------------------------------------------------------------

_UUID_CACHE: dict[str, str] = {}


def _implementation_hash() -> str:
    """Identifies this implementation for compile caches: fxremat's version, the
    Python sources that decide the graphs, and the extension's size and mtime."""
    h = _UUID_CACHE.get("impl")
    if h is None:
        from . import __version__

        d = hashlib.sha256(__version__.encode())
        here = os.path.dirname(os.path.abspath(__file__))
        for f in ("_partition_fn.py", "_format.py", "_partition.py"):
            with open(os.path.join(here, f), "rb") as fh:
                d.update(fh.read())
        try:
            from ._partition import _extension

            st = os.stat(_extension().__file__)
            d.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
        except Exception as e:  # noqa: BLE001 - reported when partitioning
            d.update(repr(e).encode())
        h = _UUID_CACHE["impl"] = d.hexdigest()
    return h


# The parameters of PyTorch's partitioners (torch/_functorch/partitioners.py, torch 2.13),
# as functions that return them: (joint_module, joint_inputs, keywords for the reference).
def _mincut_arguments(joint_module: fx.GraphModule, _joint_inputs: Any, compiler: str = "inductor", *,
                      num_fwd_outputs: int, static_lifetime_input_indices: list[int] | None = None):
    return joint_module, _joint_inputs, {"compiler": compiler, "num_fwd_outputs": num_fwd_outputs,
                                         "static_lifetime_input_indices": static_lifetime_input_indices}


def _default_arguments(joint_module: fx.GraphModule, _joint_inputs: Any, *, num_fwd_outputs: int,
                       static_lifetime_input_indices: list[int] | None = None,
                       static_lifetime_input_nodes: Any = None):
    return joint_module, _joint_inputs, {"num_fwd_outputs": num_fwd_outputs,
                                         "static_lifetime_input_indices": static_lifetime_input_indices,
                                         "static_lifetime_input_nodes": static_lifetime_input_nodes}


# Python's TypeErrors name the function by its qualified name.
_mincut_arguments.__qualname__ = "fxremat.partition_fn('mincut').__call__"
_default_arguments.__qualname__ = "fxremat.partition_fn('default').__call__"
_ARGUMENTS = {"mincut": _mincut_arguments, "default": _default_arguments}

# The naming ops fxremat folds away (src/extract_partition.cpp, IsAnnotationOp).
_ANNOTATION_OPS = ("xla.name_tensor.default", "xla.offload_name.default", "fxremat.checkpoint_name.default")


class FxrematPartitionFn:
    """The callable :func:`partition_fn` returns (see there)."""

    def __init__(self, partitioner: str = "mincut", options: dict | None = None, *, policy: Any = None,
                 offload_target: str = "torch", barrier: bool = False, keep_annotations: bool = False,
                 dump_dir: str | os.PathLike | None = None, fallback: bool = False,
                 pareto_dir: str | os.PathLike | None = None) -> None:
        from ._partition import PipelineRequest, flag_option, options_mapping

        self.partitioner = partitioner
        self.options = dict(options_mapping(options))
        self.extension_options = check_partitioner(partitioner, self.options)
        self.request = PipelineRequest.make(policy, offload_target, barrier, keep_annotations)
        if self.request.policy is not None and partitioner != "mincut":
            raise ValueError(f"fxremat: a policy needs the mincut partitioner, not {partitioner!r}")
        self.policy = policy
        self.dump_dir = os.fspath(dump_dir) if dump_dir is not None else None
        self.fallback = flag_option("fallback", fallback)
        if pareto_dir is not None and partitioner != "mincut":
            raise ValueError(f"fxremat: pareto_dir needs the mincut partitioner (the front is the budget solver's), "
                             f"not {partitioner!r}")
        self.pareto_dir = os.fspath(pareto_dir) if pareto_dir is not None else None

    def __repr__(self) -> str:
        extra = ""
        if self.policy is not None:
            extra += f", policy={self.policy!r}"
        r = self.request
        if r.offload_target != "torch" or r.barrier or r.keep_annotations:
            extra += f", offload_target={r.offload_target!r}, barrier={r.barrier}, keep_annotations={r.keep_annotations}"
        return f"fxremat.partition_fn(partitioner={self.partitioner!r}, options={self.options!r}{extra})"

    def uuid(self) -> str:
        """A key for compile caches (Inductor's ``CustomPartitionerFn`` protocol)."""
        return hashlib.sha256(repr((_implementation_hash(), self.partitioner, sorted(self.extension_options.items()),
                                    self.request.describe(), self.dump_dir, self.fallback, self.pareto_dir,
                                    ambient_config_key())).encode()).hexdigest()

    @property
    def __signature__(self) -> inspect.Signature:
        """What ``inspect.signature`` reports: that of PyTorch's partitioner of the same name."""
        return inspect.signature(_ARGUMENTS[self.partitioner])

    def __call__(self, *args: Any, **kwargs: Any):
        # Exactly the parameters of PyTorch's partitioner of the same name: any other is a
        # TypeError that names it, as Python's own. (compiler, mincut: accepted and
        # ignored, as min_cut_rematerialization_partition in torch 2.13 does not read it;
        # static_lifetime_input_nodes, default: default_partition hands it only to
        # activation offloading and activation quantization, which fxremat refuses.)
        joint_module, joint_inputs, kw = _ARGUMENTS[self.partitioner](*args, **kwargs)
        num_fwd_outputs = kw["num_fwd_outputs"]
        static_lifetime_input_indices = kw["static_lifetime_input_indices"]
        t0 = time.perf_counter()
        nodes = len(joint_module.graph.nodes)
        # Note [Ambient functorch config]: read now; explicit options win.
        options = self.extension_options
        ambient = ambient_options(self.partitioner, self.options)
        if ambient:
            options = {**ambient, **options}
        try:
            split = split_joint(joint_module, num_fwd_outputs, self.partitioner, options,
                                static_lifetime_input_indices, request=self.request)
        except UnsupportedGraphError as e:
            if not self.fallback:
                raise UnsupportedGraphError(
                    f"fxremat cannot partition this joint graph: {e}. Pass options={{'fallback': True}} to the "
                    "backend (or fallback=True to fxremat.partition_fn) to use PyTorch's partitioner for such graphs"
                ) from e
            return self._fallback(joint_module, joint_inputs, kw, str(e), t0, nodes)
        seconds = dict(split.seconds)
        where = None
        if self.dump_dir is not None:
            td = time.perf_counter()
            where = dump_partition(self.dump_dir, split.forward, split.backward, split.signature, joint_module)
            seconds["dump"] = time.perf_counter() - td
        front = None
        if self.pareto_dir is not None:
            tp = time.perf_counter()
            front = write_front(self.pareto_dir, joint_module, num_fwd_outputs, options, self.request.policy,
                                static_lifetime_input_indices)
            seconds["pareto"] = time.perf_counter() - tp
        seconds["total"] = time.perf_counter() - t0
        _record(PartitionRecord(
            partitioner=self.partitioner, joint_nodes=nodes, forward_nodes=split.forward_nodes,
            backward_nodes=split.backward_nodes, saved_bytes=int(split.signature["saved_bytes"]),
            num_saved=len(split.signature["saved"]), seconds=seconds, signature=split.signature, dump_dir=where,
            pareto_dir=front))
        return split.forward, split.backward

    def _dropped_in_fallback(self, joint_module: fx.GraphModule) -> list[str]:
        """What was asked of fxremat that PyTorch's partitioner will not do."""
        r = self.request
        dropped = []
        if self.policy is not None:
            text = self.policy if isinstance(self.policy, str) else repr(self.policy)
            dropped.append(f"policy={text}")
        if r.offload_target != "torch":
            dropped.append(f"offload_target={r.offload_target!r}")
        if r.barrier:
            dropped.append("barrier=True")
        if self.dump_dir is not None:
            dropped.append(f"dump_dir={self.dump_dir!r} (nothing is dumped)")
        # PyTorch keeps the naming ops (keep_annotations=True is what it does anyway) and
        # does not offload what xla::offload_name marks.
        counts = collections.Counter(_target_text(n.target) for n in joint_module.graph.nodes
                                     if n.op == "call_function" and _target_text(n.target) in _ANNOTATION_OPS)
        names = sum(v for k, v in counts.items() if k != "xla.offload_name.default")
        if names and not r.keep_annotations:
            dropped.append(f"keep_annotations=False ({names} naming op(s) stay in the graphs)")
        if counts["xla.offload_name.default"]:
            dropped.append(f"the offload requested by {counts['xla.offload_name.default']} xla::offload_name op(s)")
        return dropped

    def _fallback(self, joint_module, joint_inputs, kw, why, t0, nodes):
        import warnings

        from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

        dropped = self._dropped_in_fallback(joint_module)
        warnings.warn(f"fxremat: using PyTorch's {self.partitioner} partitioner for a graph fxremat cannot encode: "
                      f"{why}" + (f"; this drops {', '.join(dropped)}" if dropped else ""))
        ref = min_cut_rematerialization_partition if self.partitioner == "mincut" else default_partition
        nfo = kw["num_fwd_outputs"]
        # PyTorch reads the ambient config itself; explicit min-cut options become config
        # patches (max_flow, fxremat's choice of algorithm, does not change the cut).
        patch = {k: _config_value(k, v) for k, v in self.extension_options.items() if k in _MINCUT_DEFAULTS}
        with torch._functorch.config.patch(patch):
            fw, bw = ref(joint_module, joint_inputs, **kw)
        saved = fw.graph.output_node().args[0][nfo:]
        nbytes = 0
        for n in saved:
            v = n.meta.get("val") if isinstance(n, fx.Node) else None
            if isinstance(v, torch.Tensor):
                nbytes += int(v.numel()) * v.element_size()
        _record(PartitionRecord(
            partitioner=self.partitioner, joint_nodes=nodes, forward_nodes=len(fw.graph.nodes),
            backward_nodes=len(bw.graph.nodes), saved_bytes=nbytes, num_saved=len(saved),
            seconds={"total": time.perf_counter() - t0}, signature={}, fallback=why))
        return fw, bw


def partition_fn(partitioner: str = "mincut", options: dict | None = None, *, policy: Any = None,
                 offload_target: str = "torch", barrier: bool = False, keep_annotations: bool = False,
                 dump_dir: str | os.PathLike | None = None, fallback: bool = False,
                 pareto_dir: str | os.PathLike | None = None, **partitioner_kwargs: Any) -> Any:
    """A ``partition_fn`` for AOTAutograd backed by fxremat's C++ partitioner.

    Use it as ``aot_autograd(fw_compiler=..., partition_fn=fxremat.partition_fn())`` or
    ``aot_function(f, fw_compiler, bw_compiler, partition_fn=fxremat.partition_fn())``.
    The callable takes exactly the parameters of PyTorch's partitioner of the same name:
    ``(joint_module, _joint_inputs, compiler="inductor", *, num_fwd_outputs,
    static_lifetime_input_indices=None)`` for ``"mincut"`` (``compiler`` is ignored, as
    PyTorch ignores it), ``(joint_module, _joint_inputs, *, num_fwd_outputs,
    static_lifetime_input_indices=None, static_lifetime_input_nodes=None)`` for
    ``"default"``; any other argument is a ``TypeError`` that names it. It returns the
    forward and backward ``fx.GraphModule`` under AOTAutograd's runtime contract
    (forward outputs: user outputs, saved tensors, saved symints; backward inputs:
    saved symints, saved tensors, tangents).

    ``torch._functorch.config`` is honoured as PyTorch's partitioners honour it, read
    when the callable is called (so ``torch._functorch.config.patch(...)`` around a
    compile applies): with ``"mincut"``, the ambient values of the min-cut knobs
    (:data:`MINCUT_OPTIONS`) are the defaults that ``options`` override. A knob fxremat
    cannot honour (``enable_activation_offloading``,
    ``unsafe_allow_optimization_of_collectives``, ...) is a ``ValueError`` naming it
    when set to another value than its default (Note [Ambient functorch config]).

    ``partitioner``: ``"mincut"`` (functorch's ``min_cut_rematerialization_partition``)
    or ``"default"`` (``default_partition``). ``options``: min-cut knobs under their
    ``torch._functorch.config`` names (:data:`MINCUT_OPTIONS`); unknown names are an
    error. ``static_lifetime_input_indices`` from AOTAutograd is passed through.
    ``policy``: a checkpoint policy (:mod:`fxremat.policies`, its text or JSON form;
    ``docs/policies.md``). ``offload_target``: ``"torch"`` (``prims.device_put`` to cpu
    and back), ``"torch_async"`` (the same on a side stream, overlapped) or ``"xla"`` (``xla::place_to_host`` / ``place_to_device``) for the values the
    policy offloads. ``barrier``: with the xla target, ``xla::optimization_barrier``
    before recomputed regions. ``keep_annotations``: keep the naming ops in the graphs.
    ``dump_dir``: write every
    partition's graphs, signature and residual report to a new directory under it.
    ``fallback``: for a joint graph the format cannot encode (opaque objects, dict
    arguments), or whose document fxremat's reader refuses (Note [Refused joint
    documents] in src/python/bindings.cpp), use PyTorch's partitioner of the same name (with the min-cut
    ``options`` as config patches) and warn, naming what that drops (the policy, offload
    settings, ``dump_dir``), instead of raising :class:`fxremat.UnsupportedGraphError`.
    ``pareto_dir`` (``"mincut"``): for every joint graph, its step-peak / recompute-cost
    front (:func:`fxremat.pareto`'s 20 budgets, with ``options`` but their budget) as
    ``front.json`` and ``front.svg`` in a new directory under it.

    The callable also has ``uuid()``, so the backend can hand it to Inductor as a
    ``CustomPartitionerFn``. Each call appends a :class:`PartitionRecord` (phase times,
    saved bytes) to :func:`partition_records`.

    ``partition_fn`` itself, uncalled (``partition_fn=fxremat.partition_fn``), works as
    ``partition_fn()``: AOTAutograd's call ``(joint_module, joint_inputs,
    num_fwd_outputs=...)`` is handed to the default min cut.
    """
    if isinstance(partitioner, fx.GraphModule):
        return FxrematPartitionFn("mincut", None)(partitioner, options, **partitioner_kwargs)
    if partitioner_kwargs:
        raise TypeError(f"partition_fn() got unexpected keyword argument(s) {sorted(partitioner_kwargs)}")
    return FxrematPartitionFn(partitioner, options, policy=policy, offload_target=offload_target, barrier=barrier,
                              keep_annotations=keep_annotations, dump_dir=dump_dir, fallback=fallback,
                              pareto_dir=pareto_dir)
