"""TPR at a calibrated 1% FPR against KL/token on the development split, per regime and scheme.

Reads the results of a strength-swept benchmark run (``sketchwm bench run frontier_dev``, the config
``sketchwm/bench/configs/frontier_dev.yaml``: prompts from the shipped ``human`` passages, which share
no document with the shipped ``prompts`` set the leaderboard reports on) and prints, for each regime:

* every swept point: its label, mean KL/token, TPR at the calibrated 1% FPR (95% bootstrap interval
  over texts), and distinct-2 of its texts;
* each curve read at KL/token = 0.05, 0.1 and 0.2 nats by the leaderboard's equal-KL rule
  (:func:`sketchwm.bench.matched.at_kl`: linear in KL between adjacent settings, bounds interpolated
  the same way, ``n/a`` outside the swept KL range).

KL/token is the leaderboard's axis: the KL of the distribution tokens are drawn from (after the
sampler's temperature) where every point of the regime recorded it, else the model's marginals'
(before it); the regime's heading says which (:mod:`sketchwm.bench.matched`). A second column gives
the other one where both exist.

Nothing is computed here beyond reading the harness's own estimates (one threshold definition, one
results schema), so the figures are the ones the leaderboard's matched tables would show.

    sketchwm bench run frontier_dev --out /tmp/frontier_dev
    python benchmarks/frontier_dev.py /tmp/frontier_dev
"""

from __future__ import annotations

import argparse
import math

from sketchwm.bench.matched import KL_BUDGETS, at_kl, curves
from sketchwm.bench.results import read_results


def _fmt(e) -> str:
    """``mean [lo, hi]`` of an :class:`~sketchwm.bench.matched.Estimate`, or ``n/a (note)``."""
    if not e.ok:
        return f"n/a ({e.note})" if e.note else "n/a"
    if math.isnan(e.lo):
        return f"{e.mean:.3f}"
    return f"{e.mean:.2f} [{e.lo:.2f}, {e.hi:.2f}]"


def main(argv: list[str] | None = None) -> None:
    """Print the per-point table and the equal-KL table of the run folder given on the command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="results folder(s) of `sketchwm bench run` (pooled)")
    args = ap.parse_args(argv)
    import pandas as pd

    df = pd.concat([read_results(r) for r in args.results], ignore_index=True)
    cs = curves(df)
    for regime in dict.fromkeys(c.regime for c in cs):
        rc = [c for c in cs if c.regime == regime]
        axis = "sampled" if all(c.kl_axis == "sampled" for c in rc) else "model"
        other = "model" if axis == "sampled" else "sampled"
        print(f"\n## {regime} (KL axis: {axis})")
        print(f"points: label | KL/token | KL/token ({other}) | TPR@1%FPR [95% CI] | distinct-2 | n")
        for c in rc:
            for p in c.points:
                alt = p.get(f"kl_{other}")
                print(f"  {p.label} | {p.get('kl').mean:.4f} | {f'{alt.mean:.4f}' if alt.ok else 'n/a'} | "
                      f"{_fmt(p.get('tpr'))} | {p.get('distinct2').mean:.3f} | {p.get('tpr').n}")
        print("equal KL: curve | " + " | ".join(f"TPR @ KL {b:g}" for b in KL_BUDGETS))
        for c in (c for c in cs if c.regime == regime):
            print(f"  {c.name} | " + " | ".join(_fmt(at_kl(c, 'tpr', b)) for b in KL_BUDGETS))


if __name__ == "__main__":
    main()
