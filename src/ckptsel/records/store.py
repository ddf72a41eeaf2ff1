"""Writing records folders (SPEC §2): the one writer every producer goes through, and
``compact`` (units back to the single-file form).

``measure``, ``ingest``, the Trainer callback (:mod:`ckptsel.integrations`) and ``simulate``
all write here, so every records file has the same layout: rows sorted by
:data:`RECORDS_ORDER` (split first, then trajectory, step, item and window) in row groups of
:data:`RECORDS_ROW_GROUP` rows. Split first lets a reader that asks for one split skip the
other split's row groups from the Parquet statistics; at paper scale this layout loaded
fastest of those measured (split- or trajectory-first, 256 Ki-row or default row groups).

Two ways in:

* :func:`write_records` — a whole table at once (``simulate``; test fixtures).
* :func:`write_unit` — one checkpoint of one trajectory (``measure``, the cluster driver, the
  Trainer callback): its rows become write-once *unit* files (generations, NLL, texts) in
  the records folder's units (:mod:`ckptsel.records.units`), then the trajectory's packs
  (:mod:`ckptsel.records.cache.pack`) are rewritten from the old pack and the new units. Nothing
  else is read or rewritten, so recording a checkpoint costs the same in an empty folder and
  at paper scale (a pack grows with its trajectory only);
  a re-measured checkpoint replaces exactly its own units (rows with the same key replaced,
  others kept); files are written atomically (a kill leaves complete units only) under a
  per-trajectory lock (producers of different trajectories never wait for each other).
  On an object store (a records URL) there is no lock: each unit is one PUT, conditional on
  the version that was read (S3 ``If-Match`` / ``If-None-Match``), and a writer that lost the
  race reads, merges and writes again, so concurrent producers lose no rows. Stores without
  conditional writes (GCS here) rely on one writer per trajectory, which ``measure`` is (its
  driver alone writes).
* :func:`upsert_records` — rows of any checkpoints (``ingest``): grouped by (trajectory,
  step) and written unit by unit, each trajectory's packs once after its units.

:func:`check_name` keeps trajectory and configuration names plain (they become folder names).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ckptsel._util import io
from ckptsel._util.locations import Location, WriteConflict, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.cache import PACKED_KINDS
from ckptsel.records.codec import parquet_bytes, read_schema, read_table, table_from_bytes, unit_bytes
from ckptsel.records.provenance import UnitProvenance, read_provenance, single_file_metadata
from ckptsel.records.scan import read_frame, refresh_pack
from ckptsel.records.schema import GENERATION_KEY, NLL_KEY, RECORDS_ORDER, arrow_schema, check_name, coerce_generations, coerce_nll
from ckptsel.records.units import SINGLE_FILES, UNITS_DIR, exists, forget_listings, single_file, unit_path
from ckptsel.records.weights import CheckpointStamp, single_file_stamps


def compact(records_dir: Path | Location | str) -> list[Location]:
    """Write the single-file form (``generations.parquet``, ``nll.parquet``, texts as the
    optional ``text`` column) from everything in ``records_dir``, then remove the units.

    Each file is written atomically before any unit is removed; a kill in between leaves
    both forms, which read as before (units supersede the single file's rows). The units'
    provenance goes into each file's metadata, per trajectory (:mod:`ckptsel.records.provenance`).
    """
    records_dir = as_location(records_dir)
    written = []
    for kind in ("generations", "nll"):
        if exists(records_dir, kind):
            path = records_dir / SINGLE_FILES[kind]
            meta = single_file_metadata(read_provenance(records_dir, kind))
            meta.update(single_file_stamps(records_dir, kind))
            write_records(path, read_frame(records_dir, kind), metadata=meta)
            written.append(path)
    units = records_dir / UNITS_DIR
    if not units.is_local:
        units.remove_tree()
    elif units.is_dir():
        shutil.rmtree(units)
    forget_listings()
    return written


LOCK_FILE = ".lock"


def _order(columns) -> list[str]:
    """The sort columns of :data:`RECORDS_ORDER` that a table has."""
    return [c for c in RECORDS_ORDER if c in columns]


def write_records(path: Path | Location | str, df: pd.DataFrame, metadata: dict[bytes, bytes] | None = None) -> None:
    """Write a whole records table (SPEC §2) in the records layout (see the module docstring),
    with ``metadata`` added to the file's key-value metadata."""
    ordered = df.sort_values(_order(df.columns), kind="stable", ignore_index=True)
    table = pa.Table.from_pandas(ordered, preserve_index=False)
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    io.write_bytes(path, parquet_bytes(table))


@contextlib.contextmanager
def records_lock(records_dir: Path | Location | str) -> Iterator[None]:
    """Exclusive advisory lock on ``records_dir`` (POSIX ``flock``; a no-op elsewhere, and on
    object stores, which have no locks)."""
    if not as_location(records_dir).is_local:
        yield
        return
    with _flock(as_location(records_dir).local / LOCK_FILE):
        yield


@contextlib.contextmanager
def _flock(lock_file: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``lock_file`` (POSIX ``flock``; created with its folder; a
    no-op where there is no ``fcntl``)."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _keys(table: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """One string per row joining the key columns (unit separator between fields)."""
    cols = [pc.cast(table[c], pa.string()) for c in key]
    return pc.binary_join_element_wise(*cols, "\x1f")


def _upsert(old: pa.Table | None, new: pa.Table, key: tuple[str, ...], target: pa.Schema) -> pa.Table:
    """``old`` without the rows whose key is in ``new``, plus ``new``, in the records order.

    Done in Arrow (not pandas) so that rewriting a large shared records file after every
    checkpoint stays cheap in time and memory.
    """
    new_keys = _keys(new, key)
    if pc.count_distinct(new_keys).as_py() != new.num_rows:
        dup = new.select(list(key)).to_pandas()
        first = dup[dup.duplicated()].iloc[0].to_dict()
        raise CkptselError(f"duplicate record key {first} in the rows to write")
    if old is None or old.num_rows == 0:
        merged = new
    else:
        for c in key:
            if c not in old.column_names:
                raise CkptselError(f"existing records lack key column {c!r}")
        kept = old.filter(pc.invert(pc.is_in(_keys(old, key), value_set=new_keys)))
        names = [f.name for f in target]
        kept = kept.select([c for c in names if c in kept.column_names])
        merged = pa.concat_tables([_conform(kept, target), _conform(new, target)], promote_options="default")
    merged = _conform(merged, target)
    return merged.sort_by([(c, "ascending") for c in _order(merged.column_names)])


def _conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """Columns of ``target`` in its order and types (missing optional columns as nulls)."""
    cols = []
    for f in target:
        if f.name in table.column_names:
            cols.append(pc.cast(table[f.name], f.type))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=target)


@contextlib.contextmanager
def _unit_lock(records_dir: Location, trajectory: str) -> Iterator[None]:
    """Exclusive lock on one trajectory's units (producers of other trajectories never wait)."""
    with _flock(records_dir.local / UNITS_DIR / ".locks" / f"{trajectory}.lock"):
        yield


def _existing(records_dir: Location, kind: str, trajectory: str, step: int) -> pa.Table | None:
    """The unit's current rows: its file, else the single file's rows of this checkpoint (which
    the new unit then carries on, since a unit supersedes the single file's rows)."""
    path = unit_path(records_dir, kind, trajectory, step)
    if path.is_file():
        return read_table(path)
    return _from_single(records_dir, kind, trajectory, step)


def _from_single(records_dir: Location, kind: str, trajectory: str, step: int) -> pa.Table | None:
    """The single file's rows of this checkpoint (``None`` without a single file)."""
    single = single_file(records_dir, "generations" if kind == "texts" else kind)
    if single is None:
        return None
    if kind == "texts" and "text" not in read_schema(single).names:
        return None
    filters = [("trajectory", "=", trajectory), ("step", "=", int(step))]
    old = read_table(single, filters=filters)
    if kind == "texts":
        old = old.filter(pc.is_valid(old.column("text")))
    return old


def write_unit(
    records_dir: Path | Location | str,
    trajectory: str,
    step: int,
    generations: pd.DataFrame | None = None,
    nll: pd.DataFrame | None = None,
    provenance: dict[str, UnitProvenance] | None = None,
    checkpoint: CheckpointStamp | None = None,
    replace: bool = False,
    pack: bool = True,
) -> list[Location]:
    """Record one checkpoint: its rows go to its own unit files (see
    :mod:`ckptsel.records.units`), then the trajectory's packs are brought up to date
    (:mod:`ckptsel.records.cache.pack`; ``pack=False``: left to the caller, who writes more units
    of the trajectory first). Nothing else in ``records_dir`` is read or rewritten.

    ``generations`` / ``nll`` are contract frames whose rows all belong to ``trajectory`` at
    ``step`` (either may be ``None``). Rows with the same key as rows already in the unit
    replace them, other rows are kept (a re-measured checkpoint replaces exactly its own
    unit). The generations' optional ``text`` goes to the unit's texts file, which analysis
    never reads. Every file is written atomically, serialized in memory first and renamed back
    to back. Safe to call from several processes at once (a per-trajectory lock; on an object
    store, conditional writes: see the module docstring). Returns the files written.
    ``provenance`` (``{"generations" | "nll": UnitProvenance}``) says what measured the rows:
    it goes into the units' metadata (the texts unit gets the generations'); a unit written
    without it records none (:mod:`ckptsel.records.provenance`). ``checkpoint`` says what
    checkpoint they were measured from (:mod:`ckptsel.records.weights`); ``replace``: the
    checkpoint's earlier rows are dropped, not merged (``measure --replace``).
    """
    records_dir = as_location(records_dir)
    stamp = _Stamp(provenance, checkpoint)
    check_name("trajectory", trajectory)
    step = int(step)
    payload: list[tuple[str, pd.DataFrame, tuple[str, ...]]] = []
    if nll is not None:
        payload.append(("nll", coerce_nll(nll), NLL_KEY))
    if generations is not None:
        gen = coerce_generations(generations)
        if "text" in gen.columns:
            texts = gen[["trajectory", "step", "split", "item_id", "text"]]
            payload.append(("texts", texts[texts["text"].notna()], GENERATION_KEY))
            gen = gen.drop(columns="text")
        payload.append(("generations", gen, GENERATION_KEY))
    for kind, df, _ in payload:
        wrong = (df["trajectory"] != trajectory) | (df["step"] != step)
        if wrong.any():
            r = df[wrong].iloc[0]
            raise CkptselError(
                f"{kind} row of trajectory {r['trajectory']!r} step {int(r['step'])} given to "
                f"write_unit for trajectory {trajectory!r} step {step}"
            )
    if not records_dir.is_local:
        written = [
            _write_remote_unit(records_dir, kind, trajectory, step, df, key, stamp.of(kind), replace)
            for kind, df, key in payload
            if not (kind == "texts" and df.empty)
        ]
    else:
        written = _write_local_units(records_dir, trajectory, step, payload, stamp, replace)
    forget_listings()
    if pack:
        refresh_packs(records_dir, trajectory, [kind for kind, _, _ in payload])
    return written


def refresh_packs(records_dir: Path | Location | str, trajectory: str, kinds) -> None:
    """Bring ``trajectory``'s packs of ``kinds`` up to date with its units (under the
    trajectory's lock locally). A pack that cannot be written is left stale: readers then
    read the units (a pack is never a source of truth)."""
    records_dir = as_location(records_dir)
    for kind in [k for k in PACKED_KINDS if k in kinds]:
        if records_dir.is_local:
            with _unit_lock(records_dir, trajectory):
                refresh_pack(records_dir, kind, trajectory)
        else:
            refresh_pack(records_dir, kind, trajectory)


def _write_local_units(records_dir: Location, trajectory: str, step: int, payload, stamp, replace):
    """:func:`write_unit`'s units in a local folder, under the trajectory's lock."""
    written = []
    with _unit_lock(records_dir, trajectory):
        blobs = []
        for kind, df, key in payload:
            if kind == "texts" and df.empty:
                if replace:
                    unit_path(records_dir, kind, trajectory, step).unlink(missing_ok=True)
                continue
            target = arrow_schema(kind)
            table = pa.Table.from_pandas(df, preserve_index=False).cast(target)
            old = None if replace else _existing(records_dir, kind, trajectory, step)
            merged = _stamp(_upsert(old, table, key, target), stamp.of(kind))
            blobs.append((unit_path(records_dir, kind, trajectory, step), unit_bytes(merged)))
        for path, data in blobs:
            if not _holds(path, data):  # a unit written again as it is stays untouched (its
                io.write_bytes(path, data)  # version, and so its trajectory's pack, unchanged)
            written.append(path)
    return written


def _holds(path: Location, data: bytes) -> bool:
    """Whether the local file at ``path`` already holds exactly ``data``."""
    try:
        return os.path.getsize(path.local) == len(data) and path.local.read_bytes() == data
    except OSError:
        return False


class _Stamp:
    """What a unit's metadata says: what measured it, and from which checkpoint."""

    def __init__(self, provenance: dict[str, UnitProvenance] | None, checkpoint: CheckpointStamp | None) -> None:
        self.provenance, self.checkpoint = provenance or {}, checkpoint

    def of(self, kind: str) -> dict[bytes, bytes] | None:
        """A unit of ``kind``'s metadata (the texts unit shares the generations' provenance);
        ``None``: none."""
        made_by = self.provenance.get("generations" if kind == "texts" else kind)
        meta = {} if made_by is None else made_by.metadata()
        if self.checkpoint is not None:
            meta.update(self.checkpoint.metadata())
        return meta or None


def _stamp(table: pa.Table, metadata: dict[bytes, bytes] | None) -> pa.Table:
    """``table`` with exactly ``metadata`` (none when ``None``)."""
    return table.replace_schema_metadata(metadata)


UNIT_WRITE_ATTEMPTS = 50


def _write_remote_unit(
    records_dir: Location,
    kind: str,
    trajectory: str,
    step: int,
    df: pd.DataFrame,
    key: tuple[str, ...],
    made_by: dict[bytes, bytes] | None = None,
    replace: bool = False,
) -> Location:
    """One unit on an object store: read it with its version, merge, write it back in one PUT
    conditional on that version (or on its absence); a lost race reads again."""
    path = unit_path(records_dir, kind, trajectory, step)
    target = arrow_schema(kind)
    table = pa.Table.from_pandas(df, preserve_index=False).cast(target)
    conditional = path.has_conditions
    for attempt in range(UNIT_WRITE_ATTEMPTS):
        got = path.read_tagged()
        if replace:
            old = None
        elif got is not None:
            old = table_from_bytes(got[0], path)
        else:
            old = _from_single(records_dir, kind, trajectory, step)
        data = unit_bytes(_stamp(_upsert(old, table, key, target), made_by))
        if not conditional:  # one writer per trajectory (see the module docstring)
            path.write_bytes(data)
            return path
        try:
            path.write_bytes(data, if_absent=got is None, if_tag=None if got is None else got[1])
            return path
        except WriteConflict:
            time.sleep(min(0.5, 0.01 * (attempt + 1)))
    raise CkptselError(f"{path}: {UNIT_WRITE_ATTEMPTS} concurrent writers kept overwriting this unit")


def upsert_records(
    records_dir: Path | Location | str,
    generations: pd.DataFrame | None = None,
    nll: pd.DataFrame | None = None,
    provenance: dict[str, UnitProvenance] | None = None,
    checkpoint: CheckpointStamp | None = None,
    replace: bool = False,
) -> None:
    """Add rows to ``records_dir``, replacing rows with the same key: each (trajectory, step)
    among the rows is written as its own unit through :func:`write_unit`, so the cost depends
    on the rows given, never on the records already there. Rows of other checkpoints are
    untouched. The optional ``text`` column goes to the units' texts files; ``provenance``
    and ``checkpoint`` (see :func:`write_unit`) go to every unit written; ``replace``: each
    checkpoint's earlier rows are dropped, not merged.
    """
    groups: dict[tuple[str, int], dict[str, pd.DataFrame]] = {}
    for name, df in (("generations", generations), ("nll", nll)):
        if df is None:
            continue
        missing = [c for c in ("trajectory", "step") if c not in df.columns]
        if missing:
            raise CkptselError(f"{name} rows lack column(s) {missing}")
        for (traj, step), part in df.groupby(["trajectory", "step"], sort=True, observed=True):
            groups.setdefault((str(traj), int(step)), {})[name] = part
    kinds: dict[str, set[str]] = {}
    for (traj, step), frames in groups.items():
        write_unit(records_dir, traj, step, **frames, provenance=provenance, checkpoint=checkpoint, replace=replace, pack=False)
        kinds.setdefault(traj, set()).update(frames)
    for traj, written in kinds.items():  # each trajectory's packs once, after all its units
        refresh_packs(records_dir, traj, written)
