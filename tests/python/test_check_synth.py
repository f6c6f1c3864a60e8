"""bench/check_synth.py in the suite: the synthetic benchmark graphs (bench/fxremat_synth)
must stay exactly what AOTAutograd traces for their module, or the 1M-node figures in
docs/benchmarks*.md describe a graph no user has. It ran only under `make bench`, and
broke unnoticed when format 1.5 moved stack traces to a table (the export's
`stack_trace_index` was compared against the generator's nothing)."""

import importlib.util
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")


def _check_synth():
    spec = importlib.util.spec_from_file_location("check_synth", os.path.join(REPO, "bench", "check_synth.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_synth"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not os.path.exists(os.path.join(BUILD, "bench", "fxremat_synth")),
                    reason="fxremat_synth not built (FXREMAT_BUILD_BENCH=OFF)")
def test_synthetic_graph_is_what_aotautograd_traces(capsys):
    status = _check_synth().main(["--build", BUILD, "--layers", "1", "2"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.count("ok ") == 2, out
