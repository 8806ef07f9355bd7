"""Named scheme settings the benchmark scripts take on their command lines (``--schemes default count``).

A preset is a registered scheme name with parameters over its defaults; :func:`preset_config` turns
one into the ``{"scheme": {"name": ..., "params": ...}}`` config a :class:`sketchwm.api.Watermarker`
takes. The harness's configs name their schemes themselves (``schemes:`` of a bench config).
"""

from __future__ import annotations

from typing import Any

from ..config import DEFAULT_SCHEME

__all__ = ["SCHEME_PRESETS", "BASE_PRESETS", "preset_config"]

#: tag → (registered scheme name, params over its defaults)
SCHEME_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": (DEFAULT_SCHEME, {}),
    "sketch": ("global-sketch", {}),
    # the seed paper's plain count sketch with its key-randomised p-value
    "count": ("global-sketch", {"sketch": {"name": "count-sketch", "params": {"d": 4, "w": 256}},
                                "null": "key-randomised"}),
    "unigram": ("unigram", {}),
    "dmark": ("dmark", {}),
    "gumbel-position": ("gumbel-position", {}),
    "family": ("global-sketch-family", {}),
    # the default's two channels, stated explicitly (the default since sampling defaults to free)
    "green": ("global-sketch-green", {"sampling": "free"}),
    # the default with its optional third channel, keyed sampling
    "keyed": ("global-sketch-green", {"sampling": "keyed"}),
    "red-green-dlm": ("red-green-dlm", {}),
    "aar-gumbel": ("aar-gumbel", {}),
}
#: the presets a script runs when ``--schemes`` is not given
BASE_PRESETS = ("default", "sketch", "count", "unigram")


def preset_config(tag: str) -> dict[str, Any]:
    """The Watermarker config of preset ``tag``; raises KeyError for an unknown tag."""
    name, params = SCHEME_PRESETS[tag]
    return {"scheme": {"name": name, "params": params}}
