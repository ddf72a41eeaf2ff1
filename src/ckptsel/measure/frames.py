"""Contract record frames (SPEC §2) from generated texts and scored responses.

Answers and correctness are always derived from the generated ``text`` with the current
:mod:`ckptsel.data.scoring`, here and when the part cache is turned back into records, so a scorer
fix never needs a re-generation.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import pandas as pd

from ckptsel.data.answers.rules import AnswerRuleError
from ckptsel.data.scoring import extract, is_correct
from ckptsel.data.tasks import task_identity, task_label
from ckptsel.records.schema import coerce_generations, coerce_nll, empty_nll


def score_texts(task: str, items: Sequence[Any], texts: Sequence[str]) -> tuple[list[str], list[bool]]:
    """Normalized answers and correctness of generated texts (``ckptsel.data.scoring``)."""
    # the item's subtask picks the label pattern in a mixed commonsense pool; a task file's
    # identity (its content hash) keys the cache, so an edited file is never scored from it
    identity = task_identity(task)
    scored = []
    for t, it in zip(texts, items, strict=True):
        try:
            scored.append(_score(task, identity, it.subtask, t, it.reference))
        except AnswerRuleError as err:  # a task file's regex past its bound, a scorer failing
            raise err.at(it.item_id) from None
    return [a for a, _ in scored], [ok for _, ok in scored]


@functools.lru_cache(maxsize=1 << 14)
def _score(task: str, identity: str, subtask: str, text: str, reference: str) -> tuple[str, bool]:
    """(answer, correct) of one text. Cached: every item is scored at every checkpoint, and
    again when the records are rebuilt from the parts, and most texts repeat."""
    return (extract(task, text, subtask=subtask), bool(is_correct(task, text, reference, subtask=subtask)))


def generation_frame(
    items: Sequence[Any], texts: Sequence[str], *, task: str, split: str, trajectory: str, configuration: str, step: int
) -> pd.DataFrame:
    """Contract generation rows (+ ``text``) for ``items`` with their generated ``texts``."""
    ans, ok = score_texts(task, items, texts)
    df = pd.DataFrame(
        {
            "trajectory": trajectory,
            "configuration": configuration,
            "task": task_label(task),  # a task file: its name
            "step": int(step),
            "split": split,
            "item_id": [it.item_id for it in items],
            "group": [it.group for it in items],
            "subtask": [it.subtask for it in items],
            "answer": ans,
            "correct": ok,
            "text": list(texts),
        },
        index=range(len(items)),
    )
    return coerce_generations(df)


def nll_frame(items: Sequence[Any], scored: Sequence[dict[int, Any]], *, split: str, trajectory: str, step: int) -> pd.DataFrame:
    """Contract NLL rows: one per item and window."""
    rows = [
        {
            "trajectory": trajectory,
            "step": int(step),
            "split": split,
            "item_id": it.item_id,
            "nll_sum": s.nll_sum,
            "n_tokens": s.n_tokens,
            "window": w,
        }
        for it, per in zip(items, scored, strict=True)
        for w, s in per.items()
    ]
    if not rows:
        return empty_nll()
    return coerce_nll(pd.DataFrame(rows))
