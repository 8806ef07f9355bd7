"""Modeling code of the tiny stand-ins for LLaDA, Dream and MDLM (written for sketchwm; random weights).

This file is copied into each stand-in checkpoint directory and named in its ``config.json``
``auto_map``, so the checkpoint loads with ``AutoModel.from_pretrained(dir, trust_remote_code=True)``
exactly like a real LLaDA / Dream / MDLM checkpoint. It must import only ``torch`` and
``transformers`` (it is executed from the checkpoint folder as a dynamic module).

What each class reproduces of its model's published interface (not its weights or its code):

* :class:`StandinLLaDAModelLM` — ``LLaDAModelLM``: config fields ``d_model``, ``n_heads``,
  ``n_layers``, ``vocab_size``/``embedding_size`` (padded beyond the tokenizer), ``mask_token_id``,
  ``eos_token_id``, ``max_sequence_length``; ``forward(input_ids, attention_mask=None)`` with a 2-D
  (B, L) 0/1 key mask; logits aligned with the input (position i is the marginal of token i);
  rotary positions (no position ids input).
* :class:`StandinDreamModel` — ``DreamModel``: Qwen2-style fields ``hidden_size``,
  ``num_attention_heads``, ``num_hidden_layers``, ``max_position_embeddings``, ``mask_token_id``,
  ``pad_token_id``, ``bos_token_id``, ``eos_token_id``; ``forward(input_ids, attention_mask=None,
  position_ids=None)`` where ``attention_mask`` is ``None``, the string ``"full"`` or a 4-D
  (B, 1, L, L) bool mask handed to scaled-dot-product attention as is (a 2-D mask is broadcast the
  way SDPA broadcasts it, which is wrong for B > 1: the real model does the same); logits of an
  autoregressive model: position i predicts token i + 1. Besides rotary positions it has a small
  learned absolute position table indexed by ``position_ids``, an amplifier that makes wrong
  position ids visible (the real model is rotary-only, where they show only as numerical noise).
* :class:`StandinMDLMModel` — MDLM's ``MDLM`` HF wrapper (DiT): fields ``vocab_size`` (= GPT-2's
  50257 + 1 in the real one; here the tokenizer's size + 1), ``model_length``, ``hidden_dim``,
  ``n_blocks``, ``n_heads``, ``time_conditioning``; ``forward(input_ids, timesteps)`` with no
  attention mask at all; logits aligned with the input.

Probe options (config fields, off by default) used by the conformance suite:
``probe_ids`` (list of ids): the logits at the position that predicts sequence index j get +40 on
``probe_ids[j % len]`` (j counted from 0 at the first real token), so any one-position shift error
changes the argmax; ``stop_after`` (int): the EOS logit gets ``stop_slope * (j - stop_after)``, a
model that prefers to end its text after about ``stop_after`` tokens of the sequence.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, CausalLMOutputWithPast, MaskedLMOutput


class StandinLLaDAConfig(PretrainedConfig):
    """LLaDA-shaped config (field names of ``LLaDAConfig``)."""

    model_type = "sketchwm-standin-llada"

    def __init__(self, vocab_size=128, embedding_size=None, d_model=32, n_heads=2, n_layers=2, max_sequence_length=256,
                 mask_token_id=0, eos_token_id=1, pad_token_id=1, rope_theta=10000.0, probe_ids=None, stop_after=None,
                 stop_slope=1.5, **kw):
        self.vocab_size, self.embedding_size = vocab_size, embedding_size or vocab_size
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.max_sequence_length, self.mask_token_id, self.rope_theta = max_sequence_length, mask_token_id, rope_theta
        self.probe_ids, self.stop_after, self.stop_slope = probe_ids, stop_after, stop_slope
        super().__init__(eos_token_id=eos_token_id, pad_token_id=pad_token_id, **kw)


class StandinDreamConfig(PretrainedConfig):
    """Dream-shaped config (Qwen2 field names of ``DreamConfig``)."""

    model_type = "sketchwm-standin-dream"

    def __init__(self, vocab_size=128, hidden_size=32, num_attention_heads=2, num_hidden_layers=2,
                 max_position_embeddings=256, mask_token_id=0, pad_token_id=1, bos_token_id=2, eos_token_id=1,
                 rope_theta=10000.0, probe_ids=None, stop_after=None, stop_slope=1.5, **kw):
        self.vocab_size, self.hidden_size = vocab_size, hidden_size
        self.num_attention_heads, self.num_hidden_layers = num_attention_heads, num_hidden_layers
        self.max_position_embeddings, self.mask_token_id, self.rope_theta = max_position_embeddings, mask_token_id, rope_theta
        self.probe_ids, self.stop_after, self.stop_slope = probe_ids, stop_after, stop_slope
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kw)


class StandinMDLMConfig(PretrainedConfig):
    """MDLM-shaped config (field names of the ``MDLMConfig`` of kuleshov-group/mdlm-owt)."""

    model_type = "sketchwm-standin-mdlm"

    def __init__(self, vocab_size=128, model_length=256, hidden_dim=32, cond_dim=16, n_blocks=2, n_heads=2,
                 dropout=0.0, time_conditioning=False, probe_ids=None, stop_after=None, stop_slope=1.5,
                 eos_token_id=None, **kw):
        self.vocab_size, self.model_length, self.hidden_dim, self.cond_dim = vocab_size, model_length, hidden_dim, cond_dim
        self.n_blocks, self.n_heads, self.dropout, self.time_conditioning = n_blocks, n_heads, dropout, time_conditioning
        self.probe_ids, self.stop_after, self.stop_slope = probe_ids, stop_after, stop_slope
        super().__init__(eos_token_id=eos_token_id, **kw)


def _rotate(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding: x (B, H, L, d) at integer positions pos (B, L)."""
    d = x.shape[-1] // 2
    freq = theta ** (-torch.arange(d, device=x.device, dtype=torch.float32) / d)  # (d,)
    ang = pos.to(torch.float32)[:, None, :, None] * freq  # (B, 1, L, d)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class _Block(nn.Module):
    """Pre-norm bidirectional transformer block with rotary attention."""

    def __init__(self, hidden: int, heads: int, theta: float):
        super().__init__()
        self.heads, self.theta = heads, theta
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))

    def forward(self, h: torch.Tensor, pos: torch.Tensor, attn_mask) -> torch.Tensor:
        B, L, H = h.shape
        q, k, v = self.qkv(self.ln1(h)).view(B, L, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        q, k = _rotate(q, pos, self.theta), _rotate(k, pos, self.theta)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=False)  # (B, heads, L, d)
        h = h + self.out(a.transpose(1, 2).reshape(B, L, H))
        return h + self.mlp(self.ln2(h))


class _Body(nn.Module):
    """Embedding and blocks → hidden states (B, L, H); the last channel is overwritten with the
    sequence index j each row is about, which only the probe logits of :class:`_Head` read."""

    def __init__(self, vocab: int, hidden: int, heads: int, layers: int, max_len: int, theta: float, abs_pos: bool):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.abs = nn.Embedding(max_len + 2, hidden) if abs_pos else None
        self.blocks = nn.ModuleList(_Block(hidden, heads, theta) for _ in range(layers))
        self.ln = nn.LayerNorm(hidden)

    def forward(self, ids, pos, attn_mask, next_token: bool) -> torch.Tensor:
        h = self.emb(ids)
        if self.abs is not None:
            h = h + self.abs(pos.clamp(0, self.abs.num_embeddings - 1))
        for blk in self.blocks:
            h = blk(h, pos, attn_mask)
        h = self.ln(h)
        j = (pos + (1 if next_token else 0)).to(h.dtype)
        return torch.cat([h[..., :-1], j[..., None]], dim=-1)


class _Head(nn.Module):
    """LM head on (..., H) hidden states, plus the probe logits of the module doc (from channel -1)."""

    def __init__(self, hidden: int, vocab: int, cfg):
        super().__init__()
        self.proj = nn.Linear(hidden - 1, vocab)
        self.probe_ids, self.stop_after, self.stop_slope = cfg.probe_ids, cfg.stop_after, cfg.stop_slope
        self.eos = cfg.eos_token_id

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.proj(h[..., :-1]).float()
        j = h[..., -1].round().long()
        if self.probe_ids:
            table = torch.tensor(self.probe_ids, device=h.device)
            logits = logits.scatter_add(-1, table[j % len(table)][..., None], torch.full_like(logits[..., :1], 40.0))
        if self.stop_after is not None and self.eos is not None:
            logits[..., self.eos] += self.stop_slope * (j - self.stop_after).float()
        return logits


class _Core(nn.Module):
    """Body and head in one module (LLaDA's and MDLM's layout: the head is inside the base model)."""

    def __init__(self, vocab, hidden, heads, layers, max_len, theta, abs_pos, cfg):
        super().__init__()
        self.body = _Body(vocab, hidden, heads, layers, max_len, theta, abs_pos)
        self.head = _Head(hidden, vocab, cfg)

    def forward(self, ids, pos, attn_mask, next_token: bool) -> torch.Tensor:
        return self.head(self.body(ids, pos, attn_mask, next_token))


def _init(module: nn.Module, hidden: int) -> None:
    """Seeded-by-caller random init with logits of spread ~1 (high-entropy marginals)."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=1.0 / math.sqrt(hidden))
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=1.0)


class _StandinModel(PreTrainedModel):
    """Construction shared by the stand-ins: :meth:`_build` the modules, seeded :func:`_init`, ``post_init``."""

    def __init__(self, config):
        super().__init__(config)
        _init(self, self._build(config))
        self.post_init()

    def _build(self, config) -> int:
        """Create the submodules from ``config``; return the hidden size that scales :func:`_init`."""
        raise NotImplementedError

    def _init_weights(self, module):  # weights come from the checkpoint or the seeded constructor
        pass


class StandinLLaDAModelLM(_StandinModel):
    """LLaDA-shaped masked diffusion LM (see module doc)."""

    config_class = StandinLLaDAConfig
    base_model_prefix = "model"

    def _build(self, config) -> int:
        self.model = _Core(config.embedding_size, config.d_model, config.n_heads, config.n_layers,
                           config.max_sequence_length, config.rope_theta, False, config)
        return config.d_model

    def forward(self, input_ids, attention_mask=None, **kw):
        """input_ids (B, L) int64, attention_mask (B, L) 0/1 or None → ``.logits`` (B, L, V)."""
        B, L = input_ids.shape
        mask = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError("LLaDA expects a 2-D (B, L) attention mask")
            mask = attention_mask.bool()[:, None, None, :]  # keys only
        pos = torch.arange(L, device=input_ids.device).expand(B, -1)
        return CausalLMOutputWithPast(logits=self.model(input_ids, pos, mask, next_token=False))


class _DreamBase(nn.Module):
    """Dream's base model (``DreamModel.model``): ids, mask, position ids → ``.last_hidden_state``."""

    def __init__(self, config):
        super().__init__()
        self.body = _Body(config.vocab_size, config.hidden_size, config.num_attention_heads, config.num_hidden_layers,
                          config.max_position_embeddings, config.rope_theta, abs_pos=True)

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        """See :meth:`StandinDreamModel.forward`; hidden states (B, L, H) of a next-token model."""
        B, L = input_ids.shape
        if isinstance(attention_mask, str):
            if attention_mask != "full":
                raise ValueError(f"unknown attention mask {attention_mask!r}")
            attention_mask = None
        if position_ids is None:
            position_ids = torch.arange(L, device=input_ids.device).expand(B, -1)
        return BaseModelOutput(last_hidden_state=self.body(input_ids, position_ids, attention_mask, next_token=True))


class StandinDreamModel(_StandinModel):
    """Dream-shaped diffusion LM adapted from an AR model: position i predicts token i+1 (module doc)."""

    config_class = StandinDreamConfig
    base_model_prefix = "model"

    def _build(self, config) -> int:
        self.model = _DreamBase(config)
        self.lm_head = _Head(config.hidden_size, config.vocab_size, config)
        return config.hidden_size

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        """input_ids (B, L); attention_mask None, "full" or (B, 1, L, L) bool; position_ids (B, L) → ``.logits``."""
        B, L = input_ids.shape
        hidden = self.model(input_ids, attention_mask, position_ids).last_hidden_state
        return MaskedLMOutput(logits=self.lm_head(hidden))


class StandinMDLMModel(_StandinModel):
    """MDLM-shaped DiT denoiser: ``forward(input_ids, timesteps)``, no attention mask (module doc)."""

    config_class = StandinMDLMConfig
    base_model_prefix = "backbone"

    def _build(self, config) -> int:
        self.backbone = _Core(config.vocab_size, config.hidden_dim, config.n_heads, config.n_blocks,
                              config.model_length, 10000.0, False, config)
        return config.hidden_dim

    def forward(self, input_ids, timesteps, output_hidden_states=False, return_dict=True):
        """input_ids (B, L) int64, timesteps (B,) float (ignored: ``time_conditioning`` is False) → ``.logits``."""
        B, L = input_ids.shape
        pos = torch.arange(L, device=input_ids.device).expand(B, -1)
        return MaskedLMOutput(logits=self.backbone(input_ids, pos, None, next_token=False))
