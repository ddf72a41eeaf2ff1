"""Answer extraction and scoring by task: one public API over every task's answer rule
(SPEC §10; the rules themselves are :mod:`ckptsel.data.answers`).

``task`` is anything :func:`ckptsel.data.tasks.get_task` reads: a family name (``gsm8k``,
``math``, ``commonsense``), a registered task (``metamath``, ``boolq``, ...) or a task file
(``PATH.toml``); the task's :class:`~ckptsel.data.answers.rules.AnswerRule` decides. The string
:func:`extract` returns is what checkpoint agreement compares, so two answers that the scorer
treats as the same (``3,000`` and ``3000``) extract to the same string.

``subtask`` matters only for commonsense: it selects the label pattern (``boolq`` ->
``true|false``). For a specific commonsense task (``--task piqa``) the task name already does;
for a mixed ``commonsense`` pool pass the item's subtask, else the union of all labels is used.

A task file's rule may fail on one text (its regex past the time bound, its scorer raising or
returning no bool): :class:`~ckptsel.data.answers.rules.AnswerRuleError`, one line naming the task
file and the pattern or scorer; a caller that knows the item adds it (``err.at(item_id)``).
:func:`check_scorer` imports a task's scorer up front (only :func:`is_correct` needs it).
"""

from __future__ import annotations

from ckptsel.data.answers import FAMILIES
from ckptsel.data.tasks import get_task, task_family

__all__ = ["FAMILIES", "check_scorer", "extract", "is_correct", "normalize_reference", "family_of"]


def family_of(task: str) -> str:
    """Answer family of a family name or registered task (unknown -> CkptselError)."""
    if task in FAMILIES:
        return task
    return task_family(task)


def extract(task: str, text: str, *, subtask: str = "") -> str:
    """Normalized answer found in a generation; "" if none was found."""
    found = get_task(task)
    return found.rule.answer(text, subtask or found.subtask)


def is_correct(task: str, text: str, reference: str, *, subtask: str = "") -> bool:
    """Whether the generation's answer matches the gold reference."""
    found = get_task(task)
    return found.rule.is_correct(text, reference, subtask or found.subtask)


def normalize_reference(task: str, reference: str) -> str:
    """The normal form of a gold answer, comparable with :func:`extract`'s output."""
    return get_task(task).rule.normalize_reference(reference)


def check_scorer(task: str) -> None:
    """Import the task's scorer now (a task file's ``score.py:function``; nothing for a task
    without one), so a broken scorer stops a command before anything is measured."""
    get_task(task).rule.load_scorer()
