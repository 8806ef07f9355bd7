"""Detection throughput on pre-tokenised ids: the default scheme's bare score and full detection,
with ``unigram`` and ``red-green-dlm`` for reference, timed side by side.

Workload: ``--tokens`` (default 2^20 ≥ 10^6) token ids in texts of ``--length`` 256,
V = 126,464 (LLaDA's vocabulary), the default ``global-sketch`` (presence Count-Sketch d = 4,
w = 256, D = 1,024, ``exclude_top`` 300, fixed-key background null). The token prior is a Zipf
law over V (written to a temporary file so that ``exclude_top`` acts as with a real prior) and
the texts are drawn from it, so they repeat tokens as real text does.

* bare score: ``GlobalSketchScheme.background_z`` — the statistic z of every text.
* full detection: ``Detector.detect_batch`` — input checks, z, p-values, thresholds and decisions.

Usage: python benchmarks/perf_detect.py [--device cpu|cuda] [--threads 2] [--repeats 5]
Last line: {"tokens_per_s": <full>, "score_tokens_per_s": <bare>, ...}
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _perf import add_common_args, interleaved_medians, report, setup  # noqa: E402

from sketchwm.detection import Detector  # noqa: E402
from sketchwm.keys import WatermarkKey  # noqa: E402
from sketchwm.registry import get_registry  # noqa: E402


class _NoTokenizer:
    """Stands in for a tokenizer: the ids are already tokenised (only the fingerprint is read)."""

    def get_vocab(self) -> dict[str, int]:
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(ap, repeats=5)
    ap.add_argument("--tokens", type=int, default=1 << 20)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=126464)
    ap.add_argument("--no-baselines", action="store_true", help="time the default scheme only")
    args = ap.parse_args(argv)
    dev = setup(args)
    V, N = args.vocab, args.length
    B = max(1, args.tokens // N)
    rng = np.random.default_rng(0)
    prior = 1.0 / np.arange(1, V + 1) ** 1.1
    prior = prior[rng.permutation(V)]  # frequent ids spread over the vocabulary
    reg = get_registry()
    key = WatermarkKey(b"benchmark key, not a secret!!!!!")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prior.npy"
        np.save(path, prior * 1e9)
        scheme = reg.create("scheme", "global-sketch", {"prior": {"source": "file", "path": str(path)}}, key, V,
                            device=dev, registry=reg)
    ids = torch.from_numpy(rng.choice(V, size=(B, N), p=prior / prior.sum())).to(dev)  # (B, N) int64
    valid = torch.ones_like(ids, dtype=torch.bool)
    det = Detector(scheme, _NoTokenizer(), "benchmark", alpha=0.01)
    fns = {
        "score": lambda: scheme.background_z(ids, valid),
        "detect": lambda: det.detect_batch(ids, valid),
    }
    if not args.no_baselines:
        for name in ("unigram", "red-green-dlm"):
            d = Detector(reg.create("scheme", name, {}, key, V, device=dev), _NoTokenizer(), "benchmark", alpha=0.01)
            fns[name] = (lambda d=d: d.detect_batch(ids, valid))
    n_tok = B * N
    ms = interleaved_medians(fns, args.repeats, dev)
    tps = {k: round(n_tok / (v / 1e3), -3) for k, v in ms.items()}
    res = {"tokens_per_s": tps["detect"], "score_tokens_per_s": tps["score"],
           "unigram_tokens_per_s": tps.get("unigram"), "red_green_dlm_tokens_per_s": tps.get("red-green-dlm"),
           "tokens": n_tok, "texts": B, "length": N, "V": V, "D": scheme.sketch.dim, "device": str(dev),
           "threads": torch.get_num_threads(), "repeats": args.repeats, "median_ms": ms}
    report([f"{k:>14}: {ms[k]:9.2f} ms  {tps[k]:.3g} tokens/s" for k in fns], res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
