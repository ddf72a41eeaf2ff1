"""inspect ``.eval`` logs built by hand (a ZIP of Zstandard or deflate members, as inspect writes
them) from the JSON log in ``tests/data/harness_logs/inspect``."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pyarrow as pa

[JSON_LOG] = sorted((Path(__file__).parent / "data" / "harness_logs" / "inspect").glob("*.json"))


def zstd(data: bytes) -> bytes:
    return pa.Codec("zstd").compress(data, asbytes=True)


def write_eval(path: Path, members: dict[str, bytes], method: int = 93) -> Path:
    """An inspect-style ``.eval``: each member compressed with ``method`` (93: Zstandard, as
    inspect writes them; 8: deflate), the ZIP headers written here (zipfile cannot write 93)."""
    body, central = bytearray(), bytearray()
    for name, data in members.items():
        raw = zstd(data) if method == 93 else zlib.compress(data, 9)[2:-4]  # raw deflate
        crc, n, off = zlib.crc32(data), name.encode(), len(body)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 63, 0, method, 0, 0x21, crc, len(raw), len(data), len(n), 0) + n + raw
        central += (
            struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 63, 63, 0, method, 0, 0x21, crc, len(raw), len(data), len(n), 0, 0, 0, 0, 0, off)
            + n
        )
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members), len(central), len(body), 0)
    path.write_bytes(bytes(body + central + eocd))
    return path


def eval_members(pad_sample: int = 0) -> dict[str, bytes]:
    """The JSON log's header and samples as ``.eval`` members; the first sample padded with
    ``pad_sample`` spaces (still valid JSON: without a limit it reads as the same log)."""
    log = json.loads(JSON_LOG.read_text())
    samples = log.pop("samples")
    out = {"header.json": json.dumps(log).encode()}
    for k, s in enumerate(samples):
        text = json.dumps(s).encode()
        if k == 0:
            text += b" " * pad_sample
        out[f"samples/{s['id']}_epoch_1.json"] = text
    return out
