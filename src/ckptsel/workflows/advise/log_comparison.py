"""``ckptsel compare-logs``: two evaluation logs of any harness ckptsel reads (inspect,
lm-eval, lighteval, or a mix), compared paired, without writing records.

Each log is read by its harness's own ingest reader (:func:`ckptsel.measure.read_logs`) and
named by the one mapping every ingest uses (:func:`ckptsel.measure.to_records`: split, task,
group, correctness), as if A and B were two checkpoints of one trajectory. Then, per
``(split, task)`` the two logs share:

* the samples are aligned by id (inspect: the sample id; lm-eval: ``<task>-<doc_id>``; lighteval:
  the document id); samples in one log only are counted and left out, and a task the two logs
  share no sample of is refused;
* the paired comparison is :func:`ckptsel.workflows.advise.comparison.paired_difference`, the one
  ``ckptsel compare`` makes on records, with the same seed stream per split, so a log pair
  ingested as two checkpoints and compared there gives the same numbers (with several tasks,
  the verdict aside: it follows the adjusted p, next);
* across the tasks, the McNemar p-values adjusted by Holm (default) or Benjamini–Hochberg
  (:func:`ckptsel.stats.adjust_pvalues`), and the verdict follows the adjusted p that is printed:
  a difference that reads resolved by its own test but whose adjusted p is above ``1 − level``
  reads *unresolved*, with the reason (``"the Holm-adjusted McNemar test's p = 0.095 > 0.05"``); with one task
  the adjusted p is the raw one and nothing changes;
* ``items_needed``: the fewest independent items from which on the exact McNemar test at the
  interval's level (the test ``compare`` makes) has at least 80% power at every larger number
  up to :data:`~ckptsel.workflows.advise.planning.EXACT_LIMIT`, at the observed discordance
  ``only_a / items`` and ``only_b / items``
  (:func:`~ckptsel.workflows.advise.planning.exact_items_needed`; the exact test's power is not
  monotone in the number of items). ``items_needed_power`` is that power there; null with
  ``items_needed_note`` saying why when there is no number (the logs agree on every item, no
  observed difference, or ``"over 100000 items"``). It used to be ``plan``'s normal-approximation
  closed form, at whose answer the exact test's power was below 80% in every case measured
  (0.70–0.80 on typical tables, 0.11 where it named 7 items, 0 where it named 3), and
  which refused tables whose discordance all goes one way (a 20 pp difference "impossible" at
  agreement 0.8, by rounding).

The same items: a sample id the two logs share must name the same item in both (logs of one
harness: lm-eval's ``doc_hash``, inspect's input and target, lighteval's query and gold,
:func:`ckptsel.measure.check_same_items`); the first id that differs is refused in one line
naming both logs, unless ``allow_different_items`` (``--allow-different-items``), which says so
on stderr and counts them (``different_items`` per comparison, and in ``settings``). Every field
read from a log is type-checked by its reader; ``options.rescore`` scores the samples with the
task's rule, not the log's correctness (each contradiction between the two is said either way).

inspect logs with several epochs are refused (its reader keeps one answer per sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel._util import rng as streams
from ckptsel.errors import CkptselError
from ckptsel.ingest.logs import LogOptions, read_logs
from ckptsel.ingest.mapping import check_same_items, to_records
from ckptsel.results.estimate import Estimate
from ckptsel.stats.exact import judged
from ckptsel.stats.paired import adjust_pvalues
from ckptsel.workflows.advise.comparison import CompareSettings, Side, paired_difference, shared_items
from ckptsel.workflows.advise.planning import exact_items_needed

POWER = 0.8  # the power items_needed's exact McNemar test keeps
KEY = ["split", "task", "item_id"]


def log_rows(path: Path, side: str, options: LogOptions, split: str, note: Callable[[str], None]) -> tuple[str, pd.DataFrame]:
    """``(harness, contract generation rows)`` of one log, its ``trajectory`` ``side``."""
    step = {"a": 0, "b": 1}[side]
    harness, logs = read_logs(path, step, options, note)
    frames = []
    for log in logs:  # one task log at a time: inspect sample ids repeat across tasks
        ingested = to_records([log], harness=harness, trajectory=side, task=options.task, split=split, note=note, rescore=options.rescore)
        frames.append(ingested.generations.assign(source=log.source, content=ingested.content.to_numpy()))
    rows = pd.concat(frames, ignore_index=True)
    twice = rows.duplicated(KEY, keep=False)
    if twice.any():
        r = rows[twice].iloc[0]
        sources = " and ".join(sorted(set(rows[twice & (rows["item_id"] == r["item_id"])]["source"])))
        raise CkptselError(
            f"{sources}: sample {r['item_id']!r} of task {r['task']!r} ({r['split']}) given twice in {path}; compare one log per task"
        )
    return harness, rows


def _pairs(a: pd.DataFrame, b: pd.DataFrame, note: Callable[[str], None]) -> list[tuple]:
    """``[(split, task of A, task of B)]``: the (split, task)s both logs hold; or, when each
    holds one task of one split under different names, those two (said)."""
    ka = sorted(set(zip(a["split"], a["task"], strict=True)))
    kb = sorted(set(zip(b["split"], b["task"], strict=True)))
    common = [k for k in ka if k in kb]
    if common:
        for what, only in (("A", sorted(set(ka) - set(kb))), ("B", sorted(set(kb) - set(ka)))):
            if only:
                note(f"note: tasks only in log {what}, not compared: {only}")
        return [(s, t, t) for s, t in common]
    if len(ka) == len(kb) == 1 and ka[0][0] == kb[0][0]:
        note(f"note: comparing task {ka[0][1]!r} of log A with task {kb[0][1]!r} of log B")
        return [(ka[0][0], ka[0][1], kb[0][1])]
    raise CkptselError(
        f"the two logs share no task: A has {[t for _, t in ka]}, B has {[t for _, t in kb]} "
        "(splits and tasks); pass --task to read both as one task"
    )


def _side(rows: pd.DataFrame) -> Side:
    return Side(rows["item_id"].to_numpy().astype(str), rows["group"].to_numpy().astype(str), rows["correct"].to_numpy().astype(bool))


def items_needed(result: dict, level: float) -> dict:
    """``{"items_needed", "items_needed_power", "items_needed_note"}``: the independent items
    from which on the exact McNemar test at ``level`` keeps :data:`POWER` power at the observed
    discordance (:func:`~ckptsel.workflows.advise.planning.exact_items_needed`), the power
    there, and why there is no number (None when there is one)."""
    t = result["table"]
    answer = exact_items_needed(t["only_a"], t["only_b"], result["items"], level, target=POWER)
    return {"items_needed": answer.items, "items_needed_power": answer.power, "items_needed_note": answer.note}


CORRECTIONS = {"holm": "Holm", "bh": "BH"}


def adjusted_verdict(difference: dict, p_adjusted: float, level: float, correction: str) -> dict:
    """``difference`` (a stored estimate) as it reads beside its adjusted p, by the one
    small-design rule (:func:`ckptsel.stats.judged`): one that reads resolved but whose
    ``p_adjusted`` is above ``1 − level`` reads unresolved, with the reason (``"the Holm-adjusted
    McNemar test's p = 0.095 > 0.05"``); anything else is returned as it is."""
    test = f"the {CORRECTIONS[correction]}-adjusted McNemar test"
    return judged(Estimate.from_dict(difference), level, p_adjusted, test).to_dict()


@dataclass(frozen=True)
class _Pairing:
    """How the two logs' samples pair: both logs' harnesses (the same items are checked only
    between logs of one harness, whose contents compare) and whether ids whose contents differ
    are paired anyway (``--allow-different-items``)."""

    harnesses: tuple[str, str]
    allow_different_items: bool
    note: Callable[[str], None]

    def different(self, ra: pd.DataFrame, rb: pd.DataFrame) -> int:
        """How many shared ids hold different items in the two logs (see the module)."""
        if self.harnesses[0] != self.harnesses[1]:
            return 0
        shared = np.intersect1d(ra["item_id"].to_numpy(), rb["item_id"].to_numpy())
        both = pd.concat([ra, rb], ignore_index=True)
        return check_same_items(
            both[both["item_id"].isin(shared)],
            ("item_id",),
            self.harnesses[0],
            allow=self.allow_different_items,
            note=self.note,
            refused="",
        )


def _compare_pair(a: pd.DataFrame, b: pd.DataFrame, pair: tuple, names, settings, pairing: _Pairing) -> dict:
    split, task_a, task_b = pair
    ra = a[(a["split"] == split) & (a["task"] == task_a)]
    rb = b[(b["split"] == split) & (b["task"] == task_b)]
    if not np.isin(ra["item_id"].to_numpy(), rb["item_id"].to_numpy()).any():
        raise CkptselError(
            f"task {task_a!r} ({split}): the logs share no sample id ({len(ra)} in A, {len(rb)} "
            "in B); a paired comparison needs the same samples"
        )
    different = pairing.different(ra, rb)
    x, y, groups, dropped = shared_items(_side(ra), _side(rb), split, names)
    res = paired_difference(x, y, groups, settings, streams.COMPARE_SPLITS[split])
    task = task_a if task_a == task_b else f"{task_a} | {task_b}"
    return {"split": split, "task": task, **res, "not_shared": dropped, "different_items": different}


def compare_logs(
    log_a: Path,
    log_b: Path,
    *,
    options: LogOptions | None = None,
    split: str = "test",
    correction: str = "holm",
    settings: CompareSettings | None = None,
    note: Callable[[str], None] = print,
    allow_different_items: bool = False,
) -> dict:
    """Everything ``ckptsel compare-logs`` reports, as a JSON-ready dict (module docstring).
    ``split``: the split of samples whose metadata names none; ``allow_different_items``: pair
    ids whose contents differ between the logs (said, and counted per comparison)."""
    settings = settings or CompareSettings()
    options = options or LogOptions()
    if correction not in CORRECTIONS:
        raise CkptselError(f"--correction {correction!r}: use holm or bh")
    harness_a, a = log_rows(Path(log_a), "a", options, split, note)
    harness_b, b = log_rows(Path(log_b), "b", options, split, note)
    names = (str(log_a), str(log_b))
    pairing = _Pairing((harness_a, harness_b), allow_different_items, note)
    results = [_compare_pair(a, b, pair, names, settings, pairing) for pair in _pairs(a, b, note)]
    adjusted = adjust_pvalues(np.array([r["mcnemar_p"] for r in results]), correction)
    for r, p in zip(results, adjusted, strict=True):
        r["mcnemar_p_adjusted"] = float(p)
        r["difference"] = adjusted_verdict(r["difference"], float(p), settings.level, correction)
        r.update(items_needed(r, settings.level))
    return {
        "a": {"log": str(log_a), "harness": harness_a, "samples": len(a)},
        "b": {"log": str(log_b), "harness": harness_b, "samples": len(b)},
        "settings": {
            **asdict(settings),
            "correction": correction,
            "power": POWER,
            "allow_different_items": allow_different_items,
            "rescore": options.rescore,
        },
        "comparisons": results,
    }
