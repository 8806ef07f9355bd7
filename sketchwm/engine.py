"""The masked-diffusion sampler: one engine for every backend and every watermark scheme.

LLaDA-style semi-autoregressive decoding (Nie et al. 2025, "Large Language Diffusion Models",
Alg. "low-confidence remasking"): the generation region of ``gen_length`` masked tokens is split
into blocks of ``block_length``; each block is decoded in ``steps / n_blocks`` steps, unmasking a
fixed number of positions per step. At each step:

1. the backend returns logits for every position; banned ids are set to -inf;
2. the watermark scheme (if any) tilts the marginals of the masked positions
   (:meth:`WatermarkScheme.process_logits`, paper Alg. 1 line 5-9);
3. a candidate token x0 is drawn at every masked position by Gumbel-max on ``logits / T``, with
   Gumbel noise from the explicit ``torch.Generator`` or from the scheme's keyed uniforms
   (distortion-free schemes); T = 0 is greedy;
4. the remasking rule ranks masked positions of the current block by confidence
   (``low_confidence``: probability of x0; ``random``; ``entropy``: negative entropy), the scheme may
   adjust it, and the top-k positions are committed.

With no scheme the sampler is the unwatermarked base model. Everything is vectorised over
batch × positions × vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from pydantic import Field, model_validator

from .components import DenoiseStep, DLMBackend, WatermarkScheme
from .config import StrictModel, validate_params
from .errors import ConfigError, InputError

__all__ = ["SamplerConfig", "MaskedDiffusionSampler", "GenerationOutput", "transfer_schedule", "packed_masked_positions"]


class SamplerConfig(StrictModel):
    """Sampler settings.

    Attributes:
        gen_length: tokens to generate (G).
        block_length: semi-autoregressive block size; ``gen_length`` must be a multiple of it.
        steps: total denoising steps; must be a multiple of the number of blocks and <= gen_length.
        temperature: Gumbel-max temperature T (0 = greedy argmax), applied to the tilted logits: the
            sampled distribution is ∝ (p·e^{η g})^{1/T}, i.e. the tempered model tilted by η/T.
        top_p: nucleus filter on the tempered, tilted marginals (1.0 = off), as Dream applies it.
        remasking: which masked positions to commit first.
        stop_at_eos: cut each text at the first EOS token.
        marginal_refresh: r >= 1. For schemes with ``packed_marginals`` on the random-remasking path:
            the LM head runs on every masked row only every r-th step; in between, the masked rows
            that are not sampled keep their marginals from the last refresh (masked rows are never
            re-masked, so they are a subset of the refreshed ones) and only the K sampled rows are
            computed fresh. 1 (default) is the exact computation of eq. 5 at every step; the effect
            of r > 1 on the tilt and on detection z is measured by ``benchmarks/perf_generate.py``.
    """

    gen_length: int = Field(128, ge=1)
    block_length: int = Field(128, ge=1)
    steps: int = Field(64, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    remasking: Literal["low_confidence", "random", "entropy"] = "random"
    stop_at_eos: bool = True
    marginal_refresh: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "SamplerConfig":
        if self.gen_length % self.block_length:
            raise ValueError(f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length})")
        n_blocks = self.gen_length // self.block_length
        if self.steps % n_blocks:
            raise ValueError(f"steps ({self.steps}) must be a multiple of the number of blocks ({n_blocks})")
        if self.steps > self.gen_length:
            raise ValueError(f"steps ({self.steps}) must be <= gen_length ({self.gen_length})")
        return self


@dataclass
class GenerationOutput:
    """Generated samples.

    Attributes:
        ids: (B, G) int64, generation-region tokens (EOS and after kept; see ``lengths``).
        lengths: (B,) int64, tokens before the first EOS (= G when none or ``stop_at_eos`` is off).
        texts: B detokenised strings of ``ids[b, :lengths[b]]``.
        prompts: the B prompts as given.
    """

    ids: torch.Tensor
    lengths: torch.Tensor
    texts: list[str]
    prompts: list[str]

    def token_lists(self) -> list[list[int]]:
        """Per sample, the ids up to ``lengths``."""
        return [self.ids[b, : int(self.lengths[b])].tolist() for b in range(self.ids.shape[0])]


def transfer_schedule(masked_in_block: torch.Tensor, steps: int) -> torch.Tensor:
    """Tokens to unmask at each step of a block (LLaDA's even split, remainder first).

    Args:
        masked_in_block: (B,) int64, masked positions in the block.
        steps: steps for this block.

    Returns:
        (B, steps) int64 whose rows sum to ``masked_in_block``.
    """
    base = masked_in_block // steps
    rem = masked_in_block % steps
    out = base[:, None].expand(-1, steps).clone()
    out += (torch.arange(steps, device=masked_in_block.device)[None, :] < rem[:, None]).long()
    return out


def packed_masked_positions(masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the masked positions of each text, packed to the left.

    Args:
        masked: (B, G) bool, M_t.

    Returns:
        positions (B, M) int64 with M = the largest number of masked positions of a text: row b
        lists text b's masked positions in increasing order, then (padding) some of its unmasked
        positions; valid (B, M) bool, True on the masked ones. Indices within a row are distinct.
    """
    counts = masked.sum(1)  # (B,)
    M = int(counts.max()) if masked.numel() else 0
    order = torch.argsort((~masked).to(torch.uint8), dim=1, stable=True)[:, :M]  # masked first, in order
    valid = torch.arange(M, device=masked.device)[None, :] < counts[:, None]
    return order, valid


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: logits (..., V) → same, with -inf outside the top-p mass."""
    sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
    cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
    remove = cum - torch.softmax(sorted_logits, dim=-1) > top_p  # keep the token that crosses p
    sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, idx, sorted_logits)


class MaskedDiffusionSampler:
    """Masked-diffusion generation with an optional watermark scheme (see module doc).

    Args:
        backend: a :class:`DLMBackend`.
        config: :class:`SamplerConfig` or a dict of its fields (validated; unknown fields are errors).
            Fields not given fall back to ``backend.sampler_defaults``, then to the defaults above.
        scheme: a :class:`WatermarkScheme`, or None for the unwatermarked base model.

    Raises:
        ConfigError: invalid sampler settings, or prompt + gen_length beyond ``backend.max_length``.
    """

    def __init__(self, backend: DLMBackend, config: "SamplerConfig | dict | None" = None, scheme: WatermarkScheme | None = None):
        self.backend = backend
        if isinstance(config, SamplerConfig):
            cfg = config
        else:
            merged = dict(getattr(backend, "sampler_defaults", {}) or {})
            merged.update(config or {})
            cfg = validate_params(SamplerConfig, merged, "sampler")
        self.config = cfg
        self.scheme = scheme
        if scheme is not None and scheme.vocab_size != backend.vocab_size:
            raise ConfigError(
                f"scheme '{scheme.name}' was built for a vocabulary of {scheme.vocab_size} ids but backend "
                f"'{backend.name}' has {backend.vocab_size}"
            )

    # ------------------------------------------------------------------ prompts
    def _prepare_prompts(self, prompts: Sequence[str] | Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        """Left-pad prompts → ids (B, P) int64, mask (B, P) bool, texts."""
        if len(prompts) == 0:
            raise InputError("no prompts given")
        if isinstance(prompts[0], str):
            texts = [str(p) for p in prompts]
            lists = self.backend.encode_prompts(texts)
        else:
            lists = [list(map(int, p)) for p in prompts]
            texts = [self.backend.decode(p) for p in lists]
        for ids in lists:
            if any(i < 0 or i >= self.backend.vocab_size for i in ids):
                raise InputError(f"prompt token id outside the vocabulary [0, {self.backend.vocab_size})")
        P = max(1, max(len(ids) for ids in lists))
        if P + self.config.gen_length > self.backend.max_length:
            raise ConfigError(
                f"prompt ({P} tokens) + gen_length ({self.config.gen_length}) exceeds the model's maximum "
                f"sequence length of {self.backend.max_length} tokens"
            )
        pad = getattr(self.backend.tokenizer, "pad_token_id", None)
        pad = self.backend.mask_token_id if pad is None else pad
        B = len(lists)
        out = torch.full((B, P), pad, dtype=torch.long)
        mask = torch.zeros((B, P), dtype=torch.bool)
        for b, ids in enumerate(lists):  # per prompt, not per token: building the batch
            if ids:
                out[b, P - len(ids):] = torch.tensor(ids, dtype=torch.long)
                mask[b, P - len(ids):] = True
        return out, mask, texts

    # ------------------------------------------------------------------ main loop
    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        generator: torch.Generator | None = None,
        progress: bool = False,
    ) -> GenerationOutput:
        """Generate one sample per prompt.

        Args:
            prompts: B prompt strings, or B lists of token ids (may be empty strings/lists).
            generator: explicit randomness (seeded ``torch.Generator`` on the backend's device);
                None makes a fresh generator seeded with 0, so calls are reproducible.
            progress: show a tqdm bar over steps.

        Returns:
            :class:`GenerationOutput`.

        Raises:
            InputError: empty prompt list, out-of-vocabulary prompt ids, NaN/inf logits from the backend.
            ConfigError: sequence too long for the model.
        """
        cfg, be = self.config, self.backend
        device = be.device
        if generator is None:
            generator = torch.Generator(device=device).manual_seed(0)
        prompt_ids, prompt_mask, prompt_texts = self._prepare_prompts(prompts)
        prompt_ids, prompt_mask = prompt_ids.to(device), prompt_mask.to(device)
        B, P = prompt_ids.shape
        G, V = cfg.gen_length, be.vocab_size
        gen = torch.full((B, G), be.mask_token_id, dtype=torch.long, device=device)
        attn = torch.cat([prompt_mask, torch.ones((B, G), dtype=torch.bool, device=device)], dim=1)
        banned = torch.tensor(sorted(set(be.banned_token_ids) | {be.mask_token_id}), dtype=torch.long, device=device)
        banned = banned[banned < V]
        n_blocks = G // cfg.block_length
        steps_per_block = cfg.steps // n_blocks
        if self.scheme is not None:
            self.scheme.set_stop_token(be.eos_token_id if cfg.stop_at_eos else None)  # texts end at the first EOS
            self.scheme.begin(B, G, prompt_ids, prompt_mask)
        self._marginal_cache = None  # (packed logits, their positions) of the last refresh (marginal_refresh)
        arange_g = torch.arange(G, device=device)
        step_idx = 0
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.steps, desc="denoising", leave=False)
        for blk in range(n_blocks):
            b0, b1 = blk * cfg.block_length, (blk + 1) * cfg.block_length
            in_block = (arange_g >= b0) & (arange_g < b1)  # (G,)
            schedule = transfer_schedule((gen[:, b0:b1] == be.mask_token_id).sum(1), steps_per_block)  # (B, S)
            for s in range(steps_per_block):
                masked = gen == be.mask_token_id  # (B, G)
                eligible = masked & in_block[None, :]  # (B, G)
                k = schedule[:, s]  # (B,)
                # random remasking does not depend on the marginals: pick the positions first
                fast_random = cfg.remasking == "random" and (self.scheme is None or not self._scheme_sets_confidence())
                if fast_random:
                    conf = torch.rand((B, G), generator=generator, device=device)
                    conf = torch.where(eligible, conf, torch.full_like(conf, float("-inf")))
                    kmax = int(k.max())
                    if kmax == 0:
                        step_idx += 1
                        continue
                    pos = conf.topk(kmax, dim=1).indices  # (B, kmax)
                    ok = torch.arange(kmax, device=device)[None, :] < k[:, None]  # (B, kmax)
                    chosen = torch.zeros_like(masked).scatter(1, pos, ok)
                # marginals needed: every masked position for a scheme (eq. 5 uses all of M_t), else only
                # the positions that can be committed at this step
                need = masked if self.scheme is not None else (chosen if fast_random else eligible)
                x = torch.cat([prompt_ids, gen], dim=1)  # (B, P+G)
                packed = (fast_random and self.scheme is not None and self.scheme.needs_all_marginals
                          and self.scheme.packed_marginals)
                if fast_random and (self.scheme is None or not self.scheme.needs_all_marginals or packed):
                    # random remasking and no scheme, or one that reads only the sampled rows: the LM
                    # head runs at the kmax chosen positions only, (B, kmax, V); a packed-marginals
                    # scheme also gets the masked rows packed, (B, M, V), and no (B, G, V) is built
                    packed_rows: dict[str, torch.Tensor] = {}
                    if packed:
                        sel, packed_rows = self._packed_logits(x, attn, P, masked, chosen, pos, ok, banned, step_idx)
                    else:
                        sel = be.logits_at(x, attn, pos + P).float()
                        if banned.numel():
                            sel[..., banned] = float("-inf")
                        if not bool(torch.isfinite(sel.amax(-1))[ok].all()):
                            raise InputError(f"backend '{be.name}' returned NaN or inf logits at step {step_idx}")
                    u_sel = None
                    if self.scheme is not None:
                        state = DenoiseStep(
                            step=step_idx, total_steps=cfg.steps, tokens=gen, masked=masked, logits=sel,
                            prompt_ids=prompt_ids, prompt_mask=prompt_mask, block=(b0, b1),
                            mask_token_id=be.mask_token_id, generator=generator, positions=pos, **packed_rows,
                        )
                        sel = self.scheme.process_logits(state)  # (B, kmax, V)
                        if bool(torch.isnan(sel.amax(-1))[ok].any()):
                            raise InputError(f"scheme '{self.scheme.name}' produced NaN logits at step {step_idx}")
                        state.logits = sel
                        u_sel = self.scheme.sampling_uniforms(state)  # (B, kmax, V) or None
                    x_sel, _ = self._sample(sel, u_sel, generator, need_conf=False)  # (B, kmax)
                    gen = gen.scatter(1, pos, torch.where(ok, x_sel, torch.gather(gen, 1, pos)))
                    step_idx += 1
                    continue
                positions = torch.cat([torch.zeros_like(prompt_mask), need], dim=1)  # (B, P+G)
                logits = be.logits(x, attn, positions)[:, P:, :].float()  # (B, G, V)
                if logits.shape != (B, G, V):
                    raise InputError(f"backend '{be.name}' returned logits of shape {tuple(logits.shape)}, expected {(B, G, V)}")
                if banned.numel():
                    logits[..., banned] = float("-inf")
                # amax propagates NaN: catches NaN, +inf and rows that are all -inf
                if not bool(torch.isfinite(logits.amax(-1))[need].all()):
                    raise InputError(f"backend '{be.name}' returned NaN or inf logits at step {step_idx}")
                state = DenoiseStep(
                    step=step_idx, total_steps=cfg.steps, tokens=gen, masked=masked, logits=logits,
                    prompt_ids=prompt_ids, prompt_mask=prompt_mask, block=(b0, b1),
                    mask_token_id=be.mask_token_id, generator=generator,
                )
                uniforms = None
                if self.scheme is not None:
                    logits = self.scheme.process_logits(state)  # (B, G, V)
                    if bool(torch.isnan(logits.amax(-1))[need].any()):
                        raise InputError(f"scheme '{self.scheme.name}' produced NaN logits at step {step_idx}")
                    state.logits = logits
                    uniforms = self.scheme.sampling_uniforms(state)  # (B, G, V) or None
                if fast_random:
                    # sample only at the chosen positions: (B, kmax, V) instead of (B, G, V)
                    sel = torch.gather(logits, 1, pos[..., None].expand(-1, -1, V))  # (B, kmax, V)
                    u_sel = None if uniforms is None else torch.gather(uniforms, 1, pos[..., None].expand(-1, -1, V))
                    x_sel, _ = self._sample(sel, u_sel, generator, need_conf=False)  # (B, kmax)
                    cur = torch.gather(gen, 1, pos)
                    gen = gen.scatter(1, pos, torch.where(ok, x_sel, cur))
                else:
                    x0, conf = self._sample(logits, uniforms, generator)  # (B, G), (B, G)
                    if self.scheme is not None:
                        conf = self.scheme.remasking_confidence(state, conf)
                    conf = torch.where(eligible, conf, torch.full_like(conf, float("-inf")))
                    order = torch.argsort(conf, dim=1, descending=True)  # (B, G)
                    rank = torch.empty_like(order).scatter_(1, order, arange_g.expand(B, -1))  # rank of each position
                    commit = (rank < k[:, None]) & eligible
                    gen = torch.where(commit, x0, gen)
                step_idx += 1
            if bar is not None:
                bar.update(steps_per_block)
        if bar is not None:
            bar.close()
        lengths = torch.full((B,), G, dtype=torch.long, device=device)
        if cfg.stop_at_eos and be.eos_token_id is not None:
            is_eos = gen == be.eos_token_id
            first = torch.where(is_eos.any(1), is_eos.float().argmax(1), torch.full_like(lengths, G))
            lengths = first
        texts = [be.decode(gen[b, : int(lengths[b])].tolist()) for b in range(B)]
        return GenerationOutput(ids=gen.cpu(), lengths=lengths.cpu(), texts=texts, prompts=prompt_texts)

    def _packed_logits(
        self, x: torch.Tensor, attn: torch.Tensor, P: int, masked: torch.Tensor, chosen: torch.Tensor,
        pos: torch.Tensor, ok: torch.Tensor, banned: torch.Tensor, step_idx: int,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The packed-marginals path of one step (schemes with ``packed_marginals``).

        Args:
            x: (B, P+G) int64 prompt + generation ids; attn: (B, P+G) bool; P: prompt width.
            masked: (B, G) bool, M_t; chosen: (B, G) bool, the positions sampled at this step.
            pos: (B, K) int64 sampled positions (entries beyond a text's count are ignored).
            ok: (B, K) bool, False on those ignored entries.
            banned: (n,) int64 ids set to -inf; step_idx: for error messages.

        Returns:
            the sampled rows' logits (B, K, V) float32 (a copy the scheme may modify) and the
            ``DenoiseStep`` fields ``masked_logits`` (B, M, V), ``masked_positions`` and
            ``masked_valid`` (B, M): every masked row, or those within the scheme's
            ``marginal_radius`` of a sampled row.

        Raises:
            InputError: NaN or inf logits from the backend on a packed row.
        """
        be, B, V = self.backend, masked.shape[0], self.backend.vocab_size
        rows_needed = masked
        radius = self.scheme.marginal_radius
        if radius is not None:  # only the masked rows near a sampled row
            near = torch.nn.functional.max_pool1d(
                chosen[:, None, :].float(), kernel_size=2 * radius + 1, stride=1, padding=radius)[:, 0]
            rows_needed = masked & (near > 0)
        mpos, mvalid = packed_masked_positions(rows_needed)  # (B, M), (B, M)
        M = mpos.shape[1]
        r = self.config.marginal_refresh
        cache = getattr(self, "_marginal_cache", None)
        if r > 1 and step_idx % r and cache is not None and radius is None:
            # between refreshes: the masked rows' marginals from the last refresh, fresh ones at the K sampled rows
            old_logits, old_row_of = cache  # (B, M0, V), (B, G) row of each position in old_logits
            mlogits = torch.gather(old_logits, 1, torch.gather(old_row_of, 1, mpos)[..., None].expand(-1, -1, V))
            fresh = be.logits_at(x, attn, pos + P).float()  # (B, K, V): the LM head on the sampled rows only
            if banned.numel():
                fresh[..., banned] = float("-inf")
            row_of = torch.zeros_like(masked, dtype=torch.long).scatter_(
                1, mpos, torch.arange(M, device=mpos.device).expand(B, -1))
            if not bool(torch.isfinite(fresh.amax(-1))[ok].all()):
                raise InputError(f"backend '{be.name}' returned NaN or inf logits at step {step_idx}")
            b_idx, k_idx = ok.nonzero(as_tuple=True)  # the rows really sampled (others repeat or are unmasked)
            mlogits[b_idx, torch.gather(row_of, 1, pos)[b_idx, k_idx]] = fresh[b_idx, k_idx]
            return fresh, {"masked_logits": mlogits, "masked_positions": mpos, "masked_valid": mvalid}
        mlogits = be.logits_at(x, attn, mpos + P).float()  # (B, M, V)
        if banned.numel():
            mlogits[..., banned] = float("-inf")
        if not bool(torch.isfinite(mlogits.amax(-1))[mvalid].all()):
            raise InputError(f"backend '{be.name}' returned NaN or inf logits at step {step_idx}")
        # row of each generation position in the packed tensor; the sampled positions are masked and
        # near themselves, so they are among the packed rows
        row_of = torch.zeros_like(masked, dtype=torch.long).scatter_(
            1, mpos, torch.arange(M, device=mpos.device).expand(B, -1))
        if r > 1:
            self._marginal_cache = (mlogits, row_of)  # schemes do not modify masked_logits (DenoiseStep)
        rows = torch.gather(row_of, 1, pos)  # (B, K)
        sel = torch.gather(mlogits, 1, rows[..., None].expand(-1, -1, V))  # (B, K, V), a copy
        return sel, {"masked_logits": mlogits, "masked_positions": mpos, "masked_valid": mvalid}

    def _scheme_sets_confidence(self) -> bool:
        """True if the scheme overrides :meth:`WatermarkScheme.remasking_confidence`."""
        return type(self.scheme).remasking_confidence is not WatermarkScheme.remasking_confidence

    def _sample(
        self, logits: torch.Tensor, uniforms: torch.Tensor | None, generator: torch.Generator, need_conf: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Gumbel-max candidates and their confidence.

        Args:
            logits: (B, G, V) float32 (possibly tilted); G may be a subset of positions.
            uniforms: (B, G, V) keyed uniforms in (0, 1), or None for generator noise.
            need_conf: False skips the confidence (returns None).

        Returns:
            x0 (B, G) int64 and confidence (B, G) float32 (per ``remasking``).
        """
        cfg = self.config
        # temperature first, then the nucleus on the tempered marginals (Dream's sample_tokens order);
        # the tilt is already in ``logits``, so relative to the tempered model its strength is η/T
        scaled = logits / cfg.temperature if cfg.temperature > 0.0 else logits
        if cfg.top_p < 1.0:
            scaled = _top_p_filter(scaled, cfg.top_p)
        if cfg.temperature == 0.0:
            x0 = scaled.argmax(-1)
        else:
            if uniforms is None:
                uniforms = torch.rand(logits.shape, generator=generator, device=logits.device).clamp_(1e-12, 1 - 1e-7)
            gumbel = -torch.log(-torch.log(uniforms))  # (B, G, V)
            x0 = (scaled + gumbel).argmax(-1)  # (B, G)
        if not need_conf:
            return x0, None
        if cfg.remasking == "random":
            conf = torch.rand(x0.shape, generator=generator, device=logits.device)
        elif cfg.remasking == "low_confidence":  # LLaDA: probability of x0 under the untempered marginal
            kept = logits if cfg.top_p >= 1.0 else logits.masked_fill(torch.isinf(scaled), float("-inf"))
            conf = torch.log_softmax(kept, dim=-1).gather(-1, x0[..., None]).squeeze(-1).exp()
        else:  # entropy (Dream): commit low-entropy positions first, entropy of the tempered, filtered marginal
            logp = torch.log_softmax(scaled, dim=-1)  # (B, G, V)
            conf = (logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)  # = -entropy
        return x0, conf.float()
