"""Answer extraction and scoring by task name: one public API over the three answer families
(SPEC §10; the rules themselves are :mod:`ckptsel.data.answers`).

``task`` may be a family name (``gsm8k``, ``math``, ``commonsense``) or any task registered in
:mod:`ckptsel.data.tasks` (``metamath``, ``boolq``, ...); the task's answer family decides the rules.
The string :func:`extract` returns is what checkpoint agreement compares, so two answers that
the scorer treats as the same (``3,000`` and ``3000``) extract to the same string.

``subtask`` matters only for commonsense: it selects the label pattern (``boolq`` ->
``true|false``). For a specific commonsense task (``--task piqa``) the task name already does;
for a mixed ``commonsense`` pool pass the item's subtask, else the union of all labels is used.
"""

from __future__ import annotations

from ckptsel.data.answers import FAMILIES
from ckptsel.data.answers import commonsense as _commonsense
from ckptsel.data.answers import gsm8k as _gsm8k
from ckptsel.data.answers import latex as _math
from ckptsel.data.tasks import get_task, task_family

__all__ = ["FAMILIES", "extract", "is_correct", "normalize_reference", "family_of"]


def family_of(task: str) -> str:
    """Answer family of a family name or registered task (unknown -> CkptselError)."""
    if task in FAMILIES:
        return task
    return task_family(task)


def _commonsense_subtask(task: str, subtask: str) -> str:
    """The label set to use: the caller's subtask, else the registered task's own."""
    if subtask or task == "commonsense":
        return subtask
    return get_task(task).subtask


def extract(task: str, text: str, *, subtask: str = "") -> str:
    """Normalized answer found in a generation; "" if none was found."""
    family = family_of(task)
    if family == "gsm8k":
        return _gsm8k.extract(text)
    if family == "math":
        return _math.extract(text)
    return _commonsense.extract(text, _commonsense_subtask(task, subtask))


def is_correct(task: str, text: str, reference: str, *, subtask: str = "") -> bool:
    """Whether the generation's answer matches the gold reference."""
    family = family_of(task)
    if family == "gsm8k":
        return _gsm8k.is_correct(text, reference)
    if family == "math":
        return _math.is_correct(text, reference)
    return _commonsense.is_correct(text, reference, _commonsense_subtask(task, subtask))


def normalize_reference(task: str, reference: str) -> str:
    """The normal form of a gold answer, comparable with :func:`extract`'s output."""
    family = family_of(task)
    if family == "gsm8k":
        return _gsm8k.normalize_reference(reference)
    if family == "math":
        return _math.normalize_reference(reference)
    return _commonsense.normalize_reference(reference)
