"""Validation and test pools of a study: each split's task, file(s) and seeded sampling.

A pool is read from one or more item files with one task's loader (:mod:`ckptsel.data.tasks`).
Mixtures (several files, e.g. the 8 commonsense tasks) take ``per_task`` items from each file;
a single pool may take ``n`` items. Items are picked by a seeded hash of their id (the
``n`` smallest ``sha256(seed, label, item_id)``), so the sample does not depend on file order
and adding items to a file changes the sample only where the new items rank in. Items keep
their file order. In a mixture every item's ``subtask`` is its file's label (the commonsense
task name) and ids are prefixed with it when two files share an id.

When the validation and test pools read the same file, the test pool never takes an item the
validation pool took (the validation sample is drawn first).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.data.taskdef import Item, item_hash
from ckptsel.data.tasks import COMMONSENSE_TASKS, get_task, load_items
from ckptsel.errors import CkptselError


@dataclass(frozen=True)
class PoolSpec:
    """One split's pool: ``task`` (loader + answer rules), ``files``, optional sampling.

    ``per_task`` samples that many items from every file; ``n`` samples that many from the
    whole pool; ``seed`` seeds the hash. ``where`` names the study-file table in errors."""

    task: str
    files: tuple[Path | Location, ...]  # local paths or URLs
    n: int | None = None
    per_task: int | None = None
    seed: int = 0
    where: str = "[pool]"

    def settings(self) -> dict:
        """What determines the pool (for the study fingerprint; files by path)."""
        return {"task": self.task, "files": [str(f) for f in self.files], "n": self.n, "per_task": self.per_task, "seed": self.seed}


def rank_key(seed: int, label: str, item_id: str) -> str:
    """The seeded hash that orders items for sampling."""
    return hashlib.sha256(f"{seed}\x1f{label}\x1f{item_id}".encode()).hexdigest()


def _label(path: Path | Location) -> str:
    """A file's label in a mixture: its commonsense task folder name, else its stem."""
    path = PurePosixPath(str(path)) if is_url(path) else Path(path)
    for part in (path.parent.name, path.stem, path.name):
        for name in COMMONSENSE_TASKS:
            if part.lower() == name.lower():
                return name
    return path.stem


def sample(items: Sequence[Item], k: int, seed: int, label: str) -> list[Item]:
    """The ``k`` items of smallest seeded hash, in their original order."""
    keys = [rank_key(seed, label, it.item_id) for it in items]
    chosen = set(sorted(range(len(items)), key=keys.__getitem__)[:k])
    return [it for i, it in enumerate(items) if i in chosen]


def build_pool(spec: PoolSpec, exclude: dict[Path | Location, set[str]] | None = None) -> list[Item]:
    """The items of a pool (see the module docstring); ``exclude`` maps a file to item ids
    that must not be drawn (the other split's sample of the same file).

    Raises :class:`CkptselError` naming ``spec.where`` when a file has fewer items than asked.
    """
    get_task(spec.task)
    exclude = exclude or {}
    mixture = len(spec.files) > 1
    parts: list[tuple[str, list[Item]]] = []
    for path in spec.files:
        items = load_items(spec.task, path)
        banned = exclude.get(as_location(path), set())
        items = [it for it in items if it.item_id not in banned]
        label = _label(path)
        if spec.per_task is not None:
            if len(items) < spec.per_task:
                raise CkptselError(
                    f"{spec.where} per_task = {spec.per_task}, but {path} has only "
                    f"{len(items)} items" + (" left after the validation sample" if banned else "")
                )
            items = sample(items, spec.per_task, spec.seed, label)
        if mixture:
            items = [replace(it, subtask=it.subtask or label) for it in items]
        parts.append((label, items))
    pool = [it for _, items in parts for it in items]
    ids = [it.item_id for it in pool]
    if len(set(ids)) != len(ids):  # files share ids: prefix each with its file's label
        pool = [replace(it, item_id=f"{label}/{it.item_id}", group=f"{label}/{it.group}") for label, items in parts for it in items]
        ids = [it.item_id for it in pool]
        if len(set(ids)) != len(ids):
            raise CkptselError(f"{spec.where}: duplicate item ids within one file")
    if spec.n is not None:
        if len(pool) < spec.n:
            raise CkptselError(f"{spec.where} n = {spec.n}, but the pool ({', '.join(map(str, spec.files))}) has only {len(pool)} items")
        pool = sample(pool, spec.n, spec.seed, "pool")
    if not pool:
        raise CkptselError(f"{spec.where}: the pool is empty")
    return pool


def build_pools(validation: PoolSpec, test: PoolSpec) -> tuple[list[Item], list[Item]]:
    """Both pools; the test pool excludes, per shared file, the items validation drew."""
    val = build_pool(validation)
    shared = set(map(as_location, validation.files)) & set(map(as_location, test.files))
    exclude: dict[Path | Location, set[str]] = {}
    if shared:
        taken = {it.item_id for it in val}
        for path in shared:
            ids = {it.item_id for it in load_items(validation.task, path)}
            label = _label(path)
            exclude[path] = {i for i in ids if i in taken or f"{label}/{i}" in taken}
    return val, build_pool(test, exclude)


def strata_counts(items: Sequence[Item]) -> dict[str, int]:
    """Items per subtask (empty subtask -> ``""``), sorted by name: the balance of a pool."""
    out: dict[str, int] = {}
    for it in items:
        out[it.subtask] = out.get(it.subtask, 0) + 1
    return dict(sorted(out.items()))


def pool_digest(items: Sequence[Item]) -> str:
    """Content hash of a pool (ids and texts), for the study fingerprint."""
    h = hashlib.sha256()
    for it in items:
        h.update(item_hash(it).encode())
    return h.hexdigest()[:16]
