"""Commonsense answers in the LLM-Adapters label format (SPEC §10).

The answer is the **first** occurrence (case-insensitive) of the task's label pattern, as in
the LLM-Adapters evaluation: ``true|false`` (boolq), ``solution1|2`` (piqa), ``answer1..5``
(social_i_qa, ARC, openbookqa), ``ending1..4`` (hellaswag), ``option1|2`` (winogrande),
lowercased. Labels must stand alone on the left (``untrue`` is not ``true``) and not run on
into more digits (``answer12`` is not ``answer1``). When the subtask is unknown (a mixed
``commonsense`` pool scored without a subtask), the union of all label patterns is used.
"""

from __future__ import annotations

import re

_ANSWER_1_5 = r"answer[1-5]"

# Keyed by the lowercased task (folder) name.
LABEL_PATTERNS: dict[str, str] = {
    "boolq": r"true|false",
    "piqa": r"solution[12]",
    "social_i_qa": _ANSWER_1_5,
    "arc-challenge": _ANSWER_1_5,
    "arc-easy": _ANSWER_1_5,
    "openbookqa": _ANSWER_1_5,
    "hellaswag": r"ending[1-4]",
    "winogrande": r"option[12]",
}
ANY_LABEL = r"true|false|solution[12]|answer[1-5]|ending[1-4]|option[12]"


def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(r"(?<![a-z0-9])(?:" + pattern + r")(?![a-z0-9])", re.IGNORECASE)


_COMPILED = {name: _compile(pattern) for name, pattern in LABEL_PATTERNS.items()}
_ANY = _compile(ANY_LABEL)


def label_regex(subtask: str = "") -> re.Pattern[str]:
    """The compiled label pattern of a commonsense task; the union for an unknown/empty one."""
    return _COMPILED.get(subtask.strip().lower(), _ANY)


def extract(text: str, subtask: str = "") -> str:
    """First label of the task's pattern in the text, lowercased; "" if none."""
    match = label_regex(subtask).search(text)
    return match.group(0).lower() if match else ""


def normalize_reference(reference: str) -> str:
    """Gold labels compare lowercased and stripped (``Answer3`` -> ``answer3``)."""
    return reference.strip().lower()


def is_correct(text: str, reference: str, subtask: str = "") -> bool:
    """Correct iff the extracted label equals the gold label."""
    gold = normalize_reference(reference)
    return bool(gold) and extract(text, subtask) == gold
