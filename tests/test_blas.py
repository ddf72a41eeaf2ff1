"""ckptsel pins numpy's BLAS kernels on x86-64 (``ckptsel._util.blas``), so summary.json is the
same bytes on AVX2 and AVX-512 CPUs (the hashes pinned in test_summary were written on AVX2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckptsel._util.blas import KERNEL, _has_avx2_fma, blas_kernel

pinnable = pytest.mark.skipif(
    not _has_avx2_fma() or os.environ.get("OPENBLAS_CORETYPE") not in (None, KERNEL),
    reason="not an x86-64 CPU with AVX2 + FMA, or OPENBLAS_CORETYPE chosen by the user",
)


def _kernel_in_a_fresh_process(code: str, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return out.stdout.strip()


@pinnable
def test_ckptsel_loaded_first_pins_the_kernels():
    assert blas_kernel() == KERNEL  # this test session (conftest loads ckptsel first)
    show = "from ckptsel._util.blas import blas_kernel; print(blas_kernel())"
    assert _kernel_in_a_fresh_process(f"import ckptsel, numpy; {show}") == KERNEL
    # a kernel the user chose is kept
    assert _kernel_in_a_fresh_process(f"import ckptsel; {show}", OPENBLAS_CORETYPE="Sandybridge") == "Sandybridge"
