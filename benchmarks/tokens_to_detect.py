"""Tokens to detect: how many tokens of a watermarked text the detector needs before p ≤ α.

For each scheme configuration (``default`` = the shipped ``global-sketch``, ``count`` = the
paper's plain count sketch with its key-randomised p-value, ``unigram``), generate ``--n-texts``
watermarked texts of ``--gen-length`` tokens on the default model with one key, tokenize them with
the detector's tokenizer, and score every prefix of 16, 16 + ``--stride``, … tokens. A text's
tokens-to-detect is the shortest prefix with the scheme's reported p-value ≤ ``--alpha`` (the
definition of the benchmark harness); texts never detected count as +∞, so the median is
∞ when fewer than half are detected. The last line is one JSON object.

    python benchmarks/tokens_to_detect.py --n-texts 100
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import torch

from sketchwm.bench.presets import BASE_PRESETS, preset_config

#: the same configurations as the flooding benchmark
CONFIGS = {tag: preset_config(tag) for tag in BASE_PRESETS}


def tokens_to_detect(p_by_prefix: torch.Tensor, lengths: list[int]) -> list[float]:
    """Shortest prefix length with p ≤ α per text.

    Args:
        p_by_prefix: (L, B) bool, ``True`` where prefix ``lengths[l]`` of text ``b`` is detected.
        lengths: the L prefix lengths in tokens, increasing.
    Returns:
        B floats: the first detected prefix length, ``math.inf`` where none is.
    """
    first = p_by_prefix.int().argmax(dim=0)  # index of the first True (0 where none)
    lens = torch.tensor(lengths, dtype=torch.float64)[first]
    return torch.where(p_by_prefix.any(dim=0), lens, torch.tensor(math.inf, dtype=torch.float64)).tolist()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-texts", type=int, default=100, help="watermarked texts per configuration")
    ap.add_argument("--gen-length", type=int, default=128, help="tokens per generated text")
    ap.add_argument("--stride", type=int, default=8, help="prefix step in tokens")
    ap.add_argument("--alpha", type=float, default=0.01, help="p-value level that counts as detected")
    ap.add_argument("--schemes", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--seed", type=int, default=0, help="seed of the key and of generation")
    ap.add_argument("--batch-size", type=int, default=20, help="texts per generation batch")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from sketchwm.api import Watermarker
    from sketchwm.data import load_prompts
    from sketchwm.bench.seeds import bench_key

    t0 = time.perf_counter()
    prompts = load_prompts("prompts", args.n_texts)
    key = bench_key(str(args.seed), "key", 0)
    rows = []
    for tag in args.schemes:
        wm = Watermarker(key, CONFIGS[tag])
        gen = wm.generate(prompts, seed=args.seed, watermark=True, batch_size=args.batch_size, gen_length=args.gen_length)
        det = wm.detector(None, args.alpha)
        ids = det.tokenize(gen.texts)
        lengths = list(range(16, max(len(x) for x in ids) + 1, args.stride))
        hits = torch.zeros(len(lengths), len(ids), dtype=torch.bool)
        for li, L in enumerate(lengths):
            idx = [b for b, x in enumerate(ids) if len(x) >= L]
            if idx:
                r = det.detect_ids([ids[b][:L] for b in idx])
                hits[li, idx] = r.p_value <= args.alpha
        ttd = tokens_to_detect(hits, lengths)
        med = statistics.median(ttd)
        row = {"scheme": tag, "n_texts": len(ttd), "median_tokens_to_detect": med if math.isfinite(med) else None,
               "detected_by_full_text": sum(math.isfinite(t) for t in ttd) / len(ttd),
               "median_text_tokens": statistics.median(len(x) for x in ids)}
        rows.append(row)
        print(f"{tag:8s} median tokens to p≤{args.alpha}: {med}  detected by the full text: "
              f"{row['detected_by_full_text']:.2f}  median text length {row['median_text_tokens']}", file=sys.stderr)
    out = {"alpha": args.alpha, "stride": args.stride, "gen_length": args.gen_length, "rows": rows,
           "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
