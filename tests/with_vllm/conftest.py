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
