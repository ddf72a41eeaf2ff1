"""A derived cache of what loading computes from a records folder (safe to delete).

Turning millions of record rows into per-trajectory arrays — reading them, coding their
strings, checking the contract, placing them on (checkpoint × item) grids — is most of what a
paper-scale ``analyze`` used to spend (about 7 s of 13 s on 2 cores), and it gives the same
arrays every time the records are the same. :func:`cached` keeps those arrays in
``<records>/.cache/<name>.arrays``, keyed by everything the result depends on:

* every records file the loaders read — the single files and every unit of generations and
  NLL, by name, size and version (modification time in ns; as the packs of
  :mod:`ckptsel.records.cache.pack` are checked);
* the declared final steps (``final_steps.json`` beside or above the records), by content;
* the loaders' own source code (a changed loader never reads an older loader's arrays).

A hit returns what the computation returned then, arrays and all; a miss computes, and
stores the result when the records did not change meanwhile (the key is taken before and
after). Errors are never cached: bad records raise every time. Records at a URL, or a
folder that cannot be written, are simply computed each time. The cache is never a source
of truth: deleting ``.cache`` only costs the next load its time.

The cache is keyed by names, sizes and modification times, and each file carries an
HMAC-SHA256 of its header and arrays under the user's secret key (:mod:`ckptsel._util.keys`,
kept outside the records folder): a file edited by hand, or written by another user (a records
folder copied from elsewhere), does not hold and is computed again, which gives the same
arrays, only slower. ``verify`` still loads inside :func:`uncached`, which computes from the
records themselves, bypassing both this cache and the units' packs
(:mod:`ckptsel.records.cache.pack`), and never writes either: whoever holds the key could still
write a cache that holds.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

import numpy as np

from ckptsel._util import io as atomic
from ckptsel._util.keys import mac, mac_holds, user_key
from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.schema import FINAL_STEPS_FILE
from ckptsel.records.units import SINGLE_FILES, list_units, single_file

MEMO_DIR = ".cache"  # inside the records folder (hidden: not records, never hashed as such)
FORMAT = 4  # bump when what is stored changes shape (4: an HMAC, not a CRC32)

T = TypeVar("T")
Arrays = Mapping[str, np.ndarray]

_BYPASS: contextvars.ContextVar[bool] = contextvars.ContextVar("ckptsel_records_uncached", default=False)
_FILLING: contextvars.ContextVar[bool] = contextvars.ContextVar("ckptsel_records_filling", default=False)


@contextlib.contextmanager
def uncached() -> Iterator[None]:
    """Inside this block every load computes from the records files themselves: neither this
    module's array cache nor the units' packs are read or written (``verify``: a cache it
    cannot authenticate is never a source of what it checks)."""
    token = _BYPASS.set(True)
    try:
        yield
    finally:
        _BYPASS.reset(token)


def bypassed() -> bool:
    """True inside :func:`uncached`."""
    return _BYPASS.get()


def filling() -> bool:
    """True while :func:`cached` computes a result it will store (records read then need
    no other cache: see :func:`ckptsel.records.scan.read_rows`)."""
    return _FILLING.get()


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of the modules whose code decides the loaded arrays."""
    here = Path(__file__).parent  # records/cache
    h = hashlib.sha256()
    for module in ("checks", "codec", "load", "provenance", "scan", "schema", "units", "weights"):
        h.update((here.parent / f"{module}.py").read_bytes())
    for module in ("__init__", "arrays", "memo", "pack"):
        h.update((here / f"{module}.py").read_bytes())
    return h.hexdigest()


def source_key(records_dir: Location, name: str) -> str:
    """What ``name``'s arrays depend on, as one SHA-256 (see the module docstring)."""
    files = {}
    for kind in SINGLE_FILES:
        single = single_file(records_dir, kind)
        info = single.info() if single is not None else None
        files[kind] = {
            "single": None if info is None else [info.size, info.tag],
            "units": [[u.trajectory, u.step, u.size, u.tag] for u in list_units(records_dir, kind)],
        }
    declared = []
    for candidate in (records_dir / FINAL_STEPS_FILE, records_dir.parent / FINAL_STEPS_FILE):
        declared.append(candidate.read_bytes().hex() if candidate.is_file() else None)
    blob = json.dumps([FORMAT, name, code_digest(), files, declared])
    return hashlib.sha256(blob.encode()).hexdigest()


_MAGIC = b"CKPTSEL-MEMO\n"


def _read(path: Path, key: str) -> dict[str, np.ndarray] | None:
    """The stored arrays when ``path`` holds them under ``key``, else None (missing, stale or
    damaged: all mean "compute"). One read into one writable buffer; the arrays are views."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = bytearray(size)
            if f.readinto(buf) != size or not buf.startswith(_MAGIC):
                return None
        head_len = int.from_bytes(buf[len(_MAGIC) : len(_MAGIC) + 8], "little")
        start = len(_MAGIC) + 8 + head_len
        head = json.loads(bytes(buf[len(_MAGIC) + 8 : start]))
        if head["key"] != key or head["size"] != size - start:
            return None
        data = memoryview(buf)[start:]
        if not mac_holds(head.get("mac"), *_signed(head, data)):
            return None  # edited, damaged, or written under another user's key
        return {
            name: _widen(_view(data, np.dtype(stored), shape, offset, fortran), dtype)
            for name, (stored, shape, offset, dtype, fortran) in head["arrays"].items()
        }
    except (OSError, KeyError, ValueError, TypeError):
        return None


def _signed(head: dict, payload) -> tuple:
    """What a file's HMAC covers: its header (but the HMAC) as canonical JSON, then its arrays."""
    blob = json.dumps({k: v for k, v in head.items() if k != "mac"}, sort_keys=True)
    return blob.encode() + b"\0", payload


def _narrowest(array: np.ndarray) -> np.ndarray:
    """Integers in the smallest signed type that holds them (answer codes, token counts:
    int64 in memory, mostly small), contiguous; anything else as it is."""
    if array.dtype.kind in "iu" and array.size:
        lo, hi = int(array.min()), int(array.max())
        for t in (np.int8, np.int16, np.int32):
            if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
                return np.ascontiguousarray(array, dtype=t)
    return np.ascontiguousarray(array)


def _view(data: memoryview, stored: np.dtype, shape: list[int], offset: int, fortran: bool) -> np.ndarray:
    """A stored array as a view of ``data``, in its own memory order (C, or F when ``fortran``)."""
    flat = np.frombuffer(data, stored, int(np.prod(shape)), offset)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def _widen(array: np.ndarray, dtype: str) -> np.ndarray:
    """A stored array back in its own dtype and memory order (a writable copy when narrowed,
    else a view)."""
    return array if array.dtype.str == dtype else array.astype(np.dtype(dtype), order="K")


def _write(path: Path, key: str, arrays: Arrays) -> None:
    """``arrays`` after a JSON header naming each one's stored and own dtype, shape, offset and
    memory order (F-ordered matrices are stored transposed, so they come back F-ordered)."""
    parts, index, offset = [], {}, 0
    for name, array in arrays.items():
        array = np.asarray(array)
        if array.dtype.hasobject:
            raise TypeError(f"{name}: object arrays are not stored")
        # the memory order is kept: numpy sums a row of an F-ordered matrix in another order
        # than a row of a C-ordered one (last bits), so a cached array must be laid out as computed
        fortran = bool(array.ndim > 1 and array.flags.f_contiguous and not array.flags.c_contiguous)
        stored = _narrowest(array.T if fortran else array)
        pad = -offset % 64  # aligned views
        parts.append(b"\0" * pad)
        offset += pad
        index[name] = [stored.dtype.str, list(array.shape), offset, array.dtype.str, fortran]
        parts.append(stored.tobytes())
        offset += stored.nbytes
    payload = b"".join(parts)
    head = {"key": key, "size": len(payload), "arrays": index}
    head = json.dumps({**head, "mac": mac(*_signed(head, payload))}).encode()
    try:
        atomic.write_bytes(path, _MAGIC + len(head).to_bytes(8, "little") + head + payload)
    except CkptselError:  # a read-only records folder: the next load computes again
        pass


def cached(
    records_dir: Path | Location | str, name: str, compute: Callable[[], T], encode: Callable[[T], Arrays], decode: Callable[[Arrays], T]
) -> T:
    """``compute()`` for the records in ``records_dir``, or what it gave last time for the same
    records (stored as ``encode(result)``, given back as ``decode(arrays)``)."""
    records_dir = as_location(records_dir)
    if bypassed():
        return compute()
    user_key()  # a key file that is not one is said now, in one line (the packs need it too)
    if not records_dir.is_local:
        return compute()
    path = records_dir.local / MEMO_DIR / f"{name}.arrays"
    key = source_key(records_dir, name)
    stored = _read(path, key)
    if stored is not None:
        return decode(stored)
    token = _FILLING.set(True)
    try:
        result = compute()
    finally:
        _FILLING.reset(token)
    if source_key(records_dir, name) == key:  # records unchanged while computing
        _write(path, key, encode(result))
    return result


def json_array(value) -> np.ndarray:
    """A JSON-able value as a ``uint8`` array (for metadata stored beside arrays)."""
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def array_json(array: np.ndarray):
    """Inverse of :func:`json_array`."""
    return json.loads(bytes(array).decode())
