"""How the default's two p-values are combined, read on the same texts: fixed against per-text weights.

``global-sketch-green`` embeds one tilt and tests two channels, combining their p-values by weighted
Bonferroni (``plugins/sketchwm_builtin/sketch_green.py``). The combination changes detection only,
so this script generates each regime's texts once (watermarked at one scale, and the unwatermarked
calibration split) and scores the same token ids under each combination rule: TPR at the analytic
α = 1% (p ≤ 0.01) and under the one decision rule (p ≤ 0.01 and above the conformal τ_N of the
calibration split), with bootstrap intervals over texts, and the observed coverage n_d/N that the
``coverage`` weighting reads. The generation is the bench harness's (its
:class:`~sketchwm.bench.inputs.Services`): regimes, seeds and prompt splits as a ``sketchwm bench
run`` with the same config would draw them.

Development use only: the default config draws its prompts from the shipped ``human`` passages
(``frontier_dev.yaml``'s split), not the ``prompts`` set the leaderboard reports on.

    python benchmarks/combine_dev.py                     # T = 1 and T = 0.5, 48 texts each, 128 tokens
    python benchmarks/combine_dev.py --n 24 --length 64  # quicker
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np

from sketchwm.bench.bootstrap import bootstrap_interval
from sketchwm.bench.config import BenchConfig
from sketchwm.bench.plan import Unit
from sketchwm.bench.inputs import Services
from sketchwm.config import DEFAULT_SCHEME
from sketchwm.detection import pad_ids
from sketchwm.stats import conformal_quantile

#: detection variants: (label, params merged over the scheme's defaults)
VARIANTS = {
    "fixed w=0.5": {"weighting": "fixed", "weight": 0.5},
    "coverage f=0.1": {"weighting": "coverage", "weight_floor": 0.1},
    "coverage f=0.25": {"weighting": "coverage", "weight_floor": 0.25},
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--regimes", nargs="+", default=["mdlm-random-t1:0.4", "llada-blocks-t0.5:0.75"],
                    help="regime:scale pairs (scale s of the default scheme)")
    ap.add_argument("--n", type=int, default=48, help="watermarked texts per regime")
    ap.add_argument("--n-cal", type=int, default=99, help="unwatermarked calibration texts per regime")
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--source", default="human", help="prompt source (development: human)")
    args = ap.parse_args()

    pairs = [r.rsplit(":", 1) for r in args.regimes]
    cfg = BenchConfig.model_validate({
        "name": "combine-dev", "backends": [{"name": "default"}], "regimes": [r for r, _ in pairs],
        "schemes": [{"name": DEFAULT_SCHEME}], "lengths": [args.length],
        "prompt_sets": [{"name": "dev", "source": args.source, "n": args.n, "words": 20}],
        "keys": 1, "n_null_cal": args.n_cal, "n_null_fpr": 2, "oracle": False, "similarity": False,
        "tokens_step": 0, "batch_size": 48, "sampler": {"steps": 32}})
    services = Services.build(cfg)
    models, schemes = services.models, services.schemes
    be = models.backend(0)
    for ri, (regime, scale) in enumerate(pairs):
        t0 = time.perf_counter()
        base = Unit(scheme=DEFAULT_SCHEME, scheme_name=DEFAULT_SCHEME, scheme_params=json.dumps({"scale": float(scale)}),
                    backend=0, key=0, length=args.length, prompt_set=0, regime=ri)
        wm, _ = models.generate(0, args.length, services.prompts.split(0)["eval"], schemes.scheme(base), seed=1000 + ri,
                                regime=ri)
        null = models.null_texts(0, args.length, 0, "null_cal", regime=ri)
        ids_wm, ids_null = be.encode(wm), be.encode(null)
        x_wm, v_wm = pad_ids(ids_wm)
        x_null, v_null = pad_ids(ids_null)
        for label, extra in VARIANTS.items():
            unit = dataclasses.replace(base, scheme=label, scheme_params=json.dumps({"scale": float(scale), **extra}))
            sch = schemes.scheme(unit)
            o_wm, o_null = sch.score_ids(x_wm, v_wm), sch.score_ids(x_null, v_null)
            p_wm, p_null = o_wm.p_value.double().numpy(), o_null.p_value.double().numpy()
            tau = conformal_quantile(o_null.score.double().numpy(), 0.01)
            analytic = p_wm <= 0.01
            rule = analytic & (o_wm.score.double().numpy() > tau)
            cov = (o_wm.n_scored.double() / v_wm.sum(1).double()).numpy()
            _, lo, hi = bootstrap_interval(rule)
            print(json.dumps({"regime": regime, "scale": float(scale), "variant": label, "n": len(wm),
                              "tpr_p01": round(float(analytic.mean()), 3), "tpr_rule": round(float(rule.mean()), 3),
                              "ci": [round(lo, 3), round(hi, 3)], "null_p01": round(float((p_null <= 0.01).mean()), 3),
                              "coverage_median": round(float(np.median(cov)), 3)}), flush=True)
        print(f"# {regime}: {time.perf_counter() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
