"""CLI fixes (tools/fxremat_cli.cpp): pareto's front written exactly and escaped,
--memory-budget in whole bytes, no stale sidecar after a partition over an earlier
one, an empty -o refused, and ``print -o X.fxir.gz`` writing the text form.

The binary is $FXREMAT_CLI when set (a build directory of one's own), else build/fxremat."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import xml.dom.minidom
from pathlib import Path

import pytest
import torch

import fxremat

REPO = Path(__file__).resolve().parents[2]
CLI = os.environ.get("FXREMAT_CLI", str(REPO / "build" / "fxremat"))
TESTDATA = REPO / "testdata"


def _cli(*args, cwd=None):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd)


# ---- pareto: exact numbers, escaped names ------------------------------------------


def test_pareto_front_json_has_exact_costs_as_python_does(tmp_path):
    """recompute_cost was written with {:.6g} (25858304 -> 2.58583e+07): the file now
    holds the same values fxremat.pareto() returns."""
    graph = TESTDATA / "gpt2_2l.json.gz"
    front = tmp_path / "front.json"
    r = _cli("pareto", graph, "--points", "3", "-o", front)
    assert r.returncode == 0, r.stderr
    cli = json.loads(front.read_text())["points"]
    py = fxremat.pareto(str(graph), points=3)
    assert [p["label"] for p in cli] == [p["label"] for p in py]
    assert any(p["recompute_cost"] >= 1e6 for p in py)  # where six digits were too few
    for a, b in zip(cli, py):
        assert (a["peak_bytes"], a["recompute_cost"], a["saved_bytes"]) == \
            (b["peak_bytes"], b["recompute_cost"], b["saved_bytes"]), a["label"]


NASTY_NAME = 'mlp "v2" <a&b> \'q\' back\\slash tab\there\x01 \u00e9'


def test_pareto_escapes_the_graph_name_in_json_and_svg(tmp_path):
    doc = json.load(gzip.open(TESTDATA / "simple_mlp.json.gz"))
    doc["name"] = NASTY_NAME
    graph = tmp_path / "g.json"
    graph.write_text(json.dumps(doc))
    front, plot = tmp_path / "front.json", tmp_path / "front.svg"
    r = _cli("pareto", graph, "--points", "2", "-o", front, "--plot", plot)
    assert r.returncode == 0, r.stderr
    assert json.loads(front.read_text(encoding="utf-8"))["graph"] == NASTY_NAME
    svg = xml.dom.minidom.parse(str(plot))
    title = svg.getElementsByTagName("text")[0].firstChild.data
    # XML has no place for \x01, even escaped: it becomes U+FFFD
    assert title == NASTY_NAME.replace("\x01", "\ufffd") + ": step peak vs recompute cost"


@pytest.mark.parametrize("file_name", [b'a"b\\c<&>.json', b"bad\xffutf8.json"])
def test_pareto_escapes_a_name_taken_from_the_file_name(tmp_path, file_name):
    """No "name" in the document: the file name stands in, quotes and ill-formed
    UTF-8 included (the latter as U+FFFD)."""
    doc = json.load(gzip.open(TESTDATA / "simple_mlp.json.gz"))
    doc.pop("name", None)
    graph = os.path.join(os.fsencode(tmp_path), file_name)
    with open(graph, "w") as f:
        json.dump(doc, f)
    front, plot = tmp_path / "front.json", tmp_path / "front.svg"
    r = subprocess.run([os.fsencode(CLI), b"pareto", graph, b"--points", b"2", b"-o", os.fsencode(front),
                        b"--plot", os.fsencode(plot)], capture_output=True)
    assert r.returncode == 0, r.stderr
    want = file_name.decode("utf-8", errors="replace")
    assert json.loads(front.read_text(encoding="utf-8"))["graph"] == want
    assert want in xml.dom.minidom.parse(str(plot)).getElementsByTagName("text")[0].firstChild.data


# ---- --memory-budget: whole bytes --------------------------------------------------


@pytest.mark.parametrize("budget,message", [
    ("0.3", "--memory-budget takes a whole number of bytes, not '0.3'; a fraction of the range from the smallest "
            "peak to the min cut's is --config activation_memory_budget=0.3"),
    ("1.9", "--memory-budget 1.9 is not a whole number of bytes"),
    ("0.3B", "--memory-budget 0.3B is not a whole number of bytes"),
    ("1.0000001KiB", "--memory-budget 1.0000001KiB is not a whole number of bytes"),
    ("9223372036854775808", "--memory-budget 9223372036854775808 is more than 2^63 - 1 bytes"),
    ("9GiB9", "--memory-budget takes a byte size such as 4096, 64MiB or 1.5GB, not '9GiB9'"),
    (".", "--memory-budget takes a byte size such as 4096, 64MiB or 1.5GB, not '.'"),
    # An empty value was taken for no flag: the partition ran without a budget.
    ("", "--memory-budget takes a byte size such as 4096, 64MiB or 1.5GB, not ''"),
])
def test_memory_budget_must_be_whole_bytes(tmp_path, budget, message):
    """A value that is not a whole number of bytes was rounded down without a word
    (0.3 -> a budget of 0 B, 1.9 -> 1 B); now it is bad input, before anything is read."""
    out = tmp_path / "out"
    r = _cli("partition", TESTDATA / "sin_mm.json.gz", "--memory-budget", budget, "-o", out)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr == f"fxremat: error: {message}\n"
    assert not out.exists()


@pytest.mark.parametrize("budget,bytes_", [
    ("4096", 4096), ("0.5GiB", 1 << 29), ("1.5GiB", 3 << 29), ("4.1GB", 4_100_000_000),
    ("1.1KB", 1100), ("0.25KiB", 256), ("0.0009765625KiB", 1), ("007.50MB", 7_500_000), ("9223372036854775807", (1 << 63) - 1),
])
def test_memory_budget_in_whole_bytes_with_a_decimal_unit(tmp_path, budget, bytes_):
    """A decimal that makes whole bytes with its unit is taken exactly."""
    out = tmp_path / "out"
    r = _cli("partition", TESTDATA / "sin_mm.json.gz", "--memory-budget", budget, "-o", out)
    if bytes_ < 256:  # under the graph's smallest peak: refused by the budget, not by the parser
        assert r.returncode == 2 and f"memory budget {bytes_} B is below the smallest peak" in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "signature.json").read_text())["peak"]["budget_bytes"] == bytes_


# ---- partition -o over an earlier run: no stale sidecar ----------------------------


VALUES = [float((i * 37) % 101) / 101 for i in range(8400)]  # 67,200 bytes as float64: over 64 KiB


def _big_constant(x):  # as test_constants.py's: the constant goes to forward.constants.safetensors
    scale = torch.tensor(VALUES, dtype=torch.float64).reshape(40, 210)
    return (torch.sin(x) * scale).sum()


def test_partition_over_an_earlier_run_removes_its_stale_sidecars(tmp_path):
    joint = fxremat.export_joint(_big_constant, torch.randn(40, 210, dtype=torch.float64, requires_grad=True),
                                 name="big_constant")
    big = tmp_path / "big.json.gz"
    joint.save(big)
    out = tmp_path / "out"
    r = _cli("partition", big, "-o", out)
    assert r.returncode == 0, r.stderr
    assert (out / "forward.constants.safetensors").exists()
    # what is not a sidecar this run would have written stays
    (out / "notes.constants.safetensors").write_text("mine\n")
    (out / "backward.constants.safetensors.bak").write_text("mine too\n")
    r = _cli("partition", TESTDATA / "simple_mlp.json.gz", "-o", out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "backward.constants.safetensors.bak", "backward.json", "forward.json", "notes.constants.safetensors",
        "signature.json"]
    # and a run that writes a sidecar again keeps it
    r = _cli("partition", big, "-o", out)
    assert r.returncode == 0, r.stderr
    assert (out / "forward.constants.safetensors").exists()
    r = _cli("verify", big, out)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


# ---- -o '' and print -o X.fxir.gz -------------------------------------------------


@pytest.mark.parametrize("args", [
    ["print", TESTDATA / "sin_mm.json.gz", "-o", ""],
    ["partition", TESTDATA / "sin_mm.json.gz", "-o", ""],
    ["pareto", TESTDATA / "sin_mm.json.gz", "--points", "2", "-o", ""],
    ["pareto", TESTDATA / "sin_mm.json.gz", "--points", "2", "--plot", ""],
])
def test_empty_output_path_is_bad_usage(tmp_path, args):
    """`-o ''` read as no -o at all: exit 0, the output on stdout or nowhere."""
    r = _cli(*args, cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("fxremat: error: ") and "takes a path, not an empty string" in r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_print_to_fxir_gz_writes_gzipped_text_that_reads_back(tmp_path):
    src = TESTDATA / "simple_mlp.json.gz"
    text = _cli("print", src)
    assert text.returncode == 0, text.stderr
    out = tmp_path / "g.fxir.gz"
    r = _cli("print", src, "-o", out)
    assert r.returncode == 0, r.stderr
    assert gzip.decompress(out.read_bytes()).decode() == text.stdout
    again = _cli("print", out)
    assert again.returncode == 0 and again.stdout == text.stdout, again.stderr


@pytest.mark.parametrize("flags, message", [
    (["--memory-budget", "1GiB", "--config", "activation_memory_budget=0.0"],
     "two budgets given: memory_budget_bytes=1073741824 and activation_memory_budget=0"),
    (["--memory-budget", "1GiB", "--config", "memory_budget_bytes=1"],
     "two byte budgets given: --memory-budget 1GiB and --config memory_budget_bytes=1"),
    (["--config", "memory_budget_bytes=4096", "--config", "activation_memory_budget=0.5"], "two budgets given"),
])
def test_two_budgets_are_refused(flags, message, tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([CLI, "partition", str(REPO / "testdata" / "simple_mlp.json.gz"), "-o", str(out), *flags],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert not out.exists()


def test_verify_names_a_partition_of_another_graph(tmp_path):
    """verify given the partition directory of another graph says so up front, instead
    of failing inside some op of the run."""
    out = tmp_path / "llama"
    r = subprocess.run([CLI, "partition", str(TESTDATA / "llama_2l.json.gz"), "-o", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CLI, "verify", str(TESTDATA / "gpt2_2l.json.gz"), str(out)], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the partition is not of this joint graph" in r.stderr, r.stderr


# ---- found by a docs-and-contract audit ---------------------------------------------


def test_pareto_never_writes_over_its_input_graph(tmp_path):
    """`pareto G -o G` replaced the graph with the front and exited 0."""
    graph = tmp_path / "g.json.gz"
    graph.write_bytes((TESTDATA / "sin_mm.json.gz").read_bytes())
    before = graph.read_bytes()
    for flag in ("-o", "--plot"):
        r = _cli("pareto", graph, "--points", "2", flag, graph)
        assert r.returncode == 2, r.stderr
        assert "is the input graph; nothing was written" in r.stderr
        assert graph.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json.gz"]


def test_pareto_gzips_a_gz_destination(tmp_path):
    """The front went through a staging name without the .gz: plain JSON in a .gz file."""
    front = tmp_path / "front.json.gz"
    r = _cli("pareto", TESTDATA / "sin_mm.json.gz", "--points", "2", "-o", front)
    assert r.returncode == 0, r.stderr
    assert json.loads(gzip.decompress(front.read_bytes()))["format"] == "fxremat.front"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["front.json.gz"]


@pytest.mark.parametrize("flag,value,message", [
    ("--seed", "-1", "--seed: expected a whole number"),
    ("--seed", "99999999999999999999", "--seed: expected a whole number"),
    ("--seed", "1.5", "--seed: expected a whole number"),
    ("--tolerance-scale", "0", "--tolerance-scale: expected a finite number above 0"),
    ("--tolerance-scale", "-1", "--tolerance-scale: expected a finite number above 0"),
    ("--tolerance-scale", "nan", "--tolerance-scale: expected a finite number above 0"),
    ("--tolerance-scale", "inf", "--tolerance-scale: expected a finite number above 0"),
])
def test_verify_refuses_seeds_and_tolerance_scales_out_of_range(tmp_path, flag, value, message):
    """`--tolerance-scale inf` passed a tampered backward; `--seed -1` wrapped around."""
    graph = TESTDATA / "sin_mm.json.gz"
    assert _cli("partition", graph, "-o", tmp_path / "out").returncode == 0
    r = _cli("verify", graph, tmp_path / "out", flag, value)
    assert r.returncode == 2, r.stdout + r.stderr
    assert message in r.stderr


def test_node_named_a_python_keyword_is_refused_by_every_reader(tmp_path):
    """A node named `def` was read by the CLI and written into graphs that
    fxremat.load then refused."""
    doc = json.load(gzip.open(TESTDATA / "sin_mm.json.gz"))
    old = doc["nodes"][-2]["name"]
    doc["nodes"][-2]["name"] = "def"
    text = json.dumps(doc).replace(f'{{"node": "{old}"}}', '{"node": "def"}')
    graph = tmp_path / "g.json"
    graph.write_text(text)
    r = _cli("inspect", graph)
    assert r.returncode == 2
    assert "node name 'def' is a Python keyword" in r.stderr
    assert f"/nodes/{len(doc['nodes']) - 2}/name" in r.stderr
    with pytest.raises(fxremat.FormatError):
        fxremat.load(str(graph))


def test_partition_into_an_existing_directory_whose_parent_is_read_only():
    """The staging directory was made in the output directory's parent: `-o /tmp` as an
    ordinary user failed with 'cannot create the output directory'."""
    import shutil
    import tempfile
    # Not pytest's tmp_path: its parents are private to this user, and the CLI may run
    # as another one below.
    tmp_path = Path(tempfile.mkdtemp(prefix="fxremat-ro-"))
    parent = tmp_path / "ro"
    out = parent / "rw"
    out.mkdir(parents=True)
    graph = tmp_path / "g.json.gz"
    graph.write_bytes((TESTDATA / "sin_mm.json.gz").read_bytes())
    for p in (tmp_path, graph):
        p.chmod(0o755 if p.is_dir() else 0o644)
    out.chmod(0o777)
    parent.chmod(0o555)
    try:
        args = [CLI, "partition", str(graph), "-o", str(out)]
        if os.geteuid() == 0:  # root writes anywhere: run it as nobody, where there is one
            if shutil.which("setpriv") is None:
                pytest.skip("running as root without setpriv to drop privileges")
            args = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *args]
        r = subprocess.run(args, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert sorted(p.name for p in out.iterdir()) == ["backward.json", "forward.json", "signature.json"]
        assert sorted(p.name for p in parent.iterdir()) == ["rw"]
    finally:
        parent.chmod(0o755)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_malformed_signature_names_the_entry(tmp_path):
    """`verify` said only 'type must be number, but is string': which entry?"""
    graph = TESTDATA / "sin_mm.json.gz"
    out = tmp_path / "out"
    assert _cli("partition", graph, "-o", out).returncode == 0
    sig = json.loads((out / "signature.json").read_text())
    sig["saved"][0]["bytes"] = "many"
    (out / "signature.json").write_text(json.dumps(sig))
    r = _cli("verify", graph, out)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "malformed signature at /saved/0: type must be number, but is string" in r.stderr
    assert "signature.json" in r.stderr


def test_a_truncated_policy_file_names_line_and_column(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text('{"policy":\n  "dots_saveable",,}')
    r = _cli("residuals", TESTDATA / "sin_mm.json.gz", "--policy-file", policy)
    assert r.returncode == 2
    assert "malformed policy JSON: parse error at line 2, column" in r.stderr


@pytest.mark.parametrize("value", ["abc", "-1", "1e6", "123456789012345678901234"])
def test_a_malformed_input_limit_in_the_environment_is_bad_input(value):
    """FXREMAT_MAX_INPUT_BYTES=abc fell back to the default limit without a word."""
    env = dict(os.environ, FXREMAT_MAX_INPUT_BYTES=value)
    r = subprocess.run([CLI, "inspect", str(TESTDATA / "sin_mm.json.gz")], capture_output=True, text=True, env=env)
    assert r.returncode == 2, r.stdout
    assert f"FXREMAT_MAX_INPUT_BYTES: expected a whole number of bytes, got '{value}'" in r.stderr
    env["FXREMAT_MAX_INPUT_BYTES"] = "100000000"
    assert subprocess.run([CLI, "inspect", str(TESTDATA / "sin_mm.json.gz")], capture_output=True,
                          env=env).returncode == 0


def test_pareto_offers_no_byte_budget():
    """The front spans every budget: pareto's help does not list --memory-budget, and
    the flag, like a byte budget through --config, is refused by name (exit 2)."""
    graph = TESTDATA / "fg_chain.json.gz"
    assert "--memory-budget" not in _cli("pareto", "--help").stdout
    assert "--memory-budget" in _cli("partition", "--help").stdout
    r = _cli("pareto", graph, "--memory-budget", "1KB")
    assert r.returncode == 2 and "memory_budget_bytes (1000) does not apply" in r.stderr, r.stderr
    r = _cli("pareto", graph, "--config", "memory_budget_bytes=1000")
    assert r.returncode == 2 and "memory_budget_bytes (1000) does not apply" in r.stderr, r.stderr


@pytest.mark.parametrize("value", [18446744073709551617, -9223372036854775809, 10**30])
def test_an_integer_beyond_64_bits_is_refused_by_both_readers(value, tmp_path):
    """simdjson refuses such a literal and the CLI fell back to nlohmann, which read it as
    a double: a view's size became a float in the CLI while Python refused the file."""
    doc = json.loads(gzip.decompress((TESTDATA / "fg_chain.json.gz").read_bytes()))
    view = next(n for n in doc["nodes"] if n["name"] == "view")
    view["args"][1] = [7, value]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    r = _cli("inspect", path)
    assert r.returncode == 2 and f"the integer {value} is outside int64" in r.stderr and "line 1, column" in r.stderr, \
        r.stdout + r.stderr
    with pytest.raises(fxremat.FormatError, match="outside int64"):
        fxremat.load(path)


def _fg_chain_text() -> bytes:
    return gzip.decompress((TESTDATA / "fg_chain.json.gz").read_bytes())


def test_a_byte_order_mark_is_refused_by_both_readers(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + _fg_chain_text())
    r = _cli("inspect", path)
    assert r.returncode == 2 and "byte-order mark" in r.stderr and "line 1, column 1" in r.stderr, r.stdout + r.stderr
    with pytest.raises(fxremat.FormatError, match="BOM"):
        fxremat.load(path)


@pytest.mark.parametrize("tail,ok", [(b"garbage\n", False), (b"\x00" * 64, True), ("member", True)])
def test_bytes_after_the_gzip_stream_are_judged_as_python_does(tail, ok, tmp_path):
    """zlib's gzread ignored bytes after the last member, which Python's gzip refuses;
    zero padding and a second member both read."""
    text = _fg_chain_text()
    if tail == "member":
        data = gzip.compress(text[:3000]) + gzip.compress(text[3000:])
    else:
        data = gzip.compress(text) + tail
    path = tmp_path / "g.json.gz"
    path.write_bytes(data)
    r = _cli("inspect", path)
    if ok:
        assert r.returncode == 0 and "graph fg_chain" in r.stdout, r.stderr
        assert len(fxremat.load(path).graph.nodes) == len(fxremat.load(TESTDATA / "fg_chain.json.gz").graph.nodes)
    else:
        assert r.returncode == 2 and "after the gzip stream" in r.stderr, r.stdout + r.stderr
        with pytest.raises(fxremat.FormatError, match="gzip"):
            fxremat.load(path)


@pytest.mark.parametrize("value,bytes_", [("2MiB", 2 << 20), ("1.5KB", 1500), ("4096", 4096), (4096, 4096)])
def test_memory_budget_bytes_takes_the_cli_units_everywhere(value, bytes_):
    """--config memory_budget_bytes= and the Python option parse as --memory-budget does
    ("1GB" was refused as 'not a non-negative number of bytes' there)."""
    graph = TESTDATA / "budget" / "llama_4l.json.gz"  # its smallest peak is above 2 MiB
    r = _cli("partition", graph, "-o", "/dev/null/x", "--config", f"memory_budget_bytes={value}")
    assert r.returncode == 2 and f"memory budget {bytes_} B is below the smallest peak" in r.stderr, r.stderr
    with pytest.raises(ValueError, match=f"memory budget {bytes_} B is below the smallest peak"):
        fxremat.partition(fxremat.load(graph), options={"memory_budget_bytes": value})


def test_memory_budget_bytes_beyond_int64_is_named():
    with pytest.raises(ValueError, match=r"option memory_budget_bytes 1180591620717411303424 is more than 2\^63 - 1"):
        fxremat.partition_fn(options={"memory_budget_bytes": 2**70})
