"""pytest configuration for the fxremat Python tests.

The package is normally pip-installed in editable mode (``pip install
--no-build-isolation -e python``); only when it is not importable is the source tree put
on ``sys.path``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

try:
    import fxremat  # noqa: F401
except ImportError:  # not installed: use the source tree
    sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402,F401  (a missing torch is a set-up failure, not a skip)

# `make test` runs the suite on pytest-xdist workers, one a core: each worker's torch
# then computes on one thread, so the workers do not oversubscribe the cores (two
# workers of two OpenMP threads each on two cores spin against each other).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

TESTDATA = REPO / "testdata"


@pytest.fixture(scope="session")
def testdata_dir() -> Path:
    return TESTDATA


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture
def fresh_compile_state():
    """A clean Dynamo cache, no partition records, and no AOTAutograd cache, so every
    compile in a test really partitions."""
    from fxremat._partition_fn import clear_partition_records

    torch._dynamo.reset()
    clear_partition_records()
    with torch._functorch.config.patch(enable_autograd_cache=False):
        yield
    torch._dynamo.reset()
