"""Atomic file writes: write a temp file in the same folder, then rename.

A killed job therefore leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda p: p.write_text(text, encoding="utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    _atomic(path, lambda p: p.write_bytes(data))


def write_parquet(path: Path, df: pd.DataFrame) -> None:
    _atomic(path, lambda p: df.to_parquet(p, index=False))


def write_csv(path: Path, df: pd.DataFrame) -> None:
    _atomic(path, lambda p: df.to_csv(p, index=False, lineterminator="\n"))


RECORDS_ROW_GROUP = 262_144


def write_records(path: Path, df: pd.DataFrame) -> None:
    """Write a records table (SPEC §2) sorted by split, trajectory, step and item.

    Sorting by split first means a reader that asks for one split skips the other split's
    row groups from the Parquet statistics, so loading validation records never decodes test
    rows (and is faster).
    """
    keys = [c for c in ("split", "trajectory", "step", "item_id", "window") if c in df.columns]
    ordered = df.sort_values(keys, kind="stable", ignore_index=True)
    _atomic(path, lambda p: ordered.to_parquet(p, index=False, row_group_size=RECORDS_ROW_GROUP))
