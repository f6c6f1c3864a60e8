"""Inputs that are small for what they make the CLI hold: each case runs the CLI
under an address-space limit far below what it took before its fix (a memory bound,
not a timing one) and checks the partition it writes."""

from __future__ import annotations

import base64
import gzip
import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "bad_inputs"))
import make_large  # noqa: E402

# Well above what each case needs now (under 100 MB resident, a few hundred MB of
# address space with the binary, its libraries and thread stacks), well below what
# each took before its fix (gigabytes).
ADDRESS_SPACE_LIMIT = 1 << 30


def _run_limited(args):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    return subprocess.run([str(REPO / "build" / "fxremat"), *args], capture_output=True, text=True,
                          preexec_fn=limit)


def test_a_policy_of_many_names_is_not_copied_into_every_value(tmp_path):
    # 15,000 names applied to a 20,000-node chain: each value's demand held the
    # policy's text (about 130 KB), 3.9 GB in all; now the text is built only for
    # an error message.
    graph = tmp_path / "chain.json"
    make_large.write_chain_json(graph, 20000)
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"policy": "save_only_these_names", "names": [f"name_{i}" for i in range(15000)]}))
    out = tmp_path / "out"
    r = _run_limited(["partition", str(graph), "-o", str(out), "--policy-file", str(policy)])
    assert r.returncode == 0, r.stderr
    # The same partition as a policy of one name (none of them names a value).
    small = tmp_path / "small"
    r = subprocess.run([str(REPO / "build" / "fxremat"), "partition", str(graph), "-o", str(small),
                        "--policy", "save_only_these_names:name_0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for name in ("forward.json", "backward.json", "signature.json"):
        assert (out / name).read_bytes() == (small / name).read_bytes(), name


def _write_safetensors(path, entries, data):
    header = json.dumps(entries).encode()
    header += b" " * ((8 - len(header) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_sidecar_entries_over_one_range_are_not_each_copied(tmp_path):
    # 1,500 entries over the same 2 MB (a valid safetensors file, whose writer
    # shares one storage): each entry was copied out of the file, 2.95 GB; now a
    # constant's bytes are copied from the file once, when the graph names it.
    doc = json.loads((REPO / "tests" / "bad_inputs" / "constant_missing_sidecar.json").read_text())
    doc["constants"]["_tensor_constant0"]["file"] = "g.constants.safetensors"
    (tmp_path / "g.json").write_text(json.dumps(doc))
    size = 2_000_000
    entries = {f"t{i}": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]} for i in range(1500)}
    values = struct.pack("<2f", 1.5, -2.0)
    entries["_tensor_constant0"] = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    _write_safetensors(tmp_path / "g.constants.safetensors", entries, values + bytes(size - 8))
    out = tmp_path / "out"
    r = _run_limited(["partition", str(tmp_path / "g.json"), "-o", str(out)])
    assert r.returncode == 0, r.stderr
    # The constant's two floats, written inline in the graph that reads it.
    constants = {}
    for name in ("forward.json", "backward.json"):
        constants.update(json.loads((out / name).read_text()).get("constants", {}))
    assert [base64.b64decode(c["data"]) for c in constants.values()] == [values]


def _gzip_bomb(path, spaces_mib, graph_text: bytes):
    # Gzip members concatenated (one file, as gzip and zlib read it): `spaces_mib`
    # MiB of spaces, which JSON allows before a document, then a real graph.
    member = gzip.compress(b" " * (1 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(spaces_mib):
            f.write(member)
        f.write(gzip.compress(graph_text))


def test_a_gzip_file_that_inflates_past_the_limit_is_refused_before_it_is_held(tmp_path, monkeypatch):
    # 1.5 GiB of spaces in a 2.5 MB file. Before Note [Input size limit] the CLI
    # inflated all of it and mapped as much again for the parser (3 GB of spaces:
    # 10.5 GB resident, 70 s; more is killed for memory); now it stops at the limit.
    graph_text = gzip.decompress((REPO / "testdata" / "sin_mm.json.gz").read_bytes())
    bomb = tmp_path / "bomb.json.gz"
    _gzip_bomb(bomb, 1536, graph_text)
    limit = 64 << 20
    out = tmp_path / "out"

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    env = {**os.environ, "FXREMAT_MAX_INPUT_BYTES": str(limit)}
    for command in (["inspect", str(bomb)], ["partition", str(bomb), "-o", str(out)]):
        r = subprocess.run([str(REPO / "build" / "fxremat"), *command], capture_output=True, text=True,
                           preexec_fn=limited, env=env)
        assert r.returncode == 2, (command, r.stderr)
        assert f"bomb.json.gz: the file inflates to more than {limit} bytes" in r.stderr, r.stderr
        assert "FXREMAT_MAX_INPUT_BYTES" in r.stderr
    assert not out.exists()

    # With the limit out of the way, the address-space limit stops the CLI: a
    # clear one line and exit 2, not a crash.
    r = subprocess.run([str(REPO / "build" / "fxremat"), "inspect", str(bomb)], capture_output=True, text=True,
                       preexec_fn=limited, env={**os.environ, "FXREMAT_MAX_INPUT_BYTES": str(1 << 40)})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith(f"fxremat: out of memory: {bomb} needs more memory than this process can allocate"), r.stderr

    # Python's reader keeps the same limit.
    import fxremat
    monkeypatch.setenv("FXREMAT_MAX_INPUT_BYTES", str(limit))
    with pytest.raises(fxremat.FormatError, match=f"inflates to more than {limit} bytes"):
        fxremat.load(bomb)


def test_a_text_at_the_limit_is_read_and_one_byte_over_is_refused(tmp_path, monkeypatch):
    # The limit is on the text, compressed or not: a graph exactly as long as the
    # limit loads, from .json and .json.gz alike, and the CLI and Python agree.
    import fxremat
    text = gzip.decompress((REPO / "testdata" / "sin_mm.json.gz").read_bytes())
    plain, packed = tmp_path / "g.json", tmp_path / "g.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    cli = str(REPO / "build" / "fxremat")
    for limit, ok in ((len(text), True), (len(text) - 1, False)):
        monkeypatch.setenv("FXREMAT_MAX_INPUT_BYTES", str(limit))
        for path, what in ((plain, "the file is"), (packed, "the file inflates to")):
            r = subprocess.run([cli, "inspect", str(path)], capture_output=True, text=True)
            if ok:
                assert r.returncode == 0, r.stderr
                assert len(fxremat.load(path).graph.nodes) > 0
            else:
                assert r.returncode == 2
                assert f"{path.name}: {what} more than {limit} bytes, the limit FXREMAT_MAX_INPUT_BYTES sets" in r.stderr
                with pytest.raises(fxremat.FormatError, match=f"{what} more than {limit} bytes"):
                    fxremat.load(path)
