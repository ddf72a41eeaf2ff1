"""Where records live in a records folder: the single files and the write-once units.

Layout inside a records folder::

    generations.parquet, nll.parquet                  the single-file form (SPEC §2)
    units/generations/<trajectory>/step-<n>.parquet   contract generation columns (no text)
    units/nll/<trajectory>/step-<n>.parquet           contract NLL columns
    units/texts/<trajectory>/step-<n>.parquet         trajectory, step, split, item_id, text
    units/.cache/<kind>.parquet                       derived read cache (safe to delete)

A *unit* is one trajectory × checkpoint × kind. It is written once, atomically, by
:func:`ckptsel.records.store.write_unit`; a re-measured unit replaces exactly its own file;
nothing else is ever rewritten, so the cost of recording a checkpoint does not depend on how
much the folder already holds, and producers writing different units never wait for each
other. The single-file form (the contract other tools produce) stays valid input, alone or
next to units (:mod:`ckptsel.records.scan` reads both as one table).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ckptsel.records.schema import (
    GENERATIONS_FILE,
    NLL_FILE,
)

UNITS_DIR = "units"
CACHE_DIR = ".cache"
SINGLE_FILES = {"generations": GENERATIONS_FILE, "nll": NLL_FILE}
_UNIT_RE = re.compile(r"^step-(\d+)\.parquet$")


def unit_path(records_dir: Path, kind: str, trajectory: str, step: int) -> Path:
    """Where the unit of ``kind`` for ``trajectory`` at ``step`` lives."""
    return Path(records_dir) / UNITS_DIR / kind / trajectory / f"step-{int(step)}.parquet"


@dataclass(frozen=True)
class UnitFile:
    trajectory: str
    step: int
    path: Path
    size: int
    mtime_ns: int


def list_units(records_dir: Path, kind: str) -> list[UnitFile]:
    """Every complete unit of ``kind`` (temp files of writes in flight are skipped), sorted by
    trajectory then step."""
    base = Path(records_dir) / UNITS_DIR / kind
    out: list[UnitFile] = []
    try:
        trajs = sorted(e.name for e in os.scandir(base) if e.is_dir() and e.name[0] != ".")
    except FileNotFoundError:
        return out
    for traj in trajs:
        found = []
        with os.scandir(base / traj) as entries:
            for e in entries:
                m = _UNIT_RE.match(e.name)
                if m and e.is_file():
                    st = e.stat()
                    found.append(UnitFile(traj, int(m.group(1)), Path(e.path), st.st_size, st.st_mtime_ns))
        out.extend(sorted(found, key=lambda u: u.step))
    return out


def single_file(records_dir: Path, kind: str) -> Path | None:
    """The single-file form of ``kind`` when present."""
    name = SINGLE_FILES.get(kind)
    path = Path(records_dir) / name if name else None
    return path if path is not None and path.is_file() else None


def exists(records_dir: Path, kind: str) -> bool:
    """Whether ``records_dir`` holds records of ``kind`` in either form."""
    return single_file(records_dir, kind) is not None or bool(list_units(records_dir, kind))


def display_path(records_dir: Path, kind: str) -> Path:
    """The name error messages give for a kind's records: the single file when it is the only
    form, else the units folder."""
    single = single_file(records_dir, kind)
    if single is not None and not list_units(records_dir, kind):
        return single
    return Path(records_dir) / UNITS_DIR / kind
