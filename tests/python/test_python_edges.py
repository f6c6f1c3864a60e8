"""Edges of the Python package: a save that fails half way (a full disk) leaves the
previous files as they were; options of the wrong type are errors naming the option;
malformed or empty policies are refused where they are given."""

from __future__ import annotations

import copy
import dataclasses
import errno
import gzip
import os
import pathlib

import pytest
import torch

import fxremat
from fxremat import _format
from fxremat import backend as fx_backend
from fxremat import policies as P
from fxremat._format import sidecar_name

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "testdata"

# --------------------------------------------------------------------------------------
# save: through temporary files
# --------------------------------------------------------------------------------------


def _small_joint(scale: float = 1.5, ops: int = 2):
    def f(x):
        for _ in range(ops):
            x = torch.sin(x) * scale
        return x.sum()

    return fxremat.export_joint(f, torch.randn(4, requires_grad=True), name="small")


VALUES = [float((i * 37) % 101) / 101 for i in range(8400)]  # 67,200 bytes as float64: over 64 KiB


@pytest.fixture(scope="module")
def big_joint():
    """A joint graph with one float64 constant over 64 KiB: ``save`` writes it to the
    safetensors sidecar."""
    def f(x):
        return (torch.sin(x) * torch.tensor(VALUES, dtype=torch.float64).reshape(40, 210)).sum()

    return fxremat.export_joint(f, torch.randn(40, 210, dtype=torch.float64, requires_grad=True), name="big")


def _constant_key(joint) -> str:
    (key,) = [n.target for n in joint.gm.graph.nodes if n.op == "get_attr"]
    return key


def _shifted(joint, offset: float):
    """``joint`` with its constant's values moved by ``offset`` (another sidecar)."""
    other = dataclasses.replace(joint, gm=copy.deepcopy(joint.gm))
    key = _constant_key(joint)
    setattr(other.gm, key, getattr(joint.gm, key) + offset)
    return other


def _snapshot(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _full_disk_after(monkeypatch, opens_allowed: int):
    """Makes the files ``_format`` opens for writing fail with ENOSPC half way through
    the data, from the ``opens_allowed``-th on (0: the first); reading is untouched."""
    real_open = open
    count = [0]

    class HalfWritten:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            self.f.write(data[: len(data) // 2])  # what fit before the disk was full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
            return False

        def __getattr__(self, name):
            return getattr(self.f, name)

    def fake_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if "w" not in mode:
            return f
        count[0] += 1
        return HalfWritten(f) if count[0] > opens_allowed else f

    monkeypatch.setattr(_format, "open", fake_open, raising=False)
    return count


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_failed_save_leaves_the_previous_graph(name, tmp_path, monkeypatch):
    path = tmp_path / name
    _small_joint(ops=2).save(path)
    before = _snapshot(tmp_path)
    _full_disk_after(monkeypatch, 0)
    with pytest.raises(OSError) as info:
        _small_joint(scale=2.5, ops=30).save(path)
    assert _snapshot(tmp_path) == before  # no truncated graph, no temporary left
    assert info.value.errno == errno.ENOSPC
    assert f"cannot write {path}: No space left on device" in str(info.value)
    monkeypatch.undo()
    fxremat.load(path)  # still the good one


def test_failed_first_save_leaves_nothing(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 0)
    with pytest.raises(OSError, match="No space left on device"):
        _small_joint().save(tmp_path / "g.json")
    assert _snapshot(tmp_path) == {}  # not even a 0-byte file


@pytest.mark.parametrize("opens_allowed", [0, 1], ids=["sidecar fails", "graph fails"])
def test_failed_save_leaves_the_previous_graph_and_sidecar(opens_allowed, big_joint, tmp_path, monkeypatch):
    """The graph and its sidecar change together or not at all: a failure writing
    either leaves both old files (whose checksums agree) in place."""
    path = tmp_path / "g.json.gz"
    big_joint.save(path)
    assert (tmp_path / sidecar_name(path)).exists()
    before = _snapshot(tmp_path)
    _full_disk_after(monkeypatch, opens_allowed)
    with pytest.raises(OSError, match="No space left on device"):
        _shifted(big_joint, 1.0).save(path)
    assert _snapshot(tmp_path) == before
    monkeypatch.undo()
    key = _constant_key(big_joint)
    assert torch.equal(getattr(fxremat.load(path), key), getattr(big_joint.gm, key))


def test_interrupted_save_removes_its_temporaries(tmp_path, monkeypatch):
    """Any exception (here Ctrl-C in a write), not only OSError, removes the temporaries
    and is raised as it was."""
    path = tmp_path / "g.json"
    _small_joint().save(path)
    before = _snapshot(tmp_path)
    real_open = open

    class Interrupted:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()
            return False

        def write(self, data):
            self.f.write(data[:10])
            raise KeyboardInterrupt

    monkeypatch.setattr(_format, "open", lambda file, mode="r", *a, **k: Interrupted(real_open(file, mode, *a, **k))
                        if "w" in mode else real_open(file, mode, *a, **k), raising=False)
    with pytest.raises(KeyboardInterrupt):
        _small_joint(scale=3.0).save(path)
    assert _snapshot(tmp_path) == before


def test_failed_rename_names_the_file_and_removes_the_temporary(tmp_path):
    """The target is a directory: the rename fails; the message names the target, not
    the temporary."""
    target = tmp_path / "g.json"
    target.mkdir()
    with pytest.raises(OSError) as info:
        _small_joint().save(target)
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]
    assert f"cannot write {target}: " in str(info.value)


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_overwriting_save_writes_the_same_bytes(name, big_joint, tmp_path):
    """A save over an existing file gives the bytes a save to a new path gives (the
    gzip stream still has mtime 0 and no file name) and leaves no temporary."""
    joint = _shifted(big_joint, 0.5)
    fresh, over = tmp_path / "fresh", tmp_path / "over"
    fresh.mkdir()
    over.mkdir()
    joint.save(fresh / name)
    _small_joint().save(over / name)
    joint.save(over / name)
    assert _snapshot(over) == _snapshot(fresh)
    assert sorted(_snapshot(fresh)) == sorted([name, "g.constants.safetensors"])
    if name.endswith(".gz"):
        raw = (fresh / name).read_bytes()
        assert raw[4:8] == b"\0\0\0\0"  # mtime 0
        gzip.decompress(raw)


# --------------------------------------------------------------------------------------
# Option types
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def joint():
    return _small_joint()


def _entry_points(joint):
    """Every way options reach the extension, as functions of ``options``."""
    return {
        "partition": lambda o: fxremat.partition(joint, options=o),
        "pareto": lambda o: fxremat.pareto(joint, points=2, options=o),
        "partition_fn": lambda o: fxremat.partition_fn(options=o),
        "backend": lambda o: fx_backend.BackendOptions.parse(o),
    }


ENTRY_POINTS = ["partition", "pareto", "partition_fn", "backend"]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("options", [[("cse", False)], "cse=false", ("cse",), 3])
def test_options_must_be_a_mapping(entry, options, joint):
    """A list of pairs or a text was an AttributeError ('list' object has no attribute
    'items') or dict()'s 'dictionary update sequence element #0 has length 1'."""
    with pytest.raises(TypeError, match=f"options must be a dict of option names to values, not "
                                        f"{type(options).__name__}$"):
        _entry_points(joint)[entry](options)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("name, value", [("activation_memory_budget", [0.5]), ("cse", (True,)),
                                         ("max_dist_from_bw", [3])])
def test_a_list_for_a_one_value_option_is_refused(entry, name, value, joint):
    """int() made [0.5] a budget of 0, silently."""
    with pytest.raises(TypeError, match=f"option {name} takes one value, not a {type(value).__name__}"):
        _entry_points(joint)[entry]({name: value})


def test_backend_messages_say_backend(joint):
    with pytest.raises(TypeError, match="^fxremat backend: option cse takes one value"):
        fx_backend.BackendOptions.parse({"cse": [1]})
    with pytest.raises(TypeError, match="^fxremat backend: options must be a dict"):
        fx_backend.BackendOptions.parse(["cse"])


@pytest.mark.parametrize("bad", [1.7, "a", True, None, 1.0])
@pytest.mark.parametrize("how", ["option", "argument"])
def test_index_list_elements_must_be_ints(bad, how, joint):
    """int() truncated 1.7 to index 1 and gave a bare 'invalid literal for int()' for 'a'."""
    with pytest.raises(TypeError, match=rf"option static_lifetime_input_indices takes a list of int indices; "
                                        rf"{bad!r} \({type(bad).__name__}\) is not one"):
        if how == "option":
            fxremat.partition(joint, options={"static_lifetime_input_indices": [0, bad]})
        else:
            fxremat.partition(joint, static_lifetime_input_indices=[0, bad])


def test_index_lists_take_integer_types(joint):
    np = pytest.importorskip("numpy")
    for value in ([0], (0,), [np.int64(0)], [torch.tensor(0)], []):
        fxremat.partition(joint, options={"static_lifetime_input_indices": value})
        fxremat.partition(joint, static_lifetime_input_indices=value)


def test_scalar_options_are_unchanged(joint):
    fxremat.partition(joint, options={"cse": False, "max_dist_from_bw": 3, "activation_memory_budget": 0.5,
                                      "budget_objective": "peak", "static_lifetime_input_indices": "0"})
    fxremat.partition(joint, options=None)
    assert fx_backend.BackendOptions.parse({"activation_memory_budget": 0.5}).mincut["activation_memory_budget"] == 0.5


# --------------------------------------------------------------------------------------
# Policies
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, where", [('{"policy": ', "line 1, column 11"),
                                         ('[\n {"policy": "nothing_saveable",}]', "line 2, column 32")])
def test_malformed_policy_json_is_a_located_value_error(text, where):
    import json

    with pytest.raises(ValueError, match=f"^malformed policy JSON at {where}: ") as info:
        P.as_policy_json(text)
    assert not isinstance(info.value, json.JSONDecodeError)  # the message is ours, not json's bare one


def test_malformed_policy_json_through_partition(joint):
    with pytest.raises(ValueError, match="malformed policy JSON at line 1, column 11"):
        fxremat.partition(joint, policy='{"policy": ')


@pytest.mark.parametrize("make", [lambda: P.save_ops(), lambda: P.save_ops([]),
                                  lambda: P.as_policy_json({"policy": "save_ops", "ops": []})])
def test_save_ops_needs_an_op(make):
    """The C++ engine refuses save_ops without ops, but only at the partition; docs/
    policies.md gives it no meaning (it would be nothing_saveable by accident)."""
    with pytest.raises(ValueError, match="policy save_ops needs at least one op"):
        make()


@pytest.mark.parametrize("make, fn", [
    (lambda: P.save_only_these_names(""), "save_only_these_names"),
    (lambda: P.save_only_these_names("a", [""]), "save_only_these_names"),
    (lambda: P.save_any_names_but_these(""), "save_any_names_but_these"),
    (lambda: P.save_anything_except_these_names("a", ""), "save_anything_except_these_names"),
    (lambda: P.save_and_offload_only_these_names(names_which_can_be_saved=[""], names_which_can_be_offloaded=[]),
     "save_and_offload_only_these_names"),
    (lambda: P.save_and_offload_only_these_names(names_which_can_be_saved=[], names_which_can_be_offloaded=[""]),
     "save_and_offload_only_these_names"),
    (lambda: P.as_policy_json('{"policy": "save_only_these_names", "names": [""]}'), "save_only_these_names"),
])
def test_empty_names_are_refused_where_given(make, fn):
    with pytest.raises(ValueError, match=rf"policy {fn}: an empty name \(''\) names no value"):
        make()


def test_empty_name_lists_are_as_before():
    # save_and_offload_only_these_names takes empty lists (JAX does too) ...
    P.save_and_offload_only_these_names(names_which_can_be_saved=[], names_which_can_be_offloaded=[])
    # ... the single-list kinds need a name, here as in the C++ engine (src/policy.cpp Validate).
    with pytest.raises(ValueError, match="policy save_only_these_names needs at least one name"):
        P.save_only_these_names()


def test_policy_json_takes_one_string_as_a_list_of_one_as_the_cli_does():
    """"names": "ab" was the names 'a' and 'b' in Python and the name 'ab' in C++."""
    from fxremat import policies as P

    assert P.Policy.from_json({"policy": "save_only_these_names", "names": "ab"}).names == ("ab",)
    assert P.Policy.from_json({"policy": "save_ops", "ops": "aten::mm"}).ops == ("aten.mm",)
    with pytest.raises(ValueError, match=r"policy\.names: expected a list of strings"):
        P.Policy.from_json({"policy": "save_only_these_names", "names": [1, 2]})


@pytest.mark.parametrize("value", ["abc", "-1", "1e6", "123456789012345678901234"])
def test_a_malformed_input_limit_is_an_error_in_python_too(monkeypatch, value):
    monkeypatch.setenv("FXREMAT_MAX_INPUT_BYTES", value)
    with pytest.raises(fxremat.FormatError, match="FXREMAT_MAX_INPUT_BYTES: expected a whole number of bytes"):
        fxremat.load(str(TESTDATA / "sin_mm.json.gz"))
