"""KL of a scheme's tilt before and after the sampler's temperature, at the rows tokens are drawn from.

The leaderboard's KL axis is KL(p̃‖p) of the logits before the temperature. Tokens are drawn from
softmax(l/T); below T = 1 the temperature magnifies sparse large logit shifts more than diffuse small
ones, so two schemes equal on the axis can distort the sampling distribution unequally. For each
(regime, scheme) this generates ``--n`` development prompts (the shipped ``human`` passages, first 20
words) × ``--length`` tokens on the default model under one key and records, through a sampler
observer (:class:`sketchwm.observers.TiltObserver`), at every sampled row: KL before the temperature, KL after dividing
both logit sets by T, and whether the tilt changed the argmax; then the median detection p-value.

    python benchmarks/kl_temperature.py
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from sketchwm.observers import TiltObserver

#: the leaderboard's named regimes (:data:`sketchwm.bench.config.REGIMES`) measured here
REGIME_NAMES = ("llada-blocks-t0.5", "mdlm-random-t1")
SCHEMES = {"global-sketch": {"delta": 0.5}, "red-green-dlm": {"delta": 2.0}}


def _kl(base: torch.Tensor, out: torch.Tensor, tau: float) -> torch.Tensor:
    """KL(softmax(out/τ) ‖ softmax(base/τ)) per row: (M, V) → (M,) float64 nats."""
    lp, lq = torch.log_softmax(base.double() / tau, -1), torch.log_softmax(out.double() / tau, -1)
    return (lq.exp() * (lq - lp).nan_to_num(0.0, 0.0, 0.0)).sum(-1)


class TiltKL(TiltObserver):
    """Sampler observer: per sampled row, the KL before (``pre``) and after (``post``) the temperature ``T``
    and whether the tilt changed the argmax (``flip``); lists of (M,) float64 tensors, one per step."""

    def __init__(self, T: float):
        self.T, self.pre, self.post, self.flip = T, [], [], []

    def on_tilt(self, step, before, after, uniforms):
        sel = step.marginals.target_valid  # (B, K)
        self.pre.append(_kl(before[sel], after[sel], 1.0))
        self.post.append(_kl(before[sel], after[sel], self.T))
        self.flip.append((before[sel].argmax(-1) != after[sel].argmax(-1)).double())


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    args = ap.parse_args(argv)
    from sketchwm.api import Watermarker
    from sketchwm.bench.config import REGIMES
    from sketchwm.data import load_prompts
    from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key

    prompts = [" ".join(t.split()[:20]) for t in load_prompts("human", args.n)]
    key = bench_key(DEFAULT_KEY_SEED, "key", 0)
    rows = []
    for regime in REGIME_NAMES:
        samp = dict(REGIMES[regime].sampler)  # block_length None: one block of the whole generation
        T = samp["temperature"]
        for name, params in SCHEMES.items():
            wm = Watermarker(key, {"scheme": {"name": name, "params": params}})
            sampler = wm.sampler(True, gen_length=args.length, steps=args.steps,
                                 **{**samp, "block_length": samp["block_length"] or args.length})
            rec = TiltKL(T)
            gen = sampler.generate(prompts, torch.Generator().manual_seed(0), observers=[rec])
            pre, post, flip = rec.pre, rec.post, rec.flip
            p = wm.detect(gen.texts).p_value
            row = {"regime": regime, "scheme": name, "params": params, "kl_pre_T": float(torch.cat(pre).mean()),
                   "kl_post_T": float(torch.cat(post).mean()), "argmax_changed": float(torch.cat(flip).mean()),
                   "median_p": float(p.median())}
            rows.append(row)
            print(f"{regime:18s} {name:14s} KL before T {row['kl_pre_T']:.3f}  after T {row['kl_post_T']:.3f}  "
                  f"argmax changed {row['argmax_changed']:.3f}  median p {row['median_p']:.2e}", flush=True)
    print(json.dumps({"rows": rows, "n": args.n, "length": args.length}))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
