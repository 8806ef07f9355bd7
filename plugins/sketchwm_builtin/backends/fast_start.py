"""Start-up without ``transformers`` for commands that only tokenise (detection).

Importing ``transformers`` and building a tokenizer with ``AutoTokenizer`` takes about a second on
2 cores, a quarter of ``sketchwm detect``'s start-up, yet detection uses only the tokenizer's Rust
backend (``tokenizers``), its vocabulary, its special-token ids and two numbers of ``config.json``.

:func:`load_tokenizer_and_config` therefore reads a checkpoint directory in one of two ways:

* **cache miss** (first use of these files): ``AutoTokenizer``/``AutoConfig`` as always, then the
  *facts* detection needs are written to ``<cache_dir>/tokenizer-<digest>.json``, the digest being
  SHA-256 over the bytes of every tokenizer and config file in the directory (domain-separated by
  file name). The facts include the SHA-256 of the Rust backend as ``transformers`` built it
  (``backend_tokenizer.to_str()``, truncation and padding off).
* **cache hit**: the backend is read straight from ``tokenizer.json`` by ``tokenizers`` and its
  serialisation must hash to the recorded one (else: the cache-miss path). Encoding is then the
  same program on the same data, so ids are those ``transformers`` would give. The result is a
  :class:`DeferredTokenizer`, which serves the encoding paths, ``get_vocab``, ``len``, the mask and
  special-token ids from the backend and the facts, and builds the full ``transformers`` tokenizer
  the first time anything else is read (``decode``, ``apply_chat_template``, ...).

The cache holds no secret (token ids and hashes of public files). ``SKETCHWM_TOKENIZER_CACHE=0``
turns it off. A cache that cannot be read or written is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

__all__ = ["DeferredTokenizer", "load_tokenizer_and_config", "files_digest", "auto_load", "quiet_transformers"]

#: files whose bytes decide what ``AutoTokenizer``/``AutoConfig`` build from a directory
_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "config.json",
          "vocab.txt", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json")
_VERSION = 2  # of the facts' layout


def auto_load(path: str) -> tuple[Any, Any]:
    """(``AutoTokenizer``, ``AutoConfig``) of the local checkpoint directory ``path``, offline.

    Raises:
        ModelFileError: either cannot be loaded.
    """
    from transformers import AutoConfig, AutoTokenizer

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    quiet_transformers()
    try:
        return AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001
        from sketchwm.errors import ModelFileError

        raise ModelFileError(f"cannot load model from {path}: {exc}") from exc


def quiet_transformers() -> None:
    """Silence transformers' progress bars and info logs (the CLI prints one line per error)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def files_digest(path: str | os.PathLike) -> str:
    """SHA-256 (hex) over the tokenizer and config files of checkpoint directory ``path`` (names and
    bytes; absent files count as absent) and the versions of ``transformers``/``tokenizers`` that
    built the facts (read from package metadata, nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    h = hashlib.sha256(b"sketchwm/tokenizer-facts/v%d\0" % _VERSION)
    for pkg in ("transformers", "tokenizers"):
        try:
            h.update(f"{pkg}={version(pkg)}\0".encode())
        except PackageNotFoundError:
            h.update(f"{pkg}=none\0".encode())
    for name in _FILES:
        p = Path(path) / name
        if p.is_file():
            data = p.read_bytes()
            h.update(f"{name}\0{len(data)}\0".encode())
            h.update(data)
        else:
            h.update(f"{name}\0absent\0".encode())
    return h.hexdigest()


def _backend_digest(backend: Any) -> str:
    """SHA-256 of a Rust tokenizer's serialisation with truncation and padding off (as encoded here)."""
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(backend.to_str())
    copy.no_truncation()
    copy.no_padding()
    return hashlib.sha256(copy.to_str().encode("utf-8")).hexdigest()


def _cache_path(digest: str) -> Path | None:
    if os.environ.get("SKETCHWM_TOKENIZER_CACHE", "1") == "0":
        return None
    from sketchwm.plugin_index import cache_dir

    return cache_dir() / f"tokenizer-{digest}.json"


class DeferredTokenizer:
    """A Hugging Face fast tokenizer whose encoding paths run without importing ``transformers``.

    Args:
        path: the checkpoint directory.
        backend: its ``tokenizers.Tokenizer``, checked against the recorded facts.
        facts: what :func:`load_tokenizer_and_config` recorded from the full tokenizer.

    Attributes served here: ``is_fast`` (True), ``backend_tokenizer``, ``mask_token_id``,
    ``all_special_ids``, ``chat_template``, ``name_or_path``, ``get_vocab()``, ``len()``,
    ``encode(text, add_special_tokens=False)``, and two facts computed once from the full tokenizer:
    ``vocab_fingerprint`` (:func:`sketchwm.components.tokenizer_fingerprint`) and ``placeholder_ids``
    (:func:`placeholder_ids` of its vocabulary). Any other attribute, and calling the tokenizer,
    builds the ``transformers`` tokenizer from ``path`` once and delegates to it.
    """

    is_fast = True

    def __init__(self, path: str, backend: Any, facts: dict[str, Any]):
        self._path, self.backend_tokenizer, self._facts = path, backend, facts
        self._full: Any = None
        self.mask_token_id = facts["mask_token_id"]
        self.all_special_ids = list(facts["all_special_ids"])
        self.chat_template = facts["chat_template"]
        self.name_or_path = path
        self.vocab_fingerprint: str = facts["vocab_fingerprint"]
        self.placeholder_ids: list[int] = list(facts["placeholder_ids"])

    def full(self) -> Any:
        """The ``transformers`` tokenizer of the directory (built on first call).

        Raises:
            ModelFileError: it cannot be loaded.
        """
        if self._full is None:
            self._full = auto_load(self._path)[0]
        return self._full

    def get_vocab(self) -> dict[str, int]:
        """Token → id, added tokens included (as ``PreTrainedTokenizerFast.get_vocab``)."""
        return self.backend_tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return int(self._facts["len"])

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        """Ids of one text; with special tokens or other options, through the full tokenizer."""
        if add_special_tokens or kwargs:
            return self.full().encode(text, add_special_tokens=add_special_tokens, **kwargs)
        return list(self.backend_tokenizer.encode(text, add_special_tokens=False).ids)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.full()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_full", "_facts", "_path"):
            raise AttributeError(name)
        return getattr(self.full(), name)


def load_tokenizer_and_config(path: str) -> tuple[Any, Any]:
    """(tokenizer, config) of checkpoint directory ``path`` for a backend (see module doc).

    Returns:
        On a cache hit, a :class:`DeferredTokenizer` and a namespace with ``vocab_size`` and
        ``max_position_embeddings`` (and ``model_type``); else the ``transformers`` tokenizer and
        ``AutoConfig``.

    Raises:
        ModelFileError: the files cannot be loaded (from the ``transformers`` path).
    """
    try:
        digest = files_digest(path)
        cache = _cache_path(digest)
    except OSError:
        digest, cache = "", None
    if cache is not None and cache.is_file() and (Path(path) / "tokenizer.json").is_file():
        try:
            facts = json.loads(cache.read_text(encoding="utf-8"))
            from tokenizers import Tokenizer

            backend = Tokenizer.from_file(str(Path(path) / "tokenizer.json"))
            if facts.get("version") == _VERSION and facts.get("backend_sha256") == _backend_digest(backend):
                return DeferredTokenizer(path, backend, facts), SimpleNamespace(**facts["config"])
        except Exception:  # noqa: BLE001 - any doubt (unreadable cache, other files): the full path
            pass
    tok, cfg = auto_load(path)
    if cache is not None and getattr(tok, "is_fast", False) and (Path(path) / "tokenizer.json").is_file():
        _write_facts(cache, tok, cfg)
    return tok, cfg


def placeholder_ids(vocab: dict[str, int]) -> list[int]:
    """Sorted ids of the bracketed placeholder tokens of a vocabulary (``[unused12]``, ``<extra_id_0>``):
    never trained as targets, so a backend bans them with the special tokens."""
    import re

    pattern = re.compile(r"\[unused\d+\]|<extra_id_\d+>")
    return sorted(int(i) for tok, i in vocab.items() if pattern.fullmatch(tok))


def _write_facts(cache: Path, tok: Any, cfg: Any) -> None:
    """Record the facts of a freshly loaded tokenizer and config (best effort)."""
    try:
        from sketchwm.components import tokenizer_fingerprint

        chat = getattr(tok, "chat_template", None)
        facts = {
            "version": _VERSION,
            "backend_sha256": _backend_digest(tok.backend_tokenizer),
            "mask_token_id": None if tok.mask_token_id is None else int(tok.mask_token_id),
            "all_special_ids": [int(i) for i in tok.all_special_ids if i is not None],
            "len": int(len(tok)),
            "chat_template": chat if isinstance(chat, str) else None,
            "vocab_fingerprint": tokenizer_fingerprint(tok),
            "placeholder_ids": placeholder_ids(tok.get_vocab()),
            "config": {k: getattr(cfg, k) for k in ("vocab_size", "max_position_embeddings", "model_type", "_name_or_path")
                       if isinstance(getattr(cfg, k, None), (int, str))},
        }
        if chat is not None and not isinstance(chat, str):
            return  # a dict of templates: leave this tokenizer to transformers
        from sketchwm.io import write_text_atomic

        cache.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cache, json.dumps(facts))
    except Exception:  # noqa: BLE001 - a cache is an optimisation: never fail a load over it
        pass
