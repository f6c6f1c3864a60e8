"""Graph file I/O benchmark (issue 11, item 3; results in docs/benchmarks_io.md).

Measures in one run, side by side:
  * in process (build/bench/fxremat_io_bench): reading a file, parsing JSON into the
    IR, serializing the IR, writing .json and .json.gz -- the new reader and writer
    (simdjson tape, streaming writer) against the nlohmann DOM code path of the same
    build (FXREMAT_JSON_IO=nlohmann);
  * Python's json.load (and gzip + json.load) on the same files, as a reference;
  * the CLI (`fxremat inspect`, `fxremat partition`) on 1,000,000-node graphs: wall time
    and peak RSS, new build against an old CLI binary (--old-cli, a build of the
    commit before the new reader);
  * the candidate parsers alone (build/bench/fxremat_json_parse_bench);
  * gzip levels 1, 6 and 9 on the written JSON of the 100k-node graph (Python's zlib, the
    zlib the CLI links).

    python bench/io_bench.py --old-cli /tmp/old/fxremat [--out bench/out/io] [--skip-old-1m]

The graphs are generated into --out: fxremat_synth (the synthetic MLP joint graph of
bench/synth.cpp; 100k nodes = 28.8 MB of JSON, the issue's example) and the sin chain of
tests/bad_inputs/make_large.py. Prints a Markdown report on stdout.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import time
import zlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"


def run_rss(cmd: list[str], env: dict | None = None) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    code = ("import resource, subprocess, sys, time, json\n"
            "t = time.perf_counter()\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "dt = time.perf_counter() - t\n"
            "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
            "print(json.dumps({'s': dt, 'rss_kb': rss, 'rc': r.returncode, 'err': r.stderr[-500:]}))\n")
    p = subprocess.run([sys.executable, "-c", code, *cmd], capture_output=True, text=True, env=env)
    m = json.loads(p.stdout)
    if m["rc"] != 0:
        raise RuntimeError(f"{cmd}: exit {m['rc']}: {m['err']}")
    return m["s"], m["rss_kb"] / 1024.0, p


def io_bench(path: pathlib.Path, out: pathlib.Path, repeats: int, old: bool) -> dict:
    env = dict(os.environ)
    if old:
        env["FXREMAT_JSON_IO"] = "nlohmann"
    r = subprocess.run([str(BUILD / "bench" / "fxremat_io_bench"), str(path), "--repeats", str(repeats),
                        "--out", str(out)], capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout)


def py_load(path: pathlib.Path, repeats: int) -> float:
    best = 1e30
    for _ in range(repeats):
        t = time.perf_counter()
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                json.loads(f.read())
        else:
            with open(path, "rb") as f:
                json.load(f)
        best = min(best, time.perf_counter() - t)
    return best


def mbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / 1e6 / seconds:,.0f}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-cli", required=True, help="fxremat binary built from the commit before the new reader")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "io"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-old-1m", action="store_true", help="do not run the old CLI on the 1M-node chain")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cli = str(BUILD / "fxremat")
    load_start = os.getloadavg()

    # --- inputs ------------------------------------------------------------------
    synth = out / "synth_100k.json"
    synth_1m = out / "synth_1m.json"
    for p, n in ((synth, 100_000), (synth_1m, 1_000_000)):
        if not p.exists():
            subprocess.run([str(BUILD / "bench" / "fxremat_synth"), "--nodes", str(n), "-o", str(p)], check=True,
                           capture_output=True)
    synth_gz = out / "synth_100k.json.gz"
    if not synth_gz.exists():
        subprocess.run([cli, "print", str(synth), "-o", str(synth_gz)], check=True, capture_output=True)
    chain = out / "chain_1m.json"
    if not chain.exists():
        sys.path.insert(0, str(ROOT / "tests" / "bad_inputs"))
        import make_large  # noqa: E402
        make_large.write_chain_json(chain, 1_000_000)

    lines = []
    emit = lines.append
    emit(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average at start "
         f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} (1/5/15 min).")
    emit("")

    # --- candidate parsers ----------------------------------------------------------
    r = subprocess.run([str(BUILD / "bench" / "fxremat_json_parse_bench"), str(synth), str(args.repeats)],
                       capture_output=True, text=True, check=True)
    emit(f"### Parsers alone ({synth.name}, {synth.stat().st_size / 1e6:.1f} MB, best of {args.repeats})")
    emit("")
    emit("| parser | ms | MB/s |")
    emit("|---|---:|---:|")
    for line in r.stdout.splitlines()[1:]:
        name, rest = line[:14].strip(), line[14:].split()
        emit(f"| {name} | {rest[0]} | {rest[2]} |")
    emit("")

    # --- in process -------------------------------------------------------------------
    emit(f"### In process (fxremat_io_bench, best of {args.repeats}; MB of uncompressed JSON)")
    emit("")
    emit("| file | code | load MB/s (parse) | load MB/s (file, gunzip included) | write MB/s (.json) | "
         "write .json.gz s | Python json.load MB/s |")
    emit("|---|---|---:|---:|---:|---:|---:|")
    for path, repeats, with_old in ((synth, args.repeats, True), (synth_gz, args.repeats, True), (chain, 1, False)):
        py = py_load(path, 1 if path == chain else repeats)
        for old in ((False, True) if with_old else (False,)):
            m = io_bench(path, out, repeats, old)
            emit(f"| {path.name} ({m['nodes']:,} nodes, {m['json_bytes'] / 1e6:.1f} MB) | "
                 f"{'nlohmann DOM (old)' if old else 'simdjson + streaming (new)'} | "
                 f"{mbps(m['json_bytes'], m['parse_s'])} | {mbps(m['json_bytes'], m['load_file_s'])} | "
                 f"{mbps(m['written_json_bytes'], m['write_json_s'])} | {m['write_gz_s']:.2f} | "
                 f"{mbps(m['json_bytes'], py)} |")
    emit("")

    # --- CLI on 1M nodes ---------------------------------------------------------------
    emit("### CLI on 1,000,000-node graphs (wall s, peak RSS MiB)")
    emit("")
    emit("| graph | command | new | old |")
    emit("|---|---|---:|---:|")
    for g in (chain, synth_1m):
        commands = [["partition", str(g), "-o", str(out / f"part_{g.stem}")]]
        if g == chain:  # the synthetic graph's inspect is left out to keep the run short
            commands.insert(0, ["inspect", str(g)])
        for cmd in commands:
            s_new, rss_new, _ = run_rss([cli, *cmd])
            old_cell = "not run"
            if cmd[0] == "inspect" and g == chain and not args.skip_old_1m:
                s_old, rss_old, _ = run_rss([args.old_cli, *cmd])
                old_cell = f"{s_old:.1f} s, {rss_old:,.0f} MiB"
            emit(f"| {g.name} ({g.stat().st_size / 1e6:.0f} MB) | {cmd[0]} | {s_new:.1f} s, {rss_new:,.0f} MiB | "
                 f"{old_cell} |")
    s_py = py_load(chain, 1)
    emit(f"| {chain.name} | Python json.load | {s_py:.1f} s | |")
    emit("")

    # --- gzip levels -------------------------------------------------------------------
    text = (out / "synth_100k_written.json")
    subprocess.run([cli, "print", str(synth), "-o", str(text)], check=True, capture_output=True)
    data = text.read_bytes()
    emit(f"### gzip levels on the written 100k-node synthetic graph ({len(data) / 1e6:.0f} MB of JSON; "
         f"zlib {zlib.ZLIB_RUNTIME_VERSION})")
    emit("")
    emit("| level | compress s | MB/s | size MB | ratio | decompress s |")
    emit("|---:|---:|---:|---:|---:|---:|")
    for level in (1, 6, 9):
        t = time.perf_counter()
        z = zlib.compress(data, level)
        dt = time.perf_counter() - t
        t = time.perf_counter()
        zlib.decompress(z)
        dd = time.perf_counter() - t
        emit(f"| {level} | {dt:.2f} | {len(data) / 1e6 / dt:,.0f} | {len(z) / 1e6:.1f} | {len(data) / len(z):.0f}x | "
             f"{dd:.2f} |")
    text.unlink()
    load_end = os.getloadavg()
    emit("")
    emit(f"Load average at the end: {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}.")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
