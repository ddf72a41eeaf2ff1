"""The engines a measurer drives.

* :mod:`~ckptsel.measure.backends.hf` — Hugging Face models: the dtype, one model in memory at
  a time (adapters swapped or merged), the run's tokenizer; the forward pass itself is
  :mod:`ckptsel.measure.passes`.
* :mod:`~ckptsel.measure.backends.vllm` — an optional vLLM engine for generation (the
  ``vllm`` extra, imported only when used).
"""

from __future__ import annotations

__all__: list[str] = []  # other stages import from the defining modules
