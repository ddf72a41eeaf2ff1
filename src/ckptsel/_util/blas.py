"""One BLAS kernel family on every x86-64 CPU, so that the same records and seed give the same
``summary.json`` bytes on any machine (and ``verify`` passes on another machine than the one
that analysed).

numpy's OpenBLAS picks its matrix kernels by CPU at load time: on an AVX-512 CPU (SkylakeX
kernels) a float matrix product adds in another order than on an AVX2 CPU (Haswell kernels),
and the last bits of interval bounds differ. ckptsel therefore asks OpenBLAS for its Haswell
kernels (AVX2 + FMA, which every such CPU has) before numpy is loaded, unless the user chose
a kernel (``OPENBLAS_CORETYPE`` set) or numpy is already loaded (then nothing can change it;
:func:`blas_kernel` says what runs). Other CPUs and BLAS libraries are left alone.
"""

from __future__ import annotations

import os
import platform
import sys

KERNEL = "Haswell"


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


def pin_kernels() -> bool:
    """Set ``OPENBLAS_CORETYPE`` to :data:`KERNEL` when that can still take effect; whether it
    did."""
    if "OPENBLAS_CORETYPE" in os.environ or "numpy" in sys.modules:
        return False
    if platform.machine().lower() not in ("x86_64", "amd64") or not _has_avx2_fma():
        return False
    os.environ["OPENBLAS_CORETYPE"] = KERNEL
    return True


def blas_kernel() -> str | None:
    """The kernel family numpy's BLAS runs (e.g. ``"Haswell"``), or None when unknown."""
    import numpy  # noqa: F401  (threadpoolctl sees the libraries loaded)
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("user_api") == "blas":
            return lib.get("architecture")
    return None
