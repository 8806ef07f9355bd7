"""The watermark inside the user's own sampler loop: LLaDA-style loops and Dream's logits hook.

Many DLM users keep the model's own generation code. :class:`LogitsTilter` is the functional
form of what sketchwm's engine does at one denoising step (:class:`sketchwm.engine.MaskedDiffusionSampler`):
the backend's fixed logit edits (:meth:`DLMBackend.postprocess_logits`), banned ids set to −inf,
then the scheme's tilt of the masked marginals (:meth:`WatermarkScheme.process_logits`, paper
Alg. 1 lines 5-9) with the same per-generation state (:meth:`WatermarkScheme.begin` at step 0).
Given the same logits, tokens and step index, it returns exactly the logits the engine samples
from, so a loop that samples and remasks like the engine produces the engine's texts.

LLaDA-style loop (``generate.py``)::

    tilt = LogitsTilter.from_watermarker(wm, steps=steps)
    for step in range(steps):                       # inside LLaDA's block loop
        mask_index = x == mask_id
        logits = model(x, attention_mask=am).logits  # (B, L, V)
        logits = tilt(logits, x, step=step, block=(b0, b1))
        ...                                          # LLaDA's own sampling and remasking

Dream (``diffusion_generate(..., generation_logits_hook_func=dream_logits_hook(wm, steps))``): Dream
shifts its logits before calling the hook, so the hook receives aligned logits.

Limits: schemes that replace the sampling noise (``WatermarkScheme.noise == "keyed"``: the
distortion-free baselines) need the engine; :class:`LogitsTilter` refuses them. The default
``global-sketch-green`` also keys the sampling noise, but its tilt is a watermark without it
(``noise_required = False``): a user loop runs the tilt alone, with a warning. The prompt is everything left of
the first column that is masked in every row at step 0.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from .components import DenoiseStep, DLMBackend, Marginals, WatermarkScheme
from .errors import ConfigError, InputError

__all__ = ["LogitsTilter", "dream_logits_hook"]


class LogitsTilter:
    """Tilt a user loop's logits like the engine (module doc).

    Args:
        scheme: the keyed :class:`WatermarkScheme` (``Watermarker.scheme``).
        backend: the :class:`DLMBackend` whose ids (mask, banned) and logit edits apply.
        steps: total denoising steps T of the user's loop (the η_t schedule reads step / T).
        stop_at_eos: the texts end at the backend's first EOS, as the engine's ``stop_at_eos``
            (default): the expected sketch weights each position by the probability that it is
            still inside the text, and EOS is never tilted (see ``WatermarkScheme.set_stop_token``).
        generator: the randomness a scheme draws per generation (the default's key-family member of
            each text), or None (default) for fresh randomness from the OS at every generation; a
            seeded ``torch.Generator`` makes a loop's watermarked texts reproducible.

    Raises:
        ConfigError: the scheme supplies the sampling noise (``noise == "keyed"``) and is no watermark
            without it (``noise_required``, True unless the scheme says otherwise: the default
            ``global-sketch-green`` runs its tilt alone here, with a warning) or steers the
            unmasking order at every temperature (``dgmark``; a global sketch with ``order="steer"``:
            a hook sees logits, not the order; the default global sketch tilts here, at any
            temperature); vocabulary mismatch.
    """

    def __init__(self, scheme: WatermarkScheme, backend: DLMBackend, steps: int, stop_at_eos: bool = True,
                 generator: torch.Generator | None = None):
        if scheme.noise != "sampler":
            if getattr(scheme, "noise_required", True):
                raise ConfigError(f"scheme '{scheme.name}' replaces the sampling noise; "
                                  "use sketchwm's engine (Watermarker.generate) for it")
            warnings.warn(f"scheme '{scheme.name}' also watermarks through keyed sampling noise, which a logits "
                          "hook cannot supply: this loop embeds its tilt alone, and the detector still gives the "
                          "keyed-sampling channel its share of alpha (build the scheme with 'sampling: free' to give "
                          "that share to the tilt)", stacklevel=2)
        if scheme.steers_order(1.0):
            raise ConfigError(f"scheme '{scheme.name}' steers the unmasking order, which a logits hook cannot do; "
                              "use sketchwm's engine (Watermarker.generate) for it")
        if scheme.vocab_size != backend.vocab_size:
            raise ConfigError(f"scheme vocabulary {scheme.vocab_size} != backend vocabulary {backend.vocab_size}")
        if int(steps) < 1:
            raise ConfigError(f"steps must be >= 1, got {steps}")
        self.scheme, self.backend, self.steps = scheme, backend, int(steps)
        self.stop_at_eos, self.generator = bool(stop_at_eos), generator
        V = backend.vocab_size
        ids = sorted(set(backend.banned_token_ids) | {backend.mask_token_id})
        self._banned = torch.tensor([i for i in ids if i < V], dtype=torch.long)
        self._step = 0
        self._prompt_len: int | None = None

    @classmethod
    def from_watermarker(cls, watermarker: Any, steps: int, stop_at_eos: bool = True) -> "LogitsTilter":
        """The tilter of a :class:`sketchwm.api.Watermarker` (its scheme and backend)."""
        return cls(watermarker.scheme, watermarker.backend, steps, stop_at_eos)

    def reset(self) -> None:
        """Forget the current generation (the next call starts a new one, as step 0 does)."""
        self._step, self._prompt_len = 0, None

    def _begin(self, x: torch.Tensor, prompt_mask: torch.Tensor | None) -> None:
        mask_id = self.backend.mask_token_id
        all_masked = (x == mask_id).all(0)  # (L,)
        # prompt length P: the generation region is the maximal all-masked suffix at step 0
        suffix = torch.flip(torch.cumprod(torch.flip(all_masked.long(), [0]), 0), [0]).bool()
        G = int(suffix.sum())
        if G == 0:
            raise InputError("no generation region: at step 0 the last column must be [MASK] in every row")
        P = x.shape[1] - G
        self._prompt_len = P
        pad = getattr(self.backend.tokenizer, "pad_token_id", None)
        if prompt_mask is None:
            prompt_mask = x[:, :P] != pad if pad is not None else torch.ones_like(x[:, :P], dtype=torch.bool)
        self._prompt_ids, self._prompt_mask = x[:, :P], prompt_mask[:, :P].bool().to(x.device)
        self.scheme.set_stop_token(getattr(self.backend, "eos_token_id", None) if self.stop_at_eos else None)
        self.scheme.begin(x.shape[0], G, self._prompt_ids, self._prompt_mask)

    @torch.no_grad()
    def __call__(
        self,
        logits: torch.Tensor,
        x: torch.Tensor,
        *,
        step: int | None = None,
        block: tuple[int, int] | None = None,
        prompt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Tilted logits for one denoising step.

        Args:
            logits: (B, L, V) float, the model's logits aligned with ``x`` (row i = marginal of token i;
                Dream's hook already shifted them), prompt included.
            x: (B, L) int64, current tokens, [MASK] where masked.
            step: 0-based step index (default: an internal counter; step 0 starts a new generation).
            block: (start, end) of the block being decoded, in generation-region coordinates
                (default: the whole region).
            prompt_mask: (B, P) bool, True on real prompt tokens, read at step 0 (default: not pad).

        Returns:
            (B, L, V) float32: prompt rows with banned ids at −inf, generation rows tilted as the engine
            tilts them (only masked rows matter).

        Raises:
            InputError: shapes disagree, or no generation region at step 0.
        """
        if logits.dim() != 3 or x.shape != logits.shape[:2] or logits.shape[-1] < self.backend.vocab_size:
            raise InputError(f"logits {tuple(logits.shape)} and tokens {tuple(x.shape)} do not match (B, L, V>={self.backend.vocab_size})")
        step = self._step if step is None else int(step)
        if step == 0 or self._prompt_len is None:
            self._begin(x, prompt_mask)
        self._step = step + 1
        P, V = self._prompt_len, self.backend.vocab_size
        out = self.backend.postprocess_logits(logits[..., :V].float().clone())  # (B, L, V)
        banned = self._banned.to(out.device)
        if banned.numel():
            out[..., banned] = float("-inf")
        gen = x[:, P:]
        G = gen.shape[1]
        masked = gen == self.backend.mask_token_id
        rows = out[:, P:]  # (B, G, V): the scheme reads a copy and writes the tilted rows here (Marginals.out)
        state = DenoiseStep(  # every masked row is read and tilted: the canvas layout of Marginals
            step=step, total_steps=self.steps, tokens=gen, masked=masked,
            marginals=Marginals.canvas(rows.clone(memory_format=torch.contiguous_format), masked, out=rows),
            prompt_ids=self._prompt_ids,
            prompt_mask=self._prompt_mask, block=block or (0, G), mask_token_id=self.backend.mask_token_id,
            generator=self.generator,
        )
        tilted = self.scheme.process_logits(state)
        if tilted.data_ptr() != rows.data_ptr() or tilted.stride() != rows.stride():
            rows.copy_(tilted)
        return out


def dream_logits_hook(watermarker: Any, steps: int, stop_at_eos: bool = True) -> Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]:
    """A ``generation_logits_hook_func(step, x, logits)`` for Dream's ``diffusion_generate``.

    Args:
        watermarker: a :class:`sketchwm.api.Watermarker` on the ``dream`` backend (or any backend
            whose logits the hook receives aligned).
        steps: the ``steps`` passed to ``diffusion_generate``.
        stop_at_eos: the texts end at the first EOS (as :class:`LogitsTilter`).

    Returns:
        hook(step, x (B, L) int64, logits (B, L, V)) → tilted logits (B, L, V) float32; see
        :class:`LogitsTilter`. Dream's sampler then applies its temperature and top-p on top.
    """
    tilter = LogitsTilter.from_watermarker(watermarker, steps, stop_at_eos)

    def hook(step: int, x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
        return tilter(logits, x, step=step).to(logits.dtype)

    hook.tilter = tilter  # type: ignore[attr-defined]
    return hook
