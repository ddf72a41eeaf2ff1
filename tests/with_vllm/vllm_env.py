"""What every vLLM test module starts with: ``vllm = require_vllm()``."""

from __future__ import annotations

import os

import pytest

REASON = (
    "the vLLM tests run in the vLLM environment: bash scripts/setup_vllm.sh, then "
    ".venv-vllm/bin/python -m pytest tests/with_vllm"
)


def require_vllm():
    """``vllm``, or a module skip with :data:`REASON` (an error under ``CKPTSEL_REQUIRE_VLLM=1``,
    so that CI cannot pass on skipped tests)."""
    try:
        import vllm
    except ImportError as err:
        if os.environ.get("CKPTSEL_REQUIRE_VLLM") == "1":
            raise RuntimeError(
                f"CKPTSEL_REQUIRE_VLLM=1 but vllm cannot be imported: {err}"
            ) from err
        pytest.skip(REASON, allow_module_level=True)
    return vllm
