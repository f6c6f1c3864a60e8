"""The budget MILP: an exact-solver reference for the peak-budget solver.

C++ builds the problem (Note [Budget MILP] in ``passes/budget_partition.h``):
Checkmate's formulation restricted to fxremat's execution model, at one byte
budget. This module solves it with scipy's HiGHS ``milp`` and evaluates the
saved set it picks with the same emission and peak simulation the solver uses
(``_C.evaluate_saved``), so every answer has two readings:

* ``objective`` -- the MILP's optimum *in its own memory model*, which is
  coarser than the simulator's (a value recomputed at a use point counts for the
  whole point, tuple items each pay their op): it can be infeasible where the
  simulator finds a partition, and cheaper where its placement differs;
* ``simulated`` -- the partition that saves the MILP's choice, as fxremat emits
  it: a real candidate the heuristic can be compared with on equal terms.

Used by ``tests/python/test_budget_milp.py`` and ``bench/budget_bench.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from fxremat import _C


@dataclass
class MilpAnswer:
    status: str  # "optimal", "infeasible", "time limit", or scipy's message
    objective: Optional[float]  # the MILP's recompute cost (None unless solved)
    saved: list[str]  # the values the MILP saves (joint-graph names)
    simulated: Optional[dict]  # {peak_bytes, recompute_cost, saved_bytes, label} of that saved set
    variables: int
    constraints: int
    seconds: float


def solve_budget_milp(
    document: Mapping[str, Any],
    budget_bytes: int,
    options: Optional[Mapping[str, str]] = None,
    time_limit: float = 60.0,
) -> MilpAnswer:
    """Solves the budget MILP of a joint-graph document at ``budget_bytes``."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix

    opts = {k: str(v) for k, v in (options or {}).items()}
    m = _C.budget_milp(dict(document), opts, None, int(budget_bytes))
    n = len(m["variables"])
    rows = len(m["row_lower"])
    if m["constant_infeasible"]:
        return MilpAnswer("infeasible", None, [], None, n, rows, 0.0)
    start = time.perf_counter()
    constraints = []
    if rows:
        a = coo_matrix((m["coefs"], (m["rows"], m["cols"])), shape=(rows, n)).tocsr()
        constraints.append(LinearConstraint(a, m["row_lower"], m["row_upper"]))
    res = milp(
        np.asarray(m["objective"], dtype=float),
        constraints=constraints,
        integrality=np.ones(n),
        bounds=Bounds(m["lower"], m["upper"]),
        options={"time_limit": time_limit},
    )
    seconds = time.perf_counter() - start
    status = {0: "optimal", 1: "time limit", 2: "infeasible"}.get(res.status, res.message)
    if res.x is None:
        return MilpAnswer(status, None, [], None, n, rows, seconds)
    saved = [name for var, name in zip(m["save_variables"], m["save_names"]) if res.x[var] > 0.5]
    simulated = _C.evaluate_saved(dict(document), saved, opts)
    return MilpAnswer(status, float(res.fun), saved, simulated, n, rows, seconds)


def budget_targets(front: list[dict]) -> dict[str, int]:
    """The byte budget behind each "budget F" point of ``_C.peak_front``'s answer:
    smallest + floor(F * (min cut - smallest)), the smallest being the lowest
    candidate peak (Note [Peak budget]), so that a reference can be given the
    same bound the solver had."""
    candidates = [p for p in front if not p["label"].startswith("budget ")]
    lo = min(p["peak_bytes"] for p in candidates)
    hi = max(lo, next(p["peak_bytes"] for p in candidates if p["label"] == "min cut"))
    return {
        p["label"]: lo + int(float(p["label"].split()[1]) * (hi - lo)) for p in front if p["label"].startswith("budget ")
    }
