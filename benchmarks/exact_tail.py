"""Exact tails: the default detector's printed p-value against the exact law of its statistic.

Under the background null of the default ``global-sketch`` (each kept token present independently
with q_v(n) = 1 − (1 − π_v)^n for a text of n tokens; ``plugins/sketchwm_builtin/global_sketch/null.py``,
module doc) the statistic is T = Σ_v c_k(v) x_v with integer weights c_k(v). This script computes
the law of T by a direct dynamic programme — T is convolved in, one group of tokens with equal
(c, π) at a time, each group a scaled binomial; plain positive sums, so every probability keeps its
relative precision far into the tail (mass below 1e-70 at the ends is dropped and the dropped total
printed) — independently of the FFT the detector uses. For each key and length it prints, at
α = 1e-4, 1e-6, 1e-8, the exact probability that the printed p-value is ≤ α, divided by α:

* ``printed``: the detector's p-value (default β = ``null_margin``), which must be ≤ 1.05;
* ``beta=0``: the same at β = 0, where the printed p-value is the law's own tail (so ≈ 1 or below);
* ``normal``: what 1 − Φ(z − β) would give (the normal approximation, for comparison).

Usage:  python benchmarks/exact_tail.py [--keys 5] [--lengths 16 32 64]
Default: the default model's vocabulary and packaged token prior. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

ALPHAS = (1e-4, 1e-6, 1e-8)


def exact_law(weights: np.ndarray, log1m_pi: np.ndarray, n: int, floor: float = 1e-70) -> tuple[int, np.ndarray, float]:
    """The law of T = Σ_v w_v B_v, B_v ~ Bernoulli(1 − (1 − π_v)^n) independent, by direct convolution.

    Args:
        weights: (V,) integer weights (0: the token does not count).
        log1m_pi: (V,) float64 log(1 − π_v).
        n: text length.
        floor: entries below this at either end are dropped after each step.

    Returns:
        (lo, pmf, dropped): pmf[j] = P(T = lo + j) (float64, positive sums only), and the total mass dropped.
    """
    from scipy import stats

    w = np.asarray(weights, dtype=np.int64)
    use = w != 0
    key = np.stack([w[use], np.asarray(log1m_pi, dtype=np.float64)[use].view(np.int64)], 1)
    groups, counts = np.unique(key, axis=0, return_counts=True)
    lo, pmf, dropped = 0, np.ones(1), 0.0
    for (g, l1m_bits), m in zip(groups.tolist(), counts.tolist()):
        q = -np.expm1(n * np.array([l1m_bits], dtype=np.int64).view(np.float64)[0])
        k = np.arange(m + 1)
        b = stats.binom.pmf(k, m, q)  # (m + 1,) counts present in this group
        keep = b >= floor * b.max()
        k, b = k[keep], b[keep]
        dropped += float(stats.binom.pmf(np.arange(m + 1), m, q)[~keep].sum()) if (~keep).any() else 0.0
        kernel = np.zeros(abs(g) * (k[-1] - k[0]) + 1)
        kernel[abs(g) * (k - k[0])] = b
        if g < 0:
            kernel = kernel[::-1]
            lo += g * int(k[-1])
        else:
            lo += g * int(k[0])
        pmf = np.convolve(pmf, kernel)
        nz = np.nonzero(pmf >= floor)[0]
        dropped += float(pmf[: nz[0]].sum() + pmf[nz[-1] + 1:].sum())
        lo += int(nz[0])
        pmf = pmf[nz[0]: nz[-1] + 1]
    return lo, pmf, dropped


def check_scheme(scheme, n: int) -> dict:
    """Ratios P_exact(p ≤ α)/α of a background-null global-sketch scheme at length ``n`` (see module doc)."""
    import torch
    from scipy import stats

    c = scheme.token_weights().cpu().numpy()
    lo, pmf, dropped = exact_law(np.round(c).astype(np.int64), scheme._log1m_pi.cpu().numpy(), n)
    T = (lo + np.arange(pmf.size)).astype(np.float64)
    mu, var = (float(t[0]) for t in scheme.background_moments(torch.tensor([n])))
    lengths = np.full(T.size, n, dtype=np.int64)
    beta = scheme.params.null_margin
    printed = scheme.background_pvalue(T, lengths, np.full(T.size, var))
    z = (T - mu) / np.sqrt(var)
    normal = stats.norm.sf(z - beta)
    saved = scheme.params
    scheme.params = saved.model_copy(update={"null_margin": 0.0})
    try:
        flat = scheme.background_pvalue(T, lengths, np.full(T.size, var))
    finally:
        scheme.params = saved
    row = {"n": n, "dropped": dropped}
    for name, p in (("printed", printed), ("beta=0", flat), ("normal", normal)):
        row[name] = [float(pmf[p <= a].sum() / a) for a in ALPHAS]
    return row


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=5)
    ap.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64])
    ap.add_argument("--seed", type=int, default=0, help="keys are the harness's keys of key seed SEED (sketchwm.bench.seeds.bench_key)")
    args = ap.parse_args(argv)
    from sketchwm.data import load_token_counts
    from sketchwm.bench.seeds import bench_key
    from sketchwm.registry import get_registry

    t0 = time.perf_counter()
    V = int(np.asarray(load_token_counts("default-train")).size)
    reg = get_registry()
    rows = []
    print(f"{'key':>3s} {'n':>3s}  {'P(p<=a)/a  printed (beta=0.5)':>32s}  {'beta=0':>24s}  {'normal 1-Phi(z-beta)':>24s}"
          f"  dropped")
    print(f"{'':>3s} {'':>3s}  {'a=1e-4  1e-6  1e-8':>32s}  {'1e-4  1e-6  1e-8':>24s}  {'1e-4  1e-6  1e-8':>24s}")
    for i in range(args.keys):
        key = bench_key(str(args.seed), "key", i)
        scheme = reg.create("scheme", "global-sketch", {}, key, V)
        for n in args.lengths:
            r = check_scheme(scheme, n)
            r["key"] = i
            rows.append(r)
            f = lambda v: "  ".join(f"{x:5.3f}" if x < 10 else f"{x:5.1f}" for x in v)  # noqa: E731
            print(f"{i:3d} {n:3d}  {f(r['printed']):>32s}  {f(r['beta=0']):>24s}  {f(r['normal']):>24s}  {r['dropped']:.1e}")
    worst = max(max(r["printed"]) for r in rows)
    worst0 = max(max(r["beta=0"]) for r in rows)
    print(f"worst printed ratio {worst:.4f} (must be <= 1.05); at beta=0 {worst0:.4f}; "
          f"normal approximation up to {max(max(r['normal']) for r in rows):.1f}")
    out = {"keys": args.keys, "lengths": args.lengths, "alphas": ALPHAS, "worst_printed": worst, "worst_beta0": worst0,
           "rows": rows, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
