"""The one mapping from other harnesses' logs to records (SPEC §2), shared by every ingester.

An ingester (``lm_eval``, ``inspect``, ``lighteval``) reads its harness's files and hands over one
:class:`CheckpointLog` per log: the checkpoint's step, what the log says about its trajectory,
and one row per scored sample (``item_id``, ``answer``, ``correct``, ``text``, ``harness_task``,
and where the log has them ``split``, ``group``, ``subtask``). This module turns them into
contract rows the same way for every harness:

* trajectory: ``--trajectory``, else what the log says (metadata, or the folder above
  ``checkpoint-<step>``); configuration: ``--configuration``, else the log's, else what the
  trajectory's name says as ``ckptsel run`` reads it (``cfgA-s42`` → configuration ``cfgA``,
  seed 42: :func:`ckptsel.study.configuration_and_seed`), else the trajectory; the mapping is
  returned (:attr:`Ingested.names`) and said once (:func:`names_line`);
* split: the sample's own (its metadata), else ``--split``; only ``validation`` and ``test``;
* task: ``--task``, else the harness task when a trajectory's logs hold one;
  subtask: the sample's own, else the harness task when it differs from the task;
* group: the sample's own, else its item id;
* answer: the harness's extracted answer; where it has none, ckptsel's extraction when the task
  is a ckptsel task, else the stripped generation (agreement then compares whole generations);
* keys: one row per (trajectory, step, split, item); a key given twice is an error naming both
  logs. A key already in the records folder is refused (one line: the first such key and how
  many), unless ``replace`` is given, which replaces those rows and counts them
  (:attr:`Ingested.replaced`); a trajectory already recorded under another configuration is
  refused either way. Everything is checked before the one records writer
  (:func:`ckptsel.records.upsert_records`) writes anything, at a path or a URL.

:func:`unavailable_lines` says, in one line each, which rules the ingested records cannot support
because the harness does not record what they need (the analysis then runs the other rules).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

import pandas as pd

from ckptsel._util.checks import MAX_STEP
from ckptsel._util.locations import Location, as_location
from ckptsel.data import extract, get_task, task_label
from ckptsel.errors import CkptselError
from ckptsel.records import (
    GENERATION_KEY,
    NLL_KEY,
    SPLITS,
    check_name,
    coerce_generations,
    coerce_nll,
    read_rows,
    upsert_records,
)
from ckptsel.study import configuration_and_seed
from ckptsel.train import CHECKPOINT_RE

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

# what each harness lacks for the matched-NLL rule, said once after ingesting its logs
NO_NLL_REASON = {
    "lm-eval": "lm-eval samples hold no teacher-forced log-probabilities of the reference response",
    "inspect": "inspect records no log-probabilities of the reference response",
    "lighteval": "these details hold no log-probability of the reference response",
}
ROW_COLUMNS = ("item_id", "answer", "correct", "text", "harness_task")
OPTIONAL_ROW_COLUMNS = ("split", "group", "subtask")
DEFAULT_SPLIT = "test"
K = TypeVar("K")


class Naming(TypedDict, total=False):
    """The keywords every ingester takes (the ``ingest`` commands' shared options), each optional:
    ``trajectory``, ``configuration``, ``task`` and ``split`` (default :data:`DEFAULT_SPLIT`) name
    the rows as the module says; ``note`` takes the notes (default ``print``); ``replace``
    (default False): rows whose key is already recorded replace those rows instead of being
    refused."""

    trajectory: str | None
    configuration: str | None
    task: str | None
    split: str
    note: Callable[[str], None]
    replace: bool


@dataclass(frozen=True)
class CheckpointLog:
    """One harness log of one checkpoint, read but not yet named.

    ``rows``: one row per scored sample with :data:`ROW_COLUMNS` (``answer`` may be None where
    the harness extracted none; ``text`` may be None) and any of :data:`OPTIONAL_ROW_COLUMNS`
    (None where the sample does not say). ``nll``: contract NLL rows (``item_id``, ``split``,
    ``nll_sum``, ``n_tokens``, ``window``) when the log holds the quantity the contract means.
    """

    source: str  # the log file or folder, named in errors
    step: int
    rows: pd.DataFrame
    trajectory: str | None = None  # what the log says about its trajectory
    configuration: str | None = None
    nll: pd.DataFrame | None = None

    def __post_init__(self) -> None:
        # every harness's step (folder name, --step, --steps, eval metadata) is checked here
        if not 0 <= self.step <= MAX_STEP:
            raise CkptselError(
                f"{self.source}: step {self.step} is not between 0 and {MAX_STEP}, the "
                "steps records hold (int64)"
            )


@dataclass(frozen=True)
class Ingested:
    """What an ingest wrote: contract generation (and NLL) rows, what the logs lack, and each
    trajectory's ``(trajectory, configuration, seed)`` (seed None where its name says none)."""

    generations: pd.DataFrame
    nll: pd.DataFrame | None = None
    unavailable: tuple[str, ...] = field(default_factory=tuple)
    names: tuple[tuple[str, str, int | None], ...] = field(default_factory=tuple)
    replaced: tuple[int, int] = (0, 0)  # (generation rows, NLL rows) that were already recorded


def names_line(names: Iterable[tuple[str, str, int | None]]) -> str:
    """One line: each trajectory → its configuration and seed."""
    parts = [
        f"{t} -> configuration {c}, " + ("no seed in the name" if s is None else f"seed {s}")
        for t, c, s in names
    ]
    return "trajectories: " + "; ".join(parts)


class Notes:
    """Notes said once per ingest, not once per log: each kind of note in one line naming the
    logs it concerns (the first few, and how many more)."""

    SHOWN = 3

    def __init__(self, note: Callable[[str], None]) -> None:
        self._note = note
        self._found: dict[str, list[str]] = {}

    def add(self, what: str, where: str) -> None:
        """One more log (``where``: its name and details) that ``what`` concerns."""
        self._found.setdefault(what, []).append(where)

    def say(self) -> None:
        """Each kind of note, once; then nothing is left to say."""
        for what, wheres in self._found.items():
            more = len(wheres) - self.SHOWN
            shown = "; ".join(wheres[: self.SHOWN]) + (f"; and {more} more" if more > 0 else "")
            self._note(f"note: {what} ({len(wheres)} log(s): {shown})")
        self._found.clear()


def known_task(task: str | None) -> bool:
    """Whether ``task`` is a ckptsel task (answers can be extracted with its rule)."""
    if not task:
        return False
    try:
        get_task(task)
    except (CkptselError, KeyError):
        return False
    return True


def step_in_path(text: str) -> tuple[int, str | None] | None:
    """``(step, trajectory)`` from the last ``checkpoint-<step>`` component of a path or model
    name (the trajectory is the component above it, when there is one), else None."""
    parts = [p for p in re.split(r"[/\\]", text) if p]
    for k in range(len(parts) - 1, -1, -1):
        m = CHECKPOINT_RE.match(parts[k])
        if m and m.group(1).isdigit():
            return int(m.group(1)), (parts[k - 1] if k > 0 else None)
    return None


def lookup_step(steps: Mapping[str, int] | None, keys: Iterable[str]) -> int | None:
    """The step an explicit ``--steps`` map gives the first of ``keys`` it names, else None."""
    if not steps:
        return None
    for key in keys:
        if key in steps:
            value = steps[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CkptselError(
                    f"--steps: step {value!r} for {key!r} is not a non-negative integer"
                )
            return value
    return None


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise CkptselError(f"unknown --split {split!r}: use validation or test")
    return split


def checked_note(naming: Naming) -> Callable[[str], None]:
    """Where an ingester's notes go, once ``naming`` is checked: no keyword that :class:`Naming`
    lacks (a TypeError, as for any unexpected keyword), and a known ``split`` (so that a wrong
    ``--split`` is said before any log is read)."""
    unknown = sorted(set(naming) - Naming.__optional_keys__)
    if unknown:  # as a signature that names each keyword would say
        raise TypeError(f"unexpected keyword argument(s) {', '.join(map(repr, unknown))}")
    check_split(naming.get("split", DEFAULT_SPLIT))
    return naming.get("note", print)


def newest_per_key(
    files: Iterable[tuple[K, str, Path]], passed_over: Callable[[K, Path, Path], None]
) -> dict[K, Path]:
    """``{key: the file with the latest timestamp}`` in key order, from ``(key, timestamp, file)``
    triples; ``passed_over(key, used, ignored)`` is told of each older file left out."""
    found: dict[K, tuple[str, Path]] = {}
    for key, ts, path in files:
        if key in found:
            older, newer = sorted([found[key], (ts, path)])
            passed_over(key, newer[1], older[1])
            found[key] = newer
        else:
            found[key] = (ts, path)
    return {k: p for k, (_, p) in sorted(found.items())}


def _resolve_names(
    logs: Sequence[CheckpointLog], trajectory: str | None, configuration: str | None
) -> list[tuple[str, str, int | None]]:
    """(trajectory, configuration, seed) of each log (see the module)."""
    out = []
    for log in logs:
        traj = trajectory or log.trajectory
        if not traj:
            raise CkptselError(
                f"{log.source}: the log does not say which trajectory it belongs to; pass --trajectory"
            )
        check_name("trajectory", traj)
        named, seed = configuration_and_seed(traj)
        conf = check_name("configuration", configuration or log.configuration or named)
        out.append((traj, conf, seed))
    return out


def _resolve_task(frame: pd.DataFrame, task: str | None) -> pd.Series:
    """The ckptsel task of every row: ``task``, else the one harness task of its trajectory."""
    if task:
        return pd.Series(task, index=frame.index, dtype=object)
    out = pd.Series("", index=frame.index, dtype=object)
    for traj, rows in frame.groupby("trajectory", sort=True):
        names = sorted(set(rows["harness_task"]))
        if len(names) > 1:
            raise CkptselError(
                f"trajectory {traj!r}: the logs hold several tasks ({', '.join(names)}); "
                "name the ckptsel task with --task (each harness task then becomes a subtask)"
            )
        out[rows.index] = names[0]
    return out


def _fill(frame: pd.DataFrame, column: str, default: pd.Series) -> pd.Series:
    """``frame[column]`` where it is set (not None/NaN), else ``default``."""
    if column not in frame.columns:
        return default
    have = frame[column].notna()
    return frame[column].where(have, default).astype(object)


def _answers(frame: pd.DataFrame, note: Callable[[str], None], harness: str) -> pd.Series:
    """The harness's extracted answers; where it has none, ckptsel's or the stripped text."""
    missing = frame["answer"].isna()
    if not missing.any():
        return frame["answer"].astype(object)
    out = frame["answer"].astype(object).copy()
    texts = frame["text"].where(frame["text"].notna(), "").astype(str)
    for task, idx in frame[missing].groupby("task").groups.items():
        if known_task(task):
            out[idx] = [
                extract(task, t, subtask=s)
                for t, s in zip(texts[idx], frame.loc[idx, "subtask"], strict=True)
            ]
            how = f"extracted with ckptsel's {task} rule"
        else:
            out[idx] = [t.strip() for t in texts[idx]]
            how = "the whole stripped generations (agreement compares them as they are; --task names a ckptsel task whose rule extracts answers)"
        note(
            f"note: {len(idx)} {harness} sample(s) of task {task} carry no extracted answer: answers are {how}"
        )
    return out


def _check_keys(frame: pd.DataFrame, key: Sequence[str], what: str) -> None:
    dup = frame.duplicated(list(key), keep=False)
    if dup.any():
        first = frame[dup].sort_values(list(key)).head(2)
        row = first.iloc[0]
        sources = sorted(set(first["source"]))
        where = " and ".join(sources)
        raise CkptselError(
            f"{where}: {what} for item {row['item_id']!r} ({row['split']}) of trajectory "
            f"{row['trajectory']!r} at step {row['step']} given twice"
        )


def to_records(
    logs: Sequence[CheckpointLog],
    *,
    harness: str,
    **naming: Unpack[Naming],
) -> Ingested:
    """Contract rows from checkpoint logs, named as the module says from ``naming`` (see
    :class:`Naming`; nothing is written, see :func:`ingest_logs`)."""
    note = checked_note(naming)
    split = naming.get("split", DEFAULT_SPLIT)
    if not logs:
        raise CkptselError(f"no {harness} logs given")
    names = _resolve_names(logs, naming.get("trajectory"), naming.get("configuration"))
    frames, nll_frames = [], []
    for log, (traj, conf, _) in zip(logs, names, strict=True):
        missing = [c for c in ROW_COLUMNS if c not in log.rows.columns]
        if missing:
            raise CkptselError(f"{log.source}: sample rows lack {missing}")  # an ingester's bug
        if log.rows.empty:
            raise CkptselError(f"{log.source}: no scored samples")
        frames.append(
            log.rows.assign(source=log.source, step=log.step, trajectory=traj, configuration=conf)
        )
        if log.nll is not None and not log.nll.empty:
            nll_frames.append(log.nll.assign(source=log.source, step=log.step, trajectory=traj))
    rows = pd.concat(frames, ignore_index=True)
    rows["split"] = _fill(rows, "split", pd.Series(split, index=rows.index))
    bad = ~rows["split"].isin(SPLITS)
    if bad.any():
        r = rows[bad].iloc[0]
        raise CkptselError(
            f"{r['source']}: item {r['item_id']!r} has split {r['split']!r}; only validation and test are known"
        )
    refs = _resolve_task(rows, naming.get("task"))
    rows["task"] = refs.map(task_label)  # a task file: its name
    own = pd.Series(
        ["" if h == t else h for h, t in zip(rows["harness_task"], rows["task"], strict=True)],
        index=rows.index,
    )
    rows["subtask"] = _fill(rows, "subtask", own)
    rows["group"] = _fill(rows, "group", rows["item_id"].astype(object))
    rows["answer"] = _answers(rows.assign(task=refs), note, harness)
    _check_keys(rows, ("trajectory", "step", "split", "item_id"), "a generation")
    generations = coerce_generations(rows)
    nll = None
    if nll_frames:
        nf = pd.concat(nll_frames, ignore_index=True)
        nf["split"] = _fill(nf, "split", pd.Series(split, index=nf.index))
        _check_keys(nf, ("trajectory", "step", "split", "item_id", "window"), "an NLL")
        nll = coerce_nll(nf)
    return Ingested(
        generations, nll, tuple(unavailable_lines(harness, nll)), tuple(sorted(set(names)))
    )


def unavailable_lines(
    harness: str, nll: pd.DataFrame | None, reason: str | None = None
) -> list[str]:
    """One line per rule that records ingested from ``harness`` cannot support.

    The matched-NLL rule needs teacher-forced log-probabilities of each reference response
    (SPEC §3); no harness ckptsel reads records that quantity, so this says so, with the reason
    (``reason`` overrides the harness's usual one).
    """
    if nll is not None and len(nll):
        return []
    why = reason or NO_NLL_REASON.get(harness, "the logs hold no teacher-forced NLL")
    return [
        f"no matched NLL in these {harness} logs ({why}): the NLL rule and H (gain over matched "
        "NLL) are unavailable; analyze runs accuracy, agreement and last"
    ]


def _recorded(out: Location, kind: str, frame: pd.DataFrame, key: Sequence[str]) -> pd.DataFrame:
    """The rows of ``kind`` already in ``out`` for the trajectories of ``frame``: their key
    columns (as strings) and, for generations, their configuration."""
    trajs = sorted(set(frame["trajectory"].astype(str)))
    cols = list(key) + (["configuration"] if kind == "generations" else [])
    table = read_rows(out, kind, columns=cols, filters=[("trajectory", "in", trajs)])
    if table is None or table.num_rows == 0:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    return table.to_pandas().astype({c: str for c in key})


def _clashes(
    out: Location, kind: str, frame: pd.DataFrame | None, key: Sequence[str]
) -> tuple[int, str | None]:
    """How many of ``frame``'s keys ``out`` already holds, and the first of them, said."""
    if frame is None or frame.empty:
        return 0, None
    old = _recorded(out, kind, frame, key)
    if kind == "generations":
        _check_configurations(out, frame, old)
    new = frame[list(key)].astype(str).sort_values(list(key), ignore_index=True)
    have = pd.MultiIndex.from_frame(new).isin(pd.MultiIndex.from_frame(old[list(key)]))
    if not have.any():
        return 0, None
    r = new[have].iloc[0]
    first = (
        f"trajectory {r['trajectory']!r} step {r['step']} {r['split']} item {r['item_id']!r}"
        + (f" window {r['window']}" if "window" in key else "")
    )
    return int(have.sum()), first


def _check_configurations(out: Location, frame: pd.DataFrame, old: pd.DataFrame) -> None:
    """A trajectory already in ``out`` keeps its configuration (else the mix would only
    surface at ``analyze``)."""
    if old.empty:
        return
    recorded = old.groupby("trajectory")["configuration"].agg(lambda c: sorted(set(map(str, c))))
    for traj, conf in frame.groupby("trajectory")["configuration"].first().items():
        other = [c for c in recorded.get(traj, []) if c != conf]
        if other:
            raise CkptselError(
                f"{out}: trajectory {traj!r} is already recorded with configuration "
                f"{other[0]!r}, not {conf!r}; nothing was written: pass --configuration "
                f"{other[0]} (or ingest under another --trajectory name)"
            )


def check_new_keys(out: Location, ingested: Ingested, replace: bool) -> tuple[int, int]:
    """``(generation rows, NLL rows)`` of ``ingested`` whose key ``out`` already holds; any is
    an error unless ``replace`` (see the module)."""
    gen, gen_first = _clashes(out, "generations", ingested.generations, GENERATION_KEY)
    nll, nll_first = _clashes(out, "nll", ingested.nll, NLL_KEY)
    if (gen or nll) and not replace:
        counts = " and ".join(
            f"{n} {what} row(s)" for n, what in ((gen, "generation"), (nll, "NLL")) if n
        )
        raise CkptselError(
            f"{out}: {counts} of these logs are already recorded there (first: "
            f"{gen_first or nll_first}); nothing was written: pass --replace to replace them"
        )
    return gen, nll


def ingest_logs(
    logs: Sequence[CheckpointLog],
    *,
    out: Path | Location | str,
    harness: str,
    nll_reason: str | None = None,
    **naming: Unpack[Naming],
) -> Ingested:
    """:func:`to_records` (named by ``naming``, see :class:`Naming`), the keys checked against
    the records already in ``out`` (a folder or a URL; see the module), then the one records
    writer; returns what was written. ``nll_reason`` says why the logs hold no matched NLL where
    it is not the harness's usual reason."""
    out = as_location(out)
    ingested = to_records(logs, harness=harness, **naming)
    if nll_reason and ingested.unavailable:
        why = tuple(unavailable_lines(harness, ingested.nll, nll_reason))
        ingested = replace(ingested, unavailable=why)
    replaced = check_new_keys(out, ingested, naming.get("replace", False))
    upsert_records(out, generations=ingested.generations, nll=ingested.nll)
    return replace(ingested, replaced=replaced)
