"""Where files live: a local path or an fsspec URL, behind one small type (:class:`Location`).

Run folders, base models, records, results and study files may sit on this machine or on an
object store: ``s3://bucket/key``, ``gs://``, ``memory://`` or any other fsspec protocol
(``file://`` is local). A URL never goes through :mod:`pathlib` (``Path("s3://b/k")`` is
``s3:/b/k``, silently): a :class:`Location` keeps it a string, joined with ``/``. A local
location behaves like a :class:`~pathlib.Path` where ckptsel needs it (``/``, ``name``,
``parent``, ``read_bytes``, ``os.fspath``); ``os.fspath`` of a URL raises ``TypeError``, so
code that would mangle a URL fails loudly instead.

What each store guarantees, and how the writes here use it:

* **Writes a reader never sees half of.** Locally: a temp file in the same folder, then
  ``os.replace``. On object stores: one PUT of bytes already in memory (``pipe_file``). An
  object appears whole or not at all (S3, GCS, Azure), so there is no temp name and no
  rename (a rename there is copy + delete, and a lister sees both names).
* **Conditional writes** (``if_absent``, ``if_tag``) for optimistic concurrency: S3
  ``If-None-Match: *`` / ``If-Match: <ETag>``; locally ``os.link`` (create-only);
  ``memory://`` emulates them with a lock (it lives in one process anyway). Elsewhere
  (:attr:`Location.has_conditions` is false) callers fall back to their single-writer rule.
* **Listings are fresh.** Every listing and existence check that decides something first
  drops fsspec's listing cache for that path (s3fs would otherwise answer from a stale
  listing). Each file comes with its size and a *tag* that changes when its content does:
  the ETag on S3, the generation on GCS, ``mtime_ns`` locally.

Credentials are never read from ckptsel's files: the store's own chain applies (``AWS_*``
variables, ``AWS_PROFILE`` and ``~/.aws``, instance roles; ``GOOGLE_APPLICATION_CREDENTIALS``;
``AWS_ENDPOINT_URL`` for S3-compatible servers). s3fs and gcsfs are optional extras: a URL
whose package is missing is one :class:`~ckptsel.errors.CkptselError` naming the extra.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import posixpath
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

_EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
_PACKAGES = {"s3": "s3fs", "gcs": "gcsfs"}
_MEMORY_LOCK = threading.Lock()  # memory:// has no server: conditional writes under a lock


class WriteConflict(Exception):
    """A conditional write lost: the object changed (or appeared) since it was read."""


@dataclass(frozen=True)
class FileInfo:
    """One file of a listing: its size and a tag that changes whenever its content does."""

    size: int
    tag: str


_NO_CREDENTIALS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError")
_UNREACHABLE = (
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "ProxyConnectionError",
    "ClientConnectorError",
    "ServerDisconnectedError",
    "InvalidURL",
    "ConnectionRefusedError",
)
_DENIED = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken")


def _endpoint(loc: Location) -> str:
    """The endpoint a URL's store is reached at, for messages."""
    if loc.protocol in ("s3", "s3a"):
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"
    if loc.protocol in ("gs", "gcs"):
        return os.environ.get("STORAGE_EMULATOR_HOST") or "Google Cloud Storage"
    return f"{loc.protocol}://"


def storage_error(loc: Location | str, err: BaseException) -> CkptselError | None:
    """The one-line :class:`CkptselError` for a storage failure at ``loc`` that a user fixes
    in their environment (no credentials, an unknown profile, an endpoint that does not answer,
    a bucket that does not exist, access denied), or ``None`` for anything else. The store's
    libraries are never imported here: their exceptions are recognized by class name along
    the cause chain (botocore, aiobotocore, aiohttp, google-auth)."""
    loc = as_location(loc)
    chain, seen = [], err
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    names = {c.__name__ for e in chain for c in type(e).__mro__}
    text = " ".join(" ".join(str(e).split()) for e in chain)
    said = " ".join(str(err).split())[:160] or type(err).__name__
    if names & {"DefaultCredentialsError", "RefreshError"}:
        return CkptselError(
            f"{loc}: no usable Google Cloud credentials ({said}); set "
            "GOOGLE_APPLICATION_CREDENTIALS to a key file, or run `gcloud auth application-default login`"
        )
    if loc.protocol not in ("s3", "s3a"):
        return None
    bucket = str(loc).partition("://")[2].split("/", 1)[0]
    if "ProfileNotFound" in names:
        return CkptselError(
            f"{loc}: AWS_PROFILE={os.environ.get('AWS_PROFILE', '')!r} is not a profile in "
            "~/.aws/config or ~/.aws/credentials; set AWS_PROFILE to one that exists, or unset "
            "it and set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    if names & set(_NO_CREDENTIALS):
        return CkptselError(
            f"{loc}: no S3 credentials found; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or "
            "AWS_PROFILE (a profile in ~/.aws), or run where an instance role applies"
        )
    if names & set(_UNREACHABLE):
        return CkptselError(f"{loc}: cannot reach the storage endpoint {_endpoint(loc)} ({said}); check AWS_ENDPOINT_URL and the network")
    if "NoSuchBucket" in text or "bucket does not exist" in text:
        return CkptselError(
            f"{loc}: the bucket {bucket!r} does not exist at {_endpoint(loc)} (or these "
            "credentials cannot see it); check the URL, AWS_ENDPOINT_URL and AWS_PROFILE"
        )
    if any(code in text for code in _DENIED) or isinstance(err, PermissionError):
        return CkptselError(
            f"{loc}: access denied by {_endpoint(loc)} ({said}); check the credentials "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE) and their permissions"
        )
    return None


@contextlib.contextmanager
def remote_errors(loc: Location | str):
    """Storage failures inside the block as :func:`storage_error`'s one line; everything else
    (``FileNotFoundError`` of a missing object included) as it was."""
    try:
        yield
    except (CkptselError, WriteConflict):
        raise
    except Exception as err:
        translated = storage_error(loc, err)
        if translated is None:
            raise
        raise translated from err


def is_url(value: Any) -> bool:
    """Whether ``value`` names a remote location (a ``scheme://`` string other than ``file://``)."""
    if isinstance(value, Location):
        return not value.is_local
    return isinstance(value, str) and "://" in value and not value.startswith("file://")


def _tag(info: dict[str, Any]) -> str:
    """A version tag from an fsspec info entry: the ETag (S3), the generation (GCS), else the
    modification time (local, memory)."""
    for key in ("ETag", "etag", "generation", "md5Hash", "crc32c"):
        if info.get(key):
            return str(info[key]).strip('"')
    stamp = info.get("mtime") or info.get("created") or info.get("LastModified")
    if hasattr(stamp, "timestamp"):
        stamp = stamp.timestamp()
    return f"{info.get('size')}:{stamp}"


def _remote(method):
    """A :class:`Location` method whose storage failures at a URL are one line
    (:func:`remote_errors`); a local path's errors stay as they are."""

    @functools.wraps(method)
    def wrapped(self: Location, *args: Any, **kwargs: Any) -> Any:
        if self._local:
            return method(self, *args, **kwargs)
        with remote_errors(self):
            return method(self, *args, **kwargs)

    return wrapped


def _bucket_missing(loc: Location, err: BaseException) -> None:
    """Raise the one-line error when ``err`` (a ``FileNotFoundError`` a method would read as
    'no such file') says the bucket itself does not exist: that is a wrong URL, not a gap."""
    translated = storage_error(loc, err)
    if translated is not None:
        raise translated from err


class Location:
    """A local path or a URL; see the module docstring. Immutable, hashable, picklable (a
    URL travels as its string: each process resolves its own filesystem object)."""

    __slots__ = ("_s", "_local", "_fs", "_path")

    def __init__(self, where: str | os.PathLike[str] | Location) -> None:
        if isinstance(where, Location):
            self._s, self._local = where._s, where._local
        elif isinstance(where, str) and "://" in where:
            if where.startswith("file://"):
                self._s, self._local = where[len("file://") :] or "/", True
            else:
                scheme, _, rest = where.partition("://")
                self._s, self._local = f"{scheme}://{rest.rstrip('/')}", False
        else:
            self._s, self._local = str(Path(os.fspath(where))), True
        self._fs: Any = None
        self._path: str | None = None

    # ------------------------------------------------------------------ identity
    @property
    def is_local(self) -> bool:
        return self._local

    @property
    def protocol(self) -> str:
        return "file" if self._local else self._s.partition("://")[0]

    @property
    def local(self) -> Path:
        """The local path; a URL is an error (this step needs a file on this machine)."""
        if not self._local:
            raise CkptselError(f"{self._s}: a URL, not a local path (this needs a local file)")
        return Path(self._s)

    def __str__(self) -> str:
        return self._s

    def __repr__(self) -> str:
        return f"Location({self._s!r})"

    def __fspath__(self) -> str:
        if not self._local:
            raise TypeError(f"{self._s} is a URL, not a local path")
        return self._s

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Location):
            return (self._local, self._s) == (other._local, other._s)
        if isinstance(other, os.PathLike) and self._local:
            return Path(self._s) == Path(os.fspath(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(Path(self._s)) if self._local else hash(self._s)

    def __lt__(self, other: Location) -> bool:
        return str(self) < str(other)

    def __reduce__(self):
        return (Location, (Path(self._s) if self._local else self._s,))

    # ------------------------------------------------------------------ names
    @property
    def name(self) -> str:
        if self._local:
            return Path(self._s).name
        return self._s.partition("://")[2].rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    @property
    def parent(self) -> Location:
        if self._local:
            return Location(Path(self._s).parent)
        scheme, _, rest = self._s.partition("://")
        return Location(f"{scheme}://{rest.rsplit('/', 1)[0]}") if "/" in rest else self

    def joinpath(self, *parts: str | os.PathLike[str]) -> Location:
        if self._local:
            return Location(Path(self._s).joinpath(*parts))
        scheme, _, rest = self._s.partition("://")
        joined = posixpath.normpath(posixpath.join(rest, *(os.fspath(p) for p in parts)))
        return Location(f"{scheme}://{joined}")

    def __truediv__(self, part: str | os.PathLike[str]) -> Location:
        return self.joinpath(part)

    def relative_to(self, other: Location) -> str:
        """This location's path below ``other``, ``/``-separated."""
        base = str(other).rstrip("/") + ("/" if not self._local else os.sep)
        if not str(self).startswith(base):
            raise ValueError(f"{self} is not below {other}")
        return str(self)[len(base) :].replace(os.sep, "/")

    # ------------------------------------------------------------------ filesystem
    @property
    def fs(self) -> Any:
        """The fsspec filesystem (resolved once per object, never pickled)."""
        if self._fs is None:
            _resolve(self)
        return self._fs

    @property
    def fs_path(self) -> str:
        """The path as the filesystem names it (``bucket/key`` for S3)."""
        if self._local:
            return os.path.abspath(self._s)
        if self._path is None:
            _resolve(self)
        return self._path

    @property
    def has_conditions(self) -> bool:
        """Whether :meth:`write_bytes` can write conditionally here (``if_absent``/``if_tag``)."""
        return self.protocol in ("s3", "s3a", "memory")

    def _fresh(self) -> None:
        """Drop fsspec's cached listings of this path and its parents (stale on S3)."""
        if not self._local:
            self.fs.invalidate_cache(self.fs_path)

    @_remote
    def info(self) -> FileInfo | None:
        """Size and tag of the file, or ``None`` when there is none (a folder is ``None``)."""
        if self._local:
            try:
                st = os.stat(self._s)
            except (FileNotFoundError, NotADirectoryError):
                return None
            return None if os.path.isdir(self._s) else FileInfo(st.st_size, str(st.st_mtime_ns))
        self._fresh()
        try:
            got = self.fs.info(self.fs_path)
        except FileNotFoundError as err:
            _bucket_missing(self, err)
            return None
        if got.get("type") != "file":
            return None
        return FileInfo(int(got.get("size") or 0), _tag(got))

    @_remote
    def exists(self) -> bool:
        if self._local:
            return os.path.exists(self._s)
        self._fresh()
        return bool(self.fs.exists(self.fs_path))

    def is_file(self) -> bool:
        return os.path.isfile(self._s) if self._local else self.info() is not None

    @_remote
    def is_dir(self) -> bool:
        if self._local:
            return os.path.isdir(self._s)
        self._fresh()
        try:
            return bool(self.fs.isdir(self.fs_path))
        except FileNotFoundError as err:
            _bucket_missing(self, err)
            return False

    @_remote
    def children(self) -> list[tuple[str, bool]]:
        """``(name, is_folder)`` of every entry directly inside this folder, sorted by name;
        ``[]`` when it does not exist."""
        if self._local:
            try:
                with os.scandir(self._s) as entries:
                    return sorted((e.name, e.is_dir()) for e in entries)
            except (FileNotFoundError, NotADirectoryError):
                return []
        self._fresh()
        try:
            found = self.fs.ls(self.fs_path, detail=True, refresh=True)
        except FileNotFoundError as err:
            _bucket_missing(self, err)
            return []
        base = self.fs_path.rstrip("/")
        out = set()
        for info in found:
            name = str(info["name"]).rstrip("/")
            if name != base:
                out.add((name.rsplit("/", 1)[-1], info.get("type") == "directory"))
        return sorted(out)

    @_remote
    def listing(self) -> dict[str, FileInfo]:
        """Every file below this folder, ``{relative path: FileInfo}`` (one recursive listing:
        a paginated LIST on object stores, however deep the tree)."""
        if self._local:
            out = {}
            for dirpath, _, files in os.walk(self._s):
                for name in files:
                    path = os.path.join(dirpath, name)
                    try:
                        st = os.stat(path)
                    except FileNotFoundError:  # removed while listing
                        continue
                    rel = os.path.relpath(path, self._s).replace(os.sep, "/")
                    out[rel] = FileInfo(st.st_size, str(st.st_mtime_ns))
            return out
        self._fresh()
        try:
            found = self.fs.find(self.fs_path, detail=True, withdirs=False)
        except FileNotFoundError as err:
            _bucket_missing(self, err)
            return {}
        base = self.fs_path.rstrip("/") + "/"
        return {
            name[len(base) :]: FileInfo(int(info.get("size") or 0), _tag(info))
            for name, info in found.items()
            if info.get("type") == "file" and name.startswith(base)
        }

    @_remote
    def glob(self) -> list[Location]:
        """The locations matching this one read as a glob pattern (``*``, ``?``, ``[...]``),
        sorted; ``[]`` when none does."""
        if self._local:
            import glob as globbing

            return [Location(p) for p in sorted(globbing.glob(self._s))]
        self._fresh()
        fs = self.fs
        return sorted(Location(fs.unstrip_protocol(p)) for p in fs.glob(self.fs_path))

    # ------------------------------------------------------------------ reading
    @_remote
    def read_bytes(self) -> bytes:
        """The file's bytes (``FileNotFoundError`` when there is none)."""
        if self._local:
            return Path(self._s).read_bytes()
        return self.fs.cat_file(self.fs_path)

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    @_remote
    def read_range(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the file (one ranged GET on object stores)."""
        if self._local:
            with open(self._s, "rb") as fh:
                fh.seek(start)
                return fh.read(max(0, end - start))
        return self.fs.cat_file(self.fs_path, start=start, end=end)

    @_remote
    def read_tagged(self) -> tuple[bytes, str] | None:
        """``(bytes, tag)`` of the file, the tag naming exactly the bytes read; ``None`` when
        there is no file. The tag feeds :meth:`write_bytes`'s ``if_tag``."""
        if self.protocol in ("s3", "s3a"):
            return _s3_get(self)
        if self._local:
            try:
                with open(self._s, "rb") as fh:
                    st = os.fstat(fh.fileno())
                    return fh.read(), str(st.st_mtime_ns)
            except FileNotFoundError:
                return None
        info = self.info()
        if info is None:
            return None
        try:
            return self.fs.cat_file(self.fs_path), info.tag
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------------ writing
    @_remote
    def write_bytes(self, data: bytes, *, if_absent: bool = False, if_tag: str | None = None) -> None:
        """Write ``data`` so that no reader ever sees half of it (see the module docstring).

        ``if_absent``: only when there is no file yet; ``if_tag``: only when the file's tag
        is still ``if_tag``. A lost condition raises :class:`WriteConflict`. An unwritable
        place is a :class:`CkptselError`.
        """
        if self._local:
            if if_tag is not None:
                raise ValueError("if_tag is for object stores; local writers use a lock")
            _write_local(self._s, data, if_absent)
            return
        if (if_absent or if_tag is not None) and not self.has_conditions:
            raise ValueError(f"{self}: {self.protocol}:// has no conditional writes here")
        try:
            if self.protocol in ("s3", "s3a"):
                _s3_put(self, data, if_absent, if_tag)
            elif self.protocol == "memory" and (if_absent or if_tag is not None):
                with _MEMORY_LOCK:
                    current = self.info()
                    if (if_absent and current is not None) or (if_tag is not None and (current is None or current.tag != if_tag)):
                        raise WriteConflict(str(self))
                    self.fs.pipe_file(self.fs_path, data)
            else:
                self.fs.pipe_file(self.fs_path, data)
        except (WriteConflict, CkptselError):
            raise
        except OSError as err:
            raise CkptselError(f"{self}: cannot write ({err})") from err

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        self.write_bytes(text.encode(encoding))

    @_remote
    def unlink(self, missing_ok: bool = False) -> None:
        if self._local:
            Path(self._s).unlink(missing_ok=missing_ok)
            return
        try:
            self.fs.rm_file(self.fs_path)
        except FileNotFoundError:
            if not missing_ok:
                raise

    @_remote
    def remove_tree(self) -> None:
        """Delete this folder and everything below it (nothing when it does not exist)."""
        if self._local:
            import shutil

            shutil.rmtree(self._s, ignore_errors=True)
            return
        files = [str(self / rel) for rel in self.listing()]
        if files:
            self.fs.rm([Location(f).fs_path for f in files])  # DeleteObjects, 1,000 a call
        self._fresh()

    def mkdir(self, parents: bool = True, exist_ok: bool = True) -> None:
        """Create the folder locally; object stores have no folders (nothing to do)."""
        if self._local:
            Path(self._s).mkdir(parents=parents, exist_ok=exist_ok)


def as_location(where: str | os.PathLike[str] | Location) -> Location:
    """``where`` as a :class:`Location` (itself when it already is one)."""
    return where if isinstance(where, Location) else Location(where)


def _resolve(loc: Location) -> None:
    """Set ``loc``'s filesystem and native path (once per object)."""
    if loc._local:
        from fsspec.implementations.local import LocalFileSystem

        loc._fs, loc._path = LocalFileSystem(), os.path.abspath(loc._s)
        return
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(loc._s)
    except ImportError as err:
        extra = _EXTRAS.get(loc.protocol)
        hint = f"pip install 'ckptsel[{extra}]' (or pip install {_PACKAGES[extra]})" if extra else "install the fsspec package for it"
        raise CkptselError(f"{loc}: {loc.protocol}:// needs an extra package: {hint}") from err
    except ValueError as err:
        raise CkptselError(f"{loc}: unknown storage protocol {loc.protocol!r} ({err})") from err
    loc._fs, loc._path = fs, path


def temp_file(folder: str | os.PathLike[str], prefix: str, suffix: str = ".tmp") -> tuple[int, str]:
    """``(fd, path)`` of a new, empty file in ``folder`` under a fresh random name, created
    with mode ``0o666`` less the umask, as ``open`` would (``tempfile.mkstemp`` makes it 0600,
    and the renamed result kept that whatever the user's umask)."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name for {prefix}*{suffix}")


def temp_dir(folder: str | os.PathLike[str], prefix: str, like: str | os.PathLike[str] | None = None) -> str:
    """A new folder in ``folder`` under a fresh random name, created with mode ``0o777`` less
    the umask (``tempfile.mkdtemp`` makes it 0700); when ``like`` is an existing folder, with
    ``like``'s mode instead, so a folder that replaces it (a results folder swapped in) never
    narrows (nor widens) who may read it."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}")
        try:
            os.mkdir(path, 0o777)
        except FileExistsError:
            continue
        if like is not None and os.path.isdir(like):
            os.chmod(path, os.stat(like).st_mode & 0o7777)
        return path
    raise FileExistsError(f"{folder}: no free temporary name for {prefix}*")


def _write_local(path: str, data: bytes, if_absent: bool) -> None:
    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = temp_file(folder, prefix=f".{os.path.basename(path)}.")
    except OSError as err:  # read-only folder, a file where a folder should be, ...
        raise CkptselError(f"{path}: cannot write here ({err.strerror or err})") from err
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        if if_absent:
            try:
                os.link(tmp, path)  # atomic create-only
            except FileExistsError as err:
                raise WriteConflict(path) from err
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise CkptselError(f"{path}: cannot write ({err.strerror or err})") from err
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _s3_put(loc: Location, data: bytes, if_absent: bool, if_tag: str | None) -> None:
    """One PUT (s3fs sends a single ``put_object`` below 100 MiB), optionally conditional."""
    kwargs: dict[str, str] = {}
    if if_absent:
        kwargs["IfNoneMatch"] = "*"
    if if_tag is not None:
        kwargs["IfMatch"] = f'"{if_tag}"'
    try:
        loc.fs.pipe_file(loc.fs_path, data, **kwargs)
    except FileExistsError as err:  # 412 on If-None-Match
        raise WriteConflict(str(loc)) from err
    except FileNotFoundError as err:  # If-Match on a key that is gone
        if if_tag is None:
            raise
        raise WriteConflict(str(loc)) from err
    except OSError as err:
        response = getattr(err.__cause__, "response", None) or {}
        code = response.get("Error", {}).get("Code", "")
        if kwargs and (code in ("PreconditionFailed", "ConditionalRequestConflict") or "412" in str(err)):
            raise WriteConflict(str(loc)) from err
        raise


def _s3_get(loc: Location) -> tuple[bytes, str] | None:
    """One GET: the body and the ETag of exactly those bytes."""
    import fsspec.asyn

    fs = loc.fs
    bucket, key, _ = fs.split_path(loc.fs_path)
    try:
        resp = fs.call_s3("get_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return None

    async def _read(body: Any) -> bytes:
        async with body:
            return await body.read()

    data = fsspec.asyn.sync(fs.loop, _read, resp["Body"])
    return data, str(resp["ETag"]).strip('"')


def safe_join(root: str | os.PathLike[str], name: str, source: object = None) -> Path:
    """The local path of the ``/``-separated relative ``name`` (an object key below a listed
    folder, a manifest entry, an archive member) inside ``root``, or a one-line
    :class:`CkptselError` naming it (and ``source``, where it came from) when it would land
    anywhere else: empty, absolute (``/x``; ``C:x`` on Windows), a ``.``/``..``/empty part, a
    backslash or NUL byte, or a path through a symlink that leads out of ``root``.

    The one guard every local path built from a remote name goes through: a bucket or a
    downloaded results folder must never write (or read) outside ckptsel's own folder."""
    where = f"{source}: " if source is not None else ""
    parts = name.split("/") if isinstance(name, str) else []
    bad = not parts or any(p in ("", ".", "..") for p in parts) or "\\" in name or "\0" in name or (os.name == "nt" and ":" in name)
    if bad:
        raise CkptselError(
            f"{where}refusing the name {name!r}: it would be written outside {root} (absolute, '..', '.', an empty part or a backslash)"
        )
    base = os.path.realpath(root)
    path = os.path.realpath(os.path.join(base, *parts))
    if os.path.commonpath([base, path]) != base or path == base:
        raise CkptselError(f"{where}refusing the name {name!r}: it leads out of {root} (through a symlink)")
    return Path(root).joinpath(*parts)


def matches(rel: str, patterns: tuple[str, ...]) -> bool:
    """Whether the ``/``-separated relative path ``rel`` matches one of ``patterns``
    (``fnmatch``; a pattern without ``/`` is matched against the file name)."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel if "/" in p else name, p) for p in patterns)
