"""Vectorised keyed pseudo-random functions (PRFs) in torch.

Every table a watermark needs (Count-Sketch buckets and signs, Rademacher directions, green
lists, Gumbel uniforms) is a deterministic function of a 64-bit seed derived from the secret key
by HMAC-SHA256 with domain separation (:meth:`sketchwm.keys.WatermarkKey.seed`) and an integer
counter (token id, position, context hash, ...). The mixing below is a counter-based hash built
from 32-bit integer rounds (multiply-xorshift, multipliers < 2**31 so int64 never overflows), so
the same seed and counter give the same bits on CPU and CUDA, in any torch version and on any
machine. It is a PRF for watermarking tables, not a cipher: the secrecy comes from the
HMAC-derived seed.
"""

from __future__ import annotations

import numpy as np
import torch

try:  # the optional C extension (pyproject.toml ext-modules): the same bits, one pass, no int64 temporaries
    from ._fastids import keyed_bits_into as _keyed_bits_into
except ImportError:  # pragma: no cover - exercised where no compiler built it
    _keyed_bits_into = None

#: below this many counters the torch path is as fast as the C pass (call overhead)
_C_MIN = 2048

__all__ = ["mix32", "keyed_bits", "keyed_uniform", "keyed_randint", "keyed_signs"]

_MASK32 = 0xFFFFFFFF
_M1 = 0x45D9F3B  # odd multipliers < 2**31 keep products inside int64
_M2 = 0x119DE1F3
_GOLDEN = 0x1E3779B9


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Avalanche-mix 32-bit values held in an int64 tensor.

    Args:
        x: int64 tensor of any shape with values in [0, 2**32).

    Returns:
        int64 tensor, same shape, values in [0, 2**32).
    """
    x = x & _MASK32
    x = ((x >> 16) ^ x) * _M1 & _MASK32
    x = ((x >> 16) ^ x) * _M2 & _MASK32
    x = ((x >> 16) ^ x) * _M1 & _MASK32
    x = (x >> 16) ^ x
    return x


def _as_counter(counter: torch.Tensor | int, device: torch.device | None) -> torch.Tensor:
    if not torch.is_tensor(counter):
        counter = torch.tensor(counter, dtype=torch.int64, device=device)
    return counter.to(torch.int64)


def keyed_bits(seed: int | torch.Tensor, counter: torch.Tensor | int, stream: int = 0) -> torch.Tensor:
    """32 pseudo-random bits per element for a keyed counter.

    Args:
        seed: 64-bit seed (int, or int64 tensor broadcastable with ``counter``), e.g. from
            :meth:`WatermarkKey.seed`.
        counter: int64 tensor (any shape); each element is an independent draw.
        stream: small integer that separates independent streams under one seed.

    Returns:
        int64 tensor shaped like the broadcast of ``seed`` and ``counter``, values in [0, 2**32).
    """
    device = counter.device if torch.is_tensor(counter) else (seed.device if torch.is_tensor(seed) else None)
    c = _as_counter(counter, device)
    if (_keyed_bits_into is not None and not torch.is_tensor(seed) and c.device.type == "cpu"
            and c.numel() >= _C_MIN and not c.requires_grad):
        return _keyed_bits_c(int(seed), c, stream)
    if torch.is_tensor(seed):
        s = seed.to(device=c.device, dtype=torch.int64)
        lo, hi = s & _MASK32, (s >> 32) & _MASK32
    else:
        seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        lo, hi = seed & _MASK32, (seed >> 32) & _MASK32
    c_lo = c & _MASK32
    c_hi = (c >> 32) & _MASK32
    x = mix32(c_lo ^ lo)
    x = mix32(x ^ c_hi ^ ((stream * _GOLDEN) & _MASK32))
    x = mix32(x ^ hi)
    x = mix32(x + _GOLDEN)
    return x


def keyed_uniform(
    seed: int | torch.Tensor, counter: torch.Tensor | int, stream: int = 0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Keyed uniforms in the open interval (0, 1).

    Args: as :func:`keyed_bits`; ``dtype`` float32 or float64.

    Returns:
        float tensor shaped like ``counter`` (broadcast with ``seed``), values strictly in (0, 1).
    """
    bits = keyed_bits(seed, counter, stream).to(torch.float64)
    return ((bits + 0.5) / 4294967296.0).to(dtype)


def keyed_randint(seed: int | torch.Tensor, counter: torch.Tensor | int, high: int, stream: int = 0) -> torch.Tensor:
    """Keyed integers uniform in [0, high) (modulo bias < high / 2**32).

    Raises:
        ValueError: if ``high`` is not in [1, 2**31].
    """
    if not 1 <= high <= 2**31:
        raise ValueError(f"high must be in [1, 2**31], got {high}")
    return keyed_bits(seed, counter, stream) % high


def keyed_signs(seed: int | torch.Tensor, counter: torch.Tensor | int, stream: int = 0) -> torch.Tensor:
    """Keyed Rademacher signs (±1.0, float32), shaped like ``counter``."""
    bits = keyed_bits(seed, counter, stream)
    return ((bits >> 7) & 1).to(torch.float32) * 2.0 - 1.0


def _keyed_bits_c(seed: int, c: torch.Tensor, stream: int) -> torch.Tensor:
    """:func:`keyed_bits` of an int seed over a CPU int64 counter tensor in one C pass (the extension's
    ``keyed_bits_into``; bit for bit the torch rounds above, ``tests/test_prf.py``)."""
    seed &= 0xFFFFFFFFFFFFFFFF
    src = c.contiguous().numpy()
    out = np.empty(src.shape, dtype=np.int64)
    _keyed_bits_into(src.reshape(-1), out.reshape(-1), seed & _MASK32, (seed >> 32) & _MASK32,
                     (stream * _GOLDEN) & _MASK32)
    return torch.from_numpy(out)
