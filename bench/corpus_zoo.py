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
place; and a second batch: a UNet (ConvTranspose2d, interpolate, cat skips), DenseNet
blocks, MultiheadAttention with padding masks and kdim/vdim, tied Embedding /
EmbeddingBag (per_sample_weights) / decoder weights, nn.TransformerEncoder, packed RNNs,
CTC with a masked mean, torch.where and in-place index_put_ on intermediates, einsum
bilinear attention, buffers whose pre-mutation values the backward needs, a WaveNet
stack, a multi-output module across a graph break, selective activation checkpointing,
a CNN with a dynamic batch, and a custom autograd.Function and custom_op; and a third
batch for AOTAutograd's edge cases: outputs aliasing each other, the input and a
parameter; inputs (plain, and two overlapping views of one tensor) mutated in place;
no_grad / detach regions with half-frozen layers; torch.cond, map, scan and while_loop
(SCALAR_OUTPUTS); fxremat.checkpoint_name for the name policies; a transformer block
whose sequence length reaches arange / view / masks (tfm_block_dynamic); integer and
bool intermediates; an int graph output; ALBERT's shared layer; parametrizations
(spectral_norm, weight_norm); torch.vmap; rfft with a complex parameter; a jagged
nested tensor input; and a fourth batch: nn.Embedding(max_norm) renormalizing its weight
in place, custom autograd.Functions with mark_dirty / setup_context /
once_differentiable, learnable fake quantization, random draws as indices
(gumbel_softmax hard, multinomial, randint) and reparameterized sampling with SDPA
dropout, linear algebra with gradients (cholesky, solve, qr, eigh, svd, cdist), a
spatial transformer (affine_grid, grid_sample, unfold / fold, pixel_shuffle), conv3d
with trilinear upsampling, stft / istft with bucketize / searchsorted, checkpoint
variants (no RNG state, tuple and dict outputs, nested), saved-tensor hooks, gradient
hooks on intermediates, bf16 / fp16 parameters, a loss that leaves parameters without
gradients, a 40-layer narrow MLP and a 4096-wide one; and a sixth batch: XLNet (two-stream
attention with perm_mask / target_mapping), Reformer (LSH and local attention, reversible
layers), BLOOM (ALiBi; also with a dynamic length), FNet (FFT mixing), Funnel (pooling),
RWKV, SegFormer, Longformer (sliding chunks), a graph attention network (segment softmax
by scatter_reduce / index_add), a capsule net with dynamic routing, an unrolled RK4 neural
ODE, a PixelCNN with masked convs, flex_attention with a score_mod parameter and a block
mask, buffers mutated through views, a weight tied across three modules with an int8
dequantized linear and a qint8 round trip, 50 tiny LayerNorm+GELU layers, a sparse
embedding gradient and a torch.func.grad gradient penalty; and a seventh batch: ViTMAE
(random masking by argsort / gather of a given noise, its unshuffle), ESM (token dropout
rescaling, rotary), CANINE (hashed character embeddings, strided-conv downsampling,
repeat-interleave upsampling), LeViT (attention biases gathered from an index table,
BatchNorm on linears), Nystromformer (landmark means, iterative pseudo-inverse), ConvNeXt
V2 (global response norm), Mamba2 (chunked SSD scan: segment sums, exp of a masked
cumsum), Autoformer (series decomposition, FFT autocorrelation with top-k delays,
Student-t NLL), Informer (ProbSparse attention sampling keys at random, distilling convs),
PatchTST (patching, std scaling, BatchNorm), RecurrentGemma (RG-LRU scan, local
attention), DeepSeek-V3 (latent attention, group-limited top-k routing), gpt-oss
(attention sinks, clamped SwiGLU experts), and hand-written: ``.item()`` as a size (an
unbacked SymInt), nonzero / masked_select routing (DYNAMIC_OUTPUT_SHAPES), torch.func.jvp
in the loss, a MAML inner step (functional_call + torch.func.grad), SDPA with enable_gqa
and bool / float masks, nn.Transformer's decoder with causal and padding masks, custom
ops that mutate their arguments, and two micro-batches accumulated in one step; and an
eighth batch: Gemma2 (tanh soft-capping of attention and final logits, eager attention),
Qwen3-MoE (the router's load-balancing loss in the loss), Cohere (parallel attention and
MLP, interleaved rotary, per-head q / k LayerNorm), GraniteMoE (embedding / residual /
attention / logits multipliers, 3-D expert weights), DBRX (clamped q, k, v; an experts loop
that breaks the graph), Jamba (a Mamba layer beside an attention layer with experts),
Zamba2 (a shared transformer block with LoRA adapters on the hidden state concatenated with
the embeddings, Mamba2), Qwen3-Next (a gated DeltaNet layer: the chunked gated delta rule),
GPTBigCode (multi-query attention), Phi-3 (LongRoPE factors), BEiT (a relative position
bias table, layer scale, mean pooling), DINOv2 (position embeddings resized bicubically,
SwiGLU), SigLIP (the sigmoid contrastive loss, a MultiheadAttention pooling head),
ConvBERT (span-based dynamic convolution), SqueezeBERT (grouped Conv1d for the linears)
and LayoutLMv3 (text boxes' 2-D embeddings and relative position buckets with image
patches). Every model is built from a config with random weights at test size (no
download).

``build(name)`` returns ``(module, inputs, loss_fn)`` as corpus_check's own builders do;
``MODELS`` lists what corpus_check runs by default; ``RANDOM`` names the models whose
forward draws random numbers, compared with PyTorch's own compiled backend under the
same seed rather than with eager (whose draws differ); ``SCALAR_OUTPUTS`` and
``DYNAMIC_OUTPUT_SHAPES`` the models built with Dynamo's capture_scalar_outputs and
capture_dynamic_output_shape_ops.
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
    if name == "xlnet":
        m = tf.XLNetLMHeadModel(tf.XLNetConfig(vocab_size=V, d_model=32, n_layer=2, n_head=2, d_inner=64,
                                               dropout=0.0, mem_len=None, attn_type="bi"))
        ids = _ids(s=10)
        perm = torch.zeros(2, 10, 10)
        perm[:, :, -2:] = 1.0  # no position sees the last two tokens: they are predicted
        tmap = torch.zeros(2, 2, 10)
        tmap[:, 0, -2] = 1.0
        tmap[:, 1, -1] = 1.0
        return m, (ids, perm, tmap, ids[:, -2:].clone()), \
            lambda m, i, p, t, lab: F.cross_entropy(m(input_ids=i, perm_mask=p, target_mapping=t).logits.flatten(0, 1),
                                                    lab.flatten())
    if name == "reformer":
        # hash_seed: in training LSH attention draws its random rotations after
        # torch.manual_seed(torch.seed()) (a nondeterministic seed, for the reversible
        # layers' replay), so without a fixed hash seed two eager steps differ.
        return _lm(tf.ReformerModelWithLMHead(tf.ReformerConfig(
            vocab_size=V, hidden_size=32, num_attention_heads=2, attention_head_size=16, axial_pos_embds=False,
            attn_layers=["local", "lsh"], feed_forward_size=64, local_attn_chunk_length=4, lsh_attn_chunk_length=4,
            num_buckets=4, num_hashes=1, max_position_embeddings=16, is_decoder=True, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, local_attention_probs_dropout_prob=0.0,
            lsh_attention_probs_dropout_prob=0.0, pad_token_id=0, eos_token_id=2, hash_seed=7)), s=16)
    if name == "bloom":
        return _lm(tf.BloomForCausalLM(tf.BloomConfig(vocab_size=V, hidden_size=32, n_layer=2, n_head=4,
                                                      hidden_dropout=0.0, attention_dropout=0.0)))
    if name == "fnet":
        return _lm(tf.FNetForMaskedLM(tf.FNetConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                    intermediate_size=64, max_position_embeddings=32,
                                                    hidden_dropout_prob=0.0, use_tpu_fourier_optimizations=False)))
    if name == "funnel":
        return _lm(tf.FunnelForMaskedLM(tf.FunnelConfig(vocab_size=V, block_sizes=[1, 1], num_decoder_layers=1,
                                                        d_model=32, n_head=2, d_head=16, d_inner=64,
                                                        hidden_dropout=0.0, attention_dropout=0.0,
                                                        activation_dropout=0.0, max_position_embeddings=32)))
    if name == "rwkv":
        return _lm(tf.RwkvForCausalLM(tf.RwkvConfig(vocab_size=V, context_length=16, hidden_size=32,
                                                    num_hidden_layers=2, attention_hidden_size=32,
                                                    intermediate_size=64)), s=8)
    if name == "segformer":
        m = tf.SegformerForSemanticSegmentation(tf.SegformerConfig(
            num_channels=3, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0,
            drop_path_rate=0.0, decoder_hidden_size=32, num_labels=5))
        return m, (torch.randn(2, 3, 32, 32), torch.randint(0, 5, (2, 32, 32))), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "longformer":
        return _lm(tf.LongformerForMaskedLM(tf.LongformerConfig(
            vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            attention_window=4, max_position_embeddings=40, pad_token_id=1, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)), s=16)
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
    if name == "vit_mae":
        # The masking noise is an input (ViTMAE draws it with torch.rand when it is not):
        # the argsort / gather shuffle and its unshuffle are then deterministic.
        m = tf.ViTMAEForPreTraining(tf.ViTMAEConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
            intermediate_size=64, decoder_hidden_size=32, decoder_num_hidden_layers=1, decoder_num_attention_heads=2,
            decoder_intermediate_size=64, mask_ratio=0.5, norm_pix_loss=True, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0))
        return m, (torch.randn(2, 3, 16, 16), torch.rand(2, 16)), \
            lambda m, px, noise: m(pixel_values=px, noise=noise).loss
    if name == "esm":
        m = tf.EsmForMaskedLM(tf.EsmConfig(vocab_size=33, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                           intermediate_size=64, max_position_embeddings=32,
                                           position_embedding_type="rotary", token_dropout=True, mask_token_id=32,
                                           pad_token_id=1, hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0))
        ids = torch.randint(4, 32, (2, 12))
        ids[0, 3] = ids[1, 5] = 32  # masked tokens: token dropout zeroes and rescales them
        ids[1, 10:] = 1  # padding
        return m, (ids,), lambda m, ids: m(input_ids=ids, attention_mask=(ids != 1).long(), labels=ids).loss
    if name == "canine":
        m = tf.CanineForSequenceClassification(tf.CanineConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=64, downsampling_rate=4, upsampling_kernel_size=4, num_hash_functions=4,
            num_hash_buckets=64, local_transformer_stride=8, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, num_labels=3))
        return m, (torch.randint(0, 5000, (2, 16)), torch.tensor([0, 2])), \
            lambda m, ids, lab: m(input_ids=ids, labels=lab).loss
    if name == "levit":
        m = tf.LevitForImageClassification(tf.LevitConfig(
            image_size=32, num_channels=3, kernel_size=3, stride=2, padding=1, patch_size=16, hidden_sizes=[32, 48],
            num_attention_heads=[2, 3], depths=[1, 1], key_dim=[8, 8], drop_path_rate=0, mlp_ratio=[2, 2],
            attention_ratio=[2, 2], down_ops=[["Subsample", 8, 32 // 8, 4, 2, 2]], num_labels=10))
        return m, (torch.randn(2, 3, 32, 32), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "nystromformer":
        # Through the embeddings, encoder and head, without NystromformerModel.forward: it
        # builds a 4-D (b, 1, s, s) padding mask, which eager drops when it is all ones but
        # a compiled forward keeps, and the landmark scores (b, h, landmarks, s) it is added
        # to do not broadcast with it (transformers 5.23, under PyTorch's partitioners too).
        m = tf.NystromformerForMaskedLM(tf.NystromformerConfig(
            vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=40, segment_means_seq_len=16, num_landmarks=4, conv_kernel_size=3,
            inv_coeff_init_option=False, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))

        def loss(m, ids):
            h = m.nystromformer.encoder(m.nystromformer.embeddings(input_ids=ids)).last_hidden_state
            return F.cross_entropy(m.cls(h).flatten(0, 1), ids.flatten())

        return m, (_ids(s=16),), loss
    if name == "convnextv2":
        m = tf.ConvNextV2ForImageClassification(tf.ConvNextV2Config(
            num_channels=3, patch_size=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, drop_path_rate=0.0,
            num_stages=2, image_size=16))
        return m, (torch.randn(2, 3, 16, 16), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "mamba2":
        return _lm(tf.Mamba2ForCausalLM(tf.Mamba2Config(vocab_size=V, hidden_size=32, state_size=8, num_heads=8,
                                                        head_dim=8, n_groups=1, expand=2, conv_kernel=4,
                                                        num_hidden_layers=2, chunk_size=4)), s=8)
    if name in ("autoformer", "informer"):
        kw = dict(prediction_length=4, context_length=8, lags_sequence=[1, 2], input_size=1, num_time_features=1,
                  d_model=16, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                  encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0, attention_dropout=0.0,
                  activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0, scaling="mean")
        if name == "autoformer":
            m = tf.AutoformerForPrediction(tf.AutoformerConfig(encoder_layers=1, moving_average=3, label_length=4,
                                                               autocorrelation_factor=1, **kw))
        else:
            # ProbSparse attention samples keys with torch.randint in every forward (RANDOM).
            m = tf.InformerForPrediction(tf.InformerConfig(encoder_layers=2, attention_type="prob", sampling_factor=1,
                                                           distil=True, **kw))
        past = 8 + 2  # context_length + max(lags_sequence)
        return m, (torch.randn(2, past).abs() + 1, torch.randn(2, past, 1), torch.ones(2, past),
                   torch.randn(2, 4, 1), torch.randn(2, 4).abs() + 1), \
            lambda m, pv, pt, po, ft, fv: m(past_values=pv, past_time_features=pt, past_observed_mask=po,
                                           future_time_features=ft, future_values=fv).loss
    if name == "patchtst":
        m = tf.PatchTSTForPrediction(tf.PatchTSTConfig(
            num_input_channels=3, context_length=16, patch_length=4, patch_stride=4, prediction_length=4, d_model=16,
            num_hidden_layers=2, num_attention_heads=2, ffn_dim=32, dropout=0.0, attention_dropout=0.0,
            ff_dropout=0.0, positional_dropout=0.0, path_dropout=0.0, head_dropout=0.0, scaling="std",
            norm_type="batchnorm"))
        return m, (torch.randn(2, 16, 3), torch.randn(2, 4, 3)), \
            lambda m, pv, fv: m(past_values=pv, future_values=fv).loss
    if name == "recurrent_gemma":
        return _lm(tf.RecurrentGemmaForCausalLM(tf.RecurrentGemmaConfig(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=1, head_dim=8, lru_width=32, attention_window_size=8, conv1d_width=4,
            block_types=["recurrent", "recurrent", "attention"], partial_rotary_factor=0.5)), s=8)
    if name == "deepseek_v3":
        return _lm(tf.DeepseekV3ForCausalLM(tf.DeepseekV3Config(
            vocab_size=V, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
            num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, kv_lora_rank=16,
            q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, max_position_embeddings=32,
            rope_scaling=None)))
    if name == "gpt_oss":
        return _lm(tf.GptOssForCausalLM(tf.GptOssConfig(
            vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
            max_position_embeddings=32, rope_scaling=None, layer_types=["sliding_attention", "full_attention"])))
    # -- eighth batch --
    if name == "gemma2":
        # Eager attention: soft-capping (tanh) of the attention logits exists only there
        # (SDPA has no score hook); the final logits soft-capped too; a sliding-window layer
        # with pre- and post-norms around attention and MLP. One layer: Inductor's compile
        # time grows with the depth and a second layer reaches no other code.
        return _lm(tf.Gemma2ForCausalLM(tf.Gemma2Config(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, max_position_embeddings=32, sliding_window=4,
            layer_types=["sliding_attention"], attn_logit_softcapping=5.0,
            final_logit_softcapping=3.0, query_pre_attn_scalar=8, attn_implementation="eager")))
    if name == "qwen3_moe":
        # output_router_logits: the load-balancing auxiliary loss joins the LM loss.
        m = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
            vocab_size=V, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=1,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
            norm_topk_prob=True, decoder_sparse_step=1, max_position_embeddings=32, output_router_logits=True,
            router_aux_loss_coef=0.1))
        return m, (_ids(),), lambda m, ids: m(input_ids=ids, labels=ids, output_router_logits=True).loss
    if name == "cohere":
        # Attention and MLP in parallel off one LayerNorm (no bias), interleaved rotary
        # (repeat_interleave), per-head LayerNorm of q and k, scaled logits.
        return _lm(tf.CohereForCausalLM(tf.CohereConfig(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, logit_scale=0.5, use_qk_norm=True)))
    if name == "granitemoe":
        # Embedding / residual / attention / logits multipliers; a softmax over the top-k
        # router logits; the experts' 3-D weights through transformers' experts interface
        # (one graph, where DBRX's per-expert loop breaks it).
        return _lm(tf.GraniteMoeForCausalLM(tf.GraniteMoeConfig(
            vocab_size=V, hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=32,
            embedding_multiplier=4.0, residual_multiplier=0.5, attention_multiplier=0.25, logits_scaling=2.0)))
    if name == "dbrx":
        # q, k, v clamped (clip_qkv: clamp's masked backward); the experts loop breaks
        # Dynamo's graph (several partitions).
        return _lm(tf.DbrxForCausalLM(tf.DbrxConfig(
            d_model=32, n_heads=4, n_layers=1, max_seq_len=32, vocab_size=V, resid_pdrop=0.0, emb_pdrop=0.0,
            attn_config={"kv_n_heads": 2, "clip_qkv": 0.5, "attn_pdrop": 0.0, "rope_theta": 10000.0},
            ffn_config={"ffn_hidden_size": 32, "moe_num_experts": 4, "moe_top_k": 2, "moe_jitter_eps": None,
                        "moe_normalize_expert_weights": 1.0})))
    if name == "jamba":
        # Layer 0: Mamba (with layer norms on dt, B and C) and a dense MLP; layer 1:
        # attention and a mixture of experts. use_mamba_kernels is ignored by transformers
        # 5.23; without mamba-ssm / causal-conv1d installed the PyTorch scan runs.
        return _lm(tf.JambaForCausalLM(tf.JambaConfig(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, expert_layer_period=2,
            expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1, use_mamba_kernels=False,
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=4, max_position_embeddings=32)), s=8)
    if name == "zamba2":
        # One hybrid layer: the shared transformer block (on the hidden state concatenated
        # with the input embeddings, LoRA adapters on its projections) and a Mamba2 layer
        # (the PyTorch chunked scan: mamba-ssm is not installed).
        return _lm(tf.Zamba2ForCausalLM(tf.Zamba2Config(
            vocab_size=V, hidden_size=32, num_hidden_layers=1, layers_block_type=["hybrid"],
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=1, n_mamba_heads=4, chunk_size=4,
            use_mamba_kernels=False, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
            num_mem_blocks=1, use_shared_attention_adapter=True, adapter_rank=4, use_mem_rope=True,
            max_position_embeddings=32)), s=8)
    if name == "qwen3_next":
        # A gated DeltaNet layer (linear attention: the torch chunked gated delta rule,
        # causal conv1d, gated RMSNorm) with a shared-expert MoE (use_cache=False: a cache
        # of linear-attention layers alone cannot tell the model its length).
        return _lm(tf.Qwen3NextForCausalLM(tf.Qwen3NextConfig(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, head_dim=8, linear_conv_kernel_dim=4, linear_key_head_dim=8,
            linear_value_head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, moe_intermediate_size=16,
            shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
            layer_types=["linear_attention"], max_position_embeddings=32, use_cache=False)))
    if name == "gpt_bigcode":
        # Multi-query attention (one key / value head, fused into c_attn).
        return _lm(tf.GPTBigCodeForCausalLM(tf.GPTBigCodeConfig(
            vocab_size=V, n_embd=32, n_layer=1, n_head=4, n_positions=32, multi_query=True, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0)))
    if name == "phi3":
        # LongRoPE: a sequence longer than original_max_position_embeddings takes the long factors.
        return _lm(tf.Phi3ForCausalLM(tf.Phi3Config(
            vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, original_max_position_embeddings=8,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": [1.0, 1.1, 1.2, 1.3],
                             "long_factor": [1.0, 2.0, 4.0, 8.0]},
            resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0, pad_token_id=0)))
    if name == "beit":
        m = tf.BeitForImageClassification(tf.BeitConfig(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, use_relative_position_bias=True, use_mean_pooling=True, layer_scale_init_value=0.1,
            drop_path_rate=0.0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=10))
        return m, (torch.randn(2, 3, 16, 16), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "dinov2":
        # 24x24 images on a 16x16 config: the position embeddings are resized (bicubic).
        m = tf.Dinov2ForImageClassification(tf.Dinov2Config(
            image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            mlp_ratio=2, layerscale_value=0.1, use_swiglu_ffn=True, drop_path_rate=0.0, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0, num_labels=10))
        return m, (torch.randn(2, 3, 24, 24), torch.tensor([1, 7])), \
            lambda m, px, lab: m(pixel_values=px, labels=lab).loss
    if name == "siglip":
        # Sigmoid contrastive loss (learned scale and bias); the vision tower's attention
        # pooling head is an nn.MultiheadAttention.
        m = tf.SiglipModel(tf.SiglipConfig(
            text_config=dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, max_position_embeddings=16),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                               image_size=16, patch_size=4)))
        return m, (_ids(s=8), torch.randn(2, 3, 16, 16)), \
            lambda m, ids, px: m(input_ids=ids, pixel_values=px, return_loss=True).loss
    if name == "convbert":
        # Span-based dynamic convolution (unfold of the values, a kernel per position
        # from a depthwise-separable conv) beside half the heads' attention; grouped FFN.
        return _lm(tf.ConvBertForMaskedLM(tf.ConvBertConfig(
            vocab_size=V, embedding_size=16, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, head_ratio=2, conv_kernel_size=3, num_groups=2, max_position_embeddings=32,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)))
    if name == "squeezebert":
        # Grouped 1x1 Conv1d in place of every linear, on (batch, channels, length).
        return _lm(tf.SqueezeBertForMaskedLM(tf.SqueezeBertConfig(
            vocab_size=V, hidden_size=32, embedding_size=32, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=64, q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
            intermediate_groups=2, output_groups=2, max_position_embeddings=32, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)))
    if name == "layoutlmv3":
        # Text tokens with boxes (2-D position embeddings, 1-D and 2-D relative position
        # buckets) and image patches in one sequence; token classification on the text.
        m = tf.LayoutLMv3ForTokenClassification(tf.LayoutLMv3Config(
            vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=40, max_2d_position_embeddings=64, coordinate_size=4, shape_size=8,
            rel_pos_bins=8, max_rel_pos=16, rel_2d_pos_bins=8, max_rel_2d_pos=32, input_size=16, patch_size=4,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0, num_labels=3))
        g = torch.Generator().manual_seed(1)
        xy = torch.randint(0, 40, (2, 10, 2), generator=g)
        bbox = torch.cat([xy, xy + torch.randint(1, 20, (2, 10, 2), generator=g)], -1)
        return m, (_ids(s=10), bbox, torch.randn(2, 3, 16, 16), torch.randint(0, 3, (2, 10))), \
            lambda m, ids, bb, px, lab: m(input_ids=ids, bbox=bb, pixel_values=px, labels=lab).loss
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
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool, device=ids.device), 1)
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
            keep = torch.empty(x.shape[0], 1, device=x.device).bernoulli_(0.7) / 0.7
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


# ------------------------------------------------- more hand-written models (second batch)
class _UNet(nn.Module):
    """A two-level UNet: strided and pooled downsampling, ConvTranspose2d and
    F.interpolate (bilinear and nearest) upsampling, torch.cat skip connections,
    GroupNorm."""

    def __init__(self):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.e2 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
        self.mid = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.GroupNorm(4, 32), nn.SiLU())
        self.up1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.d1 = nn.Sequential(nn.Conv2d(32, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU())
        self.d2 = nn.Sequential(nn.Conv2d(24, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.SiLU())
        self.out = nn.Conv2d(8, 4, 1)

    def forward(self, x, y):
        s1 = self.e1(x)  # 16x16
        s2 = self.e2(s1)  # 8x8
        m = self.mid(F.max_pool2d(s2, 2))  # 4x4
        u = self.d1(torch.cat([self.up1(m), s2], 1))  # 8x8
        u = F.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False)
        u = self.d2(torch.cat([u, s1], 1)) + F.interpolate(s2[:, :8], size=(16, 16), mode="nearest")
        return F.cross_entropy(self.out(u), y)


class _DenseNet(nn.Module):
    """DenseNet blocks: each layer's BN-ReLU-conv output concatenated onto all before it
    (repeated torch.cat), BatchNorm in training mode, a transition with avg_pool2d."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layers1 = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(8 + 4 * i), nn.ReLU(),
                                                   nn.Conv2d(8 + 4 * i, 4, 3, padding=1)) for i in range(4))
        self.trans = nn.Sequential(nn.BatchNorm2d(24), nn.ReLU(), nn.Conv2d(24, 12, 1))
        self.layers2 = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(12 + 4 * i), nn.ReLU(),
                                                   nn.Conv2d(12 + 4 * i, 4, 3, padding=1)) for i in range(3))
        self.head = nn.Linear(24, 10)

    def forward(self, x, y):
        h = self.stem(x)
        for l in self.layers1:
            h = torch.cat([h, l(h)], 1)
        h = F.avg_pool2d(self.trans(h), 2)
        for l in self.layers2:
            h = torch.cat([h, l(h)], 1)
        return F.cross_entropy(self.head(F.adaptive_avg_pool2d(h, 1).flatten(1)), y)


class _MHAMasks(nn.Module):
    """nn.MultiheadAttention with a key_padding_mask and an attn_mask (self-attention,
    need_weights=False), and a cross-attention with kdim/vdim != embed_dim whose per-head
    weights (average_attn_weights=False) enter the loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.self_attn = nn.MultiheadAttention(32, 4, batch_first=True)
        self.cross = nn.MultiheadAttention(32, 2, batch_first=True, kdim=16, vdim=24)
        self.ln1 = nn.LayerNorm(32)
        self.ln2 = nn.LayerNorm(32)
        self.out = nn.Linear(32, V)

    def forward(self, ids, lengths, mem_k, mem_v):
        b, s = ids.shape
        h = self.emb(ids)
        pad = torch.arange(s)[None, :] >= lengths[:, None]  # True: padding (never key 0)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        a, _ = self.self_attn(h, h, h, key_padding_mask=pad, attn_mask=causal, need_weights=False)
        h = self.ln1(h + a)
        c, w = self.cross(h, mem_k, mem_v, need_weights=True, average_attn_weights=False)
        h = self.ln2(h + c)
        logits = self.out(h)
        ce = F.cross_entropy(logits.flatten(0, 1), ids.flatten(), reduction="none").view(b, s)
        keep = (~pad).float()
        return (ce * keep).sum() / keep.sum() + w.pow(2).mean()


class _TiedBag(nn.Module):
    """Weight tying: an Embedding, an EmbeddingBag (mode sum, per_sample_weights computed
    in the graph) and the output projection share one weight."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.bag = nn.EmbeddingBag(V, 16, mode="sum")
        self.bag.weight = self.emb.weight
        self.gate = nn.Linear(16, 1)
        self.mix = nn.Linear(32, 16)
        self.dec = nn.Linear(16, V, bias=False)
        self.dec.weight = self.emb.weight

    def forward(self, ids, ctx, offsets):
        h = self.emb(ids)  # (b, s, 16)
        psw = torch.sigmoid(self.gate(self.emb(ctx)).squeeze(-1))  # weights of the bag's entries
        bag = self.bag(ctx, offsets, per_sample_weights=psw)  # (b, 16)
        h = torch.tanh(self.mix(torch.cat([h, bag[:, None].expand_as(h)], -1)))
        return F.cross_entropy(self.dec(h).flatten(0, 1), ids.roll(-1, 1).flatten())


class _TfmEncoder(nn.Module):
    """PyTorch's own nn.TransformerEncoder (pre-norm, GELU, dropout 0) with a causal mask
    and a key padding mask, a final LayerNorm."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(32), enable_nested_tensor=False)
        self.out = nn.Linear(32, V)

    def forward(self, ids, lengths):
        s = ids.shape[1]
        pad = torch.arange(s)[None, :] >= lengths[:, None]
        mask = nn.Transformer.generate_square_subsequent_mask(s)
        h = self.enc(self.emb(ids), mask=mask, src_key_padding_mask=pad.float() * -1e4, is_causal=True)
        return F.cross_entropy(self.out(h).flatten(0, 1), ids.flatten())


class _PackedRNN(nn.Module):
    """A GRU and an LSTM over pack_padded_sequence'd batches (unsorted lengths). Dynamo
    does not trace pack_padded_sequence (torch.nn is skip-listed) nor, without allow_rnn
    (corpus_check sets it for lstm and gru only), the RNNs: the partition sees the
    embedding and the head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.gru = nn.GRU(16, 16, batch_first=True)
        self.lstm = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
        self.head = nn.Linear(48, 3)

    def forward(self, ids, lengths, y):
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        x = torch.tanh(self.emb(ids))
        p = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        o, hg = self.gru(p)
        o, _ = pad_packed_sequence(o, batch_first=True, total_length=ids.shape[1])
        p2 = pack_padded_sequence(o * 2, lengths, batch_first=True, enforce_sorted=False)
        _, (hl, _) = self.lstm(p2)
        feat = torch.cat([hg[-1], hl[0], hl[1]], -1)
        return F.cross_entropy(self.head(feat), y)


class _CTC(nn.Module):
    """A conv + linear acoustic model under CTC loss with reduction='none', then a
    per-utterance normalisation and masked mean over the batch. Dynamo breaks the graph
    at the loss (torch 2.13: aten._ctc_loss has no meta kernel, "output shape depends on
    input Tensor data", with tensor or int lengths alike): the loss itself runs eagerly,
    the partitions see the model before it and the masked mean after it."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(8, 16, 3, padding=1)
        self.lin = nn.Linear(16, 6)

    def forward(self, feats, targets, in_lens, tgt_lens, weights):
        h = F.gelu(self.conv(feats.transpose(1, 2))).transpose(1, 2)  # (b, t, 16)
        logp = self.lin(h).log_softmax(-1).transpose(0, 1)  # (t, b, c)
        loss = F.ctc_loss(logp, targets, in_lens, tgt_lens, blank=0, reduction="none", zero_infinity=True)
        loss = loss / tgt_lens.clamp(min=1)
        keep = weights > 0
        return torch.where(keep, loss * weights, 0.0).sum() / keep.sum()


class _WhereInPlace(nn.Module):
    """torch.where with Python scalars, and in-place clamp_, masked_fill_, index_put_
    (accumulating and not) on intermediates."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 8)

    def forward(self, x):
        h = self.a(x)
        h = torch.where(h > 0, h, 0.1 * h)  # leaky relu via where
        g = self.b(h) * 2.0
        g.clamp_(-1.5, 1.5)
        g.masked_fill_(h.abs() < 0.05, 0.0)
        rows = torch.tensor([0, 1, 1, 3, 5])
        cols = torch.tensor([2, 3, 3, 7, 31])
        g.index_put_((rows, cols), h[rows, cols] * 3.0, accumulate=True)
        g[torch.tensor([2, 4]), :4] = torch.tanh(h[:2, :4])
        t = torch.where(g > 1.0, 1.0, torch.where(g < -1.0, -1.0, g.sin()))
        return self.c(t).pow(2).mean()


class _EinsumBilinear(nn.Module):
    """Einsum everywhere: projections, bilinear attention scores q W k, a contraction with
    three operands, a batched dot, and nn.Bilinear."""

    def __init__(self):
        super().__init__()
        self.wq = nn.Parameter(torch.randn(4, 16, 8) * 0.2)
        self.wk = nn.Parameter(torch.randn(4, 16, 8) * 0.2)
        self.wv = nn.Parameter(torch.randn(4, 16, 8) * 0.2)
        self.bil = nn.Parameter(torch.randn(4, 8, 8) * 0.2)
        self.wo = nn.Parameter(torch.randn(4, 8, 16) * 0.2)
        self.pair = nn.Bilinear(16, 16, 4)

    def forward(self, x):
        q = torch.einsum("bsd,hde->bhse", x, self.wq)
        k = torch.einsum("bsd,hde->bhse", x, self.wk)
        v = torch.einsum("bsd,hde->bhse", x, self.wv)
        scores = torch.einsum("bhse,hef,bhtf->bhst", q, self.bil, k) / 8 ** 0.5
        a = torch.einsum("bhst,bhte->bhse", scores.softmax(-1), v)
        o = torch.einsum("bhse,hef->bsf", a, self.wo)
        y = x + o
        dots = torch.einsum("bsd,bsd->bs", y, x)
        p = self.pair(y, x.flip(1))
        return p.pow(2).mean() + dots.tanh().mean() + torch.einsum("bii->b", scores[:, 0]).pow(2).mean()


class _BufferCounter(nn.Module):
    """Buffers mutated in the forward whose values the backward needs: a scale multiplied
    in before its in-place update (the gradient needs the old value: a clone of the buffer,
    which a partition must not recompute from the mutated buffer) and after (the new one),
    a float step counter for an Adam-style bias correction, and a ring buffer rolled and
    written through an index. Inductor's joint-graph remove_noop_ops erases the clone
    before partitioning, and a saved buffer is overwritten before the backward reads it:
    PyTorch's partitions get the gradient of l1 wrong (3.0e-3 from eager, torch 2.13;
    its min cut also recomputes the clone and the new scale from the mutated buffers,
    under aot_eager too). fxremat saves a copy taken before the write (Note [Snapshots of
    mutated inputs], passes/protect_mutations.h); before that it was 8.8e-5 off."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.l2 = nn.Linear(32, 8)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 32))
        self.register_buffer("ema", torch.zeros(32))
        self.register_buffer("count", torch.zeros(()))
        self.register_buffer("ring", torch.zeros(4, 8))

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        g = h * self.scale.clone()  # old scale (eager needs the clone: scale changes below)
        with torch.no_grad():
            self.count.add_(1.0)
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
            self.scale.mul_(1.0 + 0.1 * self.ema.abs())
            self.ring.copy_(self.ring.roll(1, 0))
            self.ring[0] = h.mean(0)[:8]
        corr = self.ema / (1.0 - torch.pow(0.9, self.count))
        g = g * self.scale + h * corr  # new scale, new ema
        return self.l2(g).pow(2).mean() + (self.l2(g)[:, :8] * self.ring.mean(0)).mean()


class _WaveNet(nn.Module):
    """Dilated causal Conv1d stack (left padding with F.pad), tanh * sigmoid gated
    activations, residual and skip 1x1 convs, per-step classification."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(1, 16, 1)
        self.filt = nn.ModuleList(nn.Conv1d(16, 16, 2, dilation=d) for d in (1, 2, 4, 8))
        self.gate = nn.ModuleList(nn.Conv1d(16, 16, 2, dilation=d) for d in (1, 2, 4, 8))
        self.res = nn.ModuleList(nn.Conv1d(16, 16, 1) for _ in range(4))
        self.skip = nn.ModuleList(nn.Conv1d(16, 16, 1) for _ in range(4))
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(16, 16, 1), nn.ReLU(), nn.Conv1d(16, 8, 1))

    def forward(self, x, y):
        h = self.inp(x)
        skips = 0
        for i, d in enumerate((1, 2, 4, 8)):
            p = F.pad(h, (d, 0))
            z = torch.tanh(self.filt[i](p)) * torch.sigmoid(self.gate[i](p))
            skips = skips + self.skip[i](z)
            h = h + self.res[i](z)
        return F.cross_entropy(self.out(skips), y)


class _MultiOut(nn.Module):
    """A module with three outputs: the loss uses one, another only through argmax
    (no gradient), the third not at all; a graph break after the call makes all three
    outputs of the first graph."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.GELU())
        self.h1 = nn.Linear(32, 4)
        self.h2 = nn.Linear(32, 4)
        self.h3 = nn.Linear(32, 8)

    def forward(self, x):
        t = self.trunk(x)
        return self.h1(t), self.h2(t).tanh(), self.h3(t) * t[:, :8]


def _multi_out_loss(m, x, y):
    a, b, c = m(x)
    torch._dynamo.graph_break()
    acc = (b.argmax(-1) == y).float().mean()
    return F.cross_entropy(a, y) + acc


class _SAC(nn.Module):
    """Selective activation checkpointing: torch.utils.checkpoint with a context_fn whose
    policy saves every aten.mm and prefers to recompute everything else."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln=nn.LayerNorm(32), up=nn.Linear(32, 64), down=nn.Linear(64, 32))) for _ in range(3))
        self.w = nn.Parameter(torch.randn(32, 32) * 0.1)

    @staticmethod
    def _policy(ctx, op, *args, **kwargs):
        from torch.utils.checkpoint import CheckpointPolicy

        return CheckpointPolicy.MUST_SAVE if op == torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    def _blk(self, b, x):
        h = F.gelu(b["up"](b["ln"](x)))
        return b["down"](h) + torch.sin(x.flatten(0, 1) @ self.w).view_as(x)

    def forward(self, x):
        import functools

        from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

        ctx = functools.partial(create_selective_checkpoint_contexts, self._policy)
        for b in self.blocks:
            x = x + checkpoint(self._blk, b, x, use_reentrant=False, context_fn=ctx)
        return x.pow(2).mean()


class _CNNDyn(nn.Module):
    """A small CNN taking its batch as dimension 1 (the dimension the *_dynamic entries
    mark dynamic): images (1, B, 3, H, W), labels (1, B). (Images (3, B, H, W) transposed
    in the forward, or a dynamic height and width, fail PyTorch's own Inductor under
    dynamic shapes, torch 2.13: "cannot determine truth value of Relational: 3*s18**2 <
    3*s18" in get_stride_order; so the builder marks every other image dimension static.)"""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.head = nn.Linear(16, 10)

    def forward(self, x, y):
        h = F.relu(self.bn(self.c1(x[0])))
        h = F.max_pool2d(F.silu(self.c2(h)), 2)
        return F.cross_entropy(self.head(h.mean((2, 3))), y[0])


class _ScaledSwish(torch.autograd.Function):
    """A custom autograd.Function: saves an input and an intermediate, keeps a Python
    float on ctx, and returns two outputs (the second with its own gradient)."""

    @staticmethod
    def forward(ctx, x, beta):
        s = torch.sigmoid(x * beta)
        ctx.save_for_backward(x, s, beta)
        ctx.scale = 1.5
        return x * s * ctx.scale, s

    @staticmethod
    def backward(ctx, gy, gs):
        x, s, beta = ctx.saved_tensors
        ds = s * (1 - s)
        gx = gy * ctx.scale * (s + x * beta * ds) + gs * beta * ds
        gb = (gy * ctx.scale * x * x * ds + gs * x * ds).sum(0)
        return gx, gb


@torch.library.custom_op("corpus_zoo::rms_scale", mutates_args=())
def _rms_scale(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


@_rms_scale.register_fake
def _(x, w):
    return torch.empty_like(x)


def _rms_scale_setup(ctx, inputs, output):
    x, w = inputs
    ctx.save_for_backward(x, w)


def _rms_scale_backward(ctx, g):
    x, w = ctx.saved_tensors
    r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    n = x * r
    gn = g * w
    gx = r * (gn - n * (gn * n).mean(-1, keepdim=True))
    return gx, (g * n).flatten(0, -2).sum(0)


_rms_scale.register_autograd(_rms_scale_backward, setup_context=_rms_scale_setup)


class _CustomOps(nn.Module):
    """A custom torch.autograd.Function and a torch.library.custom_op with
    register_autograd (an op the partitioner knows only by its schema) between linears."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.beta = nn.Parameter(torch.linspace(0.5, 2.0, 32))
        self.w = nn.Parameter(torch.ones(32) + 0.1 * torch.randn(32))
        self.b = nn.Linear(32, 16)

    def forward(self, x):
        y, s = _ScaledSwish.apply(self.a(x), self.beta)
        h = _rms_scale(y + s, self.w)
        return self.b(h).pow(2).mean() + s.mean()


# ------------------------------------------------- more hand-written models (third batch)
class _AliasOut(nn.Module):
    """Forward outputs that alias: two views of one intermediate (each other's aliases),
    views of the input and the input itself, views of a parameter; a graph break after the
    call makes them outputs of the compiled graph (AOTAutograd regenerates them from their
    bases), and the loss writes one of them in place."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 32)
        self.w = nn.Parameter(torch.randn(32, 8) * 0.2)

    def forward(self, x):
        y = torch.tanh(self.l1(x)) @ self.w
        return y, y[:, :4], y.view(-1), x, x[1:], self.w.t(), self.w[0]


def _alias_out_loss(m, x):
    y, ys, yf, xx, xs, wt, w0 = m(x)
    torch._dynamo.graph_break()
    ys.mul_(2.0)  # in place on an output that is a view of another output
    return (y.pow(2).mean() + yf.tanh().mean() + (xs.sum(0) @ m.l1.weight.t()).mean() * wt.sum()
            + w0.pow(2).sum() * xx.mean())


class _InputMutation(nn.Module):
    """Inputs (not buffers, no grad) mutated by the model: sin(x) feeds a linear (the
    weight's gradient needs sin of x's old value) before x.mul_(2) and a slice write
    x[:, 0] = 0; a second input written through a slice from an intermediate, then
    add_, then read."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(16, 16)
        self.l2 = nn.Linear(16, 16)

    def forward(self, x, y):
        h = self.l1(torch.sin(x))
        x.mul_(2.0)
        x[:, 0] = 0.0
        g = self.l2(torch.cos(x))
        y[:, :2] = h[:, :2].detach()
        y.add_(1.0)
        return (h * g).pow(2).mean() + (torch.tanh(y) * h).mean()


class _AliasedInputs(nn.Module):
    """Two inputs that are overlapping views of one tensor (AOTAutograd's synthetic
    base), both written in place, each write seen by the other; the linear's saved input
    is a product of the pre-write view (to recompute it from the input would read the
    written values)."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, a, b):  # a is base[:, :12], b is base[:, 4:12]
        h = torch.tanh(self.l(b * 1.5))
        a[:, :8].mul_(0.5)
        b.add_(h.detach())
        return (self.l(a[:, :8]) * h).pow(2).mean() + (b * h).mean()


class _NoGradMix(nn.Module):
    """torch.no_grad() regions and detach() inside the forward, a frozen weight with a
    trainable bias, a trainable weight with a frozen bias, and a module used both under
    no_grad and with grad."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 8)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 32))
        self.a.weight.requires_grad_(False)
        self.c.bias.requires_grad_(False)

    def forward(self, x):
        h = self.a(x)
        with torch.no_grad():
            stat = self.b(h).abs().mean(0) + 1.0
            mask = (h > h.mean()).float()
        g = self.b(h * self.scale) / stat
        g = g * mask + g.detach() * (1 - mask) * 0.5
        d = h.detach().pow(2) * 0.1
        return self.c(torch.tanh(g) + d).pow(2).mean()


class _CondBranch(nn.Module):
    """torch.cond on a data-dependent predicate, both branches using parameters (their
    own and a shared one), inside a two-layer loop."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.t = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))
        self.f = nn.ModuleList(nn.Linear(32, 32) for _ in range(2))
        self.shared = nn.Parameter(torch.linspace(0.5, 1.5, 32))
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        h = self.inp(x)
        for t, f in zip(self.t, self.f):
            h = h + torch.cond(h.sum() > 0, lambda z: torch.tanh(t(z)) * self.shared,
                               lambda z: torch.sigmoid(f(z * self.shared)), (h,))
        return self.out(h).pow(2).mean()


class _HopMap(nn.Module):
    """torch._higher_order_ops.map over the leading dimension, the body using
    parameters and a closed-over intermediate (SCALAR_OUTPUTS)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 16)

    def forward(self, x):  # x: (3, 4, 16)
        from torch._higher_order_ops.map import map as hmap

        ctx = torch.tanh(self.a(x.mean(0)))  # (4, 32)
        ys = hmap(lambda xi: self.b(F.gelu(self.a(xi)) * ctx), x)
        return ys.pow(2).mean()


class _ScanRNN(nn.Module):
    """An Elman RNN through torch._higher_order_ops.scan (carry and per-step outputs,
    parameters closed over; SCALAR_OUTPUTS)."""

    def __init__(self):
        super().__init__()
        self.wx = nn.Linear(8, 16)
        self.wh = nn.Parameter(torch.randn(16, 16) * 0.2)
        self.out = nn.Linear(16, 4)

    def forward(self, x, y):  # x: (T, B, 8), y: (B,)
        from torch._higher_order_ops.scan import scan

        xs = self.wx(x)

        def step(h, xt):
            n = torch.tanh(xt + h @ self.wh)
            # (n, n.clone()) or (n, n * 2): "scan might be aliasing the input or the
            # output!" in PyTorch's own Inductor (torch 2.13)
            return n.clone(), n.sin()

        h, ys = scan(step, torch.zeros(x.shape[1], 16), xs)
        return F.cross_entropy(self.out(h), y) + ys.pow(2).mean()


class _WhileLoop(nn.Module):
    """torch._higher_order_ops.while_loop: three iterations of a parameterized update with
    a tensor counter. Its backward selects each iteration's carry at ``counter.item()``:
    an unbacked SymInt with an unbounded range (SCALAR_OUTPUTS), whose int_oo bound the
    encoder could not convert before 46822bf (the backend raised)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.w = nn.Parameter(torch.randn(16, 16) * 0.2)

    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop

        h0 = self.a(x)
        _, h = while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, torch.tanh(h @ self.w) + h),
                          (torch.tensor(0), h0))
        return h.pow(2).mean()


class _NamedCkpt(nn.Module):
    """fxremat.checkpoint_name on an attention block's projections and MLP hidden:
    for the policies that select by name (corpus_check --configs
    policy=save_only_these_names:attn)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln=nn.LayerNorm(32), qkv=nn.Linear(32, 96), o=nn.Linear(32, 32),
            up=nn.Linear(32, 64), down=nn.Linear(64, 32))) for _ in range(2))

    def forward(self, x):
        import fxremat

        b, s, _ = x.shape
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["ln"](x)).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
            q = fxremat.checkpoint_name(q, "q")
            att = fxremat.checkpoint_name((q @ k.transpose(-1, -2) / 8 ** 0.5).softmax(-1), "attn")
            a = (att @ v).transpose(1, 2).reshape(b, s, 32)
            x = x + fxremat.checkpoint_name(blk["o"](a), "attn_out")
            hid = fxremat.checkpoint_name(F.gelu(blk["up"](x)), "mlp")
            x = x + blk["down"](hid)
        return x.pow(2).mean()


class _TfmBlock(nn.Module):
    """A transformer block whose sequence length (symbolic in tfm_block_dynamic) reaches
    view / reshape / arange: sinusoidal positions from arange, a causal and a local-window
    mask from arange comparisons, a padding mask from the input values, masked_fill and
    multiplicative masking, a reshape back to (b*s, d)."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.o = nn.Linear(32, 32)
        self.ln1 = nn.LayerNorm(32)
        self.ln2 = nn.LayerNorm(32)
        self.ff = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        b, s, d = x.shape
        pos = torch.arange(s, dtype=x.dtype, device=x.device)[:, None] / (
            100.0 ** (torch.arange(0, d, 2, dtype=x.dtype, device=x.device) / d))
        x = x + torch.cat([pos.sin(), pos.cos()], -1)[None]
        keep = (x[..., 0] > -1.5).to(x.dtype)  # (b, s): padding from the data
        q, k, v = self.qkv(self.ln1(x)).reshape(b, s, 3, 4, d // 4).permute(2, 0, 3, 1, 4).unbind(0)
        i = torch.arange(s, device=x.device)
        allowed = (i[:, None] >= i[None, :]) & ((i[:, None] - i[None, :]) < 6)
        sc = (q @ k.transpose(-1, -2)) * (d // 4) ** -0.5
        sc = sc.masked_fill(~allowed, float("-inf")) + (keep[:, None, None, :] - 1.0) * 1e4
        a = (sc.softmax(-1) @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(a) * keep[..., None]
        x = x + self.ff(self.ln2(x))
        out = self.head(x.view(b * s, d)).view(b, s, -1)
        return (out.pow(2).mean(-1) * keep).sum() / keep.sum().clamp(min=1.0)


class _IntSaved(nn.Module):
    """Integer and bool intermediates the backward needs: a bool mask from the input in
    torch.where (both branches with gradients), max's indices gathered, argmax into
    F.one_hot, a cumsum of a mask as embedding indices, multiplicative masking, clamp."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(16, 32)
        self.emb = nn.Embedding(17, 32)
        self.c = nn.Linear(32, 8)

    def forward(self, x):
        m = x[:, :1] > 0  # bool, from the input
        h = torch.where(m, torch.tanh(self.a(x)), F.silu(self.b(x)))
        v, idx = h.max(-1)
        shift = torch.arange(4)[:, None].repeat(1, x.shape[0] // 4).flatten()
        picked = h.gather(1, ((idx + shift) % 32)[:, None])
        oh = F.one_hot(self.b(x).argmax(-1), 32).to(h.dtype)
        mask = (x > 0.3).long()
        pos = mask.cumsum(-1)  # 0..16
        e = self.emb(pos).mean(1)
        g = (h * oh + e) * (h.abs() > 0.1).to(h.dtype)
        g = g.clamp(-0.8, 0.8) * v[:, None] + picked
        return self.c(g).pow(2).mean()


class _MultiIntOut(nn.Module):
    """Four outputs weighted differently by the loss, one of them int64 (argmax
    predictions compared with the labels), one a count (a 0-dim int); a graph break makes
    them all outputs of the compiled graph."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.Tanh())
        self.cls = nn.Linear(32, 5)
        self.val = nn.Linear(32, 1)
        self.rec = nn.Linear(32, 16)

    def forward(self, x):
        t = self.trunk(x)
        logits = self.cls(t)
        pred = logits.argmax(-1)
        return logits, self.val(t).squeeze(-1), self.rec(t), pred, (pred > 2).sum()


def _multi_int_out_loss(m, x, y):
    logits, val, rec, pred, count = m(x)
    torch._dynamo.graph_break()
    right = (pred == y).to(val.dtype)
    return (1.0 * F.cross_entropy(logits, y) + 0.5 * (val - right).pow(2).mean()
            + 0.1 * (rec - x).pow(2).mean() * (1 + count))


class _AlbertShared(nn.Module):
    """ALBERT-style weight sharing: a factorized embedding (64 -> 16 -> 32) and one
    transformer layer applied four times, the output projection tied to the embedding."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.proj = nn.Linear(16, 32)
        self.layer = nn.ModuleDict(dict(ln1=nn.LayerNorm(32), qkv=nn.Linear(32, 96), o=nn.Linear(32, 32),
                                        ln2=nn.LayerNorm(32), up=nn.Linear(32, 64), down=nn.Linear(64, 32)))
        self.back = nn.Linear(32, 16)

    def forward(self, ids):
        b, s = ids.shape
        x = self.proj(self.emb(ids))
        L = self.layer
        for _ in range(4):
            q, k, v = L["qkv"](L["ln1"](x)).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + L["o"](a.transpose(1, 2).reshape(b, s, 32))
            x = x + L["down"](F.gelu(L["up"](L["ln2"](x))))
        logits = self.back(x) @ self.emb.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())




class _Parametrized(nn.Module):
    """torch.nn.utils.parametrizations: spectral_norm (its power iteration updates the
    u / v buffers in place in every training forward, under no_grad, and the weight is
    divided by sigma computed from them) and weight_norm (original0 / original1)."""

    def __init__(self):
        super().__init__()
        self.a = nn.utils.parametrizations.spectral_norm(nn.Linear(16, 32))
        self.b = nn.utils.parametrizations.weight_norm(nn.Linear(32, 32))
        self.c = nn.Linear(32, 4)

    def forward(self, x):
        return self.c(torch.tanh(self.b(F.silu(self.a(x))))).pow(2).mean()


class _VmapEnsemble(nn.Module):
    """torch.vmap in the forward: a 3-member MLP ensemble with stacked weights (vmapped
    over the parameters, the input shared), and a per-sample vmapped reduction through a
    closed-over parameter."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(3, 16, 32) * 0.2)
        self.b1 = nn.Parameter(torch.zeros(3, 32))
        self.w2 = nn.Parameter(torch.randn(3, 32, 4) * 0.2)

    def forward(self, x):
        def one(w1, b1, w2, x):
            return torch.tanh(x @ w1 + b1) @ w2

        out = torch.vmap(one, in_dims=(0, 0, 0, None))(self.w1, self.b1, self.w2, x)
        per = torch.vmap(lambda r: torch.tanh(r @ self.w1[0]).pow(2).sum())(x)  # a closed-over parameter
        return out.pow(2).mean() + per.mean() * 0.01


class _FFTComplex(nn.Module):
    """A Fourier-neural-operator layer: rfft, a complex64 parameter contracted with the
    low modes by einsum, irfft, and the parameter's magnitude in the loss (complex
    gradients)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.wc = nn.Parameter(torch.randn(8, 8, 5, dtype=torch.cfloat) * 0.2)
        self.out = nn.Linear(8, 2)

    def forward(self, x):  # (b, 16, 4)
        h = self.inp(x).transpose(1, 2)
        f = torch.fft.rfft(h, dim=-1)[..., :5]
        y = torch.fft.irfft(torch.einsum("bim,iom->bom", f, self.wc), n=16, dim=-1)
        h = F.gelu(h + y).transpose(1, 2)
        return self.out(h).pow(2).mean() + self.wc.abs().mean()

_NJT_OFFSETS = torch.tensor([0, 3, 4, 9])


class _NJTInput(nn.Module):
    """A jagged nested tensor (layout=torch.jagged) as the input: AOTAutograd desugars the
    subclass into its values, offsets and a nested-int ragged size (a SymInt whose hint
    is a SingletonInt, not an int); linears, gelu and a per-row mean on it. PyTorch's
    partitioners train it (torch 2.13); fxremat's encoder raised "TypeError: Cannot
    convert symbols to int" on the nested int's hint, even with fallback=True, before
    Note [Gradients of flattened inputs]."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, nt):
        h = F.gelu(self.a(nt))
        h = self.b(h * torch.sigmoid(h))
        return h.values().pow(2).mean() + h.mean(dim=-1).values().sum() * 0.1


# ------------------------------------------------- more hand-written models (fourth batch)
class _EmbMaxNorm(nn.Module):
    """nn.Embedding(max_norm=1.0): the forward renormalizes the looked-up rows of the
    weight in place (torch.embedding_renorm_ under no_grad: a parameter mutated in the
    forward), and the output projection tied to it reads the renormalized weight; a
    buffer snapshots the weight after the renorm (so the mutation is compared)."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16, max_norm=1.0)
        with torch.no_grad():
            self.emb.weight.mul_(2.0)  # most rows past max_norm
        self.mix = nn.Linear(16, 16)
        self.register_buffer("snap", torch.zeros(8, 16))

    def forward(self, ids):
        h = torch.tanh(self.mix(self.emb(ids)))
        with torch.no_grad():
            self.snap.copy_(self.emb.weight[:8])
        logits = h @ self.emb.weight.t()
        return F.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten()) + self.emb.weight.pow(2).mean()


class _InplaceLeaky(torch.autograd.Function):
    """An in-place custom op: x is written (ctx.mark_dirty) and the output saved."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(torch.where(x > 0, 1.0, 0.1))
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * torch.where(y > 0, 1.0, 0.1)


class _GatedTanh(torch.autograd.Function):
    """setup_context style (forward without ctx), an intermediate saved, a float
    attribute on ctx, a backward marked once_differentiable."""

    @staticmethod
    def forward(x, w, alpha):
        t = torch.tanh(x * w)
        return t * alpha + x * (1 - alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, w, alpha = inputs
        ctx.save_for_backward(x, w, torch.tanh(x * w))
        ctx.alpha = alpha

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, w, t = ctx.saved_tensors
        dt = (1 - t * t) * ctx.alpha * g
        return dt * w + g * (1 - ctx.alpha), (dt * x).flatten(0, -2).sum(0), None


class _CustomFnDirty(nn.Module):
    """Custom autograd.Functions: an in-place one with mark_dirty on an intermediate, a
    setup_context one whose backward is once_differentiable and reads a saved
    intermediate."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, 32))
        self.b = nn.Linear(32, 8)

    def forward(self, x):
        h = self.a(x) * 1.0  # an intermediate to write
        h = _InplaceLeaky.apply(h)
        g = _GatedTanh.apply(h, self.w, 0.7)
        return self.b(g + h).pow(2).mean()


class _FakeQuant(nn.Module):
    """Quantization-aware training: fake_quantize_per_tensor_affine on the input (fixed
    scale), per-channel fake quantization of a weight, and an LSQ-style learnable
    activation scale / zero point (_fake_quantize_learnable_per_tensor_affine: gradients
    for the scale and zero point)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)
        self.s = nn.Parameter(torch.tensor([0.05]))
        self.zp = nn.Parameter(torch.tensor([3.0]))

    def forward(self, x):
        xq = torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)
        wq = torch.fake_quantize_per_channel_affine(self.a.weight, self.a.weight.abs().amax(1).detach() / 127,
                                                    torch.zeros(32, dtype=torch.int32, device=x.device), 0, -128, 127)
        h = F.gelu(F.linear(xq, wq, self.a.bias))
        hq = torch._fake_quantize_learnable_per_tensor_affine(h, self.s, self.zp, 0, 255, 1.0)
        return self.b(hq).pow(2).mean()


class _GumbelSample(nn.Module):
    """Random draws as indices and hard one-hots: F.gumbel_softmax(hard=True) routing,
    torch.multinomial from a learned distribution gathering rows, torch.randint
    indices, all feeding gradients (RANDOM)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.route = nn.Linear(32, 4)
        self.experts = nn.Parameter(torch.randn(4, 32, 16) * 0.2)
        self.logits = nn.Parameter(torch.randn(12) * 0.5)
        self.table = nn.Parameter(torch.randn(12, 16) * 0.5)

    def forward(self, x):
        h = F.gelu(self.a(x))
        oh = F.gumbel_softmax(self.route(h), tau=0.5, hard=True)  # (b, 4), straight-through
        out = torch.einsum("be,bi,eio->bo", oh, h, self.experts)
        idx = torch.multinomial(self.logits.softmax(0), x.shape[0], replacement=True)
        j = torch.randint(0, 12, (x.shape[0],))
        out = out + self.table[idx] * self.logits.softmax(0)[idx, None] + self.table[j] * 0.5
        return out.pow(2).mean()


class _VAERsample(nn.Module):
    """Reparameterization: torch.distributions.Normal(mu, sigma).rsample() twice with
    log_prob and a KL term; SDPA with dropout_p > 0 over the samples (RANDOM)."""

    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(16, 64)
        self.qkv = nn.Linear(16, 48)
        self.dec = nn.Linear(16, 16)

    def forward(self, x):  # (b, s, 16)
        b, s, _ = x.shape
        mu, ls = self.enc(x).chunk(2, -1)
        q = torch.distributions.Normal(mu, F.softplus(ls) + 1e-3)
        z = q.rsample()[..., :16] + q.rsample()[..., 16:]
        lp = q.log_prob(z.repeat(1, 1, 2)).sum(-1).mean()
        qq, k, v = self.qkv(z).view(b, s, 3, 2, 8).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(qq, k, v, dropout_p=0.3, is_causal=True)
        rec = self.dec(a.transpose(1, 2).reshape(b, s, 16))
        # KL(q || N(0, 1)) in closed form (torch.distributions.kl_divergence graph-breaks on
        # its first, unmemoized lookup: a different graph count on the first run)
        kl = (-torch.log(q.scale) + (q.scale.pow(2) + q.loc.pow(2)) / 2 - 0.5).mean()
        return (rec - x).pow(2).mean() + 0.1 * kl - 0.01 * lp


class _Linalg(nn.Module):
    """Linear algebra with gradients on well-conditioned matrices: cholesky of an SPD
    matrix and cholesky_solve, linalg.solve, qr, eigh (a spectral function
    V f(L) V^T, sign-invariant), svd (singular values and U V^T), cdist. linalg.cholesky
    checks its result through an effectful op (with_effects(_linalg_check_errors) and an
    effect-token input): under a budget fxremat saved the token (None at run time) and
    AOTAutograd raised "expected all tensors_saved_with_vc_check to be Tensors" (found
    by a corpus bug hunt; fixed in 684a7b9, Note [Effect tokens are never saved])."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)
        self.c = nn.Parameter(torch.randn(5, 8) * 0.5)

    def forward(self, x):  # (4, 6, 8)
        h = torch.tanh(self.a(x))  # (4, 6, 8)
        # SPD with well-separated eigenvalues (h^T h has rank 6: the diagonal splits the rest)
        g = h.transpose(-1, -2) @ h / 6 + torch.diag(torch.linspace(1.0, 3.0, 8, device=x.device))
        L = torch.linalg.cholesky(g)
        y = torch.cholesky_solve(self.b(x).transpose(-1, -2), L)  # (4, 8, 6)
        s = torch.linalg.solve(g + 0.5 * torch.eye(8, device=x.device), y)
        Q, R = torch.linalg.qr(self.b(x))  # (4, 6, 8): reduced, Q (4, 6, 6)
        lam, V = torch.linalg.eigh(g)
        spec = V @ torch.diag_embed(torch.sqrt(lam)) @ V.transpose(-1, -2)
        U, S, Vh = torch.linalg.svd(h[..., :5] + torch.eye(6, 5, device=x.device), full_matrices=False)
        d = torch.cdist(h, self.c)  # (4, 6, 5)
        return (s.pow(2).mean() + (Q @ R).pow(2).mean() + Q[..., 0].abs().mean() + spec.mean() + S.sum() * 0.1
                + (U @ Vh * d).mean() + d.mean())


class _SpatialTF(nn.Module):
    """A spatial transformer: a localization net predicts affine thetas, F.affine_grid +
    F.grid_sample (bilinear, border padding) warp the image; F.unfold / F.fold patch
    round trip; pixel_shuffle / pixel_unshuffle."""

    def __init__(self):
        super().__init__()
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                                 nn.Flatten(), nn.Linear(8, 6))
        with torch.no_grad():
            self.loc[-1].weight.mul_(0.1)
            self.loc[-1].bias.copy_(torch.tensor([1.0, 0, 0, 0, 1, 0]))
        self.patch = nn.Linear(12, 12)
        self.conv = nn.Conv2d(3, 12, 3, padding=1)
        self.head = nn.Linear(3, 5)

    def forward(self, x, y):  # (2, 3, 8, 8)
        theta = self.loc(x).view(-1, 2, 3)
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        w = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        cols = F.unfold(w, kernel_size=2, stride=2)  # (2, 12, 16)
        cols = self.patch(cols.transpose(1, 2)).transpose(1, 2)
        w = F.fold(torch.tanh(cols), (8, 8), kernel_size=2, stride=2)
        up = F.pixel_shuffle(self.conv(w), 2)  # (2, 3, 16, 16)
        down = F.pixel_unshuffle(up, 2)  # (2, 12, 8, 8)
        feat = (up.mean((2, 3)) + down.view(2, 3, 4, 8, 8).mean((2, 3, 4)))
        return F.cross_entropy(self.head(feat), y)


class _Conv3D(nn.Module):
    """Video-style 3-D convs: conv3d with stride, BatchNorm3d (training), max_pool3d,
    F.interpolate trilinear back up, a skip connection."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv3d(2, 8, 3, padding=1)
        self.bn = nn.BatchNorm3d(8)
        self.c2 = nn.Conv3d(8, 8, 3, stride=2, padding=1)
        self.c3 = nn.Conv3d(8, 4, 1)

    def forward(self, x):  # (2, 2, 4, 8, 8)
        h = F.silu(self.bn(self.c1(x)))
        d = F.max_pool3d(F.gelu(self.c2(h)), (1, 2, 2))  # (2, 8, 2, 2, 2)
        u = F.interpolate(d, size=h.shape[2:], mode="trilinear", align_corners=False)
        return self.c3(h + u).pow(2).mean()


class _STFT(nn.Module):
    """Signal processing: torch.stft (hann window, complex output) of a learned filter's
    output, a learned per-bin mask on the magnitude, torch.istft back; bucketize and
    searchsorted of the signal into learned boundaries used to gather a learned table."""

    def __init__(self):
        super().__init__()
        self.filt = nn.Conv1d(1, 1, 5, padding=2)
        self.mask = nn.Linear(9, 9)
        self.register_buffer("win", torch.hann_window(16), persistent=False)
        self.bounds = nn.Parameter(torch.linspace(-1.5, 1.5, 7))
        self.table = nn.Parameter(torch.randn(8) * 0.3)

    def forward(self, x):  # (2, 64)
        s = self.filt(x[:, None])[:, 0]
        spec = torch.stft(s, 16, hop_length=4, window=self.win, return_complex=True)  # (2, 9, T)
        m = torch.sigmoid(self.mask(spec.abs().transpose(1, 2))).transpose(1, 2)
        y = torch.istft(spec * m, 16, hop_length=4, window=self.win, length=64)
        b = torch.sort(self.bounds).values
        i = torch.bucketize(y.detach(), b.detach())
        j = torch.searchsorted(b.detach(), s.detach().contiguous())
        return (y - x).pow(2).mean() + (self.table[i] * y).mean() + self.table[j].pow(2).mean() + b.pow(2).mean()


class _CkptVariants(nn.Module):
    """torch.utils.checkpoint variants: use_reentrant=False with preserve_rng_state=False,
    a checkpointed function returning a tuple and one returning a dict, and nested
    checkpoints (a checkpointed function that checkpoints inside)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 32)
        self.c = nn.Linear(32, 32)
        self.d = nn.Linear(32, 32)

    def _tuple(self, x):
        h = F.gelu(self.a(x))
        return self.b(h), h.mean(-1, keepdim=True)

    def _dict(self, x):
        return {"y": torch.tanh(self.c(x)), "z": torch.sigmoid(self.d(x))}

    def _inner(self, x):
        return torch.sin(self.c(x)) * x

    def _outer(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self._inner, F.silu(self.d(x)), use_reentrant=False) + x

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        y, m = checkpoint(self._tuple, x, use_reentrant=False, preserve_rng_state=False)
        x = x + y * m
        out = checkpoint(self._dict, x, use_reentrant=False)
        x = x + out["y"] * out["z"]
        x = checkpoint(self._outer, x, use_reentrant=False)
        return x.pow(2).mean()


class _SaveOnCPU(nn.Module):
    """Saved-tensor hooks around parts of the forward: torch.autograd.graph.save_on_cpu
    and a saved_tensors_hooks whose pack / unpack are GraphModules (x * 2, x / 2: exact;
    AOTAutograd inlines such hooks into the partitioned graphs, after the partitioner).
    Dynamo does not trace either context manager (save_on_cpu.__init__ is skip-listed:
    a graph break); the methods called inside are compiled as frames of their own, with
    the hooks in force."""

    def __init__(self):
        super().__init__()
        from torch.fx.experimental.proxy_tensor import make_fx

        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.d = nn.Linear(32, 32)
        self.c = nn.Linear(32, 8)
        self.pack = make_fx(lambda t: t * 2.0)(torch.randn(2))
        self.unpack = make_fx(lambda t: t * 0.5)(torch.randn(2))

    def _cpu_part(self, h):
        return torch.tanh(self.b(h)) * h

    def _hooked_part(self, h):
        return F.silu(self.d(h)) * torch.sigmoid(h)

    def forward(self, x):
        h = F.gelu(self.a(x))
        with torch.autograd.graph.save_on_cpu():
            h = self._cpu_part(h)
        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            h = self._hooked_part(h)
        return self.c(h).pow(2).mean()


class _GradHook(nn.Module):
    """Tensor.register_hook on intermediates inside the forward: one scales the
    gradient, one clamps it (the gradients of everything before them change)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 8)

    def forward(self, x):
        h = F.gelu(self.a(x))
        h.register_hook(lambda g: g * 3.0)
        k = torch.tanh(self.b(h))
        k.register_hook(lambda g: g.clamp(-1e-3, 1e-3))
        return self.c(k * h).pow(2).mean()


class _HalfParams(nn.Module):
    """A model whose parameters are bfloat16 (not autocast: the module itself in reduced
    precision) with a float16 branch: linears, layer_norm, softmax attention, gelu in
    bf16, an fp16 linear and silu, the loss in float32."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32).bfloat16()
        self.ln = nn.LayerNorm(32).bfloat16()
        self.qkv = nn.Linear(32, 96).bfloat16()
        self.ff = nn.Linear(32, 32).bfloat16()
        self.h16 = nn.Linear(32, 32).half()
        self.out = nn.Linear(32, 4).bfloat16()

    def forward(self, x):  # (2, 6, 16) float32
        b, s, _ = x.shape
        h = self.inp(x.bfloat16())
        q, k, v = self.qkv(self.ln(h)).view(b, s, 3, 32).unbind(2)
        a = ((q @ k.transpose(-1, -2)) * 32 ** -0.5).softmax(-1) @ v
        h = h + F.gelu(self.ff(a))
        g = F.silu(self.h16(h.half())).bfloat16()
        return self.out(h + g).float().pow(2).mean()


class _PartialLoss(nn.Module):
    """The loss uses part of the outputs: one head entirely unused (its parameters get
    None gradients), one used only through argmax (None), one sliced (some rows of its
    weight get zero gradients), a parameter used only under no_grad (None)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(16, 32)
        self.used = nn.Linear(32, 8)
        self.unused = nn.Linear(32, 8)
        self.argmaxed = nn.Linear(32, 4)
        self.nograd = nn.Parameter(torch.randn(32))

    def forward(self, x):
        t = torch.tanh(self.trunk(x))
        _ = self.unused(t).sum()
        cls = self.argmaxed(t).argmax(-1)
        with torch.no_grad():
            sc = (t * self.nograd).mean()
        out = self.used(t)[:, :3]
        return out.pow(2).mean() * (1 + sc) + out.gather(1, (cls % 3)[:, None]).mean()


class _DeepMLP(nn.Module):
    """A very deep narrow residual MLP: 40 Linear(8, 8) layers with tanh."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(40))

    def forward(self, x):
        for l in self.layers:
            x = x + 0.5 * torch.tanh(l(x))
        return x.pow(2).mean()


class _WideMLP(nn.Module):
    """A very wide shallow MLP: 16 -> 4096 -> 8 with GELU."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 4096)
        self.b = nn.Linear(4096, 8)

    def forward(self, x, y):
        return F.cross_entropy(self.b(F.gelu(self.a(x))), y)


# ------------------------------------------------- more hand-written models (fifth batch)
class _NormZoo(nn.Module):
    """Normalizations other than BatchNorm / LayerNorm: GroupNorm, InstanceNorm2d with
    affine weights and track_running_stats (its running buffers updated in training),
    LocalResponseNorm, a LayerNorm over (C, H, W), InstanceNorm1d without affine."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.gn = nn.GroupNorm(4, 8)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.inorm = nn.InstanceNorm2d(8, affine=True, track_running_stats=True)
        self.lrn = nn.LocalResponseNorm(3, alpha=1e-2, beta=0.75, k=1.0)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.ln = nn.LayerNorm([8, 8, 8])
        self.in1d = nn.InstanceNorm1d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x, y):  # (2, 3, 8, 8)
        h = F.silu(self.gn(self.c1(x)))
        h = F.relu(self.inorm(self.c2(h))) + h
        h = self.lrn(h)
        h = self.ln(F.gelu(self.c3(h)))
        h = self.in1d(h.flatten(2))  # (2, 8, 64)
        return F.cross_entropy(self.head(h.logsumexp(-1)), y)


class _FrozenBN2d(nn.BatchNorm2d):
    """A BatchNorm2d that stays in eval mode whatever .train() says."""

    def train(self, mode=True):
        return super().train(False)


class _BNEvalMix(nn.Module):
    """BatchNorm in eval mode (running statistics read, not updated; affine weights
    trained) mixed with BatchNorm2d in training mode (momentum=None: a cumulative average
    with num_batches_tracked) and a BatchNorm1d in training mode; F.batch_norm with
    training=False on a buffer pair too."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn_eval = _FrozenBN2d(8)
        with torch.no_grad():
            self.bn_eval.running_mean.normal_(0.0, 0.3)
            self.bn_eval.running_var.uniform_(0.5, 2.0)
        self.bn_eval.eval()
        self.c2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.bn_train = nn.BatchNorm2d(16, momentum=None)
        self.fc = nn.Linear(16, 16)
        self.bn1d = nn.BatchNorm1d(16)
        self.register_buffer("rm", torch.linspace(-0.2, 0.2, 16))
        self.register_buffer("rv", torch.linspace(0.5, 1.5, 16))
        self.out = nn.Linear(16, 5)

    def forward(self, x, y):
        h = F.relu(self.bn_eval(self.c1(x)))
        h = F.silu(self.bn_train(self.c2(h)))
        f = self.bn1d(self.fc(h.mean((2, 3))))
        f = F.batch_norm(torch.tanh(f), self.rm, self.rv, training=False)
        return F.cross_entropy(self.out(f), y)


class _ReuseViews(nn.Module):
    """One submodule called twice on different inputs (weight reuse), and in-place ops on
    views of intermediates: a slice's mul_, a transpose's add_, masked_fill_ on a narrow
    view, copy_ into a diagonal, div_ through an unsqueeze view, sub_ into a row of a
    transposed output."""

    def __init__(self):
        super().__init__()
        self.shared = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.a = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x, z):  # (6, 16) each
        h = self.shared(x)
        g = self.shared(z * 2 + h)
        u = self.a(h + g)
        u[:, :2].mul_(2)
        u.transpose(0, 1)[3:5].add_(1)
        v = u.narrow(1, 8, 8)
        v.masked_fill_(v > 0.8, 0.8)
        u.diagonal().copy_(h.diagonal() * 3)
        w = u.unsqueeze(0)
        w.div_(1.5)
        k = self.a(u)
        k.t()[0].sub_(g[:, 0])
        return self.out(k * u).pow(2).mean() + g.mean()


class _ScatterReduce(nn.Module):
    """Scatter-style ops on intermediates: index_add_ into zeros, scatter_reduce (amax
    without self, mean with a parameter as self, prod without self), index_reduce
    (amin), index_copy_, index_fill_ and scatter_ with a source tensor."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.base = nn.Parameter(torch.randn(4, 32) * 0.3)
        self.b = nn.Linear(32, 8)

    def forward(self, x):  # (8, 16)
        h = torch.tanh(self.a(x))  # (8, 32)
        grp = torch.tensor([0, 1, 1, 2, 3, 3, 3, 0])
        gi = grp[:, None].expand(-1, 32)
        s_sum = torch.zeros(4, 32).index_add_(0, grp, h * 2.0)
        s_max = torch.zeros(4, 32).scatter_reduce(0, gi, h, "amax", include_self=False)
        s_mean = self.base.scatter_reduce(0, gi, h, "mean", include_self=True)
        s_prod = torch.ones(4, 32).scatter_reduce(0, gi, h * 0.5 + 1.0, "prod", include_self=False)
        s_min = self.base.index_reduce(0, grp, h, "amin", include_self=True)
        agg = s_sum + s_max * s_mean + s_prod + s_min  # (4, 32)
        c = h.clone()
        c.index_copy_(0, torch.tensor([1, 4]), agg[:2] * 0.5)
        c.index_fill_(1, torch.tensor([0, 5]), 0.0)
        c.scatter_(1, h.argmax(-1, keepdim=True), agg[grp, :1])
        return self.b(c + agg[grp]).pow(2).mean()


class _CumChain(nn.Module):
    """Cumulative ops chained: cumsum, a reverse cumsum through flip, cumprod of
    positive values, logcumsumexp, cummax / cummin values, torch.diff."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 4)

    def forward(self, x):  # (2, 10, 8): cumulative over the sequence
        h = torch.tanh(self.a(x))
        cs = h.cumsum(1) / torch.arange(1, 11, dtype=h.dtype)[None, :, None]
        rcs = h.flip(1).cumsum(1).flip(1) * 0.1
        cp = (torch.sigmoid(self.b(h)) + 0.5).cumprod(1)
        lce = torch.logcumsumexp(self.b(cs), 1)
        mx = torch.cummax(h, 1).values
        mn = torch.cummin(h * cp.clamp(max=4.0), 1).values
        d = torch.diff(lce, dim=1, prepend=lce[:, :1])
        g = cs + rcs + mx - mn + d + cp.log()
        return self.c(g).pow(2).mean()


class _OrderStats(nn.Module):
    """Order statistics with gradients: sort descending stable, topk smallest,
    kthvalue, median (dim), take_along_dim with an argsort, mode, msort, max / min over
    a dim with indices reused to gather another tensor."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 24)
        self.b = nn.Linear(16, 24)
        self.c = nn.Linear(24, 4)

    def forward(self, x):  # (6, 16)
        h = F.gelu(self.a(x))
        k = self.b(x)
        s, order = h.sort(dim=-1, descending=True, stable=True)
        small, si = h.topk(5, -1, largest=False)
        kv, ki = torch.kthvalue(k, 3, -1)
        med, mi = k.median(-1)
        ranked = torch.take_along_dim(k, order, -1)
        ms = torch.msort(h.t()).t()
        mx, mxi = k.max(0)
        picked = h.gather(0, mxi[None])  # (1, 24)
        feat = s * torch.sigmoid(ranked) + ms * 0.1 + picked
        extra = small.sum(-1) + kv * med + h.gather(1, ki[:, None]).squeeze(1) + k.gather(1, mi[:, None]).squeeze(1)
        return self.c(feat).pow(2).mean() + extra.pow(2).mean() * 0.1 + (mx * k.gather(1, si[:, :1])).mean()


def _t5_bucket(rel: torch.Tensor, num_buckets: int = 8, max_distance: int = 16) -> torch.Tensor:
    """T5's bidirectional relative position buckets."""
    import math

    nb = num_buckets // 2
    ret = (rel > 0).long() * nb
    n = rel.abs()
    max_exact = nb // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact + 1e-6) / math.log(max_distance / max_exact)
                         * (nb - max_exact)).long()
    large = torch.minimum(large, torch.full_like(large, nb - 1))
    return ret + torch.where(is_small, n, large)


class _AlibiT5(nn.Module):
    """Hand-written position biases: a T5-style relative-position bucket embedding (a
    learned per-head bias gathered by integer buckets computed with log / where /
    minimum) in a bidirectional layer, then ALiBi slopes times distances with a causal
    mask into SDPA as a float attn_mask that carries a gradient."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.rel = nn.Embedding(8, 4)
        self.qkv1 = nn.Linear(32, 96)
        self.o1 = nn.Linear(32, 32)
        self.qkv2 = nn.Linear(32, 96)
        self.o2 = nn.Linear(32, 32)
        self.slope_scale = nn.Parameter(torch.ones(4))
        self.register_buffer("slopes", 2.0 ** (-8.0 * torch.arange(1, 5) / 4), persistent=False)
        self.ln = nn.LayerNorm(32)
        self.out = nn.Linear(32, V)

    def forward(self, ids):
        b, s = ids.shape
        x = self.emb(ids)
        i = torch.arange(s)
        rel = i[None, :] - i[:, None]
        bias = self.rel(_t5_bucket(rel)).permute(2, 0, 1)[None]  # (1, 4, s, s)
        q, k, v = self.qkv1(x).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-1, -2) + bias).softmax(-1)  # T5: no scaling
        x = x + self.o1((att @ v).transpose(1, 2).reshape(b, s, 32))
        q, k, v = self.qkv2(self.ln(x)).view(b, s, 3, 4, 8).permute(2, 0, 3, 1, 4).unbind(0)
        alibi = -(self.slopes * self.slope_scale)[:, None, None] * (i[:, None] - i[None, :]).abs().float()
        alibi = alibi.masked_fill(i[None, :] > i[:, None], float("-inf"))[None].expand(b, -1, -1, -1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)
        x = x + self.o2(a.transpose(1, 2).reshape(b, s, 32))
        return F.cross_entropy(self.out(x).flatten(0, 1), ids.roll(-1, 1).flatten())


class _ResBlockT(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.n1 = nn.GroupNorm(4, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(tdim, 2 * cout)
        self.n2 = nn.GroupNorm(4, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x)))
        scale, shift = self.t(F.silu(temb))[:, :, None, None].chunk(2, 1)
        h = self.n2(h) * (1 + scale) + shift  # FiLM
        h = self.c2(F.silu(h))
        return h + self.skip(x)


class _DiffusionUNet(nn.Module):
    """One denoising-diffusion training step: a cosine alpha-bar schedule (buffer)
    indexed by integer timesteps, x_t = sqrt(ab) x0 + sqrt(1 - ab) noise, a sinusoidal
    timestep embedding through an MLP into FiLM scale/shift of GroupNorm resblocks, a
    strided down conv, spatial self-attention in the middle, nearest upsampling with a
    skip, and the MSE to the noise."""

    def __init__(self):
        super().__init__()
        import math

        T = 50
        s = torch.arange(T + 1, dtype=torch.float32) / T
        ab = torch.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
        self.register_buffer("ab", (ab / ab[0])[1:].clamp(1e-4, 0.9999), persistent=False)
        self.tmlp = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 32))
        self.inp = nn.Conv2d(3, 8, 3, padding=1)
        self.r1 = _ResBlockT(8, 8, 32)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.r2 = _ResBlockT(16, 16, 32)
        self.attn_norm = nn.GroupNorm(4, 16)
        self.qkv = nn.Conv2d(16, 48, 1)
        self.proj = nn.Conv2d(16, 16, 1)
        self.r3 = _ResBlockT(24, 8, 32)
        self.out = nn.Sequential(nn.GroupNorm(4, 8), nn.SiLU(), nn.Conv2d(8, 3, 3, padding=1))

    @staticmethod
    def _temb(t, dim=16):
        import math

        half = dim // 2
        f = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
        a = t.float()[:, None] * f[None]
        return torch.cat([a.sin(), a.cos()], -1)

    def forward(self, x0, t, noise):  # (2, 3, 8, 8), (2,) int64, (2, 3, 8, 8)
        ab = self.ab[t][:, None, None, None]
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
        temb = self.tmlp(self._temb(t))
        h1 = self.r1(self.inp(xt), temb)  # (2, 8, 8, 8)
        h = self.r2(self.down(h1), temb)  # (2, 16, 4, 4)
        b, c, hh, ww = h.shape
        q, k, v = self.qkv(self.attn_norm(h)).flatten(2).chunk(3, 1)  # (b, 16, 16)
        att = (q.transpose(1, 2) @ k / c ** 0.5).softmax(-1)  # (b, hw, hw)
        h = h + self.proj((v @ att.transpose(1, 2)).view(b, c, hh, ww))
        h = F.interpolate(h, scale_factor=2, mode="nearest")
        h = self.r3(torch.cat([h, h1], 1), temb)
        return F.mse_loss(self.out(h), noise)


class _RNNCells(nn.Module):
    """An LSTMCell and a GRUCell unrolled in Python over 12 timesteps (stacked, the
    GRU fed the LSTM's hidden state), a per-step output head with teacher forcing, and
    the final states in the loss."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTMCell(8, 16)
        self.gru = nn.GRUCell(16, 16)
        self.head = nn.Linear(16, 8)

    def forward(self, x):  # (12, 3, 8)
        T, b, _ = x.shape
        h = c = g = torch.zeros(b, 16)
        loss = 0.0
        for t in range(T - 1):
            h, c = self.lstm(x[t], (h, c))
            g = self.gru(h, g)
            loss = loss + (self.head(g) - x[t + 1]).pow(2).mean()
        return loss / (T - 1) + 0.1 * (c.pow(2).mean() + g.abs().mean())


class _MoETop2(nn.Module):
    """A hand-written top-2 mixture of experts without data-dependent shapes: router
    softmax, topk(2), renormalized gates, the chosen experts' stacked weights fetched with
    index_select and applied by bmm, torch.where zeroing low gates, combined by
    index_add over tokens; a Switch-style load-balancing loss (one_hot counts times mean
    router probabilities) and a router z-loss (logsumexp squared)."""

    def __init__(self):
        super().__init__()
        E, d, f = 4, 16, 32
        self.router = nn.Linear(d, E, bias=False)
        self.w1 = nn.Parameter(torch.randn(E, d, f) * 0.2)
        self.w2 = nn.Parameter(torch.randn(E, f, d) * 0.2)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, 4)

    def forward(self, x):  # (2, 6, 16)
        b, s, d = x.shape
        tok = self.ln(x).reshape(b * s, d)
        n = tok.shape[0]
        logits = self.router(tok)
        probs = logits.softmax(-1)
        gw, gi = probs.topk(2, -1)  # (n, 2)
        gw = gw / gw.sum(-1, keepdim=True)
        gw = torch.where(gw > 0.1, gw, torch.zeros_like(gw))
        flat = gi.flatten()  # (2n,)
        src = tok.repeat_interleave(2, 0)  # (2n, d)
        hmid = F.gelu(torch.bmm(src[:, None], self.w1.index_select(0, flat)))  # (2n, 1, f)
        y = torch.bmm(hmid, self.w2.index_select(0, flat))[:, 0] * gw.flatten()[:, None]
        out = torch.zeros(n, d).index_add(0, torch.arange(n).repeat_interleave(2), y)
        out = (tok + out).view(b, s, d)
        counts = F.one_hot(gi[:, 0], 4).float().mean(0)
        balance = 4 * (counts * probs.mean(0)).sum()
        z = torch.logsumexp(logits, -1).pow(2).mean()
        return self.head(out).pow(2).mean() + 0.01 * balance + 0.001 * z


class _Perceiver(nn.Module):
    """Perceiver-style: a learned latent array cross-attends to the inputs (keys and
    values projected from a different width), two latent self-attention layers sharing
    one set of weights, then learned output queries cross-attend to the latents."""

    def __init__(self):
        super().__init__()
        self.latents = nn.Parameter(torch.randn(6, 32) * 0.5)
        self.lnq = nn.LayerNorm(32)
        self.lnkv = nn.LayerNorm(12)
        self.q = nn.Linear(32, 32)
        self.kv = nn.Linear(12, 64)
        self.self_ln = nn.LayerNorm(32)
        self.self_qkv = nn.Linear(32, 96)
        self.self_o = nn.Linear(32, 32)
        self.mlp = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))
        self.out_q = nn.Parameter(torch.randn(3, 32) * 0.5)
        self.dec = nn.Linear(32, 5)

    @staticmethod
    def _attn(q, k, v, heads=4):
        b, nq, d = q.shape
        nk = k.shape[1]
        q = q.view(b, nq, heads, d // heads).transpose(1, 2)
        k = k.view(b, nk, heads, d // heads).transpose(1, 2)
        v = v.view(b, nk, heads, d // heads).transpose(1, 2)
        a = torch.einsum("bhqd,bhkd->bhqk", q, k) * (d // heads) ** -0.5
        return torch.einsum("bhqk,bhkd->bhqd", a.softmax(-1), v).transpose(1, 2).reshape(b, nq, d)

    def forward(self, x, y):  # (2, 16, 12), (2, 3)
        b = x.shape[0]
        lat = self.latents[None].expand(b, -1, -1)
        k, v = self.kv(self.lnkv(x)).chunk(2, -1)
        lat = lat + self._attn(self.q(self.lnq(lat)), k, v)
        for _ in range(2):
            q, k, v = self.self_qkv(self.self_ln(lat)).chunk(3, -1)
            lat = lat + self.self_o(self._attn(q, k, v))
            lat = lat + self.mlp(lat)
        o = self._attn(self.out_q[None].expand(b, -1, -1), lat, lat, heads=2)
        return F.cross_entropy(self.dec(o).flatten(0, 1), y.flatten())


class _Orthogonal(nn.Module):
    """torch.nn.utils.parametrizations.orthogonal with its three maps: matrix_exp on a
    square weight, householder (linalg.householder_product) on a tall one, cayley
    (a solve) on another square one."""

    def __init__(self):
        super().__init__()
        P = nn.utils.parametrizations
        self.a = P.orthogonal(nn.Linear(16, 16), orthogonal_map="matrix_exp")
        self.b = P.orthogonal(nn.Linear(16, 8), orthogonal_map="householder")
        self.c = P.orthogonal(nn.Linear(8, 8), orthogonal_map="cayley")
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.c(F.silu(self.b(torch.tanh(self.a(x))))))).pow(2).mean()


class _PadInterp(nn.Module):
    """F.pad in reflect, replicate, circular and constant modes on 2-D maps (and reflect
    on 1-D), F.interpolate bicubic, nearest-exact, area, bilinear with align_corners and
    a fractional scale factor, adaptive_max_pool2d."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3)
        self.c2 = nn.Conv2d(8, 8, 3)
        self.c3 = nn.Conv1d(8, 8, 3)
        self.head = nn.Linear(8 * 4 + 8, 5)

    def forward(self, x, y):  # (2, 3, 8, 8)
        h = F.gelu(self.c1(F.pad(x, (1, 1, 1, 1), mode="reflect")))  # 8x8
        h = h + F.pad(h[:, :, 1:-1, 1:-1], (1, 1, 1, 1), mode="replicate")
        h = F.silu(self.c2(F.pad(h, (1, 1, 1, 1), mode="circular")))  # 8x8
        h = F.pad(h, (0, 1, 2, 0), value=0.5)  # 10x9
        u = F.interpolate(h, size=(12, 12), mode="bicubic", align_corners=False)
        u = u + F.interpolate(h, size=(12, 12), mode="nearest-exact")
        d = F.interpolate(u, size=(6, 6), mode="area")
        d = F.interpolate(d, scale_factor=1.5, mode="bilinear", align_corners=True)  # 9x9
        p = F.adaptive_max_pool2d(d, 2).flatten(1)  # (2, 32)
        seq = self.c3(F.pad(d.mean(2), (1, 1), mode="reflect"))  # (2, 8, 9)
        return F.cross_entropy(self.head(torch.cat([p, seq.amax(-1)], 1)), y)


class _EinsumDiag(nn.Module):
    """einsum with repeated indices and diagonals: 'bii->bi' and 'bii->b' (diagonal,
    trace), 'ii->' on a parameter, 'bij,bji->b', 'bij,jk,bkl->bil' chains, torch.diagonal
    with an offset, diag_embed, tril, and a Gram matrix's log-determinant via slogdet."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8, 8) * 0.3)
        self.v = nn.Parameter(torch.randn(8, 8) * 0.3)

    def forward(self, x):  # (3, 8, 8)
        h = torch.tanh(self.a(x))
        m = torch.einsum("bij,jk,bkl->bil", h, self.w, h.transpose(1, 2))  # (3, 8, 8)
        d = torch.einsum("bii->bi", m)
        tr = torch.einsum("bii->b", m)
        cross = torch.einsum("bij,bji->b", m, h)
        off = torch.diagonal(m, offset=1, dim1=1, dim2=2)  # (3, 7)
        e = torch.diag_embed(d.softmax(-1)) + torch.tril(m, -1) * 0.1
        g = e @ e.transpose(1, 2) + torch.eye(8)
        ld = torch.linalg.slogdet(g).logabsdet
        return (tr.pow(2).mean() * 0.01 + cross.tanh().mean() + off.pow(2).mean() + ld.mean() * 0.1
                + torch.einsum("ii->", self.v * self.w) + d.abs().mean())


class _Activations(nn.Module):
    """Deterministic activations: PReLU per channel, Hardswish, Hardsigmoid, Mish, SELU,
    CELU, ELU, Softplus with beta and threshold, Hardtanh, LogSigmoid, GLU, Softsign,
    Tanhshrink, Softshrink, Hardshrink, Threshold, ReLU6, RReLU in eval mode (a fixed
    slope)."""

    def __init__(self):
        super().__init__()
        self.l = nn.ModuleList(nn.Linear(16, 16) for _ in range(6))
        self.glu = nn.Linear(16, 32)
        self.prelu = nn.PReLU(16, init=0.2)
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        l = self.l
        h = self.prelu(l[0](x)) + F.hardswish(l[0](x)) * F.hardsigmoid(x)
        h = F.mish(l[1](h)) + F.selu(h) + F.celu(h, 0.7)
        h = F.elu(l[2](h), 1.3) + F.softplus(h, beta=2.0, threshold=1.0) + F.hardtanh(h, -0.5, 0.7)
        h = F.logsigmoid(l[3](h)) + F.glu(self.glu(h), -1) + F.softsign(h)
        h = F.tanhshrink(l[4](h)) + F.softshrink(h, 0.3) + F.hardshrink(h, 0.2)
        h = F.threshold(l[5](h), 0.1, -0.2) + F.relu6(h * 4) + F.rrelu(h, training=False)
        return self.out(h).pow(2).mean()


class _RandomActs(nn.Module):
    """Random activations and dropouts in training: RReLU (random negative slopes),
    AlphaDropout, FeatureAlphaDropout, Dropout2d and Dropout1d, in-place dropout on an
    intermediate, a bernoulli mask with per-element probabilities (RANDOM)."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv1d(8, 8, 3, padding=1)
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)
        self.rrelu = nn.RReLU(0.1, 0.3)
        self.ad = nn.AlphaDropout(0.2)
        self.fad = nn.FeatureAlphaDropout(0.2)
        self.d2 = nn.Dropout2d(0.25)
        self.d1 = nn.Dropout1d(0.25)

    def forward(self, x):  # (2, 3, 6, 6)
        h = self.d2(self.rrelu(self.c1(x)))
        h = self.fad(F.selu(h))
        s = self.d1(F.gelu(self.c2(h.mean(2))))  # (2, 8, 6)
        t = self.l1(s.transpose(1, 2))  # (2, 6, 16)
        t = self.ad(F.selu(t))
        u = self.l2(t)
        F.dropout(u, 0.3, training=True, inplace=True)
        keep = torch.bernoulli(torch.sigmoid(u.detach()))
        return self.out(torch.tanh(u) * keep + self.rrelu(t)).pow(2).mean()


class _CdistCounts(nn.Module):
    """Prototype classification: an embedding with padding_idx, a masked mean, cdist (p=2
    and p=1) to learned prototypes, -logsumexp of the distances; a loss mixing dtypes:
    int64 token counts via .float(), a bool accuracy via .float(), and a float64
    regularizer cast back."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16, padding_idx=0)
        self.proj = nn.Linear(16, 16)
        self.protos = nn.Parameter(torch.randn(5, 16))
        self.temp = nn.Parameter(torch.tensor(1.0))

    def forward(self, ids, y):  # (4, 10) with zeros as padding, (4,)
        keep = ids != 0
        counts = keep.sum(-1)  # int64
        h = self.emb(ids)
        mean = h.sum(1) / counts.float().clamp(min=1)[:, None]
        z = torch.tanh(self.proj(mean))
        d2 = torch.cdist(z, self.protos)
        d1 = torch.cdist(z, self.protos, p=1)
        logits = -(d2 * self.temp + 0.1 * d1)
        nll = -(logits.gather(1, y[:, None]).squeeze(1) - torch.logsumexp(logits, -1))
        acc = (logits.argmax(-1) == y).float()
        reg = self.protos.double().pow(2).sum(-1).mean().float()
        w = counts.float() / counts.sum().float()
        return (nll * w).sum() + 0.01 * reg + 0.1 * (1 - acc.mean()) * self.temp


class _EMATeacher(nn.Module):
    """Mean-teacher consistency: a non-persistent buffer holding an EMA copy of the
    student's weight, updated in place under no_grad with a decay computed from a Python
    int attribute incremented each call (and a Python float attribute written), a
    persistent step buffer, the teacher's output (from the updated EMA weight) as the
    consistency target."""

    def __init__(self):
        super().__init__()
        self.stu = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)
        self.register_buffer("ema_w", self.stu.weight.detach().clone() * 0.9, persistent=False)
        self.register_buffer("ema_b", torch.zeros(16))
        self.register_buffer("step", torch.zeros(()))
        self.n = 0
        self.decay = 0.0

    def forward(self, x, y):
        self.n += 1
        self.decay = min(0.99, (1 + self.n) / (10 + self.n))
        s = torch.tanh(self.stu(x))
        with torch.no_grad():
            self.ema_w.mul_(self.decay).add_(self.stu.weight, alpha=1 - self.decay)
            self.ema_b.lerp_(self.stu.bias, 1 - self.decay)
            self.step += 1
            t = torch.tanh(F.linear(x, self.ema_w, self.ema_b))
        cons = (s - t).pow(2).mean() * self.step
        return F.cross_entropy(self.head(s), y) + cons


class _DictOut(nn.Module):
    """A module returning a namedtuple holding a dict of outputs and a tuple; a graph
    break makes them all outputs of the compiled graph; the loss reads only some of them
    (one head unused, one used through a no-grad comparison, one only through a slice)."""

    from collections import namedtuple

    Out = namedtuple("Out", ["heads", "aux", "feat"])

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.Tanh())
        self.cls = nn.Linear(32, 5)
        self.reg = nn.Linear(32, 3)
        self.unused = nn.Linear(32, 7)

    def forward(self, x):
        f = self.trunk(x)
        heads = {"cls": self.cls(f), "reg": self.reg(f), "unused": self.unused(f)}
        aux = (f.mean(-1), f.std(-1), (f > 0).sum(-1))
        return self.Out(heads, aux, f)


def _dict_out_loss(m, x, y):
    o = m(x)
    torch._dynamo.graph_break()
    ok = (o.heads["reg"].argmax(-1) == y % 3).float()
    return (F.cross_entropy(o.heads["cls"], y) + o.heads["reg"][:, :2].pow(2).mean() * ok.mean()
            + o.aux[1].mean() + o.feat[:, 0].mean() * o.aux[2].float().mean())


class _ChunkAttn(nn.Module):
    """Local attention in fixed chunks of 4 along a sequence whose length (symbolic in
    chunk_attn_dynamic) is padded up to a multiple of 4 with F.pad: reshapes whose sizes
    are expressions in the length (s + (-s) % 4, // 4), arange-derived masks for the
    padding, unflatten / flatten, a slice back to s, and a per-position mean."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.o = nn.Linear(16, 16)
        self.ff = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x):  # (2, s, 16)
        b, s, d = x.shape
        pad = (-s) % 4
        xp = F.pad(x, (0, 0, 0, pad))
        n = xp.shape[1] // 4
        valid = (torch.arange(xp.shape[1]) < s).view(n, 4)
        q, k, v = self.qkv(xp).unflatten(1, (n, 4)).chunk(3, -1)  # (b, n, 4, 16)
        sc = (q @ k.transpose(-1, -2)) * d ** -0.5
        sc = sc.masked_fill(~valid[None, :, None, :], -1e4)
        a = (sc.softmax(-1) @ v).flatten(1, 2)[:, :s]  # (b, s, 16)
        h = x + self.o(a)
        h = h + self.ff(h)
        return h.pow(2).mean(-1).sum() / (b * s)


class _GAT(nn.Module):
    """A two-layer graph attention network over an edge list given as an int64 input
    (2, E): per-edge scores from index_select on source and target nodes, a softmax over
    each node's incoming edges built from scatter_reduce(amax) / exp / index_add
    (segment softmax), messages aggregated into new_zeros with index_add_, symmetric
    degree normalization from scatter_add of ones, node classification."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(16, 32, bias=False)
        self.a1 = nn.Parameter(torch.randn(2, 32) * 0.3)
        self.w2 = nn.Linear(32, 32, bias=False)
        self.a2 = nn.Parameter(torch.randn(2, 32) * 0.3)
        self.head = nn.Linear(32, 4)

    @staticmethod
    def _layer(x, src, dst, w, a, n):
        h = w(x)
        e = F.leaky_relu(h.index_select(0, src) @ a[0] + h.index_select(0, dst) @ a[1], 0.2)  # (E,)
        emax = torch.full((n,), -1e9, dtype=e.dtype).scatter_reduce(0, dst, e.detach(), "amax")
        ex = (e - emax.index_select(0, dst)).exp()
        den = torch.zeros(n, dtype=e.dtype).index_add(0, dst, ex)
        alpha = ex / den.index_select(0, dst).clamp(min=1e-9)
        out = h.new_zeros(n, h.shape[1])
        out.index_add_(0, dst, h.index_select(0, src) * alpha[:, None])
        return out

    def forward(self, x, edges, y):  # (10, 16), (2, E) int64, (10,)
        n = x.shape[0]
        src, dst = edges[0], edges[1]
        deg = torch.zeros(n).scatter_add(0, dst, torch.ones_like(dst, dtype=torch.float)) + 1
        norm = deg.rsqrt()[:, None]
        h = F.elu(self._layer(x, src, dst, self.w1, self.a1, n)) * norm
        h = h + F.elu(self._layer(h, src, dst, self.w2, self.a2, n))
        return F.cross_entropy(self.head(h), y)


class _CapsNet(nn.Module):
    """A capsule network: conv primary capsules squashed, prediction vectors u_hat from an
    einsum with a per-capsule-pair weight, three iterations of dynamic routing (routing
    logits updated in place with agreement, u_hat detached in all but the last iteration),
    a margin loss on capsule lengths and a masked reconstruction head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, stride=2)
        self.prim = nn.Conv2d(16, 4 * 8, 3, stride=2)  # 4 capsule maps of dim 8
        self.W = nn.Parameter(torch.randn(1, 4 * 2 * 2, 3, 6, 8) * 0.1)
        self.recon = nn.Sequential(nn.Linear(3 * 6, 32), nn.ReLU(), nn.Linear(32, 81), nn.Sigmoid())

    @staticmethod
    def _squash(s, dim=-1):
        n2 = (s * s).sum(dim, keepdim=True)
        return n2 / (1 + n2) * s / torch.sqrt(n2 + 1e-8)

    def forward(self, x, y):  # (2, 1, 9, 9), (2,)
        b = x.shape[0]
        h = F.relu(self.conv(x))  # (b, 16, 4, 4)
        p = self.prim(h)  # (b, 32, 1, 1)... see view
        u = self._squash(p.view(b, 4, 8, -1).permute(0, 1, 3, 2).reshape(b, -1, 8))  # (b, 4, 8)
        u = u.repeat(1, 4, 1)  # (b, 16, 8)
        u_hat = torch.einsum("bicod,bid->bico", self.W.expand(b, -1, -1, -1, -1), u)  # (b, 16, 3, 6)
        logits = torch.zeros(b, u_hat.shape[1], 3)
        for it in range(3):
            c = logits.softmax(-1)
            uh = u_hat if it == 2 else u_hat.detach()
            v = self._squash((c[..., None] * uh).sum(1))  # (b, 3, 6)
            if it < 2:
                logits.add_((uh * v[:, None]).sum(-1))
        lengths = v.norm(dim=-1)
        t = F.one_hot(y, 3).float()
        margin = (t * F.relu(0.9 - lengths).pow(2) + 0.5 * (1 - t) * F.relu(lengths - 0.1).pow(2)).sum(-1).mean()
        rec = self.recon((v * t[..., None]).flatten(1))
        return margin + 0.05 * (rec - x.flatten(1)).pow(2).mean()


class _NeuralODE(nn.Module):
    """A neural ODE integrated by an unrolled fixed-step RK4 (5 steps): one dynamics MLP
    called four times per step with the time concatenated as torch.full columns (a Python
    float changing every call), the state carried across steps, and a final classifier;
    plus an Euler-integrated second trajectory sharing the same weights."""

    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(17, 32), nn.Tanh(), nn.Linear(32, 16))
        self.head = nn.Linear(16, 3)

    def _dyn(self, t, z):
        return self.f(torch.cat([z, torch.full((z.shape[0], 1), t)], -1))

    def forward(self, x, y):  # (8, 16), (8,)
        z, dt = x, 0.2
        for k in range(5):
            t = k * dt
            k1 = self._dyn(t, z)
            k2 = self._dyn(t + dt / 2, z + dt / 2 * k1)
            k3 = self._dyn(t + dt / 2, z + dt / 2 * k2)
            k4 = self._dyn(t + dt, z + dt * k3)
            z = z + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        e = x
        for k in range(4):
            e = e + 0.25 * self._dyn(k * 0.25, e)
        return F.cross_entropy(self.head(z), y) + 0.1 * (z - e).pow(2).mean()


class _MaskedConv(nn.Conv2d):
    def __init__(self, kind, cin, cout, k):
        super().__init__(cin, cout, k, padding=k // 2)
        mask = torch.ones_like(self.weight)
        mask[:, :, k // 2, k // 2 + (kind == "B"):] = 0
        mask[:, :, k // 2 + 1:] = 0
        self.register_buffer("mask", mask)

    def forward(self, x):
        return F.conv2d(x, self.weight * self.mask, self.bias, padding=self.padding)


class _PixelCNN(nn.Module):
    """A PixelCNN: a type-A masked 5x5 conv then three type-B masked 3x3 gated residual
    blocks (weight * mask buffer in each forward, tanh * sigmoid gates from a chunk), 8
    intensity levels as logits per pixel, cross_entropy over (B, 8, H, W)."""

    def __init__(self):
        super().__init__()
        self.inp = _MaskedConv("A", 1, 16, 5)
        self.blocks = nn.ModuleList(_MaskedConv("B", 16, 32, 3) for _ in range(3))
        self.proj = nn.ModuleList(nn.Conv2d(16, 16, 1) for _ in range(3))
        self.out = nn.Conv2d(16, 8, 1)

    def forward(self, x):  # (2, 1, 8, 8) integer levels in [0, 8) as floats
        h = self.inp(x / 7.0)
        for blk, proj in zip(self.blocks, self.proj):
            a, g = blk(F.relu(h)).chunk(2, 1)
            h = h + proj(torch.tanh(a) * torch.sigmoid(g))
        return F.cross_entropy(self.out(F.relu(h)), x[:, 0].long())


def _flex_rel_bias(bias):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, (q_idx - kv_idx).clamp(-7, 7) + 7]
    return score_mod


def _flex_causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


class _FlexAttn(nn.Module):
    """torch.nn.attention.flex_attention with a score_mod reading a learned relative
    position bias parameter (gradients through the captured tensor) and a causal
    block mask from create_block_mask, beside F.scaled_dot_product_attention with
    is_causal in a second layer; an MLP between them. Eager flex_attention has no CPU
    backward, so the uncompiled forward (the reference) computes the same attention in
    plain ops; the compiled one traces flex_attention's higher-order op."""

    def __init__(self):
        super().__init__()
        self.qkv1 = nn.Linear(32, 96)
        self.qkv2 = nn.Linear(32, 96)
        self.o1 = nn.Linear(32, 32)
        self.o2 = nn.Linear(32, 32)
        self.rel = nn.Parameter(torch.randn(4, 15) * 0.5)
        self.mlp = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32))

    @staticmethod
    def _heads(t, b, s):
        return t.view(b, s, 4, 8).transpose(1, 2)

    def forward(self, x):  # (2, 16, 32)
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        b, s, _ = x.shape
        q, k, v = (self._heads(t, b, s) for t in self.qkv1(x).chunk(3, -1))
        if torch.compiler.is_compiling():
            mask = create_block_mask(_flex_causal, None, None, s, s, device=x.device)
            a = flex_attention(q, k, v, score_mod=_flex_rel_bias(self.rel), block_mask=mask)
        else:  # eager flex_attention has no backward on the CPU: the same attention in plain ops
            pos = torch.arange(s)
            rel = self.rel[:, (pos[:, None] - pos[None]).clamp(-7, 7) + 7]  # (4, s, s)
            sc = (q @ k.transpose(-1, -2)) * 8 ** -0.5 + rel
            sc = sc.masked_fill(pos[:, None] < pos[None], float("-inf"))
            a = sc.softmax(-1) @ v
        h = x + self.o1(a.transpose(1, 2).reshape(b, s, 32))
        h = h + self.mlp(h)
        q, k, v = (self._heads(t, b, s) for t in self.qkv2(h).chunk(3, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.o2(a.transpose(1, 2).reshape(b, s, 32))
        return h.pow(2).mean()


class _BufferViewMut(nn.Module):
    """Buffers mutated only through views of themselves: a row of a (2, 16) statistics
    buffer updated with add_ through select, a strided slice of a histogram buffer
    incremented through .view(-1)[::2], and a transposed view's diagonal filled; each
    buffer then read (after its update) by the differentiable computation."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 4)
        self.register_buffer("stats", torch.zeros(2, 16))
        self.register_buffer("hist", torch.zeros(4, 4))
        self.register_buffer("gate", torch.ones(16, 16))

    def forward(self, x):
        h = torch.tanh(self.a(x))
        with torch.no_grad():
            self.stats[0].mul_(0.9).add_(h.mean(0), alpha=0.1)
            self.stats[1].add_(1.0)
            self.hist.view(-1)[::2] += h[:, :8].abs().sum(0)
            self.gate.t().diagonal().mul_(0.5)
        h = (h - self.stats[0]) * self.stats[1].rsqrt() @ self.gate
        return self.b(h * self.hist.flatten()[None]).pow(2).mean()


class _Tied3Int8(nn.Module):
    """One weight tied across three modules (input embedding, output head and an auxiliary
    head used on a detached-free intermediate), and an int8 weight-only quantized linear:
    an int8 buffer dequantized by .float() times a learned per-channel scale, plus
    torch.quantize_per_tensor / dequantize of a detached activation as a non-differentiable
    side input."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.head = nn.Linear(16, V, bias=False)
        self.aux = nn.Linear(16, V, bias=True)
        self.head.weight = self.emb.weight
        self.aux.weight = self.emb.weight
        g = torch.Generator().manual_seed(3)
        self.register_buffer("qw", torch.randint(-127, 128, (16, 16), generator=g, dtype=torch.int8))
        self.scale = nn.Parameter(torch.full((16,), 0.01))
        self.qb = nn.Parameter(torch.zeros(16))

    def forward(self, ids):
        h = self.emb(ids)
        w = self.qw.float() * self.scale[:, None]
        h2 = F.gelu(F.linear(h, w, self.qb))
        q = torch.quantize_per_tensor(h2.detach(), 0.05, 0, torch.qint8).dequantize()
        h3 = h2 + 0.1 * q
        lm = F.cross_entropy(self.head(h3).flatten(0, 1), ids.flatten())
        aux = F.cross_entropy(self.aux(h).flatten(0, 1), ids.flatten())
        return lm + 0.3 * aux


class _TinyDeep(nn.Module):
    """50 residual layers of LayerNorm(8) + GELU + Linear(8, 8): hundreds of tiny ops on
    (4, 8) tensors."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 8)) for _ in range(50))

    def forward(self, x):
        for layer in self.layers:
            x = x + 0.5 * layer(x)
        return x.pow(2).mean()


class _SparseEmb(nn.Module):
    """nn.Embedding(sparse=True) (a sparse COO gradient) beside a dense one, mean-pooled
    into a classifier."""

    def __init__(self):
        super().__init__()
        self.sp = nn.Embedding(V, 16, sparse=True)
        self.de = nn.Embedding(V, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, ids, y):
        h = torch.tanh(self.sp(ids) + self.de(ids)).mean(1)
        return F.cross_entropy(self.head(h), y)


class _GradPenalty(nn.Module):
    """A WGAN-GP style loss: the critic's gradient with respect to an interpolated input,
    its norm penalized, so the step's backward differentiates a backward. The inner
    gradient is torch.func.grad (traced into the graph: the joint graph holds a forward,
    its backward as forward ops, and their backward); torch.autograd.grad(create_graph=
    True) would be a double backward through a compiled graph, which AOTAutograd refuses
    ("does not currently support double backward") under every partitioner."""

    def __init__(self):
        super().__init__()
        self.critic = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, 1))

    def forward(self, real, fake):
        alpha = torch.linspace(0, 1, real.shape[0])[:, None]
        mix = alpha * real + (1 - alpha) * fake
        g = torch.func.grad(lambda z: self.critic(z).sum())(mix)
        gp = (g.norm(dim=1) - 1).pow(2).mean()
        return self.critic(fake).mean() - self.critic(real).mean() + 10 * gp


# ------------------------------------------------- more hand-written models (seventh batch)
class _ItemSize(nn.Module):
    """`.item()` read inside the graph and used as a size (an unbacked SymInt): the number
    of rows whose gate passes a threshold picks how many top-scored rows a second layer
    sees (narrow by the unbacked length, new_zeros of it, a pad back to the full size)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.g = nn.Linear(32, 1)
        self.b = nn.Linear(32, 32)
        self.out = nn.Linear(32, 4)

    def forward(self, x):  # (10, 16)
        h = torch.tanh(self.a(x))
        score = self.g(h).squeeze(-1)
        k = (score.detach() > 0).sum().item()
        torch._check(k >= 0)
        torch._check(k <= h.shape[0])
        order = score.argsort(descending=True)
        top = h[order].narrow(0, 0, k)
        sel = F.gelu(self.b(top)) * torch.sigmoid(score[order][:k, None])
        pad = torch.cat([sel, sel.new_zeros(h.shape[0] - k, 32)], 0)
        y = h + torch.zeros_like(h).index_copy(0, order, pad)
        return self.out(y).pow(2).mean() + k * 1e-3


class _NonzeroRoute(nn.Module):
    """Data-dependent output shapes (capture_dynamic_output_shape_ops): a top-1 router over
    two experts gathers each expert's tokens by nonzero (an unbacked row count per expert),
    runs the expert on them and index_adds the gated result back; masked_select of the
    positive activations feeds an auxiliary loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.gate = nn.Linear(16, 2)
        self.e0 = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.e1 = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 16))
        self.head = nn.Linear(16, V)

    def forward(self, ids):
        h = self.emb(ids).flatten(0, 1)  # (n, 16)
        p = self.gate(h).softmax(-1)
        choice = p.argmax(-1)
        out = h.clone()
        for e, expert in enumerate((self.e0, self.e1)):
            rows = (choice == e).nonzero().squeeze(1)
            out = out.index_add(0, rows, expert(h[rows]) * p[rows, e:e + 1])
        mask = out > 0
        pos = torch.masked_select(out, mask)
        aux = pos.pow(2).sum() / mask.numel()
        logits = self.head(out)
        return F.cross_entropy(logits, ids.flatten()) + 0.1 * aux


class _JVPLoss(nn.Module):
    """Forward-mode AD inside the loss: torch.func.jvp of the network at the input along a
    fixed direction (the directional derivative is penalized, a Jacobian regularizer), so the
    step's backward differentiates a jvp."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 4))

    def forward(self, x, v, y):
        out, tangent = torch.func.jvp(self.net, (x,), (v,))
        return F.cross_entropy(out, y) + 0.1 * tangent.pow(2).mean()


class _MAML(nn.Module):
    """A MAML inner step in the forward: torch.func.functional_call of the model with a
    dict of parameters, torch.func.grad of the support loss with respect to that dict,
    one SGD step on it, the query loss of the adapted parameters (second order)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3))

    def forward(self, xs, ys, xq, yq):
        params = dict(self.net.named_parameters())

        def support_loss(p):
            return F.cross_entropy(torch.func.functional_call(self.net, p, (xs,)), ys)
        g = torch.func.grad(support_loss)(params)
        fast = {k: w - 0.1 * g[k] for k, w in params.items()}
        return F.cross_entropy(torch.func.functional_call(self.net, fast, (xq,)), yq)


class _SDPAGQA(nn.Module):
    """F.scaled_dot_product_attention with enable_gqa=True (8 query heads over 2 key/value
    heads, no repeat_interleave) and a boolean attn_mask (causal and key padding, from
    lengths), then a float additive mask (learned per-head slopes times the distance, -inf
    where the bool mask is False); a SwiGLU MLP, a length-masked mean loss."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 32)
        self.q = nn.Linear(32, 32, bias=False)
        self.kv = nn.Linear(32, 16, bias=False)
        self.o = nn.Linear(32, 32, bias=False)
        self.bias = nn.Parameter(torch.zeros(8, 1, 1))
        self.up = nn.Linear(32, 128, bias=False)
        self.down = nn.Linear(64, 32, bias=False)
        self.head = nn.Linear(32, V)

    def forward(self, ids, lens):
        b, s = ids.shape
        x = self.emb(ids)
        pos = torch.arange(s, device=ids.device)
        mask = (pos[None, :] <= pos[:, None])[None, None] & (pos[None, None, None, :] < lens[:, None, None, None])
        for layer in range(2):
            h = F.rms_norm(x, (32,))
            q = self.q(h).view(b, s, 8, 4).transpose(1, 2)
            k, v = self.kv(h).view(b, s, 2, 2, 4).permute(2, 0, 3, 1, 4).unbind(0)
            if layer == 0:
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            else:
                fmask = torch.where(mask, self.bias * (pos[None, :] - pos[:, None]).float(), float("-inf"))
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=fmask, enable_gqa=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, 32))
            g, u = self.up(F.rms_norm(x, (32,))).chunk(2, -1)
            x = x + self.down(F.silu(g) * u)
        keep = (pos[None, :] < lens[:, None]).float()
        ce = F.cross_entropy(self.head(x).flatten(0, 1), ids.flatten(), reduction="none").view(b, s)
        return (ce * keep).sum() / keep.sum()


class _TfmDecoder(nn.Module):
    """nn.Transformer (encoder + nn.TransformerDecoder, norm_first, GELU) with a causal
    tgt_mask, tgt / memory key padding masks, and a decoder LayerNorm."""

    def __init__(self):
        super().__init__()
        self.src = nn.Embedding(V, 32)
        self.tgt = nn.Embedding(V, 32)
        self.tf = nn.Transformer(32, 4, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=64, dropout=0.0,
                                 activation="gelu", batch_first=True, norm_first=True)
        self.head = nn.Linear(32, V)

    def forward(self, src, tgt, src_len, tgt_len):
        s, t = src.shape[1], tgt.shape[1]
        tgt_mask = torch.ones(t, t, dtype=torch.bool, device=src.device).triu(1)
        src_pad = torch.arange(s, device=src.device)[None] >= src_len[:, None]
        tgt_pad = torch.arange(t, device=src.device)[None] >= tgt_len[:, None]
        h = self.tf(self.src(src), self.tgt(tgt), tgt_mask=tgt_mask, src_key_padding_mask=src_pad,
                    tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
        logits = self.head(h)[:, :-1]
        lab = tgt[:, 1:].masked_fill(tgt_pad[:, 1:], -100)
        return F.cross_entropy(logits.flatten(0, 1), lab.flatten(), ignore_index=-100)


@torch.library.custom_op("corpus_zoo::ema_stat_", mutates_args=("stat",))
def _ema_stat_(stat: torch.Tensor, x: torch.Tensor) -> None:
    stat.mul_(0.9).add_(x.detach().pow(2).mean(0), alpha=0.1)


@_ema_stat_.register_fake
def _(stat, x):
    return None


@torch.library.custom_op("corpus_zoo::clamp_scale_", mutates_args=("out",))
def _clamp_scale_(out: torch.Tensor, x: torch.Tensor, s: torch.Tensor) -> None:
    out.copy_(x.clamp(-2, 2) * s)


@_clamp_scale_.register_fake
def _(out, x, s):
    return None


class _MutatingOp(nn.Module):
    """torch.library.custom_op ops that mutate an argument (mutates_args): one updates a
    running second-moment buffer in place (auto_functionalized in the graph), whose new
    value then normalizes the activations; one writes its result into a preallocated
    intermediate (an out= style op on a non-leaf, no autograd of its own)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.b = nn.Linear(32, 8)
        self.register_buffer("m2", torch.ones(32))

    def forward(self, x):
        h = F.silu(self.a(x))
        _ema_stat_(self.m2, h)
        h = h * torch.rsqrt(self.m2 + 1e-5)
        buf = h.new_empty(h.shape[0], 32)
        _clamp_scale_(buf, h.detach(), h.new_full((32,), 0.5))
        return (self.b(h + buf)).pow(2).mean()


class _GradAccum(nn.Module):
    """Gradient accumulation of two micro-batches in one compiled step: the same weights
    (and a training BatchNorm, whose running statistics are updated twice) run on each
    half, each micro-batch loss scaled by its share."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 16, 3, padding=1)
        self.bn = nn.BatchNorm1d(16)
        self.l = nn.Linear(16, 5)

    def forward(self, x, y):
        total = 0.0
        for xm, ym in zip(x.chunk(2), y.chunk(2)):
            h = F.relu(self.bn(self.c(xm))).amax(-1)
            total = total + F.cross_entropy(self.l(h), ym) * (xm.shape[0] / x.shape[0])
        return total


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
    if name == "unet":
        return _UNet(), (torch.randn(2, 3, 16, 16), torch.randint(0, 4, (2, 16, 16))), lambda m, x, y: m(x, y)
    if name == "densenet":
        return _DenseNet(), (torch.randn(4, 3, 16, 16), torch.tensor([1, 2, 3, 4])), lambda m, x, y: m(x, y)
    if name == "mha_masks":
        return _MHAMasks(), (_ids(3, 10), torch.tensor([10, 7, 4]), torch.randn(3, 5, 16), torch.randn(3, 5, 24)), \
            lambda m, i, l, k, v: m(i, l, k, v)
    if name == "tied_bag":
        return _TiedBag(), (_ids(3, 8), _ids(1, 9).flatten(), torch.tensor([0, 2, 6])), lambda m, i, c, o: m(i, c, o)
    if name == "tfm_encoder":
        return _TfmEncoder(), (_ids(3, 10), torch.tensor([10, 6, 3])), lambda m, i, l: m(i, l)
    if name == "packed_rnn":
        return _PackedRNN(), (_ids(3, 7), torch.tensor([4, 7, 2]), torch.tensor([0, 2, 1])), lambda m, i, l, y: m(i, l, y)
    if name == "ctc":
        return _CTC(), (torch.randn(3, 12, 8), torch.randint(1, 6, (3, 4)), torch.tensor([12, 10, 8]),
                        torch.tensor([4, 3, 2]), torch.tensor([1.0, 0.5, 0.0])), \
            lambda m, f, t, il, tl, w: m(f, t, il, tl, w)
    if name == "where_inplace":
        return _WhereInPlace(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "einsum_bilinear":
        return _EinsumBilinear(), (torch.randn(2, 6, 16),), lambda m, x: m(x)
    if name == "buffer_counter":
        return _BufferCounter(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "wavenet":
        return _WaveNet(), (torch.randn(2, 1, 24), torch.randint(0, 8, (2, 24))), lambda m, x, y: m(x, y)
    if name == "multi_out":
        return _MultiOut(), (torch.randn(8, 16), torch.randint(0, 4, (8,))), _multi_out_loss
    if name == "sac":
        return _SAC(), (torch.randn(2, 6, 32),), lambda m, x: m(x)
    if name == "cnn":
        x = torch.randn(1, 4, 3, 12, 12)
        for d in (0, 2, 3, 4):  # cnn_dynamic: only the batch varies (see _CNNDyn)
            torch._dynamo.mark_static(x, d)
        return _CNNDyn(), (x, torch.tensor([[1, 5, 3, 9]])), lambda m, x, y: m(x, y)
    if name == "custom_ops":
        return _CustomOps(), (torch.randn(2, 6, 16),), lambda m, x: m(x)
    if name == "alias_out":
        return _AliasOut(), (torch.randn(6, 16),), _alias_out_loss
    if name == "input_mutation":
        return _InputMutation(), (torch.randn(6, 16), torch.randn(6, 16)), lambda m, x, y: m(x, y)
    if name == "aliased_inputs":
        base = torch.randn(6, 16)
        return _AliasedInputs(), (base[:, :12], base[:, 4:12]), lambda m, a, b: m(a, b)
    if name == "nograd_mix":
        return _NoGradMix(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "cond_branch":
        return _CondBranch(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "hop_map":
        return _HopMap(), (torch.randn(3, 4, 16),), lambda m, x: m(x)
    if name == "scan_rnn":
        return _ScanRNN(), (torch.randn(5, 3, 8), torch.tensor([0, 3, 1])), lambda m, x, y: m(x, y)
    if name == "while_loop":
        return _WhileLoop(), (torch.randn(4, 16),), lambda m, x: m(x)
    if name == "named_ckpt":
        return _NamedCkpt(), (torch.randn(2, 6, 32),), lambda m, x: m(x)
    if name == "tfm_block":
        return _TfmBlock(), (torch.randn(2, 12, 32),), lambda m, x: m(x)
    if name == "int_saved":
        return _IntSaved(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "multi_int_out":
        return _MultiIntOut(), (torch.randn(8, 16), torch.randint(0, 5, (8,))), _multi_int_out_loss
    if name == "albert_shared":
        return _AlbertShared(), (_ids(),), lambda m, ids: m(ids)
    if name == "parametrized":
        return _Parametrized(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "vmap_ensemble":
        return _VmapEnsemble(), (torch.randn(5, 16),), lambda m, x: m(x)
    if name == "fft_complex":
        return _FFTComplex(), (torch.randn(2, 16, 4),), lambda m, x: m(x)
    if name == "njt_input":
        # One offsets tensor for every build: the ragged size (j1) is tied to it, and
        # corpus_check compares the inputs after the step with eager's (j1 != j2 else).
        nt = torch.nested.nested_tensor_from_jagged(torch.randn(9, 8), _NJT_OFFSETS)
        return _NJTInput(), (nt,), lambda m, nt: m(nt)
    if name == "emb_maxnorm":
        return _EmbMaxNorm(), (_ids(),), lambda m, ids: m(ids)
    if name == "custom_fn_dirty":
        return _CustomFnDirty(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "fake_quant":
        return _FakeQuant(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "gumbel_sample":
        return _GumbelSample(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "vae_rsample":
        return _VAERsample(), (torch.randn(2, 6, 16),), lambda m, x: m(x)
    if name == "linalg":
        return _Linalg(), (torch.randn(4, 6, 8),), lambda m, x: m(x)
    if name == "spatial_tf":
        return _SpatialTF(), (torch.randn(2, 3, 8, 8), torch.tensor([1, 3])), lambda m, x, y: m(x, y)
    if name == "conv3d":
        return _Conv3D(), (torch.randn(2, 2, 4, 8, 8),), lambda m, x: m(x)
    if name == "stft":
        return _STFT(), (torch.randn(2, 64),), lambda m, x: m(x)
    if name == "ckpt_variants":
        return _CkptVariants(), (torch.randn(4, 32),), lambda m, x: m(x)
    if name == "save_on_cpu":
        return _SaveOnCPU(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "grad_hook":
        return _GradHook(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "half_params":
        return _HalfParams(), (torch.randn(2, 6, 16),), lambda m, x: m(x)
    if name == "partial_loss":
        return _PartialLoss(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "deep_mlp":
        return _DeepMLP(), (torch.randn(8, 8),), lambda m, x: m(x)
    if name == "wide_mlp":
        return _WideMLP(), (torch.randn(8, 16), torch.randint(0, 8, (8,))), lambda m, x, y: m(x, y)
    if name == "norm_zoo":
        return _NormZoo(), (torch.randn(2, 3, 8, 8), torch.tensor([1, 4])), lambda m, x, y: m(x, y)
    if name == "bn_eval_mix":
        return _BNEvalMix(), (torch.randn(4, 3, 8, 8), torch.tensor([0, 1, 2, 4])), lambda m, x, y: m(x, y)
    if name == "reuse_views":
        return _ReuseViews(), (torch.randn(6, 16), torch.randn(6, 16)), lambda m, x, z: m(x, z)
    if name == "scatter_reduce":
        return _ScatterReduce(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "cum_chain":
        return _CumChain(), (torch.randn(2, 10, 8),), lambda m, x: m(x)
    if name == "order_stats":
        return _OrderStats(), (torch.randn(6, 16),), lambda m, x: m(x)
    if name == "alibi_t5":
        return _AlibiT5(), (_ids(2, 10),), lambda m, ids: m(ids)
    if name == "diffusion_unet":
        return _DiffusionUNet(), (torch.randn(2, 3, 8, 8), torch.tensor([3, 41]), torch.randn(2, 3, 8, 8)), \
            lambda m, x, t, n: m(x, t, n)
    if name == "rnn_cells":
        return _RNNCells(), (torch.randn(12, 3, 8),), lambda m, x: m(x)
    if name == "moe_top2":
        return _MoETop2(), (torch.randn(2, 6, 16),), lambda m, x: m(x)
    if name == "perceiver":
        return _Perceiver(), (torch.randn(2, 16, 12), torch.randint(0, 5, (2, 3))), lambda m, x, y: m(x, y)
    if name == "orthogonal":
        return _Orthogonal(), (torch.randn(6, 16),), lambda m, x: m(x)
    if name == "pad_interp":
        return _PadInterp(), (torch.randn(2, 3, 8, 8), torch.tensor([1, 3])), lambda m, x, y: m(x, y)
    if name == "einsum_diag":
        return _EinsumDiag(), (torch.randn(3, 8, 8),), lambda m, x: m(x)
    if name == "activations":
        return _Activations(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "random_acts":
        return _RandomActs(), (torch.randn(2, 3, 6, 6),), lambda m, x: m(x)
    if name == "cdist_counts":
        ids = _ids(4, 10)
        ids[0, 6:] = 0
        ids[2, 3:] = 0
        return _CdistCounts(), (ids, torch.tensor([0, 3, 1, 4])), lambda m, i, y: m(i, y)
    if name == "ema_teacher":
        return _EMATeacher(), (torch.randn(8, 16), torch.randint(0, 4, (8,))), lambda m, x, y: m(x, y)
    if name == "dict_out":
        return _DictOut(), (torch.randn(8, 16), torch.randint(0, 5, (8,))), _dict_out_loss
    if name == "chunk_attn":
        return _ChunkAttn(), (torch.randn(2, 10, 16),), lambda m, x: m(x)
    if name == "gnn_gat":
        edges = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 2, 4, 6, 8, 1, 3, 3],
                              [1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 5, 7, 9, 1, 3, 1, 0, 0]])
        return _GAT(), (torch.randn(10, 16), edges, torch.randint(0, 4, (10,))), lambda m, x, e, y: m(x, e, y)
    if name == "capsnet":
        return _CapsNet(), (torch.rand(2, 1, 9, 9), torch.tensor([0, 2])), lambda m, x, y: m(x, y)
    if name == "neural_ode":
        return _NeuralODE(), (torch.randn(8, 16), torch.randint(0, 3, (8,))), lambda m, x, y: m(x, y)
    if name == "pixelcnn":
        return _PixelCNN(), (torch.randint(0, 8, (2, 1, 8, 8)).float(),), lambda m, x: m(x)
    if name == "flex_attn":
        # flex_attention refuses inputs that require grad on the CPU up front
        # (_validate_device), though its higher-order op has a dense backward that
        # AOTAutograd traces: let the compiled forward through on the CPU.
        import torch.nn.attention.flex_attention as fa

        if not getattr(fa._validate_device, "_corpus", False):
            check = fa._validate_device

            def _validate_device(q, k, v):
                if q.device.type != "cpu":
                    check(q, k, v)

            _validate_device._corpus = True
            fa._validate_device = _validate_device
        return _FlexAttn(), (torch.randn(2, 16, 32),), lambda m, x: m(x)
    if name == "buffer_view_mut":
        return _BufferViewMut(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "tied3_int8":
        return _Tied3Int8(), (_ids(),), lambda m, ids: m(ids)
    if name == "tiny_deep":
        return _TinyDeep(), (torch.randn(4, 8),), lambda m, x: m(x)
    if name == "sparse_emb":
        return _SparseEmb(), (_ids(4, 6), torch.tensor([0, 1, 2, 3])), lambda m, ids, y: m(ids, y)
    if name == "grad_penalty":
        return _GradPenalty(), (torch.randn(6, 16), torch.randn(6, 16)), lambda m, r, f: m(r, f)
    if name == "item_size":
        return _ItemSize(), (torch.randn(10, 16),), lambda m, x: m(x)
    if name == "nonzero_route":
        return _NonzeroRoute(), (_ids(2, 10),), lambda m, ids: m(ids)
    if name == "jvp_loss":
        return _JVPLoss(), (torch.randn(8, 8), torch.randn(8, 8), torch.randint(0, 4, (8,))), \
            lambda m, x, v, y: m(x, v, y)
    if name == "maml":
        return _MAML(), (torch.randn(6, 8), torch.randint(0, 3, (6,)), torch.randn(9, 8), torch.randint(0, 3, (9,))), \
            lambda m, xs, ys, xq, yq: m(xs, ys, xq, yq)
    if name == "sdpa_gqa":
        return _SDPAGQA(), (_ids(3, 10), torch.tensor([10, 6, 3])), lambda m, ids, lens: m(ids, lens)
    if name == "tfm_decoder":
        return _TfmDecoder(), (_ids(3, 9), _ids(3, 7), torch.tensor([9, 5, 7]), torch.tensor([7, 7, 4])), \
            lambda m, s, t, sl, tl: m(s, t, sl, tl)
    if name == "mutating_op":
        return _MutatingOp(), (torch.randn(8, 16),), lambda m, x: m(x)
    if name == "grad_accum":
        return _GradAccum(), (torch.randn(8, 4, 10), torch.randint(0, 5, (8,))), lambda m, x, y: m(x, y)
    raise KeyError(name)


HAND_WRITTEN = ("ckpt", "ckpt_dropout", "mha", "sdpa", "embbag", "inplace2", "buffer_update", "rope_complex",
                "autocast", "frozen", "channels_last", "noise", "indexy", "f64", "input_grad",
                "unet", "densenet", "mha_masks", "tied_bag", "tfm_encoder", "packed_rnn", "ctc", "where_inplace",
                "einsum_bilinear", "buffer_counter", "wavenet", "multi_out", "sac", "cnn", "custom_ops",
                "alias_out", "input_mutation", "aliased_inputs", "nograd_mix", "cond_branch", "hop_map", "scan_rnn",
                "while_loop", "named_ckpt", "tfm_block", "int_saved", "multi_int_out", "albert_shared", "parametrized",
                "vmap_ensemble", "fft_complex", "njt_input",
                "emb_maxnorm", "custom_fn_dirty", "fake_quant", "gumbel_sample", "vae_rsample", "linalg",
                "spatial_tf", "conv3d", "stft", "ckpt_variants", "save_on_cpu", "grad_hook", "half_params",
                "partial_loss", "deep_mlp", "wide_mlp",
                "norm_zoo", "bn_eval_mix", "reuse_views", "scatter_reduce", "cum_chain", "order_stats", "alibi_t5",
                "diffusion_unet", "rnn_cells", "moe_top2", "perceiver", "orthogonal", "pad_interp", "einsum_diag",
                "activations", "random_acts", "cdist_counts", "ema_teacher", "dict_out", "chunk_attn",
                "gnn_gat", "capsnet", "neural_ode", "pixelcnn", "flex_attn", "buffer_view_mut", "tied3_int8",
                "tiny_deep", "sparse_emb", "grad_penalty",
                "item_size", "nonzero_route", "jvp_loss", "maml", "sdpa_gqa", "tfm_decoder", "mutating_op",
                "grad_accum")
MODELS = ["distilbert", "roberta", "deberta_v2", "electra", "whisper", "wav2vec2", "hubert", "convnext", "swin",
          "mobilenet_v2", "efficientnet", "clip_text", "clip_vision", "gpt_neox", "falcon", "phi", "qwen2", "gemma",
          "mistral", "qwen2_moe", "olmoe", "mamba", "gpt2_gc", "gpt2_dropout", "gpt2_gc_dropout",
          *HAND_WRITTEN, "qwen2_dynamic", "sdpa_dynamic", "cnn_dynamic", "tfm_block_dynamic",
          "chunk_attn_dynamic",
          "xlnet", "reformer", "bloom", "fnet", "funnel", "rwkv", "segformer", "longformer", "bloom_dynamic",
          "vit_mae", "esm", "canine", "levit", "nystromformer", "convnextv2", "mamba2", "autoformer",
          "informer", "patchtst", "recurrent_gemma", "deepseek_v3", "gpt_oss",
          "gemma2", "qwen3_moe", "cohere", "granitemoe", "dbrx", "jamba", "zamba2", "qwen3_next", "gpt_bigcode",
          "phi3", "beit", "dinov2", "siglip", "convbert", "squeezebert", "layoutlmv3"]
RANDOM = ("gpt2_dropout", "gpt2_gc_dropout", "ckpt_dropout", "noise", "gumbel_sample", "vae_rsample", "random_acts",
          "informer")
# built with torch._dynamo.config.capture_scalar_outputs
SCALAR_OUTPUTS = ("while_loop", "hop_map", "scan_rnn", "item_size")
# built with torch._dynamo.config.capture_dynamic_output_shape_ops (nonzero, masked_select)
DYNAMIC_OUTPUT_SHAPES = ("nonzero_route",)


def build(name: str):
    """``(module, inputs, loss_fn)`` for a model of this zoo (a ``*_dynamic`` name: the
    same model; corpus_check marks its sequence dimension dynamic)."""
    base = name.removesuffix("_dynamic")
    # while_loop's backward reads its counter with .item(), and Inductor lowers map and
    # scan to while loops: without captured scalar outputs the AOTAutograd trace (or
    # Inductor's post-grad passes) raise DataDependentOutputException, under PyTorch's
    # partitioners too, and Dynamo falls back to eager where it can (no partitioner runs).
    torch._dynamo.config.capture_scalar_outputs = base in SCALAR_OUTPUTS
    # nonzero / masked_select: their output's length is an unbacked symbol only with
    # captured dynamic output shapes; without it Dynamo breaks the graph at each.
    torch._dynamo.config.capture_dynamic_output_shape_ops = base in DYNAMIC_OUTPUT_SHAPES
    if base in HAND_WRITTEN:
        return _hand_written(base)
    return _transformers(base)
