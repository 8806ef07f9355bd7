"""Repetition, diversity and oracle perplexity of saved generations (JSONL files with a ``text`` field).

Reads texts already generated — e.g. the per-scheme caches that ``attack_matrix.py`` writes under
``benchmarks/out/<run>/cache/eval-<scheme>-*.jsonl`` and ``null-base-*.jsonl`` — re-tokenises them
with the backend's tokenizer and prints, per file, the mean distinct-2, seq-rep-4 and top-token
share (:mod:`sketchwm.quality`) and, unless ``--no-oracle``, the median SmolLM2-135M perplexity and
its ratio to the file named by ``--reference``. Perplexity alone rewards repetitive output; this
table puts the two side by side without generating anything again.

Usage:
    python benchmarks/text_quality.py benchmarks/out/run2/cache/null-base-100-*.jsonl \\
        benchmarks/out/run2/cache/eval-*-100-*.jsonl --threads 1 [--csv out.csv] [--no-oracle]

Labels are the file names without the ``eval-``/``-<n>-<hash>.jsonl`` parts; the first file is the
reference unless ``--reference`` names another label.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd
import torch

from sketchwm.detection import pad_ids
from sketchwm.io import read_records
from sketchwm.quality import distinct_n, seq_rep_n, top_token_share
from sketchwm.registry import get_registry


def label_of(path: str) -> str:
    """``.../eval-kgw-naive-100-c144095a2f1d.jsonl`` → ``kgw-naive``; ``null-base-…`` → ``unwatermarked``."""
    stem = Path(path).name.removesuffix(".jsonl")
    stem = re.sub(r"-\d+-[0-9a-f]{6,}$", "", stem)
    if stem.startswith("null-base"):
        return "unwatermarked"
    return re.sub(r"^(eval|steal-train|null)-", "", stem)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="JSONL files with a 'text' field")
    ap.add_argument("--backend", default="default", help="registered backend whose tokenizer counts tokens, or 'tiny'")
    ap.add_argument("--reference", default=None, help="label of the reference for ppl_ratio (default: the first file)")
    ap.add_argument("--no-oracle", action="store_true", help="skip oracle perplexity")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--csv", default=None, help="also write the table to this CSV")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.backend == "tiny":  # the test suite's tiny random BERT (smoke runs)
        from sketchwm.testing import tiny_backend

        backend = tiny_backend()
    else:
        backend = get_registry().create("backend", args.backend)
    oracle = None
    if not args.no_oracle:
        from sketchwm.oracle import OracleLM

        oracle = OracleLM(threads=args.threads)
    rows = []
    seen: dict[str, int] = {}
    for path in args.files:
        texts = [r["text"] for r in read_records(path)]
        label = label_of(path)
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        ids, valid = pad_ids(backend.encode(texts))
        row = {
            "label": label, "n": len(texts), "tokens_mean": float(valid.sum(1).double().mean()),
            "distinct_2": float(distinct_n(ids, valid, 2).nanmean()),
            "seq_rep_4": float(seq_rep_n(ids, valid, 4).nanmean()),
            "top_token_share": float(top_token_share(ids, valid).nanmean()),
        }
        if oracle is not None:
            row["ppl_median"] = float(pd.Series(oracle.perplexity(texts)).median())
        rows.append(row)
        print(f"{label}: {len(texts)} texts", file=sys.stderr, flush=True)
    table = pd.DataFrame(rows).set_index("label")
    if oracle is not None:
        ref = args.reference or table.index[0]
        if ref not in table.index:
            raise SystemExit(f"--reference {ref!r} is not one of the labels {list(table.index)}")
        table["ppl_ratio"] = table["ppl_median"] / table.loc[ref, "ppl_median"]
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        from sketchwm.io import atomic_write

        with atomic_write(args.csv, newline="") as fh:
            table.to_csv(fh)
        print(f"wrote {args.csv}")
    print(table.reset_index().to_json(orient="records"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
