"""The vLLM tests: they run in the vLLM environment (``bash scripts/setup_vllm.sh``, then
``.venv-vllm/bin/python -m pytest tests/with_vllm``) and skip, with that reason, elsewhere.

With ``CKPTSEL_REQUIRE_VLLM=1`` (``.ci/run`` sets it) a missing vLLM is an error, not a skip, so
that CI cannot pass on skipped tests. The skip itself is :func:`vllm_env.require_vllm`; here, the
engine's settings: in-process (ckptsel's default on the CPU), quiet.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


import logging  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402


def _revive_log_streams() -> None:
    for name in ("vllm", ""):
        for handler in logging.getLogger(name).handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                with handler.lock:  # not setStream: it flushes the closed stream first
                    handler.stream = sys.stderr


@pytest.fixture(autouse=True)
def _vllm_logs_to_a_live_stream():
    """vLLM's log handlers keep the stream they were made with: one made while a test captured
    the output (``capsys``) holds that test's stream, closed when the test ends, and vLLM's next
    warning (in a later test or a module fixture) fails on it. Before each test and after its
    capture is closed (this fixture is set up before ``capsys``, so torn down after it), a
    handler whose stream is closed writes to the current ``sys.stderr`` again."""
    _revive_log_streams()
    yield
    _revive_log_streams()
