#!/usr/bin/env python3
"""fxremat's partitioner against PyTorch's on joint graphs from 400 to 2M nodes.

    .venv/bin/python bench/run.py [--build build] [--repeat 5] [--partitioner mincut]
                                  [--only NAME ...] [--torch-limit-s 240] [--torch-budget-s 900]

For every graph that bench/make_graphs.py made (bench/out/graphs/), smallest first,
in this one process:
  (a) ours, solver: ``fxremat_bench GRAPH --repeat N`` (a child process that loads the
      graph once, then times the solver alone and the whole in-process partition pass
      N times each);
  (b) ours, whole CLI path: wall time of ``fxremat partition GRAPH -o DIR`` (process
      start, load, partition, write forward/backward/signature), N runs;
  (c) PyTorch: ``torch._functorch.partitioners.min_cut_rematerialization_partition``
      called here, on the graph loaded with ``fxremat.load`` (a fresh load per run, not
      timed: the partitioner mutates the module), N runs, with
      static_lifetime_input_indices = the primals whose path starts with params[ or
      buffers[ (what fxremat assumes by default). PyTorch is skipped where one run is
      predicted to take more than --torch-limit-s (a power law fitted to the sizes
      measured so far), and runs fewer than N times where N runs (with their loads)
      would exceed --torch-budget-s; the report says so.
Medians are reported. Saved bytes: ours from the signature (fxremat_bench and the CLI
must agree), PyTorch's from its forward graph's outputs after the user outputs (a
tensor numel * itemsize, a symint 1), the same rule.

Writes docs/benchmarks.md, docs/benchmarks.png (log-log time against node count)
and bench/out/timings.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import gzip
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_graphs  # noqa: E402
from bench_common import git_state  # noqa: E402

try:
    import fxremat  # noqa: F401
except ImportError:  # not pip-installed (yet): use the source tree
    sys.path.insert(0, str(REPO / "python"))

# Targets from the benchmark's issue, checked in the report.
TARGET_PASS_SPEEDUP = 100.0     # the whole in-process pass, on graphs of >= 10k nodes (issue 11)
TARGET_CLI_SPEEDUP = 20.0       # on graphs of >= 10k nodes
TARGET_1M_SECONDS = 2.0
TARGET_1M_CLI_SECONDS = 5.0
TARGET_LOAD_MBPS = 200         # JSON load: uncompressed JSON bytes / (read + parse + build), every graph
TARGET_WRITE_MBPS = 200        # JSON write: forward.json + backward.json bytes / write-graph, every graph
LARGE = 10_000


def log(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------


def run_ours_inprocess(build: Path, graph: Path, repeat: int, partitioner: str, max_flow: str | None) -> dict:
    cmd = [str(build / "bench" / "fxremat_bench"), str(graph), "--repeat", str(repeat), "--partitioner", partitioner]
    if max_flow:
        cmd += ["--max-flow", max_flow]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse_phases(stderr: str) -> dict:
    """The table FXREMAT_PHASES=1 prints: {phase: ms}."""
    out = {}
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.split()[:3] == ["phase", "ms", "count"]:
            for row in lines[i + 1:]:
                parts = row.split()
                if len(parts) == 3:
                    out[parts[0]] = float(parts[1])
            break
    return out


def run_ours_cli(build: Path, graph: Path, repeat: int, partitioner: str, max_flow: str | None) -> dict:
    times = []
    phases = []
    rss_kb = []
    saved_bytes = None
    with tempfile.TemporaryDirectory(prefix="fxremat-bench-") as tmp:
        for i in range(repeat):
            out = Path(tmp) / f"run{i}"
            cmd = [str(build / "fxremat"), "partition", str(graph), "--partitioner", partitioner, "-o", str(out)]
            if max_flow:
                cmd += ["--config", f"max_flow={max_flow}"]
            t0 = time.perf_counter()
            # FXREMAT_PHASES=1: the CLI prints each phase's time to stderr (fxremat/phases.h).
            # Waited for with wait4 (its own resource use, not the largest of all children so far).
            with tempfile.TemporaryFile("w+") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                        env={**os.environ, "FXREMAT_PHASES": "1"})
                _, status, usage = os.wait4(proc.pid, 0)
                t1 = time.perf_counter()
                proc.returncode = os.waitstatus_to_exitcode(status)
                err.seek(0)
                stderr = err.read()
            if proc.returncode != 0:
                raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}): {stderr.strip()}")
            times.append((t1 - t0) * 1000.0)
            # The CLI's own VmHWM (FXREMAT_PHASES=1 prints it): ru_maxrss of a child spawned by
            # this (large) Python process carries this process's peak across exec.
            own_peak = [int(l.split()[1]) for l in stderr.splitlines() if l.startswith("peak-rss-kb ")]
            rss_kb.append(own_peak[0] if own_peak and own_peak[0] > 0 else usage.ru_maxrss)
            phases.append(parse_phases(stderr))
            written_bytes = sum((out / f).stat().st_size for f in ("forward.json", "backward.json"))
            sig = json.loads((out / "signature.json").read_text())
            saved_bytes = int(sig["saved_bytes"])
            saved_count = len(sig["saved"])
            for f in out.iterdir():  # keep /tmp small for the 2M-node graph
                f.unlink()
            out.rmdir()
    # Per phase, the median over the runs. The load is the median of each run's whole load, not the
    # sum of the phases' medians: a second thread (Note [Warming pages ahead]) moves time between
    # read-file and parse-json from run to run, and the sum of their medians would undercount.
    names = [k for k in phases[0]] if phases else []
    median_phases = {k: statistics.median(p.get(k, 0.0) for p in phases) for k in names}
    median_load = statistics.median(load_ms(p) for p in phases) if phases else 0.0
    return dict(cli_ms=times, saved_bytes=saved_bytes, saved_count=saved_count, command=shlex.join(cmd),
                phases=median_phases, load_ms=median_load, written_bytes=written_bytes, max_rss_kb=max(rss_kb))


def run_ours_cli_uncompressed(build: Path, graph: Path, repeat: int, partitioner: str,
                              max_flow: str | None) -> dict:
    """run_ours_cli on the graph's uncompressed JSON (a .json beside nothing else, in a temporary
    directory): the load without gunzip, for the throughput table."""
    with tempfile.TemporaryDirectory(prefix="fxremat-bench-json-") as tmp:
        plain = Path(tmp) / (graph.name[:-len(".gz")] if graph.name.endswith(".gz") else graph.name)
        with gzip.open(graph, "rb") as src, open(plain, "wb") as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
        return run_ours_cli(build, plain, repeat, partitioner, max_flow)


def load_ms(phases: dict) -> float:
    """The CLI's load of a graph: read-file + parse-json + build-graph (ms)."""
    return sum(phases.get(k, 0.0) for k in ("read-file", "parse-json", "build-graph"))


def cli_load(row: dict, key: str) -> float:
    """A row's median CLI load (ms), `key` "cli" (the graph as benchmarked) or "cli_json" (its
    uncompressed .json); rows of JSON files written before the median of whole loads was kept
    give the sum of the phases' medians."""
    return row.get(f"{key}_load_ms") or load_ms(row[f"{key}_phases"])


def json_bytes(graph: Path) -> int:
    """Bytes of the graph's uncompressed JSON (what a load reads)."""
    if graph.suffix != ".gz":
        return graph.stat().st_size
    n = 0
    with gzip.open(graph, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n


def _reference_saved(fw, num_fwd_outputs: int) -> tuple[int, int]:
    import torch

    outs = fw.graph.output_node().args[0][num_fwd_outputs:]
    total = 0
    for o in outs:
        v = o.meta.get("val")
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (torch.SymInt, int)):
            total += 1
        else:
            raise RuntimeError(f"saved value {o.name} has no tensor or symint meta['val']: {v!r}")
    return total, len(outs)


def run_torch(graph: Path, repeat: int) -> dict:
    import fxremat
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    times, loads = [], []
    saved_bytes = saved_count = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        gm = fxremat.load(graph)
        t1 = time.perf_counter()
        facts = gm.meta["fxremat"]
        static = [i for i, p in enumerate(facts["input_paths"]) if p and p.startswith(("params[", "buffers["))]
        t2 = time.perf_counter()
        fw, _bw = min_cut_rematerialization_partition(
            gm, None, num_fwd_outputs=facts["num_fwd_outputs"], static_lifetime_input_indices=static)
        t3 = time.perf_counter()
        loads.append((t1 - t0) * 1000.0)
        times.append((t3 - t2) * 1000.0)
        sb, sc = _reference_saved(fw, facts["num_fwd_outputs"])
        if saved_bytes is not None and (sb, sc) != (saved_bytes, saved_count):
            raise RuntimeError(f"PyTorch's partitioner is not deterministic on {graph}: {sb} != {saved_bytes} bytes")
        saved_bytes, saved_count = sb, sc
        del gm, fw, _bw
        gc.collect()
    return dict(torch_ms=times, load_ms=loads, saved_bytes=saved_bytes, saved_count=saved_count)


def predict_seconds(points: list[tuple[int, float, str]], nodes: int, family: str) -> tuple[float, str] | None:
    """Seconds one run takes at ``nodes``: a power law fitted (least squares in log-log,
    exponent at least 1) to the measured graphs of >= 1000 nodes of the same family
    (synthetic or model) when there are two, else to all of them; linear from the
    largest one when only one is measured. Returns (seconds, how)."""
    same = [(n, t) for n, t, f in points if f == family and n >= 1000]
    pts = same if len(same) >= 2 else [(n, t) for n, t, _ in points if n >= 1000] or [(n, t) for n, t, _ in points]
    if not pts:
        return None
    n1, t1 = max(pts)
    b = fit_exponent(pts) if len(pts) >= 2 else None
    b = max(1.0, b) if b is not None else 1.0
    # anchor the fitted slope at the largest measured graph
    how = f"time ∝ nodes^{b:.2f} from {', '.join(f'{n:,} nodes: {t:.0f} s' for n, t in sorted(pts))}"
    return t1 * (nodes / n1) ** b, how


def fit_exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) against log(nodes)."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


# --------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return dict(cpu=cpu, cores=os.cpu_count(), mem_gib=mem_gib, os=platform.platform(), python=platform.python_version())


def git_describe() -> str:
    try:
        rev, dirty = git_state()
        return rev + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        return "?"


def build_type(build: Path) -> str:
    try:
        for line in (build / "CMakeCache.txt").read_text().splitlines():
            if line.startswith("CMAKE_BUILD_TYPE:"):
                return line.split("=", 1)[1]
    except OSError:
        pass
    return "?"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "–"
    if ms >= 10_000:
        return f"{ms / 1000:.1f} s"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    if ms >= 10:
        return f"{ms:.0f} ms"
    return f"{ms:.2f} ms"


def fmt_ratio(x: float | None) -> str:
    return "–" if x is None else (f"{x:,.0f}×" if x >= 10 else f"{x:.1f}×")


def fmt_bytes(b: int | None) -> str:
    if b is None:
        return "–"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.6), dpi=100)
    series = [
        ("PyTorch min_cut_rematerialization_partition", "torch_median_ms", "tab:red", "o"),
        ("fxremat CLI (process start, load, partition, write)", "cli_median_ms", "tab:blue", "s"),
        ("fxremat partition pass, in process", "partition_median_ms", "tab:cyan", "^"),
        ("fxremat solver alone", "solver_median_ms", "tab:green", "D"),
    ]
    for label, key, color, marker in series:
        # lines through the synthetic graphs; the GPT-2 / Llama graphs as open markers
        synth = sorted((r["nodes"], r[key] / 1000.0) for r in rows if r.get(key) and r["name"].startswith("synth_"))
        models = sorted((r["nodes"], r[key] / 1000.0) for r in rows if r.get(key) and not r["name"].startswith("synth_"))
        if synth:
            ax.plot([p[0] for p in synth], [p[1] for p in synth], marker=marker, color=color, label=label,
                    linewidth=1.2, markersize=4)
        if models:
            ax.plot([p[0] for p in models], [p[1] for p in models], marker=marker, color=color, linestyle="none",
                    markerfacecolor="none", markersize=6, label=None if synth else label)
    nodes = sorted(r["nodes"] for r in rows)
    if nodes:  # a linear-time guide through the solver's median at the largest graph
        ref = max((r for r in rows if r.get("solver_median_ms")), key=lambda r: r["nodes"], default=None)
        if ref:
            k = ref["solver_median_ms"] / 1000.0 / ref["nodes"]
            ax.plot([nodes[0], nodes[-1]], [k * nodes[0], k * nodes[-1]], color="gray", linestyle=":", linewidth=1,
                    label="linear in node count")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes in the joint graph")
    ax.set_ylabel("time (s), median")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left")
    ax.set_title("Partitioning time against graph size (lines: synthetic graphs; open markers: GPT-2, Llama)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_markdown(meta: dict, rows: list[dict], path: Path, png_name: str) -> None:
    L: list[str] = []
    add = L.append
    add("# Benchmarks")
    add("")
    add("fxremat's partitioner against PyTorch's `min_cut_rematerialization_partition` on joint")
    add("forward/backward graphs from a few hundred to two million nodes. Generated by")
    add("`bench/run.py` (do not edit by hand); reproduce with:")
    add("")
    add("```sh")
    add(meta["command"])
    add("```")
    add("")
    add("`make bench` builds, checks the synthetic generator (`bench/check_synth.py`), makes")
    add("the graphs (`bench/make_graphs.py`, cached under `bench/out/`) and runs")
    add(f"`bench/run.py`. The benchmark is not part of `make test`.")
    add("")
    add("## Set-up")
    add("")
    m = meta["machine"]
    add(f"- Date: {meta['date']}; fxremat {meta['git']}, CMake build type {meta['build_type']}.")
    add(f"- Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB RAM; {m['os']}; Python {m['python']};")
    add(f"  torch {meta['torch']}, transformers {meta['transformers']}.")
    add(f"- Load average (1 min) before / after the run: {meta['loadavg_before']:.2f} / {meta['loadavg_after']:.2f}"
        " (other work on the machine inflates all times alike).")
    add(f"- fxremat partitioner `{meta['partitioner']}`" +
        (f", max-flow algorithm `{meta['max_flow']}`." if meta.get("max_flow") else "."))
    add(f"- Every time is the median of {meta['repeat']} runs unless the table says otherwise.")
    add("")
    add("What is timed, per graph:")
    add("")
    add("- **solver**: fxremat's choice of saved values alone (`SolveMinCut`: flow network")
    add("  build, max flow, cut), in process (`bench/fxremat_bench`), on the graph already loaded,")
    add("  CSE'd and tag-cleaned.")
    add("- **pass**: the whole in-process partition pass (`MinCutPartition`: CSE, tag clean-up,")
    add("  solver, extraction of the forward and backward graphs, signature check).")
    add("- **CLI**: wall time of `fxremat partition GRAPH -o DIR` as a child process: process")
    add("  start, JSON(.gz) load, partition, writing `forward.json`, `backward.json`,")
    add("  `signature.json`.")
    add("- **PyTorch**: `min_cut_rematerialization_partition(gm, None, num_fwd_outputs=...,")
    add("  static_lifetime_input_indices=...)` in the benchmark's Python process on the graph")
    add("  loaded by `fxremat.load` (loaded afresh before every run, not timed). Static-lifetime")
    add("  inputs are the primals whose path starts with `params[` or `buffers[`, as fxremat")
    add("  assumes. Its output (the forward and backward `GraphModule`s) is comparable to the")
    add("  **pass** column; it writes no files.")
    add("- **saved**: bytes of the values the forward saves for the backward (a tensor")
    add("  numel × itemsize, a symint 1 byte), counted the same way for both.")
    add("")
    add("Graphs: GPT-2 (width 768, 12 heads, vocab 50257) and Llama (width 1024, 16 heads, 4 KV")
    add("heads, MLP 2816, vocab 32000) from Hugging Face transformers with 2, 12 and 48 layers,")
    add("batch 2 × sequence 512, exported with `fxremat.export_joint`; `synth_*` are stacks of")
    add("residual MLP blocks written by `bench/fxremat_synth` (identical to what AOTAutograd")
    add("traces for that module, checked by `bench/check_synth.py`), width 256, MLP 1024, batch")
    add("2 × 128.")
    add("")
    manifest = meta.get("manifest", {})
    made = [r for r in rows if r["name"] in manifest]
    if made:
        add("How long making each graph took (`bench/make_graphs.py`, one process per model; model")
        add("construction on the meta device, then `fxremat.export_joint`, then saving the .json.gz):")
        add("")
        add("| graph | nodes | file (.json.gz) | made by | time to make |")
        add("|---|---:|---:|---|---:|")
        for r in made:
            e = manifest[r["name"]]
            if "export_s" in e:
                how = "`fxremat.export_joint` (Dynamo + AOTAutograd, fake tensors)"
                took = (f"export {e['export_s']:.1f} s (+ model {e['build_model_s']:.1f} s, "
                        f"save {e['save_s']:.1f} s)")
            else:
                how = f"`fxremat_synth`, {e.get('layers', '?')} blocks"
                took = f"{e['generate_s']:.1f} s + gzip write {e['write_s']:.1f} s"
            add(f"| `{r['name']}` | {r['nodes']:,} | {fmt_bytes(e.get('file_bytes'))} | {how} | {took} |")
        add("")
    add("## Results")
    add("")
    add(f"![time against node count, log-log]({png_name})")
    add("")
    add("| graph | nodes | solver | pass | CLI | PyTorch | PyTorch ÷ solver | PyTorch ÷ CLI | saved, ours | saved, PyTorch | ours ÷ PyTorch |")
    add("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        torch_cell = fmt_ms(r.get("torch_median_ms"))
        if r.get("torch_skipped"):
            torch_cell = "skipped¹"
        elif r.get("torch_runs") and r["torch_runs"] < meta["repeat"]:
            torch_cell += f" ({r['torch_runs']} runs)²"
        ratio_bytes = (r["saved_bytes"] / r["torch_saved_bytes"]) if r.get("torch_saved_bytes") else None
        add(f"| `{r['name']}` | {r['nodes']:,} | {fmt_ms(r['solver_median_ms'])} | {fmt_ms(r['partition_median_ms'])} "
            f"| {fmt_ms(r['cli_median_ms'])} | {torch_cell} | {fmt_ratio(r.get('solver_speedup'))} "
            f"| {fmt_ratio(r.get('cli_speedup'))} | {fmt_bytes(r['saved_bytes'])} | {fmt_bytes(r.get('torch_saved_bytes'))} "
            f"| {'–' if ratio_bytes is None else f'{ratio_bytes:.4f}'} |")
    add("")
    skipped = [r for r in rows if r.get("torch_skipped")]
    if skipped:
        add("¹ PyTorch's partitioner was not run: " + "; ".join(f"`{r['name']}`: {r['torch_skipped']}" for r in skipped)
            + f". The limit is {meta['torch_limit_s']:.0f} s for one run (`--torch-limit-s`).")
        add("")
    fewer = [r for r in rows if r.get("torch_runs") and r["torch_runs"] < meta["repeat"]]
    if fewer:
        add(f"² Fewer runs, to keep PyTorch's runs on one graph (with their `fxremat.load`) within "
            f"{meta['torch_budget_s']:.0f} s (`--torch-budget-s`): "
            + ", ".join(f"`{r['name']}` {r['torch_runs']}" for r in fewer) + ".")
        add("")
    add(f"The CLI column includes a fixed {fmt_ms(meta['cli_startup_ms'])} of process start-up (median wall time "
        "of `fxremat --version`).")
    add("")
    add("Time spent outside the timed regions, for context (medians): fxremat's C++ load of the "
        "graph file (once per `fxremat_bench` process; the CLI pays it on every run) and Python's "
        "`fxremat.load` before each PyTorch run:")
    add("")
    add("The middle column estimates what the CLI spends beyond start-up, load and the pass (mostly")
    add("serializing and writing the two graphs and the signature): CLI − start-up − C++ load − pass")
    add("(≈ 0 where that is within the noise).")
    add("")
    add("| graph | C++ load | CLI − start-up − load − pass | `fxremat.load` |")
    add("|---|---:|---:|---:|")
    for r in rows:
        rest = r["cli_median_ms"] - meta["cli_startup_ms"] - r["load_ms"] - r["partition_median_ms"]
        add(f"| `{r['name']}` | {fmt_ms(r.get('load_ms'))} | {fmt_ms(rest) if rest > 0 else '≈ 0'} "
            f"| {fmt_ms(r.get('torch_load_median_ms'))} |")
    add("")
    phase_rows = [r for r in rows if r.get("cli_phases")]
    if phase_rows:
        add("Where the CLI's time goes, by phase (medians, from `FXREMAT_PHASES=1 fxremat partition ...`, which")
        add("times each phase with `fxremat/phases.h`). **read-file** includes, for a document of 1 MB to 16 MiB,")
        add("allocating the parser's buffers and starting the thread that maps them while the file is read (Note")
        add("[Warming pages ahead]). Phases nest: **build-graph** includes **index-names** (the node names of a")
        add("document of 5,000 nodes or more, indexed before its nodes are read on two threads: Note [Reading nodes")
        add("on two threads]), **prepare** includes the `find-*` / `has-*` checks and any preparation passes, **cut**")
        add("includes classify, solve, extract and check-signature. **write-files** is the wall time of writing")
        add("the three files, each on its own thread, while a fourth simulates the step's peak")
        add("(**simulate-peak**) and builds signature.json's text (**write-signature**) and the summary")
        add("(Note [Texts beside the graphs]); **write-graph** is the *sum* of the two graph writers' times, so")
        add("it and those three phases overlap write-files. The joint graph is left to the process's exit, as the")
        add("emitted ones are (Note [Graphs outlive the command]). The rest is process start-up, the other passes")
        add("and untimed glue.")
        add("")
        cols = ["read-file", "parse-json", "build-graph", "index-names", "verify-graph", "prepare",
                "find-common-subexpressions", "cut", "classify", "solve-min-cut", "extract", "check-signature",
                "reorder-backward", "write-files", "simulate-peak", "write-graph", "write-signature", "print-summary"]
        add("| graph | " + " | ".join(cols) + " | CLI total |")
        add("|---|" + "---:|" * (len(cols) + 1))
        for r in phase_rows:
            ph = r["cli_phases"]
            add(f"| `{r['name']}` | " + " | ".join(fmt_ms(ph.get(c)) if c in ph else "–" for c in cols)
                + f" | {fmt_ms(r['cli_median_ms'])} |")
        add("")
        add("I/O throughput from the same runs: **load** = the graph's uncompressed JSON ÷ the median over the")
        add("runs of read-file + parse-json + build-graph (read-file includes gunzip of a `.json.gz`; the median")
        add("of the sums, which can exceed the sum of the phases' medians above); **load, .json** = the same")
        add("for the same runs of the CLI on the graph's uncompressed JSON (written to a temporary file first,")
        add("so read from the page cache: JSON load without gunzip); **write** = the bytes of")
        add("`forward.json` + `backward.json` (format 1.5: each distinct stack trace once) ÷ write-files,")
        add("the wall time the CLI spends writing its three files (signature.json too) while it simulates the")
        add("peak: a lower bound of the rate at which the graphs are written; **one writer** = the same bytes")
        add("÷ write-graph, the two writers' times summed, each slowed by the others it shares the 2 cores")
        add("with (information, not the target).")
        add("**CLI peak RSS** is the CLI's own VmHWM (`peak-rss-kb`, printed with the phases), the largest")
        add("over the runs.")
        add("")
        add("| graph | JSON read | load | load MB/s | load, .json | load MB/s, .json | written | write | write MB/s "
            "| one writer | one writer MB/s | CLI peak RSS |")
        add("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in phase_rows:
            load = cli_load(r, "cli")
            write = r["cli_phases"].get("write-files", 0.0)
            one_writer = r["cli_phases"].get("write-graph", 0.0)
            mb_in, mb_out = r["json_bytes"] / 1e6, r["cli_written_bytes"] / 1e6
            if r.get("cli_json_phases"):
                load_json = cli_load(r, "cli_json")
                plain = f"{fmt_ms(load_json)} | {mb_in / (load_json / 1e3):,.0f}"
            else:
                plain = "– | –"
            add(f"| `{r['name']}` | {mb_in:,.1f} MB | {fmt_ms(load)} | {mb_in / (load / 1e3):,.0f} | {plain} "
                f"| {mb_out:,.1f} MB | {fmt_ms(write)} | {mb_out / (write / 1e3) if write else float('nan'):,.0f} "
                f"| {fmt_ms(one_writer)} | {mb_out / (one_writer / 1e3) if one_writer else float('nan'):,.0f} "
                f"| {r['cli_max_rss_kb'] / 1024:,.0f} MiB |")
        add("")
    add("## Targets")
    add("")
    for line in meta["targets"]:
        add(f"- {line}")
    add("")
    if meta.get("notes"):
        add("## Notes")
        add("")
        for line in meta["notes"]:
            add(f"- {line}")
        add("")
    add(f"Raw numbers (every run): `{meta.get('json', 'bench/out/timings.json')}`. Graph export times: "
        "`bench/out/graphs/manifest.json`.")
    add("")
    path.write_text("\n".join(L))


def evaluate_targets(rows: list[dict], meta: dict) -> list[str]:
    out = []
    big = [r for r in rows if r["nodes"] >= LARGE and r.get("torch_median_ms")]
    if big:
        # Like with like: PyTorch's partition (it builds both GraphModules) against
        # fxremat's whole pass; the solver alone is information, not the target.
        def pass_speedup(r: dict) -> float:
            return r["torch_median_ms"] / r["partition_median_ms"]

        worst = min(big, key=pass_speedup)
        ok = pass_speedup(worst) >= TARGET_PASS_SPEEDUP
        out.append(f"Whole in-process pass ≥ {TARGET_PASS_SPEEDUP:.0f}× faster than PyTorch's partition on graphs ≥ "
                   f"{LARGE:,} nodes: {'**met**' if ok else '**not met**'} (lowest {fmt_ratio(pass_speedup(worst))}, "
                   f"`{worst['name']}`; over {len(big)} graphs where PyTorch ran; "
                   + ", ".join(f"`{r['name']}` {fmt_ratio(pass_speedup(r))}" for r in big) + ").")
        worst = min(big, key=lambda r: r["solver_speedup"])
        out.append(f"For information, the solver alone: lowest {fmt_ratio(worst['solver_speedup'])} faster than "
                   f"PyTorch's whole partition (`{worst['name']}`).")
        worst = min(big, key=lambda r: r["cli_speedup"])
        ok = worst["cli_speedup"] >= TARGET_CLI_SPEEDUP
        out.append(f"Whole CLI path ≥ {TARGET_CLI_SPEEDUP:.0f}× faster than PyTorch on graphs ≥ {LARGE:,} nodes: "
                   f"{'**met**' if ok else '**not met**'} (lowest {fmt_ratio(worst['cli_speedup'])}, `{worst['name']}`).")
    else:
        out.append(f"Speed-up targets: PyTorch ran on no graph of ≥ {LARGE:,} nodes, so they were not evaluated.")
    cmp_rows = [r for r in rows if r.get("torch_saved_bytes") is not None]
    worse = [r for r in cmp_rows if r["saved_bytes"] > r["torch_saved_bytes"]]
    if not cmp_rows:
        out.append("Saved bytes ≤ PyTorch's: not evaluated (PyTorch ran on no graph).")
    else:
        out.append(f"Saved bytes ≤ PyTorch's: {'**met**' if not worse else '**not met**'} on "
                   f"{len(cmp_rows) - len(worse)} of {len(cmp_rows)} graphs"
                   + (" (more on " + ", ".join(f"`{r['name']}` +{r['saved_bytes'] - r['torch_saved_bytes']:,} B" for r in worse) + ")"
                      if worse else "")
                   + f"; equal on {sum(r['saved_bytes'] == r['torch_saved_bytes'] for r in cmp_rows)}.")
    synth = [r for r in rows if r["name"].startswith("synth_")]

    def exponents(graphs: list[dict]) -> list[str]:
        parts = []
        for key, label in (("solver_median_ms", "solver"), ("partition_median_ms", "pass"),
                           ("cli_median_ms", "CLI"), ("torch_median_ms", "PyTorch")):
            b = fit_exponent([(r["nodes"], r[key]) for r in graphs if r.get(key)])
            if b is not None:
                parts.append(f"{label} {b:.2f}")
        return parts

    if len(synth) >= 2:
        line = ("Time ~ linear in node count: fitted exponent b of time ∝ nodes^b over the synthetic graphs "
                "(1.00 is linear): from " + f"{synth[0]['nodes']:,}" + " nodes: " + ", ".join(exponents(synth)))
        big_synth = [r for r in synth if r["nodes"] >= LARGE]
        if 2 <= len(big_synth) < len(synth):
            line += (f"; from {LARGE:,} nodes (where fixed costs such as the CLI's start-up no longer dominate): "
                     + ", ".join(exponents(big_synth)))
        out.append(line + ".")
    else:
        out.append("Time ~ linear in node count: not evaluated (fewer than two synthetic graphs).")
    one_m = [r for r in rows if 900_000 <= r["nodes"] <= 1_100_000]
    for r in one_m:
        # Issue 11: the whole pass in <= 2 s, the CLI in <= 5 s, the CLI's peak RSS <= 2 GB; the
        # solver alone for information.
        cells = [("solver (information)", r["solver_median_ms"], TARGET_1M_SECONDS),
                 ("pass", r["partition_median_ms"], TARGET_1M_SECONDS),
                 ("whole CLI path", r["cli_median_ms"], TARGET_1M_CLI_SECONDS)]
        line = (f"1M-node graph (`{r['name']}`, {r['nodes']:,} nodes): "
                + ", ".join(f"{label} {fmt_ms(ms)} (≤ {limit:.0f} s: {'met' if ms <= limit * 1000 else 'not met'})"
                            for label, ms, limit in cells))
        if r.get("partition_ms"):
            # The first run is the process's first partition (fresh memory: page faults), as in
            # the CLI and in a torch.compile process; the median mixes it with warm runs.
            line += ("; the pass's runs in order: " + ", ".join(fmt_ms(ms) for ms in r["partition_ms"])
                     + " (the first in a fresh process)")
        if r.get("cli_max_rss_kb"):
            gib = r["cli_max_rss_kb"] * 1024 / 2**30
            line += f"; CLI peak RSS {gib:.2f} GiB (≤ 2 GB: {'met' if r['cli_max_rss_kb'] * 1024 <= 2e9 else 'not met'})"
        out.append(line + ".")
    # Issue 11: JSON load >= 200 MB/s of uncompressed JSON (read-file + parse-json + build-graph of
    # the CLI), from the .json.gz as benchmarked and from the same graph's uncompressed .json.
    loads = [r for r in rows if r.get("cli_phases") and r.get("json_bytes")]
    if loads:
        parts = []
        for key, label in (("cli", "from the .json.gz (gunzip included)"),
                           ("cli_json", "from the uncompressed .json")):
            rated = [(r["json_bytes"] / 1e6 / (cli_load(r, key) / 1e3), r)
                     for r in loads if r.get(f"{key}_phases") and cli_load(r, key)]
            if not rated:
                continue
            parts.append(f"{label}: " + _rate_verdict(rated, TARGET_LOAD_MBPS, with_size=True))
        out.append(f"JSON load ≥ {TARGET_LOAD_MBPS} MB/s of uncompressed JSON, on every graph: " + "; ".join(parts) + ".")
    # Issue 11: write >= 200 MB/s (the I/O table's write MB/s: forward.json + backward.json bytes
    # over the wall time of write-files, which writes signature.json and simulates the peak too;
    # one writer's rate, over its share of the cores, for information).
    writes = [(r["cli_written_bytes"] / 1e6 / (r["cli_phases"]["write-files"] / 1e3), r)
              for r in loads if r.get("cli_written_bytes") and r["cli_phases"].get("write-files")]
    if writes:
        line = (f"JSON write ≥ {TARGET_WRITE_MBPS} MB/s, on every graph (the CLI's wall time of writing): "
                + _rate_verdict(writes, TARGET_WRITE_MBPS, with_size=False))
        one_writer = [(r["cli_written_bytes"] / 1e6 / (r["cli_phases"]["write-graph"] / 1e3), r)
                      for r in loads if r.get("cli_written_bytes") and r["cli_phases"].get("write-graph")]
        if one_writer:
            worst, worst_row = min(one_writer, key=lambda x: x[0])
            line += (f"; for information, one writer's rate over its time sharing the cores: lowest {worst:,.0f} MB/s"
                     f" (`{worst_row['name']}`)")
        out.append(line + ".")
    return out


def _rate_verdict(rated: list[tuple[float, dict]], target: float, with_size: bool) -> str:
    """'**met** (lowest ...)' or '**not met** (lowest ...; met on k of n graphs, below on
    ...)' for (MB/s, row) pairs against a target rate."""
    worst, worst_row = min(rated, key=lambda x: x[0])
    below = [(v, r) for v, r in rated if v < target]
    detail = f"lowest {worst:,.0f} MB/s, `{worst_row['name']}`"
    if below:
        size = (lambda r: f" ({r['json_bytes'] / 1e6:,.1f} MB)") if with_size else (lambda r: "")
        detail += (f"; met on {len(rated) - len(below)} of {len(rated)} graphs, below on "
                   + ", ".join(f"`{r['name']}`{size(r)} {v:,.0f}" for v, r in below))
    return f"{'**not met**' if below else '**met**'} ({detail})"


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="CMake build directory (fxremat, bench/fxremat_bench)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per measurement (median reported; >= 5 for the report)")
    ap.add_argument("--partitioner", default="mincut", choices=["mincut", "default"])
    ap.add_argument("--max-flow", help="fxremat's max-flow algorithm (default: the library's)")
    ap.add_argument("--only", nargs="*", help="graphs to run (default: every graph make_graphs.py made)")
    ap.add_argument("--torch-limit-s", type=float, default=240.0,
                    help="skip PyTorch where one run is predicted to take longer (default 240)")
    ap.add_argument("--torch-budget-s", type=float, default=900.0,
                    help="fewer PyTorch runs where N runs plus their loads would take longer (default 900)")
    ap.add_argument("--no-torch", action="store_true", help="do not run PyTorch's partitioner")
    ap.add_argument("--render-only", action="store_true",
                    help="measure nothing: rewrite the markdown and plot from the --json file of an earlier run")
    ap.add_argument("--markdown", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--plot", default=str(REPO / "docs" / "benchmarks.png"))
    ap.add_argument("--json", default=str(REPO / "bench" / "out" / "timings.json"))
    ns = ap.parse_args(argv)
    build = Path(ns.build) if Path(ns.build).is_absolute() else REPO / ns.build
    if ns.render_only:
        data = json.loads(Path(ns.json).read_text())
        meta, rows = data["meta"], data["graphs"]
        meta["targets"] = evaluate_targets(rows, meta)
        Path(ns.json).write_text(json.dumps(dict(meta=meta, graphs=rows), indent=1) + "\n")
        plot(rows, Path(ns.plot))
        write_markdown(meta, rows, Path(ns.markdown), os.path.relpath(ns.plot, Path(ns.markdown).parent))
        log(f"rewrote {ns.markdown} and {ns.plot} from {ns.json}")
        return 0

    names = ns.only or [n for n in make_graphs.ORDER if make_graphs.path_of(n).exists()]
    missing = [n for n in names if not make_graphs.path_of(n).exists()]
    if missing:
        ap.error(f"graphs not made yet: {missing}; run bench/make_graphs.py")
    manifest = json.loads((make_graphs.OUT / "manifest.json").read_text()) if (make_graphs.OUT / "manifest.json").exists() else {}
    graphs = sorted(((n, make_graphs.path_of(n)) for n in names),
                    key=lambda x: manifest.get(x[0], {}).get("nodes", 0) or x[1].stat().st_size)

    import torch
    import transformers

    # What every CLI run pays before it reads the graph: process start, dynamic
    # loading, static initialisation.
    startup = []
    for _ in range(max(5, ns.repeat)):
        t0 = time.perf_counter()
        subprocess.run([str(build / "fxremat"), "--version"], stdout=subprocess.DEVNULL, check=True)
        startup.append((time.perf_counter() - t0) * 1000.0)
    startup_ms = statistics.median(startup)
    log(f"fxremat --version (process start-up): {fmt_ms(startup_ms)}")
    if not ns.no_torch:  # first-call costs (lazy imports in torch._functorch, networkx) off the clock
        run_torch(REPO / "testdata" / "simple_mlp.json.gz", 1)

    loadavg_before = os.getloadavg()[0]
    git_at_start = git_describe()  # the source the binaries were built from, presumably
    rows: list[dict] = []
    torch_points: list[tuple[int, float, str]] = []   # (nodes, seconds per run incl. its load, family)
    max_flow = ns.max_flow
    notes: list[str] = []
    for name, path in graphs:
        log(f"== {name}")
        ours = run_ours_inprocess(build, path, ns.repeat, ns.partitioner, ns.max_flow)
        max_flow = ours.get("max_flow", max_flow)
        nodes = int(ours["nodes"])
        row = dict(name=name, nodes=nodes, load_ms=ours["load_ms"], solver_ms=ours["solver_ms"],
                   partition_ms=ours["partition_ms"], solver_median_ms=statistics.median(ours["solver_ms"]),
                   partition_median_ms=statistics.median(ours["partition_ms"]), saved_bytes=ours["saved_bytes"],
                   saved_count=ours["saved_count"], bench=ours)
        log(f"   ours: solver {fmt_ms(row['solver_median_ms'])}, pass {fmt_ms(row['partition_median_ms'])}, "
            f"saved {ours['saved_bytes']} B")
        cli = run_ours_cli(build, path, ns.repeat, ns.partitioner, ns.max_flow)
        row.update(cli_ms=cli["cli_ms"], cli_median_ms=statistics.median(cli["cli_ms"]), cli_phases=cli["phases"],
                   cli_load_ms=cli["load_ms"],
                   cli_written_bytes=cli["written_bytes"], json_bytes=json_bytes(path),
                   cli_max_rss_kb=cli["max_rss_kb"])
        if cli["saved_bytes"] != ours["saved_bytes"]:
            notes.append(f"`{name}`: the CLI saved {cli['saved_bytes']} B but fxremat_bench {ours['saved_bytes']} B.")
        log(f"   CLI: {fmt_ms(row['cli_median_ms'])}")
        if path.suffix == ".gz":
            plain = run_ours_cli_uncompressed(build, path, ns.repeat, ns.partitioner, ns.max_flow)
            row.update(cli_json_ms=plain["cli_ms"], cli_json_phases=plain["phases"], cli_json_load_ms=plain["load_ms"])
            if plain["saved_bytes"] != cli["saved_bytes"]:
                notes.append(f"`{name}`: the CLI saved {plain['saved_bytes']} B from the .json but "
                             f"{cli['saved_bytes']} B from the .json.gz.")
            log(f"   CLI on the uncompressed .json: {fmt_ms(statistics.median(plain['cli_ms']))}")

        if ns.no_torch:
            row["torch_skipped"] = "--no-torch"
        else:
            family = "synth" if name.startswith("synth_") else "model"
            prediction = predict_seconds(torch_points, nodes, family)
            predicted = prediction[0] if prediction else None
            runs = ns.repeat
            if predicted is not None and predicted > ns.torch_limit_s:
                row["torch_skipped"] = (f"one run (with its `fxremat.load`) predicted to take {predicted:,.0f} s "
                                        f"({prediction[1]})")
                log(f"   PyTorch: skipped ({row['torch_skipped']})")
            else:
                if predicted is not None and predicted * runs > ns.torch_budget_s:
                    runs = max(1, int(ns.torch_budget_s // predicted))
                t0 = time.perf_counter()
                try:
                    ref = run_torch(path, runs)
                except Exception as e:  # report it, keep going
                    row["torch_skipped"] = f"PyTorch's partitioner failed: {type(e).__name__}: {str(e)[:300]}"
                    notes.append(f"`{name}`: {row['torch_skipped']}")
                    log(f"   PyTorch: {row['torch_skipped']}")
                    rows.append(row)
                    continue
                per_run = (time.perf_counter() - t0) / runs
                torch_points.append((nodes, per_run, family))
                row.update(torch_ms=ref["torch_ms"], torch_load_ms=ref["load_ms"], torch_runs=runs,
                           torch_median_ms=statistics.median(ref["torch_ms"]),
                           torch_load_median_ms=statistics.median(ref["load_ms"]),
                           torch_saved_bytes=ref["saved_bytes"], torch_saved_count=ref["saved_count"])
                row["solver_speedup"] = row["torch_median_ms"] / row["solver_median_ms"]
                row["cli_speedup"] = row["torch_median_ms"] / row["cli_median_ms"]
                row["partition_speedup"] = row["torch_median_ms"] / row["partition_median_ms"]
                log(f"   PyTorch: {fmt_ms(row['torch_median_ms'])} ({runs} runs), saved {ref['saved_bytes']} B; "
                    f"speed-up solver {fmt_ratio(row['solver_speedup'])}, CLI {fmt_ratio(row['cli_speedup'])}")
        rows.append(row)

    command = ".venv/bin/python bench/run.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    meta = dict(command=command.strip(), date=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
                git=git_at_start, build_type=build_type(build), machine=machine(), torch=torch.__version__,
                transformers=transformers.__version__, partitioner=ns.partitioner, max_flow=max_flow,
                repeat=ns.repeat, torch_limit_s=ns.torch_limit_s, torch_budget_s=ns.torch_budget_s,
                loadavg_before=loadavg_before, loadavg_after=os.getloadavg()[0], notes=notes,
                cli_startup_ms=startup_ms, manifest=manifest,
                json=os.path.relpath(ns.json, REPO) if Path(ns.json).is_absolute() else ns.json)
    meta["targets"] = evaluate_targets(rows, meta)

    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(dict(meta=meta, graphs=rows), indent=1) + "\n")
    plot(rows, Path(ns.plot))
    write_markdown(meta, rows, Path(ns.markdown), os.path.relpath(ns.plot, Path(ns.markdown).parent))
    log(f"wrote {ns.markdown}, {ns.plot}, {ns.json}")
    for line in meta["targets"]:
        log("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
