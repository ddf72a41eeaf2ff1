"""One kernel family for the math libraries on every x86-64 CPU, so that the same inputs and
seed give the same bytes on any machine: ``summary.json`` (and ``verify`` on another machine
than the one that analysed), and the quickstart's pre-trained base on one thread or two.

* numpy's OpenBLAS picks its matrix kernels by CPU at load time: on an AVX-512 Intel CPU
  (SkylakeX kernels) a float matrix product adds in another order than on AVX2 or AMD CPUs
  (Haswell/Zen kernels), and the last bits of interval bounds differ. ckptsel asks for the
  Haswell kernels (``OPENBLAS_CORETYPE``; AVX2 + FMA, which every such CPU has).
* torch's MKL, on an AVX-512 Intel CPU, splits a weight gradient's long inner dimension over
  threads, so two threads train other weights than one. ckptsel asks MKL for its AVX2 code
  path in strict reproducibility mode (``MKL_CBWR=AVX2,STRICT``: the same results for any
  number of threads; no measurable cost on the quickstart's model).

Each is set only when that can still take effect (the library is not loaded yet) and the user
set none; :func:`blas_kernel` says which OpenBLAS kernel runs. Other CPUs are left alone.
"""

from __future__ import annotations

import os
import platform
import sys

KERNEL = "Haswell"  # OpenBLAS
MKL_PATH = "AVX2,STRICT"  # MKL (torch)


def _has_avx2_fma() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return {"avx2", "fma"} <= flags
    except OSError:
        pass
    return False


def pin_kernels() -> list[str]:
    """Set ``OPENBLAS_CORETYPE`` and ``MKL_CBWR`` where they can still take effect (see the
    module docstring); the variables it set."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not _has_avx2_fma():
        return []
    pinned = []
    for name, value, library in (("OPENBLAS_CORETYPE", KERNEL, "numpy"), ("MKL_CBWR", MKL_PATH, "torch")):
        if name not in os.environ and library not in sys.modules:
            os.environ[name] = value
            pinned.append(name)
    return pinned


def blas_kernel() -> str | None:
    """The kernel family numpy's BLAS runs (e.g. ``"Haswell"``), or None when unknown."""
    import numpy  # noqa: F401  (threadpoolctl sees the libraries loaded)
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            return lib.get("architecture")
    return None
