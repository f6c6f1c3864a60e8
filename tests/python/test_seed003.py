"""Seed 003 (jax.checkpoint / print_saved_residuals) in PyTorch: the same programs, the
same policies, and the residual lists the notebook prints, compared as
(shape, kind, what) triples: ("f32[5,4]", "argument", "W1"), ("f32[5]", "named", "a"),
("f32[5]", "op", "sin").

Where PyTorch's decomposition differs from JAX's, the expected list says so:

- sin's derivative: JAX's JVP computes cos(y) in the forward; AOTAutograd's joint
  graph computes it in the backward part, from forward values only, so policies see it
  as a forward value and everything_saveable saves it as JAX does.
- JAX's dot_general is aten.mv here (W @ x with a 1-D x); JAX's
  dots_with_no_batch_dims_saveable shows its saved dots as "reduce_precision" (the op
  its policy wraps them in), fxremat as the product itself ("mv").
- x is a 1-D input, as in JAX, and W's gradient outer(dy, x) needs it: it is saved as an
  argument in both.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import fxremat
from fxremat import policies as P


def g(W, x):
    y = W @ x
    return torch.sin(y)


def f(W1, W2, W3, x):
    x = g(W1, x)
    x = g(W2, x)
    x = g(W3, x)
    return x


def f2(W1, W2, W3, x):
    x = checkpoint(g, W1, x, use_reentrant=False)
    x = checkpoint(g, W2, x, use_reentrant=False)
    x = checkpoint(g, W3, x, use_reentrant=False)
    return x


def f4(W1, W2, W3, x):
    x = fxremat.checkpoint_name(g(W1, x), "a")
    x = fxremat.checkpoint_name(g(W2, x), "b")
    x = fxremat.checkpoint_name(g(W3, x), "c")
    return x


def layer(W, x):
    return torch.sin(W @ x)


def predict(params, x):
    *Ws, Wlast = params
    for i, W in enumerate(Ws):
        x = layer(W, x)
        x = fxremat.checkpoint_name(x, f"layer{i}_output")
    return Wlast @ x


def loss(params, x, y):
    return torch.sum((predict(params, x) - y) ** 2)


def _fg_args():
    return [torch.ones(5, 4, requires_grad=True), torch.ones(6, 5, requires_grad=True),
            torch.ones(7, 6, requires_grad=True), torch.ones(4, requires_grad=True)]


def _loss_args():
    return ([torch.ones(4, 4, requires_grad=True) for _ in range(3)], torch.ones(4, requires_grad=True),
            torch.ones(4, requires_grad=True))


ARGS_FG = [("f32[5,4]", "argument", "W1"), ("f32[6,5]", "argument", "W2"), ("f32[7,6]", "argument", "W3"),
           ("f32[4]", "argument", "x")]
ARGS_LOSS = [("f32[4,4]", "argument", "params[0]"), ("f32[4,4]", "argument", "params[1]"),
             ("f32[4,4]", "argument", "params[2]"), ("f32[4]", "argument", "x")]


def _keys(fn, args, policy):
    return sorted(r.key for r in fxremat.saved_residuals(fn, *args, policy=policy))


def _check(fn, args, policy, expected):
    got = _keys(fn, args, policy)
    assert got == sorted(expected), "\n" + fxremat.print_saved_residuals(fn, *args, policy=policy, file=None)


def test_f_without_checkpoint_saves_everything_it_needs():
    # JAX (no jax.checkpoint): W1 W2 W3 x, sin1 cos1, sin2 cos2, cos3 -- and the same
    # here with everything_saveable. AOTAutograd puts cos(y) in the backward part of
    # the joint graph, but it reads forward values only (not the tangent), so it is a
    # forward value for the policy, and saving it is preferred to recomputing it.
    _check(f, _fg_args(), P.everything_saveable, ARGS_FG + [
        ("f32[5]", "op", "sin"), ("f32[5]", "op", "cos"),
        ("f32[6]", "op", "sin"), ("f32[6]", "op", "cos"),
        ("f32[7]", "op", "cos")])


def test_f2_checkpoint_per_layer_saves_the_layer_outputs():
    # JAX: W1 W2 W3 x, sin1, sin2 (each checkpointed g keeps its input; sin3 is the output)
    _check(f2, _fg_args(), None, ARGS_FG + [("f32[5]", "op", "sin"), ("f32[6]", "op", "sin")])


def test_f3_dots_with_no_batch_dims_saveable():
    # JAX: W1 W2 W3 x and the three dots (shown as reduce_precision)
    _check(f, _fg_args(), P.dots_with_no_batch_dims_saveable, ARGS_FG + [
        ("f32[5]", "op", "mv"), ("f32[6]", "op", "mv"), ("f32[7]", "op", "mv")])


def test_f4_save_only_these_names():
    # JAX: W1 W2 W3 x and the value named 'a' (shown as reduce_precision from f4)
    _check(f4, _fg_args(), P.save_only_these_names("a"), ARGS_FG + [("f32[5]", "named", "a")])


def test_f4_text_form_and_report():
    text = fxremat.print_saved_residuals(f4, *_fg_args(), policy="save_only_these_names:a", file=None)
    lines = text.splitlines()
    assert len(lines) == 7, text
    assert "named 'a'" in text and "test_seed003.py" in text
    assert lines[-2].startswith("5 residuals: ") and "0 B offloaded" in lines[-2]
    assert lines[-1].startswith("step peak (simulated): ")


def test_loss_save_any_names_but_these():
    # JAX prints W's, x, y. fxremat also saves layer0_output: the policy makes it
    # saveable (it is named, and not layer1_output), and W2's gradient
    # outer(dy, layer0_output) needs it. (See the note in docs/policies.md.)
    _check(loss, _loss_args(), P.save_any_names_but_these("layer1_output"),
           ARGS_LOSS + [("f32[4]", "argument", "y"), ("f32[4]", "named", "layer0_output")])


def test_loss_with_names_without_checkpoint():
    # JAX (no jax.checkpoint): W's, x, cos, layer0_output, cos, layer1_output, mul
    # (mul = 2 * (predict - y), the square's derivative) -- the same list.
    _check(loss, _loss_args(), P.everything_saveable, ARGS_LOSS + [
        ("f32[4]", "op", "cos"), ("f32[4]", "named", "layer0_output"),
        ("f32[4]", "op", "cos"), ("f32[4]", "named", "layer1_output"), ("f32[4]", "op", "mul")])


def test_loss_dots_with_no_batch_dims_saveable():
    # JAX: W's, x, y and the three dots (reduce_precision); here the three mv outputs.
    # The names do not matter to this policy.
    _check(loss, _loss_args(), P.dots_with_no_batch_dims_saveable, ARGS_LOSS + [
        ("f32[4]", "argument", "y"), ("f32[4]", "op", "mv"), ("f32[4]", "op", "mv"), ("f32[4]", "op", "mv")])
