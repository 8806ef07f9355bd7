"""The token prior π_tok for one vocabulary: estimate it, store it, and pin it in the key's configuration.

π_tok balances the Count-Sketch signs (paper eq. 4), picks the ``exclude_top`` most frequent tokens,
and is the background token model of the fixed-key null (:mod:`sketchwm_builtin.global_sketch.null`). It
belongs to one tokenizer: sketchwm ships it for the default model only. For any other model estimate
it once, from unwatermarked samples of that model (:func:`estimate_from_samples`, preferred: the
null is "text from this model") or from a corpus through its tokenizer
(:func:`estimate_from_corpus`), save it (:meth:`TokenPrior.save`), and put :meth:`TokenPrior.spec`
into the scheme params (``{"prior": {...}}``) of the configuration that goes with the key. The spec
records the prior's SHA-256, vocabulary size and tokenizer fingerprint; building the scheme with
another file, another vocabulary or another tokenizer raises :class:`ConfigError`, and a calibration
made under another prior raises :class:`CalibrationError` (the prior's fingerprint is stored in it).

Part of the global-sketch plugin (``sketchwm_builtin``), which also adds the CLI through the hook
``sketchwm_register_commands`` (:mod:`sketchwm_builtin.cli`):
``sketchwm prior estimate --out prior.npz [--corpus FILE | --n-samples N] [--config-out cfg.json]``.

File format (``.npz``): ``counts`` (V,) float64 raw token counts (no smoothing: the background model
gives unseen tokens half a count) and ``meta``, a JSON string with ``vocab_size``, ``tokenizer``,
``source``, ``n_texts``, ``n_tokens``, ``sha256``, ``sketchwm_version``, ``created``. A ``.npy`` of V
counts is also accepted (no metadata; the spec's fields are then the only check).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from sketchwm.errors import ConfigError, InputError

__all__ = ["TokenPrior", "count_tokens", "counts_sha256", "estimate_from_corpus", "estimate_from_samples",
           "estimate_token_prior"]


def counts_sha256(counts: torch.Tensor | np.ndarray) -> str:
    """SHA-256 (hex) of counts as float64 bytes: the prior's identity in specs and calibrations."""
    arr = counts.to(torch.float64).cpu().numpy() if isinstance(counts, torch.Tensor) else np.asarray(counts, np.float64)
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def count_tokens(id_lists: Sequence[Sequence[int]], vocab_size: int) -> torch.Tensor:
    """Token counts of id lists: → (V,) float64 (one ``bincount`` over the concatenation).

    Raises:
        InputError: an id outside [0, V), or no tokens at all.
    """
    flat = torch.as_tensor([i for ids in id_lists for i in ids], dtype=torch.long)
    if flat.numel() == 0:
        raise InputError("no tokens to estimate a token prior from")
    if int(flat.min()) < 0 or int(flat.max()) >= vocab_size:
        raise InputError(f"token id outside the vocabulary [0, {vocab_size}) while estimating the token prior")
    return torch.bincount(flat, minlength=vocab_size).to(torch.float64)


@dataclass
class TokenPrior:
    """Token counts of one vocabulary with their provenance.

    Attributes:
        counts: (V,) float64 raw counts.
        vocab_size: V (the model's logit dimension).
        tokenizer: the tokenizer's fingerprint (:func:`sketchwm.components.tokenizer_fingerprint`).
        source: what was counted (e.g. "200 unwatermarked samples of llada:...").
        n_texts: texts counted.
        meta: other provenance (version, time).
    """

    counts: torch.Tensor
    vocab_size: int
    tokenizer: str
    source: str = ""
    n_texts: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        """See :func:`counts_sha256`."""
        return counts_sha256(self.counts)

    def spec(self, path: str | os.PathLike) -> dict[str, Any]:
        """The scheme's ``prior`` params for this prior saved at ``path``:
        ``{"source": "file", "path", "sha256", "vocab_size", "tokenizer"}``."""
        return {"source": "file", "path": str(path), "sha256": self.sha256, "vocab_size": int(self.vocab_size),
                "tokenizer": self.tokenizer}

    def save(self, path: str | os.PathLike) -> Path:
        """Write ``.npz`` (counts + JSON meta), or bare counts for a ``.npy`` path, atomically."""
        from sketchwm import __version__

        p = Path(path)
        buf = io.BytesIO()
        counts = self.counts.to(torch.float64).cpu().numpy()
        if p.suffix == ".npy":
            np.save(buf, counts)
        else:
            meta = {"vocab_size": int(self.vocab_size), "tokenizer": self.tokenizer, "source": self.source,
                    "n_texts": int(self.n_texts), "n_tokens": float(counts.sum()), "sha256": self.sha256,
                    "sketchwm_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            np.savez(buf, counts=counts, meta=np.array(json.dumps(meta)))
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        os.replace(tmp, p)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TokenPrior":
        """Read a prior written by :meth:`save` (or a ``.npy``/``.pt`` of V counts, without provenance).

        Raises:
            ConfigError: missing or unreadable file, or counts that are not a finite non-negative vector.
        """
        p = Path(path)
        if not p.exists():
            raise ConfigError(f"token prior file not found: {p}")
        meta: dict[str, Any] = {}
        try:
            if p.suffix == ".npz":
                with np.load(p, allow_pickle=False) as z:
                    counts = torch.from_numpy(z["counts"].astype(np.float64))
                    meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
            elif p.suffix == ".npy":
                counts = torch.from_numpy(np.load(p, allow_pickle=False).astype(np.float64))
            else:
                counts = torch.as_tensor(torch.load(p, map_location="cpu", weights_only=True), dtype=torch.float64)
        except (OSError, ValueError, KeyError, RuntimeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read token prior file {p}: {exc}") from None
        counts = counts.flatten()
        if not bool(torch.isfinite(counts).all()) or bool((counts < 0).any()) or float(counts.sum()) <= 0:
            raise ConfigError(f"token prior file {p} must hold finite, non-negative counts, not all zero")
        return cls(counts, int(meta.get("vocab_size", counts.numel())), str(meta.get("tokenizer", "")),
                   str(meta.get("source", "")), int(meta.get("n_texts", 0)), meta)


def estimate_from_corpus(tokenizer: Any, texts: Sequence[str], vocab_size: int | None = None,
                         source: str = "corpus") -> TokenPrior:
    """π_tok from a corpus through the model's tokenizer (no special tokens).

    Args:
        tokenizer: the model's Hugging Face tokenizer.
        texts: the corpus, one text per item (ideally text like the model's output).
        vocab_size: V, the model's logit dimension (default ``len(tokenizer)``; it may be larger,
            e.g. padded embedding rows).
        source: a description stored with the counts.

    Raises:
        InputError: no texts or no tokens.
    """
    from sketchwm.components import tokenizer_fingerprint

    if len(texts) == 0:
        raise InputError("no texts to estimate a token prior from")
    V = int(vocab_size or len(tokenizer))
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    return TokenPrior(count_tokens(ids, V), V, tokenizer_fingerprint(tokenizer), source, len(texts))


def estimate_from_samples(watermarker: Any, prompts: Sequence[str], seed: int = 0, batch_size: int = 16,
                          progress: bool = False, **sampler_overrides: Any) -> TokenPrior:
    """π_tok from unwatermarked samples of the model (one per prompt), each cut at its first EOS.

    The number of tokens matters: the background null gives each token seen c times the
    probability c/Σc, so rare tokens need many samples (the default model's prior counts 5.9M tokens).

    Args:
        watermarker: a :class:`sketchwm.api.Watermarker` (its backend and sampler settings; its
            scheme is not built, so this works before any prior exists).
        prompts: prompts to sample from.
        seed: sampling seed.
        **sampler_overrides: :class:`sketchwm.engine.SamplerConfig` fields.

    Raises:
        InputError: no prompts.
    """
    out = watermarker.generate(list(prompts), seed=seed, watermark=False, batch_size=batch_size, progress=progress,
                               **sampler_overrides)
    be = watermarker.backend
    return TokenPrior(count_tokens(out.token_lists(), be.vocab_size), int(be.vocab_size), be.tokenizer_fingerprint,
                      f"{len(prompts)} unwatermarked samples of {be.model_id} (seed {seed})", len(prompts))


def estimate_token_prior(watermarker: Any, prompts: Sequence[str], path: str | os.PathLike, seed: int = 0,
                         **sampler_overrides: Any) -> dict[str, Any]:
    """Estimate π_tok from unwatermarked samples of the model and save the counts (paper eq. 4).

    Args:
        watermarker: a :class:`sketchwm.api.Watermarker`; supplies the backend and sampler settings.
        prompts: prompts to sample from (one sample each).
        path: where to write the counts (``.npz`` with provenance, or ``.npy``: V float64 raw counts).
        seed: sampling seed.
        **sampler_overrides: :class:`sketchwm.engine.SamplerConfig` fields.

    Returns:
        the ``prior`` spec for :class:`sketchwm_builtin.global_sketch.GlobalSketchParams`:
        ``{"source": "file", "path", "sha256", "vocab_size", "tokenizer"}``.

    Raises:
        InputError: no prompts, or an output path that cannot be written.
    """
    prior = estimate_from_samples(watermarker, prompts, seed=seed, **sampler_overrides)
    prior.save(path)
    return prior.spec(path)
