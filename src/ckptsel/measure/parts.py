"""The per-checkpoint part cache that makes ``measure`` resumable and lossless.

Each checkpoint's rows go first to *part* files
``RECORDS_DIR/.parts/<trajectory>/step-<step>.<fingerprint>.{gen,nll}.parquet`` (written
atomically), then are upserted into the contract files. The fingerprint hashes everything
that changes a measurement (:meth:`MeasureConfig.generation_fingerprint`,
:meth:`MeasureConfig.nll_fingerprint`); part rows also carry a hash of each item's content
(:func:`item_hash`). A re-run reuses matching part rows and measures only what is missing, so
a killed job restarted ends with exactly the records of an uninterrupted one. A damaged part
is only a cache: it is measured again. In a records folder at a URL a part is one object,
written with one PUT (a kill leaves whole parts or none).

What is left to do at a checkpoint is answered here, once, for every caller: :class:`StepParts`
(what ``measure_run`` measures) and :func:`left_to_measure` (what a study still has to measure
and record: ``ckptsel run`` skips finished trajectories and prints its ``--dry-run`` plan with
it) take the items to generate and to score from the same rule, and :func:`left_to_measure`
adds the items the contract records lack (:class:`RecordedItems`, read once for every
trajectory). Neither loads a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ckptsel._util import io
from ckptsel._util.locations import Location, as_location
from ckptsel._util.nodecache import local_copy
from ckptsel.data.taskdef import item_hash
from ckptsel.data.tasks import load_items
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.frames import generation_frame
from ckptsel.records.scan import read_rows
from ckptsel.records.schema import coerce_nll

PARTS_DIR = ".parts"
# NEVER CHANGE how part files are named and keyed: released records folders (0.1.0 on) hold
# parts named by :func:`part_paths` (``step-<n>.<fingerprint>.{gen,nll}.parquet``, the
# fingerprints of MeasureConfig.generation_fingerprint / nll_fingerprint, every payload key and
# the 16 hex digits included) and rows keyed by :data:`_PART_KEY` (``item_hash``:
# ckptsel.data.item_hash). Any change to those rules makes every released part a miss, so a
# resumed ``measure``/``run`` measures everything again; a new setting may only add a payload
# key when it is not at its old default (as ``nll_backend`` and ``dtype`` do).
_GEN_KEY = ("split", "item_id")
_NLL_KEY = ("split", "item_id", "window")
_PART_KEY = ["split", "item_id", "item_hash"]  # what says which item (and version) a row is


def _load_items(task: str, path: Path | Location | str, split: str) -> list[Any]:
    loc = as_location(path)
    path = loc.local if loc.is_local else loc
    if not loc.exists():
        raise CkptselError(f"{path}: {split} items file not found")
    items = list(load_items(task, local_copy(loc)))  # a URL: this node's copy
    if not items:
        raise CkptselError(f"{path}: no {split} items")
    seen: set[str] = set()
    for it in items:
        if it.item_id in seen:
            raise CkptselError(f"{path}: duplicate item_id {it.item_id!r}")
        seen.add(it.item_id)
    return items


def _items_of(task: str, source: Path | Location | Sequence[Any], split: str) -> list[Any]:
    if isinstance(source, (str, Path, Location)):
        return _load_items(task, source, split)
    items = list(source)
    if not items:
        raise CkptselError(f"no {split} items")
    ids = [it.item_id for it in items]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise CkptselError(f"{split} items: duplicate item_id {dup!r}")
    return items


@dataclass(frozen=True)
class ItemPool:
    """The items measured at every checkpoint, per split, with their content hashes."""

    splits: dict[str, list[Any]]
    hashes: dict[str, list[str]]

    @classmethod
    def load(cls, task: str, validation: Path | Sequence[Any], test: Path | Sequence[Any], test_task: str | None = None) -> ItemPool:
        """Both items files (or item lists already built, e.g. by :mod:`ckptsel.data.pools`),
        checked (present, non-empty, unique ids). The test file is read with ``test_task``
        when given."""
        splits = {"validation": _items_of(task, validation, "validation"), "test": _items_of(test_task or task, test, "test")}
        return cls(splits, {s: [item_hash(it) for it in its] for s, its in splits.items()})

    @property
    def n_items(self) -> int:
        return sum(len(its) for its in self.splits.values())

    def scored(self, split: str, index: int) -> bool:
        """Whether the item has a response, so an NLL (a task file may have no response)."""
        return getattr(self.splits[split][index], "response", "") is not None

    def n_scored(self, split: str) -> int:
        """How many of ``split``'s items have an NLL to score."""
        return sum(self.scored(split, i) for i in range(len(self.splits[split])))

    def missing(self, part: pd.DataFrame | None, split: str) -> list[int]:
        """Indices of ``split``'s items that ``part`` does not hold with the same content hash."""
        return self._absent(_key_set(part), split)

    def _absent(self, have: set[tuple[str, str, str]], split: str) -> list[int]:
        """Indices of ``split``'s items whose (split, item_id, item_hash) is not in ``have``."""
        items, hashes = self.splits[split], self.hashes[split]
        return [i for i, it in enumerate(items) if (split, it.item_id, hashes[i]) not in have]

    def current(self, part: pd.DataFrame) -> pd.DataFrame:
        """Rows of ``part`` whose (split, item_id, item_hash) belong to the current items."""
        keep = {(s, it.item_id, h) for s, its in self.splits.items() for it, h in zip(its, self.hashes[s], strict=True)}
        return part[[k in keep for k in _keys(part)]]


def _keys(part: pd.DataFrame):
    """(split, item_id, item_hash) of each row (as lists first: iterating a pyarrow-backed
    column value by value is several times slower)."""
    return zip(*(part[c].astype(str).tolist() for c in _PART_KEY), strict=True)


def _key_set(part: pd.DataFrame | None) -> set[tuple[str, str, str]]:
    return set() if part is None or len(part) == 0 else set(_keys(part))


def _load(path: Location) -> pd.DataFrame | None:
    try:
        if path.is_local:
            return pd.read_parquet(path) if path.exists() else None
        return pd.read_parquet(BytesIO(path.read_bytes()))  # one GET
    except FileNotFoundError:
        return None
    except Exception:  # a damaged part is only a cache: measure again
        return None


CHECKPOINT_COLUMN = "checkpoint"  # part rows: the fingerprint of what they were measured from


def from_checkpoint(part: pd.DataFrame | None, checkpoint: str | None) -> pd.DataFrame | None:
    """The part rows measured from ``checkpoint`` (a fingerprint of its weights and files;
    ``None``: every row); rows cached before the column existed are kept."""
    if part is None or checkpoint is None or CHECKPOINT_COLUMN not in part.columns:
        return part
    col = part[CHECKPOINT_COLUMN]
    return part[col.isna() | (col.astype(str) == checkpoint)].reset_index(drop=True)


def _load_keys(path: Location) -> set[tuple[str, str, str]]:
    """The (split, item_id, item_hash) keys of a part file, its other columns left unread (a
    small file read on one thread: a thread pool costs more than it saves here)."""
    try:
        if path.is_local:
            if not path.exists():
                return set()
            source: Any = path.local
        else:
            source = BytesIO(path.read_bytes())  # one GET
        table = pq.ParquetFile(source).read(columns=_PART_KEY, use_threads=False)
        columns = [table.column(c).cast(pa.string()).to_pylist() for c in _PART_KEY]
        return set(zip(*columns, strict=True))
    except FileNotFoundError:
        return set()
    except Exception:  # a damaged part is only a cache: measure again
        return set()


def part_paths(records_dir: Path | Location | str, trajectory: str, step: int, config: MeasureConfig) -> tuple[Location, Location]:
    """One checkpoint's generation and NLL part files (named by the measurement fingerprints)."""
    folder = as_location(records_dir) / PARTS_DIR / trajectory
    return (
        folder / f"step-{step}.{config.generation_fingerprint()}.gen.parquet",
        folder / f"step-{step}.{config.nll_fingerprint()}.nll.parquet",
    )


def _todo(pool: ItemPool, have_gen: set, have_nll: set, only: str | None) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Per split, the indices of the items to generate and to score: those whose (split,
    item_id, item_hash) the parts' keys (``have_gen``, ``have_nll``) lack. ``only``
    (``measure --only generation|nll``) leaves the other kind alone. An item without a
    response (a task file with no response field) has no NLL to score."""
    todo_gen = {s: [] if only == "nll" else pool._absent(have_gen, s) for s in pool.splits}
    todo_nll = {s: [] if only == "generation" else [i for i in pool._absent(have_nll, s) if pool.scored(s, i)] for s in pool.splits}
    return todo_gen, todo_nll


class StepParts:
    """One checkpoint's part files: what is already measured, what is missing, the merge.

    ``gen`` / ``nll`` are the part rows (generation rows carry ``text`` and ``item_hash``;
    NLL rows carry ``item_hash``), or ``None`` when nothing is cached. With ``checkpoint`` (a
    fingerprint of the checkpoint's weights and the files that define its function), rows
    measured from another checkpoint are left out (measured again) and new rows carry it.
    """

    def __init__(
        self,
        records_dir: Path | Location | str,
        trajectory: str,
        step: int,
        config: MeasureConfig,
        pool: ItemPool,
        checkpoint: str | None = None,
    ) -> None:
        self.gen_path, self.nll_path = part_paths(records_dir, trajectory, step, config)
        self.pool, self.checkpoint = pool, checkpoint
        self.gen = from_checkpoint(_load(self.gen_path), checkpoint)
        self.nll = from_checkpoint(_load(self.nll_path), checkpoint)
        self.only = config.runtime.only  # measure --only generation|nll: the other kind is left alone
        self.todo_gen, self.todo_nll = _todo(pool, _key_set(self.gen), _key_set(self.nll), self.only)

    @property
    def n_todo(self) -> int:
        """Items to generate plus items to score at this checkpoint."""
        return sum(map(len, self.todo_gen.values())) + sum(map(len, self.todo_nll.values()))

    def add(self, new_gen: list[pd.DataFrame], new_nll: list[pd.DataFrame]) -> None:
        """Merge newly measured rows into the parts and write the parts that changed."""
        if self.checkpoint is not None:
            mark = lambda f: f.assign(  # noqa: E731
                **{CHECKPOINT_COLUMN: pd.Series([self.checkpoint] * len(f), index=f.index, dtype="string")}
            )
            new_gen, new_nll = [mark(f) for f in new_gen], [mark(f) for f in new_nll]
        self.gen = self._merge(self.gen, new_gen, _GEN_KEY)
        self.nll = self._merge(self.nll, new_nll, _NLL_KEY)
        if new_gen:
            io.write_parquet(self.gen_path, self.gen)
        if new_nll:
            io.write_parquet(self.nll_path, self.nll)

    def _merge(self, old: pd.DataFrame | None, new: list[pd.DataFrame], key: tuple[str, ...]) -> pd.DataFrame | None:
        """Old part rows for current items, replaced by new rows with the same key."""
        frames = ([self.pool.current(old)] if old is not None and len(old) else []) + new
        if not frames:
            return old
        merged = pd.concat(frames, ignore_index=True)
        merged = merged.drop_duplicates(list(key), keep="last")
        return merged.sort_values(list(key), kind="mergesort").reset_index(drop=True)

    def contract_generations(self, task: str, trajectory: str, configuration: str, test_task: str | None = None) -> pd.DataFrame | None:
        """Contract rows for the current items, answers re-derived from the stored text (the
        test split's with ``test_task`` when given)."""
        if self.gen is None or self.only == "nll":
            return None
        cur = self.pool.current(self.gen)
        frames = []
        for split, its in self.pool.splits.items():
            rows = cur[cur["split"] == split]
            by_id = {it.item_id: it for it in its}
            sel = [by_id[i] for i in rows["item_id"].astype(str)]
            frames.append(
                generation_frame(
                    sel,
                    rows["text"].astype(str).tolist(),
                    task=test_task if split == "test" and test_task else task,
                    split=split,
                    trajectory=trajectory,
                    configuration=configuration,
                    step=int(rows["step"].iloc[0]) if len(rows) else 0,
                )
            )
        return pd.concat(frames, ignore_index=True)

    def provenance(self, kind: str) -> set[str]:
        """What measured the current rows of ``kind`` (``generations`` or ``nll``): the distinct
        ``provenance`` values of the part rows (rows cached before provenance was recorded
        have none)."""
        rows = self.gen if kind == "generations" else self.nll
        if rows is None or "provenance" not in rows.columns or not len(rows):
            return set()
        return set(self.pool.current(rows)["provenance"].dropna().astype(str))

    def contract_nll(self, trajectory: str) -> pd.DataFrame | None:
        """Contract NLL rows for the current items."""
        if self.nll is None or self.only == "generation":
            return None
        return coerce_nll(self.pool.current(self.nll).assign(trajectory=trajectory))


# --------------------------------------------------------------------------- what is left

_RECORD_KINDS = {None: ("generations", "nll"), "generation": ("generations",), "nll": ("nll",)}


class RecordedItems:
    """How many of a pool's items the contract records hold, per kind (``generations``,
    ``nll``) and (trajectory, split, step): the records read once, for every trajectory."""

    def __init__(self, sizes: dict[str, int], counts: dict[str, dict[tuple, int]], scored: dict[str, int] | None = None) -> None:
        self.sizes, self.counts = sizes, counts
        self.scored = sizes if scored is None else scored  # items with an NLL, per split

    @classmethod
    def read(cls, records_dir: Path | Location | str, pool: ItemPool, trajectories: Sequence[str] | None = None) -> RecordedItems:
        """Read the records' keys (of ``trajectories`` only, when given) in one pass per kind."""
        cols = ["trajectory", "step", "split", "item_id"]
        only = None if trajectories is None else [("trajectory", "in", list(trajectories))]
        counts: dict[str, dict[tuple, int]] = {}
        for kind in ("generations", "nll"):
            table = read_rows(records_dir, kind, columns=cols, filters=only)
            counts[kind] = {} if table is None else _current_counts(table.to_pandas(), pool)
        sizes = {s: len(its) for s, its in pool.splits.items()}
        return cls(sizes, counts, {s: pool.n_scored(s) for s in pool.splits})

    def missing(self, trajectory: str, step: int, kinds: Sequence[str]) -> int:
        """Item rows of ``kinds`` the records lack at this checkpoint (kinds counted apart)."""
        return sum(
            n - self.counts[kind].get((trajectory, split, int(step)), 0)
            for kind in kinds
            for split, n in (self.scored if kind == "nll" else self.sizes).items()
        )


def _current_counts(df: pd.DataFrame, pool: ItemPool) -> dict[tuple, int]:
    """Distinct current items per (trajectory, split, step) in a records frame."""
    split, ids = df["split"].astype(str), df["item_id"].astype(str)
    keep = pd.Series(False, index=df.index)
    for s, its in pool.splits.items():
        keep |= (split == s) & ids.isin({it.item_id for it in its})
    cur = df.assign(split=split, item_id=ids)[keep]
    n = cur.groupby(["trajectory", "split", "step"], observed=True)["item_id"].nunique()
    return {(str(t), str(sp), int(st)): int(c) for (t, sp, st), c in n.items()}


@dataclass(frozen=True)
class CheckpointTodo:
    """What is left at one checkpoint: items to generate and to score (the part cache lacks
    them, or holds another version of the item: a model must measure them), and item rows the
    contract records lack (written from the part cache once it holds them)."""

    step: int
    generate: int
    score: int
    unrecorded: int
    # per split, the indices of the pool's items to generate and to score (what they cost:
    # ckptsel.measure.cost)
    generate_at: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)
    score_at: dict[str, list[int]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def done(self) -> bool:
        """Nothing to measure and nothing to record."""
        return not (self.generate or self.score or self.unrecorded)


def left_to_measure(
    records_dir: Path | Location | str,
    trajectory: str,
    steps: Sequence[int],
    config: MeasureConfig,
    pool: ItemPool,
    recorded: RecordedItems | None = None,
) -> list[CheckpointTodo]:
    """What is left to measure and record of ``trajectory`` at each of ``steps``, in the order
    given: the same rule as :class:`StepParts` (only the parts' key columns are read), plus the
    contract rows missing from ``recorded`` (default: this trajectory's records, read now).
    Loads no model; a checkpoint need not exist yet (then everything is left)."""
    if recorded is None:
        recorded = RecordedItems.read(records_dir, pool, [trajectory])
    kinds = _RECORD_KINDS[config.runtime.only]
    out = []
    for step in steps:
        gen_path, nll_path = part_paths(records_dir, trajectory, step, config)
        gen, nll = _todo(pool, _load_keys(gen_path), _load_keys(nll_path), config.runtime.only)
        out.append(
            CheckpointTodo(
                int(step),
                generate=sum(map(len, gen.values())),
                score=sum(map(len, nll.values())),
                unrecorded=recorded.missing(trajectory, step, kinds),
                generate_at=gen,
                score_at=nll,
            )
        )
    return out
