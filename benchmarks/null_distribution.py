"""The null for one fixed key is not the key-randomised null (issue: "must show").

For a fixed key, common tokens shift h_k(y) in a key-dependent direction even when signs are
balanced (eq. 4), so z = ⟨u_k, h⟩/‖h‖ over unwatermarked texts is not N(0, 1). This script reports,
for one fixed key, the mean and standard deviation of z over >= 1,000 human passages and over
>= 200 unwatermarked samples of the default model, with and without sign balancing; the spread of
that mean across keys; and the false-positive rate of the calibrated 1% threshold (τ_N per length
bin, on the penalised score S_k) measured on a second, disjoint set of human passages.

Usage: python benchmarks/null_distribution.py [--n-human 1200] [--n-model 200] [--n-keys 20]
Last line: one JSON object with all figures.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from sketchwm.api import Watermarker
from sketchwm.data import load
from sketchwm.data import load_prompts
from sketchwm.demo import DEMO_KEY
from sketchwm.keys import WatermarkKey


def _z_stats(z: torch.Tensor) -> dict:
    return {"mean_z": round(float(z.mean()), 3), "std_z": round(float(z.std()), 3), "n": int(z.numel())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-human", type=int, default=1200, help="human passages for the fixed-key null and calibration")
    ap.add_argument("--n-model", type=int, default=200, help="unwatermarked model samples")
    ap.add_argument("--n-keys", type=int, default=20, help="keys for the across-key spread of the mean z")
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--alpha", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    human = load("human")
    if len(human) < 2 * args.n_human:
        # second set = everything after the first n_human (disjoint passages)
        pass
    set_a, set_b = human[: args.n_human], human[args.n_human :]
    base = Watermarker(DEMO_KEY)
    tok = base.backend.tokenizer
    ids_a = [tok.encode(t, add_special_tokens=False) for t in set_a]
    ids_b = [tok.encode(t, add_special_tokens=False) for t in set_b]
    prompts = load_prompts("prompts", args.n_model, offset=100)
    samples = base.generate(prompts, seed=args.seed + 7, watermark=False, batch_size=50, progress=True, gen_length=args.gen_length)
    ids_m = samples.token_lists()

    out: dict = {"key_fingerprint": DEMO_KEY.fingerprint, "n_human_a": len(ids_a), "n_human_b": len(ids_b),
                 "n_model": len(ids_m), "alpha": args.alpha}
    for balanced in (True, False):
        cfg = {"scheme": {"name": "global-sketch", "params": {"sketch": {"name": "count-sketch", "params": {"d": 4, "w": 256, "balance_signs": balanced}}}}}
        wm = Watermarker(DEMO_KEY, cfg, backend=base.backend)
        tag = "balanced" if balanced else "unbalanced"
        ra, rm, rb = wm.detect_ids(ids_a), wm.detect_ids(ids_m), wm.detect_ids(ids_b)
        out[f"{tag}_human"] = _z_stats(ra.z)
        out[f"{tag}_model"] = _z_stats(rm.z)
        out[f"{tag}_human_pvalue_le_alpha"] = round(float((ra.p_value <= args.alpha).double().mean()), 4)
        cal = wm.calibrate(id_lists=ids_a, alpha=args.alpha, source=f"{len(ids_a)} human passages (set A)", model_id="human")
        held = wm.detect_ids(ids_b, calibration=cal, alpha=args.alpha)
        out[f"{tag}_fpr_calibrated_on_disjoint_human"] = round(float(held.is_watermarked.double().mean()), 4)
        cal_m = wm.calibrate(id_lists=ids_a, alpha=args.alpha, model_id="human")
        out[f"{tag}_fpr_human_calibration_on_model_samples"] = round(float(wm.detect_ids(ids_m, calibration=cal_m).is_watermarked.double().mean()), 4)
        if balanced:
            out["sketch_report"] = wm.scheme.sketch.report()
        # across keys: the fixed-key mean of z moves with the key
        means = []
        for i in range(args.n_keys):
            k = WatermarkKey(f"null-benchmark-key-{i:04d}-padding".encode())
            wk = Watermarker(k, cfg, backend=base.backend)
            means.append(float(wk.detect_ids(ids_a[:300]).z.mean()))
        out[f"{tag}_mean_z_across_{args.n_keys}_keys"] = {"mean": round(statistics.mean(means), 3), "std": round(statistics.stdev(means), 3),
                                                          "min": round(min(means), 3), "max": round(max(means), 3)}

    print(f"{'null set':<34}{'balanced mean±sd z':>22}{'unbalanced mean±sd z':>24}")
    for name, key in (("human passages (set A)", "human"), ("unwatermarked model samples", "model")):
        b, u = out[f"balanced_{key}"], out[f"unbalanced_{key}"]
        print(f"{name:<34}{b['mean_z']:>12.3f} ± {b['std_z']:<7.3f}{u['mean_z']:>14.3f} ± {u['std_z']:<7.3f}")
    for tag in ("balanced", "unbalanced"):
        s = out[f"{tag}_mean_z_across_{args.n_keys}_keys"]
        print(f"{tag}: mean z over 300 human texts, across {args.n_keys} keys: {s['mean']:.3f} ± {s['std']:.3f} "
              f"[{s['min']:.3f}, {s['max']:.3f}]; FPR of the calibrated {args.alpha:.0%} threshold on {out['n_human_b']} "
              f"disjoint human passages: {out[f'{tag}_fpr_calibrated_on_disjoint_human']:.4f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
