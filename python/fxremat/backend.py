"""The ``torch.compile`` backend ``"fxremat"``.

    torch.compile(model, backend="fxremat")
    torch.compile(model, backend="fxremat", options={"compiler": "aot_eager", "dump_dir": "out/"})

It is registered through the ``torch_dynamo_backends`` entry point (see
``python/pyproject.toml``), so a script needs no ``import fxremat``: Dynamo finds the
name and loads :func:`fxremat_backend` on first use.

The backend runs AOTAutograd with fxremat's partitioner (:func:`fxremat.partition_fn`)
and hands the forward and backward graphs to a compiler:

- ``"inductor"`` (default): Inductor's whole pipeline (its decompositions and
  joint-graph passes, then fxremat's partition through Inductor's
  ``custom_partitioner_fn`` hook, then Inductor's code generation). ``mode`` is passed
  on as Inductor's mode options; ``torch.compile`` refuses ``mode=`` and ``options=``
  together, so with options the mode goes in them (``"mode"`` below).
- ``"aot_eager"``: AOTAutograd without decompositions; the two graphs run as plain
  Python ``GraphModule`` code (PyTorch's ``boxed_nop``), as the ``aot_eager`` backend.
- ``"eager"``: as ``aot_eager``, but the graphs run node by node through
  ``torch.fx.Interpreter`` (slow; errors name the node; breakpoints work).

Options (``options={...}``), all optional:

==========================  =============================================================
``compiler``                ``"inductor"`` | ``"aot_eager"`` | ``"eager"``
``mode``                    the Inductor compiler's mode, as ``torch.compile``'s
                            ``mode=`` (``"max-autotune-no-cudagraphs"``, ...)
``partitioner``             ``"mincut"`` (default) | ``"default"``
``policy``                  a checkpoint policy: a ``fxremat.policies`` object, its text
                            form (``"save_only_these_names:a,b"``) or JSON form
                            (``docs/policies.md``); mincut only
``offload_target``          ``"torch"`` (default: ``prims.device_put`` to cpu and back) |
                            ``"torch_async"`` (``fxremat::offload`` / ``reload`` on a
                            side stream, overlapped with the compute) |
                            ``"xla"`` (``xla::place_to_host`` / ``place_to_device``)
``barrier``                 ``True`` (xla target only): ``xla::optimization_barrier``
                            before every recomputed region of the backward
``keep_annotations``        ``True``: keep ``fxremat::checkpoint_name`` /
                            ``xla::name_tensor`` ops in the graphs (default: folded away)
``dump_dir``                write each partition's ``forward.json.gz``,
                            ``backward.json.gz``, ``signature.json`` and
                            ``residuals.txt`` to a new directory under it (disables the
                            AOTAutograd cache for the compile, so that partitioning runs)
``dump``                    ``True``: as ``dump_dir`` with ``$FXREMAT_DUMP_DIR`` or
                            ``./fxremat_dump``
``pareto_dir``              write each joint graph's step-peak / recompute-cost front
                            (``fxremat.pareto``, 20 budgets) as ``front.json`` and
                            ``front.svg`` to a new directory under it (mincut only;
                            disables the AOTAutograd cache like ``dump_dir``)
``fallback``                ``True``: graphs the format cannot encode (opaque inputs
                            such as ``BackwardState``), or whose document
                            fxremat's reader refuses (a dtype or value it does not
                            know yet), go to PyTorch's partitioner, with a warning
min-cut options             ``torch._functorch.config`` names, passed to the C++ min cut:
                            ``recompute_views``, ``aggressive_recomputation``,
                            ``ban_recompute_*``, ``treat_parameters_as_free_to_save``,
                            ``cse``, ``max_dist_from_bw``, ``activation_memory_budget``
                            (a fraction of the peak range, docs/budget.md), ``max_flow``;
                            fxremat's ``memory_budget_bytes``, ``budget_objective``,
                            ``recompute_flops_per_byte``, ``budget_milp_max_variables``,
                            ``budget_milp_max_nodes``, ``offload_bandwidth_gbps``,
                            ``device_memory_bandwidth_gbps`` and ``device_tflops``
                            (offload as the budget
                            solver's third choice), ``peak_model`` (``"eager"`` |
                            ``"inductor"``; default: ``"inductor"`` with the Inductor
                            compiler, else ``"eager"``: Note [Inductor fusion in the
                            peak model])
==========================  =============================================================

Unknown option names are an error that lists the valid ones.

``torch._functorch.config`` is honoured as PyTorch's partitioners honour it, with the
values in force when the graph is compiled (set globally, or with
``torch._functorch.config.patch(...)`` around the first call of the compiled model):
the ambient values of the min-cut knobs are the defaults that the min-cut options above
override (mincut only; ``default_partition`` reads none of them). A knob fxremat
cannot honour, set to another value than its default --
``enable_activation_offloading``, ``unsafe_allow_optimization_of_collectives``, ... --
fails the compile with a ``ValueError`` that names it (Note [Ambient functorch config]
in ``_partition_fn.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from ._partition import flag_option, options_mapping
from ._partition_fn import MINCUT_OPTIONS, check_partitioner, partition_fn

COMPILERS = ("inductor", "aot_eager", "eager")
BACKEND_OPTIONS = ("compiler", "mode", "partitioner", "policy", "offload_target", "barrier", "keep_annotations", "dump_dir",
                   "dump", "fallback", "pareto_dir")


def _path_option(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"fxremat backend: {name} must be a path, got {type(value).__name__}")
    return os.fspath(value) if value is not None else None


@dataclass
class BackendOptions:
    compiler: str = "inductor"
    mode: str | None = None
    partitioner: str = "mincut"
    policy: Any = None
    offload_target: str = "torch"
    barrier: bool = False
    keep_annotations: bool = False
    dump_dir: str | None = None
    fallback: bool = False
    pareto_dir: str | None = None
    mincut: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: dict | None) -> "BackendOptions":
        o = cls()
        options = dict(options_mapping(options, "fxremat backend"))
        unknown = sorted(k for k in options if k not in BACKEND_OPTIONS and k not in MINCUT_OPTIONS)
        if unknown:
            raise ValueError(
                f"fxremat backend: unknown option(s) {unknown}; valid options: {', '.join(BACKEND_OPTIONS)}, "
                f"and the min-cut options {', '.join(MINCUT_OPTIONS)}"
            )
        o.compiler = options.pop("compiler", o.compiler)
        if o.compiler not in COMPILERS:
            raise ValueError(f"fxremat backend: unknown compiler {o.compiler!r} (available: {', '.join(COMPILERS)})")
        o.mode = options.pop("mode", None)
        if o.mode is not None:
            if o.compiler != "inductor":
                raise ValueError(f"fxremat backend: mode {o.mode!r} is the inductor compiler's; compiler is {o.compiler!r}")
            import torch._inductor

            modes = torch._inductor.list_mode_options()
            if o.mode not in modes:
                raise ValueError(f"fxremat backend: unknown mode {o.mode!r} (available: {', '.join(modes)})")
        o.partitioner = options.pop("partitioner", o.partitioner)
        o.policy = options.pop("policy", None)
        o.offload_target = options.pop("offload_target", "torch")
        o.barrier = flag_option("barrier", options.pop("barrier", False), "fxremat backend")
        o.keep_annotations = flag_option("keep_annotations", options.pop("keep_annotations", False), "fxremat backend")
        dump_dir = options.pop("dump_dir", None)
        if flag_option("dump", options.pop("dump", False), "fxremat backend") and dump_dir is None:
            dump_dir = os.environ.get("FXREMAT_DUMP_DIR") or "fxremat_dump"
        o.dump_dir = _path_option("dump_dir", dump_dir)
        o.fallback = flag_option("fallback", options.pop("fallback", False), "fxremat backend")
        # partition_fn refuses it with another partitioner than mincut.
        o.pareto_dir = _path_option("pareto_dir", options.pop("pareto_dir", None))
        o.mincut = options  # only min-cut names are left
        if o.compiler == "inductor" and o.partitioner == "mincut":
            # The budget bounds the peak of the graphs as Inductor runs them, which
            # inlines pointwise results (Note [Inductor fusion in the peak model]).
            o.mincut.setdefault("peak_model", "inductor")
        check_partitioner(o.partitioner, o.mincut, "fxremat backend")
        # policy, offload target and barrier are checked (and the policy parsed) here,
        # before any compile starts
        partition_fn(o.partitioner, o.mincut, policy=o.policy, offload_target=o.offload_target, barrier=o.barrier,
                     keep_annotations=o.keep_annotations)
        return o


def _inductor_partitioner_class() -> type:
    """``FxrematInductorPartitioner``: an fxremat partition_fn as Inductor's
    ``CustomPartitionerFn``. Made on first use (importing ``torch._inductor`` is slow)
    and published as this module's attribute, so that Inductor's caches can pickle it."""
    cls = globals().get("FxrematInductorPartitioner")
    if cls is None:
        from torch._inductor.custom_graph_pass import CustomPartitionerFn

        class FxrematInductorPartitioner(CustomPartitionerFn):
            def __init__(self, fn: Any) -> None:
                self.fn = fn

            def __call__(self, gm, joint_inputs, **kwargs):
                # Inductor passes compiler="inductor" to any custom partitioner;
                # default_partition's signature has no such parameter (and
                # min_cut_rematerialization_partition ignores it).
                kwargs.pop("compiler", None)
                return self.fn(gm, joint_inputs, **kwargs)

            def uuid(self) -> Any:
                return self.fn.uuid()

            def __repr__(self) -> str:
                return f"FxrematInductorPartitioner({self.fn!r})"

        FxrematInductorPartitioner.__module__ = __name__
        FxrematInductorPartitioner.__qualname__ = "FxrematInductorPartitioner"
        cls = globals()["FxrematInductorPartitioner"] = FxrematInductorPartitioner
    return cls


def __getattr__(name: str) -> Any:
    if name == "FxrematInductorPartitioner":  # unpickling in a fresh process
        return _inductor_partitioner_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _interpreter_compiler(gm, example_inputs):
    """Runs a graph node by node through ``torch.fx.Interpreter`` (the "eager" compiler)."""
    import torch.fx

    def run(args):
        return torch.fx.Interpreter(gm).boxed_run(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _calls_nested_regions(gm) -> bool:
    """Whether a Dynamo graph (or a graph module it holds) calls invoke_subgraph."""
    import torch

    hop = getattr(torch.ops.higher_order, "invoke_subgraph", None)
    if hop is None:
        return False
    return any(n.target is hop for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes)


def fxremat_backend(gm, example_inputs: Sequence[Any], *, options: dict | None = None, mode: str | None = None):
    """The ``"fxremat"`` backend: ``torch.compile(model, backend="fxremat", options=...)``.

    See the module docstring for the options.
    """
    import torch

    o = BackendOptions.parse(options)
    mode = o.mode if o.mode is not None else mode
    pf = partition_fn(o.partitioner, o.mincut, policy=o.policy, offload_target=o.offload_target, barrier=o.barrier,
                      keep_annotations=o.keep_annotations, dump_dir=o.dump_dir, fallback=o.fallback,
                      pareto_dir=o.pareto_dir)
    # Partitioning happens while this function runs; a cache hit in the AOTAutograd
    # cache would skip it, and with it the dump.
    patches = {"enable_autograd_cache": False} if o.dump_dir is not None or o.pareto_dir is not None else {}
    with torch._functorch.config.patch(patches):
        if o.compiler == "inductor":
            from torch._inductor.compile_fx import compile_fx

            config_patches: dict[str, Any] = {}
            if mode is not None and mode != "default":
                config_patches.update(torch._inductor.list_mode_options(mode))
            config_patches["custom_partitioner_fn"] = _inductor_partitioner_class()(pf)
            # Note [Donated buffers and nested regions]: Inductor lowers an
            # invoke_subgraph body with the outer backward's donated-buffer indices
            # (GraphLowering reads get_donated_idxs() from the tracing context) and
            # applies them to the body's own placeholders by position. A body tangent
            # that lands on one is written in place and returned, while the outer
            # backward still reuses its dead buffer: the gradients upstream of the
            # region were wrong (a 3-block nested_compile_region transformer under
            # dots_saveable; PyTorch's own Inductor compile hits it on other models).
            # Graphs that call a nested region compile without donated buffers.
            donate = {"donated_buffer": False} if _calls_nested_regions(gm) else {}
            with torch._functorch.config.patch(donate):
                return compile_fx(gm, example_inputs, config_patches=config_patches)

        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop

        compiler = boxed_nop if o.compiler == "aot_eager" else _interpreter_compiler
        return aot_autograd(fw_compiler=compiler, bw_compiler=compiler, partition_fn=pf,
                            keep_inference_input_mutations=True)(gm, example_inputs)


def register() -> None:
    """Registers the backend with Dynamo by name. Not needed where the package is
    installed (the entry point does it); useful when it runs from a source tree."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "fxremat" not in _COMPILER_FNS:
        register_backend(compiler_fn=fxremat_backend, name="fxremat")
