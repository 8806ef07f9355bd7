"""Fixed-key null: per key, the fraction of human passages with p ≤ 0.01 and p ≤ 0.05 (and p ≤ 0.001 in the JSON line).

A detector's p-value promises P(p ≤ α) ≤ α on text written without the key, *for the key the user
holds*. This script checks that promise key by key, on the two held-out human domains shipped in
``sketchwm.data`` (``heldout-manpages``, ``heldout-culture``: sources disjoint from the default
model's corpus and from the token prior; nothing was fitted on them), for each scheme configuration:

* ``default`` — the shipped default, :data:`sketchwm.config.DEFAULT_SCHEME` (``global-sketch-green``:
  the presence sketch's background null, a context-keyed green channel and a keyed-sampling channel,
  weighted Bonferroni over the three);
* ``sketch`` — ``global-sketch`` alone (presence sketch, background null; the default's sketch channel);
* ``count`` — the paper's plain count sketch with its key-randomised exact p-value;
* ``unigram`` — the Unigram baseline (exact hypergeometric p-value under a random key);
* ``dmark`` — DMark's KGW detector (exact binomial on distinct (context, token) pairs);
* ``gumbel-position`` — the position-seeded Gumbel-max detector (exact Gamma(n, 1) tail);
* ``family`` — ``global-sketch-family``, the default's defence against stealing (16 member keys,
  Bonferroni family test and the studentised spread test with 32 decoy keys; its p-value is never
  below the family test's, so ``--params '{"family": {"spread_test": false}}'`` measures a bound
  that holds for every spread test);
* ``green`` — ``global-sketch-green`` with ``sampling: free``: the default's sketch and green
  channels without the keyed-sampling one, Bonferroni over the two channels' p-values;
* ``red-green-dlm`` — the red-green DLM baseline (exact binomial on distinct (hash, token) pairs);
* ``aar-gumbel`` — Aaronson's Gumbel-max detector, context {−1} (exact Gamma(n, 1) tail on distinct
  (hash, token) pairs): the default's keyed-sampling channel alone (under the key itself, not the
  default's subkey; per key the two are draws of the same kind).

The last six are run only when named (e.g. ``--schemes dmark gumbel-position family``).

Keys are fresh random keys (``secrets``) unless ``--seed`` is given (keys then are the
harness's keys of that key seed, ``sketchwm.bench.seeds.bench_key``, for a reproducible draw). Texts are tokenised once with the default model's tokenizer;
passages shorter than ``--min-tokens`` are skipped. The last line is one JSON object.

    python benchmarks/null_per_key.py --n-keys 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from sketchwm.bench.presets import BASE_PRESETS, SCHEME_PRESETS

DOMAINS = ("heldout-manpages", "heldout-culture")


def keys_for(n: int, seed: int | None) -> list:
    """``n`` watermark keys: fresh random ones, or the harness's keys 0..n−1 of key seed ``seed``."""
    from sketchwm.bench.seeds import bench_key
    from sketchwm.keys import WatermarkKey

    if seed is None:
        return [WatermarkKey.generate() for _ in range(n)]
    return [bench_key(str(seed), "key", i) for i in range(n)]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-keys", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="derive keys from this seed (default: fresh random keys)")
    ap.add_argument("--domains", nargs="+", default=list(DOMAINS))
    ap.add_argument("--schemes", nargs="+", default=list(BASE_PRESETS), choices=list(SCHEME_PRESETS))
    ap.add_argument("--params", default="{}", help="JSON: extra params per scheme tag, merged over the tag's params")
    ap.add_argument("--max-texts", type=int, default=0, help="use at most this many passages per domain (0: all)")
    ap.add_argument("--min-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from sketchwm.data import load
    from sketchwm.detection import pad_ids
    from sketchwm.default_model import MODEL_DIR
    from sketchwm.registry import get_registry
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    V = len(tok)
    extra = json.loads(args.params)
    reg = get_registry()
    texts = {}
    for dom in args.domains:
        t = load(dom)
        if args.max_texts:
            t = t[: args.max_texts]
        ids = [x for x in (tok.encode(s, add_special_tokens=False) for s in t) if len(x) >= args.min_tokens]
        texts[dom] = pad_ids(ids)
    keys = keys_for(args.n_keys, args.seed)
    rows = []
    t0 = time.perf_counter()
    for tag in args.schemes:
        name, params = SCHEME_PRESETS[tag]
        params = {**params, **extra.get(tag, {})}
        for ki, key in enumerate(keys):
            scheme = reg.create("scheme", name, params, key, V)
            for dom, (ids, valid) in texts.items():
                p = scheme.score_ids(ids, valid).p_value.double()
                rows.append({"scheme": tag, "key": ki, "domain": dom, "n": int(p.numel()),
                             "fpr_001": float((p <= 0.001).double().mean()),
                             "fpr_01": float((p <= 0.01).double().mean()), "fpr_05": float((p <= 0.05).double().mean())})
    summary = {}
    print(f"{'scheme':15s} {'domain':18s} {'n':>5s}  {'P(p<=.01) max / mean':>22s}  {'P(p<=.05) max / mean':>22s}")
    for tag in args.schemes:
        for dom in texts:
            sel = [r for r in rows if r["scheme"] == tag and r["domain"] == dom]
            f1 = np.array([r["fpr_01"] for r in sel]); f5 = np.array([r["fpr_05"] for r in sel])
            f01 = np.array([r["fpr_001"] for r in sel])  # small α: about one passage per key at 1,100
            summary[f"{tag}/{dom}"] = {"n_texts": sel[0]["n"], "n_keys": len(sel),
                                       "max_01": round(float(f1.max()), 4), "mean_01": round(float(f1.mean()), 4),
                                       "max_05": round(float(f5.max()), 4), "mean_05": round(float(f5.mean()), 4),
                                       "max_001": round(float(f01.max()), 5), "mean_001": round(float(f01.mean()), 5)}
            s = summary[f"{tag}/{dom}"]
            print(f"{tag:15s} {dom:18s} {s['n_texts']:5d}  {100 * s['max_01']:9.2f}% / {100 * s['mean_01']:5.2f}%  "
                  f"   {100 * s['max_05']:9.2f}% / {100 * s['mean_05']:5.2f}%")
    out = {"n_keys": args.n_keys, "seed": args.seed, "seconds": round(time.perf_counter() - t0, 1), "summary": summary}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
