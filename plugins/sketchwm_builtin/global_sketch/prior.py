"""The token prior π_tok of ``global-sketch``: where its counts come from (:func:`resolve_prior`) and the
background token model built from it (:func:`background_token_model`).

The prior balances the sketch's signs (eq. 4 of the seed paper) and is the background model of the
fixed-key null (:mod:`sketchwm_builtin.global_sketch.null`).
"""

from __future__ import annotations

import warnings
from functools import lru_cache
from typing import Any

import torch

from sketchwm.errors import ConfigError

from .params import PriorSpec

__all__ = ["resolve_prior", "background_token_model"]


@lru_cache(maxsize=1)
def _packaged_tokenizer_fingerprint() -> str:
    """Fingerprint of the tokenizer the packaged counts were made with (the default model's), or ""."""
    try:
        from sketchwm.components import tokenizer_fingerprint
        from sketchwm.default_model import MODEL_DIR
        from sketchwm_builtin.backends.fast_start import load_tokenizer_and_config

        return tokenizer_fingerprint(load_tokenizer_and_config(str(MODEL_DIR))[0])
    except Exception:  # noqa: BLE001 - no shipped tokenizer: the vocabulary size is the only check
        return ""


def resolve_prior(spec: PriorSpec, vocab_size: int,
                  tokenizer_fingerprint: str | None = None) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """Load π_tok counts for ``spec`` and check that they belong to this vocabulary and tokenizer.

    Args:
        spec: the scheme's ``prior`` params.
        vocab_size: V of the backend.
        tokenizer_fingerprint: the backend's tokenizer fingerprint, or None (not checked).

    Returns:
        (counts (V,) float64 or None for uniform, description dict with ``source``, ``sha256``,
        ``vocab_size`` and ``tokenizer`` where known).

    Raises:
        ConfigError: missing/unknown counts, wrong length, SHA-256 mismatch, or a prior made for
        another vocabulary or tokenizer.
    """
    counts: torch.Tensor | None = None
    desc: dict[str, Any] = {"source": spec.source}
    tok = tokenizer_fingerprint or ""
    if spec.vocab_size and spec.vocab_size != vocab_size:
        raise ConfigError(f"the token prior was estimated for a vocabulary of {spec.vocab_size} ids, the backend has "
                          f"{vocab_size}: estimate one for this model (`sketchwm prior estimate`)")
    if spec.tokenizer and tok and spec.tokenizer != tok:
        raise ConfigError(f"the token prior was estimated with tokenizer {spec.tokenizer}, the backend's tokenizer is "
                          f"{tok}: estimate one for this model (`sketchwm prior estimate`)")
    if spec.source in ("auto", "packaged"):
        why = ""
        try:
            from sketchwm.data import load_token_counts

            counts = torch.as_tensor(load_token_counts(spec.name), dtype=torch.float64)
            desc.update(source="packaged", name=spec.name)
        except (ImportError, ValueError, FileNotFoundError, OSError) as exc:
            if spec.source == "packaged":
                raise ConfigError(f"packaged token counts '{spec.name}' are not available: {exc}") from None
            counts, why = None, "no packaged token counts"
        if counts is not None and counts.numel() != vocab_size:
            why = f"packaged token counts '{spec.name}' have {counts.numel()} entries, vocabulary has {vocab_size}"
            counts = None
        elif counts is not None and tok and _packaged_tokenizer_fingerprint() not in ("", tok):
            why = (f"packaged token counts '{spec.name}' belong to tokenizer {_packaged_tokenizer_fingerprint()}, "
                   f"the backend's is {tok}")
            counts = None
        if counts is None:
            if spec.source == "packaged":
                raise ConfigError(why)
            warnings.warn(f"token prior: {why}; using a uniform prior (signs not balanced, no excluded tokens, and the "
                          "background null's p-values assume uniform token frequencies). Estimate one with "
                          "`sketchwm prior estimate` and pass it as the scheme's prior.", UserWarning, stacklevel=3)
            desc = {"source": "uniform", "auto": why}
        else:
            desc["tokenizer"] = _packaged_tokenizer_fingerprint()
    elif spec.source == "file":
        from ..token_prior import TokenPrior

        loaded = TokenPrior.load(spec.path)
        counts = loaded.counts
        if counts.numel() != vocab_size or loaded.vocab_size != vocab_size:
            raise ConfigError(f"token prior file {spec.path} has {counts.numel()} entries, vocabulary has {vocab_size}")
        if loaded.tokenizer and (spec.tokenizer or tok) and loaded.tokenizer != (spec.tokenizer or tok):
            raise ConfigError(f"token prior file {spec.path} was estimated with tokenizer {loaded.tokenizer}, not "
                              f"{spec.tokenizer or tok}")
        desc.update(path=spec.path, tokenizer=loaded.tokenizer or spec.tokenizer)
    if counts is not None:
        from ..token_prior import counts_sha256

        digest = counts_sha256(counts)
        if spec.sha256 and spec.sha256 != digest:
            raise ConfigError(f"token prior SHA-256 mismatch: config expects {spec.sha256[:12]}…, found {digest[:12]}…")
        desc.update(sha256=digest, vocab_size=vocab_size)
    return counts, desc


def background_token_model(prior: torch.Tensor | None, vocab_size: int,
                           device: Any = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(log π, log(1 − π)), each (V,) float64 on ``device``: the background token model of the fixed-key null.

    π = counts / Σ counts, with tokens never seen given half a count and π capped below 1 − 10⁻⁹;
    uniform π = 1/V when ``prior`` is None.
    """
    V = vocab_size
    pi = torch.full((V,), 1.0 / V, dtype=torch.float64) if prior is None else prior.double() / prior.double().sum()
    pi = pi.clamp(min=0.5 / float(prior.sum()) if prior is not None else 0.0, max=1 - 1e-9)  # unseen tokens: ½ count
    return torch.log(pi).to(device), torch.log1p(-pi).to(device)
