"""Publish a results folder as a whole: stage, hash, swap.

Every output of ``analyze`` (summary, choices, tables, figures, report) is built in a staging
folder beside ``--out``; a manifest with the SHA-256 of every output file is written last;
then the staging folder and ``--out`` are exchanged in one atomic ``renameat2(RENAME_EXCHANGE)``
call (or, where the file system lacks it, two renames that the next run repairs). A kill at any
moment therefore leaves either the old folder or the new one under ``--out``; leftovers of a
killed run (staging folders of dead processes) are removed at the start of the next run.
A results folder at a URL (an object store has no rename) is staged here the same way, then
uploaded one PUT per file with the manifest last (:func:`staged_url`; see there).

Ownership: ``--out`` may be a missing or empty folder, or a ckptsel results folder (one with a
manifest, or an older one with ``summary.json`` and ``choices/choices.sha256``). Anything else
is refused unless ``force``; even then, files ckptsel did not write are kept (hard-linked into
the new folder, so the very same file stays in place) and never overwritten or deleted.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ckptsel._util.locations import FileInfo, Location, safe_join, temp_dir
from ckptsel.errors import CkptselError, VerificationError

MANIFEST_FILE = "manifest.json"
OTHERS_KEY = "not_results"  # the manifest's list of files ckptsel did not write (kept, --force)
MANIFEST_KIND = "ckptsel-results"
# names a results folder may hold at its top level (what ckptsel writes)
OWNED_NAMES = ("summary.json", "run.json", "report.html", MANIFEST_FILE, "choices", "tables", "figures")
_OWNED_DIRS = ("choices", "tables", "figures")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> list[str]:
    """Relative POSIX paths of every file (and symlink) under ``root``, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in filenames + [d for d in dirnames if (base / d).is_symlink()]:
            out.append((base / name).relative_to(root).as_posix())
    return sorted(out)


# --------------------------------------------------------------------------- manifest
def manifest_files(root: Path) -> list[str]:
    """Relative POSIX paths of every file under ``root`` but the manifest, sorted (what a
    manifest of ``root`` would list)."""
    return [rel for rel in _files(Path(root)) if rel != MANIFEST_FILE]


def read_manifest(results_dir: Path) -> dict[str, str] | None:
    """``{relative path: sha256}`` of a results folder's manifest, or None when it has none."""
    path = Path(results_dir) / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise VerificationError(f"{path}: not a readable manifest ({err})") from err
    files = data.get("files") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("kind") != MANIFEST_KIND
        or not isinstance(files, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
    ):
        raise VerificationError(f"{path}: not a ckptsel manifest (expected kind {MANIFEST_KIND!r} and files)")
    return files


def manifest_text(root: Path, exclude: set[str] = frozenset(), meta: dict | None = None) -> str:
    """The manifest of ``root``: SHA-256 of every file but ``exclude`` (files ckptsel did not
    write) and the manifest itself; ``meta`` records how the outputs were made (report options)."""
    files = {rel: sha256_file(root / rel) for rel in _files(root) if rel != MANIFEST_FILE and rel not in exclude}
    others = {OTHERS_KEY: sorted(exclude)} if exclude else {}  # named, so verify knows them
    return json.dumps({"kind": MANIFEST_KIND, "schema": 1, **(meta or {}), **others, "files": files}, indent=1) + "\n"


def read_manifest_meta(results_dir: Path) -> dict:
    """The manifest's entries other than ``files`` (e.g. ``report`` options); {} without one."""
    if read_manifest(results_dir) is None:
        return {}
    data = json.loads((Path(results_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if k not in ("kind", "schema", "files", OTHERS_KEY)}


def check_manifest(results_dir: Path) -> list[str]:
    """Check every file named in the manifest; raise naming the first that differs, and the
    first file the manifest does not list (one put there after the results were published).

    Files of the user's kept under ``--force`` are named by the manifest as not results
    (:data:`OTHERS_KEY`): not checked, named in the lines returned.
    """
    results_dir = Path(results_dir)
    files = read_manifest(results_dir)
    if files is None:
        raise VerificationError(f"{results_dir / MANIFEST_FILE}: not found (not a complete ckptsel results folder)")
    for rel in sorted(files):
        path = results_dir / rel
        if not path.is_file():
            raise VerificationError(f"{path}: listed in {MANIFEST_FILE} but missing")
        digest = sha256_file(path)
        if digest != files[rel]:
            raise VerificationError(f"{path}: SHA-256 {digest} differs from the {MANIFEST_FILE} entry {files[rel]} (file changed)")
    others = _manifest_others(results_dir)
    unlisted = [rel for rel in manifest_files(results_dir) if rel not in files and rel not in others]
    if unlisted:
        raise VerificationError(
            f"{results_dir / unlisted[0]}: not listed in {MANIFEST_FILE} ({len(unlisted)} "
            "file(s) it does not list: put there after the results were published; not results)"
        )
    lines = [f"manifest: {len(files)} files match their SHA-256"]
    if others:
        lines.append(
            f"manifest: {len(others)} file(s) kept beside the results are not results: "
            + ", ".join(sorted(others)[:5])
            + (", ..." if len(others) > 5 else "")
        )
    return lines


def _manifest_others(results_dir: Path) -> set[str]:
    """The files the manifest names as not results (:data:`OTHERS_KEY`)."""
    data = json.loads((Path(results_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))
    others = data.get(OTHERS_KEY) or []
    return {str(x) for x in others} if isinstance(others, list) else set()


# --------------------------------------------------------------------------- ownership
def owned_files(out: Path) -> set[str] | None:
    """Files of ``out`` that ckptsel wrote; None when ``out`` is not a ckptsel results folder."""
    files = read_manifest(out) if (out / MANIFEST_FILE).is_file() else None
    if files is not None:
        return set(files) | {MANIFEST_FILE}
    summary, choices = out / "summary.json", out / "choices" / "choices.sha256"
    if summary.is_file() and choices.is_file():  # a results folder written before manifests
        try:
            legacy = json.loads(summary.read_text(encoding="utf-8")).get("schema") == 1
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            legacy = False
        if legacy:
            return {rel for rel in _files(out) if rel.split("/")[0] in OWNED_NAMES}
    return None


def _refuse_results_names(out: Path | Location, foreign: set[str]) -> None:
    """Refuse an ``--out`` where a file ckptsel did not write (in ``foreign``) has the name of
    a results file (writing the results would overwrite it)."""
    for rel in sorted(foreign):
        top = rel.split("/")[0]
        if top in OWNED_NAMES and (rel == top or top not in _OWNED_DIRS):
            raise CkptselError(
                f"{out / rel}: a file ckptsel did not write has the name of a results file; "
                f"refusing to overwrite it (move it or choose another --out)"
            )


def check_out(out: Path, force: bool) -> set[str]:
    """Up-front check of ``--out``; returns the files in it that ckptsel did not write."""
    out = Path(out)
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise CkptselError(f"{out}: exists and is not a folder; choose another --out")
    if not out.exists():
        parent = out.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise CkptselError(f"{out}: cannot be created ({parent} is not a folder)")
        return set()
    try:
        entries = list(out.iterdir())
    except OSError as err:
        raise CkptselError(f"{out}: cannot be read ({err.strerror or err})") from err
    if not entries:
        return set()
    owned = owned_files(out)
    if owned is None:
        if not force:
            raise CkptselError(
                f"{out}: folder is not empty and is not a ckptsel results folder; refusing to write "
                f"into it (choose an empty or new folder, or pass --force to add the results and "
                f"keep its files)"
            )
        owned = set()
    foreign = set(_files(out)) - owned
    _refuse_results_names(out, foreign)
    return foreign


# --------------------------------------------------------------------------- staging and swap
def _staging_prefix(out: Path) -> str:
    return f".{out.name}.staging-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stray(out: Path) -> None:
    """Remove staging folders (and old folders) left by killed runs; restore ``out`` when a
    killed fallback swap left it missing."""
    out = Path(out)
    if not out.parent.is_dir():
        return
    prefix = _staging_prefix(out)
    old = sorted(out.parent.glob(f".{out.name}.old-*"))
    for path in sorted(out.parent.glob(prefix + "*")) + old:
        try:
            pid = int(path.name.rsplit("-", 2)[-2])
        except (ValueError, IndexError):
            continue
        if pid != os.getpid() and _alive(pid):
            continue
        if ".old-" in path.name and not out.exists():
            os.rename(path, out)  # a fallback swap was killed between its two renames
            continue
        shutil.rmtree(path, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux renameat2); False where unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: fall back
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def swap_in(stage: Path, out: Path) -> None:
    """Put ``stage`` at ``out`` atomically; the previous ``out`` ends at ``stage`` (removed)."""
    if not out.exists():
        os.rename(stage, out)
    elif _exchange(stage, out):
        pass
    else:
        old = out.parent / f".{out.name}.old-{os.getpid()}-{os.urandom(4).hex()}"
        os.rename(out, old)
        os.rename(stage, out)
        os.rename(old, stage)
    _fsync_dir(out.parent)
    shutil.rmtree(stage, ignore_errors=True)


def _link_foreign(out: Path, stage: Path, foreign: set[str]) -> dict[str, int]:
    inodes = {}
    for rel in sorted(foreign):
        src, dst = out / rel, stage / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError as err:
            raise CkptselError(
                f"{src}: cannot keep this file (not written by ckptsel) in the new results folder "
                f"({err.strerror or err}); choose another --out"
            ) from err
        inodes[rel] = os.lstat(src).st_ino
    return inodes


@contextlib.contextmanager
def staged(out: Path, *, force: bool = False, carry: bool = False, meta: dict | None = None) -> Iterator[Path]:
    """Yield a staging folder for a new ``out``; publish it atomically when the block succeeds.

    ``carry``: start from (hard links to) the current folder's files, for commands that
    update a results folder (``ckptsel report``). Files ckptsel did not write are always kept.
    The manifest is written last, then the folder is swapped in. On any error the staging
    folder is removed and ``out`` is left as it was. ``meta`` goes into the manifest.
    """
    out = Path(out)
    foreign = check_out(out, force)
    stage = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        clean_stray(out)
        # the umask's mode, or the mode of the folder it replaces (--force never narrows it)
        stage = Path(temp_dir(out.parent, f"{_staging_prefix(out)}{os.getpid()}-", like=out))
    except OSError as err:
        raise CkptselError(f"{out}: cannot write results there ({err.strerror or err})") from err
    try:
        inodes = _link_foreign(out, stage, foreign)
        if carry and out.is_dir():
            for rel in sorted(set(_files(out)) - foreign - {MANIFEST_FILE}):
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                os.link(out / rel, stage / rel, follow_symlinks=False)
        try:
            yield stage
        except OSError as err:
            raise CkptselError(f"{out}: cannot write results ({err})") from err
        for rel, ino in inodes.items():
            if not os.path.lexists(stage / rel) or os.lstat(stage / rel).st_ino != ino:
                raise CkptselError(
                    f"{out / rel}: a file ckptsel did not write would be overwritten by a result; "
                    f"refusing (move it or choose another --out)"
                )
        text = manifest_text(stage, exclude=set(foreign), meta=meta)
        (stage / MANIFEST_FILE).write_text(text, encoding="utf-8")
        try:
            swap_in(stage, out)
        except OSError as err:
            raise CkptselError(f"{out}: cannot publish results ({err.strerror or err})") from err
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


# --------------------------------------------------------------------------- at a URL
# An object store has no rename: a results folder at a URL is built in a local staging folder
# as above, then each file is uploaded with one PUT (a reader sees an old or a new file, never
# part of one) and the manifest goes last; the files of the previous results that the new ones
# do not name are deleted after it. The manifest is the commit point: ``verify`` (and any
# reader that checks the SHA-256s) never accepts a mix of two publishes, and a publish killed
# half way is found by the manifest check and repaired by the next one.


def _owned_remote(out: Location, files: dict[str, FileInfo]) -> set[str]:
    """Files at ``out`` ckptsel wrote (its manifest's); ``--out`` checks as :func:`check_out`."""
    if MANIFEST_FILE not in files:
        return set()
    try:
        manifest = json.loads((out / MANIFEST_FILE).read_text())
        return set(manifest["files"]) | {MANIFEST_FILE}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CkptselError(f"{out / MANIFEST_FILE}: not a readable manifest ({err})") from err


def check_out_url(out: Location, force: bool) -> tuple[set[str], set[str]]:
    """Up-front check of an ``--out`` URL: ``(files ckptsel wrote there, other files)``."""
    files = out.listing()
    owned = _owned_remote(out, files)
    foreign = set(files) - owned
    if foreign and not owned and not force:
        raise CkptselError(
            f"{out}: not empty and not a ckptsel results folder; refusing to write into it "
            f"(choose an empty or new --out, or pass --force to add the results and keep its files)"
        )
    _refuse_results_names(out, foreign)
    return owned & set(files), foreign


@contextlib.contextmanager
def staged_url(out: Location, *, force: bool = False, meta: dict | None = None) -> Iterator[Path]:
    """:func:`staged` for a results folder at a URL: yield a local staging folder; when the
    block succeeds, upload its files, the manifest last, then delete the old results' leftovers."""
    old, foreign = check_out_url(out, force)
    with tempfile.TemporaryDirectory(prefix=".ckptsel-results-") as tmp:
        local = Path(tmp) / "results"
        with staged(local, meta=meta) as stage:
            yield stage
        manifest = read_manifest(local) or {}
        clash = sorted(set(manifest) & foreign)
        if clash:
            raise CkptselError(
                f"{out / clash[0]}: a file ckptsel did not write would be overwritten by a "
                f"result; refusing (move it or choose another --out)"
            )
        try:
            for rel in sorted(manifest):
                (out / rel).write_bytes((local / rel).read_bytes())
            (out / MANIFEST_FILE).write_bytes((local / MANIFEST_FILE).read_bytes())
            for rel in sorted(old - set(manifest) - {MANIFEST_FILE}):
                (out / rel).unlink(missing_ok=True)
        except OSError as err:
            raise CkptselError(f"{out}: cannot publish results ({err})") from err


def fetch_results(url: Location, into: Path) -> Path:
    """A local copy of the results folder at ``url`` (its manifest and the files it names,
    plus ``summary.json`` and ``run.json``), for ``verify``; returns the folder. A manifest
    entry that would land outside ``into`` (``..``, absolute, through a symlink) is refused in
    one line naming it, before any file is written (:func:`safe_join`)."""
    manifest = url / MANIFEST_FILE
    try:
        text = manifest.read_bytes()
    except FileNotFoundError:
        if not (url / "summary.json").exists():
            raise CkptselError(f"{url / 'summary.json'}: no summary to verify") from None
        raise VerificationError(f"{manifest}: not found (not a complete ckptsel results folder)") from None
    _write_local(into / MANIFEST_FILE, text)
    files = read_manifest(into) or {}
    names = sorted(set(files) | {"summary.json", "run.json"})
    local = {rel: safe_join(into, rel, source=manifest) for rel in names}  # all, before a write
    for rel in names:
        try:
            _write_local(local[rel], (url / rel).read_bytes())
        except FileNotFoundError:
            continue  # verify names what is missing
    return into


def _write_local(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
