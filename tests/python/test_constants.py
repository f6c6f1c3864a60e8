"""Tensor constants (issue 9): ``get_attr`` + ``lift_fresh_copy`` graphs such as a
T5-style shift-right (``x[..., 0] = start_id``) or ``torch.tensor([...])`` in
``forward``. In process they are carried by reference; in the format their data is
inline (base64) or, over 64 KiB, in a safetensors sidecar (docs/format.md)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

import fxremat
from fxremat._format import from_json, sidecar_name, to_json
from fxremat.testing import programs

from test_mutations import POLICIES, cli_partition_and_verify


def _eager(program):
    m = program.fn
    ref = type(m)()
    ref.load_state_dict(m.state_dict())
    ref(*program.args).backward()
    return ref


def _compile_step(options):
    program = programs.build("t5_shift_right")
    ref = _eager(program)
    m = programs.build("t5_shift_right").fn
    torch._dynamo.reset()
    torch.compile(m, backend="fxremat", options=options)(*program.args).backward()
    for (name, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda s: f"{name}: {s}")


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_backend_every_policy(kind, fresh_compile_state):
    """No fallback, no error: the constants travel by reference, every policy applies."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a fallback would warn
        _compile_step({"compiler": "aot_eager", "policy": POLICIES[kind]})


@pytest.mark.parametrize("partitioner", ["mincut", "default"])
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_backend_partitioners(partitioner, compiler, fresh_compile_state):
    _compile_step({"compiler": compiler, "partitioner": partitioner})


def test_backend_inductor_with_policy(fresh_compile_state):
    _compile_step({"compiler": "inductor", "policy": P_nothing()})


def P_nothing():
    return POLICIES["nothing_saveable"]


def test_partition_fn_keeps_constants_by_reference():
    """The document handed to C++ holds the constants' facts, not their bytes; the
    emitted modules read the joint module's own tensors."""
    program = programs.build("t5_shift_right")
    joint = fxremat.export_joint(program.fn, *program.args)
    doc = to_json(joint.gm, kind="joint", num_fwd_outputs=joint.num_fwd_outputs, constants="reference")
    assert set(doc["constants"]) == {"_tensor_constant0", "_tensor_constant1"}
    assert all(c.get("by_reference") is True and "data" not in c for c in doc["constants"].values())
    fw, bw = fxremat.partition_fn(policy=P_nothing())(joint.gm, None, num_fwd_outputs=joint.num_fwd_outputs)
    reads = {n.target for g in (fw, bw) for n in g.graph.nodes if n.op == "get_attr"}
    assert reads == {"_tensor_constant0", "_tensor_constant1"}
    for g in (fw, bw):
        for n in g.graph.nodes:
            if n.op == "get_attr":
                assert getattr(g, n.target) is getattr(joint.gm, n.target)


def test_format_round_trip_inline(tmp_path):
    program = programs.build("t5_shift_right")
    joint = fxremat.export_joint(program.fn, *program.args)
    doc = joint.to_json()
    assert doc["version"] == [1, 7]
    assert doc["constants"]["_tensor_constant0"]["data"] == "AgAAAAAAAAA="  # int64 2, the start id
    gm = from_json(json.loads(json.dumps(doc)))
    assert torch.equal(gm._tensor_constant1, joint.gm._tensor_constant1)
    path = tmp_path / "t5.json.gz"
    joint.save(path)
    assert not (tmp_path / sidecar_name(path)).exists()  # small: inline


VALUES = [float((i * 37) % 101) / 101 for i in range(8400)]  # 67,200 bytes as float64: over 64 KiB


def big_constant(x):
    scale = torch.tensor(VALUES, dtype=torch.float64).reshape(40, 210)
    return (torch.sin(x) * scale).sum()


@pytest.fixture(scope="module")
def big_joint():
    return fxremat.export_joint(big_constant, torch.randn(40, 210, dtype=torch.float64, requires_grad=True),
                                name="big_constant")


def test_large_constant_goes_to_a_safetensors_sidecar(big_joint, tmp_path, repo_root):
    from safetensors.torch import load_file

    path = tmp_path / "big.json.gz"
    big_joint.save(path)
    sidecar = tmp_path / "big.constants.safetensors"
    assert sidecar.exists()
    doc = big_joint.to_json()
    (entry,) = doc["constants"].values()
    assert "data" in entry  # to_json inlines; save moves it
    stored = json.loads(__import__("gzip").decompress(path.read_bytes()))
    (stored_entry,) = stored["constants"].values()
    assert stored_entry["file"] == "big.constants.safetensors" and "data" not in stored_entry
    # the ecosystem's reader agrees, and so does ours
    (key,) = stored["constants"]
    want = getattr(big_joint.gm, key)
    assert want.numel() * want.element_size() > 64 * 1024
    assert torch.equal(load_file(str(sidecar))[key], want)
    assert torch.equal(getattr(fxremat.load(path), key), want)
    # the C++ reader and writer: partition, verify, and the same sidecar bytes out
    cli = repo_root / "build" / "fxremat"
    out = tmp_path / "out"
    r = subprocess.run([str(cli), "partition", str(path), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    produced = sorted(p.name for p in out.iterdir())
    assert "forward.constants.safetensors" in produced
    assert (out / "forward.constants.safetensors").read_bytes() == sidecar.read_bytes()
    r = subprocess.run([str(cli), "verify", str(path), str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr


def test_missing_sidecar_is_a_located_error(big_joint, tmp_path, repo_root):
    path = tmp_path / "big.json.gz"
    big_joint.save(path)
    (tmp_path / "big.constants.safetensors").unlink()
    with pytest.raises(fxremat.FormatError, match=r"big.constants.safetensors"):
        fxremat.load(path)
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 2 and "big.constants.safetensors" in r.stderr, r.stderr


def test_partition_and_pareto_take_a_path_with_a_sidecar(big_joint, tmp_path):
    """fxremat.partition(path) and fxremat.pareto(path) read the sidecar beside the
    file, as the CLI and fxremat.load do, and partition as from the loaded graph."""
    path = tmp_path / "big.json.gz"
    big_joint.save(path)
    assert (tmp_path / "big.constants.safetensors").exists()
    by_path = fxremat.partition(path)
    loaded = fxremat.partition(fxremat.load(path))
    assert by_path.signature == loaded.signature
    x = torch.randn(40, 210, dtype=torch.float64)
    (want,) = big_constant(x).reshape(1)
    fw_out = by_path.forward(x)
    torch.testing.assert_close(fw_out[0], want)
    assert fxremat.pareto(path, points=3) == fxremat.pareto(fxremat.load(path), points=3)
    # A file the reader refuses is named, with the class fxremat.load raises.
    (tmp_path / "big.constants.safetensors").unlink()
    for call in (fxremat.load, fxremat.partition, lambda p: fxremat.pareto(p, points=3)):
        with pytest.raises(fxremat.FormatError, match=rf"{path}: .*big.constants.safetensors"):
            call(path)


def test_sidecar_of_another_shape_is_a_located_error(big_joint, tmp_path, repo_root):
    """The sidecar's header must give the constant's shape, not only its dtype and
    byte count (docs/format.md): the same bytes stored as 210 x 40 for a constant of
    8400 values are refused by the C++ reader and by fxremat.load."""
    from safetensors.torch import load_file, save_file

    path = tmp_path / "big.json.gz"
    big_joint.save(path)
    sidecar = tmp_path / "big.constants.safetensors"
    tensors = load_file(str(sidecar))
    save_file({k: v.reshape(210, 40).contiguous() for k, v in tensors.items()}, str(sidecar))
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "inspect", str(path)], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "/file: the sidecar's shape [210, 40] is not the tensor's [8400]" in r.stderr, r.stderr
    with pytest.raises(fxremat.FormatError, match=r"shape"):
        fxremat.load(path)


def other_big_constant(x):  # big_constant's shape and attribute name, other numbers
    scale = torch.tensor([v + 1.0 for v in VALUES], dtype=torch.float64).reshape(40, 210)
    return (torch.sin(x) * scale).sum()


def test_sidecar_overwritten_by_a_sibling_graph_is_refused(big_joint, tmp_path, repo_root):
    """big.json and big.json.gz share big.constants.safetensors: a second graph saved
    under the other extension overwrote the first's sidecar, and the first then loaded
    the second's numbers without a word (same dtype, shape and key). The documents carry
    each sidecar tensor's CRC-32 (Note [Sidecar checksums]); both readers compare it."""
    import zlib

    first = tmp_path / "big.json"
    big_joint.save(first)
    stored = json.loads(first.read_text())
    (key, entry), = stored["constants"].items()
    assert entry["crc32"] == zlib.crc32(getattr(big_joint.gm, key).numpy().tobytes())
    other = fxremat.export_joint(other_big_constant, torch.randn(40, 210, dtype=torch.float64, requires_grad=True))
    second = tmp_path / "big.json.gz"
    other.save(second)  # overwrites big.constants.safetensors
    assert torch.equal(getattr(fxremat.load(second), key), getattr(other.gm, key))
    message = (f"the sidecar 'big.constants.safetensors' holds other data for '{key}' than this document was "
               "written with")
    with pytest.raises(fxremat.FormatError, match=rf"crc32: {message}"):
        fxremat.load(first)
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "inspect", str(first)], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"/constants/{key}/crc32: {message} (CRC-32 " in r.stderr, r.stderr
    # The C++ writer writes the same checksum (partition -o: the forward's sidecar).
    out = tmp_path / "out"
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "partition", str(second), "-o", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    forward = json.loads((out / "forward.json").read_text())
    assert forward["constants"][key]["crc32"] == zlib.crc32(getattr(other.gm, key).numpy().tobytes())
    # An old document without the key still loads (1.6 had none); a malformed one is refused.
    del entry["crc32"]
    first.write_text(json.dumps(stored))
    assert torch.equal(getattr(fxremat.load(first), key), getattr(other.gm, key))
    entry["crc32"] = -1
    first.write_text(json.dumps(stored))
    with pytest.raises(fxremat.FormatError, match=r"crc32: expected a CRC-32"):
        fxremat.load(first)
    r = subprocess.run([str(repo_root / "build" / "fxremat"), "inspect", str(first)], capture_output=True, text=True)
    assert r.returncode == 2 and "crc32: expected a CRC-32, an integer in [0, 2^32)" in r.stderr, r.stderr


def test_non_tensor_constant_only_by_reference():
    import torch.fx as fx

    class Holder:
        pass

    g = fx.Graph()
    x = g.placeholder("x")
    g.get_attr("obj")
    g.output((x,))
    root = torch.nn.Module()
    root.obj = Holder()
    gm = fx.GraphModule(root, g)
    x_node = next(iter(gm.graph.nodes))
    x_node.meta["val"] = torch.empty(2)
    doc = to_json(gm, constants="reference")
    assert doc["constants"]["obj"] == {"opaque": f"{Holder.__module__}.{Holder.__qualname__}"}
    with pytest.raises(fxremat.UnsupportedGraphError, match="tensor constants only"):
        to_json(gm)


# ---- through the CLI, every policy, and real inputs ----------------------------------


@pytest.mark.parametrize("kind", sorted(POLICIES))
def test_cli_partition_and_verify_every_policy(kind, repo_root, tmp_path):
    cli_partition_and_verify(repo_root, repo_root / "testdata" / "t5_shift_right.json.gz", POLICIES[kind], tmp_path)


def test_verify_with_real_inputs(repo_root, tmp_path):
    """--inputs feeds the program's real labels (with the -100 ignore index the random
    draw leaves out); a wrong key or shape is bad input (exit 2)."""
    from safetensors.torch import save_file

    cli = repo_root / "build" / "fxremat"
    graph = repo_root / "testdata" / "t5_shift_right.json.gz"
    out = tmp_path / "out"
    subprocess.run([str(cli), "partition", str(graph), "-o", str(out), "--policy", "nothing_saveable"], check=True,
                   capture_output=True)
    labels = programs.build("t5_shift_right").args[0]
    assert (labels == -100).any()
    good = tmp_path / "inputs.safetensors"
    save_file({"args[0]": labels.contiguous()}, str(good))
    pt = tmp_path / "inputs.pt"
    torch.save({"primals_6": labels, "tangents_1": torch.tensor(1.0)}, pt)
    for f, n in ((good, 1), (pt, 2)):
        r = subprocess.run([str(cli), "verify", str(graph), str(out), "--inputs", str(f)], capture_output=True,
                           text=True)
        assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
        assert f"inputs: {n} from {f}" in r.stdout
    bad_key = tmp_path / "bad_key.safetensors"
    save_file({"args[1]": labels.contiguous()}, str(bad_key))
    r = subprocess.run([str(cli), "verify", str(graph), str(out), "--inputs", str(bad_key)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "'args[1]' names no input" in r.stderr, r.stderr
    bad_shape = tmp_path / "bad_shape.safetensors"
    save_file({"args[0]": labels[:, :3].contiguous()}, str(bad_shape))
    r = subprocess.run([str(cli), "verify", str(graph), str(out), "--inputs", str(bad_shape)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "input 'primals_6' is int64[2, 6]" in r.stderr, r.stderr


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_backend_dump_dir_writes_the_constants(compiler, fresh_compile_state, tmp_path):
    """dump_dir on a graph holding a real tensor constant (most transformers models
    make one in forward): the partition_fn runs under AOTAutograd's fake mode, where
    reading the constant's bytes failed ("Please convert all Tensors to FakeTensors
    first"; a helper's stress run). The dumped graphs hold the constant's data."""
    _compile_step({"compiler": compiler, "dump_dir": str(tmp_path)})
    dumps = [p for p in tmp_path.rglob("forward.json.gz")]
    assert dumps
    constants = {}
    for path in dumps:
        gm = fxremat.load(path)
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                constants[n.target] = getattr(gm, n.target)
    assert constants and all(isinstance(t, torch.Tensor) and not t.is_meta for t in constants.values()), constants


def test_capturing_backend_copies_real_constants():
    """fxremat.testing.verify.capturing_backend deep-copies the joint graph outside the
    fake mode: copying a real constant inside it failed ("Attempted to set the storage
    of a tensor on device "meta" to a storage on different device "cpu"")."""
    from fxremat.testing.verify import capturing_backend

    program = programs.build("t5_shift_right")
    joints, backend, _ = capturing_backend()
    torch._dynamo.reset()
    torch.compile(program.fn, backend=backend)(*program.args).backward()
    torch._dynamo.reset()
    (joint, _), = joints
    assert any(n.op == "get_attr" for n in joint.graph.nodes)
