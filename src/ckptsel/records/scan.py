"""Reading a records folder: single files and units as one table (:func:`read_rows`).

When both forms exist they are read as one table; for each (trajectory, step) that has a unit
of a kind, the unit supersedes the single file's rows of that kind (the writer copies those
rows into the unit when it first writes it, so nothing is lost). Keys must be unique across
the result (checked by :mod:`ckptsel.records.checks` as :mod:`ckptsel.records.load` loads them).

Reading thousands of small files is slow (about 1-2 ms of CPU each with pyarrow, most of it
fixed per file and per column chunk), so readers read each trajectory from its *pack*
(:mod:`ckptsel.records.cache.pack`: one file per trajectory and kind, kept current by the writer)
when the pack was built from exactly the trajectory's units as listed now, and from its units
otherwise (:func:`refresh_pack` then rewrites the pack, where the records can be written).
Inside :func:`ckptsel.records.cache.memo.uncached` (``verify``) the units themselves are read and no
pack is read or written. While :func:`ckptsel.records.cache.memo.cached` computes the arrays it
stores (the loaders of ``analyze``), a stale pack is not rewritten: the units are read once,
only the columns and the split's row group the loader asks for (the stored arrays serve every
later analysis).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ckptsel._util.locations import Location, as_location
from ckptsel._util.threads import map_threads
from ckptsel.errors import CkptselError
from ckptsel.records import cache
from ckptsel.records.codec import read_schema, read_table, table_from_bytes
from ckptsel.records.schema import RECORDS_ORDER, SPLITS, TEXT_COLUMNS, UNIT_COLUMNS, arrow_schema, coerce_generations, coerce_nll
from ckptsel.records.units import SINGLE_FILES, UNITS_DIR, UnitFile, list_units, single_file

_READ_ERRORS = (OSError, pa.ArrowException, ValueError, TypeError)  # a damaged or foreign file


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


def _split_of_group(f: pq.ParquetFile, g: int, column: int | None) -> str | None:
    """The split every row of row group ``g`` belongs to, when its statistics prove it
    (``column``: the index of ``split`` among the file's leaf columns)."""
    if column is None:
        return None
    stats = f.metadata.row_group(g).column(column).statistics
    if stats is not None and stats.has_min_max and stats.min == stats.max and stats.min in SPLITS:
        return stats.min
    return None


def _read_local(u: UnitFile, kind: str, need: list[str], split: str | None, dictionary) -> list[tuple[str | None, pa.Table]]:
    """One local unit's ``need`` columns (strings in ``dictionary`` read dictionary-encoded),
    its contract columns checked to be present: ``(split, rows)`` per row group whose split
    the statistics prove (a unit has one row group per split; one of another split than
    ``split`` is not read), else ``(None, rows)`` for the rows to split by value."""
    try:  # (the file opened as a NativeFile: a path would resolve a filesystem per file)
        with (
            pa.OSFile(u.where if isinstance(u.where, str) else os.fspath(u.path.local)) as src,
            pq.ParquetFile(src, read_dictionary=dictionary, page_checksum_verification=True, pre_buffer=False) as f,
        ):
            fields = f.schema_arrow  # (``schema_arrow`` converts the footer's schema at each access)
            names = fields.names
            missing = [c for c in UNIT_COLUMNS[kind] if c not in names]
            if missing:
                raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}")
            leaf = _split_leaf(f, names)
            proven = [_split_of_group(f, g, leaf) for g in range(f.metadata.num_row_groups)]
            keep = [g for g, s in enumerate(proven) if split is None or s in (None, split)]
            if all(proven[g] is not None for g in keep):
                return [(proven[g], f.read_row_group(g, columns=need, use_threads=False)) for g in keep]
            return [(None, f.read_row_groups(keep, columns=need, use_threads=False))]
    except KeyError:  # a column named in read_dictionary is missing
        missing = [c for c in UNIT_COLUMNS[kind] if c not in read_schema(u.path).names]
        raise CkptselError(f"{u.path}: missing column(s) {', '.join(missing)}") from None
    except _READ_ERRORS as err:
        raise CkptselError(f"{u.path}: not a readable Parquet file ({err})") from err


def _split_leaf(f: pq.ParquetFile, names: list[str]) -> int | None:
    """The index of ``split`` among the file's leaf columns (what statistics are indexed by):
    its top-level index when no nested column comes before it, else found by its path."""
    schema = f.metadata.schema
    i = names.index("split")
    if i < len(schema) and schema.column(i).path == "split":
        return i
    return next((j for j in range(len(schema)) if schema.column(j).path == "split"), None)


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
        try:
            cols.append(_as_type(table.column(f.name), f.type))
        except (pa.ArrowException, ValueError) as err:
            raise CkptselError(
                f"{u.path}: column {f.name!r} has type {table.column(f.name).type}, expected {UNIT_COLUMNS[kind][f.name]}"
            ) from err
    return pa.Table.from_arrays(cols, schema=schema)


def _plain(t: pa.DataType) -> pa.DataType:
    """``t``, or the value type of a dictionary type."""
    return t.value_type if pa.types.is_dictionary(t) else t


def _as_type(c: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    """Column ``c`` as ``target``: dictionary-encoded where ``target`` is a dictionary type,
    decoded where it is not, then cast where the types still differ."""
    if pa.types.is_dictionary(target):
        if not pa.types.is_dictionary(c.type):
            c = pc.dictionary_encode(c.cast(target.value_type))
    elif pa.types.is_dictionary(c.type):
        c = c.cast(c.type.value_type)
    return c if c.type.equals(target) else c.cast(target)


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
    units: list[UnitFile],
    kind: str,
    columns: list[str] | None = None,
    split: str | None = None,
    dictionary: list[str] | None = None,
    records_dir: Location | None = None,
    refresh: bool = False,
) -> pa.Table:
    """The rows of ``units`` (``columns``, default all; one ``split``, default all), page
    checksums verified, in the single file's row order: split ascending, then trajectory and
    step (the units' order), then each unit's own order. String columns named in
    ``dictionary`` come dictionary-encoded (a chunk per file read).

    With ``records_dir``, each trajectory whose pack (:mod:`ckptsel.records.cache.pack`) is current
    is read from it; ``refresh``: a trajectory without a current pack gets one (where the
    records can be written) and is read from it. Other units are read one file each on a
    few threads (local), or by concurrent GETs (object store), only the row groups ``split``
    needs.
    """
    dictionary = [c for c in dictionary or [] if UNIT_COLUMNS[kind].get(c) == "string"]
    base = arrow_schema(kind)
    names = list(base.names) if columns is None else list(dict.fromkeys(columns))
    need = names if "split" in names else [*names, "split"]
    schema = pa.schema([pa.field(c, pa.dictionary(pa.int32(), pa.string())) if c in dictionary else base.field(c) for c in need])
    if not units:
        return schema.empty_table().select(names)
    groups = list(cache.by_trajectory(units))
    got: list[dict | None] = [None] * len(groups)
    if records_dir is not None and kind in cache.PACKED_KINDS:
        got = _packed(records_dir, kind, groups, schema, split, dictionary, refresh)
    rest = [u for (_, g), r in zip(groups, got, strict=True) if r is None for u in g]
    if not rest:
        unit_rows = iter(())
    elif rest[0].path.is_local:
        # a few units per task: a thread hand-over costs about what reading a small unit does
        size = max(1, min(_UNITS_PER_TASK, len(rest) // (4 * _WORKERS)))  # (still a few tasks per thread)
        runs = [rest[i : i + size] for i in range(0, len(rest), size)]
        with ThreadPoolExecutor(_WORKERS) as pool:
            done = pool.map(lambda run: [_unit_rows(u, kind, schema, split, dictionary) for u in run], runs)
            unit_rows = iter([rows for run in done for rows in run])
    else:
        fetched = _fetch(rest, kind)
        unit_rows = iter([_unit_rows(u, kind, schema, split, dictionary, t) for u, t in zip(rest, fetched, strict=True)])
    rows = []  # per trajectory, its rows per split
    for (_, g), r in zip(groups, got, strict=True):
        if r is None:
            r = {}
            for one in (next(unit_rows) for _ in g):
                for s, ts in one.items():
                    r.setdefault(s, []).extend(ts)
        rows.append(r)
    wanted = sorted(SPLITS) if split is None else [split]
    out = [t for s in wanted for r in rows for t in r.get(s, ())]
    return (pa.concat_tables(out) if out else schema.empty_table()).select(names)


_WORKERS = max(1, min(4, os.cpu_count() or 1))
_UNITS_PER_TASK = 16


def _packed(records_dir, kind, groups, schema, split, dictionary, refresh) -> list[dict | None]:
    """Per trajectory group, its rows per split from its current pack (``refresh``: a missing
    or stale pack rewritten first), ``None`` where there is none."""

    def one(g):
        rows = _from_pack(records_dir, kind, g[0], g[1], schema, split, dictionary)
        if rows is None and refresh and refresh_pack(records_dir, kind, g[0], g[1], force=True):
            rows = _from_pack(records_dir, kind, g[0], g[1], schema, split, dictionary)
        return rows

    return map_threads(one, groups, _WORKERS)  # (the callers' one listing seen in each)


def _from_pack(
    records_dir: Location, kind: str, traj: str, group: list[UnitFile], schema: pa.Schema, split: str | None, dictionary: list[str]
) -> dict[str, list[pa.Table]] | None:
    """``traj``'s rows per split from its pack, when the pack is current (built from exactly
    ``group``, the trajectory's units as listed now) and readable; else ``None`` (the units
    are read instead: a pack is never a source of truth)."""
    path = cache.pack_path(records_dir, kind, traj)
    try:
        data = path.read_bytes()  # whole: its rows are checked against its keyed footer
        with pq.ParquetFile(pa.BufferReader(data), read_dictionary=dictionary, page_checksum_verification=True, pre_buffer=False) as f:
            blob = cache.current(f.schema_arrow.metadata, group)
            if blob is None or not cache.rows_hold(data, f, blob):
                return None
            out: dict[str, list[pa.Table]] = {}
            column = _split_leaf(f, f.schema_arrow.names)  # (no split column: ValueError, no pack)
            for g in range(f.metadata.num_row_groups):
                s = _split_of_group(f, g, column)
                if s is None:
                    return None
                if split is None or s == split:
                    t = f.read_row_group(g, columns=schema.names, use_threads=False)
                    out.setdefault(s, []).append(_conform(t, group[0], kind, schema))
            return out
    except cache.PACK_ERRORS:
        return None


def _unit_whole(u: UnitFile, kind: str, schema: pa.Schema, fetched: bytes | None = None):
    """One unit's rows per split (every column of ``schema``) and its ``ckptsel.*`` metadata
    (``fetched``: its bytes, from an object store)."""
    if fetched is not None:
        table = table_from_bytes(fetched, u.path)
        meta = table.schema.metadata
        parts = _unit_rows(u, kind, schema, None, [], table)
    else:
        meta = read_schema(u.path).metadata
        parts = _unit_rows(u, kind, schema, None, [])
    return {s: pa.concat_tables(ts) for s, ts in parts.items()}, cache.unit_metadata(meta)


def _pack_parts(old: pa.Table, step_rows: dict[int, dict[str, pa.Table]], reuse: set[int]) -> None:
    """Add to ``step_rows`` the rows of the ``reuse`` steps from an old pack (rows in split,
    then step order: each step's rows of a split are one slice)."""
    split = old.column("split").to_numpy(zero_copy_only=False)
    code = pc.index_in(old.column("split"), value_set=pa.array(sorted(SPLITS))).to_numpy(zero_copy_only=False)
    step = old.column("step").to_numpy()
    key = code.astype(np.int64) * (int(step.max(initial=0)) + 1) + step
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(key)]
    for a, b in zip(starts, ends, strict=True):
        st = int(step[a])
        if st in reuse:
            step_rows.setdefault(st, {})[str(split[a])] = old.slice(a, b - a)


def _old_pack(path: Location, units: list[UnitFile], kind: str, schema: pa.Schema):
    """From the old pack at ``path``: the rows and metadata of the units whose version (or
    contents) it records (``({}, {})`` without a readable one)."""
    step_rows: dict[int, dict[str, pa.Table]] = {}
    metas: dict[int, dict[bytes, bytes]] = {}
    try:
        data = path.read_bytes()
        old = table_from_bytes(data, path)
        recorded = cache.trusted(old.schema.metadata)  # an edited pack's rows are never carried on
        if recorded is None or not cache.rows_hold(data, pq.ParquetFile(pa.BufferReader(data)), recorded):
            return {}, {}
        reuse = cache.same_units(recorded, units)  # the same version, or a copy of the same bytes
        per_step = recorded.get("metadata") or {}
        _pack_parts(_conform(old.replace_schema_metadata(None), units[0], kind, schema), step_rows, reuse)
        for st in reuse:
            metas[st] = {k.encode(): v.encode("utf-8") for k, v in per_step.get(str(st), {}).items()}
            step_rows.setdefault(st, {})
    except cache.PACK_ERRORS:
        return {}, {}
    return step_rows, metas


def refresh_pack(
    records_dir: Path | Location | str, kind: str, trajectory: str, units: list[UnitFile] | None = None, force: bool = False
) -> bool:
    """(Re)write ``trajectory``'s pack of ``kind`` from its units (``units``: its listing, when
    the caller has it): rows of units whose version the old pack records are taken from it,
    the others read from their files; a pack already listing exactly these units is left as it
    is unless ``force`` (a reader that could not read it). ``False`` when no pack could be
    written (no units, a unit unreadable, records that cannot be written): readers then read
    the units."""
    records_dir = as_location(records_dir)
    path = cache.pack_path(records_dir, kind, trajectory)
    units = list_units(records_dir, kind, trajectory) if units is None else units
    if not units:
        cache.remove_pack(path)
        return False
    try:  # a pack that lists exactly these units is left as it is (same bytes, same version)
        if not force and cache.current(read_schema(path).metadata, units) is not None:
            return True
    except cache.PACK_ERRORS:
        pass
    schema = arrow_schema(kind)
    step_rows, metas = _old_pack(path, units, kind, schema)
    rest = [u for u in units if u.step not in metas]
    try:
        if rest and not rest[0].path.is_local:
            blobs = rest[0].path.fs.cat([u.path.fs_path for u in rest])
            read = [_unit_whole(u, kind, schema, blobs[u.path.fs_path]) for u in rest]
        else:
            with ThreadPoolExecutor(_WORKERS) as pool:
                read = list(pool.map(lambda u: _unit_whole(u, kind, schema), rest))
    except (CkptselError, OSError):  # a unit unreadable (or gone): readers read the units
        return False
    for u, (parts, meta) in zip(rest, read, strict=True):
        step_rows[u.step], metas[u.step] = parts, meta
    parts = {}
    for s in SPLITS:
        pieces = [step_rows[u.step][s] for u in units if s in step_rows[u.step]]
        if pieces:
            parts[s] = pa.concat_tables(pieces)
    meta = cache.pack_metadata(units, [metas[u.step] for u in units], cache.prove(kind, parts))
    return cache.write_pack(path, cache.pack_bytes(parts, meta, schema))


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
        [single.column("trajectory").cast(pa.string()).to_numpy(zero_copy_only=False), single.column("step").to_numpy()]
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

    A single file alone is read exactly as before (one ``pq.read_table``). With units, each
    trajectory is read from its pack when current, else from its units (see the module
    docstring); single-file rows of a (trajectory, step) that has a unit are dropped (the unit
    supersedes them). A filter on ``trajectory`` (``measure``'s checks of the trajectory it
    records) reads just those trajectories.
    """
    records_dir = as_location(records_dir)
    single = single_file(records_dir, kind)
    units = list_units(records_dir, kind)
    if single is None and not units:
        return None
    wanted = _trajectories_of(filters)
    has_units = bool(units)  # (even when none is of the wanted trajectories: one row order)
    if units and wanted is not None:
        units = [u for u in units if u.trajectory in wanted]
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
    if has_units:
        # memo.uncached (verify): the units themselves; while the memo computes what it will
        # store, stale packs are not rewritten (the stored arrays make them redundant there)
        split = _split_of(filters)
        t = _scan(
            units,
            kind,
            columns=need,
            split=split,
            dictionary=read_dictionary,
            records_dir=None if cache.bypassed() else records_dir,
            refresh=not cache.filling(),
        )
        # _scan kept only the split asked for (and the trajectories were picked from the
        # listing): filtering millions of rows again would copy them all for nothing
        rest = [f for f in filters or [] if f[0] not in ("trajectory", "split" if split else "")]
        tables.append(_project(t, need, rest, read_dictionary))
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
            target = _plain(f.type)
            try:
                cols.append(_as_type(t.column(f.name), target))
            except (pa.ArrowException, ValueError) as err:
                raise CkptselError(
                    f"{records_dir / SINGLE_FILES.get(kind, kind)}: column {f.name!r} has type "
                    f"{target}, but the units have {_plain(t.column(f.name).type)}"
                ) from err
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
