"""The one checked Parquet read and write of records files.

Every Parquet file ckptsel writes carries page CRCs (:data:`ckptsel._util.io.PARQUET_OPTIONS`)
and every read verifies them, so a damaged file is one clear error naming it, never silently
wrong numbers. Row layout: rows in :data:`~ckptsel.records.schema.RECORDS_ORDER`, row groups of
:data:`~ckptsel.records.schema.RECORDS_ROW_GROUP` rows; a unit file has one row group per
split, so a reader that asks for one split skips the other's pages. Files at URLs are read
with one GET and parsed in memory (:func:`read_table`), through the same checks.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ckptsel._util.io import PARQUET_OPTIONS
from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.schema import RECORDS_ROW_GROUP, SPLITS

# pyarrow raises several types for a damaged or foreign file
_READ_ERRORS = (OSError, pa.ArrowException, ValueError, TypeError)


def read_table(path: Path | Location | str, **kwargs) -> pa.Table:
    """``pq.read_table`` with page checksums verified; a damaged or unreadable file is one
    :class:`CkptselError` naming it. ``kwargs`` go to ``pq.read_table`` (columns, filters, …).
    A file at a URL is fetched whole (one GET) and read from memory."""
    loc = as_location(path)
    try:
        source = loc.local if loc.is_local else pa.BufferReader(loc.read_bytes())
        return pq.read_table(source, page_checksum_verification=True, **kwargs)
    except _READ_ERRORS as err:
        raise CkptselError(f"{loc}: not a readable Parquet file ({err})") from err


def table_from_bytes(data: bytes, where: Location, **kwargs) -> pa.Table:
    """:func:`read_table` of bytes already fetched from ``where`` (named in errors)."""
    try:
        return pq.read_table(pa.BufferReader(data), page_checksum_verification=True, **kwargs)
    except _READ_ERRORS as err:
        raise CkptselError(f"{where}: not a readable Parquet file ({err})") from err


def read_schema(path: Path | Location | str) -> pa.Schema:
    """The Arrow schema of a Parquet file (its footer only: ranged reads at a URL), or one
    clear error."""
    loc = as_location(path)
    try:
        if loc.is_local:
            return pq.read_schema(loc.local)
        return pq.read_schema(loc.fs_path, filesystem=loc.fs)
    except _READ_ERRORS as err:
        raise CkptselError(f"{loc}: not a readable Parquet file ({err})") from err


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as Parquet bytes in the records layout (row groups, page checksums)."""
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, row_group_size=RECORDS_ROW_GROUP, **PARQUET_OPTIONS)
    return buf.getvalue().to_pybytes()


def unit_bytes(table: pa.Table) -> bytes:
    """A unit's Parquet bytes: one row group per split (rows already in the records order)."""
    buf = pa.BufferOutputStream()
    with pq.ParquetWriter(buf, table.schema, **PARQUET_OPTIONS) as writer:
        split = table.column("split")
        for s in SPLITS:
            part = table.filter(pc.equal(split, s))
            if part.num_rows:
                writer.write_table(part, row_group_size=RECORDS_ROW_GROUP)
        if table.num_rows == 0:
            writer.write_table(table)
    return buf.getvalue().to_pybytes()
