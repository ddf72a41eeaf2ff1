"""Inflate limits for compressed harness logs (inspect ``.eval`` ZIPs, lm-eval ``.jsonl.gz``):
a log that inflates far past its compressed size is refused in one line as a possible
compression bomb, while it is read (counted as it inflates: sizes that headers declare are not
trusted), before it fills the memory.

A stream (a ZIP member, a gzip file) inflates to at most :data:`INFLATE_RATIO` times its
compressed size, never refused below :data:`INFLATE_FLOOR` (small members of real logs reach
10x) and never past :data:`INFLATE_MAX_BYTES`; ``$CKPTSEL_INFLATE_MAX_RATIO`` and
``$CKPTSEL_INFLATE_MAX_BYTES`` change the ratio and the cap.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

INFLATE_RATIO = 100
INFLATE_FLOOR = 16 << 20
INFLATE_MAX_BYTES = 2 << 30
RATIO_ENV = "CKPTSEL_INFLATE_MAX_RATIO"
MAX_BYTES_ENV = "CKPTSEL_INFLATE_MAX_BYTES"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    if not raw.strip().isdigit() or int(raw) < 1:
        raise CkptselError(f"${name}={raw!r}: expected a positive integer")
    return int(raw)


def inflate_limit(compressed: int) -> int:
    """The most bytes ``compressed`` bytes may inflate to (see the module docstring)."""
    ratio = _env_int(RATIO_ENV, INFLATE_RATIO)
    cap = _env_int(MAX_BYTES_ENV, INFLATE_MAX_BYTES)
    return min(cap, max(INFLATE_FLOOR, ratio * int(compressed)))


class _Bounded(io.RawIOBase):
    """A binary stream that counts what it inflates and stops at ``limit`` bytes."""

    def __init__(self, stream: Any, limit: int, path: Path, compressed: int) -> None:
        self.stream, self.limit, self.path, self.compressed = stream, limit, path, compressed
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self.stream.readinto(buffer)
        self.size += n or 0
        if self.size > self.limit:
            raise CkptselError(
                f"{self.path}: inflates to more than {self.limit} bytes ({self.compressed} "
                f"compressed): refused as a possible gzip bomb (${RATIO_ENV}, ${MAX_BYTES_ENV} "
                "raise the limits)"
            )
        return n

    def close(self) -> None:
        self.stream.close()
        super().close()


def open_gzip_text(path: Path) -> io.TextIOWrapper:
    """``path`` (gzip) opened as UTF-8 text that stops with one line (:class:`CkptselError`)
    once it has inflated past :func:`inflate_limit` of the file's size."""
    import gzip

    compressed = Path(path).stat().st_size
    raw = _Bounded(gzip.open(path, "rb"), inflate_limit(compressed), Path(path), compressed)
    return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8")
