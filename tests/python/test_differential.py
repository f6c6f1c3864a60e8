"""Differential test: fxremat's min-cut partitioner against PyTorch's own
``min_cut_rematerialization_partition`` (torch/_functorch/partitioners.py), on every
joint graph in testdata/ (the real programs) and testdata/random/ (seeded random
programs, python/fxremat/testing/random_programs.py).

For each graph:

- the reference: a fresh ``fxremat.load`` (the reference mutates its module: dead code
  elimination, CSE), partitioned by functorch with ``num_fwd_outputs`` and
  ``static_lifetime_input_indices`` = the primals whose path starts with ``params[`` or
  ``buffers[`` (fxremat's default), under functorch's default config. Its saved values
  are the forward graph's outputs after the first ``num_fwd_outputs``; bytes as
  ``_size_of`` counts them (a tensor numel * itemsize, a symbolic int 1);
- ours: ``fxremat.partition(path, partitioner="mincut")``; the signature's
  ``saved_bytes`` must not exceed the reference's. Where the saved sets differ both are
  printed (name, dtype, shape, bytes);
- numerics: ``Partition.run`` (forward, then backward wired by the signature) must
  reproduce the joint graph on the same seeded inputs: primals drawn from their value
  facts (integer inputs inside ``meta value_range``), seeded tangents, dtype-aware
  tolerances. Graphs with dropout: ``torch.manual_seed`` is set identically before the
  joint run and before the forward run, so both draw the same masks. That only works
  because neither partition recomputes a random op in the backward (which would draw
  again); the tests assert that too.

The reference partition itself is run the same way (forward and backward wired by
value name), which checks the corpus and this harness independently of fxremat.

``pytest -s`` prints one summary line per graph (nodes, functorch bytes, ours, ratio)
and a table at the end. Tests that need the min-cut partitioner skip, saying so, only
while ``fxremat.partition`` answers "unknown partitioner 'mincut'".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.fx as fx

import fxremat
from fxremat.testing import random_programs, verify

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
SUFFIX = ".json.gz"
REAL = sorted(TESTDATA.glob(f"*{SUFFIX}"))
RANDOM = random_programs.corpus_files(TESTDATA / "random")
GRAPHS: dict[str, Path] = {p.name.removesuffix(SUFFIX): p for p in REAL + RANDOM}
NAMES = list(GRAPHS)

INPUT_SEED = 20240601
RNG_SEED = 1234


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


@dataclass
class Saved:
    name: str
    dtype: str
    shape: list
    bytes: int

    def __str__(self) -> str:
        return f"{self.name} {self.dtype}{self.shape} {self.bytes} B"


def _nbytes(val: Any) -> int:
    """Bytes of a value as functorch's ``_size_of`` counts them."""
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return 1
    if isinstance(val, torch.Tensor):
        return int(val.numel()) * val.dtype.itemsize
    if isinstance(val, (list, tuple)):
        return sum(_nbytes(v) for v in val if isinstance(v, torch.Tensor))
    return 0


def _describe(node: fx.Node) -> Saved:
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return Saved(node.name, str(val.dtype).removeprefix("torch."), [int(s) for s in val.shape], _nbytes(val))
    return Saved(node.name, type(val).__name__, [], _nbytes(val))


def _facts(gm: fx.GraphModule) -> dict:
    return gm.meta["fxremat"]


def static_lifetime_indices(gm: fx.GraphModule) -> list[int]:
    """fxremat's default: the primals that are parameters or buffers."""
    paths = _facts(gm)["input_paths"]
    return [i for i, p in enumerate(paths) if p and (p.startswith("params[") or p.startswith("buffers["))]


def _run_joint(path: Path) -> tuple[dict[str, Any], dict[str, Any], list]:
    """Seeded inputs and the joint graph's outputs on them (RNG seeded with RNG_SEED):
    (primals by placeholder name, tangents by placeholder name, joint outputs)."""
    joint = fxremat.load(path)
    primals = verify.random_primals(joint, seed=INPUT_SEED)
    tangents = verify.random_tangents(joint, seed=INPUT_SEED + 1)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(RNG_SEED)
        want = list(joint(*primals, *tangents))
    return (dict(zip((n.name for n in verify.placeholders_of(joint, "primal")), primals)),
            dict(zip((n.name for n in verify.placeholders_of(joint, "tangent")), tangents)), want)


def _compare(name: str, nfo: int, outs: list, grads: list, want: list) -> None:
    assert len(outs) == nfo, f"{name}: {len(outs)} forward outputs, joint graph has {nfo}"
    assert len(grads) == len(want) - nfo, f"{name}: {len(grads)} gradients, joint graph has {len(want) - nfo}"
    for i, (g, w) in enumerate(zip(outs, want[:nfo])):
        verify.assert_same(g, w, f"{name}: forward output {i}")
    for i, (g, w) in enumerate(zip(grads, want[nfo:])):
        verify.assert_same(g, w, f"{name}: gradient {i}")


def _random_ops(gm: fx.GraphModule) -> list[str]:
    """Nodes of ``gm`` that draw random numbers (ops tagged nondeterministic_seeded)."""
    return [n.name for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in n.target.tags]


# --------------------------------------------------------------------------------------
# The reference and ours
# --------------------------------------------------------------------------------------


@dataclass
class Reference:
    forward: fx.GraphModule
    backward: fx.GraphModule
    num_fwd_outputs: int
    saved: list[Saved]
    nodes: int

    @property
    def saved_bytes(self) -> int:
        return sum(s.bytes for s in self.saved)


@functools.lru_cache(maxsize=None)
def reference(name: str) -> Reference:
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    gm = fxremat.load(GRAPHS[name])  # a fresh module: the partitioner mutates it
    nodes = len(gm.graph.nodes)
    nfo = _facts(gm)["num_fwd_outputs"]
    static = static_lifetime_indices(gm)
    fw, bw = min_cut_rematerialization_partition(gm, None, num_fwd_outputs=nfo, static_lifetime_input_indices=static)
    saved = [_describe(n) for n in fw.graph.output_node().args[0][nfo:]]
    return Reference(fw, bw, nfo, saved, nodes)


_UNKNOWN = re.compile(r"unknown partitioner\b.*mincut")


@functools.lru_cache(maxsize=None)
def _mincut_missing() -> str | None:
    """Why fxremat's min-cut partitioner cannot be tested yet, or None when it exists."""
    try:
        fxremat.partition(TESTDATA / f"sin_mm{SUFFIX}", partitioner="mincut")
    except ValueError as e:
        if _UNKNOWN.search(str(e)):
            return f"fxremat has no min-cut partitioner yet ({e})"
        raise
    return None


@pytest.fixture
def mincut() -> None:
    reason = _mincut_missing()
    if reason:
        pytest.skip(reason)


@functools.lru_cache(maxsize=None)
def ours(name: str, partitioner: str = "mincut") -> fxremat.Partition:
    # keep_annotations: PyTorch keeps naming ops (xla::name_tensor) in the graph and
    # saves their outputs; fxremat folds them by default (a documented deliberate
    # difference, test_folded_names_are_the_only_default_difference).
    return fxremat.partition(GRAPHS[name], partitioner=partitioner, keep_annotations=True)


def _ours_saved(part: fxremat.Partition) -> list[Saved]:
    entries = sorted(part.signature["saved"], key=lambda s: s["forward_output_index"])
    return [Saved(s["name"], str(s.get("dtype") or s.get("kind")), list(s.get("shape") or []), int(s["bytes"]))
            for s in entries]


# --------------------------------------------------------------------------------------
# Summary (pytest -s)
# --------------------------------------------------------------------------------------

_SUMMARY: dict[str, tuple[int, int, int | None]] = {}
_SAME_SET: dict[str, bool] = {}  # whether ours saves exactly functorch's values (by name)


def _summary_line(name: str, nodes: int, ref: int, mine: int | None) -> str:
    if mine is None:
        tail = "ours        -  (no min-cut partitioner yet)"
    else:
        ratio = f"{mine / ref:.3f}" if ref else ("1.000" if mine == 0 else "inf")
        tail = f"ours {mine:>9} B  ratio {ratio}"
    return f"[differential] {name:<16} nodes {nodes:>4}  functorch {ref:>9} B  {tail}"


def _record(name: str, nodes: int, ref: int, mine: int | None) -> None:
    """Keeps (and prints) the summary line of a graph; the reference-only line only
    while there is no min-cut partitioner (else the comparison prints it)."""
    if mine is None and (name in _SUMMARY or not _mincut_missing()):
        return
    _SUMMARY[name] = (nodes, ref, mine)
    print("\n" + _summary_line(name, nodes, ref, mine))


@pytest.fixture(scope="module", autouse=True)
def _print_summary():
    yield
    if not _SUMMARY:
        return
    rows = [_summary_line(n, *_SUMMARY[n]) for n in NAMES if n in _SUMMARY]
    compared = [(r, m) for (_, r, m) in _SUMMARY.values() if m is not None]
    tail = ""
    if compared:
        tot_ref = sum(r for r, _ in compared)
        tot_ours = sum(m for _, m in compared)
        better = sum(m < r for r, m in compared)
        same = sum(m == r for r, m in compared)
        tail = (f"\n[differential] {len(compared)} graphs: ours {tot_ours} B vs functorch {tot_ref} B in all; "
                f"{same} equal, {better} smaller, {len(compared) - same - better} larger; "
                f"{sum(_SAME_SET.values())} save exactly functorch's values")
    print("\n[differential] summary\n" + "\n".join(rows) + tail)


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------


def test_corpus_is_there():
    assert len(REAL) >= 9, f"testdata/ has {len(REAL)} joint graphs"
    assert len(RANDOM) >= 30, f"testdata/random/ has {len(RANDOM)} graphs: run tools/random_programs.py"


@pytest.mark.parametrize("name", NAMES)
def test_functorch_reference_reproduces_joint(name):
    """The harness itself: functorch's partition, forward then backward wired by value
    name, reproduces the joint graph (dropout included, under the same seed)."""
    ref = reference(name)
    _record(name, ref.nodes, ref.saved_bytes, None)
    random_in_bw = _random_ops(ref.backward)
    assert not random_in_bw, f"{name}: functorch recomputes random ops in the backward: {random_in_bw}"
    primals, tangents, want = _run_joint(GRAPHS[name])
    nfo = ref.num_fwd_outputs
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(RNG_SEED)
        fw_out = list(ref.forward(*[primals[n.name] for n in ref.forward.graph.find_nodes(op="placeholder")]))
        by_name = {n.name: v for n, v in zip(ref.forward.graph.output_node().args[0][nfo:], fw_out[nfo:])}
        bw_args = [by_name[n.name] if n.name in by_name else tangents[n.name]
                   for n in ref.backward.graph.find_nodes(op="placeholder")]
        grads = list(ref.backward(*bw_args))
    _compare(name, nfo, fw_out[:nfo], grads, want)


@pytest.mark.parametrize("name", NAMES)
def test_mincut_saves_no_more_than_functorch(name, mincut):
    ref = reference(name)
    part = ours(name)
    mine = _ours_saved(part)
    sig_bytes = int(part.signature["saved_bytes"])
    assert sig_bytes == sum(s.bytes for s in mine), f"{name}: saved_bytes is not the sum of the saved entries"
    _record(name, ref.nodes, ref.saved_bytes, sig_bytes)
    ref_names = {s.name for s in ref.saved}
    mine_names = {s.name for s in mine}
    _SAME_SET[name] = ref_names == mine_names
    if ref_names != mine_names:
        lines = [f"{name}: saved sets differ (ours {sig_bytes} B, functorch {ref.saved_bytes} B)"]
        lines += [f"  only ours:      {s}" for s in mine if s.name not in ref_names]
        lines += [f"  only functorch: {s}" for s in ref.saved if s.name not in mine_names]
        common = [s for s in mine if s.name in ref_names]
        lines.append(f"  both:           {len(common)} values, {sum(s.bytes for s in common)} B")
        print("\n" + "\n".join(lines))
    assert sig_bytes <= ref.saved_bytes, (
        f"{name}: ours saves {sig_bytes} B, functorch {ref.saved_bytes} B\n"
        f"  ours:      {', '.join(map(str, mine))}\n  functorch: {', '.join(map(str, ref.saved))}")
    # The same values, not only no more bytes (issue 9): every difference from
    # functorch is a documented deliberate choice with its own test.
    assert mine_names == ref_names, (
        f"{name}: saved sets differ\n  only ours: {sorted(mine_names - ref_names)}\n"
        f"  only functorch: {sorted(ref_names - mine_names)}")


@functools.lru_cache(maxsize=None)
def default_reference(name: str) -> list[str]:
    from torch._functorch.partitioners import default_partition

    gm = fxremat.load(GRAPHS[name])
    nfo = _facts(gm)["num_fwd_outputs"]
    fw, _ = default_partition(gm, None, num_fwd_outputs=nfo, static_lifetime_input_indices=static_lifetime_indices(gm))
    return [n.name for n in fw.graph.output_node().args[0][nfo:]]


@pytest.mark.parametrize("name", NAMES)
def test_default_partition_saves_functorchs_values(name):
    mine = [s.name for s in _ours_saved(ours(name, "default"))]
    assert mine == default_reference(name)


def test_folded_names_are_the_only_default_difference():
    """With naming ops folded (the default), name_tensor saves the named input where
    functorch saves the naming op's output: the same tensor, the same bytes."""
    ref = reference("name_tensor")
    folded = fxremat.partition(GRAPHS["name_tensor"], partitioner="mincut")
    mine = _ours_saved(folded)
    assert {s.name for s in ref.saved} - {s.name for s in mine} == {"name_tensor"}
    assert {s.name for s in mine} - {s.name for s in ref.saved} == {"primals_1"}
    assert sum(s.bytes for s in mine) == ref.saved_bytes


@pytest.mark.parametrize("name", NAMES)
def test_mincut_partition_reproduces_joint(name, mincut):
    part = ours(name)
    random_in_bw = _random_ops(part.backward)
    assert not random_in_bw, (
        f"{name}: the backward recomputes random ops {random_in_bw}; they would draw new numbers")
    primals, tangents, want = _run_joint(GRAPHS[name])
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(RNG_SEED)
        outs, grads = part.run(list(primals.values()), list(tangents.values()))
    _compare(name, part.signature["num_fwd_outputs"], list(outs), list(grads), want)


# ---- the generator ----------------------------------------------------------------------

# a function-variant program with dropout and a module-variant one (parameters, buffer)
DETERMINISM_SEEDS = (11, 3)


def test_generator_is_deterministic(tmp_path):
    programs = {s: random_programs.generate(s) for s in DETERMINISM_SEEDS}
    assert {p.module for p in programs.values()} == {False, True}
    assert any(p.num_dropouts for p in programs.values())
    for s, p in programs.items():
        assert random_programs.generate(s).source() == p.source()
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        for s in DETERMINISM_SEEDS:
            random_programs.write_program(s, tmp_path / run, check=(run == "a"))
    for s in DETERMINISM_SEEDS:
        f = f"{random_programs.name_of(s)}{SUFFIX}"
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f"{f} differs between runs"


def _sample_of_corpus() -> list[Path]:
    """Three corpus files: the smallest, the median and the largest."""
    files = sorted(RANDOM, key=lambda p: (p.stat().st_size, p.name))
    return [files[0], files[len(files) // 2], files[-1]] if files else []


@pytest.mark.parametrize("path", _sample_of_corpus(), ids=lambda p: p.name.removesuffix(SUFFIX))
def test_corpus_file_is_what_the_generator_writes(path):
    """(``tools/random_programs.py --check`` compares every file.)"""
    program = random_programs.generate(random_programs.seed_of(path.name))
    data, _ = random_programs.file_bytes(program)
    assert data == path.read_bytes(), (
        f"{path} is stale: rerun the command in testdata/random/README.md")


def test_corpus_matches_its_readme():
    readme = (TESTDATA / "random" / "README.md").read_text()
    m = re.search(r"--count (\d+) --seed (\d+)", readme)
    assert m, "testdata/random/README.md does not record the command"
    count, seed = int(m.group(1)), int(m.group(2))
    want = [f"{random_programs.name_of(s)}{SUFFIX}" for s in range(seed, seed + count)]
    assert [p.name for p in RANDOM] == want
    assert sum(p.stat().st_size for p in RANDOM) < 1_500_000


@pytest.mark.parametrize("name", [n for n in NAMES if n.startswith("random_00")][:8])
def test_dead_users_do_not_change_the_saved_set(name):
    """PyTorch's min cut removes dead code first; so does fxremat's
    (passes/eliminate_dead_code.h). A dead, non-fusible user of a forward value
    would otherwise count as a backward use and shift the cut."""
    import copy

    from torch._functorch.partitioners import min_cut_rematerialization_partition

    base = fxremat.load(GRAPHS[name])
    nfo = _facts(base)["num_fwd_outputs"]
    static = static_lifetime_indices(base)
    targets = [n.name for n in base.graph.nodes
               if n.op == "call_function" and isinstance(n.meta.get("val"), torch.Tensor)
               and n.meta["val"].dtype.is_floating_point and n.meta["val"].dim() >= 1
               and n.meta.get("partitioner_tag") == "is_forward"][:5]
    assert targets
    for target in targets:
        gm = copy.deepcopy(base)
        node = next(n for n in gm.graph.nodes if n.name == target)
        with gm.graph.inserting_after(node):
            dead = gm.graph.call_function(torch.ops.aten.cumsum.default, (node, 0), name="dead_" + target)
        dead.meta = {k: v for k, v in node.meta.items() if k in ("val", "partitioner_tag")}
        gm.recompile()
        fw, _ = min_cut_rematerialization_partition(copy.deepcopy(gm), None, num_fwd_outputs=nfo,
                                                    static_lifetime_input_indices=static)
        want = {n.name for n in fw.graph.output_node().args[0][nfo:]}
        fw, _ = fxremat.partition_fn()(copy.deepcopy(gm), None, num_fwd_outputs=nfo,
                                       static_lifetime_input_indices=static)
        got = {n.name for n in fw.graph.output_node().args[0][nfo:]}
        assert got == want, f"dead cumsum on {target}: only ours {sorted(got - want)}, only functorch {sorted(want - got)}"
