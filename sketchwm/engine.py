"""The masked-diffusion sampler: one engine for every backend and every watermark scheme.

LLaDA-style semi-autoregressive decoding (Nie et al. 2025, "Large Language Diffusion Models", their
``generate.py``): the generation region of ``gen_length`` masked tokens is split into blocks of
``block_length``; each block is decoded in ``steps / n_blocks`` steps, unmasking a fixed number k of
positions per step (:func:`transfer_schedule`). At each step:

1. the remasking rule picks the candidate rows (:class:`RemaskingRule`): ``random`` draws the k
   positions before any marginal is computed; ``low_confidence`` / ``entropy`` take every masked
   position of the block;
2. a :class:`~sketchwm.marginal_sources.MarginalSource` runs the backend's LM head on the rows the
   scheme reads (:class:`MarginalReads`: the candidates, every masked row, or the masked rows near a
   candidate) and packs them, banned ids at -inf, into one :class:`Marginals`;
3. the watermark scheme (if any) tilts the candidates' marginals
   (:meth:`WatermarkScheme.process_logits`, seed paper Alg. 1 lines 5-9) and may supply keyed
   uniforms (:meth:`WatermarkScheme.sampling_uniforms`, distortion-free schemes); the observers
   given to ``generate`` (:class:`sketchwm.observers.TiltObserver`) see the logits before and after;
4. a token x0 is drawn at every candidate by Gumbel-max on ``logits / T`` (:func:`sample_tokens`),
   the noise from the explicit ``torch.Generator`` (one ``rand`` of the candidates' shape) or the
   scheme's uniforms; T = 0 is greedy;
5. the remasking rule keeps k candidates per text (``random``: all drawn; ``low_confidence``: the
   highest p(x0); ``entropy``: the lowest entropy) and they are committed. A scheme that steers the
   order (:meth:`WatermarkScheme.steers_order`, e.g. the global sketch under greedy decoding, or
   ``dgmark``) ranks the candidates instead (:meth:`WatermarkScheme.order_priority`); the rule
   then offers every eligible position as a candidate. Remasking rules are plugins
   (:class:`RemaskingRule`, hook ``sketchwm_register_remasking_rules``).

With no scheme the sampler is the unwatermarked base model. Everything is vectorised over
batch × positions × vocabulary; NaN/inf logits are caught in one place (:func:`check_logits`).
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

import torch
from pydantic import Field, model_validator

from .components import DenoiseStep, DLMBackend, MarginalReads, WatermarkScheme, packed_masked_positions
from .config import StrictModel, validate_params
from .errors import ConfigError, GreedyDecodingWarning, InputError
from .marginal_sources import (Canvas, FullCanvasMarginals, IncrementalMarginals, MarginalSource, RefreshedMarginals,
                               check_logits)
from .observers import TiltObserver
from .remasking import RemaskingRule

__all__ = [
    "SamplerConfig", "MaskedDiffusionSampler", "GenerationOutput", "transfer_schedule", "packed_masked_positions",
    "sample_tokens", "check_logits", "Canvas", "MarginalSource", "FullCanvasMarginals", "RefreshedMarginals",
    "IncrementalMarginals",
    "RemaskingRule", "greedy_decoding_problem", "TiltObserver",
]


class SamplerConfig(StrictModel):
    """Sampler settings.

    Attributes:
        gen_length: tokens to generate (G).
        block_length: semi-autoregressive block size; ``gen_length`` must be a multiple of it.
        steps: total denoising steps; must be a multiple of the number of blocks and <= gen_length.
        temperature: Gumbel-max temperature T (0 = greedy argmax), applied to the tilted logits: the
            sampled distribution is ∝ (p·e^{η g})^{1/T}, i.e. the tempered model tilted by η/T.
        top_p: nucleus filter on the tempered, tilted marginals (1.0 = off), as Dream applies it.
        remasking: which masked positions to commit first: a registered remasking rule
            (:class:`RemaskingRule`; built in: ``random``, ``low_confidence``, ``entropy``,
            ``confidence_threshold``).
        remasking_params: the rule's own ``Params`` (e.g. ``{"threshold": 0.9}`` for
            ``confidence_threshold``); default: none, the rule's defaults.
        stop_at_eos: cut each text at the first EOS token.
        marginal_refresh: how often the LM head runs on every masked row for a scheme that reads
            them all (``MarginalReads.masked()``, the global sketch's Σ_{i∈M_t} of eq. 5). ``1``:
            at every step (the exact computation). ``r`` > 1: every masked row every r-th step.
            ``block``: every masked row at the first step, then at the first step of each later
            block the rows of that block (about to be denoised; the later blocks' rows keep theirs).
            ``block-all``: every masked row at the first step of every block (that block's rows and
            all later blocks'). ``once``: every masked row at the first step only.
            In between only the K sampled rows are computed fresh and the other masked rows keep
            their last marginals (masked rows are never re-masked, so they are a subset of the
            refreshed ones): schemes whose reads are ``incremental`` then get the fresh rows alone
            and update a running statistic (:class:`IncrementalMarginals`, O(K·V) per step);
            others get the cached rows gathered (:class:`RefreshedMarginals`, random remasking
            only, every masked row at each refresh). ``auto`` (default): ``once`` for incremental
            schemes under ``random`` remasking (the stale rows are spread over the canvas and the
            sampled ones are fresh), and 1 (exact) otherwise: under the confidence rules
            (``low_confidence``, ``entropy``) the stale rows are the later blocks', and no faster
            schedule is shown to keep detection z within 2% of the exact computation there; pass
            ``block-all`` for the faster approximation. What each schedule costs in tilt error,
            detection z and time is measured by ``benchmarks/tilt_error.py``
            (docs/sampler-approximations.md).
    """

    gen_length: int = Field(128, ge=1)
    block_length: int = Field(128, ge=1)
    steps: int = Field(64, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    remasking: str = Field("random", min_length=1)
    remasking_params: dict[str, Any] = {}
    stop_at_eos: bool = True
    marginal_refresh: int | Literal["auto", "block", "block-all", "once"] = "auto"

    @model_validator(mode="after")
    def _check(self) -> "SamplerConfig":
        if self.gen_length % self.block_length:
            raise ValueError(f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length}): "
                             f"use a multiple of {self.block_length}, or set block_length (--block-length) to a "
                             f"divisor of {self.gen_length}")
        n_blocks = self.gen_length // self.block_length
        if self.steps % n_blocks:
            raise ValueError(f"steps ({self.steps}) must be a multiple of the number of blocks ({n_blocks} = gen_length "
                             f"{self.gen_length} / block_length {self.block_length}): use a multiple of {n_blocks} "
                             "(--steps), or a longer block_length")
        if self.steps > self.gen_length:
            raise ValueError(f"steps ({self.steps}) must be <= gen_length ({self.gen_length}): lower steps (--steps) or "
                             "raise gen_length (--gen-length)")
        if isinstance(self.marginal_refresh, int) and self.marginal_refresh < 1:
            raise ValueError(
                f"marginal_refresh must be >= 1, 'block', 'block-all', 'once' or 'auto', got {self.marginal_refresh}")
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


def _top_p_filter(logits: torch.Tensor, top_p: float, ks: tuple[int, ...] = (64, 4096)) -> torch.Tensor:
    """Nucleus (top-p) filter of Holtzman et al. (2020), with the rule of transformers'
    ``TopPLogitsWarper``: a token is kept when the probability of the tokens ranked above it is below
    ``top_p`` (so the most likely token always is).

    Each row's nucleus is read from its ``k`` most likely tokens (``torch.topk``: a partial sort)
    for the first ``k`` of ``ks`` whose mass reaches ``top_p`` + 1e-4; rows wider than the last go
    through the warper's full-vocabulary sort. On the default model at T = 1 and top-p 0.9 the median
    nucleus holds about 800 tokens and few hold more than 4,096, and ``topk`` of 4,096 costs about a
    fifth of the full sort. The result is the warper's except for a token whose higher-ranked mass lies
    within float32 rounding of ``top_p`` (tests/test_real_dlm.py compares them).

    Args:
        logits: (..., V) float logits; top_p: the mass to keep, in (0, 1]; ks: candidate counts, increasing.

    Returns:
        (..., V) float, a new tensor: ``logits`` on the smallest set of most likely tokens whose
        probability reaches ``top_p`` (at least one token), -inf elsewhere.
    """
    from transformers.generation.logits_process import TopPLogitsWarper

    flat = logits.reshape(-1, logits.shape[-1])  # (R, V)
    probs = flat.float().softmax(-1)  # (R, V)
    keep = torch.zeros_like(flat, dtype=torch.bool)  # (R, V)
    todo = torch.arange(flat.shape[0], device=flat.device)  # rows whose nucleus is not read yet
    sub = probs  # their probabilities (all rows at first: no copy)
    for k in ks:
        if len(todo) == 0 or k >= flat.shape[-1]:
            break
        top, idx = sub.topk(k, dim=-1)  # (r, k) descending
        above = top.double().cumsum(-1) - top.double()  # (r, k) the mass ranked above each candidate
        inside = above[:, -1] + top[:, -1].double() >= top_p + 1e-4  # (r,) the nucleus ends within the k
        keep[todo[inside][:, None], idx[inside]] = above[inside] < top_p
        todo = todo[~inside]
        sub = probs[todo]
    out = flat.masked_fill(~keep, float("-inf"))
    if len(todo):  # nuclei wider than the last k: the full sort
        out[todo] = TopPLogitsWarper(top_p)(None, flat[todo].clone())
    return out.reshape(logits.shape)


def sample_tokens(logits: torch.Tensor, uniforms: torch.Tensor | None, generator: torch.Generator,
                  temperature: float, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Gumbel-max draw of one token per row (LLaDA's ``add_gumbel_noise`` + argmax; Dream's order of
    temperature, then nucleus).

    Args:
        logits: (B, K, V) float32, the (tilted) marginals as logits.
        uniforms: (B, K, V) keyed uniforms in (0, 1), or None for noise from ``generator``
            (one ``torch.rand`` of shape (B, K, V)).
        generator: the sampler's torch.Generator.
        temperature: T; 0 is greedy argmax (no noise drawn). The tilt is already in ``logits``, so
            relative to the tempered model its strength is η/T.
        top_p: nucleus on the tempered marginals (1.0 = off).

    Returns:
        x0 (B, K) int64, and the tempered, filtered logits (B, K, V) the draw used.
    """
    scaled = logits / temperature if temperature > 0.0 else logits
    if top_p < 1.0:
        scaled = _top_p_filter(scaled, top_p)
    if temperature == 0.0:
        return scaled.argmax(-1), scaled
    if uniforms is None:
        uniforms = torch.rand(logits.shape, generator=generator, device=logits.device).clamp_(1e-12, 1 - 1e-7)
    return (scaled - torch.log(-torch.log(uniforms))).argmax(-1), scaled  # (B, K): Gumbel-max


# ------------------------------------------------------------------ remasking rules
class MaskedDiffusionSampler:
    """Masked-diffusion generation with an optional watermark scheme (see module doc).

    Args:
        backend: a :class:`DLMBackend`.
        config: :class:`SamplerConfig` or a dict of its fields (validated; unknown fields are errors).
            Fields not given fall back to ``backend.sampler_defaults``, then to the defaults above.
        scheme: a :class:`WatermarkScheme`, or None for the unwatermarked base model.
        marginal_source: a :class:`MarginalSource` class to use instead of the configured one
            (:class:`MarginalSource`, or :class:`IncrementalMarginals` / :class:`RefreshedMarginals`
            under an amortised ``marginal_refresh``);
            e.g. :class:`FullCanvasMarginals` as a reference.
        registry: where the ``remasking`` rule is looked up (default: the installed plugins).

    Attributes:
        steering: whether the scheme steers the order at this temperature
            (:meth:`WatermarkScheme.steers_order`): it then ranks every eligible position.
        warnings: one-line problems of this configuration (:func:`greedy_decoding_problem`), also
            raised once per scheme as :class:`GreedyDecodingWarning`; ``Watermarker.provenance``
            records them.

    Raises:
        ConfigError: invalid sampler settings, or prompt + gen_length beyond ``backend.max_length``.
        RegistryError: an unknown remasking rule (with close matches).
    """

    def __init__(self, backend: DLMBackend, config: "SamplerConfig | dict | None" = None,
                 scheme: WatermarkScheme | None = None, marginal_source: type[MarginalSource] | None = None,
                 registry: Any = None):
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
        if registry is None:
            from .registry import get_registry

            registry = get_registry()
        self.remasking: RemaskingRule = registry.build("remasking", cfg.remasking, cfg.remasking_params)
        self.steering = scheme is not None and bool(scheme.steers_order(cfg.temperature))
        problem = greedy_decoding_problem(scheme, cfg.temperature, self.steering)
        self.warnings: list[str] = [problem] if problem else []
        if problem and scheme not in _WARNED:  # once per scheme object (a Watermarker's many samplers share it)
            _WARNED.add(scheme)
            warnings.warn(problem, GreedyDecodingWarning, stacklevel=2)
        V = backend.vocab_size
        banned = torch.tensor(sorted(set(backend.banned_token_ids) | {backend.mask_token_id}), dtype=torch.long)
        banned = banned[banned < V].to(backend.device)
        #: the rows the hooks read; without a scheme only the targets are sampled
        self.reads = scheme.reads if scheme is not None else MarginalReads.sampled()
        refresh = cfg.marginal_refresh
        if refresh == "auto":  # the settings whose tilt and detection z stay within 2% of the exact ones
            refresh = "once" if (cfg.remasking == "random" and self.reads.incremental) else 1
        #: the refresh schedule in force: 1 (every step, exact), r, "block", "block-all" or "once"
        self.refresh = refresh
        if marginal_source is not None:
            self.source = marginal_source(backend, banned)
        elif self.refresh == 1 or self.reads.kind != "masked":
            self.source = MarginalSource(backend, banned)
        elif self.reads.incremental:
            self.source = IncrementalMarginals(backend, banned)
        elif cfg.remasking == "random":
            self.source = RefreshedMarginals(backend, banned)
        else:
            self.source = MarginalSource(backend, banned)

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

    def _start(self, prompts: Sequence[str] | Sequence[Sequence[int]]) -> tuple[Canvas, list[str]]:
        """The all-[MASK] canvas of the prompts (the scheme and the marginal source are reset for it)."""
        be, G = self.backend, self.config.gen_length
        prompt_ids, prompt_mask, texts = self._prepare_prompts(prompts)
        prompt_ids, prompt_mask = prompt_ids.to(be.device), prompt_mask.to(be.device)
        gen = torch.full((prompt_ids.shape[0], G), be.mask_token_id, dtype=torch.long, device=be.device)
        if self.scheme is not None:
            self.scheme.set_stop_token(be.eos_token_id if self.config.stop_at_eos else None)  # texts end at the first EOS
            self.scheme.begin(prompt_ids.shape[0], G, prompt_ids, prompt_mask)
        self.source.reset()
        return Canvas(prompt_ids, prompt_mask, gen, be.mask_token_id), texts

    # ------------------------------------------------------------------ main loop
    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[str] | Sequence[Sequence[int]],
        generator: torch.Generator | None = None,
        progress: bool | Callable[[int], None] = False,
        observers: Sequence[TiltObserver] = (),
    ) -> GenerationOutput:
        """Generate one sample per prompt (LLaDA's semi-autoregressive sampler, module doc).

        Args:
            prompts: B prompt strings, or B lists of token ids (may be empty strings/lists).
            generator: explicit randomness (seeded ``torch.Generator`` on the backend's device);
                None makes a fresh generator seeded with 0, so calls are reproducible.
            progress: True shows a tqdm bar over steps; a callable is called with 1 after each
                denoising step (e.g. a caller's bar's ``update``).
            observers: :class:`sketchwm.observers.TiltObserver` objects told of the batch's start, of
                every step's tilt (untilted and tilted target logits, keyed uniforms) and of its end;
                they do not change the texts.

        Returns:
            :class:`GenerationOutput`.

        Raises:
            InputError: empty prompt list, out-of-vocabulary prompt ids, NaN/inf logits from the
                backend or the scheme.
            ConfigError: sequence too long for the model.
        """
        cfg = self.config
        generator = generator if generator is not None else torch.Generator(device=self.backend.device).manual_seed(0)
        canvas, prompt_texts = self._start(prompts)
        for obs in observers:
            obs.on_start(canvas.tokens.shape[0])
        G, L = cfg.gen_length, cfg.block_length
        block_steps = cfg.steps // (G // L)
        positions = torch.arange(G, device=canvas.tokens.device)
        step = 0
        bar = _progress_bar(cfg.steps) if progress is True else None
        tick = bar.update if bar is not None else (progress if callable(progress) else None)
        for b0 in range(0, G, L):
            block = (b0, b0 + L)
            in_block = (positions >= b0) & (positions < b0 + L)  # (G,)
            schedule = transfer_schedule(canvas.masked[:, b0:b0 + L].sum(1), block_steps)  # (B, S) tokens to commit
            for s in range(block_steps):
                k = schedule[:, s]  # (B,)
                targets, valid = self.remasking.candidates(canvas.masked & in_block, k, generator,
                                                           self.steering)  # (B, K)
                if targets.shape[1]:
                    refresh = self._refresh_due(step, s, in_block)
                    marginals = self.source.marginals(canvas, self.reads, targets, valid, step, refresh)
                    state = DenoiseStep(step, cfg.steps, canvas.tokens, canvas.masked, marginals, canvas.prompt_ids,
                                        canvas.prompt_mask, block, canvas.mask_token_id, generator, cfg.temperature)
                    logits, uniforms = self._scheme_hooks(state, observers)  # (B, K, V), (B, K, V) or None
                    x0, scaled = sample_tokens(logits, uniforms, generator, cfg.temperature, cfg.top_p)  # (B, K)
                    priority = self._order_priority(state, logits, scaled, x0)  # (B, K) or None
                    canvas.commit(targets, x0, self.remasking.choose(logits, scaled, x0, valid, k, priority))
                step += 1
                if tick is not None:
                    tick(1)
        if bar is not None:
            bar.close()
        out = self._output(canvas, prompt_texts)
        for obs in observers:
            obs.on_end(out)
        return out

    def _refresh_due(self, step: int, block_step: int, in_block: torch.Tensor) -> "bool | torch.Tensor":
        """What the ``marginal_refresh`` schedule refreshes at this step: True (every masked row), False
        (none), or for ``block`` at the first step of a later block the block's positions (1, G) bool;
        ``block-all``: True at the first step of every block; ``once``: True at the first step only."""
        if self.refresh == "block-all":
            return block_step == 0
        if self.refresh in ("block", "once"):
            if step == 0:
                return True
            return in_block[None, :] if block_step == 0 and self.refresh == "block" else False
        return step % self.refresh == 0

    def _scheme_hooks(self, state: DenoiseStep, observers: Sequence[TiltObserver] = ()
                      ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The scheme's tilt of the target rows (B, K, V) float32 and its keyed uniforms (B, K, V) or None
        (the targets' logits and None without a scheme); each observer then sees the tilt.

        Raises:
            InputError: NaN or inf in the scheme's logits on a valid target.
        """
        if self.scheme is None:
            return state.marginals.target_logits(), None
        m = state.marginals
        before = m.at_target_rows(m.logits).clone() if observers else None  # (B, K, V): the scheme may tilt in place
        logits = self.scheme.process_logits(state)
        check_logits(logits, m.target_valid, f"scheme '{self.scheme.name}'", state.step)
        uniforms = self.scheme.sampling_uniforms(state) if self.scheme.noise == "keyed" else None
        for obs in observers:
            obs.on_tilt(state, before, logits, uniforms)
        return logits, uniforms

    def _order_priority(self, state: DenoiseStep, logits: torch.Tensor, scaled: torch.Tensor,
                        x0: torch.Tensor) -> torch.Tensor | None:
        """The steering scheme's priority of the candidates (B, K) float32, given the rule's own
        confidence (:meth:`WatermarkScheme.order_priority`); None when no scheme steers the order."""
        if not self.steering:
            return None
        return self.scheme.order_priority(state, x0, self.remasking.confidence(logits, scaled, x0))

    def _output(self, canvas: Canvas, prompt_texts: list[str]) -> GenerationOutput:
        """Lengths up to the first EOS (``stop_at_eos``) and the decoded texts."""
        gen, be = canvas.tokens, self.backend
        B, G = gen.shape
        lengths = torch.full((B,), G, dtype=torch.long, device=gen.device)
        if self.config.stop_at_eos and be.eos_token_id is not None:
            is_eos = gen == be.eos_token_id
            lengths = torch.where(is_eos.any(1), is_eos.float().argmax(1), lengths)
        texts = [be.decode(gen[b, : int(lengths[b])].tolist()) for b in range(B)]
        return GenerationOutput(ids=gen.cpu(), lengths=lengths.cpu(), texts=texts, prompts=prompt_texts)


#: schemes already warned about (:func:`greedy_decoding_problem`), so a run warns once
_WARNED: "weakref.WeakSet[WatermarkScheme]" = weakref.WeakSet()


def greedy_decoding_problem(scheme: WatermarkScheme | None, temperature: float, steering: bool) -> str | None:
    """The one-line problem, with its fix, of a scheme whose embedding can barely act at ``temperature``:
    under greedy decoding (T = 0) keyed sampling noise is never drawn, and a tilt of the marginals
    changes a token only where it overturns the argmax (docs/greedy-decoding.md measures how little
    that leaves).
    None when there is no scheme, T > 0, or the scheme steers the order (the order is its channel).
    """
    if scheme is None or temperature > 0.0 or steering:
        return None
    how = "replaces the sampling noise, which greedy decoding never draws, so its texts carry no watermark" \
        if scheme.noise == "keyed" else \
        "tilts the marginals, and greedy decoding keeps a tilted token only where the tilt overturns the argmax, " \
        "so its watermark may be weak or absent"
    return (f"scheme '{scheme.name}' at temperature 0 (greedy decoding) {how}: sample at temperature > 0 "
            "(e.g. --temperature 0.7), or use an order-steering scheme (global-sketch with order 'auto' or "
            "'steer', or dgmark)")


def _progress_bar(total: int):
    """A tqdm bar over ``total`` denoising steps."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="denoising", leave=False)
