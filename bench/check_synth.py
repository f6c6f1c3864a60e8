#!/usr/bin/env python3
"""Checks that fxremat_synth writes exactly what AOTAutograd traces, and that the
graphs are usable by every consumer.

    .venv/bin/python bench/check_synth.py [--build build] [--layers 1 3]

For each layer count L:
  1. exports ``SynthNet(L)`` (the module fxremat_synth's graphs are the joint graph
     of, defined below) with ``fxremat.export_joint`` and compares the document with
     ``fxremat_synth --layers L``'s, key by key (only stack traces differ);
  2. runs the synthetic graph loaded with ``fxremat.load`` on the module's weights
     and compares forward output and gradients with eager autograd;
  3. runs ``fxremat partition`` (mincut and default) and ``fxremat verify`` on it;
  4. runs PyTorch's ``min_cut_rematerialization_partition`` on it.
Exit status 0 when everything passed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
try:
    import fxremat  # noqa: F401
except ImportError:  # not pip-installed (yet): use the source tree
    sys.path.insert(0, str(REPO / "python"))
import fxremat  # noqa: E402


class Block(nn.Module):
    """One fxremat_synth block (see bench/synth.cpp)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm_w = nn.Parameter(1.0 + 0.1 * torch.randn(dim))
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.norm_w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        a = self.fc1(h)
        a = torch.relu(F.gelu(a) * torch.sin(a))
        return x + self.fc2(a)


class SynthNet(nn.Module):
    def __init__(self, layers: int, dim: int, hidden: int):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, hidden) for _ in range(layers)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x.sum()


def _strip(doc: dict) -> dict:
    # Stack traces (fxremat_synth has none): inline (format <= 1.4) or by index into the
    # document's table (format 1.5, Note [Stack-trace table]).
    doc.pop("stack_traces", None)
    for n in doc["nodes"]:
        n.get("meta", {}).pop("stack_trace", None)
        n.get("meta", {}).pop("stack_trace_index", None)
    return doc


def _first_difference(a, b, where="$"):
    if type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'export' if k in a else 'fxremat_synth'}"
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def check(layers: int, build: Path, dims: dict, tmp: Path) -> list[str]:
    problems = []
    torch.manual_seed(layers)
    model = SynthNet(layers, dims["dim"], dims["hidden"])
    x = torch.randn(dims["batch"], dims["seq"], dims["dim"], requires_grad=True)
    name = f"synth_{layers}l"

    # 1. same document as AOTAutograd's
    jg = fxremat.export_joint(model, x, name=name)
    exported = tmp / f"{name}_export.json.gz"
    jg.save(exported)
    synth = tmp / f"{name}.json.gz"
    subprocess.run([str(build / "bench" / "fxremat_synth"), "--layers", str(layers), "-o", str(synth),
                    *[a for k, v in dims.items() for a in (f"--{k}", str(v))]],
                   check=True, stdout=subprocess.DEVNULL)
    want = _strip(json.loads(gzip.decompress(exported.read_bytes())))
    got = json.loads(gzip.decompress(synth.read_bytes()))
    diff = _first_difference(want, got)
    if diff:
        problems.append(f"L={layers}: fxremat_synth differs from fxremat.export_joint at {diff}")

    # 2. runs to eager autograd's values
    gm = fxremat.load(synth)
    facts = gm.meta["fxremat"]
    roots = {"params": dict(model.named_parameters()), "buffers": {}, "args": (x,), "kwargs": {}}
    primals = [fxremat.resolve_path(p, roots).detach() for p in facts["input_paths"]]
    tangent = torch.tensor(0.5)
    with torch.no_grad():
        got_out = gm(*primals, tangent)
    out = model(x)
    want_grads = torch.autograd.grad(out, [*model.parameters(), x], tangent)
    want_out = [out.detach(), *want_grads]
    if len(got_out) != len(want_out):
        problems.append(f"L={layers}: fxremat.load'ed graph returns {len(got_out)} values, eager {len(want_out)}")
    for i, (g, w) in enumerate(zip(got_out, want_out)):
        if not torch.allclose(g, w, rtol=1e-4, atol=1e-5):
            problems.append(f"L={layers}: output {i} differs from eager autograd: max err {(g - w).abs().max()}")

    # 3. fxremat partition + verify
    for partitioner in ("mincut", "default"):
        out_dir = tmp / f"{name}_{partitioner}"
        r = subprocess.run([str(build / "fxremat"), "partition", str(synth), "--partitioner", partitioner,
                            "-o", str(out_dir)], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"L={layers}: fxremat partition --partitioner {partitioner} failed: {r.stderr.strip()}")
            continue
        r = subprocess.run([str(build / "fxremat"), "verify", str(synth), str(out_dir)], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"L={layers}: fxremat verify ({partitioner}) failed: {r.stdout[-500:]} {r.stderr.strip()}")

    # 4. PyTorch's partitioner accepts it
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    gm = fxremat.load(synth)
    static = [i for i, p in enumerate(facts["input_paths"]) if p and p.startswith(("params[", "buffers["))]
    try:
        min_cut_rematerialization_partition(gm, None, num_fwd_outputs=facts["num_fwd_outputs"],
                                            static_lifetime_input_indices=static)
    except Exception as e:  # report, keep going
        problems.append(f"L={layers}: min_cut_rematerialization_partition failed: {type(e).__name__}: {e}")

    print(f"{'ok  ' if not problems else 'FAIL'} L={layers}: {len(got['nodes'])} nodes "
          f"(export identical, eager values, partition+verify mincut/default, PyTorch partitioner)")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"), help="CMake build directory (fxremat, bench/fxremat_synth)")
    ap.add_argument("--layers", type=int, nargs="*", default=[1, 3])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=32)
    ns = ap.parse_args(argv)
    dims = {"batch": ns.batch, "seq": ns.seq, "dim": ns.dim, "hidden": ns.hidden}
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers in ns.layers:
            problems += check(layers, Path(ns.build), dims, Path(tmp))
    for p in problems:
        print("FAIL", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
