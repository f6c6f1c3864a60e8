"""Complex scalar arguments (format 1.3, ``{"complex": [re, im]}``): torch.polar's
backward multiplies by 1j, which the format could not hold before."""

from __future__ import annotations

import gzip
import json
import os
import subprocess

import pytest
import torch

import fxremat


def _polar_loss(r, theta):
    return torch.view_as_real(torch.polar(r, theta)).pow(2).sum() + torch.view_as_real(
        torch.polar(r, theta) * torch.polar(r, theta)).sum()


def _inputs():
    torch.manual_seed(0)
    return torch.rand(6, requires_grad=True), torch.randn(6, requires_grad=True)


def _complex_args(doc: dict) -> list:
    found = []

    def walk(a):
        if isinstance(a, dict) and "complex" in a:
            found.append(a["complex"])
        elif isinstance(a, list):
            for x in a:
                walk(x)

    for node in doc["nodes"]:
        walk(node.get("args", []))
        walk(list((node.get("kwargs") or {}).values()))
    return found


def test_polar_joint_graph_round_trips_with_its_complex_constant(tmp_path):
    r, theta = _inputs()
    joint = fxremat.export_joint(_polar_loss, r, theta)
    doc = fxremat.to_json(joint.gm, num_fwd_outputs=joint.num_fwd_outputs)
    assert _complex_args(doc), "expected a complex scalar in polar's joint graph"
    again = fxremat.to_json(fxremat.from_json(json.loads(json.dumps(doc))), num_fwd_outputs=joint.num_fwd_outputs)
    assert _complex_args(again) == _complex_args(doc)
    path = tmp_path / "polar.json"
    fxremat.save(joint.gm, path)
    part = fxremat.partition(path)
    got_fw, got_bw = part.run([r.detach(), theta.detach()], [torch.tensor(1.0)])
    loss = _polar_loss(r, theta)
    want = torch.autograd.grad(loss, (r, theta))
    torch.testing.assert_close(got_fw[0], loss.detach())
    for g, w in zip(got_bw, want):
        torch.testing.assert_close(g, w)


def test_cli_prints_and_verifies_a_complex_constant(repo_root, tmp_path):
    r, theta = _inputs()
    joint = fxremat.export_joint(_polar_loss, r, theta)
    path = tmp_path / "polar.json.gz"
    fxremat.save(joint.gm, path)
    cli = repo_root / "build" / "fxremat"
    printed = subprocess.run([str(cli), "print", str(path)], capture_output=True, text=True, check=True).stdout
    assert "complex(" in printed
    out = tmp_path / "out"
    subprocess.run([str(cli), "partition", str(path), "-o", str(out)], capture_output=True, text=True, check=True)
    verified = subprocess.run([str(cli), "verify", str(path), str(out)], capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.usefixtures("fresh_compile_state")
@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_polar_trains_under_the_backend(compiler):
    r, theta = _inputs()
    out = torch.compile(_polar_loss, backend="fxremat", options={"compiler": compiler})(r, theta)
    got = torch.autograd.grad(out, (r, theta))
    r2, t2 = r.detach().requires_grad_(), theta.detach().requires_grad_()
    want_out = _polar_loss(r2, t2)
    want = torch.autograd.grad(want_out, (r2, t2))
    torch.testing.assert_close(out, want_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert fxremat.partition_records()[-1].fallback is None


def test_every_torch_dtype_is_in_the_format():
    """The format's dtype table holds every dtype torch has (op_db's chalf makes
    complex32 values; the unsigned and float8 variants appear in quantized graphs)."""
    from fxremat._partition import _extension

    from torch.fx.graph import dtype_abbrs

    table = {name: (short, size) for name, short, size, _st in _extension().dtypes()}
    # Every dtype object torch has (a hand-picked list missed qint8, which a
    # quantize_per_tensor on a detached activation puts into a joint graph).
    every = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert len(every) >= 40
    wanted = {str(d).removeprefix("torch.") for d in every}
    assert wanted <= table.keys(), wanted - table.keys()
    for d in every:
        short, size = table[str(d).removeprefix("torch.")]
        assert size == d.itemsize, d
        if d in dtype_abbrs:
            assert short == dtype_abbrs[d], d  # as FX prints it
    assert len({short for short, _ in table.values()}) == len(table)  # the text form reads them back


def test_a_quantized_activation_trains_and_exports(tmp_path):
    """A quantize/dequantize round trip on a detached activation (quantization error
    measured in the loss): the joint graph holds qint8 values. It partitions in process
    like eager, and its file goes through the CLI."""
    import warnings

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)

        def forward(self, x):
            h = torch.tanh(self.lin(x))
            q = torch.quantize_per_tensor(h.detach(), 0.05, 0, torch.qint8).dequantize()
            return (h + 0.1 * q).pow(2).mean()

    warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*deprecated")
    torch.manual_seed(0)
    m, x = M(), torch.randn(4, 16)
    want = m(x)
    want_grads = torch.autograd.grad(want, list(m.parameters()))
    torch._dynamo.reset()
    got = torch.compile(m, backend="fxremat", options={"compiler": "aot_eager"})(x)
    got_grads = torch.autograd.grad(got, list(m.parameters()))
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w)
    assert fxremat.partition_records()[-1].fallback is None
    # The exported joint graph names qint8, and the CLI partitions it.
    path = tmp_path / "q.json.gz"
    fxremat.export_joint(m, x).save(path)
    assert '"qint8"' in gzip.decompress(path.read_bytes()).decode()
    cli = os.path.join(os.path.dirname(__file__), "..", "..", "build", "fxremat")
    for args in (["partition", str(path), "-o", str(tmp_path / "out")], ["print", str(path), "-o", str(tmp_path / "q.fxir")],
                 ["inspect", str(tmp_path / "q.fxir")]):
        done = subprocess.run([cli, *args], capture_output=True, text=True)
        assert done.returncode == 0, (args, done.stderr)
    assert "torch.qint8)" in (tmp_path / "q.fxir").read_text()  # the argument in the text form, read back above


def test_chalf_trains_through_partition_fn():
    from torch._functorch.aot_autograd import aot_function

    def nop(g, _):
        return g

    def f(x):
        return x.chalf().cfloat().abs() * x

    x = torch.randn(5, requires_grad=True)
    got = aot_function(f, nop, nop, partition_fn=fxremat.partition_fn())(x)
    got.sum().backward()
    x2 = x.detach().requires_grad_()
    want = f(x2)
    want.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x.grad, x2.grad)
