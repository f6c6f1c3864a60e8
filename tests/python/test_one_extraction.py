"""One extraction (issue 9 item 3): the CLI and ``partition_fn`` emit the same graphs.

Every post-solve rule (the autograd-engine order of the backward, getitems raised to
their producers, no-vc-check tensors last, symbol-binding SymInts) is a C++ pass of the
pipeline; Python's builder only materializes the documents. So for every testdata graph,
static and dynamic shapes, the forward and backward that ``partition_fn`` builds print
node for node as what ``fxremat partition`` writes.
"""

from __future__ import annotations

import copy
import re
import subprocess

import pytest
import torch

import fxremat
from fxremat._format import dumps, save, to_json
from fxremat._partition import _extension
from fxremat.testing import programs, testdata

from test_backend import _dynamo_joint


def _normalized(text: str) -> str:
    """The IR text without storage ids (each writer numbers storages its own way) and
    without the placeholder header lines' metadata (roles and paths: re-encoding a built
    GraphModule derives them from the joint node's meta), but with the input names, the
    constants and every node line with its facts and metadata."""
    out = []
    for line in re.sub(r" @\d+", "", text).splitlines():
        if line.startswith("# input "):
            out.append(line.split()[2])
        elif line.startswith("# constant ") or not line.startswith("#"):
            out.append(line)
    return "\n".join(out)


def _built(gm, nfo, static, **kw):
    fw, bw = fxremat.partition_fn(**kw)(copy.deepcopy(gm), None, num_fwd_outputs=nfo,
                                         static_lifetime_input_indices=static)
    c = _extension()
    return [_normalized(c.to_text(dumps(to_json(g, kind=k)))) for g, k in ((fw, "forward"), (bw, "backward"))]


def _written(cli, path, tmp_path, static, extra=()):
    out = tmp_path / "out"
    args = [str(cli), "partition", str(path), "-o", str(out), *extra]
    if static is not None:
        args += ["--config", "static_lifetime_input_indices=" + ",".join(map(str, static))] if static else []
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    texts = []
    for k in ("forward", "backward"):
        p = subprocess.run([str(cli), "print", str(out / f"{k}.json")], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        texts.append(_normalized(p.stdout))
    return texts


def _static(paths):
    return [i for i, p in enumerate(paths) if p and (p.startswith("params[") or p.startswith("buffers["))]


@pytest.mark.parametrize("name", programs.names())
@pytest.mark.parametrize("policy", [None, "nothing_saveable"])
def test_testdata_cli_and_partition_fn_agree(name, policy, repo_root, tmp_path):
    path = testdata.path_of(name)
    gm = fxremat.load(path)
    facts = gm.meta["fxremat"]
    static = _static(facts["input_paths"])
    kw = {"policy": policy} if policy else {}
    extra = ["--policy", policy] if policy else []
    built = _built(gm, facts["num_fwd_outputs"], static, **kw)
    written = _written(repo_root / "build" / "fxremat", path, tmp_path, static, extra)
    assert built[0] == written[0], "forward graphs differ"
    assert built[1] == written[1], "backward graphs differ"


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return torch.softmax(self.fc2(h * x.shape[0]), dim=-1).max(dim=-1).values


@pytest.mark.parametrize("dynamic", [False, True])
def test_captured_joint_cli_and_partition_fn_agree(dynamic, repo_root, tmp_path):
    """The joint graph torch.compile hands over (dynamic shapes: SymInt inputs whose
    bindings the backward needs) through both front ends."""
    torch.manual_seed(0)
    joint, kw = _dynamo_joint(Net(), torch.randn(8, 16), dynamic=dynamic)
    nfo = kw["num_fwd_outputs"]
    static = list(kw.get("static_lifetime_input_indices") or [])
    path = tmp_path / "joint.json.gz"
    save(joint, path, num_fwd_outputs=nfo)
    if dynamic:
        assert '"symbols"' in dumps(to_json(joint, num_fwd_outputs=nfo))
    built = _built(joint, nfo, static)
    written = _written(repo_root / "build" / "fxremat", path, tmp_path, static)
    assert built == written
    if dynamic:  # the binding SymInt is saved for the backward by both
        assert re.search(r'def forward\(self, \w+: "Sym\(s\d+', written[1])
    # and the CLI verifies it (SymInt inputs take their symbols' hints)
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "verify", str(path), str(tmp_path / "out")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
    if dynamic:  # a SymInt input given for real, as a 0-d integer tensor
        sym = next(n for n in joint.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.SymInt))
        inputs = tmp_path / "inputs.pt"
        torch.save({sym.name: torch.tensor(int(sym.meta["val"].node.hint))}, inputs)
        r = subprocess.run([str(repo_root / "build" / "fxremat"), "verify", str(path), str(tmp_path / "out"),
                            "--inputs", str(inputs)], capture_output=True, text=True)
        assert r.returncode == 0 and f"inputs: 1 from {inputs}" in r.stdout, r.stdout + r.stderr
