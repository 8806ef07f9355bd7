"""The common base of every pluggable component: a registry name, a ``Params`` model, a summary."""

from __future__ import annotations

from abc import ABC
from typing import Any, ClassVar

import torch

from ..config import StrictModel, validate_params

__all__ = ["Component"]


class Component(ABC):
    """Common base: a registry ``name``, a ``Params`` model and a one-line ``summary``."""

    name: ClassVar[str] = ""
    kind: ClassVar[str] = ""

    class Params(StrictModel):
        """No parameters."""

    @classmethod
    def parse_params(cls, params: "dict[str, Any] | StrictModel | None") -> StrictModel:
        """Validate ``params`` against ``cls.Params`` (raises :class:`ConfigError`)."""
        return validate_params(cls.Params, params, f"{cls.kind} '{cls.name}'")

    @classmethod
    def summary(cls) -> str:
        """First line of the class docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def from_context(cls, params: Any, context: Any) -> "Component":
        """Build the component from its params and a :class:`sketchwm.context.BuildContext`.

        :meth:`sketchwm.registry.Registry.build` calls this for every kind; each kind's base maps the
        context onto its constructor (here: ``cls(params, **context.resources)``). Override it to
        read more of the context.

        Raises:
            ConfigError: bad params, or a context field the kind needs is missing.
        """
        return cls(params, **dict(context.resources))

    @classmethod
    def display_name(cls) -> str:
        """``"<kind> '<name>'"`` (e.g. ``scheme 'global-sketch'``), for messages."""
        return f"{cls.kind} '{cls.name}'"

    # ---------------------------------------------- shared by the keyed kinds (Sketch, WatermarkScheme)
    def _init_table_owner(self, params: Any, vocab_size: int, device: Any) -> None:
        """Set ``params`` (validated, :class:`ConfigError` if bad), ``vocab_size`` (V, int) and ``device``."""
        self.params = self.parse_params(params)
        self.vocab_size = int(vocab_size)
        self.device = torch.device(device)

    @classmethod
    def _key_and_vocab(cls, context: Any) -> tuple[Any, int]:
        """``(key, V)`` of a build context, both required (:class:`ConfigError` naming the component if missing)."""
        return context.require("key", cls.display_name()), context.require("vocab_size", cls.display_name())
