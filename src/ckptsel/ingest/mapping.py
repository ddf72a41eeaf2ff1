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
* the same item: an id two logs share must name the same item there (the ingester's
  ``content``: lm-eval's ``doc_hash``, inspect's input and target, lighteval's query and gold);
  the first id whose content differs is refused in one line naming both logs, unless
  ``allow_different_items`` (``--allow-different-items``: then said, with the count)
  (:func:`check_same_items`);
* correctness: where the task is a ckptsel task and a row has its ``reference``, the log's
  ``correct`` is checked against the answer under the task's rule: a log that says wrong where
  the answer equals the reference (or right where it does not) is said in one line per
  direction, with the count and the first item (:func:`check_correctness`); ``rescore``
  (``--rescore``) replaces the log's correctness by the rule's on those rows, and says so;
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

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict, TypeVar, Unpack

import pandas as pd

from ckptsel._util.checks import MAX_STEP
from ckptsel._util.locations import Location, as_location
from ckptsel.data.scoring import extract, is_correct
from ckptsel.data.tasks import get_task, task_label
from ckptsel.errors import CkptselError
from ckptsel.records.scan import read_rows
from ckptsel.records.schema import GENERATION_KEY, NLL_KEY, SPLITS, check_name, coerce_generations, coerce_nll
from ckptsel.records.store import upsert_records
from ckptsel.study.configuration import configuration_and_seed
from ckptsel.train.checkpoints import CHECKPOINT_RE

# what each harness lacks for the matched-NLL rule, said once after ingesting its logs
NO_NLL_REASON = {
    "lm-eval": "lm-eval samples hold no teacher-forced log-probabilities of the reference response",
    "inspect": "inspect records no log-probabilities of the reference response",
    "lighteval": "these details hold no log-probability of the reference response",
}
ROW_COLUMNS = ("item_id", "answer", "correct", "text", "harness_task")
# ``content``: a digest of what the item is (two logs' rows of one id are one item only when it
# is equal); ``reference``: the gold answer the log scored against (the task's rule re-checks it)
OPTIONAL_ROW_COLUMNS = ("split", "group", "subtask", "content", "reference")
# what each harness's ``content`` digests, as its messages say
CONTENT_FIELDS = {"lm-eval": "doc_hash", "inspect": "input and target", "lighteval": "query and gold"}
ALLOW_DIFFERENT = "--allow-different-items"
DEFAULT_SPLIT = "test"
K = TypeVar("K")


class Naming(TypedDict, total=False):
    """The keywords every ingester takes (the ``ingest`` commands' shared options), each optional:
    ``trajectory``, ``configuration``, ``task`` and ``split`` (default :data:`DEFAULT_SPLIT`) name
    the rows as the module says; ``note`` takes the notes (default ``print``); ``replace``
    (default False): rows whose key is already recorded replace those rows instead of being
    refused; ``allow_different_items`` (default False): an id the logs hold with different
    contents is ingested anyway (said); ``rescore`` (default False): correctness by the task's
    rule, not the log's (see the module)."""

    trajectory: str | None
    configuration: str | None
    task: str | None
    split: str
    note: Callable[[str], None]
    replace: bool
    allow_different_items: bool
    rescore: bool


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
            raise CkptselError(f"{self.source}: step {self.step} is not between 0 and {MAX_STEP}, the steps records hold (int64)")


@dataclass(frozen=True)
class Ingested:
    """What an ingest wrote: contract generation (and NLL) rows, what the logs lack, each
    trajectory's ``(trajectory, configuration, seed)`` (seed None where its name says none), and
    what :func:`check_same_items` saw."""

    generations: pd.DataFrame
    nll: pd.DataFrame | None = None
    unavailable: tuple[str, ...] = field(default_factory=tuple)
    names: tuple[tuple[str, str, int | None], ...] = field(default_factory=tuple)
    replaced: tuple[int, int] = (0, 0)  # (generation rows, NLL rows) that were already recorded
    # each generation row's content digest (None where its log has none: see check_same_items)
    content: pd.Series | None = None
    different_items: int = 0  # ids ingested with different contents (allow_different_items)


def names_line(names: Iterable[tuple[str, str, int | None]]) -> str:
    """One line: each trajectory → its configuration and seed."""
    parts = [f"{t} -> configuration {c}, " + ("no seed in the name" if s is None else f"seed {s}") for t, c, s in names]
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


_KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list", dict: "an object"}


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (a log's values are named in one line)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def log_object(value: Any, where: str, what: str) -> dict:
    """``value`` where it is a JSON object, else one line naming ``where`` and ``what``."""
    if not isinstance(value, dict):
        raise CkptselError(f"{where}: {what} is {shown(value)}, not an object")
    return value


def log_field(obj: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str, *, required: bool = False) -> Any:
    """``obj[key]`` where it is one of ``kinds`` (None where absent or null, unless
    ``required``); anything else is one line naming ``where`` and the field. Booleans are not
    integers, and a number is finite (a log's NaN is no id, epoch or score)."""
    value = obj.get(key)
    if value is None:
        if required:
            raise CkptselError(f"{where}: field {key} missing")
        return None
    ok = isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool))
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if not ok:
        wanted = " or ".join(_KIND_NAMES.get(k, k.__name__) for k in kinds)
        raise CkptselError(f"{where}: field {key} is {shown(value)}, not {wanted}")
    return value


def digest(value: Any) -> str:
    """A sha256 of ``value`` as canonical JSON (what an item is, compared across logs)."""
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def check_same_items(
    frame: pd.DataFrame,
    key: Sequence[str],
    harness: str,
    *,
    allow: bool,
    note: Callable[[str], None],
    refused: str = "nothing was written; ",
) -> int:
    """How many ids (``key`` columns) ``frame``'s rows hold with different ``content`` (rows
    without one are not compared): any is one line naming the first such id and both logs
    (``source``), unless ``allow``, which says it and returns the count."""
    if "content" not in frame.columns:
        return 0
    have = frame[frame["content"].notna() & (frame["content"].astype(str) != "")]
    firsts = have.drop_duplicates([*key, "content"])
    bad = firsts[firsts.duplicated(list(key), keep=False)]
    if bad.empty:
        return 0
    ids = bad[list(key)].astype(str).drop_duplicates().sort_values(list(key))
    first = bad[(bad[list(key)].astype(str) == ids.iloc[0]).all(axis=1)]
    a, b = first.iloc[0], first.iloc[1]
    what = CONTENT_FIELDS.get(harness, "content")
    split = f" ({a['split']})" if "split" in key else ""
    said = (
        f"{b['source']}: item {a['item_id']!r}{split} is not the item {a['source']} holds under "
        f"that id (different documents: its {what} differs, {str(b['content'])[:12]} vs "
        f"{str(a['content'])[:12]})"
    )
    more = f"; {len(ids) - 1} more id(s) differ" if len(ids) > 1 else ""
    if not allow:
        raise CkptselError(f"{said}{more}; {refused}pass {ALLOW_DIFFERENT} to pair them anyway")
    note(f"warning: {said}{more}; paired anyway ({ALLOW_DIFFERENT})")
    return len(ids)


def _rule_correct(frame: pd.DataFrame, tasks: pd.Series) -> pd.Series:
    """Whether each row's answer matches its reference under its task's rule."""
    out = pd.Series(False, index=frame.index)
    keys = [tasks, frame["subtask"].astype(str)]
    for (task, sub), idx in frame.groupby(keys, sort=True).groups.items():
        out[idx] = [
            is_correct(task, "" if a is None else str(a), str(r), subtask=sub)
            for a, r in zip(frame.loc[idx, "answer"], frame.loc[idx, "reference"], strict=True)
        ]
    return out


def check_correctness(frame: pd.DataFrame, tasks: pd.Series, note: Callable[[str], None], rescore: bool) -> pd.Series:
    """The rows' correctness: the log's, each direction in which it contradicts the answer under
    the task's rule said in one line (how many, the first); with ``rescore``, the rule's (see the
    module). ``tasks``: each row's ckptsel task (or harness task name)."""
    correct = frame["correct"].astype(bool)
    known = {t: known_task(t) for t in set(tasks)}
    can = tasks.map(known).astype(bool)
    if "reference" in frame.columns:
        can &= frame["reference"].notna()
    else:
        can &= False
    if not can.any():
        if rescore:
            raise CkptselError(
                "--rescore: no sample can be re-scored: it needs --task naming a ckptsel task and samples that carry their reference"
            )
        return correct
    rows = frame[can]
    rule = _rule_correct(rows, tasks[can])
    logs = rows["source"].nunique()
    for mask, says, how in ((~correct[can] & rule, "wrong", "equals"), (correct[can] & ~rule, "right", "differs from")):
        if mask.any():
            r = rows[mask].iloc[0]
            note(
                f"warning: {r['source']}: the log says {says} on {int(mask.sum())} item(s) whose "
                f"answer {how} the reference under the task's {tasks[r.name]} rule (first: "
                f"{r['item_id']!r}: answer {shown(r['answer'], 30)}, reference "
                f"{shown(r['reference'], 30)}; {logs} log(s)); "
                + ("re-scored with the rule (--rescore)" if rescore else "--rescore scores them with the rule")
            )
    if not rescore:
        return correct
    changed = int((rule != correct[can]).sum())
    note(
        f"note: --rescore: {int(can.sum())} of {len(frame)} samples scored with ckptsel's rule of "
        f"their task, not the log's correctness ({changed} changed)"
    )
    return correct.where(~can, rule.reindex(frame.index, fill_value=False))


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
                raise CkptselError(f"--steps: step {value!r} for {key!r} is not a non-negative integer")
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


def newest_per_key(files: Iterable[tuple[K, str, Path]], passed_over: Callable[[K, Path, Path], None]) -> dict[K, Path]:
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


def _resolve_names(logs: Sequence[CheckpointLog], trajectory: str | None, configuration: str | None) -> list[tuple[str, str, int | None]]:
    """(trajectory, configuration, seed) of each log (see the module)."""
    out = []
    for log in logs:
        traj = trajectory or log.trajectory
        if not traj:
            raise CkptselError(f"{log.source}: the log does not say which trajectory it belongs to; pass --trajectory")
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
            out[idx] = [extract(task, t, subtask=s) for t, s in zip(texts[idx], frame.loc[idx, "subtask"], strict=True)]
            how = f"extracted with ckptsel's {task} rule"
        else:
            out[idx] = [t.strip() for t in texts[idx]]
            how = "the whole stripped generations (agreement compares them as they are; --task names a ckptsel task whose rule extracts answers)"
        note(f"note: {len(idx)} {harness} sample(s) of task {task} carry no extracted answer: answers are {how}")
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


def to_records(logs: Sequence[CheckpointLog], *, harness: str, **naming: Unpack[Naming]) -> Ingested:
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
        frames.append(log.rows.assign(source=log.source, step=log.step, trajectory=traj, configuration=conf))
        if log.nll is not None and not log.nll.empty:
            nll_frames.append(log.nll.assign(source=log.source, step=log.step, trajectory=traj))
    rows = pd.concat(frames, ignore_index=True)
    rows["split"] = _fill(rows, "split", pd.Series(split, index=rows.index))
    bad = ~rows["split"].isin(SPLITS)
    if bad.any():
        r = rows[bad].iloc[0]
        raise CkptselError(f"{r['source']}: item {r['item_id']!r} has split {r['split']!r}; only validation and test are known")
    refs = _resolve_task(rows, naming.get("task"))
    rows["task"] = refs.map(task_label)  # a task file: its name
    own = pd.Series(["" if h == t else h for h, t in zip(rows["harness_task"], rows["task"], strict=True)], index=rows.index)
    rows["subtask"] = _fill(rows, "subtask", own)
    rows["group"] = _fill(rows, "group", rows["item_id"].astype(object))
    rows["answer"] = _answers(rows.assign(task=refs), note, harness)
    _check_keys(rows, ("trajectory", "step", "split", "item_id"), "a generation")
    allow = naming.get("allow_different_items", False)
    different = check_same_items(rows, ("split", "item_id"), harness, allow=allow, note=note)
    rows["correct"] = check_correctness(rows, refs, note, naming.get("rescore", False))
    generations = coerce_generations(rows)
    content = rows["content"] if "content" in rows.columns else pd.Series(None, index=rows.index)
    nll = None
    if nll_frames:
        nf = pd.concat(nll_frames, ignore_index=True)
        nf["split"] = _fill(nf, "split", pd.Series(split, index=nf.index))
        _check_keys(nf, ("trajectory", "step", "split", "item_id", "window"), "an NLL")
        nll = coerce_nll(nf)
    return Ingested(
        generations,
        nll,
        tuple(unavailable_lines(harness, nll)),
        tuple(sorted(set(names))),
        content=content.astype(object).reset_index(drop=True),
        different_items=different,
    )


def unavailable_lines(harness: str, nll: pd.DataFrame | None, reason: str | None = None) -> list[str]:
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


def _clashes(out: Location, kind: str, frame: pd.DataFrame | None, key: Sequence[str]) -> tuple[int, str | None]:
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
    first = f"trajectory {r['trajectory']!r} step {r['step']} {r['split']} item {r['item_id']!r}" + (
        f" window {r['window']}" if "window" in key else ""
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
        counts = " and ".join(f"{n} {what} row(s)" for n, what in ((gen, "generation"), (nll, "NLL")) if n)
        raise CkptselError(
            f"{out}: {counts} of these logs are already recorded there (first: "
            f"{gen_first or nll_first}); nothing was written: pass --replace to replace them"
        )
    return gen, nll


def ingest_logs(
    logs: Sequence[CheckpointLog], *, out: Path | Location | str, harness: str, nll_reason: str | None = None, **naming: Unpack[Naming]
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
