"""How far the default embedding's tilt moves from the exact computation, step by step, on the default model.

The default global sketch embeds with two approximations: the tail linearisation of the
expected sketch and tilt (``tail_epsilon`` ε, :mod:`sketchwm.marginal_sums`) and, in the engine,
amortised marginals (``marginal_refresh`` ``auto`` = ``once``: every masked row at the first step,
then the sampled rows only; the other masked rows keep their first marginals). This script runs the
default sampler on ``--prompts`` prompts and, at every step, also computes on the same canvas

* the exact tilt: the LM head on every masked row, ε = 0 (eq. 5-7 and the presence analogue), and
* the tilt with the tail linearisation only (every masked row fresh, ε as configured),

and compares each with the tilt the sampler used, η_t·a at the sampled rows (logits after minus
before). Per (text, step): the relative error ‖Δ‖₂/‖exact‖₂ over the vocabulary and the largest
absolute error in logits. It prints their median, 95th percentile and maximum over all sampled
rows and steps, for "used vs exact" (both approximations), "linearised vs exact" (ε alone) and
"used vs linearised" (the amortisation alone).

Usage: python benchmarks/tilt_error.py [--prompts 16] [--gen-length 128] [--threads 2] [--seed 0]
Last line: {"used_vs_exact": {"rel_median": ..., "rel_p95": ..., "rel_max": ..., "abs_max": ...}, ...}
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import add_common_args, setup  # noqa: E402

from sketchwm.components import DenoiseStep, MarginalReads, Marginals  # noqa: E402
from sketchwm.data import load  # noqa: E402
from sketchwm.engine import MaskedDiffusionSampler  # noqa: E402
from sketchwm.keys import WatermarkKey  # noqa: E402
from sketchwm.registry import get_registry  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=1)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    dev = setup(args)
    reg = get_registry()
    backend = reg.create("backend", "default", {"device": str(dev)})
    key = WatermarkKey(hashlib.sha256(b"sketchwm/benchmarks/tilt_error").digest())
    cfg = {**(backend.sampler_defaults or {}), "gen_length": args.gen_length}
    used = reg.create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    eps = used.params.tail_epsilon
    exact = reg.create("scheme", "global-sketch", {"tail_epsilon": 0.0}, key, backend.vocab_size, device=backend.device)
    linear = reg.create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    sampler = MaskedDiffusionSampler(backend, cfg, used)
    banned = torch.tensor(sorted(set(backend.banned_token_ids) | {backend.mask_token_id}), dtype=torch.long)
    banned = banned[banned < backend.vocab_size].to(backend.device)
    errs: dict[str, list[torch.Tensor]] = {"used_vs_exact": [], "linear_vs_exact": [], "used_vs_linear": []}
    absmax: dict[str, float] = dict.fromkeys(errs, 0.0)
    inner = used.process_logits

    def probe(step: DenoiseStep) -> torch.Tensor:
        m = step.marginals
        before = m.at_target_rows(m.logits).clone()  # (B, K, V) the sampled rows, fresh in every strategy
        tilted = inner(step)
        got = tilted - before
        # every masked row fresh on this canvas: the exact strategy's marginals
        positions, valid, rows = MarginalReads.masked().layout(step.masked, m.target_positions, m.target_valid)
        x = torch.cat([step.prompt_ids, step.tokens], 1)
        attn = torch.cat([step.prompt_mask, torch.ones_like(step.tokens, dtype=torch.bool)], 1)
        full = backend.logits_at(x, attn, positions + step.prompt_ids.shape[1]).float()
        if banned.numel():
            full[..., banned] = float("-inf")
        shifts = {}
        for name, sch in (("exact", exact), ("linear", linear)):
            sch.begin(*step.tokens.shape, step.prompt_ids, step.prompt_mask)
            ref = Marginals(full.clone(), positions, valid, rows, m.target_valid)
            shifts[name] = sch.process_logits(DenoiseStep(step.step, step.total_steps, step.tokens, step.masked, ref,
                                                          step.prompt_ids, step.prompt_mask, step.block,
                                                          step.mask_token_id)) - torch.gather(
                full, 1, rows[..., None].expand(-1, -1, full.shape[-1]))
        finite = torch.isfinite(before)
        for name, (a, b) in {"used_vs_exact": (got, shifts["exact"]), "linear_vs_exact": (shifts["linear"], shifts["exact"]),
                             "used_vs_linear": (got, shifts["linear"])}.items():
            d = torch.where(finite, a - b, 0.0)
            ref_norm = torch.where(finite, b, 0.0).norm(dim=-1)  # (B, K)
            ok = m.target_valid & (ref_norm > 0)
            errs[name].append((d.norm(dim=-1)[ok] / ref_norm[ok]).double().cpu())
            absmax[name] = max(absmax[name], float(d.abs()[ok].max()) if bool(ok.any()) else 0.0)
        return tilted

    used.process_logits = probe
    prompts = list(load("prompts"))[: args.prompts]
    with torch.no_grad():
        sampler.generate(prompts, torch.Generator(device=backend.device).manual_seed(args.seed))
    res = {"prompts": len(prompts), "gen_length": args.gen_length, "tail_epsilon": eps, "refresh": sampler.refresh}
    for name, parts in errs.items():
        r = torch.cat(parts)
        res[name] = {"rel_median": round(float(r.median()), 5), "rel_p95": round(float(r.quantile(0.95)), 5),
                     "rel_max": round(float(r.max()), 5), "abs_max_logits": round(absmax[name], 5), "rows": len(r)}
        print(f"{name:16s} relative L2 error: median {res[name]['rel_median']:.5f}, p95 {res[name]['rel_p95']:.5f}, "
              f"max {res[name]['rel_max']:.5f}; largest |error| {res[name]['abs_max_logits']:.5f} logits "
              f"({len(r)} sampled rows)")
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
