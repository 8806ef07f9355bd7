"""The benchmark run: plan the cell grid, build each model/key/calibration once, write a part per cell.

Grid (:class:`sketchwm.bench.config.BenchConfig`): a *unit* is one (scheme variant, backend, key,
length, prompt set); it owns what its cells share — the backend, the keyed scheme, the
unwatermarked null texts (calibration and report splits) and the watermarked texts, each generated
once. A *cell* is one thing done to the unit's texts: ``clean`` (nothing), ``attack`` (an attack at
a strength), ``spoof`` / ``scrub`` (watermark stealing with ``train_n`` stolen texts). Each cell is
identified by a content hash of its configuration; its rows go to one Parquet part
(:mod:`sketchwm.bench.results`), so a restarted run skips finished cells.

Executors: ``local`` runs units in this process with one shared :class:`RunContext`; ``ray`` runs
each unit as a Ray task (its own context) and writes parts as tasks finish.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from .. import __version__
from ..data import load_prompts
from ..detection import pad_ids
from ..quality import cross_sample_distinct, sample_repeats
from ..errors import ConfigError
from ..keys import WatermarkKey
from ..observers import TiltObserver
from .config import BenchConfig
from .metric import CellData, Metric, decisions
from .plan import (ALPHAS, Cell, Unit, _seed, attack_family, bench_registry, derive_key, derive_unrelated_key,  # noqa: F401 - re-exported
                   metric_names, plan, resolved_params)
from .recorders import KLRecorder
from .results import done_cells, git_commit, remove_stale_parts, write_part
from .theory import THEORY_KINDS, theory_cell

__all__ = ["Unit", "Cell", "plan", "RunContext", "run_unit", "run_bench", "bench_registry", "attack_family", "ALPHAS"]


@dataclass
class Scored:
    """Detection of a batch: scores, p_values (n,) float64; n_tokens (n,) int64; ids; analytic {α: (n,)}; seconds."""

    scores: np.ndarray
    p_values: np.ndarray
    n_tokens: np.ndarray
    ids: list[list[int]]
    analytic: dict[float, np.ndarray]
    seconds: float


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


class RunContext:
    """Builds each backend, key, keyed scheme, null split and watermarked batch once per run (caches).

    Args:
        cfg: the validated config; registry: plugin registry (default: installed plugins + built-in metrics).
    """

    def __init__(self, cfg: BenchConfig, registry: Any = None):
        self.cfg = cfg
        self.registry = bench_registry(registry)
        self.metrics: list[Metric] = [self.registry.create("metric", n) for n in metric_names(cfg, self.registry)]
        self.commit = git_commit()
        self._cache: dict[Any, Any] = {}

    def _get(self, key: Any, build: Any) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # ------------------------------------------------------------------ models, keys, prompts
    def backend(self, i: int) -> Any:
        """Backend ``i`` of the config (``tiny``: :func:`sketchwm.testing.tiny_backend`)."""
        def build() -> Any:
            spec = self.cfg.backends[i]
            if spec.name == "tiny":
                from ..testing.tiny import tiny_backend

                return tiny_backend(seed=int(spec.params.get("seed", 0)))
            return self.registry.create("backend", spec.name, spec.params)
        return self._get(("backend", i), build)

    def key(self, i: int) -> WatermarkKey:
        """Key ``i`` (see :func:`derive_key`)."""
        return self._get(("key", i), lambda: derive_key(self.cfg, i))

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

    def prompts(self, p: int) -> dict[str, list[str]]:
        """Prompt set ``p`` split into disjoint blocks: eval, null_cal, null_fpr, steal_train, steal_ref."""
        def build() -> dict[str, list[str]]:
            ps = self.cfg.prompt_sets[p]
            steal = max(self.cfg.stealing.train_n) if self.cfg.stealing else 0
            sizes = {"eval": ps.n, "null_cal": self.cfg.n_null_cal, "null_fpr": self.cfg.n_null_fpr,
                     "steal_train": steal, "steal_ref": steal}
            total = sum(sizes.values())
            pool = load_prompts(ps.source, total if ps.source == "tiny" else None, seed=self.cfg.seed)
            if ps.words:
                pool = [" ".join(x.split()[: ps.words]) for x in pool]
            order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(_seed(self.cfg.seed, ps.name) % 2**62))
            pool = [pool[i] for i in order.tolist()]
            out, start = {}, 0
            for name, k in sizes.items():  # wraps around (prompts repeat) only when the source is too small
                out[name] = [pool[(start + i) % len(pool)] for i in range(k)]
                start += k
            return out
        return self._get(("prompts", p), build)

    # ------------------------------------------------------------------ generation and scoring
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
        """Unwatermarked texts of backend ``b`` in regime ``regime`` for split ``null_cal``/``null_fpr``/``steal_ref``
        (shared by schemes and keys)."""
        def build() -> list[str]:
            prompts = self.prompts(p)[split]
            tag = () if not self.cfg.regimes else (self.cfg.regime_list[regime].name,)
            return self.generate(b, length, prompts, None, _seed(self.cfg.seed, "null", split, b, length, p, *tag),
                                 regime=regime)[0] if prompts else []
        return self._get(("null", b, length, p, split, regime), build)

    def diversity_texts(self, unit: Unit, watermarked: bool) -> list[list[list[int]]] | None:
        """Token ids of ``samples`` texts of each of the first ``prompts`` eval prompts (config
        ``diversity``), watermarked under the unit's key or not (the reference, shared by schemes and
        keys): a list over prompts of lists over samples; None without ``diversity``."""
        spec = self.cfg.diversity
        if spec is None:
            return None

        def build() -> list[list[list[int]]]:
            prompts = self.prompts(unit.prompt_set)["eval"][: spec.prompts]
            rep = [p for p in prompts for _ in range(spec.samples)]  # (prompts·samples) prompts, sample-major
            tag = ("div", unit) if watermarked else ("div-null", unit.backend, unit.length, unit.prompt_set, unit.regime)
            texts, _ = self.generate(unit.backend, unit.length, rep, self.scheme(unit) if watermarked else None,
                                     _seed(self.cfg.seed, *tag), regime=unit.regime)
            ids = self.backend(unit.backend).encode(texts)
            return [ids[i * spec.samples:(i + 1) * spec.samples] for i in range(len(prompts))]
        key = ("div", unit) if watermarked else ("div-null", unit.backend, unit.length, unit.prompt_set, unit.regime)
        return self._get(key, build)

    def knob(self, unit: Unit) -> tuple[str, float, bool, str]:
        """The unit's strength knob: (Params field or "", its value or NaN, whether it is the scheme's default,
        which direction is stronger: "higher" or "lower")."""
        def build() -> tuple[str, float, bool, str]:
            cls = self.registry.get("scheme", unit.scheme_name)
            st = cls.strength
            v = st.value_of(cls.parse_params(json.loads(unit.scheme_params)))
            d = st.value_of(cls.parse_params(None))
            return st.field or "", float("nan") if v is None else v, v == d, st.stronger
        return self._get(("knob", unit), build)

    def resolved_params(self, unit: Unit) -> str:
        """The unit's scheme params as the scheme runs them (every default filled in), as sorted JSON:
        the ``scheme_params_resolved`` column, the params part of the cells' identity."""
        def build() -> str:
            cls = self.registry.get("scheme", unit.scheme_name)
            return json.dumps(resolved_params(cls, json.loads(unit.scheme_params)), sort_keys=True)
        return self._get(("resolved", unit), build)

    def scheme(self, unit: Unit) -> Any:
        """The keyed scheme of ``unit`` on its backend's device."""
        return self._get(("scheme", unit), lambda: keyed_scheme(self, unit, self.key(unit.key)))

    def score(self, unit: Unit, texts: Sequence[str], ids: list[list[int]] | None = None) -> Scored:
        """Detection scores of ``texts`` under ``unit``'s keyed scheme (empty text: score −inf, p = 1)."""
        scheme, be = self.scheme(unit), self.backend(unit.backend)
        ids = be.encode(list(texts)) if ids is None else ids
        t0 = time.perf_counter()
        x, valid = pad_ids(ids)
        out = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device))
        secs = time.perf_counter() - t0
        n = np.array([len(i) for i in ids], dtype=np.int64)
        s = out.score.double().cpu().numpy()
        pv = out.p_value.double().cpu().numpy()
        s = np.where((n == 0) | np.isnan(s), -np.inf, s)
        pv = np.where((n == 0) | np.isnan(pv), 1.0, pv)
        analytic = {a: np.array([self.analytic(unit, a, int(k)) for k in n], dtype=np.float64) for a in ALPHAS}
        return Scored(s, pv, n, ids, analytic, secs)

    def analytic(self, unit: Unit, alpha: float, n_tokens: int) -> float:
        """The scheme's analytic τ_α at ``n_tokens`` (−inf where it has no closed form)."""
        def build() -> float:
            try:
                return float(self.scheme(unit).analytic_threshold(alpha, max(n_tokens, 1)))
            except NotImplementedError:
                return float("-inf")
        return self._get(("analytic", unit, alpha, n_tokens), build)

    def tokens_to_detect(self, unit: Unit, ids: list[list[int]], alpha: float = 0.01) -> np.ndarray | None:
        """:func:`prefix_tokens_to_detect` under the unit's scheme on the config's grid (None: step 0)."""
        step = self.cfg.tokens_step
        return None if step <= 0 else prefix_tokens_to_detect(self.scheme(unit), ids, step, alpha)

    def oracle(self) -> Any:
        """The SmolLM2-135M oracle (loaded once)."""
        def build() -> Any:
            from ..oracle import OracleLM

            return OracleLM()
        return self._get("oracle", build)

    def ppl(self, texts: Sequence[str], cache_key: Any = None) -> np.ndarray | None:
        """Oracle perplexities (n,) of ``texts``, or None when the config disables the oracle."""
        if not self.cfg.oracle:
            return None
        build = lambda: np.array(self.oracle().perplexity(list(texts)), dtype=np.float64)  # noqa: E731
        return self._get(("ppl", cache_key), build) if cache_key is not None else build()

    def attack(self, b: int, name: str, params_json: str, **resources: Any) -> Any:
        """The attack object (built once per backend and params; ``similarity`` set from the config)."""
        def build() -> Any:
            cls = self.registry.get("attack", name)
            params = json.loads(params_json)
            if "similarity" in getattr(cls.Params, "model_fields", {}):
                params.setdefault("similarity", self.cfg.similarity)
            return cls(params, backend=self.backend(b), **resources)
        if resources:
            return build()
        return self._get(("attack", b, name, params_json), build)

    # ------------------------------------------------------------------ per-unit shared evidence
    def unit_data(self, unit: Unit) -> dict[str, Any]:
        """Watermarked texts (generated once), their scores, and the unit's null scores."""
        def build() -> dict[str, Any]:
            pr = self.prompts(unit.prompt_set)
            rec = KLRecorder()
            wm, secs = self.generate(unit.backend, unit.length, pr["eval"], self.scheme(unit),
                                     _seed(self.cfg.seed, "wm", unit), regime=unit.regime,
                                     observers=[rec] if self.cfg.kl else ())
            null = lambda split: self.null_texts(unit.backend, unit.length, unit.prompt_set, split, unit.regime)  # noqa: E731
            cal = self.score(unit, null("null_cal"))
            fpr_texts = null("null_fpr")
            fpr = self.score(unit, fpr_texts)
            kl_rows, kl_per_text, kl_sampled_per_text = rec.per_text(len(wm)) or (None, None, None)
            return {"texts": wm, "prompts": pr["eval"], "gen_seconds": secs, "scored": self.score(unit, wm), "cal": cal,
                    "fpr": fpr, "fpr_texts": fpr_texts, "kl": kl_rows, "kl_per_text": kl_per_text,
                    "kl_sampled_per_text": kl_sampled_per_text}
        return self._get(("unit", unit), build)


def stolen_texts(ctx: RunContext, unit: Unit, train_n: int) -> tuple[list[str], list[str]]:
    """The thief's data: the unit's first ``train_n`` watermarked texts (made once, every N reuses
    them) and as many unwatermarked samples of the model (shared by schemes and keys); cached in ``ctx``."""
    train = ctx._get(("steal-train", unit), lambda: ctx.generate(unit.backend, unit.length, ctx.prompts(
        unit.prompt_set)["steal_train"], ctx.scheme(unit), _seed(ctx.cfg.seed, "steal", unit), regime=unit.regime)[0])
    ref = ctx.null_texts(unit.backend, unit.length, unit.prompt_set, "steal_ref", unit.regime)
    return train[:train_n], ref[:train_n]


def stealer(ctx: RunContext, unit: Unit, train_n: int) -> Any:
    """The ``steal-scrub`` attack's stealer (Jovanović et al. 2024) fitted on :func:`stolen_texts`; cached in ``ctx``."""
    def build() -> Any:
        train, ref = stolen_texts(ctx, unit, train_n)
        scrub = ctx.registry.create("attack", "steal-scrub", None, backend=ctx.backend(unit.backend),
                                    watermarked_texts=train, reference_texts=ref)
        return scrub.stealer
    return ctx._get(("stealer", unit, train_n), build)


def keyed_scheme(ctx: RunContext, unit: Unit, key: WatermarkKey) -> Any:
    """``unit``'s scheme and params under ``key``, on the unit's backend (not cached here).

    Raises:
        ConfigError, RegistryError: as :class:`sketchwm.api.Watermarker`.
    """
    from ..api import Watermarker

    spec = {"scheme": {"name": unit.scheme_name, "params": json.loads(unit.scheme_params)}}
    return Watermarker(key, spec, backend=ctx.backend(unit.backend), registry=ctx.registry).scheme


def unrelated_rate(ctx: RunContext, unit: Unit, ids: list[list[int]], alpha: float = 0.01) -> np.ndarray:
    """Per text, the fraction of ``stealing.unrelated_keys`` keys unrelated to ``unit``'s
    (:func:`derive_unrelated_key`) under which its p-value is ≤ ``alpha``: (n,) float64 (zeros when
    the run scores no unrelated keys)."""
    J = ctx.cfg.stealing.unrelated_keys if ctx.cfg.stealing else 0
    hits = np.zeros(len(ids), dtype=np.float64)
    if J == 0 or not ids:
        return hits
    x, valid = pad_ids(ids)
    for j in range(J):
        scheme = ctx._get(("unrelated-scheme", unit, j),
                          lambda j=j: keyed_scheme(ctx, unit, derive_unrelated_key(ctx.cfg, unit.key, j)))
        p = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
        hits += np.where(np.isnan(p), 0.0, (p <= alpha).astype(np.float64))
    n = np.array([len(i) for i in ids])
    return np.where(n == 0, 0.0, hits / J)


def human_passages(ctx: "RunContext") -> list[str]:
    """The passages the run's text spoofers forge: the first ``human_n`` of each ``stealing.human``
    domain (:func:`sketchwm.data.load`, or ``tiny``: 30-word strings of the tiny model's words), text
    no model of the run produced; built once per run context."""
    def build() -> list[str]:
        from ..data import load

        spec = ctx.cfg.stealing
        out: list[str] = []
        for dom in spec.human:
            if dom == "tiny":
                words = load_prompts("tiny", 5 * spec.human_n, seed=ctx.cfg.seed + 1)
                out += [" ".join(words[5 * i: 5 * i + 5]) for i in range(spec.human_n)]
            else:
                out += load(dom)[: spec.human_n]
        return out
    return ctx._get(("human",), build)


def _cell_data(ctx: RunContext, cell: Cell, ud: dict[str, Any] | None) -> tuple[CellData, Scored, dict[str, Any]]:
    """Apply the cell's treatment to the unit's texts; returns the metric input, the scores and per-text extras."""
    unit = cell.unit
    if cell.kind in THEORY_KINDS:  # no texts of the unit's: the checks make or load their own
        extra, note = theory_cell(ctx, cell)
        e = np.zeros(0)
        sc = Scored(e, e, np.zeros(0, dtype=np.int64), [], {a: e for a in ALPHAS}, 0.0)
        data = CellData(kind=cell.kind, attack=cell.attack, strength=cell.strength, scores=e, p_values=e,
                        n_tokens=sc.n_tokens, analytic=sc.analytic, null_cal=e, null_fpr=e, null_fpr_analytic=sc.analytic,
                        extra={**extra, "note": note})
        return data, sc, {}
    base = ud["scored"]
    extras: dict[str, Any] = {}
    kw: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(int(cell.hash, 16) % 2**62)
    if cell.kind == "clean":
        sc = base
        kw["tokens_to_detect"] = ctx.tokens_to_detect(unit, base.ids)
        kw["ppl"] = ctx.ppl(ud["texts"], ("wm", unit))
        if kw["ppl"] is not None:
            kw["null_ppl"] = ctx.ppl(ud["fpr_texts"], ("null", unit.backend, unit.length, unit.prompt_set, unit.regime))
        div, div_null = ctx.diversity_texts(unit, True), ctx.diversity_texts(unit, False)
        if div is not None:
            kw["diversity"] = np.array([cross_sample_distinct(d, 2) for d in div])
            kw["null_diversity"] = np.array([cross_sample_distinct(d, 2) for d in div_null])
            # (m, 2) per prompt: distinct texts, first-token match (written beside each diversity row)
            kw["extra"] = {"diversity": np.array([sample_repeats(d) for d in div]),
                           "null_diversity": np.array([sample_repeats(d) for d in div_null])}
        total = float(base.n_tokens.sum())
        kw["gen_tokens_per_s"] = float(len(ud["texts"]) * unit.length / max(ud["gen_seconds"], 1e-9))
        kw["detect_tokens_per_s"] = total / max(base.seconds, 1e-9)
        kw["kl"] = ud["kl"]
        extras["tokens_to_detect"] = kw["tokens_to_detect"]
        extras["ppl"] = kw["ppl"]
        extras["kl"] = ud["kl_per_text"]
        extras["kl_sampled"] = ud["kl_sampled_per_text"]
    elif cell.kind in ("attack", "scrub"):
        texts = ud["texts"][: cell.n]
        if cell.kind == "attack":
            atk = ctx.attack(unit.backend, cell.attack, cell.attack_params)
        else:
            atk = ctx.attack(unit.backend, "steal-scrub", cell.attack_params, stealer=stealer(ctx, unit, cell.train_n))
            kw["reference_scores"] = base.scores[: cell.n]
            kw["reference_tokens"] = base.n_tokens[: cell.n]
            kw["reference_analytic"] = {a: v[: cell.n] for a, v in base.analytic.items()}
        out = atk.apply(texts, cell.strength, gen, prompts=ud["prompts"][: cell.n])
        sc = ctx.score(unit, out.texts)
        kw["similarity"] = np.array(out.similarity, dtype=np.float64)
        extras["similarity"] = kw["similarity"]
        extras["edit_fraction"] = np.array(out.edit_fraction, dtype=np.float64)
    elif cell.kind == "spoof" and cell.attack != "steal-spoof":  # a text spoofer forges human passages
        train, ref = stolen_texts(ctx, unit, cell.train_n)
        atk = ctx.attack(unit.backend, cell.attack, cell.attack_params, watermarked_texts=train, reference_texts=ref)
        out = atk.apply(human_passages(ctx)[: cell.n], cell.strength, gen)
        sc = ctx.score(unit, out.texts)
        extras["edit_fraction"] = np.array(out.edit_fraction, dtype=np.float64)
        if ctx.cfg.stealing.unrelated_keys:
            extras["unrelated_flagged"] = unrelated_rate(ctx, unit, sc.ids)
    elif cell.kind == "spoof":
        st = stealer(ctx, unit, cell.train_n)
        prompts = ctx.prompts(unit.prompt_set)["null_fpr"][: cell.n]  # prompts the watermark never saw
        out = st.spoof(ctx.backend(unit.backend), prompts, gen, delta=cell.strength,
                       sampler_config=ctx.sampler_config(unit.backend, unit.length, unit.regime))
        sc = ctx.score(unit, out.texts)
        if ctx.cfg.stealing.unrelated_keys:
            extras["unrelated_flagged"] = unrelated_rate(ctx, unit, sc.ids)
    else:
        raise ConfigError(f"unknown cell kind {cell.kind!r}")
    data = CellData(kind=cell.kind, attack=cell.attack, strength=cell.strength, scores=sc.scores, p_values=sc.p_values,
                    n_tokens=sc.n_tokens, analytic=sc.analytic, null_cal=ud["cal"].scores, null_fpr=ud["fpr"].scores,
                    null_fpr_analytic=ud["fpr"].analytic, train_n=cell.train_n, token_ids=sc.ids,
                    null_cal_tokens=ud["cal"].n_tokens, null_fpr_tokens=ud["fpr"].n_tokens, **kw)
    return data, sc, extras


def run_cell(ctx: RunContext, cell: Cell) -> list[dict[str, Any]]:
    """All rows of one cell: text rows, null rows (clean cells) and one summary row per applicable metric."""
    t0 = time.perf_counter()
    unit = cell.unit
    ud = ctx.unit_data(unit) if cell.kind not in THEORY_KINDS else None
    data, sc, extras = _cell_data(ctx, cell, ud)
    be = ctx.backend(unit.backend)
    head = {
        "run": ctx.cfg.name, "cell_hash": cell.hash, "cell_kind": cell.kind, "scheme": unit.scheme,
        "scheme_name": unit.scheme_name, "scheme_params": unit.scheme_params,
        "scheme_version": unit.scheme_version, "scheme_params_resolved": ctx.resolved_params(unit), "curve": unit.curve or unit.scheme,
        "regime": ctx.cfg.regime_list[unit.regime].name, "regime_index": unit.regime, "knob": ctx.knob(unit)[0], "knob_value": ctx.knob(unit)[1],
        "default_strength": ctx.knob(unit)[2], "knob_stronger": ctx.knob(unit)[3], "tokens_step": ctx.cfg.tokens_step,
        "min_tokens": int(getattr(ctx.scheme(unit), "min_tokens", 1)) if cell.kind not in THEORY_KINDS else None, "backend": ctx.cfg.backends[unit.backend].name,
        "model_id": str(getattr(be, "model_id", "")), "length": unit.length,
        "prompt_set": ctx.cfg.prompt_sets[unit.prompt_set].name, "key_index": unit.key,
        "key_fingerprint": ctx.key(unit.key).fingerprint, "attack": cell.attack, "attack_family": attack_family(cell.attack),
        "attack_params": cell.attack_params, "strength": cell.strength, "train_n": cell.train_n, "seed": ctx.cfg.seed,
        "package_version": __version__, "git_commit": ctx.commit,
    }
    rows: list[dict[str, Any]] = []

    def text_rows(row_type: str, s: Scored, ex: dict[str, Any]) -> None:
        for i in range(len(s.scores)):
            r = {"row_type": row_type, "text_index": i, "n_tokens": int(s.n_tokens[i]), "score": float(s.scores[i]),
                 "p_value": float(s.p_values[i])}
            for k, v in ex.items():
                r[k] = None if v is None else float(v[i])
            rows.append(r)

    if cell.kind in ("clean", "attack", "scrub", "spoof") and len(sc.scores):
        flags, _ = decisions(data, sc.scores, 0.01, sc.analytic[0.01], sc.n_tokens)  # the one rule, per length bin
        extras["detected"] = None if flags is None else flags.astype(np.float64)
    text_rows("text", sc, extras)
    if cell.kind == "clean" and ud is not None:
        text_rows("null_cal", ud["cal"], {})
        text_rows("null_fpr", ud["fpr"], {"ppl": data.null_ppl})
        for row_type, values in (("diversity", data.diversity), ("null_diversity", data.null_diversity)):
            repeats = data.extra.get(row_type)  # (m, 2) or None
            for i, v in enumerate(values if values is not None else []):
                rows.append({"row_type": row_type, "text_index": i, "diversity": float(v),
                             **({"distinct_texts": float(repeats[i, 0]), "first_token_match": float(repeats[i, 1])}
                                if repeats is not None else {})})
    for m in ctx.metrics:
        if cell.kind not in m.kinds:
            continue
        v = m.compute(data)
        if v is None:
            continue
        rows.append({"row_type": "summary", "metric": m.name, "value": float(v.value), "unit": m.unit,
                     "higher_is_better": m.higher_is_better, "task": m.task, "deterministic": m.deterministic,
                     "n": int(v.n), "note": v.note})
    wall = time.perf_counter() - t0
    cols = ["row_type", "text_index", "n_tokens", "score", "p_value", "detected", "tokens_to_detect", "ppl", "kl",
            "kl_sampled", "diversity", "distinct_texts", "first_token_match", "similarity", "edit_fraction", "unrelated_flagged", "metric", "value", "unit", "higher_is_better", "task", "deterministic", "n", "note"]
    return [{**head, "row_index": j, **{c: r.get(c) for c in cols}, "wall_time_s": wall} for j, r in enumerate(rows)]


def run_unit(ctx: RunContext, cells: Sequence[Cell]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(cell hash, rows) for each cell, in order, sharing the unit's texts through ``ctx``."""
    for cell in cells:
        yield cell.hash, run_cell(ctx, cell)


def _ray_unit(cfg_json: str, cells: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Ray task body: a fresh context (installed plugins) runs one unit's cells."""
    cfg = BenchConfig.model_validate_json(cfg_json)
    ctx = RunContext(cfg)
    cs = [Cell(**{**c, "unit": Unit(**c["unit"])}) for c in cells]
    return list(run_unit(ctx, cs))


def _require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--executor ray needs Ray: pip install 'sketchwm[ray]' (or pip install ray)") from None
    return ray


def _record_config(out: Path, text: str) -> Path:
    """Write the grid's configuration into the results folder without touching an existing file.

    ``config.json`` holds the first grid run into ``out``; a different grid run into the same folder
    (cells are keyed by their own hash, so grids can share a folder) is kept as
    ``config-<sha256[:16]>.json``. Written atomically; an identical file is left as it is.
    """
    import hashlib

    from ..io import atomic_write

    first = out / "config.json"
    path = first
    if first.exists() and first.read_text() != text:
        path = out / f"config-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists() or path.read_text() != text:
        with atomic_write(path) as fh:
            fh.write(text)
    return path


def run_bench(cfg: BenchConfig, out: str | Path, *, registry: Any = None, executor: str = "local",
              progress: bool | None = None) -> dict[str, int]:
    """Run the grid into ``out`` (parts under ``out/parts``); finished cells of an earlier run are skipped.

    Args:
        cfg: validated config; out: results folder; registry: plugins (default installed + built-in metrics);
        executor: ``local`` or ``ray``; progress: tqdm bar (default: only when stderr is a terminal).

    Returns:
        ``{"cells": total, "skipped": already done, "ran": newly written}``.

    Raises:
        ConfigError: unknown executor, Ray missing. RegistryError: unknown component names.
    """
    from tqdm.auto import tqdm

    out = Path(out)
    registry = bench_registry(registry)
    units = plan(cfg, registry)  # bad names and params fail here, before anything is written
    out.mkdir(parents=True, exist_ok=True)
    _record_config(out, cfg.model_dump_json(indent=2))
    remove_stale_parts(out)  # temporary parts of a run killed mid-write
    done = done_cells(out)
    todo = [(u, [c for c in cells if c.hash not in done]) for u, cells in units]
    todo = [(u, cs) for u, cs in todo if cs]
    total = sum(len(cs) for _, cs in units)
    n_todo = sum(len(cs) for _, cs in todo)
    show = sys.stderr.isatty() if progress is None else progress
    bar = tqdm(total=n_todo, unit="cell", desc=f"bench {cfg.name}", disable=not show, dynamic_ncols=True)
    try:
        if executor == "local":
            ctx = RunContext(cfg, registry)
            for _, cells in todo:
                for h, rows in run_unit(ctx, cells):
                    write_part(out, h, rows)
                    bar.update(1)
        elif executor == "ray":
            ray = _require_ray()
            if not ray.is_initialized():
                ray.init(log_to_driver=False)
            task = ray.remote(_ray_unit)
            cfg_json = cfg.model_dump_json()
            pending = [task.remote(cfg_json, [asdict(c) for c in cells]) for _, cells in todo]
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for h, rows in ray.get(ready[0]):
                    write_part(out, h, rows)
                    bar.update(1)
        else:
            raise ConfigError(f"unknown executor {executor!r} (choose local or ray)")
    finally:
        bar.close()
    return {"cells": total, "skipped": total - n_todo, "ran": n_todo}
