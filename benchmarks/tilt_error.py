"""How far the default embedding's tilt moves from the exact computation, per remasking regime and
refresh rule, on the default model; and how far detection z moves.

The default global sketch embeds with two approximations: the tail linearisation of the expected
sketch and tilt (``tail_epsilon`` ε, :mod:`sketchwm.marginal_sums`) and, in the engine, amortised
marginals (sampler ``marginal_refresh``: between refreshes the masked rows that are not sampled
keep the marginals of the last refresh). Which rows go stale depends on the remasking rule: under
``random`` every masked row can be sampled, so the stale rows are spread over the canvas; under
``low_confidence`` (LLaDA) and ``entropy`` (Dream) every masked row of the current block is a
candidate at every step (fresh), and the stale rows are the later blocks'.

For each regime of ``--remasking`` (the default model's shipped sampler — blocks of 32, 64 steps,
T = 1, top-p 0.9 — with that remasking rule) and each rule of ``--refresh``, the script generates
``--prompts`` texts and, at every step, also computes on the same canvas

* the exact tilt: the LM head on every masked row, ε = 0 (seed paper eq. 5-7 and the presence
  analogue), and
* the tilt with the tail linearisation only (every masked row fresh, ε as configured),

and compares each with the tilt the sampler used, η_t·a at the sampled rows (logits after minus
before). Per (sampled row, step): the relative L2 error ‖Δ‖₂/‖exact‖₂ over the vocabulary. It
prints, per regime and rule, the median, 95th percentile and maximum of "used vs exact" (both
approximations), their median per block, and "linearised vs exact" (ε alone).

With ``--z-texts N`` > 0 it also generates N texts per regime (seeds 1000, 1001, ...; ``--z-batch``
texts per batch) under each rule of ``--z-refresh`` (default ``auto``) and under the exact
computation (``marginal_refresh = 1``) and
detects them: mean z, and the relative difference of the mean z from the exact one with its
standard error. The runs share the prompts, the seeds and therefore the sampler's noise (the
random draws do not depend on the tokens drawn), so the difference is taken per text (paired) and
its standard error is sd(z_rule − z_exact)/√N / mean(z_exact).

The last lines are a Markdown table of every (regime, rule) and one JSON object.

Usage: python benchmarks/tilt_error.py [--remasking random,low_confidence,entropy] [--refresh auto,once]
       [--prompts 16] [--gen-length 128] [--z-texts 64] [--threads 2] [--seed 0]
Last line: {"regimes": {remasking: {rule: {"resolved": ..., "used_vs_exact": {...}, "z_rel_diff": ...}}}, ...}
"""

from __future__ import annotations

import argparse
import json
import math

import torch

from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key
from sketchwm.components import DenoiseStep, MarginalReads, Marginals
from sketchwm.data import load
from sketchwm.detection import Detector
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.observers import TiltObserver
from sketchwm.registry import get_registry

PAIRS = ("used_vs_exact", "linear_vs_exact", "used_vs_linear")


def _rule(text: str) -> int | str:
    """A ``marginal_refresh`` value from the command line: an integer or a name."""
    return int(text) if text.isdigit() else text


def measure_tilt(backend, key: WatermarkKey, cfg: dict, prompts: list[str], seed: int) -> dict:
    """Generate ``prompts`` under the sampler ``cfg`` with the default scheme and compare, at every
    step, its tilt of the sampled rows with the exact and the linearised-only tilts on the same canvas.

    Returns:
        {"resolved": the refresh schedule in force, pair: {"rel_median", "rel_p95", "rel_max",
        "abs_max_logits", "rows", "block_median": [per block]}} for pair in :data:`PAIRS`.
    """
    reg = get_registry()
    used = reg.create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    exact = reg.create("scheme", "global-sketch", {"tail_epsilon": 0.0}, key, backend.vocab_size, device=backend.device)
    linear = reg.create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    sampler = MaskedDiffusionSampler(backend, cfg, used)
    block_length = sampler.config.block_length
    banned = torch.tensor(sorted(set(backend.banned_token_ids) | {backend.mask_token_id}), dtype=torch.long)
    banned = banned[banned < backend.vocab_size].to(backend.device)
    errs: dict[str, list[torch.Tensor]] = {p: [] for p in PAIRS}
    blocks: list[torch.Tensor] = []
    absmax: dict[str, float] = dict.fromkeys(PAIRS, 0.0)

    def probe(step: DenoiseStep, before: torch.Tensor, tilted: torch.Tensor) -> None:
        """At every step: before, tilted (B, K, V) the sampled rows' logits (fresh in every strategy)."""
        m = step.marginals
        got = tilted - before
        # every masked row fresh on this canvas: the exact strategy's marginals
        positions, valid, rows = MarginalReads.masked().layout(step.masked, m.target_positions, m.target_valid)
        x = torch.cat([step.prompt_ids, step.tokens], 1)
        attn = torch.cat([step.prompt_mask, torch.ones_like(step.tokens, dtype=torch.bool)], 1)
        full = backend.logits_at(x, attn, positions + step.prompt_ids.shape[1]).float()  # (B, R, V)
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
        ok = None
        for name, (a, b) in {"used_vs_exact": (got, shifts["exact"]), "linear_vs_exact": (shifts["linear"], shifts["exact"]),
                             "used_vs_linear": (got, shifts["linear"])}.items():
            d = torch.where(finite, a - b, 0.0)  # (B, K, V)
            ref_norm = torch.where(finite, b, 0.0).norm(dim=-1)  # (B, K)
            ok = m.target_valid & (ref_norm > 0) if ok is None else ok
            errs[name].append((d.norm(dim=-1)[ok] / ref_norm[ok]).double().cpu())
            absmax[name] = max(absmax[name], float(d.abs()[ok].max()) if bool(ok.any()) else 0.0)
        blocks.append(torch.full((int(ok.sum()),), step.block[0] // block_length, dtype=torch.long))

    class Probe(TiltObserver):
        def on_tilt(self, step, before, after, uniforms):
            probe(step, before, after)

    with torch.no_grad():
        sampler.generate(prompts, torch.Generator(device=backend.device).manual_seed(seed), observers=[Probe()])
    block_of = torch.cat(blocks)
    res: dict = {"resolved": sampler.refresh}
    for name, parts in errs.items():
        r = torch.cat(parts)
        res[name] = {"rel_median": round(float(r.median()), 5), "rel_p95": round(float(r.quantile(0.95)), 5),
                     "rel_max": round(float(r.max()), 5), "abs_max_logits": round(absmax[name], 5), "rows": len(r),
                     "block_median": [round(float(r[block_of == b].median()), 5) for b in range(int(block_of.max()) + 1)
                                      if bool((block_of == b).any())]}
    return res


def detection_z(backend, key: WatermarkKey, cfg: dict, pool: list[str], batch: int) -> torch.Tensor:
    """Detection z (N,) float64 of the default scheme's texts of the N prompts ``pool`` under the
    sampler ``cfg``, in batches of ``batch`` with seeds 1000, 1001, ... (one per batch)."""
    scheme = get_registry().create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    det = Detector(scheme, backend.tokenizer, "benchmark")
    zs = []
    with torch.no_grad():
        for i in range(0, len(pool), batch):
            out = MaskedDiffusionSampler(backend, cfg, scheme).generate(
                pool[i:i + batch], torch.Generator(device=backend.device).manual_seed(1000 + i // batch))
            zs.append(det.detect_ids(out.token_lists()).z)
    return torch.cat(zs).double()


def markdown(regimes: dict, block_length: int, z_texts: int) -> list[str]:
    """The per-(regime, rule) table as Markdown lines."""
    head = ("| remasking | `marginal_refresh` | schedule | rel. L2 median | p95 | max | median per block | "
            + (f"z rel. diff ({z_texts} texts) ± s.e. |" if z_texts else "") )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for rem, rules in regimes.items():
        for rule, r in rules.items():
            u = r["used_vs_exact"]
            row = (f"| {rem} | `{rule}` | `{r['resolved']}` | {100 * u['rel_median']:.2f}% | {100 * u['rel_p95']:.2f}% | "
                   f"{100 * u['rel_max']:.2f}% | " + " → ".join(f"{100 * x:.1f}%" for x in u["block_median"]) + " |")
            if z_texts:
                row += (f" {100 * r['z_rel_diff']:+.2f}% ± {100 * r['z_rel_diff_se']:.2f}% |" if "z_rel_diff" in r else " |")
            lines.append(row)
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--remasking", default="random,low_confidence,entropy", help="comma-separated remasking rules")
    ap.add_argument("--refresh", default="auto,once",
                    help="comma-separated marginal_refresh rules to measure (auto, once, block, block-all, or an integer)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--z-texts", type=int, default=0,
                    help="texts per regime on which detection z of each rule is compared with the exact computation")
    ap.add_argument("--z-refresh", default="auto", help="comma-separated rules of --refresh whose detection z is compared")
    ap.add_argument("--z-batch", type=int, default=16, help="texts per batch of the detection-z runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dev = torch.device(args.device)
    reg = get_registry()
    backend = reg.create("backend", "default", {"device": str(dev)})
    key = bench_key(DEFAULT_KEY_SEED, "key", 0)
    base = {**(backend.sampler_defaults or {}), "gen_length": args.gen_length}
    prompts = list(load("prompts"))[: args.prompts]
    rules = [_rule(r) for r in args.refresh.split(",") if r]
    z_rules = {r for r in args.z_refresh.split(",") if r}
    scheme = reg.create("scheme", "global-sketch", {}, key, backend.vocab_size, device=backend.device)
    eps = scheme.params.tail_epsilon
    regimes: dict[str, dict] = {}
    for rem in [r for r in args.remasking.split(",") if r]:
        cfg = {**base, "remasking": rem}
        regimes[rem] = {}
        z_exact = detection_z(backend, key, {**cfg, "marginal_refresh": 1}, list(load("prompts"))[: args.z_texts],
                              args.z_batch) if args.z_texts else None
        done: dict = {}  # resolved schedule → its results (``auto`` is measured once, as the rule it resolves to)
        for rule in rules:
            resolved = MaskedDiffusionSampler(backend, {**cfg, "marginal_refresh": rule}, scheme).refresh
            if resolved in done:
                regimes[rem][str(rule)] = done[resolved]
                continue
            res = measure_tilt(backend, key, {**cfg, "marginal_refresh": rule}, prompts, args.seed)
            if z_exact is not None and str(rule) in z_rules:
                z = detection_z(backend, key, {**cfg, "marginal_refresh": rule}, list(load("prompts"))[: args.z_texts],
                                args.z_batch)
                mean = float(z_exact.mean())
                res.update(z_texts=len(z), z_mean_exact=round(mean, 3), z_mean=round(float(z.mean()), 3),
                           z_rel_diff=round(float(z.mean() - z_exact.mean()) / mean, 4),
                           z_rel_diff_se=round(float((z - z_exact).std()) / math.sqrt(len(z)) / mean, 4))
            regimes[rem][str(rule)] = done[resolved] = res
            u = res["used_vs_exact"]
            print(f"{rem:15s} {str(rule):9s} ({res['resolved']}): relative L2 error median {u['rel_median']:.5f}, "
                  f"p95 {u['rel_p95']:.5f}, max {u['rel_max']:.5f}; linearisation alone max "
                  f"{res['linear_vs_exact']['rel_max']:.5f} ({u['rows']} sampled rows)"
                  + (f"; z {res['z_mean']} vs exact {res['z_mean_exact']} ({100 * res['z_rel_diff']:+.2f}% "
                     f"± {100 * res['z_rel_diff_se']:.2f}%)" if "z_mean" in res else ""), flush=True)
    block_length = int(base.get("block_length", args.gen_length))
    print()
    print("\n".join(markdown(regimes, block_length, args.z_texts)))
    print(json.dumps({"prompts": len(prompts), "gen_length": args.gen_length, "block_length": block_length,
                      "tail_epsilon": eps, "z_texts": args.z_texts, "regimes": regimes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
