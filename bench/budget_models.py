"""The budget benchmark's model corpus: transformers models at CPU-sized dimensions
(random weights, fp32), captured as joint graphs with fxremat.export_joint and cached
under bench/out/budget/ (git-ignored). Each entry also has a version with the model's
own per-layer checkpointing (gradient_checkpointing_enable), the hand-placed
reference point of Note [Peak budget].

    .venv/bin/python bench/budget_models.py            # capture what is missing
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out" / "budget"


def _ready(model_class, cfg, batch: int, seq: int, ckpt: bool):
    """The model with seeded random weights in training mode (with its own per-layer
    checkpointing when ``ckpt``), and a batch of token ids."""
    torch.manual_seed(0)
    model = model_class(cfg)
    if ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    return model, ids


def _llama(layers: int, hidden: int, seq: int, batch: int, ckpt: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=1024, hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 8 * 8,
                      num_hidden_layers=layers, num_attention_heads=max(1, hidden // 64),
                      num_key_value_heads=max(1, hidden // 64), max_position_embeddings=seq,
                      attn_implementation="sdpa")
    return _ready(LlamaForCausalLM, cfg, batch, seq, ckpt)


def _gpt2(layers: int, hidden: int, seq: int, batch: int, ckpt: bool):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=1024, n_embd=hidden, n_layer=layers, n_head=max(1, hidden // 64), n_positions=seq,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
    return _ready(GPT2LMHeadModel, cfg, batch, seq, ckpt)


class _LossStep(torch.nn.Module):
    """The causal-LM loss of one batch: what a training step differentiates."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.model(input_ids=ids, use_cache=False).logits
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


MODELS = {
    "llama_8l": lambda ckpt: _llama(8, 256, 256, 4, ckpt),
    "gpt2_12l": lambda ckpt: _gpt2(12, 128, 256, 4, ckpt),
    "llama_4l_small": lambda ckpt: _llama(4, 128, 64, 2, ckpt),
}


def capture(name: str, ckpt: bool = False) -> Path:
    import fxremat

    path = OUT / f"{name}{'_ckpt' if ckpt else ''}.json.gz"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    model, ids = MODELS[name](ckpt)

    joint = fxremat.export_joint(_LossStep(model), ids, name=name)
    fxremat.save(joint.gm, path)
    return path


if __name__ == "__main__":
    for n in (sys.argv[1:] or MODELS):
        for ckpt in (False, True):
            print(capture(n, ckpt))
