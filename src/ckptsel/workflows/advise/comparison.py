"""``ckptsel compare``: is checkpoint A really better than checkpoint B on the same items?

Both checkpoints are scored on the items they share (validation: the eligible pools of the
two trajectories, intersected; test: the test pool). Per split it reports the paired accuracy
difference A − B (pp) with its interval, the McNemar p-value and the 2×2 counts:

* **items independent** (every item its own group): Newcombe's score-type interval of a paired
  difference (:func:`ckptsel.stats.newcombe_paired`; no draws, width at every table, its level
  kept at small ``n``) and the exact binomial McNemar test on the discordant items;
* **items in groups**: a paired bootstrap interval in which items sharing a ``group`` are
  resampled together (the number of clusters is reported) and the clustered McNemar test (exact
  sign-flip test of whole clusters' ``only A − only B``, Durkalski et al. 2003's statistic;
  :func:`ckptsel.stats.clustered_mcnemar`): the plain test treats correlated items as
  independent and rejects a true null far more often than its level (``mcnemar_method`` says
  which test made ``mcnemar_p``; the plain one is kept as ``mcnemar_p_items`` then). A
  difference whose items form one cluster, or whose bootstrap shows no spread at all, has no
  interval (not estimable).

A difference reads *resolved* only when its interval excludes 0 and the exact test rejects at
the interval's level (the one small-design rule, :mod:`ckptsel.stats.exact`); otherwise it keeps
its interval and reads unresolved, with the test's p in the reason. ``select``'s test gain of a
single chosen checkpoint is this same comparison (:func:`paired_estimate`), so the two commands
agree on the same two checkpoints and items. The two checkpoints may come from one trajectory
or from two runs measured on the same items (``trajectory_b``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ckptsel import defaults
from ckptsel._util import rng as streams
from ckptsel._util.checks import check_int, check_level, check_seed
from ckptsel.choose import core
from ckptsel.choose.rules import average_rule_step
from ckptsel.data.tasks import get_task, is_task_file
from ckptsel.errors import CkptselError
from ckptsel.records.load import find_trajectory, load_test, load_texts, load_validation
from ckptsel.records.scan import read_rows
from ckptsel.records.schema import GENERATIONS_FILE, candidate_step, step_text
from ckptsel.results.estimate import Estimate
from ckptsel.stats.bootstrap import percentile_interval
from ckptsel.stats.exact import interval_estimate, judged
from ckptsel.stats.paired import cluster_differences, clustered_mcnemar, mcnemar_exact, newcombe_paired, two_by_two
from ckptsel.stats.resample import cluster_codes, clustered_means

EXACT = "exact binomial (items independent)"
CLUSTERED = "clustered: exact sign-flip test of whole clusters (Durkalski et al. 2003 statistic)"


@dataclass(frozen=True)
class CompareSettings:
    """Paired-bootstrap draws, seed and interval level (validated when built)."""

    draws: int = defaults.COMPARE_DRAWS
    seed: int = defaults.SEED
    level: float = defaults.CONFIDENCE

    def __post_init__(self) -> None:
        check_int(self.draws, "--draws", low=defaults.MIN_DRAWS, high=defaults.MAX_DRAWS)
        check_seed(self.seed)
        check_level(self.level)


@dataclass
class Side:
    """One checkpoint's correctness on one split, with the items' ids and groups."""

    item_ids: np.ndarray  # (n,)
    groups: np.ndarray  # (n,)
    correct: np.ndarray  # (n,) bool
    answers: np.ndarray | None = None  # (n,) integer answer codes (equal code = equal answer)
    fallback: np.ndarray | None = None  # (n,) bool: only the answer rule's fallback found it
    distinct: int | None = None  # distinct answers over its trajectory's grid (the flag's K)


def fallback_matrix(
    records_dir: Path, trajectory: str, task: str, steps: np.ndarray, item_ids: np.ndarray, split: str, only_steps=None
) -> np.ndarray | None:
    """``(T, n)`` bool: the answers that only the task's answer rule's fallback found
    (:meth:`ckptsel.data.AnswerRule.fallback_used`, e.g. gsm8k's last number without a marker),
    read off the recorded texts with the current rule, as answers and correctness are
    (:mod:`ckptsel.measure.frames`); ``only_steps``: just those rows are read (the others stay
    False). None when the trajectory recorded no texts, or its task is no registered task (a
    task file is never read from a records folder's column)."""
    if is_task_file(task):
        return None
    try:
        rule = get_task(task).rule
    except CkptselError:
        return None
    texts = load_texts(records_dir, trajectory, split, only_steps)
    if texts is None:
        return None
    si = np.searchsorted(steps, texts["step"].to_numpy())
    si = np.minimum(si, len(steps) - 1)
    ii = pd.Index(item_ids).get_indexer(texts["item_id"].astype(str))
    keep = (steps[si] == texts["step"].to_numpy()) & (ii >= 0)
    out = np.zeros((len(steps), len(item_ids)), dtype=bool)
    codes, uniques = pd.factorize(texts["text"].to_numpy()[keep])  # texts repeat across checkpoints
    used = np.array([bool(rule.fallback_used(t)) for t in uniques] + [False], dtype=bool)
    out[si[keep], ii[keep]] = used[codes]  # code -1 (no text): the appended False
    return out


def fallback_shares(correct: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """``(T,)`` per checkpoint: the share of its correct answers that only a fallback found (0
    where it has none right)."""
    right = correct.sum(axis=1)
    only = (correct & fallback).sum(axis=1)
    return np.where(right > 0, only / np.maximum(right, 1), 0.0)


def answer_summary(side: Side) -> dict:
    """How concentrated one checkpoint's answers are on its pool: the share of items given its
    most common answer, the share of those it is right on, and whether that makes it degenerate
    (:data:`ckptsel.defaults.DEGENERATE_SHARE`; :func:`ckptsel.choose.core.degenerate_checkpoints`)."""
    answers = np.zeros((1, 0), np.int64) if side.answers is None else np.asarray(side.answers)[None, :]
    flagged, share, right = core.degenerate_checkpoints(
        answers,
        np.asarray(side.correct, bool)[None, :],
        defaults.DEGENERATE_SHARE,
        defaults.DEGENERATE_MIN_ITEMS,
        defaults.DEGENERATE_PRECISION,
        side.distinct,
    )
    out = {
        "items": int(answers.shape[1]),
        "most_common_share": round(float(share[0]), 6),
        "most_common_right": round(float(right[0]), 6),
        "degenerate": bool(flagged[0]),
    }
    if side.fallback is not None:  # the share of its correct answers only a fallback found
        out["fallback_right"] = round(float(fallback_shares(np.asarray(side.correct, bool)[None, :], side.fallback[None, :])[0]), 6)
    return out


def paired_estimate(
    a: np.ndarray, b: np.ndarray, groups: np.ndarray, level: float, replicates: Callable[[np.ndarray], np.ndarray]
) -> tuple[Estimate, float, dict]:
    """The paired difference A − B (pp) of two boolean ``(n,)`` vectors over the same items, as
    judged (module docstring), its exact McNemar p-value and the 2×2 counts. ``replicates(d)``:
    ``(W,)`` bootstrap replicates of the mean of the ``(n,)`` per-item differences ``d``,
    clustered by ``groups``; drawn only when the items come in groups."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    n, clusters = len(a), cluster_codes(groups)[1]
    d = 100.0 * (a.astype(np.float64) - b.astype(np.float64))  # (n,) per-item difference, pp
    counts = two_by_two(a, b)
    if clusters == n:  # independent items: the score interval and the exact binomial test
        lo, hi = (100.0 * v for v in newcombe_paired(counts, level))
        p, unit = mcnemar_exact(counts["only_a"], counts["only_b"]), "discordant item"
        discordant = counts["only_a"] + counts["only_b"]
    else:  # items in groups: the cluster bootstrap and the clustered (sign-flip) test
        lo, hi = (float(v[0]) for v in percentile_interval(replicates(d)[:, None], level))
        p, unit = clustered_mcnemar(a, b, groups), "discordant cluster"
        discordant = int((np.abs(cluster_differences(a, b, groups)) > 0).sum())
    difference = interval_estimate(float(d.mean()), lo, hi, clusters, "cluster")
    return judged(difference, level, p, "the exact McNemar test", discordant, unit), p, counts


def paired_difference(a: np.ndarray, b: np.ndarray, groups: np.ndarray, settings: CompareSettings, stream: int = 0) -> dict:
    """The paired comparison of two boolean vectors over the same ``n`` items (see module doc)."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    n = len(a)
    clusters = cluster_codes(groups)[1]

    def replicates(d: np.ndarray) -> np.ndarray:
        return clustered_means(d, groups, settings.draws, settings.seed, stream)[:, 0]

    difference, p, counts = paired_estimate(a, b, groups, settings.level, replicates)
    out = {
        "items": n,
        "clusters": clusters,
        "accuracy_a": round(100.0 * float(a.mean()), 6),
        "accuracy_b": round(100.0 * float(b.mean()), 6),
        "difference": difference.to_dict(),
        "table": counts,
        "mcnemar_p": p,
    }
    if clusters < n:
        out["mcnemar_method"] = CLUSTERED
        out["mcnemar_p_items"] = mcnemar_exact(counts["only_a"], counts["only_b"])
    return out


# --------------------------------------------------------------------------- loading
def named_step(name: int | str) -> int:
    """The recorded step a compared candidate names: a step, ``checkpoint-<step>``, an average's
    folder (``average-last3``, ``ema-0.9``) or its row in the report (``mean_last3``, ``ema_0_9``)."""
    step = average_rule_step(name) if isinstance(name, str) else None
    return candidate_step(name) if step is None else step


def _step_index(steps: np.ndarray, step: int, trajectory: str) -> int:
    where = np.flatnonzero(steps == step)
    if len(where) == 0:
        raise CkptselError(
            f"trajectory {trajectory!r}: no checkpoint at step {step_text(step)} (known: {', '.join(step_text(s) for s in steps)})"
        )
    return int(where[0])


def _has_split(records_dir: Path, split: str, trajectories: list[str]) -> bool:
    path = Path(records_dir) / GENERATIONS_FILE
    rows = read_rows(
        records_dir, "generations", columns=["trajectory"], filters=[("split", "=", split), ("trajectory", "in", trajectories)]
    )
    if rows is None:
        raise CkptselError(f"{path}: records file not found (expected {GENERATIONS_FILE})")
    return rows.num_rows > 0


def _test_groups(records_dir: Path, trajectory: str, item_ids: np.ndarray) -> np.ndarray:
    """The ``group`` of each test item (TestData carries subtasks, not groups)."""
    table = read_rows(
        records_dir, "generations", columns=["item_id", "group"], filters=[("split", "=", "test"), ("trajectory", "=", trajectory)]
    ).to_pandas()
    by_item = table.drop_duplicates("item_id").set_index("item_id")["group"]
    return by_item.reindex(item_ids).to_numpy().astype(str)


def shared_items(a: Side, b: Side, split: str, trajectories: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Both sides on their shared items, in item-id order; groups must agree."""
    shared, ia, ib = np.intersect1d(a.item_ids, b.item_ids, return_indices=True)
    if len(shared) == 0:
        raise CkptselError(
            f"{split}: trajectories {trajectories[0]!r} and {trajectories[1]!r} share no "
            f"{split} items; a paired comparison needs the same items"
        )
    ga, gb = a.groups[ia], b.groups[ib]
    differ = np.flatnonzero(ga != gb)
    if len(differ):
        i = differ[0]
        raise CkptselError(
            f"{split} item {str(shared[i])!r}: group {str(ga[i])!r} in trajectory {trajectories[0]!r} but "
            f"{str(gb[i])!r} in {trajectories[1]!r}"
        )
    dropped = {"only_in_a": int(len(a.item_ids) - len(shared)), "only_in_b": int(len(b.item_ids) - len(shared))}
    return a.correct[ia], b.correct[ib], ga, dropped


def _side(ids: np.ndarray, groups: np.ndarray, data: Any, c: int, fb: np.ndarray | None) -> Side:
    """One checkpoint (row ``c`` of ``data``'s ``(T, n)`` arrays) of a compared pair."""
    fallback = None if fb is None else fb[c]
    return Side(ids, groups, data.correct[c], data.answers[c], fallback, len(np.unique(data.answers)))


def _paired_split(sides: list[Side], split: str, names: Any, settings: Any) -> dict:
    """The paired difference of the two sides on their shared items, with what was not shared
    and each side's answers."""
    a, b, groups, dropped = shared_items(*sides, split, names)
    res = paired_difference(a, b, groups, settings, streams.COMPARE_SPLITS[split])
    res["not_shared"] = dropped
    res["answers"] = {"a": answer_summary(sides[0]), "b": answer_summary(sides[1])}
    return res


def compare_checkpoints(
    records_dir: Path,
    trajectory: str,
    step_a: int | str,
    step_b: int | str,
    *,
    trajectory_b: str | None = None,
    settings: CompareSettings | None = None,
) -> dict:
    """Everything ``ckptsel compare`` reports, as a JSON-ready dict (see the module docstring).
    ``step_a`` / ``step_b``: a step or a candidate's name (:func:`named_step`)."""
    settings = settings or CompareSettings()
    step_a, step_b = named_step(step_a), named_step(step_b)
    records_dir = Path(records_dir)
    traj_b = trajectory_b or trajectory
    if traj_b == trajectory and step_a == step_b:
        raise CkptselError(f"step {step_text(step_a)} compared with itself; name two different checkpoints")
    names = (trajectory, traj_b)
    out = {
        "a": {"trajectory": trajectory, "step": int(step_a)},
        "b": {"trajectory": traj_b, "step": int(step_b)},
        "settings": asdict(settings),
        "splits": {},
    }
    validation = load_validation(records_dir)
    va, vb = (find_trajectory(validation, t, "validation", records_dir) for t in names)
    sides = []
    for v, step in ((va, step_a), (vb, step_b)):
        c = _step_index(v.steps, step, v.trajectory)
        fb = fallback_matrix(records_dir, v.trajectory, v.task, v.steps, v.item_ids, "validation", [step])
        sides.append(_side(np.asarray(v.item_ids), np.asarray(v.groups), v, c, fb))
    out["splits"]["validation"] = _paired_split(sides, "validation", names, settings)

    if _has_split(records_dir, "test", list(set(names))):
        tests = load_test(records_dir)
        sides = []
        for t, step in zip(names, (step_a, step_b), strict=True):
            td = find_trajectory(tests, t, "test", records_dir)
            c = _step_index(td.steps, step, t)
            ids = np.asarray(td.item_ids)
            fb = fallback_matrix(records_dir, t, td.task, td.steps, td.item_ids, "test", [step])
            sides.append(_side(ids, _test_groups(records_dir, t, ids), td, c, fb))
        out["splits"]["test"] = _paired_split(sides, "test", names, settings)
    else:
        out["splits"]["test"] = None
    return out
