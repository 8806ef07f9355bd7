"""Exceptions raised by sketchwm.

Every error a user can trigger with bad input derives from :class:`SketchwmError`, so the
CLI can print it as one line on stderr and exit non-zero without a traceback.
"""

from __future__ import annotations

__all__ = [
    "SketchwmError",
    "ConfigError",
    "KeyError_",
    "InputError",
    "TokenizerMismatchError",
    "RegistryError",
    "CalibrationError",
    "ModelFileError",
    "SketchwmWarning",
    "GreedyDecodingWarning",
    "Interrupted",
]


class SketchwmError(Exception):
    """Base class for every user-facing sketchwm error."""


class ConfigError(SketchwmError, ValueError):
    """A configuration is invalid (unknown field, out-of-range value, wrong type)."""


class KeyError_(SketchwmError, ValueError):
    """A watermark key is missing, unreadable or malformed.

    Named with a trailing underscore so it never shadows the builtin :class:`KeyError`.
    """


class InputError(SketchwmError, ValueError):
    """Text or token ids given to generate/detect are unusable (empty, too short, out of vocabulary,
    NaN/inf logits, wrong shape)."""


class TokenizerMismatchError(InputError):
    """The tokenizer in use does not match the one recorded in the watermark configuration."""


class RegistryError(SketchwmError, LookupError):
    """A plugin is unknown, registered twice, or of the wrong base class."""


class CalibrationError(SketchwmError, ValueError):
    """A calibration file is missing, malformed, or belongs to another key/model."""


class ModelFileError(SketchwmError, OSError):
    """A model weight/config file is missing, corrupted, or does not match its configuration."""


class SketchwmWarning(UserWarning):
    """Base class of sketchwm's user-facing warnings: the CLI prints each as one line on stderr
    (``sketchwm: warning: <problem>: <fix>``) and ``sketchwm generate`` records it in the output's
    provenance."""


class GreedyDecodingWarning(SketchwmWarning):
    """A watermark whose embedding cannot act at the sampler's temperature: a scheme that tilts the
    marginals, or replaces the sampling noise, run under greedy decoding (T = 0), where the argmax
    hides the tilt and no noise is drawn. The text is then (almost) unwatermarked."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) during a CLI command: raised by the handler :func:`sketchwm.cli.main` installs.

    A subclass, not a bare :class:`KeyboardInterrupt`: CPython (3.11) remembers a bare
    KeyboardInterrupt that crossed an ``exec`` of source text (as dataclasses and namedtuples do while
    a module is imported) and, for ``python -m``, ends the process with SIGINT after it exited cleanly
    with status 130. The check compares the exact type, so a subclass keeps the exit status.
    """
