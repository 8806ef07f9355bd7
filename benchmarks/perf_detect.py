"""Detection throughput: the scoring core on pre-tokenised ids and the public paths users call, side by side.

Ids (timed side by side, medians):

Workload: ``--tokens`` (default 2^20 ≥ 10^6) token ids in texts of ``--length`` 256,
V = 126,464 (LLaDA's vocabulary), the default scheme (:data:`sketchwm.config.DEFAULT_SCHEME`,
``global-sketch-green``: its sketch channel a presence Count-Sketch d = 4, w = 256, D = 1,024,
``exclude_top`` 300, fixed-key background null; its green channel context-keyed lists, exact
binomial) and, side by side, ``global-sketch`` alone (the default's sketch channel). The token prior is a Zipf
law over V (written to a temporary file so that ``exclude_top`` acts as with a real prior) and
the texts are drawn from it, so they repeat tokens as real text does.

* bare score: the scheme's ``score_ids`` — statistics and p-values of every text.
* full detection: ``Detector.detect_batch`` — input checks, z, p-values, thresholds and decisions.
* ``detect_ids`` on lists: ``Detector.detect_ids`` on the same ids as B Python lists (the public ids
  API: flattening, checks, padding, scoring); printed with its ratio to ``detect_batch``.
* ``global-sketch`` / ``global-sketch lists``: ``detect_batch`` and ``detect_ids`` of the sketch alone.

Texts (``--text-mb`` MB of the shipped human passages, shuffled and repeated as in
``perf_detect_stream.py``; the default model's WordPiece tokenizer, V = 30,522; the default scheme;
timed round-robin over ``--repeats`` rounds, medians; throughput in MB/s of the texts' UTF-8 bytes):

* tokenizer: the transformers fast tokenizer batch-encoding the texts,
  ``tokenizer(batch, add_special_tokens=False)`` in batches of 4,096, with its Rust thread pool
  (``TOKENIZERS_PARALLELISM=true``) — the limit for text input; and its Rust backend's
  ``encode_batch_fast`` alone, the stricter floor;
* ``Watermarker.detect(texts, per_item=True)``;
* ``sketchwm detect --input FILE.jsonl --out OUT.jsonl`` and ``--input FILE.parquet --out
  OUT.parquet``: a fresh process each, start-up included (imports, tokenizer, scheme tables); and
  the same command on the first record alone, its start-up.

Each text path is printed with its ratio to the tokenizer (and to ``encode_batch_fast``), all from
the same run; the command's lines also less its start-up (the per-byte rate of a long input).

Usage: python benchmarks/perf_detect.py [--device cpu|cuda] [--threads 2] [--repeats 5] [--text-mb 16]
Last line: {"tokens_per_s": <full>, "score_tokens_per_s": <bare>, "lists_tokens_per_s": ..., "text": {...}, ...}
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")  # before tokenizers is imported: the tokenizer's own batch parallelism

import numpy as np
import torch

from sketchwm.bench.perf import (add_common_args, build_input, interleaved, interleaved_medians, report,  # noqa: E402
                                 setup, zipf_workload)
from sketchwm.bench.seeds import bench_key  # noqa: E402
from sketchwm.config import DEFAULT_SCHEME  # noqa: E402
from sketchwm.detection import Detector  # noqa: E402
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
    ap.add_argument("--text-mb", type=float, default=16.0, help="MB of text for the text paths (0: ids only)")
    ap.add_argument("--text-repeats", type=int, default=3, help="rounds of the text paths (each runs the whole input)")
    args = ap.parse_args(argv)
    dev = setup(args)
    V, N = args.vocab, args.length
    B = max(1, args.tokens // N)
    prior, ids = zipf_workload(V, B, N, seed=0)  # (V,) law, frequent ids spread over the vocabulary; (B, N) ids
    reg = get_registry()
    key = bench_key("perf-detect", "key", 0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prior.npy"
        np.save(path, prior * 1e9)
        prior_file = {"prior": {"source": "file", "path": str(path)}}
        # the default (DEFAULT_SCHEME: global-sketch-green, whose sketch channel takes the prior) and
        # global-sketch alone, its sketch channel, side by side
        scheme = reg.create("scheme", DEFAULT_SCHEME, {"sketch": prior_file} if DEFAULT_SCHEME == "global-sketch-green"
                            else prior_file, key, V, device=dev, registry=reg)
        sketch_only = reg.create("scheme", "global-sketch", prior_file, key, V, device=dev, registry=reg)
    ids = ids.to(dev)  # (B, N) int64
    valid = torch.ones_like(ids, dtype=torch.bool)
    det = Detector(scheme, _NoTokenizer(), "benchmark", alpha=0.01)
    lists = ids.cpu().tolist()  # B Python lists of N ids
    det_sketch = Detector(sketch_only, _NoTokenizer(), "benchmark", alpha=0.01)
    fns = {
        "score": lambda: scheme.score_ids(ids, valid),
        "detect": lambda: det.detect_batch(ids, valid),
        "detect_ids lists": lambda: det.detect_ids(lists),
        "global-sketch": lambda: det_sketch.detect_batch(ids, valid),
        "global-sketch lists": lambda: det_sketch.detect_ids(lists),
    }
    if not args.no_baselines:
        for name in ("unigram", "red-green-dlm"):
            d = Detector(reg.create("scheme", name, {}, key, V, device=dev), _NoTokenizer(), "benchmark", alpha=0.01)
            fns[name] = (lambda d=d: d.detect_batch(ids, valid))
    n_tok = B * N
    ms = interleaved_medians(fns, args.repeats, dev)
    tps = {k: round(n_tok / (v / 1e3), -3) for k, v in ms.items()}
    lines = [f"{k:>16}: {ms[k]:9.2f} ms  {tps[k]:.3g} tokens/s" for k in fns]
    lines.append(f"detect_ids on lists / detect_batch on the same ids: {tps['detect_ids lists'] / tps['detect']:.2f}")
    res = {"tokens_per_s": tps["detect"], "score_tokens_per_s": tps["score"], "lists_tokens_per_s": tps["detect_ids lists"],
           "lists_over_batch": round(tps["detect_ids lists"] / tps["detect"], 3),
           "unigram_tokens_per_s": tps.get("unigram"), "red_green_dlm_tokens_per_s": tps.get("red-green-dlm"),
           "scheme": scheme.name, "global_sketch_tokens_per_s": tps["global-sketch"],
           "global_sketch_lists_tokens_per_s": tps["global-sketch lists"],
           "tokens": n_tok, "texts": B, "length": N, "V": V, "D": sketch_only.sketch.dim, "device": str(dev),
           "threads": torch.get_num_threads(), "repeats": args.repeats, "median_ms": ms,
           "better": {k: "higher" for k in ("tokens_per_s", "score_tokens_per_s", "lists_tokens_per_s",
                                            "global_sketch_tokens_per_s", "global_sketch_lists_tokens_per_s")}}
    lines.append(f"must show: detect_ids on lists {tps['detect_ids lists']:.3g} tokens/s (target >= 5e7), "
                 f"{tps['detect_ids lists'] / tps['detect']:.2f}x detect_batch (target >= 0.25)")
    if args.text_mb > 0:
        text_lines, res["text"] = text_paths(args.text_mb, args.text_repeats)
        lines += text_lines
        r = res["text"]["ratio_to_tokenizer"]
        lines.append("must show: " + ", ".join(f"{k} {r[k]:.2f}x tokenizer" for k in
                                               ("Watermarker.detect", "sketchwm detect jsonl", "sketchwm detect parquet"))
                     + f" (target >= 0.7 each; start-up {res['text']['startup_s']:.2f} s included, same run)")
    res["load_average"] = [round(x, 2) for x in os.getloadavg()]  # timings are from a shared machine: say how busy
    lines.append(f"load average (1, 5, 15 min) at the end: {res['load_average']}, {os.cpu_count()} CPUs")
    report(lines, res)
    return 0


def text_paths(text_mb: float, repeats: int) -> tuple[list[str], dict]:
    """The text paths of the module docstring on ``text_mb`` MB of human passages: (lines, figures)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer

    from sketchwm.api import Watermarker

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "plugins"), str(root / "attacks"),
                                                        os.environ.get("PYTHONPATH", "")]))
    with tempfile.TemporaryDirectory(prefix="sketchwm-perf-detect-") as tmp:
        tmp = Path(tmp)
        jsonl, parquet = tmp / "texts.jsonl", tmp / "texts.parquet"
        build_input(jsonl, int(text_mb * 1e6))
        import json

        recs = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines()]
        texts = [r["text"] for r in recs]
        pq.write_table(pa.table({"text": texts, "i": [r["i"] for r in recs]}), parquet)
        mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        key = tmp / "bench.key"
        key.write_text(os.urandom(32).hex() + "\n")
        key.chmod(0o600)
        wm = Watermarker(str(key))
        tok = wm.backend.tokenizer
        rust = Tokenizer.from_str(tok.backend_tokenizer.to_str())
        rust.no_truncation()
        rust.no_padding()
        batches = [texts[i : i + 4096] for i in range(0, len(texts), 4096)]
        cli = [sys.executable, "-m", "sketchwm.cli", "detect", "--key", str(key), "--quiet"]

        def run_cli(inp: Path, out: Path) -> None:
            r = subprocess.run(cli + ["--input", str(inp), "--out", str(out)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=3600)
            if r.returncode != 0:
                raise SystemExit(f"sketchwm detect failed ({r.returncode}): {r.stderr.decode()[-800:]}")

        one = tmp / "one.jsonl"  # the first record alone: the command's start-up
        one.write_text(jsonl.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
        fns = {
            "tokenizer": lambda: [tok(b, add_special_tokens=False)["input_ids"] for b in batches],
            "encode_batch_fast": lambda: [[e.ids for e in rust.encode_batch_fast(b, add_special_tokens=False)] for b in batches],
            "Watermarker.detect": lambda: wm.detect(texts, per_item=True),
            "sketchwm detect jsonl": lambda: run_cli(jsonl, tmp / "out.jsonl"),
            "sketchwm detect parquet": lambda: run_cli(parquet, tmp / "out.parquet"),
            "sketchwm detect 1 record": lambda: run_cli(one, tmp / "one.out.jsonl"),
        }
        wm.detect(texts[:64], per_item=True)  # warm the in-process paths (scheme tables, tokenizer)
        tok(texts[:64], add_special_tokens=False)
        times = interleaved(fns, repeats, warmup=0, rotate=True)  # rotating order, warmed above
    med = {k: statistics.median(v) for k, v in times.items()}
    mbps = {k: mb / v for k, v in med.items()}
    lines = [f"text: {mb:.2f} MB, {len(texts)} texts, {repeats} rounds (medians)"]
    start = med.pop("sketchwm detect 1 record")
    mbps.pop("sketchwm detect 1 record")
    lines.append(f"sketchwm detect on one record (start-up): {start:.2f} s")
    net = {}
    for k in med:
        line = (f"{k:>24}: {med[k]:8.2f} s  {mbps[k]:6.2f} MB/s  {mbps[k] / mbps['tokenizer']:5.2f}x tokenizer  "
                f"{mbps[k] / mbps['encode_batch_fast']:5.2f}x encode_batch_fast")
        if k.startswith("sketchwm detect"):
            net[k] = mb / max(med[k] - start, 1e-9)
            line += f"  | less start-up: {net[k]:6.2f} MB/s  {net[k] / mbps['tokenizer']:5.2f}x tokenizer"
        lines.append(line)
    res = {"mb": round(mb, 3), "texts": len(texts), "repeats": repeats, "median_s": {k: round(v, 3) for k, v in med.items()},
           "startup_s": round(start, 3), "mb_per_s": {k: round(v, 3) for k, v in mbps.items()},
           "ratio_to_tokenizer": {k: round(mbps[k] / mbps["tokenizer"], 3) for k in med},
           "ratio_to_tokenizer_less_startup": {k: round(v / mbps["tokenizer"], 3) for k, v in net.items()}}
    return lines, res


if __name__ == "__main__":
    raise SystemExit(main())
