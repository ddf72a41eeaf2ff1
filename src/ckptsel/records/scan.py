"""Reading a records folder: single files and units as one table (:func:`read_rows`).

When both forms exist they are read as one table; for each (trajectory, step) that has a unit
of a kind, the unit supersedes the single file's rows of that kind (the writer copies those
rows into the unit when it first writes it, so nothing is lost). Keys must be unique across
the result (checked by :mod:`ckptsel.records.load`).

Reading thousands of small files is slow (about 1-2 ms of CPU each with pyarrow, most of it
fixed per file and per column chunk), so readers go through a consolidated *read cache*, one
Parquet file per kind keyed by the units' names, sizes and versions (modification times
locally, ETags on object stores); it is rebuilt (local units read one file each on a few
threads, or on an object store concurrent GETs parsed in memory) when any unit changes and is
never a source of truth. Inside :func:`ckptsel.records.memo.uncached` (``verify``) the units
themselves are read and the read cache is neither read nor written. While
:func:`ckptsel.records.memo.cached` computes the arrays it stores (the loaders of ``analyze``),
a stale read cache is not rebuilt either: the units are read once, only the columns and the
split's row group the loader asks for (building the cache and reading it back doubled the
first analysis of new records, and the stored arrays serve every later one).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ckptsel._util import io
from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.codec import parquet_bytes, read_schema, read_table, table_from_bytes
from ckptsel.records.memo import bypassed, filling
from ckptsel.records.schema import (
    RECORDS_ORDER,
    SPLITS,
    TEXT_COLUMNS,
    UNIT_COLUMNS,
    arrow_schema,
    coerce_generations,
    coerce_nll,
)
from ckptsel.records.units import (
    CACHE_DIR,
    SINGLE_FILES,
    UNITS_DIR,
    UnitFile,
    list_units,
    single_file,
)

_CACHE_KEY = b"ckptsel.units"
_READ_ERRORS = (OSError, pa.ArrowException, ValueError, TypeError)  # a damaged or foreign file
DIRECT_SCAN_UNITS = 256  # trajectory-filtered reads of up to this many units skip the cache


def _fetch(units: list[UnitFile], kind: str) -> list[pa.Table]:
    """Units on an object store: concurrent GETs, each parsed in memory (checksums verified)."""
    fs = units[0].path.fs
    blobs = fs.cat([u.path.fs_path for u in units])
    tables = [table_from_bytes(blobs[u.path.fs_path], u.path) for u in units]
    for u, t in zip(units, tables, strict=True):
        missing = [c for c in UNIT_COLUMNS[kind] if c not in t.column_names]
        if missing:
            raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}")
    return tables


def _split_of_group(f: pq.ParquetFile, g: int) -> str | None:
    """The split every row of row group ``g`` belongs to, when its statistics prove it."""
    stats = f.metadata.row_group(g).column(f.schema_arrow.get_field_index("split")).statistics
    if stats is not None and stats.has_min_max and stats.min == stats.max and stats.min in SPLITS:
        return stats.min
    return None


def _read_local(
    u: UnitFile, kind: str, need: list[str], split: str | None, dictionary
) -> list[tuple[str | None, pa.Table]]:
    """One local unit's ``need`` columns (strings in ``dictionary`` read dictionary-encoded),
    its contract columns checked to be present: ``(split, rows)`` per row group whose split
    the statistics prove (a unit has one row group per split; one of another split than
    ``split`` is not read), else ``(None, rows)`` for the rows to split by value."""
    try:
        with pq.ParquetFile(
            u.path.local, read_dictionary=dictionary, page_checksum_verification=True, pre_buffer=False
        ) as f:
            missing = [c for c in UNIT_COLUMNS[kind] if c not in f.schema_arrow.names]
            if missing:
                raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}")
            proven = [_split_of_group(f, g) for g in range(f.metadata.num_row_groups)]
            keep = [g for g, s in enumerate(proven) if split is None or s in (None, split)]
            if all(proven[g] is not None for g in keep):
                return [(proven[g], f.read_row_group(g, columns=need, use_threads=False)) for g in keep]
            return [(None, f.read_row_groups(keep, columns=need, use_threads=False))]
    except KeyError:  # a column named in read_dictionary is missing
        missing = [c for c in UNIT_COLUMNS[kind] if c not in read_schema(u.path).names]
        raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}") from None
    except _READ_ERRORS as err:
        raise CkptselError(f"{u.path}: not a readable Parquet file ({err})") from err


def _conform(table: pa.Table, u: UnitFile, kind: str, schema: pa.Schema) -> pa.Table:
    """A unit's columns in ``schema``'s types (strings dictionary-encoded where ``schema``
    says so), or one error naming the unit and the column."""
    if table.schema.equals(schema):
        return table
    missing = [c for c in schema.names if c not in table.column_names]
    if missing:
        raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}")
    cols = []
    for f in schema:
        c = table.column(f.name)
        try:
            if pa.types.is_dictionary(f.type):
                if not pa.types.is_dictionary(c.type):
                    c = pc.dictionary_encode(c.cast(f.type.value_type))
                if not c.type.equals(f.type):
                    c = c.cast(f.type)
            elif not c.type.equals(f.type):
                c = c.cast(f.type)
        except (pa.ArrowException, ValueError) as err:
            raise CkptselError(
                f"{u.path}: column {f.name!r} has type {table.column(f.name).type}, "
                f"expected {UNIT_COLUMNS[kind][f.name]}"
            ) from err
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=schema)


def _by_split(table: pa.Table, u: UnitFile) -> dict[str, pa.Table]:
    """A unit's rows per split (its own row order kept); unknown split names refused."""
    split = table.column("split")
    names = pc.unique(split.cast(pa.string()) if pa.types.is_dictionary(split.type) else split).to_pylist()
    unknown = sorted(set(names) - set(SPLITS), key=str)
    if unknown:
        raise CkptselError(f"{u.path}: unknown split name(s) {unknown}; expected one of {list(SPLITS)}")
    if len(names) == 1:
        return {names[0]: table}
    return {s: table.filter(pc.equal(split, s)) for s in names}


def _unit_rows(u: UnitFile, kind: str, schema: pa.Schema, split: str | None, dictionary, fetched=None):
    """One unit's rows per split, conformed to ``schema`` (``fetched``: its table, read from
    an object store; else the local file is read)."""
    pieces = [(None, fetched)] if fetched is not None else _read_local(u, kind, schema.names, split, dictionary)
    out: dict[str, list[pa.Table]] = {}
    for s, t in pieces:
        t = _conform(t, u, kind, schema)
        for name, rows in ({s: t} if s is not None else _by_split(t, u)).items():
            out.setdefault(name, []).append(rows)
    return out


def _scan(
    units: list[UnitFile], kind: str, columns: list[str] | None = None, split: str | None = None,
    dictionary: list[str] | None = None,
) -> pa.Table:
    """The rows of ``units`` (``columns``, default all; one ``split``, default all), page
    checksums verified, in the single file's row order: split ascending, then trajectory and
    step (the units' order), then each unit's own order. String columns named in
    ``dictionary`` come dictionary-encoded (each unit its own dictionary: a chunk each).

    Local units are read one file each on a few threads, only the row groups ``split``
    needs (the dataset scanner costs about three times the CPU on thousands of small files).
    """
    dictionary = [c for c in dictionary or [] if UNIT_COLUMNS[kind].get(c) == "string"]
    base = arrow_schema(kind)
    names = list(base.names) if columns is None else list(dict.fromkeys(columns))
    need = names if "split" in names else [*names, "split"]
    schema = pa.schema(
        [pa.field(c, pa.dictionary(pa.int32(), pa.string())) if c in dictionary else base.field(c) for c in need]
    )  # fmt: skip
    if not units:
        return schema.empty_table().select(names)
    if units[0].path.is_local:
        with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
            rows = list(pool.map(lambda u: _unit_rows(u, kind, schema, split, dictionary), units))
    else:
        fetched = _fetch(units, kind)
        rows = [_unit_rows(u, kind, schema, split, dictionary, t) for u, t in zip(units, fetched, strict=True)]
    wanted = sorted(SPLITS) if split is None else [split]
    out = [t for s in wanted for r in rows for t in r.get(s, ())]
    return (pa.concat_tables(out) if out else schema.empty_table()).select(names)


def _key(units: list[UnitFile]) -> str:
    blob = json.dumps([[u.trajectory, u.step, u.size, u.tag] for u in units])
    return hashlib.sha256(blob.encode()).hexdigest()


def _cached_units(
    records_dir: Location, kind: str, units: list[UnitFile], build: bool = True
) -> tuple[Location | None, pa.Table | None]:
    """The read cache for ``units``: ``(path, None)`` when the cache file is current, else
    ``(path_or_None, table)`` with the rebuilt table (written to the cache when possible);
    ``(None, None)`` when it is not current and ``build`` is false."""
    cache = records_dir / UNITS_DIR / CACHE_DIR / f"{kind}.parquet"
    key = _key(units).encode()
    try:
        meta = read_schema(cache).metadata or {}
    except CkptselError:  # no cache yet, or a damaged one: rebuilt below
        meta = {}
    if meta.get(_CACHE_KEY) == key:
        return cache, None
    if not build:
        return None, None
    table = _scan(units, kind)
    stored = table.replace_schema_metadata({_CACHE_KEY: key})
    try:
        io.write_bytes(cache, parquet_bytes(stored))
    except CkptselError:  # read-only records: the in-memory table still serves this read
        return None, table
    return cache, table


def _project(table: pa.Table, columns, filters, read_dictionary) -> pa.Table:
    """``columns``/``filters``/``read_dictionary`` applied to an in-memory table the way
    ``pq.read_table`` applies them to a file."""
    if filters:
        mask = None
        for col, op, value in filters:
            c = table.column(col)
            m = pc.equal(c, value) if op in ("=", "==") else pc.is_in(c, value_set=pa.array(value))
            mask = m if mask is None else pc.and_(mask, m)
        table = table.filter(mask)
    if columns is not None:
        table = table.select(list(columns))
    for name in read_dictionary or []:
        if name in table.column_names and not pa.types.is_dictionary(table.column(name).type):
            i = table.column_names.index(name)
            table = table.set_column(i, name, pc.dictionary_encode(table.column(name)))
    return table


def _shadow(single: pa.Table, units: list[UnitFile]) -> pa.Table:
    """The single file's rows whose (trajectory, step) has no unit (units supersede them)."""
    if not units or single.num_rows == 0:
        return single
    have = pd.MultiIndex.from_tuples([(u.trajectory, u.step) for u in units])
    keys = pd.MultiIndex.from_arrays(
        [
            single.column("trajectory").cast(pa.string()).to_numpy(zero_copy_only=False),
            single.column("step").to_numpy(),
        ]
    )
    return single.filter(pa.array(~np.asarray(keys.isin(have))))


def _split_of(filters: list[tuple] | None) -> str | None:
    """The one split a ``read_rows`` filter restricts to (``None``: no such filter)."""
    for col, op, value in filters or []:
        if col == "split" and op in ("=", "=="):
            return str(value)
    return None


def _trajectories_of(filters: list[tuple] | None) -> set[str] | None:
    """The trajectories a ``read_rows`` filter restricts to (``None``: no such filter)."""
    for col, op, value in filters or []:
        if col == "trajectory":
            return {str(value)} if op in ("=", "==") else {str(v) for v in value}
    return None


def read_rows(
    records_dir: Path,
    kind: str,
    columns: list[str] | None = None,
    filters: list[tuple] | None = None,
    read_dictionary: list[str] | None = None,
) -> pa.Table | None:
    """The rows of ``kind`` in ``records_dir`` (single file and units together), with
    ``columns`` projected and ``filters`` (``[(column, "=" | "in", value), ...]``, ANDed)
    applied; ``None`` when the folder has no records of that kind.

    A single file alone is read exactly as before (one ``pq.read_table``). With units, the
    read cache answers (see the module docstring); single-file rows of a (trajectory, step)
    that has a unit are dropped (the unit supersedes them). A filter on ``trajectory``
    (``measure``'s checks of the trajectory it records) over at most ``DIRECT_SCAN_UNITS``
    units reads just those units and leaves the cache alone: the cache is stale after every
    write, and rebuilding it for the whole folder costs many seconds at paper scale.
    """
    records_dir = as_location(records_dir)
    single = single_file(records_dir, kind)
    units = list_units(records_dir, kind)
    if single is None and not units:
        return None
    wanted = _trajectories_of(filters)
    direct = None  # a few units of the wanted trajectories, read without the cache
    if units and wanted is not None:
        mine = [u for u in units if u.trajectory in wanted]
        if len(mine) <= DIRECT_SCAN_UNITS:
            units = direct = mine
    need = list(columns) if columns is not None else None
    if need is not None and filters:
        need += [c for c, _, _ in filters if c not in need]
    if single is not None and units:
        need_s = None if need is None else need + [c for c in ("trajectory", "step") if c not in need]
    else:
        need_s = need
    tables = []
    if single is not None:
        t = read_table(single, columns=need_s, filters=filters, read_dictionary=read_dictionary)
        t = _shadow(t, units)
        tables.append(t.select(need) if need is not None else t)
    if direct is None and units and bypassed():  # memo.uncached: the units themselves
        direct = units
    if direct is None and units:
        # while the memo computes what it will store, a stale read cache is not rebuilt: the
        # units are read once, only the columns and split asked for (the memo makes the
        # read cache redundant for these records, and rebuilding it doubled the first load)
        cache, table = _cached_units(records_dir, kind, units, build=not filling())
        if cache is not None and table is None:
            t = read_table(cache, columns=need, filters=filters, read_dictionary=read_dictionary)
            tables.append(t.replace_schema_metadata(None))
        elif table is not None:
            tables.append(_project(table, need, filters, read_dictionary).replace_schema_metadata(None))
        else:
            direct = units
    if direct is not None:
        split = _split_of(filters)
        t = _scan(direct, kind, columns=need, split=split, dictionary=read_dictionary)
        tables.append(_project(t, need, filters, read_dictionary))
    if len(tables) == 1:
        out = tables[0]
    else:
        out = _concat(tables, records_dir, kind)
    if columns is not None:
        out = out.select(list(columns))
    return out


def _concat(tables: list[pa.Table], records_dir: Path, kind: str) -> pa.Table:
    """Single-file rows + unit rows as one table in the single file's row order (so integer
    codes of string columns come out as from one file); types unified."""
    first = tables[0]
    encoded = [f.name for f in first.schema if pa.types.is_dictionary(f.type)]
    fixed = []
    for t in tables:
        cols, fields = [], []
        for f in first.schema:
            if f.name not in t.column_names:
                raise CkptselError(f"{records_dir / SINGLE_FILES.get(kind, kind)}: missing column(s) {f.name}")
            c = t.column(f.name)
            target = f.type.value_type if pa.types.is_dictionary(f.type) else f.type
            if pa.types.is_dictionary(c.type):
                c = c.cast(c.type.value_type)
            if not c.type.equals(target):
                try:
                    c = c.cast(target)
                except (pa.ArrowException, ValueError) as err:
                    raise CkptselError(
                        f"{records_dir / SINGLE_FILES.get(kind, kind)}: column {f.name!r} has type "
                        f"{target}, but the units have {c.type}"
                    ) from err
            cols.append(c)
            fields.append(pa.field(f.name, target))
        fixed.append(pa.Table.from_arrays(cols, schema=pa.schema(fields)))
    out = pa.concat_tables(fixed)
    order = [(c, "ascending") for c in RECORDS_ORDER if c in out.column_names]
    if order:
        out = out.sort_by(order)
    for name in encoded:
        i = out.column_names.index(name)
        out = out.set_column(i, name, pc.dictionary_encode(out.column(name)))
    return out


def sources(records_dir: Path | Location | str, kind: str) -> list[Location]:
    """Every file that holds records of ``kind`` (for messages and manifests)."""
    single = single_file(records_dir, kind)
    return ([single] if single else []) + [u.path for u in list_units(records_dir, kind)]


def read_frame(records_dir: Path, kind: str) -> pd.DataFrame:
    """All records of ``kind`` (``generations`` or ``nll``) as one contract frame in the
    records row order, whichever form they are in; generations carry ``text`` when any
    was recorded (null where unknown). For tools, tests and :func:`compact`, not for analysis.
    """
    records_dir = as_location(records_dir)
    columns = list(UNIT_COLUMNS[kind])
    table = read_rows(records_dir, kind, columns=columns)
    if table is None:
        raise CkptselError(f"{records_dir}: no {kind} records ({SINGLE_FILES[kind]} or {UNITS_DIR}/{kind}/)")
    df = table.to_pandas()
    if kind == "generations":
        texts = []
        single = single_file(records_dir, kind)
        if single is not None and "text" in read_schema(single).names:
            t = read_table(single, columns=list(TEXT_COLUMNS))
            t = _shadow(t, list_units(records_dir, kind))
            texts.append(t.filter(pc.is_valid(t.column("text"))).to_pandas())
        unit_texts = read_rows(records_dir, "texts", columns=list(TEXT_COLUMNS))
        if unit_texts is not None:
            texts.append(unit_texts.to_pandas())
        if texts:
            key = ["trajectory", "step", "split", "item_id"]
            text = pd.concat(texts, ignore_index=True).drop_duplicates(key, keep="last")
            df = df.merge(text, on=key, how="left")
        df = coerce_generations(df)
    else:
        df = coerce_nll(df)
    order = [c for c in RECORDS_ORDER if c in df.columns]
    return df.sort_values(order, kind="stable", ignore_index=True)
