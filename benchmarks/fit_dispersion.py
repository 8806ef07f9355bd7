"""Fit the burstiness s of the capped background null (``global-sketch`` param ``null_dispersion``).

The capped statistic is T = Σ_v c_k(v)·Y_v, Y_v = min(C_v, k) for the kept tokens v of a text of n
tokens. Over random keys the weights c_k(v) are independent and symmetric, so the key-averaged
variance of T about the null mean is E[c²]·Σ_v E(Y_v − μ_v)². The binomial null
(C_v ~ Binomial(n, π_v)) gives Σ_v Var(Y_v) well below what human text shows (words recur); the
Beta-binomial null C_v ~ BB(n, π_v·s, (1 − π_v)·s) (the Pólya count model; Madsen, Kauchak & Elkan
2005) widens it as s falls. This script finds, per length n, the s at which the model's Σ_v Var(Y_v)
equals the empirical mean of Σ_v (Y_v − μ_v(s))² over the shipped ``human`` passages cut to n
tokens (the corpus split the token prior's β = 0.5 margin was also set on; the held-out domains
are not read), by root finding on log s in [40, 10^6] (scipy's ``brentq``; below about 40 the fitted mean drifts off the data and the ratio turns back up). It prints, per length, the variance
ratio empirical / model at the binomial null and at the fitted s, and recommends the smallest of the
per-length fits: the most dispersed, so the model is at least as wide as the data at every length
fitted.

    python benchmarks/fit_dispersion.py --cap 4 --exclude-top 300 --lengths 64 128 256
Last line: {"s": ..., "per_length": {...}}
"""

from __future__ import annotations

import argparse
import json

import numpy as np



def capped_law(n: int, pi: np.ndarray, k: int, s: float | None) -> np.ndarray:
    """P(min(C, k) = j), j = 0..k, for C ~ Binomial(n, π) (s None) or BB(n, πs, (1 − π)s): (P, k + 1)."""
    from scipy.stats import betabinom, binom

    j = np.arange(k)[None, :]
    dist = binom(n, pi[:, None]) if s is None else betabinom(n, pi[:, None] * s, (1 - pi[:, None]) * s)
    head = dist.pmf(j)
    return np.concatenate([head, np.clip(1 - head.sum(1, keepdims=True), 0, None)], 1)


def variance_ratio(Y: np.ndarray, n: int, pi: np.ndarray, k: int, s: float | None) -> float:
    """Empirical mean of Σ_v (Y_v − μ_v)² over texts / the model's Σ_v Var(Y_v)."""
    law = capped_law(n, pi, k, s)
    j = np.arange(k + 1)
    m1, m2 = law @ j, law @ (j * j)
    return float(((Y - m1) ** 2).sum(1).mean() / (m2 - m1 * m1).sum())


def main(argv: list[str] | None = None) -> int:
    from scipy.optimize import brentq

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=4)
    ap.add_argument("--exclude-top", type=int, default=300)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256])
    args = ap.parse_args(argv)

    from sketchwm.api import Watermarker
    from sketchwm.data import load
    from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key

    sketch = {"name": "count-sketch", "params": {"d": 4, "w": 256, "counting": "capped", "cap": args.cap,
                                                 "exclude_top": args.exclude_top}}
    wm = Watermarker(bench_key(DEFAULT_KEY_SEED, "key", 0), {"scheme": {"name": "global-sketch",
                                                                                   "params": {"sketch": sketch}}})
    scheme = wm.scheme
    V = scheme.vocab_size
    keep = scheme.sketch.keep_table().cpu().numpy()[:V].astype(bool)  # (V,) the kept tokens
    pi = np.exp(scheme._log_pi.cpu().numpy())[keep]  # (V_kept,) the token prior
    texts = load("human")
    ids = wm.backend.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    out: dict[str, dict] = {}
    print(f"{'n':>5} {'texts':>6} {'ratio binomial':>15} {'fitted s':>9} {'ratio at s':>11}")
    for n in args.lengths:
        Y = np.array([np.minimum(np.bincount(np.asarray(x[:n]), minlength=V)[keep], args.cap) for x in ids if len(x) >= n],
                     dtype=np.float64)  # (m, V_kept)
        r0 = variance_ratio(Y, n, pi, args.cap, None)
        f = lambda ls: variance_ratio(Y, n, pi, args.cap, float(np.exp(ls))) - 1.0  # noqa: E731
        s = float(np.exp(brentq(f, np.log(40.0), np.log(1e6), xtol=1e-3))) if r0 > 1 else None
        r1 = variance_ratio(Y, n, pi, args.cap, s)
        out[str(n)] = {"texts": len(Y), "ratio_binomial": round(r0, 4), "s": None if s is None else round(s, 2),
                       "ratio_at_s": round(r1, 4)}
        print(f"{n:>5} {len(Y):>6} {r0:>15.3f} {s if s is None else round(s, 1)!s:>9} {r1:>11.3f}")
    fits = [v["s"] for v in out.values() if v["s"] is not None]
    s_rec = min(fits) if fits else None  # the most dispersed fit: never narrower than the data at a fitted length
    print(f"recommended s (the smallest per-length fit, so the model is at least as wide as the data at every "
          f"length fitted): {s_rec}")
    print(json.dumps({"s": s_rec, "cap": args.cap, "exclude_top": args.exclude_top, "per_length": out}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
