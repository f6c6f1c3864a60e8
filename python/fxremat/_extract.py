"""``fxremat.extract``: the forward and backward graphs of a program, in the user's order.

    fw, bw, signature = fxremat.extract(fn, *args, **kwargs)
    outs_and_residuals = fw(*flat_inputs)
    grads = bw(*outs_and_residuals[n:], *tangents)

How it works
------------
:func:`fxremat.export_joint` traces the program on fake tensors (Dynamo +
AOTAutograd; nothing is computed on real data) and orders the joint graph's primals as
the user's inputs: parameters and buffers of an ``nn.Module`` (``named_parameters``
order), then the flattened pytree of ``(args, kwargs)``. The C++ partitioner splits it
(:func:`fxremat.partition_fn`'s builder makes the GraphModules).

Aliased outputs. Dynamo and AOTAutograd do not put every user output in the graph: an
output that *is* an input is returned by Dynamo's bytecode, an output returned twice
is one graph output, and an output that is a view of an input is regenerated outside
the graph and gets no tangent. So the program is traced with every tensor output
cloned (the seed notebook's workaround): each output leaf becomes its own graph output
with its own tangent, and the joint graph's autograd adds up the gradients of aliases.
After partitioning, each forward output that is one of those clones is replaced by the
clone's input (a clone's gradient is its tangent, so the backward is unaffected): the
forward returns exactly what the program returns, aliases included, without copies.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ._errors import ExportError


def _clone_tensors(out: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, lambda t: t.clone(), out)


def _export_with_cloned_outputs(fn: Callable[..., Any], args: tuple, kwargs: dict, name: str | None):
    from ._export import export_joint

    if isinstance(fn, torch.nn.Module):
        handle = fn.register_forward_hook(lambda _module, _inputs, out: _clone_tensors(out))
        try:
            return export_joint(fn, *args, name=name, **kwargs)
        finally:
            handle.remove()

    def fxremat_extract(*a, **k):
        return _clone_tensors(fn(*a, **k))

    return export_joint(fxremat_extract, *args, name=name, **kwargs)


def extract(fn: Callable[..., Any] | torch.nn.Module, *args: Any, policy: Any = None, partitioner: str = "mincut",
            offload_target: str = "torch", barrier: bool = False, keep_annotations: bool = False,
            **kwargs: Any) -> tuple[fx.GraphModule, fx.GraphModule, dict]:
    """The forward and backward graphs of ``fn(*args, **kwargs)`` and their signature.

    Traced on fake tensors: nothing real is computed. Returns ``(forward, backward,
    signature)``:

    - ``forward(*inputs)`` takes the tensor inputs in the flattened pytree order of
      ``(args, kwargs)`` (an ``nn.Module``'s parameters and buffers first, in
      ``named_parameters``/``named_buffers`` order; each placeholder's
      ``meta["fxremat_path"]`` says where it came from, e.g. ``args[0]['a']``) and
      returns ``fn``'s tensor outputs in output-pytree order (outputs that alias inputs
      or each other included) followed by the residuals;
    - ``backward(*residuals, *tangents)`` takes the residuals, then one tangent per
      tensor output in output order (a tangent for an output that does not require
      grad is accepted and unused), and returns one gradient per forward input, in
      input order (None for inputs that do not require grad);
    - ``signature`` (``docs/format.md``, "Signature") states every position: ``saved``
      gives each residual's forward-output and backward-input index, ``tangents`` one
      entry per output (``used``: whether the backward reads it), ``forward_outputs``
      the output paths, ``primals`` the input paths.

    ``partitioner`` is ``"mincut"`` or ``"default"``. ``policy``: a checkpoint policy
    (:mod:`fxremat.policies`; names come from :func:`fxremat.checkpoint_name`);
    ``offload_target``, ``barrier``, ``keep_annotations``: as for
    :func:`fxremat.partition`. ``torch.utils.checkpoint`` regions are honoured (their
    ``recompute`` tags reach the partitioner). Keyword arguments with those names
    cannot be passed through to ``fn``; neither can ``name``/``decompositions`` (see
    :func:`fxremat.export_joint`).
    """
    return _extract(fn, args, kwargs, policy=policy, partitioner=partitioner, offload_target=offload_target,
                    barrier=barrier, keep_annotations=keep_annotations)[:3]


def _extract(fn: Callable[..., Any] | torch.nn.Module, args: tuple, kwargs: dict, *, policy: Any, partitioner: str,
             offload_target: str, barrier: bool, keep_annotations: bool):
    """:func:`extract`, also returning the joint graph."""
    from ._partition import PipelineRequest
    from ._partition_fn import check_partitioner, split_joint

    opts = check_partitioner(partitioner, None)
    request = PipelineRequest.make(policy, offload_target, barrier, keep_annotations)
    name = type(fn).__name__ if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", None)
    joint = _export_with_cloned_outputs(fn, args, kwargs, name)
    nfo = joint.num_fwd_outputs
    if any(p is None for p in joint.output_paths):
        raise ExportError(
            f"{name!r} mutates an input in place (AOTAutograd returns the new value as an extra forward output); "
            "fxremat.extract does not support input mutation"
        )
    tangent_outputs = list(joint.tangent_outputs)
    joint_tangents = joint.tangent_names
    by_output = dict(zip(tangent_outputs, joint_tangents))
    slots = [(f"tangents_{j + 1}", by_output.get(j), j) for j in range(nfo)]
    split = split_joint(joint.gm, nfo, partitioner, opts, doc=joint.to_json(), tangent_slots=slots, request=request)
    fw, bw, sig = split.forward, split.backward, copy.deepcopy(split.signature)

    # ---- forward: each output is the clone made for tracing; return its input ---------
    fw_graph = fw.graph
    out_node = fw_graph.output_node()
    outs = list(out_node.args[0])
    clones = []
    for j in range(nfo):
        o = outs[j]
        if isinstance(o, fx.Node) and o.target is torch.ops.aten.clone.default and isinstance(o.args[0], fx.Node):
            outs[j] = o.args[0]
            clones.append(o)
    out_node.args = (tuple(outs),)
    for j, entry in enumerate(sig.get("forward_outputs", [])[:nfo]):
        if isinstance(outs[j], fx.Node):
            entry["name"] = outs[j].name
    for c in clones:
        if not c.users:
            fw_graph.erase_node(c)
    fw.recompile()

    # ---- backward: the inputs for outputs without a tangent get the output's facts -----
    n_saved = len(sig["saved"])
    bw_inputs = bw.graph.find_nodes(op="placeholder")
    for t in sig["tangents"]:
        p = bw_inputs[t["backward_input_index"]]
        if not t["used"]:
            o = outs[t["forward_output_index"]]
            p.meta["fxremat_role"] = "tangent"
            if isinstance(o, fx.Node) and isinstance(o.meta.get("val"), torch.Tensor):
                p.meta["val"] = o.meta["val"]
    bw.recompile()
    sig["extract"] = {"function": name, "num_outputs": nfo, "num_saved": n_saved}
    return fw, bw, sig, joint
