"""The generation spoofer against the default's sketch-family spread test, on the development split.

The generation spoofer (Jovanović, Staab & Vechev 2024; ``WatermarkStealer.spoof``) learns per-token
and per-context boosts from N watermarked texts of the default and writes new texts with the
unwatermarked model and those boosts. Its texts favour every member of the default's key family by
about the same amount, with a spread over members wider than the unit noise that the default's
``spread: normal`` test assumes. This script measures, on the *same* forged texts, how the default's
detection flags them under each spread test of ``global-sketch-family`` (module doc of
:mod:`sketchwm_builtin.key_family`), and what each test costs on genuine watermarked texts:

* ``normal``: the unit-noise contrast (the default);
* ``student-M``: the studentised contrast with M decoy keys pooled into the spread (ν = K − 2 + M − 1).

Detection is a function of the text and the key only, so every rule reads the same texts: N
watermarked texts of the default (``mdlm-random-t1``: one block, random order, T = 1, 128 tokens,
``--steps`` steps) under one victim key and N unwatermarked ones (the thief's reference), the
stealer fitted on both, ``--n-spoof`` spoofed texts (δ = ``--delta``) from prompts the corpus never
used. Per rule: the spoof rate at p ≤ 0.01 under the victim key with its exact (Clopper-Pearson) 95%
interval, which channel decides each flagged forgery (``channels`` of the detection), the rate under
``--unrelated`` keys unrelated to the victim, and TPR at p ≤ 0.01 on the first ``--n-tpr`` genuine
texts and on their first 32 and 64 tokens. Prompts: ``prompts-development`` (the scorecard never
reads them); the corpus cycles the first 480 of them with a new seed per pass, the spoofer writes
from the last 50. Keys derive from :func:`sketchwm.bench.seeds.bench_key` and are never printed.

Texts are cached as JSONL under ``--cache`` (resumable). Writes ``results.json`` and ``table.md``
under ``--out``.

    python benchmarks/spoofer_spread_dev.py --n 1000 --n-spoof 50
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from sketchwm.bench.seeds import bench_key, derive_seed
from sketchwm.data import load_prompts
from sketchwm.detection import Detector
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.registry import get_registry

#: rule name → the default's ``family`` params that set its spread test
RULES: dict[str, dict] = {
    "normal": {"spread": "normal", "decoys": 0},
    "student-0": {"spread": "student", "decoys": 0},
    "student-16": {"spread": "student", "decoys": 16},
    "student-32": {"spread": "student", "decoys": 32},
}
CORPUS_PROMPTS, SPOOF_PROMPTS = 480, 50


def _sampler(length: int, steps: int) -> dict:
    """``mdlm-random-t1``: one block, random order, T = 1, no nucleus filter."""
    return {"gen_length": length, "block_length": length, "steps": steps, "remasking": "random",
            "temperature": 1.0, "top_p": 1.0}


def corpus(path: Path, n: int, backend, scheme, cfg: dict, batch: int, tag: str) -> list[list[int]]:
    """``n`` texts' ids (resumable JSONL at ``path``): the first 480 development prompts cycled, one seed per batch."""
    done = [json.loads(x)["ids"] for x in path.read_text().splitlines()] if path.exists() else []
    prompts = load_prompts("prompts-development", CORPUS_PROMPTS)
    with path.open("a") as fh:
        for b0 in range(len(done), n, batch):
            t0 = time.perf_counter()
            chunk = [prompts[i % CORPUS_PROMPTS] for i in range(b0, min(n, b0 + batch))]
            gen = torch.Generator().manual_seed(derive_seed(0, "spoofer-spread-dev", tag, b0))
            out = MaskedDiffusionSampler(backend, cfg, scheme).generate(chunk, gen)
            for j in range(len(chunk)):
                fh.write(json.dumps({"ids": out.ids[j, : int(out.lengths[j])].tolist()}) + "\n")
            fh.flush()
            print(f"[{tag}] {b0 + len(chunk)}/{n} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return [json.loads(x)["ids"] for x in path.read_text().splitlines()][:n]


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Exact 95% interval of a binomial rate k/n."""
    from scipy.stats import beta

    return (float(beta.ppf(0.025, k, n - k + 1)) if k else 0.0, float(beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="stolen watermarked texts (and as many unwatermarked)")
    ap.add_argument("--n-spoof", type=int, default=SPOOF_PROMPTS)
    ap.add_argument("--delta", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--n-tpr", type=int, default=200)
    ap.add_argument("--unrelated", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(Path(os.environ.get("SKETCHWM_CACHE_DIR") or Path.home() / ".cache" / "sketchwm")
                                           / "spoofer_spread_dev"))
    ap.add_argument("--out", default="benchmarks/results/spoofer_spread_dev")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    reg = get_registry()
    be = reg.create("backend", "default", {"device": "cpu"})
    key = bench_key("spoofer-spread-dev", "key", 0)
    cache = Path(args.cache) / f"{key.fingerprint[:12]}-L{args.length}s{args.steps}"
    cache.mkdir(parents=True, exist_ok=True)
    cfg = _sampler(args.length, args.steps)
    default = reg.create("scheme", "global-sketch-green", {}, key, be.vocab_size, device="cpu")
    wm = corpus(cache / "watermarked.jsonl", args.n, be, default, cfg, args.batch, "watermarked")
    ref = corpus(cache / "unwatermarked.jsonl", args.n, be, None, cfg, args.batch, "unwatermarked")
    stealer = reg.create("attack", "steal-scrub", None, backend=be, watermarked_texts=[be.decode(x) for x in wm],
                         reference_texts=[be.decode(x) for x in ref]).stealer
    spoof_prompts = load_prompts("prompts-development", args.n_spoof, offset=CORPUS_PROMPTS)
    out = stealer.spoof(be, spoof_prompts, torch.Generator().manual_seed(derive_seed(0, "spoofer-spread-dev", "spoof")),
                        delta=args.delta, sampler_config=cfg)
    forged = [out.ids[j, : int(out.lengths[j])].tolist() for j in range(len(spoof_prompts))]
    rows = {}
    for rule, fam in RULES.items():
        params = {"family": fam}
        det = Detector(reg.create("scheme", "global-sketch-green", params, key, be.vocab_size, device="cpu"), be.tokenizer,
                       "default", alpha=0.01)
        r = det.detect_ids(forged, per_item=True)
        flagged = (r.p_value.numpy() <= 0.01)
        ch = {name: p.numpy() for name, (p, _) in (r.channels or {}).items()}
        decided = {name: int(np.sum(flagged & (v <= 0.01))) for name, v in ch.items()}
        unrel = []
        for j in range(args.unrelated):
            uk = bench_key("spoofer-spread-dev", "unrelated-key", 0, j)
            du = Detector(reg.create("scheme", "global-sketch-green", params, uk, be.vocab_size, device="cpu"), be.tokenizer,
                          "default", alpha=0.01)
            unrel.append(float(np.mean(du.detect_ids(forged, per_item=True).p_value.numpy() <= 0.01)))
        k = int(flagged.sum())
        tpr = {}
        for cut in (32, 64, args.length):
            p = det.detect_ids([x[:cut] for x in wm[: args.n_tpr]], per_item=True).p_value.numpy()
            kk = int(np.sum(p <= 0.01))
            tpr[str(cut)] = [kk / len(p), *clopper_pearson(kk, len(p)), len(p)]
        rows[rule] = {"spoof_rate": k / len(forged), "spoof_ci": clopper_pearson(k, len(forged)), "n_spoof": len(forged),
                      "flagged_channel_p_le_alpha": decided, "unrelated_mean": float(np.mean(unrel)),
                      "unrelated_max": float(np.max(unrel)), "tpr": tpr}
        print(rule, json.dumps(rows[rule]), flush=True)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    cmd = "python benchmarks/spoofer_spread_dev.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"Development split, default model, `mdlm-random-t1`, {args.length} tokens, {args.steps} steps; generation spoofer "
             f"(δ = {args.delta}) fitted on N = {args.n} watermarked and {args.n} unwatermarked texts, {len(forged)} forgeries; "
             f"rates at p ≤ 0.01 with exact 95% intervals. Command: `{cmd.strip()}`", "",
             "| spread test | spoof rate | flagged with the channel at p ≤ .01 | unrelated keys (mean, max) | TPR 32 tokens | TPR 64 | "
             f"TPR {args.length} |", "|---|---|---|---|---|---|---|"]
    for rule, r in rows.items():
        t = r["tpr"]
        lines.append(f"| {rule} | {r['spoof_rate']:.3f} [{r['spoof_ci'][0]:.3f}, {r['spoof_ci'][1]:.3f}] ({r['n_spoof']}) | "
                     + ", ".join(f"{c} {v}" for c, v in r["flagged_channel_p_le_alpha"].items())
                     + f" | {r['unrelated_mean']:.3f}, {r['unrelated_max']:.3f} | "
                     + " | ".join(f"{t[c][0]:.3f} [{t[c][1]:.3f}, {t[c][2]:.3f}] ({t[c][3]})" for c in ("32", "64", str(args.length)))
                     + " |")
    (outdir / "table.md").write_text("\n".join(lines) + "\n")
    (outdir / "results.json").write_text(json.dumps({"command": cmd.strip(), "rows": rows}, indent=1) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
