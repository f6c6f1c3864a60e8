"""The C++ peak model (Note [Peak model], include/fxremat/peak_model.h) against a
measurement: the partition's GraphModules run on real inputs under a storage
counter (fxremat.testing.memory), on every testdata graph and the random-program
corpus, with the min cut, budget 0 and a policy."""

from __future__ import annotations

import glob
import os

import pytest

import fxremat
from fxremat.testing.memory import example_inputs, measure_peak

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILES = sorted(glob.glob(os.path.join(REPO, "testdata", "*.json.gz"))) + sorted(
    glob.glob(os.path.join(REPO, "testdata", "random", "*.json.gz")))
CONFIGS = [
    ("mincut", {}, None),
    ("budget0", {"activation_memory_budget": 0.0}, None),
    ("nothing_saveable", {}, "nothing_saveable"),
]


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.basename(p).removesuffix(".json.gz"))
def test_model_matches_measurement(path):
    joint = fxremat.load(path)
    for label, options, policy in CONFIGS:
        p = fxremat.partition(joint, options=options, policy=policy)
        primals, tangents = example_inputs(joint)
        measured = measure_peak(p, primals, tangents)
        peak = p.signature["peak"]
        # The model counts exactly what the counter sees (no kernel scratch in
        # either): any difference is a modelling error.
        assert peak["bytes"] == measured.peak_bytes, (label, peak, measured)
        assert peak["live_after_forward_bytes"] == measured.live_after_forward_bytes, (label, peak, measured)
        assert peak["graph"] in ("forward", "backward")


def test_measurement_can_fail():
    """The counter sees a tensor the model does not know about: an extra
    allocation in the backward shows up in the measurement."""
    import torch

    joint = fxremat.load(os.path.join(REPO, "testdata", "sin_mm.json.gz"))
    p = fxremat.partition(joint)
    primals, tangents = example_inputs(joint)
    base = measure_peak(p, primals, tangents).peak_bytes
    bw = p.backward
    out = next(n for n in bw.graph.nodes if n.op == "output")
    with bw.graph.inserting_before(out):
        big = bw.graph.call_function(torch.ops.aten.zeros.default, ([1024],))
        bw.graph.call_function(torch.ops.aten.sum.default, (big,))
    bw.recompile()
    extra = measure_peak(p, primals, tangents).peak_bytes
    assert extra >= 4096 and extra > base
    assert p.signature["peak"]["bytes"] == base


def test_residual_report_names_the_peak():
    joint = fxremat.load(os.path.join(REPO, "testdata", "sin_mm.json.gz"))
    p = fxremat.partition(joint)
    assert p.signature["peak"] == {"bytes": 256, "node": "sigmoid_backward", "graph": "backward",
                                   "live_after_forward_bytes": 128}
