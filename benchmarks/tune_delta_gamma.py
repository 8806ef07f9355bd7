"""Detection strength vs distortion of the global sketch watermark for a grid of (δ, γ).

On the default DLM, ``--n-prompts`` shipped prompts × 128 tokens with the public demo key: median
and minimum z of watermarked texts, the share flagged by the analytic threshold τ_α (eq. 19,
α = 1%), and the median oracle perplexity (SmolLM2-135M, ``sketchwm.oracle``) next to the
unwatermarked samples of the same prompts and seed.

Usage: python benchmarks/tune_delta_gamma.py [--n-prompts 20] [--grid 0.5:0.25,1.0:0.25,...]
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from sketchwm.api import Watermarker
from sketchwm.data import load_prompts
from sketchwm.demo import DEMO_KEY


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-prompts", type=int, default=20)
    ap.add_argument("--grid", default="0.5:0.25,0.5:1.0,1.0:0.25,1.0:1.0,2.0:1.0", help="comma-separated delta:gamma pairs")
    ap.add_argument("--no-oracle", action="store_true")
    args = ap.parse_args()
    prompts = load_prompts("prompts", args.n_prompts)
    base = Watermarker(DEMO_KEY)
    texts = {"unwatermarked": base.generate(prompts, seed=0, watermark=False, batch_size=args.n_prompts).texts}
    res: dict = {"unwatermarked": {}}
    for pair in args.grid.split(","):
        delta, gamma = (float(x) for x in pair.split(":"))
        name = f"delta={delta},gamma={gamma}"
        cfg = {"scheme": {"name": "global-sketch", "params": {"delta": delta, "score": {"name": "penalized", "params": {"gamma": gamma}}}}}
        wm = Watermarker(DEMO_KEY, cfg, backend=base.backend)
        t = time.perf_counter()
        out = wm.generate(prompts, seed=0, batch_size=args.n_prompts)
        r = wm.detect(out.texts)
        res[name] = {"median_z": round(float(r.z.median()), 2), "min_z": round(float(r.z.min()), 2),
                     "tpr_analytic": float(r.is_watermarked.double().mean()), "seconds": round(time.perf_counter() - t, 1)}
        texts[name] = out.texts
        print(name, res[name], flush=True)
    if not args.no_oracle:
        from sketchwm.oracle import OracleLM

        oracle = OracleLM()
        for name, tx in texts.items():
            res[name]["oracle_ppl_median"] = round(statistics.median(oracle.perplexity(tx)), 1)
    print(f"{'setting':<26}{'median z':>10}{'min z':>8}{'TPR@τ_α':>9}{'oracle ppl':>12}")
    for name, r in res.items():
        print(f"{name:<26}{r.get('median_z', float('nan')):>10}{r.get('min_z', float('nan')):>8}"
              f"{r.get('tpr_analytic', float('nan')):>9}{r.get('oracle_ppl_median', float('nan')):>12}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
