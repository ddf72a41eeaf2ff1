"""Writing records folders (SPEC §2): the one writer every producer goes through.

``measure``, ``ingest``, the Trainer callback (:mod:`ckptsel.integrations`) and ``simulate``
all write here, so every records file has the same layout: rows sorted by
:data:`RECORDS_ORDER` (split first, then trajectory, step, item and window) in row groups of
:data:`RECORDS_ROW_GROUP` rows. Split first lets a reader that asks for one split skip the
other split's row groups from the Parquet statistics; at paper scale this layout loaded
fastest of those measured (split- or trajectory-first, 256 Ki-row or default row groups).

Two ways in:

* :func:`write_records` — a whole table at once (``simulate``; test fixtures).
* :func:`upsert_records` — many runs share one records folder, a job can be killed at any
  moment, and two producers may write at once. So every update is an *upsert* (rows with the
  same key are replaced, every other row is kept) of the contract files, done under an
  exclusive lock and written atomically through :mod:`ckptsel.io`; the two contract files
  are serialized in memory first and renamed back to back, so a crash leaves each file
  complete and valid.

:func:`check_name` keeps trajectory and configuration names plain (they become folder names).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ckptsel import io
from ckptsel.errors import CkptselError
from ckptsel.records.schema import (
    GENERATION_COLUMNS,
    GENERATION_KEY,
    GENERATION_OPTIONAL,
    GENERATIONS_FILE,
    NLL_COLUMNS,
    NLL_FILE,
    NLL_KEY,
)

RECORDS_ORDER = ("split", "trajectory", "step", "item_id", "window")  # row order of every file
RECORDS_ROW_GROUP = 262_144  # rows per Parquet row group
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@,-]*$")

LOCK_FILE = ".lock"


def empty_generations(with_text: bool = True) -> pd.DataFrame:
    """A zero-row generations frame with the contract dtypes."""
    cols = dict(GENERATION_COLUMNS)
    if with_text:
        cols.update(GENERATION_OPTIONAL)
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


def empty_nll() -> pd.DataFrame:
    """A zero-row NLL frame with the contract dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in NLL_COLUMNS.items()})


def check_name(kind: str, name: str) -> str:
    """Trajectory/configuration names become folder names: keep them plain."""
    if not _NAME_RE.match(name):
        raise CkptselError(
            f"{kind} name {name!r} must start with a letter/digit and use only letters, digits and ._+=@,-"
        )
    return name


def _order(columns) -> list[str]:
    """The sort columns of :data:`RECORDS_ORDER` that a table has."""
    return [c for c in RECORDS_ORDER if c in columns]


def write_records(path: Path, df: pd.DataFrame) -> None:
    """Write a whole records table (SPEC §2) in the records layout (see the module docstring)."""
    ordered = df.sort_values(_order(df.columns), kind="stable", ignore_index=True)
    io.write_bytes(
        path, _parquet_bytes(pa.Table.from_pandas(ordered, preserve_index=False))
    )


def coerce_generations(df: pd.DataFrame) -> pd.DataFrame:
    """Contract columns in contract order and dtypes (+ ``text`` when present)."""
    cols = dict(GENERATION_COLUMNS)
    if "text" in df.columns:
        cols.update(GENERATION_OPTIONAL)
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise CkptselError(f"generation rows lack column(s) {missing}")
    return df[list(cols)].astype(cols).reset_index(drop=True)


def coerce_nll(df: pd.DataFrame) -> pd.DataFrame:
    """Contract columns in contract order and dtypes."""
    missing = [c for c in NLL_COLUMNS if c not in df.columns]
    if missing:
        raise CkptselError(f"NLL rows lack column(s) {missing}")
    return df[list(NLL_COLUMNS)].astype(NLL_COLUMNS).reset_index(drop=True)


@contextlib.contextmanager
def records_lock(records_dir: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``records_dir`` (POSIX ``flock``; a no-op elsewhere)."""
    records_dir = Path(records_dir)
    records_dir.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    fd = os.open(records_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_table(path: Path) -> pa.Table | None:
    """Read one contract file as an Arrow table, or ``None`` when it does not exist yet."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return pq.read_table(path, page_checksum_verification=True)
    except Exception as err:  # pyarrow raises several types for a damaged file
        raise CkptselError(f"{path}: not a readable parquet file ({err})") from err


def _keys(table: pa.Table, key: tuple[str, ...]) -> pa.Array:
    """One string per row joining the key columns (unit separator between fields)."""
    cols = [pc.cast(table[c], pa.string()) for c in key]
    return pc.binary_join_element_wise(*cols, "\x1f")


def _upsert(
    old: pa.Table | None, new: pa.Table, key: tuple[str, ...], target: pa.Schema
) -> pa.Table:
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
        merged = pa.concat_tables(
            [_conform(kept, target), _conform(new, target)], promote_options="default"
        )
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


def _target(df: pd.DataFrame) -> pa.Schema:
    """Arrow schema (with pandas metadata, so pandas reads the contract dtypes back)."""
    return pa.Schema.from_pandas(df.iloc[:0], preserve_index=False)


def _parquet_bytes(table: pa.Table) -> bytes:
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, row_group_size=RECORDS_ROW_GROUP, **io.PARQUET_OPTIONS)
    return buf.getvalue().to_pybytes()


def upsert_records(
    records_dir: Path,
    generations: pd.DataFrame | None = None,
    nll: pd.DataFrame | None = None,
) -> None:
    """Add rows to ``records_dir/{generations,nll}.parquet``, replacing rows with the same key.

    Rows of other trajectories/steps/items are kept untouched. Files are sorted in the
    records order (a total order on the key), so the result does not depend on the order in
    which checkpoints were measured. The
    optional ``text`` column is kept when either side has it (null where unknown).
    """
    records_dir = Path(records_dir)
    with records_lock(records_dir):
        payload: list[tuple[Path, bytes]] = []
        if nll is not None:
            path = records_dir / NLL_FILE
            new = coerce_nll(nll)
            target = _target(new)
            table = pa.Table.from_pandas(new, schema=target, preserve_index=False)
            payload.append(
                (path, _parquet_bytes(_upsert(read_table(path), table, NLL_KEY, target)))
            )
        if generations is not None:
            path = records_dir / GENERATIONS_FILE
            old = read_table(path)
            new = coerce_generations(generations)
            with_text = "text" in new.columns or (old is not None and "text" in old.column_names)
            target = _target(empty_generations(with_text))
            if with_text and "text" not in new.columns:
                new = new.assign(text=pd.Series(pd.NA, index=new.index, dtype="string"))
            table = pa.Table.from_pandas(new, schema=target, preserve_index=False)
            payload.append((path, _parquet_bytes(_upsert(old, table, GENERATION_KEY, target))))
        for path, data in payload:  # serialized first: the two renames follow each other
            io.write_bytes(path, data)
    _release_memory()


def _release_memory() -> None:
    """Hand freed Arrow buffers back to the OS: a long run upserts after every checkpoint
    and the records grow, so otherwise resident memory creeps up with each rewrite."""
    import gc

    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
