"""How much detection each tilting scheme buys per nat of distortion: z² per unit of 2n·KL.

The ceiling (first order in the tilt). A scheme that tilts the marginal p_i of every sampled row to
p̃_i and is read by a per-token statistic s (the sketch's c_k(v) = ⟨u_k, φ_k(v)⟩, a green-list
indicator) moves the statistic's mean at row i by E_p̃[s] − E_p[s] ≤ √(2·KL(p̃_i‖p_i)·Var_{p_i}(s))
(Donsker–Varadhan with the cumulant generating function to second order, i.e. Cauchy–Schwarz on the
tilt). Summed over n rows and divided by the detector's null standard deviation σ₀√n, Cauchy–Schwarz
over the rows gives

    z ≤ √(2·n·KL̄·ρ̄),    ρ̄ = mean_i Var_{p_i}(s)/σ₀²,    KL̄ = mean_i KL(p̃_i‖p_i),

with equality for the exponential tilt along s at one strength for every row (eq. 7 is that tilt for
the count sketch). ρ̄ is how much of the statistic's null variance the model leaves free where the
tokens are drawn: ≈ 1 for a flat marginal, → 0 where the model is sure or where it only puts mass on
tokens the statistic does not read (the sketch's excluded frequent tokens). So the efficiency

    E = z_shift² / (2·n·KL̄)        (z_shift = median z of watermarked texts − median z of null texts)

is at most ρ̄, and a TPR of 0.9 at a 1% FPR (a shift of z_.99 + z_.9 = 3.61 null standard deviations,
Gaussian null, exact threshold) needs KL̄ ≥ 3.61² / (2·n·E) nats/token. This script prints E and that
KL for every swept point of a run folder (z from each text's p-value, z = Φ⁻¹(1 − p), p clipped at
1e-300 and 1 − 1e-12, so every scheme is on one scale; a point whose null texts have a median
p-value of 1 — a Bonferroni combination's — has no median z and reads n/a), and with ``--measure`` it also measures ρ̄ of the sketch's
statistic on the default model while it embeds, to say whether a scheme loses in its tilt (E < ρ̄) or
in what its statistic can read (ρ̄ small). It also prints the null texts' spread in z (robust sd):
E is in the background null's units, and a calibrated threshold sees the null's own spread.

    python benchmarks/tilt_efficiency.py /work/runs/frontier-128
    python benchmarks/tilt_efficiency.py --measure --regimes mdlm-random-t1 llada-blocks-t0.5 --n 16

Only the figures the harness recorded are read (one results schema); ``--measure`` generates its own
texts from the shipped ``human`` passages (the development split, disjoint from the ``prompts`` set
the leaderboard reports on).
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from sketchwm.observers import TiltObserver

Z_TPR90_FPR1 = 2.3263478740408408 + 1.2815515655446004  # z_.99 + z_.9
Z_FLOOR = -7.0  # z of p = 1 − 1e-12, the clip: a median at the floor is a median p-value of 1


def efficiency(z_wm: np.ndarray, z_null: np.ndarray, n_tokens: float, kl: float) -> tuple[float, float]:
    """(E, KL needed for TPR 0.9 at 1% FPR) of one swept point.

    Args:
        z_wm, z_null: (m,), (k,) float64 z of watermarked and null texts (Φ⁻¹(1 − p)).
        n_tokens: text length n in tokens. kl: mean KL/token of the point (nats).

    Returns:
        E = (median z_wm − median z_null)² / (2·n·KL) (dimensionless; NaN when KL ≤ 0, the shift is
        not positive, or the null's median z is at the clip's floor, i.e. its median p-value is 1)
        and 3.61² / (2·n·E) in nats/token (inf when E is NaN).
    """
    shift = float(np.median(z_wm) - np.median(z_null))
    if not (kl > 0 and shift > 0 and n_tokens > 0) or np.median(z_null) < Z_FLOOR:
        return float("nan"), float("inf")
    e = shift * shift / (2.0 * n_tokens * kl)
    return e, Z_TPR90_FPR1 ** 2 / (2.0 * n_tokens * e)


def efficiency_interval(z_wm: np.ndarray, z_null: np.ndarray, n_tokens: float, kl: float,
                        seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of E (:func:`efficiency`), the two samples resampled
    independently (``scipy.stats.bootstrap``, 2,000 resamples); (NaN, NaN) where it is undefined."""
    from scipy.stats import bootstrap

    if not (kl > 0 and n_tokens > 0) or len(z_wm) < 2 or len(z_null) < 2 or np.median(z_null) < Z_FLOOR:
        return float("nan"), float("nan")

    def stat(a, b, axis=-1):
        shift = np.median(a, axis=axis) - np.median(b, axis=axis)
        return np.maximum(shift, 0.0) ** 2 / (2.0 * n_tokens * kl)

    res = bootstrap((z_wm, z_null), stat, paired=False, n_resamples=2000, method="percentile",
                    random_state=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _robust_sd(z: np.ndarray) -> float:
    """Standard deviation of z read from its interquartile range (IQR / 1.349): the null texts' spread in
    the detector's z units (1 where the background null's variance fits the text source)."""
    q1, q3 = np.percentile(z, [25, 75])
    return float((q3 - q1) / 1.3489795003921634)


def _kl_fmt(kl: float) -> str:
    """A needed KL/token for printing: beyond 10 nats/token (no shift to speak of) it reads ``> 10``."""
    return f"{kl:.3f}" if kl <= 10 else "> 10"


def _z(p: np.ndarray) -> np.ndarray:
    from scipy.stats import norm

    return norm.isf(np.clip(np.nan_to_num(p, nan=1.0), 1e-300, 1.0 - 1e-12))


def from_results(folders: list[str], max_kl: float) -> None:
    """Print E and the KL for TPR 0.9 of every swept point with KL ≤ ``max_kl`` in the run folders."""
    import pandas as pd

    from sketchwm.bench.matched import curves
    from sketchwm.bench.results import read_results

    df = pd.concat([read_results(f) for f in folders], ignore_index=True)
    clean = df[df["cell_kind"] == "clean"]
    for regime in dict.fromkeys(c.regime for c in curves(df)):
        rc = [c for c in curves(df) if c.regime == regime]
        print(f"\n## {regime} (KL axis: {rc[0].kl_axis})")
        print("point | KL/token | n | z shift (median wm − median null) | E [95% CI] | KL for TPR 0.9 @ 1% FPR")
        for c in rc:
            num = den = 0.0
            for p in c.points:
                kl = p.get("kl")
                if not kl.ok or kl.mean <= 1e-9 or kl.mean > max_kl:
                    continue
                g = clean[(clean["regime"] == regime) & (clean["scheme"] == p.label)]
                wm = g[g["row_type"] == "text"]
                null = g[g["row_type"] == "null_cal"]
                if wm.empty or null.empty:
                    continue
                n = float(pd.to_numeric(wm["n_tokens"]).median())
                zw, zn = _z(wm["p_value"].to_numpy(np.float64)), _z(null["p_value"].to_numpy(np.float64))
                e, need = efficiency(zw, zn, n, kl.mean)
                lo, hi = efficiency_interval(zw, zn, n, kl.mean)
                shift = float(np.median(zw) - np.median(zn))
                if np.median(zn) >= Z_FLOOR:  # a null at the floor has no median z: not pooled
                    num, den = num + max(shift, 0.0) ** 2, den + 2.0 * n * kl.mean
                print(f"  {p.label} | {kl.mean:.4f} | {n:.0f} | {shift:.2f} | "
                      f"{'n/a' if math.isnan(e) else f'{e:.3f} [{lo:.3f}, {hi:.3f}]'} | {_kl_fmt(need)}")
            if den > 0 and num > 0:  # pooled over the curve's points: Σ shift² / Σ 2nKL
                e = num / den
                print(f"  = {c.name} pooled | | | | {e:.3f} | {_kl_fmt(Z_TPR90_FPR1 ** 2 / (2.0 * n * e))}")


class RhoRecorder(TiltObserver):
    """Sampler observer: at every sampled row, ρ = Var_p(c)/σ₀² (``rho``) and KL(p̃‖p) (``kl``) of the
    distributions the token is drawn from (after the step's temperature); lists of (M,) float64 tensors.

    Args:
        c: (V,) float64 token weights of the detector; var0: σ₀², the null's variance of T per token.
    """

    def __init__(self, c, var0: float):
        self.c, self.var0, self.rho, self.kl = c, var0, [], []

    def on_tilt(self, step, before, after, uniforms):
        import torch

        from sketchwm.bench.recorders import kl_rows

        rows = step.marginals.target_valid
        T = getattr(step, "temperature", None)
        t = T if T is not None and T > 0 else 1.0
        p = torch.softmax(before[rows].double() / t, -1)  # (M, V)
        cv = self.c[: p.shape[1]]
        self.rho.append(((p @ cv ** 2 - (p @ cv) ** 2) / self.var0).cpu())  # Var_p(c_k) / σ₀² per row
        self.kl.append(kl_rows(before[rows] / t, after[rows] / t).cpu())


def measure(regimes: list[str], n: int, length: int, deltas: list[float], params: dict | None = None,
            seed: int = 0, key_seed: int | None = None) -> None:
    """Generate with ``global-sketch`` at each δ in each regime and print ρ̄ of its statistic beside E.

    ``params``: other ``global-sketch`` params (embedding and detector: the detector is the scheme with
    these params at its default δ, whose statistic is what ρ̄ reads). ``seed``: the run seed (the key
    and the order of the development prompts; another seed is an independent replicate); ``key_seed``:
    the key of that seed instead (None: ``seed``'s), so that keys and prompts can be varied apart.

    ρ_i = Var_{p_i}(c_k)/σ₀² at every sampled row, p_i the distribution the token is drawn from (after
    the sampler's temperature), c_k the token weights of the detector (0 on excluded tokens), σ₀² the
    background null's variance of T per token at this length (:meth:`GlobalSketchScheme.background_moments`).
    """
    import torch

    from sketchwm.api import Watermarker
    from sketchwm.bench.config import BenchConfig
    from sketchwm.bench.inputs import Models, PromptBank
    from sketchwm.bench.plan import bench_registry, derive_key

    cfg = BenchConfig.model_validate({
        "name": "tilt-efficiency", "backends": [{"name": "default"}], "regimes": regimes,
        "schemes": [{"name": "global-sketch"}], "lengths": [length], "keys": 1, "n_null_cal": n,
        "n_null_fpr": 1, "oracle": False, "similarity": False, "tokens_step": 0, "batch_size": n,
        "prompt_sets": [{"name": "dev", "source": "human", "n": n, "words": 20}], "seed": seed,
        **({"key_seed": f"tilt-efficiency/{ks}"} if (ks := seed if key_seed is None else key_seed) else {})})
    prompts = PromptBank(cfg)
    models = Models(cfg, bench_registry(), prompts)
    be, key = models.backend(0), derive_key(cfg, 0)
    print(f"\n## measured while embedding: {n} texts x {length} tokens per point, `human` development prompts")
    print("regime | delta | KL/token (sampled) | rho-bar | E [95% CI] | E / rho-bar | KL for TPR 0.9 at E | at E = rho-bar"
          " | null z sd")
    for r, reg in enumerate(cfg.regime_list):
        null = models.null_texts(0, length, 0, "null_cal", r)
        for delta in deltas:
            scheme = Watermarker(key, {"scheme": {"name": "global-sketch", "params": {**(params or {}), "delta": delta}}},
                                 backend=be).scheme
            c = scheme.token_weights().double()  # (V,), 0 on excluded tokens
            var0 = float(scheme.background_moments(torch.tensor([length]))[1][0]) / length
            rec = RhoRecorder(c, var0)
            texts, _ = models.generate(0, length, prompts.split(0)["eval"], scheme, 1234, regime=r, observers=[rec])
            rho, kls = rec.rho, rec.kl
            s0 = Watermarker(key, {"scheme": {"name": "global-sketch", "params": params or {}}}, backend=be).scheme
            zw = _z(p_values(s0, be, texts))
            zn = _z(p_values(s0, be, null))
            kl = float(torch.cat(kls).mean())
            rb = float(torch.cat(rho).mean())
            e, need = efficiency(zw, zn, length, kl)
            lo, hi = efficiency_interval(zw, zn, length, kl)
            ideal = Z_TPR90_FPR1 ** 2 / (2.0 * length * rb) if rb > 0 else float("inf")
            print(f"  {reg.name} | {delta:g} | {kl:.4f} | {rb:.3f} | {e:.3f} [{lo:.3f}, {hi:.3f}] | {e / rb:.2f} | "
                  f"{_kl_fmt(need)} | {_kl_fmt(ideal)} | {_robust_sd(zn):.2f}", flush=True)


def p_values(scheme, be, texts: list[str]) -> np.ndarray:
    """p-values (m,) float64 of ``texts`` under ``scheme`` (empty texts: 1)."""
    from sketchwm.detection import pad_ids

    ids = be.encode(texts)
    x, valid = pad_ids(ids)
    return scheme.score_ids(x, valid).p_value.double().cpu().numpy()


def main(argv: list[str] | None = None) -> None:
    """Command line: run folders to read, and/or ``--measure``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", help="results folder(s) of `sketchwm bench run` (pooled)")
    ap.add_argument("--max-kl", type=float, default=0.35, help="points above this KL/token are left out (first order)")
    ap.add_argument("--measure", action="store_true", help="measure rho-bar of global-sketch while embedding")
    ap.add_argument("--regimes", nargs="+", default=["mdlm-random-t1", "llada-blocks-t0.5"])
    ap.add_argument("--n", type=int, default=16, help="texts per point (and null texts) with --measure")
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--deltas", type=float, nargs="+", default=[0.3, 0.5])
    ap.add_argument("--seed", type=int, default=0, help="run seed with --measure (key and prompt order)")
    ap.add_argument("--key-seed", type=int, default=None, help="the key of this seed instead of --seed's")
    ap.add_argument("--params", type=json.loads, default=None,
                    help="JSON of other global-sketch params (embedding and detector), e.g. '{\"objective\": \"statistic\"}'")
    args = ap.parse_args(argv)
    if args.results:
        from_results(args.results, args.max_kl)
    if args.measure:
        measure(args.regimes, args.n, args.length, args.deltas, args.params, args.seed, args.key_seed)
    if not args.results and not args.measure:
        ap.error("give a results folder, --measure, or both")


if __name__ == "__main__":
    main()
