"""Validated configuration models (pydantic v2).

Every component (sketch, score function, backend, scheme, attack) declares a nested ``Params``
model deriving from :class:`StrictModel`; the core only ever sees a :class:`ComponentSpec`
``{"name": ..., "params": {...}}``. Unknown fields and out-of-range values raise
:class:`sketchwm.errors.ConfigError` naming the field.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import ConfigError

__all__ = ["StrictModel", "ComponentSpec", "validate_params", "config_hash", "DEFAULT_SCHEME"]

#: The scheme a configuration without ``scheme`` uses: ``global-sketch-green``, the global sketch
#: and a context-keyed green channel embedded together with a coverage handover
#: (``plugins/sketchwm_builtin/sketch_green.py``; why it is the default: docs/default-scheme.md).
#: Its sketch channel is a ``global-sketch`` under the same key.
DEFAULT_SCHEME = "global-sketch-green"

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for all configs: unknown fields are errors, NaN and ±inf are refused in every float field,
    instances are immutable.

    Attributes:
        over_defaults: names of nested-params fields whose default is an instance with fields of its
            own (e.g. the default's ``sketch`` channel, c* = 0.25): a partial dict given for one is laid
            over that instance's set fields, not over the class defaults (``{"sketch": {"prior": ...}}``
            keeps c* = 0.25). Default: none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    over_defaults: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _lay_over_defaults(cls, data: Any) -> Any:
        """``data`` with each partial dict of an :attr:`over_defaults` field laid over that field's default."""
        if not cls.over_defaults or not isinstance(data, dict):
            return data
        out = dict(data)
        for name in cls.over_defaults:
            if isinstance(out.get(name), dict):
                out[name] = {**cls.model_fields[name].default.model_dump(exclude_unset=True), **out[name]}
        return out


class ComponentSpec(StrictModel):
    """A reference to a registered component and its parameters: ``{"name": ..., "params": {...}}``."""

    name: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)


def validate_params(model: type[M], params: "dict[str, Any] | M | None", where: str) -> M:
    """Validate ``params`` against ``model``.

    Args:
        model: the component's ``Params`` class.
        params: a mapping, an instance of ``model``, or None for the defaults.
        where: a label for error messages, e.g. ``"scheme 'global-sketch'"``.

    Raises:
        ConfigError: listing each bad field, e.g. ``unknown field 'foo'``.
    """
    if params is None:
        params = {}
    if isinstance(params, model):
        return params
    if isinstance(params, BaseModel):
        params = params.model_dump()
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "<root>"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown field '{loc}'")
            elif err["type"] == "value_error" and not err["loc"]:  # a model validator's own message names its fields
                problems.append(str(err["msg"]).removeprefix("Value error, "))
            else:
                problems.append(f"{loc}: {err['msg']}")
        raise ConfigError(f"invalid config for {where}: " + "; ".join(problems)) from None


def config_hash(obj: Any) -> str:
    """12-hex SHA-256 of a JSON-serialisable config (sorted keys), for result tables."""
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]
