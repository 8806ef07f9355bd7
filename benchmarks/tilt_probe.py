"""How much each scheme's tilt moves the marginals it samples from: KL(p̃‖p) and Var_p(shift).

On the default DLM with its shipped sampler, ``--n-prompts`` shipped prompts × 128 tokens, every
denoising step of each scheme is intercepted: for the rows the sampler samples at that step (its
target rows; under random remasking a uniformly random subset of the masked positions of the
current block), the untilted marginal p = softmax(l) and the tilted one
p̃ = softmax(l + shift) give KL(p̃‖p) (nats), the variance of the logit shift under p, and the
standard deviation of the shift over the vocabulary. Means over positions and steps are printed,
one line per setting. (Distortion-free schemes do not tilt: KL 0.)

Usage: python benchmarks/tilt_probe.py [--n-prompts 10] [--settings JSON]
  --settings: JSON list of [scheme, params], default unigram δ=2 and global-sketch at three settings.
"""

from __future__ import annotations

import argparse
import json

import torch

from sketchwm.data import load_prompts
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.registry import get_registry

DEFAULT_SETTINGS = [
    ["unigram", {}],
    ["global-sketch", {"delta": 0.5, "score": {"name": "penalized", "params": {"gamma": 0.05}}}],
    ["global-sketch", {"delta": 0.5, "score": {"name": "penalized", "params": {"gamma": 0.25}}}],
    ["global-sketch", {"delta": 0.2, "score": {"name": "penalized", "params": {"gamma": 0.25}}}],
]


def probe(backend, name: str, params: dict, prompts: list[str], key: WatermarkKey) -> tuple[float, float, float]:
    """Mean (KL(p̃‖p), Var_p(shift), sd of the shift over the vocabulary) over the steps of one generation."""
    reg = get_registry()
    scheme = reg.create("scheme", name, params, key, backend.vocab_size)
    stats: list[tuple[float, float, float]] = []
    tilt = scheme.process_logits

    def wrapped(step):
        base = step.marginals.target_logits().clone()  # (B, K, V), before the hook tilts it
        out = tilt(step)
        rows = step.marginals.target_valid  # (B, K)
        lp, lq = torch.log_softmax(base[rows], -1), torch.log_softmax(out[rows], -1)  # (M, V)
        p, q = lp.exp(), lq.exp()
        kl = (q * (lq - lp).nan_to_num(0.0)).sum(-1)  # (M,)
        shift = (out[rows] - base[rows]).nan_to_num(0.0, 0.0, 0.0)  # (M, V); banned ids: −inf − −inf → 0
        mu = (p * shift).sum(-1)
        var = (p * (shift - mu[:, None]) ** 2).sum(-1)
        stats.append((float(kl.mean()), float(var.mean()), float(shift.std(-1).mean())))
        return out

    scheme.process_logits = wrapped
    MaskedDiffusionSampler(backend, {"gen_length": 128}, scheme).generate(prompts, torch.Generator().manual_seed(0))
    m = torch.tensor(stats).mean(0).tolist()
    return m[0], m[1], m[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-prompts", type=int, default=10)
    ap.add_argument("--settings", default=json.dumps(DEFAULT_SETTINGS))
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    backend = get_registry().create("backend", "default")
    key = WatermarkKey(b"sketchwm/benchmarks/tilt_probe/key")
    prompts = load_prompts("prompts", args.n_prompts)
    print(f"{'scheme and params':70s}{'KL(p~||p)':>11s}{'Var_p(shift)':>14s}{'sd over V':>11s}")
    out = []
    for name, params in json.loads(args.settings):
        kl, var, sd = probe(backend, name, params, prompts, key)
        print(f"{name + ' ' + json.dumps(params):70s}{kl:11.3f}{var:14.3f}{sd:11.3f}", flush=True)
        out.append({"scheme": name, "params": params, "kl": round(kl, 4), "var_shift": round(var, 4), "sd_shift": round(sd, 4)})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
