#!/usr/bin/env python3
"""Makes the benchmark's joint graphs under bench/out/graphs/ (git-ignored).

    .venv/bin/python bench/make_graphs.py [--build build] [--only NAME ...] [--force]

- GPT-2 and Llama (Hugging Face transformers, random weights, LM loss) with 2, 12 and
  48 layers, exported with ``fxremat.export_joint`` (Dynamo + AOTAutograd on fake
  tensors, nothing computed). Widths are GPT-2 small's (768, 12 heads, vocab 50257)
  and a 1024-wide Llama (16 heads, 4 KV heads, MLP 2816, vocab 32000); batch 2,
  sequence 512. Width, batch and sequence change the byte counts, not the graph's
  size. Each export runs in its own process, so its time is not shared with others.
- Synthetic graphs of ~1k, 10k, 100k, 1M and 2M nodes written by ``fxremat_synth``
  (a stack of residual MLP blocks, exactly as AOTAutograd traces them; see
  bench/synth.cpp and bench/check_synth.py).

Graphs are cached: a graph is rebuilt only when its file is missing or its recipe
changed. bench/out/graphs/manifest.json records each graph's recipe, node count and
how long it took to make (model construction and export separately).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "graphs"

BATCH, SEQ = 2, 512

GPT2 = dict(n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
LLAMA = dict(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4,
             vocab_size=32000, max_position_embeddings=1024)

# name -> recipe. "kind" picks the builder; everything else is its configuration.
RECIPES: dict[str, dict] = {}
for _layers in (2, 12, 48):
    RECIPES[f"gpt2_{_layers}l"] = dict(kind="gpt2", layers=_layers, batch=BATCH, seq=SEQ, **GPT2)
    RECIPES[f"llama_{_layers}l"] = dict(kind="llama", layers=_layers, batch=BATCH, seq=SEQ, **LLAMA)
# Issue 17's 32-layer Llama (hidden 1024, 4 x 1024 tokens), for bench/front_bench.py; not in ORDER.
RECIPES["llama_32l_4x1024"] = dict(kind="llama", layers=32, batch=4, seq=1024, **LLAMA)
for _label, _nodes in (("1k", 1_000), ("10k", 10_000), ("100k", 100_000), ("1m", 1_000_000), ("2m", 2_000_000)):
    RECIPES[f"synth_{_label}"] = dict(kind="synth", nodes=_nodes, batch=2, seq=128, dim=256, hidden=1024)

ORDER = [f"{m}_{n}l" for m in ("gpt2", "llama") for n in (2, 12, 48)] + \
        [f"synth_{s}" for s in ("1k", "10k", "100k", "1m", "2m")]


def path_of(name: str) -> Path:
    return OUT / f"{name}.json.gz"


# --------------------------------------------------------------------------------------
# transformers models (run in a child process: `make_graphs.py --export NAME`)
# --------------------------------------------------------------------------------------


def _build_model(recipe: dict):
    import torch
    import transformers

    from fxremat.testing.programs import CausalLMLoss

    if recipe["kind"] == "gpt2":
        cfg = transformers.GPT2Config(
            n_layer=recipe["layers"], n_embd=recipe["n_embd"], n_head=recipe["n_head"],
            vocab_size=recipe["vocab_size"], n_positions=recipe["n_positions"],
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
            use_cache=False, bos_token_id=recipe["vocab_size"] - 1, eos_token_id=recipe["vocab_size"] - 1,
            attn_implementation="eager",
        )
        cls = transformers.GPT2LMHeadModel
    else:
        cfg = transformers.LlamaConfig(
            num_hidden_layers=recipe["layers"], hidden_size=recipe["hidden_size"],
            intermediate_size=recipe["intermediate_size"], num_attention_heads=recipe["num_attention_heads"],
            num_key_value_heads=recipe["num_key_value_heads"], vocab_size=recipe["vocab_size"],
            max_position_embeddings=recipe["max_position_embeddings"], attention_dropout=0.0, use_cache=False,
            bos_token_id=1, eos_token_id=2, pad_token_id=None, attn_implementation="eager",
        )
        cls = transformers.LlamaForCausalLM
    # Nothing is computed during export, so the weights' values do not matter: build
    # on the meta device and allocate uninitialised storage (fast; untouched pages of a
    # 48-layer model cost no memory).
    torch.manual_seed(0)
    with torch.device("meta"):
        model = cls(cfg)
    model = model.to_empty(device="cpu")
    if hasattr(model, "loss_type"):
        model.loss_type = "ForCausalLM"
    model.train()
    ids = torch.randint(0, recipe["vocab_size"], (recipe["batch"], recipe["seq"]))
    return CausalLMLoss(model), ids


def export_one(name: str) -> dict:
    """Child process: export one transformers model; prints a JSON line of timings."""
    import torch  # noqa: F401  (import time is not part of the export time)

    import fxremat

    recipe = RECIPES[name]
    t0 = time.perf_counter()
    module, ids = _build_model(recipe)
    t1 = time.perf_counter()
    jg = fxremat.export_joint(module, ids, name=name)
    t2 = time.perf_counter()
    target = path_of(name)
    tmp = target.with_name(target.name + ".tmp.json.gz")
    jg.save(tmp)
    os.replace(tmp, target)
    t3 = time.perf_counter()
    return dict(nodes=len(jg.gm.graph.nodes), build_model_s=round(t1 - t0, 3), export_s=round(t2 - t1, 3),
                save_s=round(t3 - t2, 3))


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------


def _load_manifest() -> dict:
    p = OUT / "manifest.json"
    if p.exists():
        try:
            return json.loads(p.read_text())
        except json.JSONDecodeError:
            return {}
    return {}


def _save_manifest(manifest: dict) -> None:
    p = OUT / "manifest.json"
    p.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def make(name: str, build: Path, manifest: dict, force: bool) -> dict:
    recipe = RECIPES[name]
    target = path_of(name)
    entry = manifest.get(name)
    if not force and target.exists() and entry and entry.get("recipe") == recipe:
        print(f"cached {target.relative_to(REPO)} ({entry['nodes']} nodes)")
        return entry
    if recipe["kind"] == "synth":
        cmd = [str(build / "bench" / "fxremat_synth"), "--nodes", str(recipe["nodes"]), "-o", str(target),
               "--name", name]
        for k in ("batch", "seq", "dim", "hidden"):
            cmd += [f"--{k}", str(recipe[k])]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"fxremat_synth failed for {name}: {r.stderr.strip()}")
        info = json.loads(r.stdout)
        entry = dict(nodes=info["nodes"], layers=info["layers"], generate_s=info["generate_s"],
                     write_s=info["write_s"], total_s=round(time.perf_counter() - t0, 3))
    else:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--export", name], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"export of {name} failed:\n{r.stderr[-4000:]}")
        entry = json.loads(r.stdout.strip().splitlines()[-1])
        entry["process_s"] = round(time.perf_counter() - t0, 3)
    entry["recipe"] = recipe
    entry["file_bytes"] = target.stat().st_size
    manifest[name] = entry
    _save_manifest(manifest)
    times = {k: v for k, v in entry.items() if k.endswith("_s")}
    print(f"made   {target.relative_to(REPO)}: {entry['nodes']} nodes, {entry['file_bytes']} bytes, {times}")
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"), help="CMake build directory holding bench/fxremat_synth")
    ap.add_argument("--only", nargs="*", help=f"graphs to make (default: all): {' '.join(ORDER)}")
    ap.add_argument("--force", action="store_true", help="rebuild even when cached")
    ap.add_argument("--export", help=argparse.SUPPRESS)  # child process: export one model
    ns = ap.parse_args(argv)

    try:
        import fxremat  # noqa: F401
    except ImportError:  # not pip-installed (yet): use the source tree
        sys.path.insert(0, str(REPO / "python"))

    if ns.export:
        print(json.dumps(export_one(ns.export)))
        return 0

    names = ns.only or ORDER
    unknown = sorted(set(names) - set(RECIPES))
    if unknown:
        ap.error(f"unknown graphs {unknown}; known: {sorted(RECIPES)}")
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest()
    for name in names:
        make(name, Path(ns.build), manifest, ns.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
