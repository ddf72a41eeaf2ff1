"""Atomic file writes: write a temp file in the same folder, then rename.

A killed job therefore leaves either the old file or the new one, never half of one. The file
gets the mode ``open`` would give it (``0o666`` less the umask), not ``mkstemp``'s 0600. Every
writer also takes a URL (:mod:`ckptsel._util.locations`): on an object store the file is one
PUT of bytes serialized in memory, which readers likewise see whole or not at all.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ckptsel._util.locations import Location, as_location, temp_file
from ckptsel.errors import CkptselError


def _atomic(path: Path, write) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = temp_file(path.parent, prefix=f".{path.name}.")  # the umask's mode
    except OSError as err:  # read-only folder, a file where a folder should be, ...
        raise CkptselError(f"{path}: cannot write here ({err.strerror or err})") from err
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise CkptselError(f"{path}: cannot write ({err.strerror or err})") from err
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path | Location | str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path | Location | str, data: bytes) -> None:
    loc = as_location(path)
    if loc.is_local:
        _atomic(loc.local, lambda p: p.write_bytes(data))
    else:
        loc.write_bytes(data)


# every Parquet file ckptsel writes carries page CRCs, verified on read
# (``ckptsel.records.read_table``), so a damaged file is an error, not silently wrong numbers
PARQUET_OPTIONS = {"write_page_checksum": True}


def write_parquet(path: Path | Location | str, df: pd.DataFrame) -> None:
    loc = as_location(path)
    if loc.is_local:
        _atomic(loc.local, lambda p: df.to_parquet(p, index=False, **PARQUET_OPTIONS))
    else:
        buf = io.BytesIO()
        df.to_parquet(buf, index=False, **PARQUET_OPTIONS)
        loc.write_bytes(buf.getvalue())


def write_csv(path: Path | Location | str, df: pd.DataFrame) -> None:
    loc = as_location(path)
    if loc.is_local:
        _atomic(loc.local, lambda p: df.to_csv(p, index=False, lineterminator="\n"))
    else:
        loc.write_bytes(df.to_csv(index=False, lineterminator="\n").encode("utf-8"))


@dataclass
class JsonRecords:
    """The records of a JSON-list or JSON-Lines file, with their places for error messages."""

    path: Path | Location  # a Path when local
    format: str  # "json" (a list) or "jsonl"
    records: list[Any]
    locations: list[str]  # "line N" (JSON Lines) or "record N" (JSON list), 1-based
    raw_lines: list[str]  # the verbatim text of each JSON Lines record ([] for a list)


def read_json_records(path: Path) -> JsonRecords:
    """Read a JSON list or JSON Lines file (sniffed from its first non-blank character).

    The one reader of item and data files: every malformed input becomes a CkptselError that
    names the file and the line. Lines are split on "\\n" only (``splitlines`` would also split
    inside a JSON string holding U+2028).
    """
    loc = as_location(path)
    path = loc.local if loc.is_local else loc
    if loc.is_dir():
        raise CkptselError(f"{path}: is a folder; pass the data file (.json or .jsonl)")
    try:
        text = loc.read_text(encoding="utf-8")
    except OSError as err:
        raise CkptselError(f"{path}: cannot read ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise CkptselError(f"{path}: not UTF-8 text ({err})") from err
    stripped = text.lstrip()
    if not stripped:
        raise CkptselError(f"{path}: empty file")
    if stripped[0] == "[":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise CkptselError(f"{path}: line {err.lineno}: malformed JSON ({err.msg}, column {err.colno})") from err
        return JsonRecords(path, "json", data, [f"record {k + 1}" for k in range(len(data))], [])
    records, locations, raw = [], [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise CkptselError(f"{path}: line {number}: malformed JSON ({err.msg}, column {err.colno})") from err
        locations.append(f"line {number}")
        raw.append(line)
    return JsonRecords(path, "jsonl", records, locations, raw)
