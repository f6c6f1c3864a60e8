"""More models for bench/corpus_check.py, of families its first list does not have:
encoders (DistilBERT, RoBERTa, DeBERTa-v2 with relative attention, ELECTRA), speech
(Whisper, wav2vec2, HuBERT: conv feature extractors, CTC), vision (ConvNeXt, Swin's
shifted windows, MobileNetV2 and EfficientNet's depthwise convs, CLIP), decoders
(GPT-NeoX, Falcon with multi-query parallel attention, Phi, Qwen2, Gemma, Mistral's
sliding window), MoE (Qwen2-MoE, OLMoE), Mamba's selective scan, transformers'
``gradient_checkpointing_enable``, and hand-written modules for what those leave out:
``torch.utils.checkpoint`` regions (with random ops inside), ``nn.MultiheadAttention``,
``F.scaled_dot_product_attention``, ``EmbeddingBag``, in-place ops on activations, a
buffer updated in the forward, complex intermediates, autocast to bf16, frozen weights
with adapters, channels-last convs, random ops (noise, bernoulli, dropout), integer
intermediates (topk, sort, scatter_add, index_add), float64, and an input mutated in
place. Every model is built from a config with random weights at test size (no
download).

``build(name)`` returns ``(module, inputs, loss_fn)`` as corpus_check's own builders do;
``MODELS`` lists what corpus_check runs by default; ``RANDOM`` names the models whose
forward draws random numbers, compared with PyTorch's own compiled backend under the
same seed rather than with eager (whose draws differ).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

V = 64


def _ids(b=2, s=12, v=V):
    return torch.randint(0, v, (b, s))


def _lm(m, s=12):
    return m, (_ids(s=s),), lambda m, ids: m(input_ids=ids, labels=ids).loss


def _transformers(name: str):
    import transformers as tf

    torch.manual_seed(0)
    if name == "distilbert":
        return _lm(tf.DistilBertForMaskedLM(tf.DistilBertConfig(vocab_size=V, dim=32, n_layers=2, n_heads=2,
                                                               hidden_dim=64, max_position_embeddings=32,
                                                               dropout=0.0, attention_dropout=0.0,
                                                               qa_dropout=0.0, seq_classif_dropout=0.0)))
    if name == "roberta":
        return _lm(tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=2, intermediate_size=64,
                                                          max_position_embeddings=40, pad_token_id=1,
                                                          hidden_dropout_prob=0.0,
                                                          attention_probs_dropout_prob=0.0)))
    if name == "deberta_v2":
        return _lm(tf.DebertaV2ForMaskedLM(tf.DebertaV2Config(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                              num_attention_heads=2, intermediate_size=64,
                                                              max_position_embeddings=32, relative_attention=True,
                                                              position_buckets=8, max_relative_positions=16,
                                                              pos_att_type=["p2c", "c2p"],
                                                              hidden_dropout_prob=0.0,
                                                              attention_probs_dropout_prob=0.0)))
    if name == "electra":
        m = tf.ElectraForPreTraining(tf.ElectraConfig(vocab_size=V, embedding_size=16, hidden_size=32,
                                                      num_hidden_layers=2, num_attention_heads=2,
                                                      intermediate_size=64, max_position_embeddings=32,
                                                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
        return m, (_ids(), torch.randint(0, 2, (2, 12))), lambda m, ids, lab: m(input_ids=ids, labels=lab).loss
    if name == "whisper":
        m = tf.WhisperForConditionalGeneration(tf.WhisperConfig(
            vocab_size=V, num_mel_bins=8, encoder_layers=1, decoder_layers=1, d_model=32,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_source_positions=16, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=1, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
            suppress_tokens=None, begin_suppress_tokens=None))
        return m, (torch.randn(2, 8, 32), torch.randint(3, V, (2, 6))), \
            lambda m, f, lab: m(input_features=f, labels=lab).loss
    if name in ("wav2vec2", "hubert"):
        kw = dict(vocab_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                  conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3), num_conv_pos_embeddings=8,
                  num_conv_pos_embedding_groups=4, hidden_dropout=0.0, activation_dropout=0.0,
                  attention_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
                  mask_time_prob=0.0, mask_feature_prob=0.0, ctc_zero_infinity=True, pad_token_id=0,
                  ctc_loss_reduction="mean")
        if name == "wav2vec2":
            m = tf.Wav2Vec2ForCTC(tf.Wav2Vec2Config(**kw))
        else:
            m = tf.HubertForCTC(tf.HubertConfig(**kw))
        return m, (torch.randn(2, 400), torch.randint(1, 16, (2, 3))), \
            lambda m, x, lab: m(input_values=x, labels=lab).loss
    if name == "convnext":
        m = tf.ConvNextForImageClassification(tf.ConvNextConfig(num_channels=3, patch_size=2, hidden_sizes=[16, 32],
                                                                depths=[1, 1], num_labels=10, drop_path_rate=0.0, num_stages=2,
                                                                image_size=32))
        return m, (torch.randn(2, 3, 16, 16), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "swin":
        m = tf.SwinForImageClassification(tf.SwinConfig(image_size=32, patch_size=2, num_channels=3, embed_dim=16,
                                                        depths=[1, 1], num_heads=[2, 2], window_size=4,
                                                        num_labels=10, hidden_dropout_prob=0.0,
                                                        attention_probs_dropout_prob=0.0, drop_path_rate=0.0))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "mobilenet_v2":
        m = tf.MobileNetV2ForImageClassification(tf.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.25,
                                                                      num_labels=10, classifier_dropout_prob=0.0))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "efficientnet":
        m = tf.EfficientNetForImageClassification(tf.EfficientNetConfig(
            num_channels=3, image_size=32, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128,
            num_labels=10, dropout_rate=0.0, drop_connect_rate=0.0))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "clip_text":
        m = tf.CLIPTextModel(tf.CLIPTextConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=2,
                                               max_position_embeddings=16, eos_token_id=2))
        return m, (_ids(),), lambda m, ids: m(input_ids=ids).pooler_output.pow(2).mean()
    if name == "clip_vision":
        m = tf.CLIPVisionModel(tf.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                   num_attention_heads=2, image_size=32, patch_size=8))
        return m, (torch.randn(2, 3, 32, 32),), lambda m, px: m(pixel_values=px).pooler_output.pow(2).mean()
    if name == "gpt_neox":
        return _lm(tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                          num_attention_heads=4, intermediate_size=64,
                                                          max_position_embeddings=32, rotary_pct=0.5)))
    if name == "falcon":
        return _lm(tf.FalconForCausalLM(tf.FalconConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4, max_position_embeddings=32,
                                                        new_decoder_architecture=False, multi_query=True,
                                                        parallel_attn=True, alibi=False,
                                                        hidden_dropout=0.0, attention_dropout=0.0)))
    if name == "phi":
        return _lm(tf.PhiForCausalLM(tf.PhiConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=4,
                                                  max_position_embeddings=32, partial_rotary_factor=0.5,
                                                  resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0)))
    if name == "qwen2":
        return _lm(tf.Qwen2ForCausalLM(tf.Qwen2Config(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, max_position_embeddings=32)))
    if name == "gemma":
        return _lm(tf.GemmaForCausalLM(tf.GemmaConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=1, head_dim=8,
                                                      max_position_embeddings=32)))
    if name == "mistral":
        return _lm(tf.MistralForCausalLM(tf.MistralConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                          num_hidden_layers=2, num_attention_heads=4,
                                                          num_key_value_heads=2, max_position_embeddings=32,
                                                          sliding_window=8)))
    if name == "qwen2_moe":
        return _lm(tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(vocab_size=V, hidden_size=32, intermediate_size=64,
                                                            moe_intermediate_size=32,
                                                            shared_expert_intermediate_size=32,
                                                            num_hidden_layers=2, num_attention_heads=4,
                                                            num_key_value_heads=2, num_experts=4,
                                                            num_experts_per_tok=2, max_position_embeddings=32,
                                                            decoder_sparse_step=1)))
    if name == "olmoe":
        return _lm(tf.OlmoeForCausalLM(tf.OlmoeConfig(vocab_size=V, hidden_size=32, intermediate_size=32,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                                      max_position_embeddings=32, pad_token_id=0)))
    if name == "mamba":
        return _lm(tf.MambaForCausalLM(tf.MambaConfig(vocab_size=V, hidden_size=32, state_size=8,
                                                      num_hidden_layers=2, expand=2, conv_kernel=4,
                                                      use_mambapy=False)), s=8)
    if name == "gpt2_gc":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return _lm(m)
    if name == "gpt2_gc_dropout":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                             resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1))
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return _lm(m)
    if name == "gpt2_dropout":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                             resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1))
        return _lm(m)
    raise KeyError(name)


# ---------------------------------------------------------------- hand-written models
class _Ckpt(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32)) for _ in range(3))
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for i, b in enumerate(self.blocks):
            if i < 2:
                x = x + checkpoint(b, self.norm(x), use_reentrant=False)
            else:
                x = x + b(self.norm(x))
        return x.pow(2).mean()


class _CkptDropout(nn.Module):
    """Dropout and randn inside non-reentrant checkpoint regions."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Dropout(0.3), nn.Linear(64, 32))
                                    for _ in range(2))

    def _blk(self, b, x):
        return b(x + 0.05 * torch.randn_like(x))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for b in self.blocks:
            x = x + checkpoint(self._blk, b, x, use_reentrant=False)
        return x.pow(2).mean()


class _MHA(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.attn = nn.MultiheadAttention(32, 4, batch_first=True, dropout=0.0)
        self.ln = nn.LayerNorm(32)
        self.out = nn.Linear(32, V)

    def forward(self, ids):
        h = self.emb(ids)
        s = ids.shape[1]
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        a, w = self.attn(h, h, h, attn_mask=mask, need_weights=True)
        h = self.ln(h + a)
        return F.cross_entropy(self.out(h).flatten(0, 1), ids.flatten()) + w.pow(2).mean()


class _SDPA(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.o = nn.Linear(32, 32)
        self.ff = nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Linear(64, 32))

    def forward(self, x):
        for _ in range(2):
            b, s, _ = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, 32))
            x = x + self.ff(F.rms_norm(x, (32,)))
        return x.pow(2).mean()


class _EmbBag(nn.Module):
    def __init__(self):
        super().__init__()
        self.e = nn.Embedding(V, 16, padding_idx=0)
        self.bag = nn.EmbeddingBag(V, 16, mode="mean")
        self.bag2 = nn.EmbeddingBag(V, 16, mode="sum")
        self.head = nn.Linear(48, 4)

    def forward(self, ids, offsets, y):
        a = self.e(ids).mean(1)
        b = self.bag(ids)
        c = self.bag2(ids.flatten(), offsets)
        return F.cross_entropy(self.head(torch.cat([a, b, c], 1)), y)


class _InPlace2(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 64)
        self.c = nn.Linear(64, 32)

    def forward(self, x):
        h = self.a(x)
        h.relu_()
        g = self.b(h)
        g.add_(h)
        g.masked_fill_(x.sum(-1, keepdim=True) > 0, 0.5)
        g.mul_(torch.sigmoid(g.detach() * 0 + g))  # in-place with self-read
        t = torch.tanh(g) * 2
        t.clamp_(min=-0.5)
        y = self.c(t)
        y[:, 0] += 1.0  # indexed in-place
        return y.pow(2).mean()


class _BufferUpdate(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(32, 32)
        self.l2 = nn.Linear(32, 8)
        self.register_buffer("ema", torch.zeros(32))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
            self.steps += 1
        h = h - self.ema  # uses the updated buffer
        return self.l2(h).pow(2).mean()



class _RopeComplex(nn.Module):
    """Rotary embedding through view_as_complex / torch.polar (complex intermediates)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.o = nn.Linear(32, 32)
        inv = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))
        self.register_buffer("inv", inv, persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 4, 8).unbind(2)
        t = torch.arange(s, dtype=torch.float32)
        freqs = torch.polar(torch.ones(s, 4), torch.outer(t, self.inv))  # complex64 (s, 4)
        def rot(z):
            zc = torch.view_as_complex(z.float().reshape(b, s, 4, 4, 2))
            return torch.view_as_real(zc * freqs[None, :, None]).flatten(3)
        q, k = rot(q).transpose(1, 2), rot(k).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v.transpose(1, 2), is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, s, 32)).pow(2).mean()


class _Autocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(32, 64)
        self.l2 = nn.Linear(64, 64)
        self.l3 = nn.Linear(64, 8)

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = F.gelu(self.l1(x))
            h = F.layer_norm(h, (64,)) * torch.sigmoid(self.l2(h))
            out = self.l3(h)
        return F.cross_entropy(out.float(), y)


class _Frozen(nn.Module):
    """Frozen base weights with LoRA adapters, and a frozen embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.base = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))
        self.la = nn.ParameterList(nn.Parameter(torch.randn(32, 4) * 0.1) for _ in range(2))
        self.lb = nn.ParameterList(nn.Parameter(torch.randn(4, 32) * 0.1) for _ in range(2))
        self.head = nn.Linear(32, V)
        for p in list(self.emb.parameters()) + list(self.base.parameters()):
            p.requires_grad_(False)

    def forward(self, ids):
        h = self.emb(ids)
        for b, a, c in zip(self.base, self.la, self.lb):
            h = h + F.silu(b(h) + h @ a @ c)
        return F.cross_entropy(self.head(h).flatten(0, 1), ids.flatten())


class _ChannelsLast(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.gn = nn.GroupNorm(2, 8)
        self.c2 = nn.Conv2d(8, 16, 1)
        self.head = nn.Linear(16, 10)
        self.to(memory_format=torch.channels_last)

    def forward(self, x, y):
        x = x.contiguous(memory_format=torch.channels_last)
        h = F.hardswish(self.c1(x))
        h = h + F.silu(self.gn(self.dw(h)))
        h = F.max_pool2d(F.relu(self.c2(h)), 2)
        return F.cross_entropy(self.head(h.mean((2, 3))), y)


class _Noise(nn.Module):
    """Random ops in the forward: randn noise, bernoulli stochastic depth, dropout."""

    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        for l in self.l:
            h = torch.tanh(l(x + 0.1 * torch.randn_like(x)))
            keep = torch.empty(x.shape[0], 1).bernoulli_(0.7) / 0.7
            x = x + F.dropout(h, 0.2) * keep
        return x.pow(2).mean()


class _Indexy(nn.Module):
    """topk / sort / cumsum / scatter_add / gather / argmax: integer intermediates saved."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.g = nn.Linear(16, 4)
        self.b = nn.Linear(32, 16)

    def forward(self, x):
        h = F.gelu(self.a(x))
        vals, idx = h.topk(8, dim=-1)
        s, order = h.sort(dim=-1)
        c = s.cumsum(-1).gather(-1, order.argsort(-1))
        r = torch.zeros_like(h).scatter_add(-1, idx, vals.softmax(-1))
        gate = self.g(x).softmax(-1)
        e = gate.argmax(-1)
        w = gate.gather(-1, e[:, None])
        out = self.b(c * 0.01 + r) * w
        out = out.index_add(0, e, out * 0.5)
        return out.pow(2).mean()


class _F64(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32).double()
        self.b = nn.Linear(32, 16)

    def forward(self, x):
        h = torch.sin(self.a(x.double()))
        return self.b(h.float()).pow(2).mean() + h.pow(2).mean().float()


class _InputGrad(nn.Module):
    """The input itself is a parameter-like leaf (adversarial input): x is an nn.Parameter
    so its grad is compared; plus an input mutated in place."""

    def __init__(self):
        super().__init__()
        self.x = nn.Parameter(torch.randn(4, 16))
        self.l = nn.Linear(16, 16)

    def forward(self, y):
        h = torch.tanh(self.l(self.x))
        y.add_(1.0)  # input mutation
        return (h * y).pow(2).mean()


def _hand_written(name: str):
    torch.manual_seed(0)
    if name == "ckpt":
        return _Ckpt(), (torch.randn(4, 8, 32),), lambda m, x: m(x)
    if name == "ckpt_dropout":
        return _CkptDropout(), (torch.randn(4, 8, 32),), lambda m, x: m(x)
    if name == "mha":
        return _MHA(), (_ids(),), lambda m, ids: m(ids)
    if name == "sdpa":
        return _SDPA(), (torch.randn(2, 12, 32),), lambda m, x: m(x)
    if name == "embbag":
        return _EmbBag(), (_ids(4, 6), torch.tensor([0, 5, 11, 17]), torch.tensor([0, 1, 2, 3])), \
            lambda m, i, o, y: m(i, o, y)
    if name == "inplace2":
        return _InPlace2(), (torch.randn(8, 32),), lambda m, x: m(x)
    if name == "buffer_update":
        return _BufferUpdate(), (torch.randn(8, 32),), lambda m, x: m(x)
    if name == "rope_complex":
        return _RopeComplex(), (torch.randn(2, 12, 32),), lambda m, x: m(x)
    if name == "autocast":
        return _Autocast(), (torch.randn(8, 32), torch.randint(0, 8, (8,))), lambda m, x, y: m(x, y)
    if name == "frozen":
        return _Frozen(), (_ids(),), lambda m, ids: m(ids)
    if name == "channels_last":
        return _ChannelsLast(), (torch.randn(2, 3, 16, 16), torch.tensor([1, 2])), lambda m, x, y: m(x, y)
    if name == "noise":
        return _Noise(), (torch.randn(8, 32),), lambda m, x: m(x)
    if name == "indexy":
        return _Indexy(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "f64":
        return _F64(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "input_grad":
        return _InputGrad(), (torch.randn(4, 16),), lambda m, y: m(y)
    raise KeyError(name)


HAND_WRITTEN = ("ckpt", "ckpt_dropout", "mha", "sdpa", "embbag", "inplace2", "buffer_update", "rope_complex",
                "autocast", "frozen", "channels_last", "noise", "indexy", "f64", "input_grad")
MODELS = ["distilbert", "roberta", "deberta_v2", "electra", "whisper", "wav2vec2", "hubert", "convnext", "swin",
          "mobilenet_v2", "efficientnet", "clip_text", "clip_vision", "gpt_neox", "falcon", "phi", "qwen2", "gemma",
          "mistral", "qwen2_moe", "olmoe", "mamba", "gpt2_gc", "gpt2_dropout", "gpt2_gc_dropout",
          *HAND_WRITTEN, "qwen2_dynamic", "sdpa_dynamic"]
RANDOM = ("gpt2_dropout", "gpt2_gc_dropout", "ckpt_dropout", "noise")


def build(name: str):
    """``(module, inputs, loss_fn)`` for a model of this zoo (a ``*_dynamic`` name: the
    same model; corpus_check marks its sequence dimension dynamic)."""
    base = name.removesuffix("_dynamic")
    if base in HAND_WRITTEN:
        return _hand_written(base)
    return _transformers(base)
