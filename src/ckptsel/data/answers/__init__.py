"""Answer rules per family (SPEC §10): how an answer is found in a generation and compared
with the gold reference.

* :mod:`~ckptsel.data.answers.gsm8k` — GSM8K/MetaMath style: the ``The answer is`` marker, else
  the last number; compared numerically (:mod:`~ckptsel.data.answers.numbers`).
* :mod:`~ckptsel.data.answers.latex` — MATH style: the last ``\\boxed{…}``, equivalence by
  ``math-verify`` with a string-normalisation fallback.
* :mod:`~ckptsel.data.answers.commonsense` — the first occurrence of the task's label pattern.

The task-keyed API (``extract``, ``is_correct`` by task name) is :mod:`ckptsel.data.scoring`.
"""

from __future__ import annotations

FAMILIES = ("gsm8k", "math", "commonsense")

__all__ = ["FAMILIES"]
