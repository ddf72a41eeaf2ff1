"""ckptsel pins numpy's BLAS kernels and torch's MKL code path on x86-64 (``ckptsel._util.blas``),
so summary.json is the same bytes on AVX2 and AVX-512 CPUs (the hashes pinned in test_summary
were written on an AMD CPU, whose OpenBLAS kernels are Haswell's), and the quickstart's base
the same weights on one thread or two (tests/data/test_embedded.py checks those)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ckptsel._util.blas import KERNEL, MKL_PATH, _has_avx2_fma, blas_kernel

pinnable = pytest.mark.skipif(
    not _has_avx2_fma() or os.environ.get("OPENBLAS_CORETYPE", KERNEL) != KERNEL or os.environ.get("MKL_CBWR", MKL_PATH) != MKL_PATH,
    reason="not an x86-64 CPU with AVX2 + FMA, or OPENBLAS_CORETYPE chosen by the user",
)


def _printed_by_a_fresh_process(code: str, **env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "MKL_CBWR")}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pinnable
def test_ckptsel_loaded_first_pins_the_kernels():
    assert blas_kernel() == KERNEL  # this test session (conftest loads ckptsel first)
    show = "from ckptsel._util.blas import blas_kernel; print(blas_kernel())"
    assert _printed_by_a_fresh_process(f"import ckptsel, numpy; {show}") == KERNEL
    # a kernel the user chose is kept
    assert _printed_by_a_fresh_process(f"import ckptsel; {show}", OPENBLAS_CORETYPE="Sandybridge") == "Sandybridge"


@pinnable
def test_torch_gets_the_strict_mkl_path_unless_loaded_first():
    show = "import os; print(os.environ.get('MKL_CBWR'))"
    assert os.environ.get("MKL_CBWR") == MKL_PATH  # this session
    assert _printed_by_a_fresh_process(f"import ckptsel, torch; {show}") == MKL_PATH
    assert _printed_by_a_fresh_process(f"import torch, ckptsel; {show}") == "None"
    assert _printed_by_a_fresh_process(f"import ckptsel; {show}", MKL_CBWR="COMPATIBLE") == "COMPATIBLE"
