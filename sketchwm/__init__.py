"""sketchwm: global Count-Sketch watermarking for masked diffusion language models.

Public API (README.md and docs/): :class:`WatermarkKey`, :class:`Watermarker` and the verbs
:func:`keygen`, :func:`generate`, :func:`detect`, :func:`calibrate`.
"""

__version__ = "0.6.0"

from .errors import SketchwmError  # noqa: E402
from .keys import WatermarkKey  # noqa: E402


def __getattr__(name):  # lazy: keep `import sketchwm` light
    if name in ("Watermarker", "keygen", "generate", "detect", "calibrate"):
        from . import api

        return getattr(api, name)
    raise AttributeError(name)


__all__ = ["__version__", "SketchwmError", "WatermarkKey", "Watermarker", "keygen", "generate", "detect", "calibrate"]
