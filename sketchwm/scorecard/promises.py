"""The promises of the scorecard, one function each, every one returning :class:`~sketchwm.scorecard.lines.Line` s.

Each reads a :class:`Run` (the run's prompts, models and keyed schemes, its default units and the benchmark
cells' result rows) and states its rule:

* :func:`forgery` — spoof rate of each thief at each N (flagged by the one decision rule at 1% FPR under
  the victim key; Clopper-Pearson interval over forged texts): ≤ 5% with upper bound ≤ 10% for the word,
  pair and generation thieves; the adaptive thief's rate reported; unrelated keys flag ≤ 1% (Jovanović
  et al. 2024, "Watermark Stealing in Large Language Models").
* :func:`diversity` — for one key, S seeds × P prompts per regime: distinct texts per prompt ≥
  unwatermarked − 0.25; first-token match rate across seeds ≤ unwatermarked + 0.05; pairwise self-BLEU
  (nltk, smoothing method 1) ≤ unwatermarked + 0.02; differences paired by prompt, 95% bootstrap over prompts.
* :func:`power` — TPR at 1% FPR at equal KL (0.1, 0.2 nats/token; :func:`sketchwm.bench.matched.at_kl`) ≥
  the lower bound of the best baseline that passes its own diversity line. A budget outside a sweep is read
  off the nearest setting only where that errs against the scheme (:func:`at_kl_conservative`).
* :func:`robustness` — after each standard edit, TPR at each KL budget of the power line ≥ red-green-dlm's at
  that KL (both read the same way).
* :func:`null` — worst of K keys' false-flag rate at p ≤ .01 (≤ 2%) and p ≤ .05 (≤ 7%) on each human domain.
* :func:`speed` — generation time watermarked / unwatermarked ≤ 1.2 per regime (interleaved, side by side);
  detection ≥ 5×10^7 tokens/s on token ids.
* :func:`user_loop` — :class:`sketchwm.userloop.LogitsTilter` in a LLaDA-style loop at T = 1: TPR at p ≤ .01 ≥ 0.95.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..bench.inputs import Models, PromptBank, Schemes
from ..bench.matched import Estimate, at_kl, curves, estimate
from ..bench.perf import interleaved
from ..bench.seeds import derive_seed
from .config import ROBUSTNESS_EDITS, ScorecardConfig
from .lines import Line, clopper_pearson

__all__ = ["Run", "forgery", "diversity", "power", "robustness", "null", "speed", "user_loop", "THIEF_NAMES", "zipf_ids"]

#: Printed names of the thieves (registered attack → promise text); the adaptive thief is not gated.
THIEF_NAMES: dict[str, str] = {
    "spoof-insert": "word thief, paste-in", "spoof-substitute": "word thief, substitution",
    "spoof-pair-insert": "pair thief, paste-in", "spoof-pair-substitute": "pair thief, substitution",
    "steal-spoof": "generation spoofer", "spoof-adaptive": "adaptive thief",
}


@dataclass
class Run:
    """What the promises read: the scorecard config, the benchmark run's services, its default units and
    the result rows. The promises use the run's backend 0, prompt set 0 and key 0.

    Attributes:
        cfg: the :class:`ScorecardConfig`.
        prompts: the benchmark run's :class:`sketchwm.bench.inputs.PromptBank`; models: its
            :class:`sketchwm.bench.inputs.Models`; schemes: its :class:`sketchwm.bench.inputs.Schemes`.
        regimes: the benchmark config's regime names, in index order.
        units: {(entry label, regime name): the entry's default-strength unit} (key 0).
        df: the result rows of the run's cells (:func:`sketchwm.bench.results.read_results`).
        diversity_pass: {(entry label, regime): whether the entry passes its diversity lines}.
    """

    cfg: ScorecardConfig
    prompts: PromptBank
    models: Models
    schemes: Schemes
    regimes: tuple[str, ...]
    units: dict[tuple[str, str], Any]
    df: pd.DataFrame
    diversity_pass: dict[tuple[str, str], bool] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The scheme under test's label."""
        return self.cfg.scheme_label()

    def regime_index(self, name: str) -> int:
        """The index of regime ``name`` in :attr:`regimes` (ValueError if absent)."""
        return self.regimes.index(name)


def _rate_line(promise: str, hits: np.ndarray, threshold: float, direction: str = "<=", gate: float = float("nan"),
               **detail: Any) -> Line:
    k, n = int(np.sum(hits)), int(len(hits))
    lo, hi = clopper_pearson(k, n)
    return Line(promise, k / n if n else float("nan"), lo, hi, n, threshold, direction, "rate", gate_on_interval=gate,
                detail={"count": k, **detail})


def _estimate_line(promise: str, e: Estimate, threshold: float, direction: str, unit: str = "", **detail: Any) -> Line:
    return Line(promise, e.mean, e.lo, e.hi, e.n, threshold, direction, unit, detail={"note": e.note, **detail})


# ---------------------------------------------------------------------------------------------- forgery
def forgery(run: Run) -> list[Line]:
    """Spoof-rate lines per thief and N, and the unrelated-key line (module doc)."""
    df = run.df
    rows = df[(df["row_type"] == "text") & (df["cell_kind"] == "spoof")]
    out: list[Line] = []
    unrelated: list[np.ndarray] = []
    for (attack, params, n_stolen), g in rows.groupby(["attack", "attack_params", "train_n"], sort=True):
        det = pd.to_numeric(g["detected"], errors="coerce").to_numpy()
        if np.isnan(det).any():  # no calibration: the scheme's own p-value at 1%
            det = (pd.to_numeric(g["p_value"], errors="coerce").to_numpy() <= 0.01).astype(float)
        name = THIEF_NAMES.get(attack, attack)
        p = json.loads(params) if isinstance(params, str) and params else {}
        if attack == "spoof-adaptive":
            name += f" ({p.get('clusters', 1)} clusters, {p.get('placement', 'insert')})"
            thr = float("nan")
        else:
            thr = 0.05
        out.append(_rate_line(f"forgery: {name}, N={int(n_stolen)}", det, thr, gate=0.10 if attack != "spoof-adaptive" else float("nan"),
                              attack=attack, train_n=int(n_stolen)))
        if "unrelated_flagged" in g:
            unrelated.append(pd.to_numeric(g["unrelated_flagged"], errors="coerce").dropna().to_numpy())
    J = run.cfg.tier.unrelated_keys
    if unrelated and J:
        frac = np.concatenate(unrelated)
        hits = np.round(frac * J).astype(int)
        k, n = int(hits.sum()), int(len(frac) * J)
        lo, hi = clopper_pearson(k, n)
        out.append(Line(f"forgery: unrelated keys flag forged texts ({J} keys)", k / n if n else float("nan"), lo, hi, n,
                        0.01, "<=", "rate", detail={"count": k, "texts": int(len(frac)), "keys": J}))
    return out


# ---------------------------------------------------------------------------------------------- diversity
def _self_bleu(samples: list[list[int]]) -> float:
    """Mean pairwise BLEU of each sample against each other one (nltk ``sentence_bleu``, smoothing method 1)."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    sm = SmoothingFunction().method1
    toks = [[str(t) for t in s] for s in samples]
    vals = [sentence_bleu([toks[j]], toks[i], smoothing_function=sm) for i in range(len(toks))
            for j in range(len(toks)) if i != j and toks[i] and toks[j]]
    return float(np.mean(vals)) if vals else 0.0


def diversity_measures(groups: list[list[list[int]]]) -> dict[str, np.ndarray]:
    """Per prompt (P,) float64: ``distinct`` texts among its samples (a count), ``first_token`` match rate over
    sample pairs (:func:`sketchwm.quality.sample_repeats`), ``self_bleu``; ``groups`` is a list over prompts of
    the samples' token ids."""
    from ..quality import sample_repeats

    distinct, first, bleu = [], [], []
    for s in groups:  # per prompt
        share, match = sample_repeats(s)
        distinct.append(share * len(s))
        first.append(0.0 if np.isnan(match) else match)
        bleu.append(_self_bleu(s))
    return {"distinct": np.array(distinct, float), "first_token": np.array(first, float), "self_bleu": np.array(bleu, float)}


#: (measure, printed name, allowed difference watermarked − unwatermarked, direction)
DIVERSITY_RULES = (("distinct", "distinct texts per prompt", -0.25, ">="),
                   ("first_token", "first-token match rate across seeds", 0.05, "<="),
                   ("self_bleu", "pairwise self-BLEU", 0.02, "<="))


def _samples(run: Run, unit: Any, regime: str, watermarked: bool) -> list[list[list[int]]]:
    """Token ids of the tier's diversity samples in ``regime``, watermarked under ``unit``'s scheme or not:
    a list over the first ``diversity_prompts`` eval prompts of lists over ``diversity_samples`` seeds."""
    t = run.cfg.tier
    prompts = run.prompts.split(0)["eval"][: t.diversity_prompts]
    rep = [p for p in prompts for _ in range(t.diversity_samples)]
    scheme = run.schemes.scheme(unit) if watermarked else None
    seed = derive_seed(run.cfg.seed, "scorecard-diversity", unit.scheme if watermarked else "none", regime)
    texts, _ = run.models.generate(0, t.length, rep, scheme, seed, regime=run.regime_index(regime))
    ids = run.models.backend(0).encode(texts)
    S = t.diversity_samples
    return [ids[i * S:(i + 1) * S] for i in range(len(prompts))]


def diversity(run: Run) -> list[Line]:
    """Diversity lines of the scheme and of each baseline (the baselines' only feed the power line's choice)."""
    out: list[Line] = []
    for regime in run.cfg.tier.regimes:
        null = diversity_measures(_samples(run, None, regime, False))
        for (label, reg), unit in run.units.items():
            if reg != regime:
                continue
            wm = diversity_measures(_samples(run, unit, regime, True))
            ok = True
            for m, name, allowed, direction in DIVERSITY_RULES:
                e = estimate(wm[m] - null[m])
                line = _estimate_line(f"diversity: {name} − unwatermarked, {regime} "
                                      f"({wm[m].mean():.2f} vs {null[m].mean():.2f})", e, allowed, direction,
                                      measure=m, watermarked=float(wm[m].mean()), unwatermarked=float(null[m].mean()),
                                      seeds=run.cfg.tier.diversity_samples, prompts=len(wm[m]))
                line.detail["subject"] = label
                ok = ok and (line.figure >= allowed if direction == ">=" else line.figure <= allowed)
                out.append(line)
            run.diversity_pass[(label, regime)] = ok
    return out


# ---------------------------------------------------------------------------------------------- power, robustness
def _curves(run: Run) -> dict[tuple[str, str], Any]:
    clean = run.df[run.df["cell_kind"].isin(["clean", "attack"])]
    return {(c.regime, c.name): c for c in curves(clean)} if len(clean) else {}


_NA = Estimate(float("nan"), float("nan"), float("nan"))


def at_kl_conservative(c: Any, stat: str, budget: float, side: str) -> Estimate:
    """``stat`` of curve ``c`` at KL ``budget`` (:func:`sketchwm.bench.matched.at_kl`), or, where the budget lies
    outside the swept KL range, the nearest setting's figure when that errs against the scheme under test
    (``side="scheme"``: a budget above the range reads the strongest setting, a lower bound of a figure that
    grows with strength; ``side="reference"``: a budget below the range reads the weakest setting, an upper
    bound); NA otherwise. The note says which (``below-budget:KL``, ``above-budget:KL``)."""
    if c is None:
        return _NA
    e = at_kl(c, stat, budget)
    if e.ok or not e.note.startswith("outside-sweep"):
        return e
    pts = [p for p in c.points if p.get("kl").ok and p.get(stat).ok]
    if not pts:
        return _NA
    lo_pt, hi_pt = min(pts, key=lambda p: p.get("kl").mean), max(pts, key=lambda p: p.get("kl").mean)
    if side == "scheme" and budget > hi_pt.get("kl").mean:
        x, note = hi_pt, "below-budget"
    elif side == "reference" and budget < lo_pt.get("kl").mean:
        x, note = lo_pt, "above-budget"
    else:
        return e
    f = x.get(stat)
    return Estimate(f.mean, f.lo, f.hi, f.key_sd, f.n, f"{note}:{x.get('kl').mean:.3g}")


def power(run: Run) -> list[Line]:
    """TPR at 1% FPR at equal KL against the best diverse baseline's lower bound (module doc)."""
    cs = _curves(run)
    out = []
    for regime in run.cfg.tier.power_regimes:
        mine = cs.get((regime, run.label))
        for b in run.cfg.tier.kl_budgets:
            e = at_kl_conservative(mine, "tpr", b, "scheme")
            best, best_name = None, ""
            for base in run.cfg.comparison():
                c = cs.get((regime, base.name))
                if c is None or not run.diversity_pass.get((base.name, regime), False):
                    continue
                eb = at_kl_conservative(c, "tpr", b, "reference")
                if eb.ok and (best is None or eb.mean > best.mean):
                    best, best_name = eb, base.name
            thr = best.lo if best is not None else float("nan")
            out.append(_estimate_line(f"power: TPR at 1% FPR, KL {b:g} nats/token, {regime}"
                                      + (f" (vs {best_name} {best.mean:.2f})" if best is not None else " (no diverse baseline)"),
                                      e, thr, ">=", baseline=best_name, baseline_tpr=None if best is None else best.mean))
    return out


def robustness(run: Run) -> list[Line]:
    """TPR after each standard edit at each KL budget of the power line, against red-green-dlm's at that KL, both
    read off their swept curves the way the power line reads them (module doc)."""
    if not run.cfg.tier.robustness:
        return []
    from ..bench.plan import attack_family

    cs = _curves(run)
    out = []
    for regime in run.cfg.tier.power_regimes:
        mine, rgd = cs.get((regime, run.label)), cs.get((regime, "red-green-dlm"))
        if mine is None:
            continue
        for b in run.cfg.tier.kl_budgets:
            for attack, strength in ROBUSTNESS_EDITS:
                stat = f"tpr:{attack_family(attack)}@{strength:g}"
                e = at_kl_conservative(mine, stat, b, "scheme")
                ref = at_kl_conservative(rgd, stat, b, "reference")
                out.append(_estimate_line(f"robustness: TPR after {attack} {strength:g}, KL {b:g} nats/token, {regime} "
                                          f"(vs red-green-dlm {'n/a' if not ref.ok else f'{ref.mean:.2f}'})", e,
                                          ref.mean if ref.ok else float("nan"), ">=", red_green_dlm=ref.mean if ref.ok else None,
                                          kl=b, note_ref=ref.note))
    return out


# ---------------------------------------------------------------------------------------------- null
def _human(run: Run, domain: str, n: int | None) -> list[str]:
    from ..data import load

    if domain == "tiny":  # 40-word strings of the tiny test model's words
        from ..testing.tiny import tiny_texts

        return tiny_texts(n or 200, 40, derive_seed(run.cfg.seed, "scorecard-null") % 2**31)
    texts = load(domain)
    return texts if n is None else texts[:n]


def null(run: Run) -> list[Line]:
    """Worst of K keys' false-flag rate at p ≤ .01 and .05 on each human domain (module doc)."""
    from ..detection import pad_ids

    t = run.cfg.tier
    unit = run.units[(run.label, t.regimes[0])]
    root = run.schemes.key(0)
    be = run.models.backend(0)
    batches = {}
    for domain in run.cfg.human:  # passages of at least 16 tokens, one padded batch per domain
        ids = [x for x in be.encode(_human(run, domain, t.null_texts)) if len(x) >= 16]
        batches[domain] = (len(ids), *pad_ids(ids))
    alphas = ((0.01, 0.02), (0.05, 0.07))
    counts = {(d, a): [] for d in batches for a, _ in alphas}  # per (domain, α): flagged texts per key
    for k in range(t.null_keys):  # per key: its scheme built once, every passage of every domain scored
        scheme = run.schemes.keyed(unit, root.subkey(f"scorecard/null-key/{k}"))
        for d, (_, x, valid) in batches.items():
            p = np.nan_to_num(scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy(), nan=1.0)
            for a, _ in alphas:
                counts[d, a].append(int((p <= a).sum()))
    out = []
    for d, (n, _, _) in batches.items():
        for a, bound in alphas:
            c = counts[d, a]
            worst = int(np.argmax(c))
            lo, hi = clopper_pearson(c[worst], n)
            out.append(Line(f"null: worst of {t.null_keys} keys, p <= {a:g}, {d}", c[worst] / n, lo, hi, n, bound, "<=", "rate",
                            detail={"per_key": [x / n for x in c], "mean": float(np.mean(c)) / n}))
    return out


# ---------------------------------------------------------------------------------------------- speed
def zipf_ids(n_tokens: int, vocab_size: int, length: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The detection workload: ⌈n_tokens/length⌉ texts of ``length`` token ids drawn from a Zipf law over
    the vocabulary (:func:`sketchwm.bench.perf.zipf_workload`). Returns ids (B, length) int64 and valid
    (B, length) bool (all True)."""
    from ..bench.perf import zipf_workload

    ids = zipf_workload(vocab_size, -(-n_tokens // length), length, seed)[1]
    return ids, torch.ones_like(ids, dtype=torch.bool)


def speed(run: Run) -> list[Line]:
    """Generation time ratio per regime and detection throughput of ``score_ids`` on :func:`zipf_ids` (module doc).
    The interval is the range over repeats, a spread, not a confidence interval: where the tier gates only on decisive lines the speed lines
    carry none and are INFO (timings follow the machine's load, which a regression guard must not)."""
    from ..detection import pad_ids

    t, models = run.cfg.tier, run.models
    prompts = run.prompts.split(0)["eval"][: t.speed_batch]
    spread = lambda x: (float("nan"),) * 2 if t.decisive_only else (float(np.min(x)), float(np.max(x)))  # noqa: E731
    out = []
    for regime in t.regimes:
        unit = run.units[(run.label, regime)]
        ri = run.regime_index(regime)
        seed = derive_seed(run.cfg.seed, "scorecard-speed", regime)
        fns = {"wm": lambda: models.generate(0, t.length, prompts, run.schemes.scheme(unit), seed, regime=ri),
               "plain": lambda: models.generate(0, t.length, prompts, None, seed, regime=ri)}
        tm = interleaved(fns, t.speed_repeats, models.backend(0).device)
        r = np.array(tm["wm"]) / np.array(tm["plain"])
        out.append(Line(f"speed: generation time watermarked / unwatermarked, {regime}",
                        float(np.median(tm["wm"]) / np.median(tm["plain"])), *spread(r), len(r), 1.2, "<=", "ratio",
                        detail={"seconds_wm": tm["wm"], "seconds_plain": tm["plain"], "texts": len(prompts)}))
    unit = run.units[(run.label, t.regimes[0])]
    scheme = run.schemes.scheme(unit)
    x, valid = zipf_ids(t.speed_tokens, scheme.vocab_size, seed=derive_seed(run.cfg.seed, "scorecard-speed-ids"))
    x, valid = x.to(scheme.device), valid.to(scheme.device)
    n_tok = int(valid.sum())
    secs = interleaved({"detect": lambda: scheme.score_ids(x, valid)}, max(3, t.speed_repeats), scheme.device)["detect"]
    tps = np.array([n_tok / s for s in secs])
    out.append(Line("speed: detection on token ids", float(np.median(tps)), *spread(tps), len(tps), 5e7, ">=", "tokens/s",
                    detail={"tokens_per_call": n_tok, "range": [float(tps.min()), float(tps.max())]}))
    return out


# ---------------------------------------------------------------------------------------------- user loop
@torch.no_grad()
def llada_loop(backend: Any, tilt: Any, prompts: list[str], gen_length: int, block_length: int, steps: int,
               temperature: float, generator: torch.Generator) -> list[list[int]]:
    """A LLaDA-style ``generate.py`` loop (Nie et al. 2025): blocks left to right, low-confidence remasking,
    Gumbel-max sampling at ``temperature``, ``tilt(logits, x, step=, block=)`` between the model and the sampler.

    Returns:
        the generated token ids of each prompt (the generation region, special tokens kept).
    """
    be = backend
    enc = be.encode_prompts(prompts)
    P = max(len(e) for e in enc)
    B, L = len(enc), P + gen_length
    pad = getattr(be.tokenizer, "pad_token_id", None)
    pad = be.mask_token_id if pad is None else int(pad)
    x = torch.full((B, L), be.mask_token_id, dtype=torch.long)
    attn = torch.ones((B, L), dtype=torch.bool)
    for b, e in enumerate(enc):  # left-pad each prompt
        x[b, :P - len(e)] = pad
        attn[b, :P - len(e)] = False
        x[b, P - len(e):P] = torch.as_tensor(e, dtype=torch.long)
    nb = max(1, gen_length // block_length)
    per_block = max(1, steps // nb)
    step = 0
    for blk in range(nb):
        b0, b1 = P + blk * block_length, P + min(gen_length, (blk + 1) * block_length)
        for s in range(per_block):
            masked = (x == be.mask_token_id)
            masked[:, :b0] = False
            masked[:, b1:] = False
            left = masked.sum(1)  # (B,)
            if int(left.max()) == 0:
                break
            k = torch.ceil(left.double() / (per_block - s)).long()  # (B,) tokens committed this step
            logits = tilt(be.logits(x.to(be.device), attn.to(be.device)).float().cpu(), x,
                          step=step, block=(b0 - P, b1 - P))  # (B, L, V)
            step += 1
            if temperature > 0:
                u = torch.rand(logits.shape, generator=generator, dtype=torch.float64).clamp_min(1e-20)
                x0 = (logits.double() / temperature - torch.log(-torch.log(u))).argmax(-1)  # (B, L)
            else:
                x0 = logits.argmax(-1)
            conf = torch.softmax(logits.double(), -1).gather(-1, x0[..., None])[..., 0]  # (B, L)
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            for r in range(B):  # per row: commit its k most confident masked positions
                if int(k[r]) > 0:
                    top = torch.topk(conf[r], int(k[r])).indices
                    x[r, top] = x0[r, top]
    return [x[b, P:].tolist() for b in range(B)]


def user_loop(run: Run) -> list[Line]:
    """TPR of the scheme in a user's LLaDA-style loop through :class:`LogitsTilter` at T = 1 (module doc)."""
    from ..detection import pad_ids
    from ..userloop import LogitsTilter

    t = run.cfg.tier
    unit = run.units[(run.label, t.regimes[-1])]
    scheme, be = run.schemes.scheme(unit), run.models.backend(0)
    block = 32 if t.length % 32 == 0 else t.length
    steps = max(t.length // block, t.steps // (t.length // block) * (t.length // block))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            tilt = LogitsTilter(scheme, be, steps=steps,  # the per-text draws (family members) seeded too
                                generator=torch.Generator().manual_seed(derive_seed(run.cfg.seed, "scorecard-userloop-draws") % 2**62))
    except Exception as exc:  # noqa: BLE001 - a scheme a hook cannot run: the line says so
        return [Line(f"user loop: LogitsTilter refuses the scheme ({type(exc).__name__})", float("nan"), n=0,
                     threshold=0.95, direction=">=", unit="rate", detail={"error": str(exc)})]
    prompts = run.prompts.split(0)["eval"][: t.userloop_n]
    g = torch.Generator().manual_seed(derive_seed(run.cfg.seed, "scorecard-userloop") % 2**62)
    ids: list[list[int]] = []
    for i in range(0, len(prompts), run.cfg.batch_size):
        tilt.reset()
        gen = llada_loop(be, tilt, prompts[i:i + run.cfg.batch_size], t.length, block, steps, 1.0, g)
        ids += be.encode([be.decode(x) for x in gen])
    x, valid = pad_ids(ids)
    p = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
    lines = [_rate_line("user loop: LogitsTilter in a LLaDA-style loop, T=1, TPR at p <= 0.01",
                        (np.nan_to_num(p, nan=1.0) <= 0.01).astype(float), 0.95, ">=", steps=steps, block=block)]
    # the engine in the same regime (blocks, low-confidence remasking, T = 1, same steps), on the same
    # prompts: what the regime allows, so the line above reads as the loop's cost or the regime's
    from ..engine import MaskedDiffusionSampler

    cfg = {**be.sampler_defaults, "gen_length": t.length, "block_length": block, "steps": steps,
           "remasking": "low_confidence", "temperature": 1.0, "top_p": 1.0}
    ge = torch.Generator().manual_seed(derive_seed(run.cfg.seed, "scorecard-userloop-engine") % 2**62)
    eng: list[list[int]] = []
    for i in range(0, len(prompts), run.cfg.batch_size):
        out = MaskedDiffusionSampler(be, cfg, scheme).generate(prompts[i:i + run.cfg.batch_size], ge)
        eng += out.token_lists()
    x, valid = pad_ids(eng)
    pe = scheme.score_ids(x.to(scheme.device), valid.to(scheme.device)).p_value.double().cpu().numpy()
    lines.append(_rate_line("user loop: the engine in the same regime (reference), TPR at p <= 0.01",
                            (np.nan_to_num(pe, nan=1.0) <= 0.01).astype(float), float("nan"), ">=",
                            steps=steps, block=block))
    return lines

