"""Compare every registered watermark scheme on the default backend (issue 4, "Must show").

For each scheme (the global sketch watermark and the baselines), on the same prompts, the same
sampler settings and the same sampling seeds:

* ``tpr_at_1pct_fpr`` — fraction of watermarked texts whose ``score`` exceeds τ, the 99% quantile
  of the scheme's ``score`` over the unwatermarked texts (threshold calibrated on unwatermarked
  samples; ``fpr_at_tau`` is the resulting empirical false-positive rate on those samples);
* ``tpr_at_p01`` / ``fpr_at_p01`` — the same decisions from the scheme's own p-value at α = 0.01;
* ``median_p`` (watermarked), ``median_p_null`` (unwatermarked), ``mean_z``;
* ``ppl_median`` / ``ppl_ratio`` — oracle perplexity (:class:`sketchwm.oracle.OracleLM`, when
  installed) of the watermarked texts, and its ratio to the unwatermarked texts' median;
* ``distinct_2`` / ``seq_rep_4`` — mean distinct-2 and seq-rep-4 over texts (:mod:`sketchwm.quality`):
  perplexity rewards repetitive text, so a low ``ppl_ratio`` with a high ``seq_rep_4`` is degeneration,
  not fluency;
* ``detect_texts_per_s`` — detection throughput (``score_ids`` on watermarked + unwatermarked ids);
* ``gen_s_per_text`` — generation time.

Writes one long CSV (scheme, backend, metric, value, n, seed, config_hash, version) and prints the
wide table (a pivot of it). Example::

    python benchmarks/compare_schemes.py --n-prompts 100 --gen-length 128 --threads 1

Strengths are each scheme's defaults (δ = 2 for the KGW family and Unigram, δ = 0.5 for the sketch;
AAR and KTH are distortion-free); ``--params`` overrides them per scheme, e.g.
``--params '{"kth-exp-edit": {"window": "free"}, "unigram": {"delta": 1.5}}'``. A scheme may be
listed more than once under tagged names ``NAME#TAG`` (e.g. ``--schemes global-sketch#d0.25,unigram
--params '{"global-sketch#d0.25": {"delta": 0.25}}'``) to sweep a strength in one run.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from sketchwm.config import config_hash
from sketchwm.data import load_prompts
from sketchwm.engine import MaskedDiffusionSampler
from sketchwm.keys import WatermarkKey
from sketchwm.quality import repetition_report
from sketchwm.registry import get_registry

#: Benchmark-specific params (on top of each scheme's defaults).
BENCH_PARAMS: dict[str, dict[str, Any]] = {}
#: Metrics and whether higher is better (the printed table's sort direction).
METRICS: dict[str, bool] = {
    "tpr_at_1pct_fpr": True, "fpr_at_tau": False, "tpr_at_p01": True, "fpr_at_p01": False, "median_p": False,
    "median_p_null": True, "mean_z": True, "ppl_median": False, "ppl_ratio": False, "distinct_2": True,
    "seq_rep_4": False, "detect_texts_per_s": True,
    "gen_s_per_text": False,
}


def generate(backend, cfg: dict, scheme, prompts: list[str], batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, list[str], float]:
    """Generate in batches with per-batch seeds → ids (n, G), valid (n, G), texts, seconds."""
    sampler = MaskedDiffusionSampler(backend, cfg, scheme)
    ids, valid, texts = [], [], []
    t0 = time.perf_counter()
    for k, start in enumerate(range(0, len(prompts), batch_size)):
        gen = torch.Generator(device=backend.device).manual_seed(seed * 100003 + k)
        out = sampler.generate(prompts[start:start + batch_size], gen)
        G = out.ids.shape[1]
        ids.append(out.ids)
        valid.append(torch.arange(G)[None, :] < out.lengths[:, None])
        texts.extend(out.texts)
    return torch.cat(ids), torch.cat(valid), texts, time.perf_counter() - t0


def score(scheme, ids: torch.Tensor, valid: torch.Tensor, batch_size: int):
    """score_ids in batches → (score, z, p) float64 tensors and seconds."""
    parts = []
    t0 = time.perf_counter()
    for start in range(0, ids.shape[0], batch_size):
        parts.append(scheme.score_ids(ids[start:start + batch_size], valid[start:start + batch_size]))
    dt = time.perf_counter() - t0
    cat = lambda f: torch.cat([getattr(s, f) for s in parts]).double()  # noqa: E731
    return cat("score"), cat("z"), cat("p_value"), parts[0].p_value_method, dt


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write the long table (one row per scheme × metric)."""
    from sketchwm.io import atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, newline="") as fh:  # a failed run never truncates earlier results
        w = csv.DictWriter(fh, fieldnames=["scheme", "backend", "metric", "value", "n", "seed", "config_hash", "version"])
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-prompts", type=int, default=100)
    ap.add_argument("--gen-length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=None, help="denoising steps (default: the backend's shipped sampler)")
    ap.add_argument("--block-length", type=int, default=None, help="semi-AR block length (default: the backend's)")
    ap.add_argument("--batch-size", type=int, default=10)
    ap.add_argument("--backend", default="default")
    ap.add_argument("--schemes", default="", help="comma-separated scheme names (default: every registered scheme)")
    ap.add_argument("--params", default="{}", help="JSON {scheme: {param: value}} overriding the defaults")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads (1 is fastest on a busy CPU)")
    ap.add_argument("--no-oracle", action="store_true", help="skip oracle perplexity")
    ap.add_argument("--out", default="benchmarks/out/compare_schemes.csv")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    reg = get_registry()
    names = [s for s in args.schemes.split(",") if s] or reg.names("scheme")
    overrides = json.loads(args.params)
    backend = reg.create("backend", args.backend)
    G = args.gen_length
    cfg: dict[str, Any] = {"gen_length": G}
    if args.steps:
        cfg["steps"] = args.steps
    if args.block_length:
        cfg["block_length"] = args.block_length
    sampler_cfg = MaskedDiffusionSampler(backend, cfg).config.model_dump()
    prompt_source = "sketchwm.data:prompts"
    prompts = load_prompts("prompts", args.n_prompts)
    key = WatermarkKey(hashlib.sha256(f"sketchwm/benchmarks/compare_schemes/{args.seed}".encode()).digest())
    try:
        import importlib.metadata

        version = importlib.metadata.version("sketchwm")
    except Exception:  # noqa: BLE001 - not installed: record unknown
        version = "unknown"
    print(f"backend {backend.model_id} | {len(prompts)} prompts ({prompt_source}) x {G} tokens | sampler {sampler_cfg}", flush=True)

    null_ids, null_valid, null_texts, null_s = generate(backend, cfg, None, prompts, args.batch_size, args.seed)
    print(f"unwatermarked: {null_s / len(prompts):.2f} s/text", flush=True)

    oracle, oracle_note = None, ""
    if not args.no_oracle:
        try:
            from sketchwm.oracle import OracleLM

            oracle = OracleLM(threads=args.threads)
        except Exception as exc:  # noqa: BLE001 - the oracle is optional (another package)
            oracle_note = f"oracle perplexity skipped: {exc}"
            print(oracle_note, flush=True)
    else:
        oracle_note = "oracle perplexity skipped (--no-oracle)"
    null_ppl = None
    if oracle is not None:
        null_ppl = torch.tensor(oracle.perplexity(null_texts), dtype=torch.float64)

    rows: list[dict[str, Any]] = []
    out = Path(args.out)

    def emit(scheme_name: str, metric: str, value: float, n: int, chash: str) -> None:
        rows.append({"scheme": scheme_name, "backend": backend.model_id, "metric": metric, "value": float(value),
                     "n": int(n), "seed": args.seed, "config_hash": chash, "version": version})

    base_hash = config_hash({"sampler": sampler_cfg, "backend": backend.model_id, "prompts": prompt_source, "n": len(prompts)})
    if null_ppl is not None:
        emit("unwatermarked", "ppl_median", float(null_ppl.nanmedian()), len(prompts), base_hash)
    emit("unwatermarked", "gen_s_per_text", null_s / len(prompts), len(prompts), base_hash)
    null_rep = repetition_report(null_ids, null_valid)
    for metric in ("distinct_2", "seq_rep_4"):
        emit("unwatermarked", metric, null_rep[metric], len(prompts), base_hash)
    write_csv(out, rows)

    for name in names:
        base_name = name.split("#", 1)[0]
        params = {**BENCH_PARAMS.get(base_name, {}), **overrides.get(base_name, {}), **overrides.get(name, {})}
        scheme = reg.create("scheme", base_name, params, key, backend.vocab_size)
        chash = config_hash({"scheme": scheme.describe(), "sampler": sampler_cfg, "backend": backend.model_id,
                             "prompts": prompt_source, "n": len(prompts)})
        ids, valid, texts, gen_s = generate(backend, cfg, scheme, prompts, args.batch_size, args.seed)
        s_wm, z_wm, p_wm, method, t_wm = score(scheme, ids, valid, args.batch_size)
        s_null, _, p_null, _, t_null = score(scheme, null_ids, null_valid, args.batch_size)
        n = len(prompts)
        tau = float(torch.quantile(s_null, 0.99))
        emit(name, "tpr_at_1pct_fpr", float((s_wm > tau).double().mean()), n, chash)
        emit(name, "fpr_at_tau", float((s_null > tau).double().mean()), n, chash)
        emit(name, "tpr_at_p01", float((p_wm <= 0.01).double().mean()), n, chash)
        emit(name, "fpr_at_p01", float((p_null <= 0.01).double().mean()), n, chash)
        emit(name, "median_p", float(p_wm.median()), n, chash)
        emit(name, "median_p_null", float(p_null.median()), n, chash)
        emit(name, "mean_z", float(z_wm.mean()), n, chash)
        emit(name, "detect_texts_per_s", 2 * n / max(t_wm + t_null, 1e-9), 2 * n, chash)
        emit(name, "gen_s_per_text", gen_s / n, n, chash)
        rep = repetition_report(ids, valid)
        for metric in ("distinct_2", "seq_rep_4"):
            emit(name, metric, rep[metric], n, chash)
        if oracle is not None:
            ppl = torch.tensor(oracle.perplexity(texts), dtype=torch.float64)
            emit(name, "ppl_median", float(ppl.nanmedian()), n, chash)
            emit(name, "ppl_ratio", float(ppl.nanmedian() / null_ppl.nanmedian()), n, chash)
        print(f"{name}: done ({gen_s / n:.2f} s/text to generate; p-value: {method})", flush=True)
        write_csv(out, rows)  # after every scheme, so a long run keeps what it has finished

    # wide table: a pivot of the long one
    schemes = ["unwatermarked"] + names
    metrics = [m for m in METRICS if any(r["metric"] == m for r in rows)]
    table = {(r["scheme"], r["metric"]): r["value"] for r in rows}
    width = max(len(s) for s in schemes) + 2
    print("\n" + "scheme".ljust(width) + "".join(m.rjust(19) for m in metrics))
    for s in sorted(schemes, key=lambda s: (s != "unwatermarked", -table.get((s, "tpr_at_1pct_fpr"), 0.0))):
        cells = "".join((f"{table[(s, m)]:.4g}" if (s, m) in table else "-").rjust(19) for m in metrics)
        print(s.ljust(width) + cells)
    print(f"\n(higher is better: {', '.join(m for m in metrics if METRICS[m])}; lower is better: "
          f"{', '.join(m for m in metrics if not METRICS[m])})")
    if oracle_note:
        print(oracle_note)
    print(f"wrote {len(rows)} rows to {out}")
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        summary.setdefault(r["scheme"], {})[r["metric"]] = r["value"]
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
