"""Per-trajectory *packs*: one derived Parquet file per trajectory and kind holding all its units.

Reading thousands of small unit files is slow: pyarrow pays about 1-2 ms of CPU per file and
column chunk whatever its size (at paper scale, 3,126 units read twice: most of the first
``analyze``). The one writer (:mod:`ckptsel.records.store`) therefore keeps, beside the units
of each trajectory, its *pack*::

    units/.packs/<kind>/<trajectory>.parquet    (kind: generations or nll)

holding every row of the trajectory's units of that kind, in the order reading the units one
by one gives (split, then step, then each unit's own order), one row group per split, and in
its key-value metadata (:data:`PACK_KEY`, JSON) the exact *versions* of the units it was
built from (step, size and tag, as :func:`ckptsel.records.units.list_units` sees them:
modification time in ns and inode locally, ETag on an object store) and each unit's ``ckptsel.*``
metadata (provenance, checkpoint stamp), so that provenance and stamps come from one footer
per trajectory too.

A pack may also carry a *proof* (:func:`prove`): what the reader's own checks
(:func:`ckptsel.records.checks.prove_test_nll`) found of its rows when the writer built it
(the test NLL rows, which analysis checks but never uses as values: their checkpoints and a
digest of their items, when every row-level check passed), so that a first analysis checks
them against the generations without reading them. A proof is trusted on the same terms as the
pack (it lists the units' current versions) and only from the same checking code (the prover's
digest); anything else reads the rows.
(Dropping them roughly doubles the CPU time of the first ``load_test`` of packed records:
BENCHMARKS.md, "records' caches behind one seam".)

**Contents, not only versions.** A pack also records each unit's SHA-256
(``digests``, one per unit, in the order of ``units``; ``None`` for a unit on an object store,
whose ETag already follows its contents). A unit whose version differs from the recorded one
but whose size and bytes are the same (a folder copied with ``cp -r``: every unit a new file,
with a new modification time and inode) is the same unit: the pack still serves it. A unit's
digest is computed once per version in a process (:func:`unit_digest`).

A pack is a derived cache, never a source of truth: a reader uses it only when its versions
(or its units' contents) equal the trajectory's current listing, else reads that trajectory's units (a unit replaced,
added or removed after the pack, a writer killed between its unit and the pack, a damaged or
missing pack: all read the units, never a stale number); deleting ``.packs`` changes nothing
but speed. Packs are written atomically (one rename locally, one PUT on an object store).

**Keyed.** The footer's blob carries ``rows``, a SHA-256 of the file's bytes before its footer
(every data page) and of its layout (each column chunk's place, size, type and encoding, the
Arrow schema), and ``mac``, an HMAC-SHA256 of the whole blob under the user's secret key
(:mod:`ckptsel._util.keys`, kept outside the records folder). A footer is trusted only when
its HMAC holds, rows only when their digest is the footer's too: a pack edited by hand (its
``correct`` column flipped, its footer kept or its digests recomputed) is not read. A records
folder is often copied to another machine or user: a pack keyed by another user's key is
simply not trusted there, and that trajectory is read from its units (the same numbers,
slower; the writer's next refresh there keys it anew).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator
from itertools import groupby
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ckptsel._util import io
from ckptsel._util.io import PARQUET_OPTIONS
from ckptsel._util.keys import mac, mac_holds
from ckptsel._util.locations import Location, as_location
from ckptsel._util.threads import map_threads
from ckptsel.errors import CkptselError
from ckptsel.records.cache.memo import code_digest
from ckptsel.records.checks import prove_test_nll
from ckptsel.records.codec import read_schema
from ckptsel.records.schema import SPLITS
from ckptsel.records.units import UNITS_DIR, UnitFile, forget_derived, once_per_listing

PACKS_DIR = ".packs"
PACK_KEY = b"ckptsel.pack"
PACKED_KINDS = ("generations", "nll")  # what analysis reads (texts never are)
META_PREFIX = b"ckptsel."  # the unit metadata a pack carries (provenance, checkpoint stamp)
# a damaged, foreign or vanished pack: read as no pack
PACK_ERRORS = (OSError, pa.ArrowException, ValueError, TypeError, KeyError, CkptselError)
FOOTER_THREADS = 8  # footers on an object store are small GETs: a few at a time


def footer_threads(records_dir: Location) -> int:
    """Threads reading footers: one for local files (each footer is read and parsed in less
    time than threads take to hand it over, with the GIL between them), else
    :data:`FOOTER_THREADS`."""
    return 1 if records_dir.is_local else FOOTER_THREADS


def pack_path(records_dir: Path | Location | str, kind: str, trajectory: str) -> Location:
    """Where ``trajectory``'s pack of ``kind`` lives."""
    return as_location(records_dir) / UNITS_DIR / PACKS_DIR / kind / f"{trajectory}.parquet"


def versions(units: Iterable[UnitFile]) -> list[list]:
    """The versions a pack records and is checked against: ``[[step, size, tag], ...]``."""
    return [[int(u.step), int(u.size), str(u.tag)] for u in units]


def unit_digest(u: UnitFile) -> str | None:
    """SHA-256 of a local unit's bytes (``None`` on an object store, or when it cannot be read)."""
    where = u.where if isinstance(u.where, str) else (str(u.where.local) if u.where.is_local else None)
    return None if where is None else _file_digest(where, int(u.size), str(u.tag))


@functools.lru_cache(maxsize=1 << 15)
def _file_digest(where: str, _size: int, _tag: str) -> str | None:
    """The digest of the file at ``where`` in the version ``(_size, _tag)`` (the cache's key:
    a rewritten file is a new version, hashed anew)."""
    try:
        with open(where, "rb") as f:
            return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def digests(units: Iterable[UnitFile]) -> list[str | None]:
    """The contents a pack records beside the versions (:func:`unit_digest` of each unit)."""
    return [unit_digest(u) for u in units]


def same_units(blob: dict, units: list[UnitFile]) -> set[int]:
    """The steps of ``units`` that a pack's metadata ``blob`` records as they are now: the same
    version, or the same size and bytes (a copy of the unit)."""
    have = blob.get("units")
    if not isinstance(have, list):
        return set()
    recorded = blob.get("digests")
    recorded = recorded if isinstance(recorded, list) and len(recorded) == len(have) else [None] * len(have)
    by_step = {}
    for v, d in zip(have, recorded, strict=True):
        if isinstance(v, list) and len(v) == 3:
            by_step[v[0]] = (v, d)
    out = set()
    for u, now in zip(units, versions(units), strict=True):
        v, d = by_step.get(now[0], (None, None))
        if v == now or (v is not None and d is not None and v[1] == now[1] and unit_digest(u) == d):
            out.add(u.step)
    return out


def by_trajectory(units: list[UnitFile]) -> Iterator[tuple[str, list[UnitFile]]]:
    """``units`` (sorted by trajectory, as listed) grouped per trajectory."""
    for traj, group in groupby(units, key=lambda u: u.trajectory):
        yield traj, list(group)


def unit_metadata(meta: dict[bytes, bytes] | None) -> dict[bytes, bytes]:
    """The part of a unit's key-value metadata a pack carries (``ckptsel.*`` keys)."""
    return {k: v for k, v in (meta or {}).items() if k.startswith(META_PREFIX) and k != PACK_KEY}


def pack_metadata(units: list[UnitFile], metas: list[dict[bytes, bytes]], proof: dict | None = None) -> dict[bytes, bytes]:
    """A pack's key-value metadata: the units' versions and contents (:func:`digests`), their
    ``ckptsel.*`` metadata and what its rows prove (:data:`PROVERS`)."""
    blob = {
        "units": versions(units),
        "digests": digests(units),
        "metadata": {
            str(u.step): {k.decode(): v.decode("utf-8", "replace") for k, v in unit_metadata(m).items()}
            for u, m in zip(units, metas, strict=True)
        },
    }
    if proof is not None:
        blob["proof"] = proof
    return {PACK_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")}


def _signed(blob: dict) -> bytes:
    """What a pack's HMAC covers: its blob but the HMAC, as canonical JSON."""
    return json.dumps({k: v for k, v in blob.items() if k != "mac"}, sort_keys=True, separators=(",", ":")).encode("utf-8")


def trusted(meta: dict[bytes, bytes] | None) -> dict | None:
    """The pack's parsed metadata when its HMAC holds under the user's key (see the module
    doc: not for an edited footer, nor one keyed by another user), else ``None``."""
    try:
        blob = json.loads((meta or {})[PACK_KEY])
        return blob if isinstance(blob, dict) and mac_holds(blob.get("mac"), _signed(blob)) else None
    except (KeyError, ValueError, TypeError, AttributeError):
        return None


def current(meta: dict[bytes, bytes] | None, units: list[UnitFile]) -> dict | None:
    """The pack's parsed metadata when it is :func:`trusted` and was built from exactly
    ``units`` (the trajectory's current listing: the same versions, or units of the same size
    and bytes, :func:`same_units`), else ``None``."""
    blob = trusted(meta)
    if blob is None:
        return None
    have = blob.get("units")
    if have == versions(units):
        return blob
    if not isinstance(have, list) or len(have) != len(units):
        return None
    return blob if len(same_units(blob, units)) == len(units) else None


def rows_digest(data: bytes, f: pq.ParquetFile) -> str:
    """SHA-256 of a pack's bytes before its footer and of its layout as ``f`` (the file read
    from ``data``) reads it: what the rows are, whatever the footer around them says."""
    footer_len = int.from_bytes(data[-8:-4], "little")
    h = hashlib.sha256(memoryview(data)[: len(data) - 8 - footer_len])
    md = f.metadata
    columns = [md.schema.column(i) for i in range(len(md.schema))]
    layout: list = [_stored_arrow_schema(md), md.num_rows] + [
        [
            c.path,
            c.physical_type,
            str(c.logical_type),
            c.converted_type,
            c.max_definition_level,
            c.max_repetition_level,
            c.length,
            c.precision,
            c.scale,
        ]
        for c in columns
    ]
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        layout.append(rg.num_rows)
        for c in (rg.column(j) for j in range(rg.num_columns)):
            layout.append(
                [
                    c.path_in_schema,
                    c.physical_type,
                    c.compression,
                    list(c.encodings),
                    c.data_page_offset,
                    c.dictionary_page_offset,
                    c.total_compressed_size,
                    c.total_uncompressed_size,
                    c.num_values,
                ]
            )
    h.update(json.dumps(layout, default=str).encode("utf-8"))
    return "sha256:" + h.hexdigest()


def _stored_arrow_schema(md: pq.FileMetaData) -> str:
    """The Arrow schema a Parquet file stores (less its metadata, which holds the blob), as
    text: what the reader's types come from, whatever its read options."""
    raw = (md.metadata or {}).get(b"ARROW:schema")
    if raw is None:
        return ""
    return str(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(raw))).remove_metadata())


def rows_hold(data: bytes, f: pq.ParquetFile, blob: dict) -> bool:
    """Whether the rows of the pack ``data`` (read as ``f``) are those its trusted footer
    ``blob`` names (:func:`rows_digest`)."""
    return blob.get("rows") == rows_digest(data, f)


def prove(kind: str, parts: dict[str, pa.Table]) -> dict | None:
    """What ``parts`` (a pack's rows per split) prove under the records' checks (an NLL pack:
    its test rows, :func:`~ckptsel.records.checks.prove_test_nll`), stamped with the checking
    code's digest (another version's proof is not used); ``None`` for other kinds."""
    if kind != "nll":
        return None
    try:
        proof = prove_test_nll(parts)
    except Exception:  # noqa: BLE001 - a proof is optional: a check that fails gives none
        return None
    return {"code": code_digest(), **proof} if proof else proof


def proofs(records_dir: Path | Location | str, kind: str, units: list[UnitFile]) -> dict[str, dict | None]:
    """Each trajectory of ``units`` (the kind's listing) with its proof from its pack's footer,
    ``None`` where it has no current pack with one (the reader reads that trajectory's rows)."""
    records_dir = as_location(records_dir)
    groups = list(by_trajectory(units))

    def one(group):
        try:
            blob = current(footer(records_dir, kind, group[0]), group[1])
        except PACK_ERRORS:
            return None
        proof = None if blob is None else blob.get("proof")
        return proof if isinstance(proof, dict) else None

    found = map_threads(one, groups, footer_threads(records_dir))
    return {traj: p for (traj, _), p in zip(groups, found, strict=True)}


def pack_bytes(parts: dict[str, pa.Table], metadata: dict[bytes, bytes], schema: pa.Schema) -> bytes:
    """A pack's Parquet bytes: one row group per split present (page checksums on), its
    footer's blob keyed (the module doc: ``rows`` and ``mac``). Written twice: the first
    file's pages and layout are the second's (only the footer differs), so its digest holds."""
    raw = _parquet(parts, metadata, schema)
    if PACK_KEY not in metadata:
        return raw
    blob = json.loads(metadata[PACK_KEY])
    blob["rows"] = rows_digest(raw, pq.ParquetFile(pa.BufferReader(raw)))
    blob["mac"] = mac(_signed(blob))
    keyed = {**metadata, PACK_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")}
    return _parquet(parts, keyed, schema)


def _parquet(parts: dict[str, pa.Table], metadata: dict[bytes, bytes], schema: pa.Schema) -> bytes:
    schema = schema.with_metadata(metadata)
    buf = pa.BufferOutputStream()
    with pq.ParquetWriter(buf, schema, **PARQUET_OPTIONS) as writer:
        for s in SPLITS:
            part = parts.get(s)
            if part is not None and part.num_rows:
                writer.write_table(part.cast(schema), row_group_size=part.num_rows)
    return buf.getvalue().to_pybytes()


def write_pack(path: Location, data: bytes) -> bool:
    """Write a pack atomically; ``False`` when the records cannot be written (read-only)."""
    try:
        io.write_bytes(path, data)
    except (CkptselError, OSError):
        return False
    forget_derived(_footer_key(path))  # a footer read earlier in this analysis is the old one's
    return True


def remove_pack(path: Location) -> None:
    """Remove a pack that no longer has units (a missing one is fine)."""
    try:
        path.unlink(missing_ok=True)
    except (CkptselError, OSError):
        pass


def footer(records_dir: Location, kind: str, traj: str) -> dict[bytes, bytes] | None:
    """The key-value metadata of ``traj``'s pack, read once per :func:`one_listing
    <ckptsel.records.units.one_listing>` block (provenance and proofs both read it)."""
    path = pack_path(records_dir, kind, traj)
    return once_per_listing(_footer_key(path), lambda: read_schema(path).metadata)


def _footer_key(path: Location) -> tuple:
    return ("pack footer", str(path))


def _pack_metas(records_dir: Location, kind: str, traj: str, group: list[UnitFile]):
    """The units' ``ckptsel.*`` metadata from the trajectory's pack (one footer), or ``None``
    when it has no current pack."""
    try:
        blob = current(footer(records_dir, kind, traj), group)
    except PACK_ERRORS:
        return None
    if blob is None:
        return None
    per_step = blob.get("metadata") or {}
    return [{k.encode(): v.encode("utf-8") for k, v in per_step.get(str(u.step), {}).items()} for u in group]


def _own_metadata(u: UnitFile) -> dict[bytes, bytes]:
    """A unit's ``ckptsel.*`` metadata from its own footer, read once per :func:`one_listing
    <ckptsel.records.units.one_listing>` block (provenance and checkpoint stamps both ask)."""
    key = ("unit metadata", str(u.where), u.size, u.tag)
    return once_per_listing(key, lambda: unit_metadata(read_schema(u.path).metadata))


def units_metadata(records_dir: Path | Location | str, kind: str, units: list[UnitFile]) -> list[dict[bytes, bytes]]:
    """Each unit's ``ckptsel.*`` key-value metadata (provenance, checkpoint stamp), in the
    order of ``units``: from each trajectory's pack when it is current (one footer per
    trajectory), else from the units' own footers (:func:`footer_threads`)."""
    records_dir = as_location(records_dir)
    groups = list(by_trajectory(units))
    packed = map_threads(lambda g: _pack_metas(records_dir, kind, *g), groups, footer_threads(records_dir))
    rest = [u for (_, g), m in zip(groups, packed, strict=True) if m is None for u in g]
    footers = iter(map_threads(_own_metadata, rest, footer_threads(records_dir)))
    out: list[dict[bytes, bytes]] = []
    for (_, g), m in zip(groups, packed, strict=True):
        out.extend(m if m is not None else (next(footers) for _ in g))
    return out
