"""What the benchmark's cells read: small typed inputs, and the run-level services that make them.

Services, one of each per run, bundled in :class:`Services`: :class:`PromptBank` (the prompt splits
and the human passages), :class:`Models` (backends, sampler settings, generation and the shared
unwatermarked texts), :class:`Schemes` (the run's keys and each unit's keyed scheme) and
:class:`Oracle` (perplexities). Inputs, built once per unit by the runner
(:func:`sketchwm.bench.runner.run_cells`) and handed to a cell kind under their names in
:data:`sketchwm.bench.cellkind.INPUTS`: :class:`UnitTexts`, :class:`NullSplits`, :class:`UnitScorer`,
:class:`CleanQuality`, :class:`Attacks`, :class:`Theft`, :class:`UnrelatedKeys`, :class:`SpoofSetting`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ..data import load_prompts
from ..detection import pad_ids
from ..keys import WatermarkKey
from ..observers import TiltObserver
from .cellkind import Scored
from .config import BenchConfig
from .plan import ALPHAS, Unit, _seed, bench_registry, derive_key, derive_unrelated_key, resolved_params

__all__ = ["Services", "PromptBank", "Models", "Schemes", "Oracle", "UnitTexts", "NullSplits", "UnitScorer", "CleanQuality", "Attacks",
           "Theft", "UnrelatedKeys", "SpoofSetting", "prefix_tokens_to_detect"]


def prefix_tokens_to_detect(scheme: Any, ids: list[list[int]], step: int, alpha: float = 0.01) -> np.ndarray:
    """Tokens-to-detect of each text: the first prefix length (multiples of ``step`` from the scheme's
    ``min_tokens`` on, then the full text) whose p-value is ≤ α; inf if none. All prefixes of all texts
    are scored in one batch.

    Args:
        scheme: a built :class:`sketchwm.components.WatermarkScheme`.
        ids: n token-id lists. step: grid step in tokens (> 0). alpha: the p-value level.

    Returns:
        (n,) float64 prefix lengths in tokens (inf: never detected).
    """
    L = max(len(i) for i in ids)
    ks = sorted(set(range(step, L + 1, step)) | {L})
    ks = [k for k in ks if k >= max(1, int(getattr(scheme, "min_tokens", 1)))]
    if not ks:
        return np.full(len(ids), np.inf)
    prefixes = [x[:k] for x in ids for k in ks]  # (n·K) prefixes, scored in one batch
    x, valid = pad_ids(prefixes)
    p = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
    p = np.nan_to_num(p, nan=1.0).reshape(len(ids), len(ks))  # (n, K)
    hit = p <= alpha
    kk = np.array(ks, dtype=np.float64)
    lens = np.array([len(i) for i in ids], dtype=np.float64)
    return np.where(hit.any(1), np.minimum(kk[hit.argmax(1)], lens), np.inf)


# ---------------------------------------------------------------------------------------------- services
class PromptBank:
    """The run's prompts (each prompt set split once) and the human passages the text spoofers forge.

    Args:
        cfg: the run's config (reads ``prompt_sets``, ``n_null_cal``, ``n_null_fpr``, ``stealing`` and ``seed``).
    """

    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        self._splits: dict[int, dict[str, list[str]]] = {}
        self._human: tuple[str, ...] | None = None

    def split(self, p: int) -> dict[str, list[str]]:
        """Prompt set ``p`` split into disjoint blocks: eval, null_cal, null_fpr, steal_train, steal_ref."""
        if p not in self._splits:
            cfg, ps = self.cfg, self.cfg.prompt_sets[p]
            steal = max(cfg.stealing.train_n) if cfg.stealing else 0
            sizes = {"eval": ps.n, "null_cal": cfg.n_null_cal, "null_fpr": cfg.n_null_fpr,
                     "steal_train": steal, "steal_ref": steal}
            total = sum(sizes.values())
            pool = load_prompts(ps.source, total if ps.source == "tiny" else None, seed=cfg.seed)
            if ps.words:
                pool = [" ".join(x.split()[: ps.words]) for x in pool]
            order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(_seed(cfg.seed, ps.name) % 2**62))
            pool = [pool[i] for i in order.tolist()]
            out, start = {}, 0
            for name, k in sizes.items():  # wraps around (prompts repeat) only when the source is too small
                out[name] = [pool[(start + i) % len(pool)] for i in range(k)]
                start += k
            self._splits[p] = out
        return self._splits[p]

    def human(self) -> tuple[str, ...]:
        """The first ``human_n`` passages of each ``stealing.human`` domain (:func:`sketchwm.data.load`, or
        ``tiny``: 30-word strings of the tiny model's words), text no model of the run produced."""
        if self._human is None:
            from ..data import load

            spec, out = self.cfg.stealing, []
            for dom in spec.human:
                if dom == "tiny":
                    words = load_prompts("tiny", 5 * spec.human_n, seed=self.cfg.seed + 1)
                    out += [" ".join(words[5 * i: 5 * i + 5]) for i in range(spec.human_n)]
                else:
                    out += load(dom)[: spec.human_n]
            self._human = tuple(out)
        return self._human


class Models:
    """The run's backends, each built once, their sampler settings, and generation.

    Args:
        cfg: the run's config (reads ``backends``, ``sampler``, ``regimes``, ``batch_size``, ``seed``);
        registry: where backends are looked up; prompts: the run's :class:`PromptBank` (null texts).
    """

    def __init__(self, cfg: BenchConfig, registry: Any, prompts: PromptBank):
        self.cfg, self.registry, self.prompts = cfg, registry, prompts
        self._backends: dict[int, Any] = {}
        self._null: dict[tuple, list[str]] = {}

    def backend(self, i: int) -> Any:
        """Backend ``i`` of the config (``tiny``: :func:`sketchwm.testing.tiny_backend`)."""
        if i not in self._backends:
            spec = self.cfg.backends[i]
            if spec.name == "tiny":
                from ..testing.tiny import tiny_backend

                self._backends[i] = tiny_backend(seed=int(spec.params.get("seed", 0)))
            else:
                self._backends[i] = self.registry.create("backend", spec.name, spec.params)
        return self._backends[i]

    def sampler_config(self, b: int, length: int, regime: int = 0) -> dict[str, Any]:
        """Sampler settings for ``length`` generated tokens on backend ``b`` in regime ``regime``
        (backend defaults < config ``sampler`` < the regime's; block length and steps fitted:
        ``block_length`` None or not dividing ``length`` means one block)."""
        from ..engine import SamplerConfig

        be = self.backend(b)
        over = {**self.cfg.sampler, **self.cfg.regime_list[regime].sampler}
        base = {**SamplerConfig().model_dump(), **(be.sampler_defaults or {}), **over}
        cfg = {**base, "gen_length": length}
        if cfg["block_length"] is None or length % int(cfg["block_length"]) != 0:
            cfg["block_length"] = length
        cfg["steps"] = min(int(over.get("steps", base["steps"])), length)
        nb = length // int(cfg["block_length"])
        cfg["steps"] = max(nb, cfg["steps"] // nb * nb)
        return cfg

    def generate(self, b: int, length: int, prompts: Sequence[str], scheme: Any, seed: int, regime: int = 0,
                 observers: Sequence[TiltObserver] = ()) -> tuple[list[str], float]:
        """Texts for ``prompts`` (watermarked by ``scheme`` unless None) in regime ``regime`` and the
        wall seconds it took, in batches of the config's ``batch_size``; ``observers`` see every batch
        (:meth:`sketchwm.engine.MaskedDiffusionSampler.generate`)."""
        from ..engine import MaskedDiffusionSampler

        be = self.backend(b)
        sampler = MaskedDiffusionSampler(be, self.sampler_config(b, length, regime), scheme)
        gen = torch.Generator(device=be.device).manual_seed(seed % 2**62)
        t0 = time.perf_counter()
        texts: list[str] = []
        bs = self.cfg.batch_size
        for i in range(0, len(prompts), bs):
            texts += sampler.generate(list(prompts[i:i + bs]), gen, observers=observers).texts
        return texts, time.perf_counter() - t0

    def null_texts(self, b: int, length: int, p: int, split: str, regime: int = 0) -> list[str]:
        """Unwatermarked texts of backend ``b`` in regime ``regime`` for the prompts of split ``split``
        (``null_cal``, ``null_fpr``, ``steal_ref``) of prompt set ``p``; generated once, shared by schemes and keys."""
        key = (b, length, p, split, regime)
        if key not in self._null:
            prompts = self.prompts.split(p)[split]
            tag = () if not self.cfg.regimes else (self.cfg.regime_list[regime].name,)
            self._null[key] = self.generate(b, length, prompts, None, _seed(self.cfg.seed, "null", split, b, length, p, *tag),
                                            regime=regime)[0] if prompts else []
        return self._null[key]


class Oracle:
    """Oracle perplexities (SmolLM2-135M, :class:`sketchwm.oracle.OracleLM`, loaded on first use), cached by key.

    Args:
        enabled: the config's ``oracle``; when False :meth:`ppl` returns None.
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._model: Any = None
        self._ppl: dict[Any, np.ndarray] = {}

    def ppl(self, texts: Sequence[str], cache_key: Any) -> np.ndarray | None:
        """(n,) float64 perplexities of ``texts`` (computed once per ``cache_key``), or None when disabled."""
        if not self.enabled:
            return None
        if cache_key not in self._ppl:
            if self._model is None:
                from ..oracle import OracleLM

                self._model = OracleLM()
            self._ppl[cache_key] = np.array(self._model.perplexity(list(texts)), dtype=np.float64)
        return self._ppl[cache_key]


class Schemes:
    """The run's keys and each unit's keyed scheme on the unit's backend, each built once.

    Args:
        cfg: the run's config (reads ``key_seed`` and ``stealing``); registry: where schemes are looked
            up; models: the run's :class:`Models` (the units' backends).
    """

    def __init__(self, cfg: BenchConfig, registry: Any, models: Models):
        self.cfg, self.registry, self.models = cfg, registry, models
        self._built: dict[tuple, Any] = {}

    def _once(self, key: tuple, build: Callable[[], Any]) -> Any:
        if key not in self._built:
            self._built[key] = build()
        return self._built[key]

    def key(self, i: int) -> WatermarkKey:
        """Key ``i`` of the run (:func:`sketchwm.bench.plan.derive_key`)."""
        return self._once(("key", i), lambda: derive_key(self.cfg, i))

    def keyed(self, unit: Unit, key: WatermarkKey) -> Any:
        """``unit``'s scheme and params under ``key``, on the unit's backend; built afresh on every call.

        Raises:
            ConfigError, RegistryError: as :class:`sketchwm.api.Watermarker`.
        """
        from ..api import Watermarker

        spec = {"scheme": {"name": unit.scheme_name, "params": json.loads(unit.scheme_params)}}
        return Watermarker(key, spec, backend=self.models.backend(unit.backend), registry=self.registry).scheme

    def scheme(self, unit: Unit) -> Any:
        """The unit's scheme under its own key (:meth:`key` of ``unit.key``)."""
        return self._once(("scheme", unit), lambda: self.keyed(unit, self.key(unit.key)))

    def unrelated(self, unit: Unit) -> "UnrelatedKeys":
        """The unit's scheme under the config's ``stealing.unrelated_keys`` keys unrelated to its own
        (:func:`sketchwm.bench.plan.derive_unrelated_key`; none without ``stealing``)."""
        count = self.cfg.stealing.unrelated_keys if self.cfg.stealing else 0
        return UnrelatedKeys(count, lambda j: self._once(("unrelated", unit, j), lambda: self.keyed(
            unit, derive_unrelated_key(self.cfg, unit.key, j))))

    def knob(self, unit: Unit) -> tuple[str, float, bool, str]:
        """The unit's strength knob: (Params field or "", its value or NaN, whether it is the scheme's default,
        which direction is stronger: "higher" or "lower")."""
        def build() -> tuple[str, float, bool, str]:
            cls = self.registry.get("scheme", unit.scheme_name)
            st = cls.strength
            v = st.value_of(cls.parse_params(json.loads(unit.scheme_params)))
            d = st.value_of(cls.parse_params(None))
            return st.field or "", float("nan") if v is None else v, v == d, st.stronger
        return self._once(("knob", unit), build)

    def resolved_params(self, unit: Unit) -> str:
        """The unit's scheme params as the scheme runs them (every default filled in), as sorted JSON:
        the ``scheme_params_resolved`` column, the params part of the cells' identity."""
        def build() -> str:
            cls = self.registry.get("scheme", unit.scheme_name)
            return json.dumps(resolved_params(cls, json.loads(unit.scheme_params)), sort_keys=True)
        return self._once(("resolved", unit), build)


@dataclass(frozen=True)
class Services:
    """The run's services, one of each: what the runner builds the cells' inputs from, and what a caller
    that runs cells reads besides (the scorecard's promises generate and score with the same ones).

    Attributes:
        cfg: the validated :class:`BenchConfig`; registry: the plugin registry
            (:func:`sketchwm.bench.plan.bench_registry`); prompts: :class:`PromptBank`; models:
            :class:`Models`; schemes: :class:`Schemes`; oracle: :class:`Oracle`.
    """

    cfg: BenchConfig
    registry: Any
    prompts: PromptBank
    models: Models
    schemes: Schemes
    oracle: Oracle

    @classmethod
    def build(cls, cfg: BenchConfig, registry: Any = None) -> "Services":
        """The services of ``cfg``, nothing built yet; ``registry`` defaults to the installed plugins.

        Raises:
            RegistryError: as :func:`sketchwm.bench.plan.bench_registry`.
        """
        registry = bench_registry(registry)
        prompts = PromptBank(cfg)
        models = Models(cfg, registry, prompts)
        return cls(cfg, registry, prompts, models, Schemes(cfg, registry, models), Oracle(cfg.oracle))


# ---------------------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class UnitScorer:
    """Detection under one unit's keyed scheme.

    Attributes:
        scheme: the keyed :class:`sketchwm.components.WatermarkScheme`; encode: texts → token-id lists
            (the backend's tokenizer); tokens_step: the config's prefix grid step (0: no tokens-to-detect).
    """

    scheme: Any
    encode: Callable[[list[str]], list[list[int]]]
    tokens_step: int
    _analytic: dict[tuple[float, int], float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def min_tokens(self) -> int:
        """The shortest text the scheme scores (1 unless it says otherwise)."""
        return int(getattr(self.scheme, "min_tokens", 1))

    def score(self, texts: Sequence[str], ids: list[list[int]] | None = None) -> Scored:
        """Detection of ``texts`` (or of their token ``ids``); an empty text scores −inf with p = 1."""
        scheme = self.scheme
        ids = self.encode(list(texts)) if ids is None else ids
        t0 = time.perf_counter()
        x, valid = pad_ids(ids)
        out = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device))
        secs = time.perf_counter() - t0
        n = np.array([len(i) for i in ids], dtype=np.int64)
        s = out.score.double().cpu().numpy()
        pv = out.p_value.double().cpu().numpy()
        s = np.where((n == 0) | np.isnan(s), -np.inf, s)
        pv = np.where((n == 0) | np.isnan(pv), 1.0, pv)
        analytic = {a: np.array([self.analytic(a, int(k)) for k in n], dtype=np.float64) for a in ALPHAS}
        return Scored(s, pv, n, ids, analytic, secs)

    def analytic(self, alpha: float, n_tokens: int) -> float:
        """The scheme's analytic τ_α at ``n_tokens`` (−inf where it has no closed form); cached."""
        if (alpha, n_tokens) not in self._analytic:
            try:
                v = float(self.scheme.analytic_threshold(alpha, max(n_tokens, 1)))
            except NotImplementedError:
                v = float("-inf")
            self._analytic[alpha, n_tokens] = v
        return self._analytic[alpha, n_tokens]

    def tokens_to_detect(self, ids: list[list[int]], alpha: float = 0.01) -> np.ndarray | None:
        """:func:`prefix_tokens_to_detect` on the config's grid: (n,) float64, or None when the step is 0."""
        step = self.tokens_step
        return None if step <= 0 else prefix_tokens_to_detect(self.scheme, ids, step, alpha)


@dataclass(frozen=True)
class UnitTexts:
    """The unit's watermarked texts, generated once.

    Attributes:
        texts: n texts; prompts: their n eval prompts; gen_seconds: wall seconds of the generation.
        scored: their detection under the unit's key.
        kl: (M,) float64 KL(p̃‖p) of every sampled row (nats), or None (config ``kl: false``).
        kl_per_text, kl_sampled_per_text: (n,) float64 mean KL of each text's rows before / after the
            sampler's temperature (:class:`sketchwm.bench.recorders.KLRecorder`), or None.
    """

    texts: list[str]
    prompts: list[str]
    gen_seconds: float
    scored: Scored
    kl: np.ndarray | None = None
    kl_per_text: np.ndarray | None = None
    kl_sampled_per_text: np.ndarray | None = None


@dataclass(frozen=True)
class NullSplits:
    """The unit's unwatermarked texts (same model, length, prompts' source and regime), scored under its key.

    Attributes:
        cal: the calibration split (τ_N); fpr: the disjoint report split; fpr_texts: the report split's texts.
    """

    cal: Scored
    fpr: Scored
    fpr_texts: list[str]


@dataclass(frozen=True)
class CleanQuality:
    """Quality evidence of the unit's clean texts.

    Attributes:
        ppl, null_ppl: (n,) / (m,) float64 oracle perplexities of the watermarked texts and of the report
            split's, or None (config ``oracle: false``).
        diversity, null_diversity: token ids of ``samples`` texts of each of the first ``prompts`` eval
            prompts (config ``diversity``), watermarked under the unit's key and not: a list over prompts
            of lists over samples, or None.
    """

    ppl: np.ndarray | None = None
    null_ppl: np.ndarray | None = None
    diversity: list[list[list[int]]] | None = None
    null_diversity: list[list[list[int]]] | None = None


@dataclass(frozen=True)
class Attacks:
    """The run's attacks on one backend, each (name, params) built once.

    Attributes:
        registry: where attacks are looked up; backend: the model they work with; similarity: the
            config's ``similarity`` (the default of an attack's ``similarity`` param).
    """

    registry: Any
    backend: Any
    similarity: bool
    _built: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def build(self, name: str, params_json: str, **resources: Any) -> Any:
        """Attack ``name`` with params ``params_json`` (a JSON object); given ``resources`` (e.g. the
        stolen texts) it is built afresh, else once."""
        def make() -> Any:
            cls = self.registry.get("attack", name)
            params = json.loads(params_json)
            if "similarity" in getattr(cls.Params, "model_fields", {}):
                params.setdefault("similarity", self.similarity)
            return cls(params, backend=self.backend, **resources)
        if resources:
            return make()
        if (name, params_json) not in self._built:
            self._built[name, params_json] = make()
        return self._built[name, params_json]


@dataclass(frozen=True)
class Theft:
    """The thief's data for one unit (Jovanović et al. 2024): the unit's watermarked texts of the
    ``steal_train`` prompts and as many unwatermarked samples of the model (``steal_ref``, shared by
    schemes and keys); a thief of N texts learns from the first N of each.

    Attributes:
        train, ref: the largest N's texts; make_stealer: (train, ref) → the ``steal-scrub`` attack's
            fitted stealer.
    """

    train: list[str]
    ref: list[str]
    make_stealer: Callable[[list[str], list[str]], Any]
    _stealers: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    def texts(self, n: int) -> tuple[list[str], list[str]]:
        """The first ``n`` watermarked and unwatermarked texts."""
        return self.train[:n], self.ref[:n]

    def stealer(self, n: int) -> Any:
        """The stealer fitted on :meth:`texts` ``(n)``; fitted once per n."""
        if n not in self._stealers:
            self._stealers[n] = self.make_stealer(*self.texts(n))
        return self._stealers[n]


@dataclass(frozen=True)
class UnrelatedKeys:
    """Scores under ``count`` keys unrelated to the unit's (HMAC-derived in a domain no key of the run
    is, :func:`sketchwm.bench.plan.derive_unrelated_key`).

    Attributes:
        count: J, the config's ``stealing.unrelated_keys`` (0: none scored); scheme: j → the unit's
            scheme under unrelated key j (built once each).
    """

    count: int
    scheme: Callable[[int], Any]

    def rate(self, ids: list[list[int]], alpha: float = 0.01) -> np.ndarray:
        """Per text, the fraction of the J keys under which its p-value is ≤ ``alpha``: (n,) float64
        (zeros when J = 0)."""
        hits = np.zeros(len(ids), dtype=np.float64)
        if self.count == 0 or not ids:
            return hits
        x, valid = pad_ids(ids)
        for j in range(self.count):
            scheme = self.scheme(j)
            p = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
            hits += np.where(np.isnan(p), 0.0, (p <= alpha).astype(np.float64))
        n = np.array([len(i) for i in ids])
        return np.where(n == 0, 0.0, hits / self.count)


@dataclass(frozen=True)
class SpoofSetting:
    """What the generation spoofer writes with: the unit's backend, the prompts the watermark never saw
    (the ``null_fpr`` split) and the unit's sampler settings."""

    backend: Any
    prompts: list[str]
    sampler_config: dict[str, Any]
