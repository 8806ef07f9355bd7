"""The backend contract: a masked diffusion LM as the engine sees it."""

from __future__ import annotations

import hashlib
import weakref
from abc import abstractmethod
from collections.abc import Callable
from functools import partial
from typing import Any, Sequence

import torch

from .component import Component

__all__ = ["DLMBackend", "rows_of", "tokenizer_fingerprint"]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """16-hex SHA-256 of a tokenizer's vocabulary (token → id), used to refuse a wrong tokenizer.

    Computed once per tokenizer object and vocabulary size (a vocabulary of 10^5 tokens takes a
    noticeable part of a command's start-up; adding tokens changes the size and recomputes it). A
    tokenizer that carries the fingerprint its full vocabulary was found to have (``vocab_fingerprint``,
    as the fast-start tokenizer of the built-in backends does) is read, not recomputed.
    """
    known = tokenizer.__dict__.get("vocab_fingerprint") if hasattr(tokenizer, "__dict__") else None
    if isinstance(known, str) and known:
        return known
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else None
    try:
        cached = _FINGERPRINTS.get(tokenizer)
    except TypeError:  # not weak-referenceable
        cached = None
    if cached is not None and cached[0] == size:
        return cached[1]
    vocab = tokenizer.get_vocab()
    blob = "\n".join(f"{t}\t{i}" for t, i in sorted(vocab.items(), key=lambda kv: kv[1]))
    fp = hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
    try:
        _FINGERPRINTS[tokenizer] = (size, fp)
    except TypeError:
        pass
    return fp


def rows_of(once: Callable[[], torch.Tensor],
            pick: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function :meth:`DLMBackend.logits_rows` returns: ``at(index)`` = ``pick(state, index)``, index
    (B, K) int64 → (B, K, V) float32, where ``state`` (the model's hidden states or full logits) is
    ``once()``, computed at the first call only."""
    state: list[torch.Tensor] = []

    def at(index: torch.Tensor) -> torch.Tensor:
        if not state:
            state.append(once())
        return pick(state[0], index)

    return at


_FINGERPRINTS: "weakref.WeakKeyDictionary[Any, tuple[int | None, str]]" = weakref.WeakKeyDictionary()


class DLMBackend(Component):
    """A masked diffusion language model as the engine sees it.

    Subclasses set the attributes below in ``__init__`` and implement :meth:`logits`.

    Attributes:
        model_id: a stable identifier of the checkpoint (recorded in calibration files).
        tokenizer: a Hugging Face tokenizer (``encode``/``decode``/``get_vocab``).
        mask_token_id: id of [MASK].
        vocab_size: V, the logit dimension.
        eos_token_id: id ending a text, or None.
        banned_token_ids: ids never sampled (special tokens), list[int].
        max_length: longest supported input (prompt + generation), tokens.
        device: torch.device of the model.
        sampler_defaults: dict of :class:`sketchwm.engine.SamplerConfig` fields this model works best with.
    """

    kind = "backend"
    model_id: str
    tokenizer: Any
    mask_token_id: int
    vocab_size: int
    eos_token_id: int | None = None
    banned_token_ids: list[int]
    max_length: int = 4096
    device: torch.device
    sampler_defaults: dict[str, Any] = {}

    @abstractmethod
    def logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Denoiser logits aligned with the input: (B, L) int64 → (B, L, V) float32.

        Position i of the output is the model's marginal (as logits) for token i. Backends whose
        model predicts the next position (Dream) shift internally.

        Args:
            input_ids: (B, L) int64.
            attention_mask: (B, L) bool/int, 1 on real tokens, or None.
            positions: (B, L) bool, the positions whose logits are needed, or None for all. A backend
                may compute only those (the LM head dominates the cost of small models) and leave
                finite placeholder values elsewhere.
        """

    def logits_at(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, index: torch.Tensor) -> torch.Tensor:
        """Logits at selected positions only: index (B, K) int64 into [0, L) → (B, K, V) float32.

        Default: gathers from :meth:`logits`; backends override it to skip the LM head elsewhere.
        """
        full = self.logits(input_ids, attention_mask)  # (B, L, V)
        return torch.gather(full, 1, index[..., None].expand(-1, -1, full.shape[-1]))

    def logits_rows(self, input_ids: torch.Tensor,
                    attention_mask: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
        """The model on one input, its logits at any rows asked for afterwards: returns ``at`` with
        ``at(index)`` = :meth:`logits_at` ``(input_ids, attention_mask, index)``, index (B, K) int64 into
        [0, L) → (B, K, V) float32.

        The engine asks for the rows of a step in two rounds when a scheme may need more rows than
        the targets (:class:`sketchwm.marginal_sources.IncrementalMarginals`); a backend that splits its model
        into a body and an LM head runs the body once, at the first call, and only the head at each
        call, so the second round costs the head on its rows alone. Backends that override
        :meth:`logits_at` override this too, with the same results. Default: :meth:`logits_at` at
        each call when a subclass overrides it (the body runs again), else the full :meth:`logits`
        once, gathered at each call.
        """
        if self.replaces_logits_at(DLMBackend):
            return partial(self.logits_at, input_ids, attention_mask)
        return self.gathered_rows(input_ids, attention_mask)

    def gathered_rows(self, input_ids: torch.Tensor,
                      attention_mask: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
        """:meth:`logits_rows` for a model whose LM head runs on every position: the full (B, L, V)
        :meth:`logits` once, at the first call, gathered at index (B, K) int64 at each call."""
        return rows_of(lambda: self.logits(input_ids, attention_mask),
                       lambda full, index: torch.gather(full, 1, index[..., None].expand(-1, -1, full.shape[-1])))

    def replaces_logits_at(self, owner: type) -> bool:
        """Whether :meth:`logits_at` is not ``owner``'s: a subclass below it overrides it, or it is set
        on the instance (a wrapper, e.g. a test that counts rows); :meth:`logits_rows` then calls it."""
        return type(self).logits_at is not owner.logits_at or "logits_at" in vars(self)

    def postprocess_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """The backend's fixed edits of the model's aligned logits (B, L, V) float32 → same, applied
        by :meth:`logits` and by the user-loop adapters of :mod:`sketchwm.userloop` (e.g. LLaDA merges
        its end-of-turn logit into EOS). Default: unchanged."""
        return logits

    # ---------------------------------------------------------------- text helpers
    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenise texts without special tokens → list of id lists."""
        return [list(self.tokenizer.encode(t, add_special_tokens=False)) for t in texts]

    def encode_prompts(self, texts: Sequence[str]) -> list[list[int]]:
        """Tokenise prompt strings for generation (instruct backends apply the chat template). Default: :meth:`encode`."""
        return self.encode(texts)

    def decode(self, ids: Sequence[int]) -> str:
        """Detokenise ids, skipping special tokens."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=True)

    @property
    def tokenizer_fingerprint(self) -> str:
        """See :func:`tokenizer_fingerprint`."""
        return tokenizer_fingerprint(self.tokenizer)
