"""Built-in DLM backends (registered through the ``sketchwm`` entry-point group)."""

from __future__ import annotations

from sketchwm.hookspecs import hookimpl

from .default import DefaultBackend
from .dream import DreamBackend
from .hf_masked_lm import HFMaskedLMBackend
from .llada import LLaDABackend
from .mdlm import MDLMBackend

__all__ = ["HFMaskedLMBackend", "LLaDABackend", "DreamBackend", "MDLMBackend", "DefaultBackend"]


@hookimpl
def sketchwm_register_backends() -> list[type]:
    """Register the built-in backends."""
    return [HFMaskedLMBackend, LLaDABackend, DreamBackend, MDLMBackend, DefaultBackend]
