"""A per-node cache of remote folders and files, for the libraries that need local paths.

transformers, peft, vLLM and the item loaders read local files, so a checkpoint folder or a
base model at a URL is first copied to this machine, once per node:

    local = local_copy(Location("s3://bucket/run/checkpoint-40"))   # a local folder

* **Where.** ``$CKPTSEL_CACHE_DIR`` (``{node}`` in it: the node), else
  ``~/.cache/ckptsel/remote``; one folder per URL,
  ``<sha256(url)[:16]>-<name>/``, with ``<key>.json`` (the listing it was copied from) and
  ``<key>.lock`` beside it. A local location is returned as it is (no copy).
* **Kept current.** Each call lists the remote folder once (one LIST) and compares names,
  sizes and tags (ETag / generation) with the stored listing: equal, the copy is used (a
  hit); different (the folder was rewritten), it is copied again.
* **Once per node.** An ``flock`` on ``<key>.lock`` serializes the processes of one node: two
  measuring actors on a node wait for each other and the second finds the copy ready.
* **Never half.** Files go to ``<key>.tmp-<pid>/`` and the folder is renamed into place once
  every file arrived with its listed size; a download killed half way leaves a temp folder
  that the next holder of the lock deletes, never a folder a later call would trust.
* **Only inside the cache.** Every local path is built from an object key by
  :func:`~ckptsel._util.locations.safe_join`: a key with ``..``, an absolute or empty part is
  refused in one line naming it, before anything is downloaded.
* **Only what is read.** Training state that measurement never reads (optimizer, scheduler,
  RNG state, ``training_args.bin``, DeepSpeed's ``global_step*/`` shards) is not copied
  (:data:`SKIP`): on real runs the optimizer alone is two to three times the adapter.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

from ckptsel._util.locations import FileInfo, Location, as_location, is_url, matches, remote_errors, safe_join
from ckptsel.errors import CkptselError

CACHE_ENV = "CKPTSEL_CACHE_DIR"
SKIP = (
    "optimizer.pt",
    "optimizer.bin",
    "optimizer*.safetensors",
    "scheduler.pt",
    "scaler.pt",
    "rng_state*.pth",
    "training_args.bin",
    "global_step*/*",
)
STATS = {"downloads": 0, "hits": 0, "bytes": 0}  # this process's counts (tests, benchmarks)


def cache_root() -> Path:
    """The node's cache folder: ``$CKPTSEL_CACHE_DIR``, else ``~/.cache/ckptsel/remote``.
    ``{node}`` in the variable stands for the node (a Ray actor puts its node id there, other
    processes the host name): several nodes on one disk keep separate caches."""
    env = os.environ.get(CACHE_ENV)
    if not env:
        return Path.home() / ".cache" / "ckptsel" / "remote"
    return Path(env.replace("{node}", socket.gethostname()))


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
    except ImportError:  # pragma: no cover - Windows: one process per node assumed
        pass
    try:
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _wanted(loc: Location, skip: tuple[str, ...]) -> tuple[dict[str, FileInfo], bool]:
    """The remote files to copy (``{relative path: FileInfo}``) and whether ``loc`` is a
    single file rather than a folder."""
    files = {rel: info for rel, info in loc.listing().items() if not matches(rel, skip)}
    if files:
        return files, False
    info = loc.info()
    if info is not None:
        return {loc.name: info}, True
    raise CkptselError(f"{loc}: not found (no such file or folder)")


def local_copy(where: str | os.PathLike[str] | Location, skip: tuple[str, ...] = SKIP) -> Path:
    """A local path holding what ``where`` holds: the path itself when local, else this node's
    cached copy (folder or single file), made or refreshed as the module docstring says."""
    loc = as_location(where)
    if loc.is_local:
        return loc.local
    want, single = _wanted(loc, skip)
    root = cache_root()
    key = hashlib.sha256(str(loc).encode()).hexdigest()[:16] + "-" + (loc.name or "root")
    dest, meta = root / key, root / f"{key}.json"
    stored = {rel: [info.size, info.tag] for rel, info in sorted(want.items())}
    with _flock(root / f"{key}.lock"):
        try:
            have = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            have = None
        if have == stored and dest.is_dir():
            STATS["hits"] += 1
            return dest / loc.name if single else dest
        _download(loc, want, single, root, key)
        tmp_meta = root / f"{key}.json.tmp-{os.getpid()}"
        tmp_meta.write_text(json.dumps(stored), encoding="utf-8")
        os.replace(tmp_meta, meta)
    STATS["downloads"] += 1
    STATS["bytes"] += sum(info.size for info in want.values())
    return dest / loc.name if single else dest


def _download(loc: Location, want: dict[str, FileInfo], single: bool, root: Path, key: str) -> None:
    """Copy ``want`` into ``root/key`` through a temp folder (the caller holds the lock)."""
    for stale in root.glob(f"{key}.tmp-*"):  # dead downloads: the lock holder is the only writer
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root / f"{key}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True)
    try:
        remote = [loc.fs_path] if single else [(loc / rel).fs_path for rel in want]
        local = [str(safe_join(tmp, rel, source=loc)) for rel in want]
        for path in local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with remote_errors(loc):  # no credentials, endpoint down: one line
                loc.fs.get(remote, local)  # concurrent GETs on object stores
        except OSError as err:
            raise CkptselError(f"{loc}: cannot download ({err})") from err
        for (rel, info), path in zip(want.items(), local, strict=True):
            got = os.path.getsize(path)
            if got != info.size:
                raise CkptselError(f"{loc}/{rel}: downloaded {got} bytes, listed {info.size} (changed while copying? run again)")
        dest = root / key
        if dest.exists():
            old = root / f"{key}.tmp-old-{os.getpid()}"
            os.rename(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def local_ref(ref: str | Location | None) -> str | None:
    """A model reference usable by ``from_pretrained``: a URL becomes this node's cached copy,
    a ``file://`` URL its path; a local folder or a hub name stays as it is."""
    if ref is None:
        return None
    if is_url(ref):
        return str(local_copy(ref))
    return str(as_location(ref)) if str(ref).startswith("file://") else str(ref)
