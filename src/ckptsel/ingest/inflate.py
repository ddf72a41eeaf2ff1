"""Inflate limits for compressed harness logs (inspect ``.eval`` ZIPs, lm-eval ``.jsonl.gz``):
a log that inflates far past its compressed size is refused in one line as a possible
compression bomb, while it is read (counted as it inflates: sizes that headers declare are not
trusted), before it fills the memory.

A stream (a ZIP member, a gzip file) inflates to at most :data:`INFLATE_RATIO` times its
compressed size, never refused below :data:`INFLATE_FLOOR` (small members of real logs reach
10x) and never past :data:`INFLATE_MAX_BYTES`; ``$CKPTSEL_INFLATE_MAX_RATIO`` and
``$CKPTSEL_INFLATE_MAX_BYTES`` change the ratio and the cap.

Every log reader also refuses a single record longer than :data:`MAX_LINE_BYTES` (an lm-eval
samples line, an inspect sample or header, a lighteval details cell; ``$CKPTSEL_MAX_LINE_BYTES``
changes it) before parsing it: parsed into Python objects, one JSON line takes about ten times
its size (a 300 MB line: 3.3 GB), and no real log has one sample near the limit.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ckptsel.errors import CkptselError

INFLATE_RATIO = 100
INFLATE_FLOOR = 16 << 20
INFLATE_MAX_BYTES = 2 << 30
RATIO_ENV = "CKPTSEL_INFLATE_MAX_RATIO"
MAX_BYTES_ENV = "CKPTSEL_INFLATE_MAX_BYTES"
MAX_LINE_BYTES = 64 << 20
LINE_ENV = "CKPTSEL_MAX_LINE_BYTES"


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


def line_limit() -> int:
    """The longest single record a log reader parses (:data:`MAX_LINE_BYTES`, or
    ``$CKPTSEL_MAX_LINE_BYTES``)."""
    return _env_int(LINE_ENV, MAX_LINE_BYTES)


def check_record_size(size: int, where: str) -> None:
    """One line when a record of ``size`` bytes (``where``: the file and line or member) is
    past :func:`line_limit`."""
    limit = line_limit()
    if size > limit:
        raise CkptselError(f"{where}: a single record of more than {limit} bytes: refused before parsing (${LINE_ENV} raises the limit)")


def bounded_lines(fh: IO[str], path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text file, each line read at most :func:`line_limit`
    characters at a time: a longer line stops with one line, never read whole."""
    limit = line_limit()
    n = 0
    while line := fh.readline(limit + 1):
        n += 1
        if len(line) > limit and not (len(line) == limit + 1 and line.endswith("\n")):
            check_record_size(limit + 1, f"{path}:{n}")
        yield n, line
