"""What every vLLM test module starts with: ``vllm = require_vllm()``; and what several compare:
a records folder's rows in key order (:func:`frames`), two of them equal (:func:`assert_same`)."""

from __future__ import annotations

import os

import pytest

REASON = "the vLLM tests run in the vLLM environment: bash scripts/setup_vllm.sh, then .venv-vllm/bin/python -m pytest tests/with_vllm"


def require_vllm():
    """``vllm``, or a module skip with :data:`REASON` (an error under ``CKPTSEL_REQUIRE_VLLM=1``,
    so that CI cannot pass on skipped tests)."""
    try:
        import vllm
    except ImportError as err:
        if os.environ.get("CKPTSEL_REQUIRE_VLLM") == "1":
            raise RuntimeError(f"CKPTSEL_REQUIRE_VLLM=1 but vllm cannot be imported: {err}") from err
        pytest.skip(REASON, allow_module_level=True)
    return vllm


KEY = ["trajectory", "step", "split", "item_id"]


def frames(out):
    """``(generations, nll)`` of the records in ``out``, sorted by key, provenance dropped."""
    from ckptsel.records.scan import read_frame

    gen = read_frame(out, "generations").sort_values(KEY).reset_index(drop=True)
    nll = read_frame(out, "nll").sort_values([*KEY, "window"]).reset_index(drop=True)
    return (gen.drop(columns=["provenance"], errors="ignore"), nll.drop(columns=["provenance"], errors="ignore"))


def assert_same(a, b) -> None:
    """Two :func:`frames` equal: texts and every generation column, NLL to 1e-6 (float32)."""
    assert a[0]["text"].tolist() == b[0]["text"].tolist()
    assert a[0].equals(b[0])
    assert a[1].drop(columns="nll_sum").equals(b[1].drop(columns="nll_sum"))
    assert a[1]["nll_sum"].to_numpy() == pytest.approx(b[1]["nll_sum"].to_numpy(), rel=1e-6)
