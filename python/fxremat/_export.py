"""Export a program's joint forward/backward graph through Dynamo + AOTAutograd.

How it works
------------
The program runs under ``torch.compile(fullgraph=True, dynamic=False)`` with a private
backend. Dynamo hands the backend its FX graph (inputs as fake tensors; every placeholder
carries a ``grapharg`` with the Dynamo *source* of the input and a weak reference to the
real tensor). The backend runs ``aot_module_simplified`` on it with a ``partition_fn``
that records the joint graph and ``num_fwd_outputs`` and aborts the compilation, so
nothing is ever computed on real data. The backend then returns a stand-in for the
compiled graph that returns fresh, empty *marker* tensors; Dynamo's own bytecode builds
the user's output pytree from them, which tells, by object identity, which graph output
lands at which output path.

Tracing through Dynamo (instead of ``aot_function``) is what keeps the
``torch.utils.checkpoint`` / selective-checkpoint ``recompute`` and ``ac_graph_id`` tags
in the node metadata.

Primal -> user input mapping
----------------------------
Every joint placeholder carries AOTAutograd's descriptor (``meta["desc"]``):
``PlainAOTInput(i)`` is the i-th input of Dynamo's graph, ``ParamAOTInput``/
``BufferAOTInput`` a parameter/buffer attribute of that graph, ``TangentAOTInput(out)``
the cotangent of an output. Dynamo's i-th input is mapped to a user path through its
source: ``L['args'][1]['weights']`` -> ``args[1]['weights']`` (``L['kwargs']['x']`` ->
``kwargs['x']``), checked against the real tensor by identity; tensors reached through
the module (``G[...]._modules['fc1']._parameters['weight']``) are matched by identity
with ``named_parameters()``/``named_buffers()`` -> ``params['fc1.weight']``. Anything
else (a global or captured tensor, aliased inputs, RNG or effect tokens) is an
:class:`ExportError`. The joint graph is then rebuilt with primals in the user's order
(parameters, buffers, positional arguments, keyword arguments, each in pytree order),
forward outputs in output-pytree order, and tangents in forward-output order; the
placeholders are renamed ``primals_1..``, ``tangents_1..`` accordingly. ``ac_graph_id``s
(drawn from a process-global counter) are renumbered 1, 2, ... in their original order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ._errors import ExportError
from ._paths import format_key, keypath_to_str, resolve_path


class _Abort(Exception):
    """Raised by the capture partition_fn to stop AOTAutograd after the joint graph."""


@dataclass
class JointGraph:
    """A joint forward/backward graph and its calling convention.

    ``gm(*primals, *tangents)`` returns ``(*forward_outputs, *grads)``: the first
    ``num_fwd_outputs`` entries are forward outputs, then one gradient (or None) per
    primal in primal order.
    """

    gm: fx.GraphModule
    num_fwd_outputs: int
    input_paths: list[str | None]
    output_paths: list[str | None]
    tangent_outputs: list[int]
    name: str | None = None

    @property
    def primal_names(self) -> list[str]:
        return [n.name for n in self._placeholders("primal")]

    @property
    def tangent_names(self) -> list[str]:
        return [n.name for n in self._placeholders("tangent")]

    def _placeholders(self, role: str) -> list[fx.Node]:
        from ._format import derive_role

        return [
            n
            for n in self.gm.graph.nodes
            if n.op == "placeholder" and (n.meta.get("fxremat_role") or derive_role(n.name, "joint")) == role
        ]

    def save(self, path) -> None:
        from ._format import save

        save(
            self.gm,
            path,
            kind="joint",
            num_fwd_outputs=self.num_fwd_outputs,
            input_paths=self.input_paths,
            output_paths=self.output_paths,
            tangent_outputs=self.tangent_outputs,
            name=self.name,
        )

    def to_json(self) -> dict:
        from ._format import to_json

        return to_json(
            self.gm,
            kind="joint",
            num_fwd_outputs=self.num_fwd_outputs,
            input_paths=self.input_paths,
            output_paths=self.output_paths,
            tangent_outputs=self.tangent_outputs,
            name=self.name,
        )

    @classmethod
    def from_graph_module(cls, gm: fx.GraphModule) -> "JointGraph":
        facts = gm.meta.get("fxremat") or {}
        if facts.get("kind") != "joint":
            raise ValueError("graph module is not a joint graph (gm.meta['fxremat']['kind'] != 'joint')")
        nfo = facts["num_fwd_outputs"]
        tangents = facts.get("tangent_outputs")
        jg = cls(
            gm=gm,
            num_fwd_outputs=nfo,
            input_paths=list(facts.get("input_paths") or []),
            output_paths=list(facts.get("output_paths") or [None] * nfo),
            tangent_outputs=list(tangents) if tangents is not None else [],
            name=facts.get("name"),
        )
        if not jg.input_paths:
            jg.input_paths = [None] * len(jg.primal_names)
        if tangents is None:  # the format's inference: outputs whose value requires grad
            outs = gm.graph.output_node().args[0][:nfo]
            jg.tangent_outputs = [
                i for i, o in enumerate(outs)
                if o is not None and getattr(o.meta.get("val"), "requires_grad", False)
            ]
        return jg

    def __repr__(self) -> str:
        n = sum(1 for _ in self.gm.graph.nodes)
        return (
            f"JointGraph(name={self.name!r}, nodes={n}, primals={len(self.input_paths)}, "
            f"num_fwd_outputs={self.num_fwd_outputs}, tangents={len(self.tangent_outputs)})"
        )


def load_joint(path) -> JointGraph:
    """:func:`fxremat.load` a joint-graph file as a :class:`JointGraph`."""
    from ._format import load

    return JointGraph.from_graph_module(load(path))


# --------------------------------------------------------------------------------------
# Input bookkeeping
# --------------------------------------------------------------------------------------


@dataclass
class _Inputs:
    """The user's inputs, flattened with paths, in the canonical primal order."""

    roots: dict[str, Any]
    leaves: list[tuple[str, Any]]  # (path, value) in canonical order

    def index_of_path(self) -> dict[str, int]:
        return {p: i for i, (p, _) in enumerate(self.leaves)}


def _collect_inputs(module: torch.nn.Module | None, args: tuple, kwargs: dict) -> _Inputs:
    params = dict(module.named_parameters()) if module is not None else {}
    buffers = dict(module.named_buffers()) if module is not None else {}
    leaves: list[tuple[str, Any]] = []
    for k, t in params.items():
        leaves.append((f"params[{k!r}]", t))
    for k, t in buffers.items():
        leaves.append((f"buffers[{k!r}]", t))
    for root, tree in (("args", tuple(args)), ("kwargs", dict(kwargs))):
        flat, _ = pytree.tree_flatten_with_path(tree)
        for kp, v in flat:
            leaves.append((root + keypath_to_str(kp), v))
    roots = {"params": params, "buffers": buffers, "args": tuple(args), "kwargs": dict(kwargs)}
    return _Inputs(roots=roots, leaves=leaves)


def _source_to_path(source: Any, roots: dict[str, Any]) -> str | None:
    """``L['args'][1]['weights']`` -> ``args[1]['weights']``; None if not rooted at args/kwargs."""
    from torch._dynamo import source as S

    chain = []
    s = source
    while True:
        if isinstance(s, S.LocalSource):
            root = s.local_name
            break
        if isinstance(s, (S.GetItemSource, S.DictGetItemSource, S.DictSubclassGetItemSource)):
            if getattr(s, "index_is_slice", False):
                return None
            chain.append(("item", s.index))
        elif isinstance(s, S.AttrSource):
            chain.append(("attr", s.member))
        else:
            return None
        s = s.base
    if root not in ("args", "kwargs"):
        return None
    obj = roots[root]
    path = root
    for kind, key in reversed(chain):
        if kind == "attr":
            path += "." + key
            obj = getattr(obj, key)
            continue
        if isinstance(key, S.ConstDictKeySource):
            # the key is "the index-th key of the dict at base"
            key = list(obj.keys())[key.index]
        if isinstance(key, bool) or not isinstance(key, (int, str)):
            return None
        path += format_key(key)
        obj = obj[key]
    return path


def _set_requires_grad(node: fx.Node, flag: bool) -> None:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and val.requires_grad != flag:
        if flag and not (val.is_floating_point() or val.is_complex()):
            return
        new = val.detach()
        new.requires_grad_(flag)
        node.meta["val"] = new


def _strip_entry_frame(stack_trace: str) -> str:
    """Drop the frame of export_joint's own ``entry`` wrapper from a stack trace."""
    lines = stack_trace.splitlines(keepends=True)
    if not lines or not lines[0].startswith("  File ") or __file__ not in lines[0] or not lines[0].rstrip().endswith(", in entry"):
        return stack_trace
    i = 1
    while i < len(lines) and not lines[i].startswith("  File "):
        i += 1
    return "".join(lines[i:])


def _source_name(src: Any) -> str | None:
    if src is None:
        return None
    name = getattr(src, "name", None)
    return name() if callable(name) else name


def _grapharg_example(ga: Any) -> Any:
    try:
        return ga.example
    except Exception:  # the weak reference died, or not a tensor
        return None


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------


def _is_leaf_output(out: Any) -> bool:
    return pytree.tree_is_leaf(out)


def export_joint(
    fn_or_module: Callable[..., Any] | torch.nn.Module,
    *args: Any,
    name: str | None = None,
    decompositions: dict | None = None,
    **kwargs: Any,
) -> JointGraph:
    """Trace ``fn_or_module(*args, **kwargs)`` into its joint forward/backward graph.

    No real computation happens: Dynamo and AOTAutograd trace with fake tensors and the
    compilation is aborted once the joint graph exists. For an ``nn.Module`` the
    parameters and buffers it uses are primals (paths ``params['fc1.weight']``,
    ``buffers[...]``); tensors in ``args``/``kwargs`` are primals with paths such as
    ``args[0]``, ``args[1]['weights']``, ``kwargs['x']``. Gradients are taken with respect
    to the primals whose tensors require grad, for every forward output that requires
    grad. ``decompositions`` is passed to AOTAutograd (default: none, the ATen ops
    AOTAutograd produces by itself).

    Calls ``torch._dynamo.reset()`` before and after.
    """
    import torch._dynamo
    from torch._dynamo.exc import BackendCompilerFailed, Unsupported
    from torch._functorch.aot_autograd import aot_module_simplified

    module = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
    if name is None:
        name = type(module).__name__ if module is not None else getattr(fn_or_module, "__name__", None)
    inputs = _collect_inputs(module, args, kwargs)
    # The trace is static (dynamic=False); a dim marked dynamic would make Dynamo
    # trace a size as a graph input, or raise its own constraint error.
    for path, value in inputs.leaves:
        if not isinstance(value, torch.Tensor):
            continue
        marked = [a for a in ("_dynamo_dynamic_indices", "_dynamo_weak_dynamic_indices", "_dynamo_unbacked_indices")
                  if getattr(value, a, None)]
        if marked:
            raise ExportError(
                f"{path} has dims marked dynamic ({marked[0].removeprefix('_dynamo_').removesuffix('_indices')}: "
                f"{sorted(getattr(value, marked[0]))}); export_joint traces static shapes. For a graph with "
                "symbolic sizes, capture the joint graph a torch.compile(dynamic=True) hands its partition_fn and "
                "save it with fxremat.save(gm, path, num_fwd_outputs=...)"
            )
    state: dict[str, Any] = {}

    def capture_partition(joint_module, joint_inputs, *, num_fwd_outputs, **_unused):
        state["joint"] = joint_module
        state["num_fwd_outputs"] = num_fwd_outputs
        raise _Abort()

    def never_compile(gm, example_inputs):  # pragma: no cover - compilation is aborted
        raise ExportError("internal error: AOTAutograd compiled a graph during export")

    def backend(gm: fx.GraphModule, example_inputs: Sequence[Any]):
        state["dynamo_gm"] = gm
        # Dynamo drops "grapharg" from the placeholders once compilation is over
        state["dynamo_inputs"] = [
            (n.name, getattr(n.meta.get("grapharg"), "source", None),
             _grapharg_example(n.meta["grapharg"]) if "grapharg" in n.meta else None)
            for n in gm.graph.nodes
            if n.op == "placeholder"
        ]
        try:
            aot_module_simplified(
                gm,
                example_inputs,
                fw_compiler=never_compile,
                bw_compiler=never_compile,
                inference_compiler=never_compile,
                partition_fn=capture_partition,
                decompositions=decompositions,
            )
        except _Abort:
            pass
        except ExportError as e:
            if "joint" not in state:
                raise ExportError(
                    "AOTAutograd produced an inference graph, not a joint graph: no forward "
                    "output requires grad (does any input require grad?)"
                ) from e
            raise
        if "joint" not in state:
            raise ExportError("AOTAutograd did not produce a joint graph")
        outs = gm.graph.output_node().args[0]
        markers = []
        for o in outs:
            v = o.meta.get("example_value") if isinstance(o, fx.Node) else o
            if isinstance(v, torch.Tensor):
                # a distinct, storage-free stand-in per output (a 0-d tensor expanded)
                markers.append(torch.empty((), dtype=v.dtype).expand(tuple(int(s) for s in v.shape)))
            elif isinstance(v, torch.SymInt):
                markers.append(int(v.node.hint) if v.node.hint is not None else 0)
            else:
                markers.append(v)
        state["markers"] = markers

        def run(*_runtime_args):
            return tuple(markers)

        return run

    # the names matter: Dynamo's sources for the inputs are L['args'][...], L['kwargs'][...]
    def entry(*args, **kwargs):
        return fn_or_module(*args, **kwargs)

    torch._dynamo.reset()
    try:
        compiled = torch.compile(entry, backend=backend, fullgraph=True, dynamic=False)
        patches = {}
        if hasattr(torch._functorch.config, "force_autograd_cache"):
            patches["force_autograd_cache"] = False
        with torch.enable_grad(), torch._functorch.config.patch(**patches):
            try:
                user_out = compiled(*args, **kwargs)
            except BackendCompilerFailed as e:
                inner = getattr(e, "inner_exception", None) or e.__cause__
                if isinstance(inner, ExportError):
                    raise inner from None
                raise ExportError(
                    f"AOTAutograd could not trace {name!r}: {type(inner).__name__}: {inner}"
                ) from inner
            except Unsupported as e:
                raise ExportError(
                    f"Dynamo could not capture {name!r} as one graph (fullgraph=True): {e}"
                ) from e
    finally:
        torch._dynamo.reset()

    return _build_joint(state, inputs, user_out, name)


def _build_joint(state: dict, inputs: _Inputs, user_out: Any, name: str | None) -> JointGraph:
    from torch._functorch._aot_autograd import descriptors as D

    joint: fx.GraphModule = state["joint"]
    dyn_gm: fx.GraphModule = state["dynamo_gm"]
    nfo: int = state["num_fwd_outputs"]
    graph = joint.graph

    # ---- Dynamo graph inputs -> user paths ------------------------------------------
    dyn_inputs = state["dynamo_inputs"]
    by_identity: dict[int, str] = {}
    for p, v in inputs.leaves:
        if isinstance(v, torch.Tensor):
            by_identity.setdefault(id(v), p)

    def path_of_dynamo_input(i: int) -> str:
        ph_name, src, example = dyn_inputs[i]
        where = f"Dynamo graph input {i} ({ph_name}, source {_source_name(src)})"
        p = _source_to_path(src, inputs.roots) if src is not None else None
        if p is not None:
            leaf = resolve_path(p, inputs.roots)
            if example is not None and leaf is not example:
                raise ExportError(f"{where}: the tensor at {p} is not the one Dynamo traced")
            return p
        if isinstance(example, torch.Tensor) and id(example) in by_identity:
            return by_identity[id(example)]
        raise ExportError(
            f"{where} is not a parameter, buffer or argument of the program (a global or "
            "captured tensor?); pass it as an argument or register it on the module"
        )

    def path_of_attr(target: str, kind: str) -> str:
        obj = dyn_gm.get_parameter(target) if kind == "param" else dyn_gm.get_buffer(target)
        if id(obj) in by_identity:
            return by_identity[id(obj)]
        raise ExportError(f"Dynamo graph {kind} {target!r} is not a parameter or buffer of the program")

    phs = [n for n in graph.nodes if n.op == "placeholder"]
    primals: list[fx.Node] = []
    tangents: list[fx.Node] = []
    primal_path: dict[fx.Node, str] = {}
    for n in phs:
        desc = n.meta.get("desc")
        if isinstance(desc, D.PlainAOTInput):
            primal_path[n] = path_of_dynamo_input(desc.idx)
            primals.append(n)
        elif isinstance(desc, D.ParamAOTInput):
            primal_path[n] = path_of_attr(desc.target, "param")
            primals.append(n)
        elif isinstance(desc, D.BufferAOTInput):
            primal_path[n] = path_of_attr(desc.target, "buffer")
            primals.append(n)
        elif isinstance(desc, D.TangentAOTInput):
            tangents.append(n)
        elif desc is None:
            raise ExportError(f"joint placeholder {n.name} has no AOTAutograd descriptor")
        else:
            raise ExportError(
                f"joint placeholder {n.name} is {desc} ({type(desc).__name__}); fxremat supports "
                "plain, parameter and buffer inputs and tangents only (aliased inputs, RNG state "
                "and effect tokens are not supported)"
            )
    if phs != primals + tangents:
        raise ExportError("joint placeholders are not primals followed by tangents")
    seen: dict[str, fx.Node] = {}
    for n, p in primal_path.items():
        if p in seen:
            raise ExportError(f"primals {seen[p].name} and {n.name} both map to {p}")
        seen[p] = n

    # ---- outputs ------------------------------------------------------------------
    out_node = graph.output_node()
    outs = list(out_node.args[0])
    out_descs = out_node.meta.get("desc")
    if not isinstance(out_descs, (list, tuple)) or len(out_descs) != len(outs):
        raise ExportError("joint output node has no AOTAutograd output descriptors")
    if len(outs) != nfo + len(primals):
        raise ExportError(f"joint graph has {len(outs)} outputs, expected {nfo} + {len(primals)} primals")
    for k, p in enumerate(primals):
        d = out_descs[nfo + k]
        if d is not None and not (isinstance(d, D.GradAOTOutput) and d.grad_of == p.meta["desc"]):
            raise ExportError(f"joint output {nfo + k} is {d}, expected the gradient of {p.name}")

    # user output leaves, with the identity of Dynamo's markers
    markers = state["markers"]
    marker_index = {id(m): i for i, m in enumerate(markers) if isinstance(m, torch.Tensor)}
    tree = (user_out,) if _is_leaf_output(user_out) else user_out
    flat_out, _ = pytree.tree_flatten_with_path(tree)
    dyn_out_path: dict[int, tuple[int, str]] = {}
    for u, (kp, v) in enumerate(flat_out):
        if isinstance(v, torch.Tensor) and id(v) in marker_index:
            dyn_out_path.setdefault(marker_index[id(v)], (u, keypath_to_str(kp)))

    fwd_keys = []
    fwd_paths: list[str | None] = []
    for j in range(nfo):
        d = out_descs[j]
        path = None
        if isinstance(d, D.PlainAOTOutput):
            u, path = dyn_out_path.get(d.idx, (math.inf, None))
            key = (1, u, j)
        elif isinstance(d, D.InputMutationAOTOutput):
            key = (0, 0, j)
        else:
            key = (2, 0, j)
        fwd_keys.append(key)
        fwd_paths.append(path)
    fwd_order = sorted(range(nfo), key=lambda j: fwd_keys[j])
    new_fwd_index = {old: new for new, old in enumerate(fwd_order)}

    tangent_of: dict[fx.Node, int] = {}
    for t in tangents:
        target = t.meta["desc"].output
        hits = [j for j in range(nfo) if out_descs[j] == target]
        if len(hits) != 1:
            raise ExportError(f"cannot find the forward output of tangent {t.name} ({target})")
        tangent_of[t] = new_fwd_index[hits[0]]

    # ---- rebuild in the user's order ------------------------------------------------
    order = inputs.index_of_path()
    traced_index = {n: i for i, n in enumerate(primals)}

    def rank(n: fx.Node) -> tuple[int, int, int]:
        path = primal_path[n]
        if path in order:
            return (order[path], 0, 0)
        # A tensor inside an object that pytree does not flatten (a BlockMask's
        # kv_indices reached as args[1].kv_indices): at its object's place, in the
        # order Dynamo traced it.
        parent = path
        while parent and parent not in order:
            stripped = re.sub(r"(\.[A-Za-z_]\w*|\[[^\[\]]*\])$", "", parent)
            parent = "" if stripped == parent else stripped
        return (order.get(parent, len(order)), 1, traced_index[n])

    new_primals = sorted(primals, key=rank)
    new_tangents = sorted(tangents, key=lambda n: tangent_of[n])

    from ._format import mutated_inputs

    mutated = mutated_inputs(graph)
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}

    def new_placeholder(old: fx.Node, new_name: str, role: str) -> fx.Node:
        nn_ = g.placeholder(new_name)
        if nn_.name != new_name:
            raise ExportError(f"internal error: placeholder name {new_name} taken")
        nn_.meta = {k: v for k, v in old.meta.items() if k != "desc"}
        nn_.meta["fxremat_role"] = role
        if old in mutated:
            nn_.meta["fxremat_mutated"] = True
            if mutated[old] is not None:
                nn_.meta["fxremat_written_back_from"] = new_fwd_index[mutated[old]]
        env[old] = nn_
        return nn_

    input_paths = []
    for k, old in enumerate(new_primals):
        p = primal_path[old]
        nn_ = new_placeholder(old, f"primals_{k + 1}", "primal")
        nn_.meta["fxremat_path"] = p
        input_paths.append(p)
        real = resolve_path(p, inputs.roots)
        # AOTAutograd's joint metadata says requires_grad=False everywhere; record the
        # user's: a primal requires grad iff the joint graph computes its gradient
        has_grad = outs[nfo + primals.index(old)] is not None
        _set_requires_grad(nn_, has_grad)
        if isinstance(real, torch.Tensor) and not real.is_floating_point() and not real.is_complex() and real.numel():
            nn_.meta["value_range"] = (int(real.min()), int(real.max()) + 1)
    for k, old in enumerate(new_tangents):
        new_placeholder(old, f"tangents_{k + 1}", "tangent")
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        env[node] = g.node_copy(node, lambda n: env[n])
        st = env[node].meta.get("stack_trace")
        if st:
            env[node].meta["stack_trace"] = _strip_entry_frame(st)
    # ac_graph_id comes from a process-global counter: renumber 1, 2, ... keeping the
    # order (the partitioner compares ids) so that exports are deterministic
    ac_ids = sorted({n.meta["ac_graph_id"] for n in g.nodes if n.meta.get("ac_graph_id") is not None})
    ac_map = {old: new for new, old in enumerate(ac_ids, start=1)}
    for n in g.nodes:
        if n.meta.get("ac_graph_id") is not None:
            n.meta["ac_graph_id"] = ac_map[n.meta["ac_graph_id"]]
    # forward outputs that have a tangent require grad (the format's inference rule)
    with_tangent = {tangent_of[t] for t in tangents}
    for new_j, old_j in enumerate(fwd_order):
        if outs[old_j] is not None and new_j in with_tangent:
            _set_requires_grad(env[outs[old_j]], True)
    primal_pos = {n: k for k, n in enumerate(primals)}
    new_outs = [env[outs[j]] if outs[j] is not None else None for j in fwd_order]
    new_outs += [
        env[outs[nfo + primal_pos[p]]] if outs[nfo + primal_pos[p]] is not None else None
        for p in new_primals
    ]
    g.output(tuple(new_outs))
    g.lint()
    gm = fx.GraphModule(joint, g)

    output_paths = [fwd_paths[j] for j in fwd_order]
    tangent_outputs = [tangent_of[t] for t in new_tangents]
    gm.meta["fxremat"] = {
        "kind": "joint",
        "name": name,
        "num_fwd_outputs": nfo,
        "input_paths": list(input_paths),
        "output_paths": list(output_paths),
        "tangent_outputs": list(tangent_outputs),
    }
    return JointGraph(
        gm=gm,
        num_fwd_outputs=nfo,
        input_paths=input_paths,
        output_paths=output_paths,
        tangent_outputs=tangent_outputs,
        name=name,
    )
