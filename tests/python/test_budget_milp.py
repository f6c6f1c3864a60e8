"""The peak-budget solver against the budget MILP (Note [Budget MILP]).

The MILP is solved with scipy's HiGHS (fxremat.testing.milp); its saved set is
then emitted and simulated exactly as the solver's candidates are. Where that
partition is within the budget it is a real competitor, and the solver's own
choice at the same budget must not cost more (within 1%) at most points. The
full table over the benchmark corpus is in docs/benchmarks_budget.md
(bench/budget_bench.py --milp).
"""

from __future__ import annotations

import functools
import gzip
import json

import pytest

from fxremat import _C
from fxremat.testing.milp import budget_targets, solve_budget_milp

from conftest import TESTDATA

pytest.importorskip("scipy")

# Two seed programs and the first random programs of the corpus (not chosen by
# result); a few seconds each.
GRAPHS = ["t5_shift_right", "simple_mlp"] + [f"random/random_{i:04d}" for i in range(10)]


@functools.lru_cache(maxsize=None)
def _load_text(name):
    with gzip.open(TESTDATA / f"{name}.json.gz") as f:
        return f.read().decode()


def _load(name):
    return json.loads(_load_text(name))


@functools.lru_cache(maxsize=None)
def _milp(name, budget):
    # One HiGHS solve per (graph, budget) for the whole file (no early stop: deterministic).
    return solve_budget_milp(_load(name), budget, time_limit=600)


def test_milp_is_a_sound_model_on_a_chain():
    # sin_mm: at a budget far above every peak, nothing needs recomputing; the
    # optimum is 0 and the MILP's saved set simulates within the budget.
    doc = _load("sin_mm")
    answer = solve_budget_milp(doc, 1 << 30)
    assert answer.status == "optimal" and answer.objective == 0
    assert answer.simulated["peak_bytes"] <= 1 << 30
    # Below the inputs' own live bytes nothing fits: infeasible, not an answer.
    assert solve_budget_milp(doc, 0).status == "infeasible"


def _cross_check(graphs, options):
    points = competitive = solved = within_objective = 0
    losses = []
    for name in graphs:
        doc = _load(name)
        full = _C.peak_front(doc, options, None, 3)
        targets = budget_targets(full)
        for point in (p for p in full if p["label"].startswith("budget ")):
            # The byte bound behind the fraction: the solver and the MILP get the same.
            budget, ours = targets[point["label"]], point["recompute_cost"]
            answer = _milp(name, budget)
            if answer.objective is not None:
                solved += 1
                within_objective += ours <= answer.objective * 1.01 + 1e-9
            sim = answer.simulated
            if sim is None or sim["peak_bytes"] > budget:
                continue
            points += 1
            if ours <= sim["recompute_cost"] * 1.01 + 1e-9:
                competitive += 1
            else:
                losses.append((name, budget, ours, sim["recompute_cost"]))
    print(f"MILP solved at {solved} points, ours within 1% of its objective at {within_objective}; "
          f"its saved set within the budget at {points}, ours no costlier at {competitive}; losses: {losses}")
    return solved, within_objective, points, competitive, losses


def test_solver_against_the_milp():
    solved, within, points, competitive, losses = _cross_check(GRAPHS, {})
    assert solved >= len(GRAPHS)  # the reference itself works
    assert points >= 10
    # Measured: ours no costlier than the MILP's saved set at 24 of its 28
    # feasible points, within 1% of its objective at 25 of 29; the whole small
    # corpus is in docs/benchmarks_budget_milp.md. The MILP's memory model is
    # coarser than the simulator's, so its objective can be out of reach (its
    # own saved set over the budget). These bounds guard against regressions.
    assert competitive >= 0.8 * points, losses
    assert within >= 0.75 * solved, (within, solved)


def test_milp_models_the_emitted_backward():
    # Note [Budget MILP]'s execution model is fxremat's: each value saved or
    # recomputed once, never dropped and recomputed later, user outputs handed
    # to the backward, a tuple op's items allocated with its inputs alive. So
    # the partition that saves the MILP's choice recomputes no more than the
    # MILP pays for (its objective is an upper bound: tuple items each pay the
    # op), and it nearly always fits the budget. Measured on GRAPHS: cost <=
    # objective at 29 of 29 solved points (23 before user outputs were handed
    # to the backward), within the budget at 28 of 29.
    solved = fits = 0
    for name in GRAPHS:
        doc = _load(name)
        full = _C.peak_front(doc, {}, None, 3)
        for label, budget in budget_targets(full).items():
            answer = _milp(name, budget)
            if answer.objective is None:
                continue
            solved += 1
            sim = answer.simulated
            assert sim["recompute_cost"] <= answer.objective * (1 + 1e-9) + 1e-6, (name, label, answer)
            fits += sim["peak_bytes"] <= budget
    assert solved >= len(GRAPHS) and fits >= 0.9 * solved, (solved, fits)


# Points the searches of Note [Searching the saved set] reach the optimum at,
# each found by one search that the others miss:
#  - random_0036 at the front's 0.75 point: the optimum (the HiGHS MILP's,
#    20,480) saves the layer norms' statistics and recomputes a few cheap ops;
#    annealing and the rebuild stopped at 58,880, since every single step
#    toward it leaves the budget. Insert and repair finds it.
#  - random_0024 at the 0.75 point: the optimum (205,432) saves the two
#    matmuls, sum_1, sub and add_5 in place of cheaper values (neg_1-3, mean,
#    stack, add); every search that stays within the budget, insert-and-repair
#    included, stopped at 327,680. The oscillation walks through states over
#    the budget to it. The walk is seeded: a change to the searches' order or
#    moves may move this point (the corpus figure varies by +-2 points from
#    seed to seed); re-measure the corpus then.
@pytest.mark.parametrize("name,fraction", [("random/random_0036", "0.75"), ("random/random_0024", "0.75")],
                         ids=["insert_and_repair", "oscillation"])
def test_search_reaches_the_optimum(name, fraction):
    full = _C.peak_front(_load(name), {}, None, 5)
    budget = budget_targets(full)[f"budget {fraction}"]
    point = next(p for p in full if p["label"] == f"budget {fraction}")
    assert point["peak_bytes"] <= budget
    answer = _milp(name, budget)
    assert answer.status == "optimal"
    assert point["recompute_cost"] <= answer.objective * 1.01, (point, answer.objective)


def test_milp_solver_opens_where_built():
    # CBC is opened with dlopen on first use (Note [CBC loaded on demand]): a build
    # configured with it must open it, or every MILP test below would skip unseen.
    if _C.budget_milp_solver_built():
        assert _C.budget_milp_solver_available()
    else:
        assert not _C.budget_milp_solver_available()


@pytest.mark.skipif(not _C.budget_milp_solver_available(), reason="fxremat built without COIN-OR CBC")
def test_milp_candidate_closes_the_gap():
    # With the solver's own MILP candidate (CBC, budget_milp_max_variables),
    # it is no costlier than the HiGHS reference's partition at every point
    # where that partition fits, and cheaper than the heuristic alone on the
    # graphs where the heuristic lost above.
    graphs = ["t5_shift_right", "random/random_0000", "random/random_0005", "random/random_0006"]
    options = {"budget_milp_max_variables": "4000"}
    _, _, points, competitive, losses = _cross_check(graphs, options)
    assert points >= 3 and competitive == points, losses
    cheaper = 0
    for name in graphs:
        doc = _load(name)
        plain = [p["recompute_cost"] for p in _C.peak_front(doc, {}, None, 3) if p["label"].startswith("budget ")]
        exact = [p["recompute_cost"] for p in _C.peak_front(doc, options, None, 3) if p["label"].startswith("budget ")]
        assert all(e <= p * 1.0000001 for e, p in zip(exact, plain)), (name, plain, exact)
        cheaper += sum(e < p for e, p in zip(exact, plain))
    # Where the heuristic alone is already optimal there is nothing to gain: since
    # constants are never saved (Note [Constant values are recomputed]) it is at all but one
    # of these points.
    assert cheaper >= 1


def test_every_saved_value_names_its_rule():
    # Note [Saved-value rules]: the signature and the residual report say why each
    # value is saved -- the inputs, a policy, the min cut, the budget's candidate.
    doc = _load("t5_shift_right")
    _, _, sig = _C.partition_document(doc)
    rules = {s["name"]: s["rule"] for s in sig["saved"]}
    assert all(rules.values()), rules
    assert {r for n, r in rules.items() if n.startswith("primals_")} == {"input"}
    assert "min cut" in rules.values()
    _, _, sig = _C.partition_document(doc, options={"activation_memory_budget": "0.3"})
    assert any(r.startswith("budget: ") for r in (s["rule"] for s in sig["saved"])), sig["saved"]
    _, _, sig = _C.partition_document(doc, policy=_C.parse_policy("dots_saveable"))
    assert "policy PREFER_SAVE" in {s["rule"] for s in sig["saved"]}
    report = _C.residual_report(json.dumps(sig))
    assert "policy PREFER_SAVE  saved" in report
