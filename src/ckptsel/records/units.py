"""Where records live in a records folder: the single files and the write-once units.

Layout inside a records folder::

    generations.parquet, nll.parquet                  the single-file form (SPEC §2)
    units/generations/<trajectory>/step-<n>.parquet   contract generation columns (no text)
    units/nll/<trajectory>/step-<n>.parquet           contract NLL columns
    units/texts/<trajectory>/step-<n>.parquet         trajectory, step, split, item_id, text
    units/.packs/<kind>/<trajectory>.parquet          a trajectory's units in one file
                                                      (ckptsel.records.cache.pack; derived, safe to delete)
    .cache/<name>.arrays                              loaded arrays (ckptsel.records.cache.memo; safe to delete)

A records folder may be a local path or a URL (``s3://bucket/records``; see
:mod:`ckptsel._util.locations`): units are then objects, each written with one PUT, and a
unit's version is its ETag instead of its modification time.

A *unit* is one trajectory × checkpoint × kind. It is written once, atomically, by
:func:`ckptsel.records.store.write_unit`; a re-measured unit replaces exactly its own file;
nothing else is ever rewritten, so the cost of recording a checkpoint does not depend on how
much the folder already holds, and producers writing different units never wait for each
other. The single-file form (the contract other tools produce) stays valid input, alone or
next to units (:mod:`ckptsel.records.scan` reads both as one table).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.schema import GENERATIONS_FILE, NLL_FILE, is_average_step

UNITS_DIR = "units"
SINGLE_FILES = {"generations": GENERATIONS_FILE, "nll": NLL_FILE}
# a training step, or an average's reserved negative step (``step--3.parquet``:
# :func:`~ckptsel.records.schema.average_step`)
_UNIT_RE = re.compile(r"^step-(-?\d+)\.parquet$")


def _unit_step(m: re.Match[str], where: object) -> bool:
    """A unit file's step is a training step or an average's; any other negative step is refused
    naming the file (skipping it would drop a checkpoint's records without a word)."""
    step = int(m.group(1))
    if step >= 0 or is_average_step(step):
        return True
    raise CkptselError(
        f"{where}: step {step} is negative and not an average's (average-lastK is step -K, ema-D step "
        "-(1000000 + D*1000000)): rename or remove the file"
    )


def unit_path(records_dir: Path | Location | str, kind: str, trajectory: str, step: int) -> Location:
    """Where the unit of ``kind`` for ``trajectory`` at ``step`` lives."""
    return as_location(records_dir) / UNITS_DIR / kind / trajectory / f"step-{int(step)}.parquet"


@dataclass(frozen=True)
class UnitFile:
    """One unit on disk: its key, where it is, and its version (``size`` + ``tag``: the
    modification time in ns and inode locally, the ETag on object stores)."""

    trajectory: str
    step: int
    where: Location | str  # a local unit's path stays a plain string until asked for
    size: int
    tag: str

    @property
    def path(self) -> Location:
        """Where the unit is (built on demand: listing thousands of units stays cheap)."""
        w = self.where
        return w if isinstance(w, Location) else Location(Path(w))


T = TypeVar("T")
# {(units folder of a kind, trajectory or None): its listing} while one_listing() is active
_LISTINGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("ckptsel_unit_listings", default=None)


@contextlib.contextmanager
def one_listing() -> Iterator[None]:
    """Inside this block each records folder's units of a kind are listed once: one analysis
    reads the records as the listing at its start found them (its cache keys, packs and
    provenance all checked against that one listing; at paper scale each listing stats 1,563
    files, and an analysis asked for one 31 times). A unit written meanwhile is seen by the next
    analysis, whose listing differs (and so do its cache keys). Threads started with
    :func:`contextvars.copy_context` share the snapshot."""
    if _LISTINGS.get() is not None:
        yield
        return
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def once_per_listing(key: tuple, compute: Callable[[], T]) -> T:
    """``compute()``, once per :func:`one_listing` block for ``key`` (what is derived from the
    listed files, as a pack's footer: every call outside a block computes)."""
    snapshot = _LISTINGS.get()
    if snapshot is None:
        return compute()
    key = ("derived", *key)
    if key not in snapshot:
        snapshot[key] = compute()
    return snapshot[key]


def forget_derived(key: tuple) -> None:
    """Drop what :func:`once_per_listing` keeps for ``key`` (its file was rewritten)."""
    snapshot = _LISTINGS.get()
    if snapshot is not None:
        snapshot.pop(("derived", *key), None)


def forget_listings() -> None:
    """Drop :func:`one_listing`'s snapshot (the one writer calls it after writing units)."""
    snapshot = _LISTINGS.get()
    if snapshot is not None:
        snapshot.clear()


def list_units(records_dir: Path | Location | str, kind: str, trajectory: str | None = None) -> list[UnitFile]:
    """Every complete unit of ``kind`` (temp files of writes in flight are skipped), sorted by
    trajectory then step; only ``trajectory``'s when given. On an object store: one recursive
    listing. Inside :func:`one_listing`, the listing made first."""
    snapshot = _LISTINGS.get()
    if snapshot is None:
        return _list_units(records_dir, kind, trajectory)
    key = (str(as_location(records_dir) / UNITS_DIR / kind), trajectory)
    if key not in snapshot:
        every = snapshot.get((key[0], None))
        if trajectory is not None and every is not None:
            snapshot[key] = [u for u in every if u.trajectory == trajectory]
        else:
            snapshot[key] = _list_units(records_dir, kind, trajectory)
    return list(snapshot[key])


def _list_units(records_dir: Path | Location | str, kind: str, trajectory: str | None) -> list[UnitFile]:
    """:func:`list_units` read from the folder (or the object store) now."""
    base = as_location(records_dir) / UNITS_DIR / kind
    if not base.is_local:
        if trajectory is not None:
            return [u for u in _list_remote(base / trajectory, trajectory) if u.trajectory == trajectory]
        return _list_remote(base)
    out: list[UnitFile] = []
    try:
        if trajectory is not None:
            trajs = [trajectory] if os.path.isdir(base / trajectory) else []
        else:
            trajs = sorted(e.name for e in os.scandir(base) if e.is_dir() and e.name[0] != ".")
    except FileNotFoundError:
        return out
    for traj in trajs:
        found = []
        with os.scandir(base / traj) as entries:
            for e in entries:
                m = _UNIT_RE.match(e.name)
                if m and e.is_file() and _unit_step(m, e.path):
                    st = e.stat()  # the tag: modification time and inode (an atomic rewrite
                    # is a new file: within the clock's granularity, at the same size, it differs)
                    tag = f"{st.st_mtime_ns}.{st.st_ino}"
                    found.append(UnitFile(traj, int(m.group(1)), e.path, st.st_size, tag))
        out.extend(sorted(found, key=lambda u: u.step))
    return out


def _list_remote(base: Location, trajectory: str | None = None) -> list[UnitFile]:
    """Units below ``base`` (the kind's folder; one trajectory's folder when ``trajectory``)."""
    out = []
    for rel, info in base.listing().items():
        traj, _, name = (trajectory, "/", rel) if trajectory is not None else rel.partition("/")
        m = _UNIT_RE.match(name)
        if m and traj and traj[0] != "." and "/" not in name and _unit_step(m, base / rel):
            out.append(UnitFile(traj, int(m.group(1)), base / rel, info.size, info.tag))
    return sorted(out, key=lambda u: (u.trajectory, u.step))


def single_file(records_dir: Path | Location | str, kind: str) -> Location | None:
    """The single-file form of ``kind`` when present."""
    name = SINGLE_FILES.get(kind)
    path = as_location(records_dir) / name if name else None
    return path if path is not None and path.is_file() else None


def exists(records_dir: Path | Location | str, kind: str) -> bool:
    """Whether ``records_dir`` holds records of ``kind`` in either form."""
    return single_file(records_dir, kind) is not None or bool(list_units(records_dir, kind))


def display_path(records_dir: Path | Location | str, kind: str) -> Location:
    """The name error messages give for a kind's records: the single file when it is the only
    form, else the units folder."""
    single = single_file(records_dir, kind)
    if single is not None and not list_units(records_dir, kind):
        return single
    return as_location(records_dir) / UNITS_DIR / kind
