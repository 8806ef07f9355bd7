"""Detection cost of ``global-sketch-green`` against the default ``global-sketch``, side by side.

Both schemes under one key score the same random token ids of the shipped model's vocabulary
(``score_ids``, the core every public detection path ends in), interleaved, median of
``--repeats`` runs after one warm-up each; prints tokens/s of each and the ratio. The two-channel
scheme's cost is its green channel's (a keyed hash of every (context, token) pair and its first
occurrence: a C pass per text where the optional extension is built, ``green_counts``) on top of
the sketch's, so the ratio says what the default (``global-sketch-green`` since 2026-11-27) costs
corpus-scale detection over the sketch alone (docs/statistics.md, "Two channels").

    python benchmarks/detect_cost_two_channels.py            # 2,048 texts × 256 tokens, 5 repeats
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sketchwm.api import Watermarker
from sketchwm.bench.seeds import DEFAULT_KEY_SEED, bench_key


def measure(n_texts: int, length: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """Median seconds of ``score_ids`` of each scheme on (n_texts, length) ids: returns
    ``{"global-sketch": tok/s, "global-sketch-green": tok/s, "ratio": slow-down}``."""
    key = bench_key(DEFAULT_KEY_SEED, "key", 0)  # a fixed public test key
    schemes = {name: Watermarker(key, {"scheme": {"name": name}}).scheme for name in ("global-sketch", "global-sketch-green")}
    V = next(iter(schemes.values())).vocab_size
    ids = torch.randint(1000, V, (n_texts, length), generator=torch.Generator().manual_seed(seed))
    valid = torch.ones_like(ids, dtype=torch.bool)
    times: dict[str, list[float]] = {name: [] for name in schemes}
    for s in schemes.values():  # warm-up (tables, caches)
        s.score_ids(ids, valid)
    for _ in range(repeats):
        for name, s in schemes.items():
            t = time.perf_counter()
            s.score_ids(ids, valid)
            times[name].append(time.perf_counter() - t)
    out = {name: ids.numel() / statistics.median(t) for name, t in times.items()}
    out["ratio"] = out["global-sketch"] / out["global-sketch-green"]
    return out


def main(argv: list[str] | None = None) -> None:
    """Print each scheme's detection throughput and the ratio (one run, interleaved)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-texts", type=int, default=2048)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    r = measure(a.n_texts, a.length, a.repeats)
    print(f"score_ids on {a.n_texts} x {a.length} ids: global-sketch {r['global-sketch']:.3g} tokens/s, "
          f"global-sketch-green {r['global-sketch-green']:.3g} tokens/s, ratio {r['ratio']:.1f}x")


if __name__ == "__main__":
    main()
