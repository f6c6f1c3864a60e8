"""The example programs behind ``testdata/``, rebuildable with the same seeded weights
and inputs (``tools/make_testdata.py`` exports them; the tests run them eagerly).

>>> p = build("carry_x")
>>> out = p()                      # eager run on the real inputs
>>> p.roots()["args"][1]["weights"].shape
torch.Size([3, 3])
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn


@dataclass
class Program:
    """A program and its example inputs: ``fn(*args, **kwargs)``."""

    name: str
    fn: Callable[..., Any]
    args: tuple
    kwargs: dict = field(default_factory=dict)
    description: str = ""

    @property
    def module(self) -> nn.Module | None:
        return self.fn if isinstance(self.fn, nn.Module) else None

    def __call__(self, *args, **kwargs):
        if args or kwargs:
            return self.fn(*args, **kwargs)
        return self.fn(*self.args, **self.kwargs)

    def roots(self) -> dict[str, Any]:
        """What a recorded input path is relative to (see :func:`fxremat.resolve_path`)."""
        m = self.module
        return {
            "params": dict(m.named_parameters()) if m is not None else {},
            "buffers": dict(m.named_buffers()) if m is not None else {},
            "args": self.args,
            "kwargs": self.kwargs,
        }


def _seed(name: str) -> int:
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def _randn(*shape, requires_grad=True):
    return torch.randn(*shape).requires_grad_(requires_grad)


# --------------------------------------------------------------------------------------
# seed 000: SimpleMLP
# --------------------------------------------------------------------------------------


class SimpleMLP(nn.Module):
    """fc1 128->64, sin, block (fc2 64->32, sin), fc3 32->10, sin."""

    def __init__(self, checkpoint: bool = False):
        super().__init__()
        self.checkpoint = checkpoint
        self.fc1 = nn.Linear(128, 64)
        self.fc2 = nn.Linear(64, 32)
        self.fc3 = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.sin(self.fc1(x))
        if self.checkpoint:
            x = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
        else:
            x = self.block(x)
        return torch.sin(self.fc3(x))

    def block(self, x):
        return torch.sin(self.fc2(x))


def _simple_mlp(checkpoint: bool) -> tuple:
    # both variants share weights and data: seeded by the same name
    model = SimpleMLP(checkpoint=checkpoint)
    x = torch.randn(64, 128)
    return model, (x,), {}


# --------------------------------------------------------------------------------------
# seed 002
# --------------------------------------------------------------------------------------


def sin_mm(a, w):
    a = torch.sin(a)
    a = a @ w
    a = torch.cos(a)
    a = a @ w
    return torch.sigmoid(a)


def carry_x(carry, x):
    weights = x["weights"]
    biases = x["biases"]
    new_a = torch.sin((carry["a"] @ weights) + biases)
    new_b = torch.cos((carry["b"] @ weights) + biases)
    y = torch.sigmoid(new_a + new_b)
    return {"a": new_a, "b": new_b}, y


# --------------------------------------------------------------------------------------
# seed 001
# --------------------------------------------------------------------------------------


def name_tensor_fn(x):
    x = torch.ops.xla.name_tensor.default(x, "foo")
    y = torch.sin(x)
    z = y * y
    return z + 3


# --------------------------------------------------------------------------------------
# seed 003
# --------------------------------------------------------------------------------------


def g(W, x):
    return torch.sin(W @ x)


def fg_chain(W1, W2, W3, x):
    x = g(W1, x)
    x = g(W2, x)
    x = g(W3, x)
    return x


def layer(W, x):
    return torch.sin(W @ x)


def predict(params, x):
    *Ws, Wlast = params
    for W in Ws:
        x = layer(W, x)
    return Wlast @ x


def predict_loss(params, x, y):
    return torch.sum((predict(params, x) - y) ** 2)


# --------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------


class CausalLMLoss(nn.Module):
    """``model(input_ids, labels=input_ids).loss`` as a module (parameters under ``model.``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, labels=input_ids).loss


VOCAB = 512
BATCH, SEQ = 2, 16


def _gpt2() -> tuple:
    import transformers

    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
        use_cache=False, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
        attn_implementation="eager",
    )
    model = transformers.GPT2LMHeadModel(cfg)
    model.loss_type = "ForCausalLM"  # GPT2LMHeadModel's name does not say; avoids a warning
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return CausalLMLoss(model), (ids,), {}


def _llama() -> tuple:
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        attention_dropout=0.0, use_cache=False, bos_token_id=1, eos_token_id=2,
        pad_token_id=None, attn_implementation="eager",
    )
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    return CausalLMLoss(model), (ids,), {}


# --------------------------------------------------------------------------------------
# drop-in safety (issue 9): a program that mutates one of its inputs
# --------------------------------------------------------------------------------------


class MutatedCounter(nn.Module):
    """Counts its calls in a buffer (``counter.add_(1)``) and scales by the new count.

    The joint graph computes ``add = counter + 1`` from the old buffer and AOTAutograd
    writes ``add`` back after the forward: recomputing ``add`` in the backward would
    read the written value (Note [Mutated inputs] in passes/protect_mutations.h).
    """

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 8)
        self.register_buffer("counter", torch.zeros(16))

    def forward(self, x):
        self.counter.add_(1)
        h = torch.sin(self.fc1(x)) * self.counter
        return self.fc2(torch.relu(h)).sum()


class ShiftRightDecoder(nn.Module):
    """A T5-style decoder step of our own: the decoder input is the labels shifted right
    (``shifted[..., 0] = start_id``, as transformers' ``_shift_right`` writes it, with
    ignored positions (-100) replaced by the pad id), and a per-channel scale made with
    ``torch.tensor([...])`` inside ``forward``. Both trace to ``get_attr`` tensor
    constants (``_tensor_constant0``...) read through ``aten.lift_fresh_copy``."""

    START_ID = 2
    PAD_ID = 0

    def __init__(self, vocab: int = 32, dim: int = 8):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, labels):
        shifted = labels.new_zeros(labels.shape)
        shifted[..., 1:] = labels[..., :-1].clone()
        shifted[..., 0] = self.START_ID
        shifted = shifted.masked_fill(shifted == -100, self.PAD_ID)
        scale = torch.tensor([1.0, 0.5, 2.0, 1.5, 1.0, 0.25, 3.0, 1.0])
        h = torch.tanh(self.proj(self.embed(shifted))) * scale
        logits = self.head(h)
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), labels.reshape(-1), ignore_index=-100)


def _shift_right() -> tuple:
    model = ShiftRightDecoder()
    labels = torch.randint(0, model.vocab, (2, 6))
    labels[0, -1] = -100  # an ignored position, as padded label batches have
    return model, (labels,), {}


# --------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------


def _builders() -> dict[str, tuple[str, Callable[[], tuple]]]:
    return {
        "simple_mlp": ("seed 000 SimpleMLP, no checkpoint, batch 64", lambda: _simple_mlp(False)),
        "simple_mlp_ckpt": (
            "seed 000 SimpleMLP, block under torch.utils.checkpoint(use_reentrant=False)",
            lambda: _simple_mlp(True),
        ),
        "sin_mm": (
            "seed 002 fn(a, w): sin, mm, cos, mm, sigmoid; w without grad",
            lambda: (sin_mm, (_randn(4, 4), _randn(4, 4, requires_grad=False)), {}),
        ),
        "carry_x": (
            "seed 002 fn(carry, x) with dict pytrees",
            lambda: (
                carry_x,
                ({"a": _randn(2, 3), "b": _randn(2, 3)}, {"weights": _randn(3, 3), "biases": _randn(2, 3)}),
                {},
            ),
        ),
        "name_tensor": (
            "seed 001 my_fn: xla::name_tensor(x, 'foo'), sin, y*y, +3",
            lambda: (name_tensor_fn, (_randn(10),), {}),
        ),
        "fg_chain": (
            "seed 003 f(W1, W2, W3, x) = g(W3, g(W2, g(W1, x))), g(W, x) = sin(W @ x)",
            lambda: (fg_chain, (_randn(5, 4), _randn(6, 5), _randn(7, 6), _randn(4)), {}),
        ),
        "predict_loss": (
            "seed 003 loss(params, x, y) = sum((predict(params, x) - y)**2)",
            lambda: (predict_loss, ([_randn(4, 4), _randn(4, 4), _randn(4, 4)], _randn(4), _randn(4)), {}),
        ),
        "mutated_counter": (
            "module that mutates its buffer (counter.add_(1)) and scales by it",
            lambda: (MutatedCounter(), (_randn(4, 8),), {}),
        ),
        "t5_shift_right": (
            "T5-style shift-right decoder step (tensor constants: start id, torch.tensor scale)",
            _shift_right,
        ),
        "gpt2_2l": ("2-layer GPT-2 (n_embd 64, 4 heads, vocab 512), random weights, LM loss", _gpt2),
        "llama_2l": ("2-layer Llama (hidden 64, 4 heads, 2 kv heads, vocab 512), random weights, LM loss", _llama),
    }


def names() -> list[str]:
    """All program names, in testdata order."""
    return list(_builders())


def build(name: str) -> Program:
    """Build program ``name`` with its seeded weights and inputs (global RNG untouched)."""
    builders = _builders()
    if name not in builders:
        raise KeyError(f"unknown program {name!r}; known: {', '.join(builders)}")
    if name == "name_tensor":
        from .. import xla_compat

        xla_compat.register()
    description, builder = builders[name]
    seed_name = "simple_mlp" if name.startswith("simple_mlp") else name
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed(seed_name))
        fn, args, kwargs = builder()
    return Program(name=name, fn=fn, args=args, kwargs=kwargs, description=description)


# --------------------------------------------------------------------------------------
# names for checkpoint policies (issue 4)
# --------------------------------------------------------------------------------------


def add_block_names(model: nn.Module) -> list[str]:
    """Names values of every GPT-2 block of ``model`` with :func:`fxremat.checkpoint_name`,
    through hooks (the model's code is unchanged): the inputs of the two layer norms
    (``ln1_in0``, ``ln2_in0``: the residual stream, which the layer norms' backward
    needs) and the MLP's hidden activation (``mlp_fc0``: ``c_fc``'s output, which GELU's
    backward needs). Returns the names in block order."""
    import fxremat

    blocks = getattr(getattr(getattr(model, "model", model), "transformer", None), "h", None)
    if blocks is None:
        raise ValueError(f"no GPT-2 blocks (transformer.h) in {type(model).__name__}")

    def pre(name: str):
        def named(_module, args):
            return (fxremat.checkpoint_name(args[0], name), *args[1:])

        return named

    def post(name: str):
        def named(_module, _args, out):
            return fxremat.checkpoint_name(out, name)

        return named

    names = []
    for i, block in enumerate(blocks):
        block.ln_1.register_forward_pre_hook(pre(f"ln1_in{i}"))
        block.ln_2.register_forward_pre_hook(pre(f"ln2_in{i}"))
        block.mlp.c_fc.register_forward_hook(post(f"mlp_fc{i}"))
        names += [f"ln1_in{i}", f"ln2_in{i}", f"mlp_fc{i}"]
    return names
