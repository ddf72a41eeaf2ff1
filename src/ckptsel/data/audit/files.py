"""The audit over question files: reading a file's questions, and writing ``audit.json`` and
``audit.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ckptsel._util.io import read_json_records, write_text
from ckptsel.data.audit.findings import AuditResult
from ckptsel.data.audit.run import audit_pools
from ckptsel.data.tasks import QUESTION_FIELDS
from ckptsel.errors import CkptselError


def read_questions(path: Path) -> list[str]:
    """Question strings of a JSON-list or JSON-Lines file: per file, the first of
    query/question/problem/instruction present in its first record (all records need it)."""
    path = Path(path)
    data = read_json_records(path)
    records = list(zip(data.locations, data.records, strict=True))
    if not records:
        raise CkptselError(f"{path}: no records")
    loc0, first = records[0]
    if not isinstance(first, dict):
        raise CkptselError(f"{path}, {loc0}: expected a JSON object")
    fld = next((f for f in QUESTION_FIELDS if f in first), None)
    if fld is None:
        raise CkptselError(
            f"{path}, {loc0}: no question field (expected one of {', '.join(QUESTION_FIELDS)}; fields present: {sorted(first)})"
        )
    out = []
    for loc, rec in records:
        value = rec.get(fld) if isinstance(rec, dict) else None
        if not isinstance(value, str):
            raise CkptselError(f"{path}, {loc}: missing or non-string question field {fld!r}")
        out.append(value)
    return out


def audit_files(files: dict[str, Path], **kwargs: Any) -> AuditResult:
    """:func:`audit_pools` over question files (``{"train": path, ...}``)."""
    return audit_pools({name: read_questions(p) for name, p in files.items()}, **kwargs)


def write_audit(result: AuditResult, out_dir: Path) -> None:
    """Write ``audit.json`` and ``audit.md`` atomically."""
    out_dir = Path(out_dir)
    write_text(out_dir / "audit.json", json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n")
    write_text(out_dir / "audit.md", result.to_markdown())
