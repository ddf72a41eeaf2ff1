"""The per-user secret key that binds ckptsel's caches, so that editing one cache file (and
recomputing any digest it carries) cannot forge an entry: the conformance verdicts
(:mod:`ckptsel.measure.conformance`), the trajectories' packs (:mod:`ckptsel.records.cache.pack`) and
the array memo (:mod:`ckptsel.records.cache.memo`) each carry an HMAC-SHA256 under this key, and an
entry whose HMAC does not hold is not trusted (checked or computed again).

The key lives outside every cache folder: ``$CKPTSEL_KEY_FILE``, else
``$XDG_CONFIG_HOME/ckptsel/key``, else ``~/.config/ckptsel/key``: 32 random bytes
(:func:`secrets.token_bytes`), created on first use with mode 0600 (its folder 0700). A key
file that is there but not a key (a folder, not 32 bytes, readable or writable by others,
unreadable) is refused in one line naming it, never replaced; where none can be created (a
read-only home) this process uses a key of its own, so nothing cached earlier is trusted and
nothing it caches is trusted by another process. A hash is not a signature: whoever can read
the key can forge, which is why it is kept 0600 in the user's own folder."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from ckptsel.errors import CkptselError

__all__ = ["KEY_BYTES", "KEY_ENV", "MAC_PREFIX", "key_path", "mac", "mac_holds", "user_key"]

KEY_ENV = "CKPTSEL_KEY_FILE"
KEY_BYTES = 32
MAC_PREFIX = "hmac-sha256:"
_PROCESS_KEY: list[bytes] = []  # the key of a process that could create none


def key_path() -> Path:
    """Where the key is: ``$CKPTSEL_KEY_FILE``, else ``$XDG_CONFIG_HOME/ckptsel/key``, else
    ``~/.config/ckptsel/key``."""
    if os.environ.get(KEY_ENV):
        return Path(os.environ[KEY_ENV]).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "ckptsel" / "key"


def _refuse(path: Path, what: str) -> CkptselError:
    return CkptselError(
        f"{path}: the key of ckptsel's caches {what}; delete it to make a new one (cached "
        f"verdicts and packs are then checked again), or set {KEY_ENV} to another file"
    )


def _read_key(path: Path) -> bytes:
    st = os.stat(path)  # FileNotFoundError: none yet
    if stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")
    if st.st_mode & 0o077 and os.name == "posix":  # (Windows has no such mode bits)
        raise _refuse(path, f"is open to other users (mode {stat.S_IMODE(st.st_mode):04o}; chmod 600 it)")
    try:
        with open(path, "rb") as f:
            data = f.read(KEY_BYTES + 1)
    except OSError as err:
        raise _refuse(path, f"cannot be read ({err.strerror or err})") from None
    if len(data) != KEY_BYTES:
        raise _refuse(path, f"holds {len(data)}{'+' if len(data) > KEY_BYTES else ''} bytes, not {KEY_BYTES} (truncated, or not ckptsel's)")
    return data


def _create_key(path: Path) -> bytes:
    """A new key at ``path`` (0600, written whole before it appears: a process that reads it
    at the same time sees none or all of it; of two that create at once, the first wins)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process made it first: its key is the key
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:  # a read-only home, say: a key for this process alone
        if not _PROCESS_KEY:
            _PROCESS_KEY.append(secrets.token_bytes(KEY_BYTES))
        return _PROCESS_KEY[0]
    return _read_key(path)


def user_key() -> bytes:
    """The user's key (created on first use), or :class:`CkptselError` with one line naming
    a key file that is not one."""
    path = key_path()
    try:
        try:
            return _read_key(path)
        except FileNotFoundError:
            return _create_key(path)
    except OSError as err:  # a path through a file, a link to nowhere, a name too long, ...
        raise _refuse(path, f"cannot be read ({err.strerror or err})") from None


def mac(*parts: bytes | memoryview) -> str:
    """``hmac-sha256:<hex>`` of ``parts`` (one after the other) under the user's key."""
    h = hmac.new(user_key(), digestmod=hashlib.sha256)
    for part in parts:
        h.update(part)
    return MAC_PREFIX + h.hexdigest()


def mac_holds(tag: object, *parts: bytes | memoryview) -> bool:
    """Whether ``tag`` is :func:`mac` of ``parts`` (compared in constant time)."""
    expected = mac(*parts)  # a key file that is not one is refused even for a bad tag
    return isinstance(tag, str) and hmac.compare_digest(tag, expected)
