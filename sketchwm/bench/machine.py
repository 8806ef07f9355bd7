"""The machine a speed figure was measured on: CPU model, its vector flags, core count and torch build.

A speed figure read without its CPU cannot be compared with anything: the same code reads a
ratio of 1.5 on one CPU and 3 on another. :func:`machine` gathers what identifies the machine
for that purpose; :func:`machine_line` writes it as one line for published sections
(:mod:`sketchwm.bench.publish`) and :func:`same_cpu` says whether two records may be compared.

Sources: ``/proc/cpuinfo`` (Linux; ``platform.processor()`` elsewhere), ``os.cpu_count()``,
``torch.__version__``, ``torch.backends.cpu.get_cpu_capability()`` (the kernels torch dispatches to)
and the BLAS and parallel backend from ``torch.__config__``. Nothing is measured.
"""

from __future__ import annotations

import os
import platform
import re
from typing import Any

__all__ = ["machine", "machine_line", "same_cpu", "VECTOR_FLAGS"]

#: the CPU flags that change which kernels run (x86 vector extensions and the ARM ones), in this order
VECTOR_FLAGS = ("sse4_2", "avx", "fma", "f16c", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "amx_tile", "amx_bf16", "neon", "asimd", "sve")


def _cpuinfo() -> tuple[str, list[str]]:
    """(model name, vector flags) from /proc/cpuinfo, or platform's answer where it is absent."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip().lower()
                if key in ("model name", "hardware", "cpu model") and not model:
                    model = value.strip()
                elif key in ("flags", "features") and not flags:
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    model = re.sub(r"\s+", " ", model) or platform.processor() or platform.machine() or "unknown CPU"
    return model, [f for f in VECTOR_FLAGS if f in flags]


def machine() -> dict[str, Any]:
    """What identifies the machine for a speed figure.

    Returns:
        ``{"cpu": model name, "flags": [vector flags present, in VECTOR_FLAGS order], "cpus":
        os.cpu_count(), "arch": platform.machine(), "torch": version, "torch_cpu_capability": e.g.
        "AVX2" or "AVX512", "blas": e.g. "mkl", "parallel": e.g. "OpenMP"}``; the torch fields are
        absent when torch cannot be imported. (The threads a benchmark ran on are its own field: the
        process that publishes is not the one that measured.)
    """
    model, flags = _cpuinfo()
    out: dict[str, Any] = {"cpu": model, "flags": flags, "cpus": os.cpu_count(), "arch": platform.machine()}
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return out
    out["torch"] = torch.__version__
    try:
        out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # pragma: no cover - older torch
        pass
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    if blas:
        out["blas"] = blas.group(1)
    par = re.search(r"ATen parallel backend: (\S+)", torch.__config__.parallel_info())
    if par:
        out["parallel"] = par.group(1)
    return out


def machine_line(m: dict[str, Any] | None = None) -> str:
    """``machine()`` as one line, e.g. ``AMD EPYC; 2 CPUs; flags … avx2 avx512f …; torch 2.13.0+cpu
    (AVX512 kernels, mkl, OpenMP)``."""
    m = machine() if m is None else m
    line = f"{m['cpu']}; {m['cpus']} CPUs; flags {' '.join(m['flags']) or 'none of ' + '/'.join(VECTOR_FLAGS[:5])}"
    if "torch" in m:
        build = ", ".join(str(x) for x in (f"{m['torch_cpu_capability']} kernels" if m.get("torch_cpu_capability") else None,
                                           m.get("blas"), m.get("parallel")) if x)
        line += f"; torch {m['torch']}" + (f" ({build})" if build else "")
    return line


def same_cpu(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Whether two :func:`machine` records name the same CPU: model, vector flags and CPU count.

    (The torch build is recorded but not compared: a slower figure after a torch upgrade on the same
    CPU is a regression to look at like any other.)
    """
    if not a or not b:
        return False
    return all(a.get(k) == b.get(k) for k in ("cpu", "flags", "cpus"))
