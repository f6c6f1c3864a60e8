"""A broad correctness check of the torch.compile backend on models none of the unit
tests were written around: each model trains one step under
``torch.compile(backend="fxremat")`` (aot_eager and Inductor, min cut and a budget) and
its loss, every gradient, the buffers and the inputs after the step are compared with
eager PyTorch. Where eager is not the right reference, PyTorch's own backend for the
same compiler is: for models that draw random numbers (bench/corpus_zoo.py's RANDOM:
eager draws them in another order; the reference is PyTorch's min cut, since its budget
partitions replay random draws in the backward), and for a model whose result under that compiler
differs from eager's beyond the tolerance with PyTorch's partitioner too (Inductor's
own numerics: reordered reductions, bf16); such a line says so and by how much eager
differs.

    .venv/bin/python bench/corpus_check.py [--models a,b] [--compilers aot_eager,inductor]
                                           [--device cuda] [--deadline-s S]

``--device cuda`` runs every model on a GPU (the lent machine's check: cuDNN / flash
attention, Philox random numbers and Triton kernels are paths the CPU never takes); a
model whose eager step fails there (a tensor made on the CPU inside the model) is
reported as skipped, not as a failure.

The models: the list below (MODELS) and bench/corpus_zoo.py's (ZOO_MODELS), 182 in all.
Prints one line per model and configuration; exits 1 if any differs or fails.
Not part of ``make test`` (it takes about 40 minutes); tests/python holds the small versions.
"""

from __future__ import annotations

import argparse
import json
import copy
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus_zoo  # noqa: E402


def _hf(name: str):
    import transformers as tf

    torch.manual_seed(0)
    if name == "gpt2":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
        return m, (torch.randint(0, 128, (2, 16)),), lambda m, ids: m(input_ids=ids, labels=ids).loss
    if name == "llama":
        m = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=32))
        return m, (torch.randint(0, 128, (2, 16)),), lambda m, ids: m(input_ids=ids, labels=ids).loss
    if name == "mixtral_moe":
        m = tf.MixtralForCausalLM(tf.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                   num_local_experts=4, num_experts_per_tok=2,
                                                   max_position_embeddings=32))
        return m, (torch.randint(0, 128, (2, 16)),), lambda m, ids: m(input_ids=ids, labels=ids).loss
    if name == "bert":
        m = tf.BertForMaskedLM(tf.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64, max_position_embeddings=32,
                                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        return m, (torch.randint(0, 128, (2, 16)),), lambda m, ids: m(input_ids=ids, labels=ids).loss
    if name == "t5":
        m = tf.T5ForConditionalGeneration(tf.T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                      num_heads=4, dropout_rate=0.0, decoder_start_token_id=0,
                                                                      pad_token_id=0))
        return m, (torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 8))), \
            lambda m, ids, lab: m(input_ids=ids, labels=lab).loss
    if name == "vit":
        m = tf.ViTForImageClassification(tf.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                                      num_hidden_layers=2, num_attention_heads=2,
                                                      intermediate_size=64, num_labels=10,
                                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "resnet_hf":
        m = tf.ResNetForImageClassification(tf.ResNetConfig(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                                                            depths=[1, 1], num_labels=10))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "bart":
        m = tf.BartForConditionalGeneration(tf.BartConfig(vocab_size=64, d_model=32, encoder_layers=1,
                                                          decoder_layers=1, encoder_attention_heads=2,
                                                          decoder_attention_heads=2, encoder_ffn_dim=64,
                                                          decoder_ffn_dim=64, max_position_embeddings=32,
                                                          dropout=0.0, attention_dropout=0.0))
        return m, (torch.randint(0, 64, (2, 12)), torch.randint(0, 64, (2, 8))), \
            lambda m, ids, lab: m(input_ids=ids, labels=lab).loss
    raise KeyError(name)


class _LSTMLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(64, 16)
        self.rnn = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(32, 64)

    def forward(self, ids):
        h, _ = self.rnn(self.emb(ids))
        return torch.nn.functional.cross_entropy(self.out(h).flatten(0, 1), ids.flatten())


class _GRUClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.rnn = torch.nn.GRU(8, 16, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(32, 3)

    def forward(self, x, y):
        h, _ = self.rnn(x)
        return torch.nn.functional.cross_entropy(self.head(h[:, -1]), y)


class _ConvBN(torch.nn.Module):
    """A small CNN with BatchNorm in training mode: the running statistics are buffers
    the step mutates (the drop-in mutation rule)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))

    def forward(self, x, y):
        return torch.nn.functional.cross_entropy(self.body(x), y)


class _InPlaceAndConstants(torch.nn.Module):
    """In-place activations, a tensor constant that is no parameter or buffer, and a
    dropout."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 16)
        self.scale = torch.linspace(0.5, 1.5, 32)  # a plain attribute: a constant in the graph

    def forward(self, x):
        h = self.a(x)
        h.relu_()
        h = h * self.scale
        h.mul_(2.0)
        return self.b(torch.nn.functional.dropout(h, 0.0, training=True)).pow(2).mean()


def _local(name: str):
    torch.manual_seed(0)
    if name == "lstm":
        return _LSTMLM(), (torch.randint(0, 64, (2, 12)),), lambda m, ids: m(ids)
    if name == "gru":
        return _GRUClassifier(), (torch.randn(3, 7, 8), torch.tensor([0, 2, 1])), lambda m, x, y: m(x, y)
    if name == "conv_bn":
        return _ConvBN(), (torch.randn(4, 3, 16, 16), torch.tensor([1, 2, 3, 4])), lambda m, x, y: m(x, y)
    if name == "inplace_constants":
        return _InPlaceAndConstants(), (torch.randn(8, 16),), lambda m, x: m(x)
    raise KeyError(name)


MODELS = ["gpt2", "llama", "mixtral_moe", "bert", "t5", "vit", "resnet_hf", "bart", "lstm", "gru", "conv_bn",
          "inplace_constants", "llama_dynamic"]


ZOO_MODELS = corpus_zoo.MODELS


def build(name: str):
    if name in ZOO_MODELS:
        return corpus_zoo.build(name)
    if name == "llama_dynamic":
        return build("llama")
    if name in ("lstm", "gru", "conv_bn", "inplace_constants"):
        return _local(name)
    return _hf(name)


class LossStep(torch.nn.Module):
    """A corpus model's training loss as one module: what torch.compile compiles."""

    def __init__(self, m: torch.nn.Module, loss_fn):
        super().__init__()
        self.m = m
        self.loss_fn = loss_fn

    def forward(self, *xs):
        return self.loss_fn(self.m, *xs)


def loss_step(name: str, device: torch.device | None = None):
    """``(LossStep in training mode, inputs, loss_fn)`` for a corpus model, ready to
    compile: on `device` (default: where the builder made them), the sequence dimension
    of the ``*_dynamic`` entries' inputs marked dynamic, and Dynamo told to trace
    nn.LSTM / nn.GRU (``allow_rnn``; else it leaves them to eager and no partitioner
    sees them)."""
    import torch._dynamo
    from torch.utils._pytree import tree_map_only

    model, inputs, loss_fn = build(name)
    if device is not None and device.type != "cpu":
        model.to(device)
        # Tensors kept as plain attributes (constants in the graph, not parameters or
        # buffers, which .to() moves) go along too.
        for mod in model.modules():
            for attr, value in list(vars(mod).items()):
                if isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter):
                    setattr(mod, attr, value.to(device))
        inputs = tree_map_only(torch.Tensor, lambda t: t.detach().to(device).requires_grad_(t.requires_grad), inputs)
    if name.endswith("_dynamic"):
        for x in inputs:
            torch._dynamo.mark_dynamic(x, 1)
    torch._dynamo.config.allow_rnn = name in ("lstm", "gru")
    return LossStep(model.train(), loss_fn), inputs, loss_fn


def pytorch_backend(compiler: str):
    """PyTorch's own backend for `compiler`, with its min-cut partitioner: for aot_eager,
    AOTAutograd with no-op compilers and ``min_cut_rematerialization_partition`` (the
    backend named "aot_eager" uses ``default_partition``); for inductor, "inductor"."""
    if compiler == "inductor":
        return "inductor"
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    return aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop,
                        partition_fn=min_cut_rematerialization_partition, keep_inference_input_mutations=True)


DEVICE = {"value": torch.device("cpu")}  # set by main (--device)


class EagerFailsOnDevice(Exception):
    """The model's own eager step fails on --device: nothing to compare against."""


class NotRunnable(Exception):
    """The pair (model, compiler) cannot run on --device with PyTorch itself."""


# (model, compiler, device type) that PyTorch's own backend cannot run either, and why:
# the line says "skipped" with the reason instead of failing.
NOT_RUNNABLE = {
    ("flex_attn", "inductor", "cpu"): "Inductor has no CPU lowering of flex_attention's backward "
                                      "(PyTorch's own inductor backend fails with the same IndexError)",
    ("funnel", "inductor", "cpu"): "Inductor's compile does not finish in 7 minutes, in SymPy simplify, "
                                   "with PyTorch's own partitioner too",
    ("patchtst", "aot_eager", "cpu"): "the compiled forward's aten.view of a transposed BatchNorm output fails "
                                      "('view size is not compatible with input tensor's size and stride') with "
                                      "PyTorch's own aot_eager backends too (min cut and default partition)",
    ("qwen3_next", "aot_eager", "cpu"): "the compiled backward's aten.view of a cat of the gated-delta b/a "
                                        "gradients fails ('view size is not compatible with input tensor's size "
                                        "and stride') with PyTorch's own aot_eager backends too (min cut and "
                                        "default partition)",
    ("jvp_loss", "inductor", "cpu"): "the compiled backward's extern mm(out=...) raises 'ZeroTensors are "
                                     "immutable' (torch.func.jvp's zero tangents), with PyTorch's own inductor "
                                     "backend too (min cut and budget 0.0)",
}


def _dense(g):
    """A gradient as a strided tensor (an Embedding(sparse=True) weight's is sparse COO,
    which has no abs().max())."""
    return g.to_dense() if g is not None and g.layout != torch.strided else g


def _train_step(name: str, compiler: str | None, options: dict, fxremat: bool, fp64: bool = False):
    """One step of a fresh copy of model `name` (the same weights every time: the builders
    seed), eager when `compiler` is None, else compiled by fxremat or by PyTorch's own
    backend (with `options`' activation_memory_budget, if any, as PyTorch's config);
    `fp64`: the model's floating parameters, buffers and inputs in float64.
    Returns (loss, {parameter: grad}, {buffer: value}, inputs after the step)."""
    import torch._dynamo
    from torch.utils._pytree import tree_map_only

    step, inputs, _ = loss_step(name, DEVICE["value"])
    if fp64:
        step.double()
        inputs = tree_map_only(torch.Tensor, lambda t: t.detach().double().requires_grad_(t.requires_grad)
                               if t.is_floating_point() else t, inputs)
    run = step
    budget = options.get("activation_memory_budget")
    patch = {} if fxremat or budget is None else {"activation_memory_budget": budget}
    if not fxremat and DEVICE["value"].type == "cuda":
        # A random op recomputed in the backward (one inside a checkpoint region) replays
        # its draw. On CUDA PyTorch's partitioner does it with the graph-safe pair
        # (graphsafe_run_with_rng_state on generator inputs), fxremat with the stateful one
        # (run_and_save_rng_state / run_with_rng_state, Note [Replaying random ops]), which
        # PyTorch uses on CPU and with this knob off: the same seed then draws the same
        # numbers only when both use the same pair.
        patch["graphsafe_rng_functionalization"] = False
    if compiler is not None:
        torch._dynamo.reset()
        dynamic = True if name.endswith("_dynamic") else None
        if fxremat:
            run = torch.compile(step, backend="fxremat", options={"compiler": compiler, **options}, dynamic=dynamic)
        else:
            run = torch.compile(step, backend=pytorch_backend(compiler), dynamic=dynamic)
    with torch._functorch.config.patch(patch):
        torch.manual_seed(1234)  # the same draws for every run of a model with random ops
        loss = run(*inputs)
        loss.backward()
    grads = {n: p.grad for n, p in step.m.named_parameters()}
    buffers = {n: b.detach().clone() for n, b in step.m.named_buffers()}
    return loss.detach(), grads, buffers, inputs


def _compare(got, want) -> float:
    """Raises if two _train_step results differ beyond the tolerances; the largest
    gradient difference otherwise."""
    loss, grads, buffers, inputs = got
    want_loss, want_grads, want_buffers, want_inputs = want
    torch.testing.assert_close(loss, want_loss, rtol=1e-4, atol=1e-5)
    for i, (a, b) in enumerate(zip(inputs, want_inputs)):
        torch.testing.assert_close(a, b, msg=lambda m: f"input {i} after the step: {m}")
    worst = 0.0
    for pname, g in grads.items():
        w = want_grads[pname]
        if g is None and w is None:
            continue
        if (g is None) != (w is None):
            raise AssertionError(f"grad of {pname}: None on one side only")
        if g.layout != w.layout:
            raise AssertionError(f"grad of {pname}: layout {g.layout}, expected {w.layout}")
        g, w = _dense(g), _dense(w)
        torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-5, msg=lambda m: f"grad of {pname}: {m}")
        worst = max(worst, float((g - w).abs().max()))
    for bname, b in buffers.items():
        torch.testing.assert_close(b, want_buffers[bname], msg=lambda m: f"buffer {bname}: {m}")
    return worst


def _largest_grad_difference(a, b) -> float:
    return max((float((_dense(g) - _dense(b[1][n])).abs().max()) for n, g in a[1].items()
                if g is not None and b[1][n] is not None), default=0.0)


def _within_noise(got, ref, eager) -> bool:
    """Whether each of `got`'s gradients is within twice the distance of `ref`'s from
    `eager`'s (plus _compare's tolerances): two compiled runs each as far from eager as
    `ref` is can be twice that far from each other (bf16 autocast under Inductor: one
    bf16 ulp from eager, and one ulp apart)."""
    for n, g in got[1].items():
        r, e = ref[1][n], eager[1][n]
        if g is None or r is None or e is None:
            if (g is None) != (r is None):
                return False
            continue
        g, r, e = _dense(g), _dense(r), _dense(e)
        if float((g - r).abs().max()) > 2 * float((r - e).abs().max()) + 1e-5 + 1e-3 * float(r.abs().max()):
            return False
    return True


def _compiler_numerics(name: str, compiler: str, options: dict, got, reference, eager, tail: str,
                       error: AssertionError) -> str:
    """The last checks of a run that matches neither eager nor PyTorch's partition (`reference`:
    (label, result)) where PyTorch's differs from eager too: the line if the difference is
    the compiler's numerics, else `error` raised."""
    import torch._inductor.config as inductor_config

    label, ref = reference
    # Reduced precision: Inductor keeps a fused kernel's intermediates in fp32 where eager
    # rounds each op's bf16 result, so a value recomputed in the backward need not equal
    # the forward's rounded one (autocast at budget 0.0: one bf16 ulp). With
    # emulate_precision_casts it rounds as eager does, and a right partition matches
    # PyTorch's min cut.
    with inductor_config.patch(emulate_precision_casts=True):
        try:
            worst = _compare(_train_step(name, compiler, options, fxremat=True),
                             _train_step(name, compiler, {}, fxremat=False))
            return (f"ok against PyTorch's {compiler} min cut with emulate_precision_casts (max grad diff "
                    f"{worst:.1e}; without it {_largest_grad_difference(got, ref):.1e}, PyTorch's "
                    f"{_largest_grad_difference(ref, eager):.1e} from eager); {tail}")
        except AssertionError:
            pass
    # Last: where every gradient is about as close to PyTorch's as PyTorch's is to eager's
    # (the compiler's own noise on this model, per parameter) and the same partition run
    # without the compiler is exact, the partition is right and the compiler's numerics
    # are what differs (MobileNetV2 under Inductor with the offload policy: 2.7e-3 from
    # PyTorch's min cut, as far as PyTorch's own budget-0.3 partition is). An error past
    # that noise (a bug only the compiler shows, as the donated buffers of 4d0a7c7)
    # still fails.
    if not _within_noise(got, ref, eager):
        raise error
    _compare(_train_step(name, "aot_eager", options, fxremat=True), eager)
    # Close to PyTorch's is no proof when PyTorch's partition is wrong too (a buffer the
    # forward overwrites, saved as it is: buffer_counter before Note [Snapshots of mutated
    # inputs], 3e-3 from eager, both within that noise). In float64 the compiler's
    # rounding all but vanishes and a partition's error does not: the same step there
    # must match eager's.
    try:
        want64 = _train_step(name, None, {}, fxremat=False, fp64=True)
    except Exception as e:  # noqa: BLE001 - a model that cannot run in float64
        fp64 = f"no float64 check ({type(e).__name__})"
    else:
        got64 = _train_step(name, compiler, options, fxremat=True, fp64=True)
        fp64 = f"in float64 {_compare(got64, want64):.1e} from eager"
    return (f"ok: exact under aot_eager; under {compiler} {_largest_grad_difference(got, ref):.1e} from "
            f"PyTorch's{label} and PyTorch's {_largest_grad_difference(ref, eager):.1e} from eager (the "
            f"compiler's numerics; {fp64}); {tail}")


# Per model: why its eager step fails on --device ("" when it runs), found once.
_EAGER_ON_DEVICE: dict[str, str] = {}


def check(name: str, compiler: str, options: dict) -> str:
    if (name, compiler, DEVICE["value"].type) in NOT_RUNNABLE:
        raise NotRunnable(NOT_RUNNABLE[name, compiler, DEVICE["value"].type])
    if DEVICE["value"].type != "cpu":
        if name not in _EAGER_ON_DEVICE:
            try:
                _train_step(name, None, {}, fxremat=False)
                _EAGER_ON_DEVICE[name] = ""
            except Exception as e:  # noqa: BLE001 - the model itself does not run there
                _EAGER_ON_DEVICE[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        if _EAGER_ON_DEVICE[name]:
            raise EagerFailsOnDevice(_EAGER_ON_DEVICE[name])
    got = _train_step(name, compiler, options, fxremat=True)
    import fxremat

    recs = fxremat.partition_records()
    fb = [r.fallback for r in recs if r.fallback]
    tail = f"{len(recs)} partitions{'; FALLBACK ' + str(fb) if fb else ''}"
    if name in corpus_zoo.RANDOM:
        # Against PyTorch's min cut whatever fxremat's options: a correct partition never
        # replays a draw, so every budget gives the min cut's gradients. PyTorch's own
        # budget partition does replay them (torch 2.13, activation_memory_budget 0.3:
        # randn_like, bernoulli and native_dropout rerun in its backward; on `noise` its
        # gradients differ from its min cut's by up to 0.37).
        worst = _compare(got, _train_step(name, compiler, {}, fxremat=False))
        return f"ok against PyTorch's {compiler} min cut, same seed (max grad diff {worst:.1e}; {tail})"
    eager = _train_step(name, None, options, fxremat=False)
    try:
        worst = _compare(got, eager)
    except AssertionError:
        pytorch = _train_step(name, compiler, options, fxremat=False)
        try:
            _compare(pytorch, eager)
        except AssertionError:  # PyTorch's partition differs from eager too: compare with it
            # ... or with PyTorch's min cut: under a budget the two partitions recompute
            # different values, and where the compiler's numerics are this far from eager's
            # (MobileNetV2's BatchNorm on a batch of 2 under Inductor: 0.29) two different
            # partitions are not comparable to each other either. Without a budget
            # PyTorch's run is its min cut already.
            if options.get("activation_memory_budget") is None:
                references = [(" min cut", pytorch)]
            else:
                references = [("", pytorch), (" min cut", _train_step(name, compiler, {}, fxremat=False))]
            for label, ref in references:
                try:
                    worst = _compare(got, ref)
                except AssertionError as error:
                    if ref is not references[-1][1]:
                        continue
                    if compiler == "aot_eager":
                        raise
                    return _compiler_numerics(name, compiler, options, got, (label, ref), eager, tail, error)
                return (f"ok against PyTorch's {compiler}{label} (max grad diff {worst:.1e}); both differ from "
                        f"eager, PyTorch's by up to {_largest_grad_difference(ref, eager):.1e}; {tail}")
        raise
    return f"ok (max grad diff {worst:.1e}; {tail})"


def parse_config(spec: str) -> tuple[str, dict]:
    """(label, backend options) of one --configs entry."""
    if spec == "min_cut":
        return "min cut", {}
    key, _, value = spec.partition("=")
    if key == "budget" and value:
        return f"budget {float(value)}", {"activation_memory_budget": float(value)}
    if key == "policy" and value:
        return value, {"policy": value}
    if spec.startswith("options:") and len(spec) > len("options:"):
        # Any backend options, 'options:NAME=VALUE;NAME=VALUE' (a VALUE that reads as
        # JSON, such as 0.5 or true, is that value; any other is a string).
        options = {}
        for item in spec[len("options:"):].split(";"):
            name, equals, text = item.partition("=")
            if not name or not equals:
                raise SystemExit(f"--configs: {item!r} in {spec!r} is not NAME=VALUE")
            try:
                options[name] = json.loads(text)
            except json.JSONDecodeError:
                options[name] = text
        return " ".join(f"{k}={v}" for k, v in options.items()), options
    raise SystemExit(f"--configs: unknown entry {spec!r} (min_cut, budget=F, policy=NAME, options:NAME=VALUE;...)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS + ZOO_MODELS))
    ap.add_argument("--compilers", default="aot_eager,inductor")
    ap.add_argument("--budget", type=float, default=0.3)
    ap.add_argument("--configs", default="",
                    help="comma-separated partitions to check instead of the min cut and --budget: 'min_cut', "
                         "'budget=F' (activation_memory_budget), 'policy=NAME' (a jax.checkpoint_policies name, "
                         "e.g. dots_saveable, offload_dot_with_no_batch_dims), 'options:NAME=VALUE;NAME=VALUE' (any "
                         "backend options, e.g. options:activation_memory_budget=0.1;recompute_views=true)")
    ap.add_argument("--device", default="cpu", help="where the models run (cpu, cuda)")
    ap.add_argument("--deadline-s", type=float, default=0.0,
                    help="start no model after this many seconds (0: no limit); a lent GPU's time is short")
    ap.add_argument("-v", action="store_true", help="print each failure's traceback")
    args = ap.parse_args()
    start = time.perf_counter()
    import fxremat._partition_fn as pf
    import torch._functorch.config

    torch._functorch.config.enable_autograd_cache = False
    DEVICE["value"] = torch.device(args.device)
    import fxremat.backend

    fxremat.backend.register()
    configs = [("min cut", {}), (f"budget {args.budget}", {"activation_memory_budget": args.budget})]
    if args.configs:
        configs = [parse_config(c) for c in args.configs.split(",")]
    failures = 0
    for name in args.models.split(","):
        if args.deadline_s and time.perf_counter() - start > args.deadline_s:
            print(f"{name:18s} not run: past --deadline-s {args.deadline_s:g}", flush=True)
            continue
        for compiler in args.compilers.split(","):
            for label, options in configs:
                pf.clear_partition_records()
                t0 = time.perf_counter()
                try:
                    result = check(name, compiler, options)
                except EagerFailsOnDevice as e:
                    result = f"skipped: eager fails on {args.device} ({e})"
                except NotRunnable as e:
                    result = f"skipped: not runnable with PyTorch's own {compiler} on {args.device} ({e})"
                except Exception as e:  # noqa: BLE001 -- a failure is a result
                    failures += 1
                    result = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                    if args.v:
                        traceback.print_exc()
                print(f"{name:18s} {compiler:10s} {label:11s} {time.perf_counter() - t0:6.1f}s  {result}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
