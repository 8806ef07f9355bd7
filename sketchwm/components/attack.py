"""The attack contract: an edit of texts at a strength in [0, 1]."""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from .component import Component

__all__ = ["Attack", "AttackOutput"]


@dataclass
class AttackOutput:
    """Result of an attack on a batch of texts.

    Attributes:
        texts: edited texts, same order and length as the input.
        edit_fraction: per text, fraction of words (or tokens) the attack changed, in [0, 1+].
        levenshtein: per text, token-level Levenshtein distance to the input (int).
        similarity: per text, cosine similarity of sentence embeddings to the input, or NaN if not computed.
        meta: free-form extra metadata (JSON-serialisable).
    """

    texts: list[str]
    edit_fraction: list[float]
    levenshtein: list[int]
    similarity: list[float]
    meta: dict[str, Any] = field(default_factory=dict)


class Attack(Component):
    """An edit applied to texts to remove (or forge) a watermark.

    ``strength`` in [0, 1] has an attack-specific, documented meaning (usually the fraction of
    words edited). Randomness only through the given ``torch.Generator``.
    """

    kind = "attack"

    def __init__(self, params=None, **resources: Any):
        self.params = self.parse_params(params)
        self.resources = resources

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Attack":
        """``cls(params, **resources)``; the context's ``backend`` becomes the ``backend`` resource unless given."""
        resources = dict(context.resources)
        if context.backend is not None:
            resources.setdefault("backend", context.backend)
        return cls(params, **resources)

    @abstractmethod
    def apply(
        self,
        texts: Sequence[str],
        strength: float,
        generator: torch.Generator,
        *,
        token_ids: Sequence[Sequence[int]] | None = None,
        prompts: Sequence[str] | None = None,
    ) -> AttackOutput:
        """Edit ``texts`` (see class doc).

        Args:
            texts: B input texts, a list (not one string).
            strength: in [0, 1]; meaning documented by each attack.
            generator: the only source of randomness (a seeded ``torch.Generator``).
            token_ids: optional B token-id lists of the texts (model tokens), used by token-level attacks.
            prompts: optional B prompts that produced the texts (used by paraphrasers if given).

        Returns:
            :class:`AttackOutput`, one entry per text in each list.

        Raises:
            ConfigError: strength outside [0, 1]. InputError: bad texts or extras (as each attack documents).
        """
