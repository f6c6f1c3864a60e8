"""Time fxremat's partition_fn against PyTorch's min_cut_rematerialization_partition (and
its default_partition) on the joint graph of a 12-layer GPT-2 and of a corpus of models,
inside torch.compile.

    .venv/bin/python bench/partition_fn_bench.py                 # writes docs/benchmarks_partition_fn.md
    .venv/bin/python bench/partition_fn_bench.py --repeat 9 --layers 12 --out /tmp/b.md

For each pipeline, the model (transformers ``GPT2Config`` defaults: 12 layers, n_embd
768, 12 heads, vocab 50257; dropout 0, eager attention, batch 2 x 64 tokens, LM loss)
is compiled once with torch.compile, and the partitioner hook receives the joint graph
exactly as a real compile hands it over:

- ``inductor``: Inductor's compile_fx (its decompositions and joint-graph passes), the
  joint graph reaching Inductor's ``custom_partitioner_fn`` hook, i.e. what
  ``min_cut_rematerialization_partition`` gets under ``backend="inductor"``;
- ``aot_eager``: AOTAutograd without decompositions (what ``backend="aot_eager"``
  partitions).

In the hook, for each of ``--repeat`` rounds, a deep copy of the joint graph goes to
each partitioner (alternating; copies (new nodes, shared meta values) and a ``gc.collect()`` are outside the timed
region; both run in the compile's lazy-GraphModule context). The time is the whole
call, end to end: for fxremat, encoding the joint graph (``to_json``), the C++
extension (decode, CSE, min cut, extraction, emit documents) and building the two
GraphModules. Both must choose the same saved values (checked). Compilation then stops
(Inductor's code generation for this model takes many minutes on a small machine and is
not what is measured).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))


class _Stop(Exception):
    pass


def _model(layers: int):
    import torch
    import transformers

    from fxremat.testing.programs import CausalLMLoss

    cfg = transformers.GPT2Config(n_layer=layers, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  summary_first_dropout=0.0, use_cache=False, attn_implementation="eager")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(cfg)
    gpt2.loss_type = "ForCausalLM"
    ids = torch.randint(0, cfg.vocab_size, (2, 64))
    return CausalLMLoss(gpt2), ids


def _fresh(joint):
    """A copy of the joint GraphModule to partition: new nodes (the partitioners edit
    graphs), the same meta values (deep-copying fake tensors with symbolic shapes
    fails, and neither partitioner edits them)."""
    import torch.fx as fx

    graph = fx.Graph()
    out = graph.graph_copy(joint.graph, {})
    graph.output(out).meta = dict(joint.graph.output_node().meta)  # AOTAutograd's output descriptors
    return fx.GraphModule(joint, graph)


def _measure(joint, joint_inputs, kw: dict, repeat: int) -> dict:
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    import fxremat
    from fxremat._partition_fn import clear_partition_records, partition_records

    nfo = kw["num_fwd_outputs"]
    ours_fn = fxremat.partition_fn("mincut")
    ours_fn(_fresh(joint), joint_inputs, **kw)  # warm-up: imports the extension
    clear_partition_records()
    torch_s, ours_s, default_s, saved = [], [], [], None
    for _ in range(repeat):
        for which in ("torch", "default", "fxremat"):
            j = _fresh(joint)
            gc.collect()
            t0 = time.perf_counter()
            if which == "torch":
                fw, _ = min_cut_rematerialization_partition(j, joint_inputs, compiler="inductor", **kw)
                torch_s.append(time.perf_counter() - t0)
                ref_saved = [str(n) for n in fw.graph.output_node().args[0][nfo:]]
            elif which == "default":
                default_partition(j, joint_inputs, **kw)
                default_s.append(time.perf_counter() - t0)
            else:
                fw, _ = ours_fn(j, joint_inputs, **kw)
                ours_s.append(time.perf_counter() - t0)
                saved = [str(n) for n in fw.graph.output_node().args[0][nfo:]]
        if saved != ref_saved:
            raise SystemExit(f"fxremat and PyTorch saved different values:\n{saved}\n{ref_saved}")
    recs = partition_records()
    phases = {k: statistics.median(r.seconds[k] for r in recs) for k in ("to_json", "cpp", "build")}
    return {
        "nodes": len(joint.graph.nodes), "saved": len(saved), "saved_bytes": recs[-1].saved_bytes,
        "torch": statistics.median(torch_s), "ours": statistics.median(ours_s),
        "default": statistics.median(default_s),
        "torch_all": torch_s, "ours_all": ours_s, "phases": phases,
    }


def _run(pipeline: str, layers: int, repeat: int) -> dict:
    model, ids = _model(layers)
    return _run_model(pipeline, model, (ids,), repeat)


def _corpus_step(name: str):
    """A corpus model of bench/corpus_check.py as a module computing its loss, and its
    inputs (with the sequence dimension marked dynamic for the *_dynamic entries)."""
    sys.path.insert(0, str(REPO / "bench"))
    import corpus_check

    step, inputs, _ = corpus_check.loss_step(name)
    return step, inputs


def _run_model(pipeline: str, model, inputs: tuple, repeat: int, fullgraph: bool = True) -> dict:
    import torch

    result: dict = {}

    def hook(joint, joint_inputs, **kw):
        kw.pop("compiler", None)
        result.update(_measure(joint, joint_inputs, kw, repeat))
        raise _Stop()

    if pipeline == "inductor":
        from torch._inductor.compile_fx import compile_fx

        from fxremat.backend import _inductor_partitioner_class

        class Hook:
            def __call__(self, gm, joint_inputs, **kw):
                return hook(gm, joint_inputs, **kw)

            def uuid(self):
                return None

        def backend(gm, example_inputs):
            compile_fx(gm, example_inputs, config_patches={"custom_partitioner_fn": _inductor_partitioner_class()(Hook())})
    else:
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.backends.debugging import boxed_nop

        backend = aot_autograd(fw_compiler=boxed_nop, partition_fn=hook)

    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False):
        try:
            torch.compile(model, backend=backend, fullgraph=fullgraph)(*inputs)
        except Exception as e:  # Dynamo wraps the stop signal
            if "_Stop" not in repr(e) and not isinstance(e.__cause__, _Stop):
                raise
    if not result:
        raise SystemExit(f"{pipeline}: the partitioner hook was not reached")
    return result


def _markdown(results: dict, args, command: str) -> str:
    import torch

    lines = [
        "# fxremat.partition_fn vs PyTorch's min-cut partitioner",
        "",
        f"Generated by `bench/partition_fn_bench.py` on commit {results['commit']}. Command:",
        "",
        "```sh",
        command,
        "```",
        "",
        f"Model: transformers `GPT2Config` with {args.layers} layers (n_embd 768, 12 heads, vocab 50257, dropout 0, "
        "eager attention), LM loss, batch 2 x 64 tokens, CPU, `torch.compile(fullgraph=True)`. The joint graph is "
        "taken where a real compile hands it to the partitioner; each round partitions a fresh deep copy with each "
        f"partitioner (alternating, {args.repeat} rounds, median reported; copying and `gc.collect()` untimed). "
        "Both choose the same saved values (checked).",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, torch {torch.__version__}; load average at start "
        f"{results['load_before']}, at end {results['load_after']} (other jobs shared the machine: absolute times "
        "are noisy, the ratio less so).",
        "",
        "| pipeline | joint nodes | saved values | saved bytes (parameters included) | PyTorch min-cut, median (min) s "
        "| fxremat partition_fn, median (min) s | speed-up of medians (of minima) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in args.pipelines:
        r = results[name]
        t_min, o_min = min(r["torch_all"]), min(r["ours_all"])
        lines.append(f"| {name} | {r['nodes']} | {r['saved']} | {r['saved_bytes']} | {r['torch']:.3f} ({t_min:.3f}) | "
                     f"{r['ours']:.3f} ({o_min:.3f}) | {r['torch'] / r['ours']:.1f}x ({t_min / o_min:.1f}x) |")
    lines += [
        "",
        "Where fxremat's time goes (medians of the phases, seconds):",
        "",
        "| pipeline | to_json (Python: encode the joint graph) | C++ extension (decode, CSE, min cut, extract, emit documents) | build (Python: the two GraphModules) |",
        "|---|---:|---:|---:|",
    ]
    for name in args.pipelines:
        p = results[name]["phases"]
        lines.append(f"| {name} | {p['to_json']:.3f} | {p['cpp']:.3f} | {p['build']:.3f} |")
    lines += [
        "",
        "All rounds (seconds):",
        "",
    ]
    for name in args.pipelines:
        r = results[name]
        lines.append(f"- {name}: PyTorch {', '.join(f'{t:.3f}' for t in r['torch_all'])}; "
                     f"fxremat {', '.join(f'{t:.3f}' for t in r['ours_all'])}")
    lines.append("")
    corpus = results.get("corpus") or []
    if corpus:
        lines += [
            "## Corpus",
            "",
            "The models of `bench/corpus_check.py` (transformers configs at test size: GPT-2, Llama, Mixtral "
            "(MoE), BERT, T5, ViT, ResNet, BART; an LSTM and a bidirectional GRU traced with "
            "`torch._dynamo.config.allow_rnn`; a CNN with BatchNorm in training mode; a module with in-place "
            "ops and a tensor constant; Llama with a dynamic sequence length), each joint graph taken where "
            "`torch.compile` hands it to the partitioner, partitioned by PyTorch's min cut, PyTorch's "
            f"`default_partition` (no min cut) and fxremat's `partition_fn` in alternation ({args.repeat} "
            "rounds, medians, seconds).",
            "",
            "| model | pipeline | joint nodes | PyTorch min cut | PyTorch default_partition | fxremat partition_fn "
            "| speed-up vs min cut | vs default_partition |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in corpus:
            if "error" in r:
                lines.append(f"| {r['model']} | {r['pipeline']} | failed: {r['error'][:100]} | | | | | |")
                continue
            lines.append(f"| {r['model']} | {r['pipeline']} | {r['nodes']} | {r['torch']:.4f} | {r['default']:.4f} | "
                         f"{r['ours']:.4f} | {r['torch'] / r['ours']:.2f}x | {r['default'] / r['ours']:.2f}x |")
        ok = [r for r in corpus if "error" not in r]
        if ok:
            ups = sorted(r["torch"] / r["ours"] for r in ok)
            dyn = [r["torch"] / r["ours"] for r in ok if r["model"].endswith("_dynamic")]
            slower = [f"{r['model']} ({r['pipeline']})" for r in ok if r["ours"] > r["default"]]
            lines += [
                "",
                f"Median speed-up over PyTorch's min cut: **{statistics.median(ups):.2f}x** over {len(ok)} graphs "
                f"(lowest {ups[0]:.2f}x, highest {ups[-1]:.2f}x); dynamic-shape graphs: "
                + (", ".join(f"{d:.2f}x" for d in dyn) if dyn else "none") + "; slower than `default_partition` on "
                + (", ".join(slower) if slower else "none") + ".",
                "",
            ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=7, help="rounds per pipeline (median reported; at least 5)")
    ap.add_argument("--pipelines", nargs="+", default=["inductor", "aot_eager"], choices=["inductor", "aot_eager"])
    ap.add_argument("--corpus", default="gpt2,llama,mixtral_moe,bert,t5,vit,resnet_hf,bart,lstm,gru,conv_bn,"
                    "inplace_constants,llama_dynamic", help="corpus models (bench/corpus_check.py); '' for none")
    ap.add_argument("--corpus-pipelines", nargs="+", default=["aot_eager", "inductor"],
                    choices=["inductor", "aot_eager"])
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks_partition_fn.md"),
                    help="markdown report to write ('-' for none)")
    args = ap.parse_args(argv)
    if args.repeat < 5:
        ap.error("--repeat must be at least 5")
    command = ".venv/bin/python bench/partition_fn_bench.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])
                                                                  if (argv if argv is not None else sys.argv[1:]) else "")
    sys.path.insert(0, str(REPO / "bench"))
    from bench_common import commit_label

    # the code this run imports: taken before the run, not after (an edit during it
    # is not what was measured)
    results: dict = {"load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()), "commit": commit_label()}
    for name in args.pipelines:
        r = results[name] = _run(name, args.layers, args.repeat)
        print(f"{name}: {r['nodes']} joint nodes, {r['saved']} saved; PyTorch min-cut {r['torch']:.3f} s, "
              f"fxremat {r['ours']:.3f} s ({r['torch'] / r['ours']:.1f}x); fxremat phases "
              + ", ".join(f"{k} {v:.3f}" for k, v in r["phases"].items()), flush=True)
    results["corpus"] = []
    for model_name in [m for m in args.corpus.split(",") if m]:
        for pipeline in args.corpus_pipelines:
            try:
                step, inputs = _corpus_step(model_name)
                # The first graph a model hands over (HF models may break the graph on logging).
                r = _run_model(pipeline, step, inputs, args.repeat, fullgraph=False)
            except (Exception, SystemExit) as e:  # noqa: BLE001 -- a failure is a result
                r = {"error": f"{type(e).__name__}: {e}".splitlines()[0]}
            r.update(model=model_name, pipeline=pipeline)
            results["corpus"].append(r)
            print(model_name, pipeline, {k: v for k, v in r.items() if k in ("nodes", "torch", "default", "ours", "error")},
                  flush=True)
    results["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    if args.out != "-":
        Path(args.out).write_text(_markdown(results, args, command))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    import torch  # noqa: F401  (fail early without torch)

    sys.exit(main())
