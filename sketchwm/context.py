"""The build context: what the surroundings give a component when the registry builds it.

Every component is built the same way, :meth:`sketchwm.registry.Registry.build`: the registry looks
the class up and calls ``cls.from_context(params, context)``. Each kind's base class
(:class:`sketchwm.components.Sketch`, ``ScoreFunction``, ``DLMBackend``, ``WatermarkScheme``,
``Attack``, :class:`sketchwm.bench.metric.Metric`) maps the context onto its constructor once, so a
third-party component that keeps its kind's constructor signature needs nothing more; one that needs
more of the context (the global sketch reads ``registry`` to build its sketch and score, and
``tokenizer_fingerprint`` to check its token prior) overrides ``from_context``. Nobody inspects a
constructor's signature.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import ConfigError

__all__ = ["BuildContext"]


@dataclass(frozen=True)
class BuildContext:
    """What a component factory may read (every field optional; a factory asks for what it needs).

    Attributes:
        registry: the :class:`sketchwm.registry.Registry` building the component (set by
            :meth:`Registry.build`); components that build others (the global sketch: its sketch and
            score) build them through it.
        key: the :class:`sketchwm.keys.WatermarkKey` (schemes), or the sub-key a scheme hands to its
            sketch (k_sk).
        vocab_size: V, the model's logit dimension (schemes, sketches).
        device: where tables live (``str`` or ``torch.device``; default ``"cpu"``).
        backend: the :class:`sketchwm.components.DLMBackend` the component works with (an attack's
            model; attacks receive it as their ``backend`` resource), or None.
        tokenizer_fingerprint: the backend tokenizer's fingerprint (16 hex), for components whose
            data belong to one tokenizer (the token prior), or None (not checked).
        token_prior: π_tok as (V,) float64 counts, resolved by a scheme for its sketch (eq. 4), or None.
        sketch: the built sketch, for a score function (it reads D and w from it), or None.
        resources: objects the caller already holds, passed to the constructor as keyword
            arguments unchanged: a loaded ``model`` and ``tokenizer`` for a backend
            (:meth:`sketchwm.api.Watermarker.from_model`); ``backend``, ``human_texts``,
            ``watermarked_texts``, ``stealer`` for an attack.
    """

    registry: Any = None
    key: Any = None
    vocab_size: int | None = None
    device: Any = "cpu"
    backend: Any = None
    tokenizer_fingerprint: str | None = None
    token_prior: Any = None
    sketch: Any = None
    resources: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def for_backend(cls, backend: Any, **fields: Any) -> "BuildContext":
        """The context of a component that works with ``backend`` (a :class:`DLMBackend`): the backend,
        its V, device and tokenizer fingerprint; ``fields`` add or override (``key=``, ``registry=``)."""
        base = {"backend": backend, "vocab_size": int(backend.vocab_size), "device": backend.device,
                "tokenizer_fingerprint": backend.tokenizer_fingerprint}
        return cls(**{**base, **fields})

    def replace(self, **changes: Any) -> "BuildContext":
        """A copy with ``changes`` applied (the context is immutable)."""
        return dataclasses.replace(self, **changes)

    def require(self, name: str, who: str = "this component") -> Any:
        """The field ``name``, which must be set.

        Raises:
            ConfigError: the field is None (names the component and the field).
        """
        value = getattr(self, name)
        if value is None:
            raise ConfigError(f"{who} needs '{name}' in its build context; pass it in BuildContext({name}=...)")
        return value
