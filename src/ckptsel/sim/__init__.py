"""Inputs with known truth and the embedded default study.

* :mod:`~ckptsel.sim.presets` — the simulation's knobs and the two shipped settings;
* :mod:`~ckptsel.sim.simulate` — synthetic records with realistic, known structure
  (``ckptsel simulate``);
* :mod:`~ckptsel.sim.tiny` — tiny causal LMs built locally (tokenizer + Llama-style model);
* :mod:`~ckptsel.sim.embedded` — the generated math-word-problem task and its pre-trained base;
* :mod:`~ckptsel.sim.quickstart` — ``ckptsel quickstart``: the embedded study through
  ``ckptsel run``.
"""

from __future__ import annotations

from ckptsel.sim.quickstart import run_quickstart
from ckptsel.sim.simulate import write_simulation

__all__ = ["run_quickstart", "write_simulation"]
