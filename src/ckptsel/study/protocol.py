"""A study's protocol frozen before training (pre-registration), and the check that it still holds.

The **protocol** is everything in the study file that decides choices and estimates: the parsed
TOML (pools, rules' budgets and permutations, seeds, interval method, configurations, …) less
the purely operational keys (:data:`OPERATIONAL`: where things are written, batch size, device,
the executor), plus the SHA-256 of every data file it names (``file`` / ``files`` keys; a
folder hashes its files in order). :func:`freeze` writes it with its SHA-256 and the time to
``<study file>.protocol.json`` beside the study file (a file to commit or share: the
pre-registration); :func:`check_protocol` recomputes it and refuses, naming every difference, a
study changed after freezing, and a protocol file edited after the fact (its content no longer
matches its own hash). ``ckptsel run`` checks before every stage and hands the record to the
analysis, which copies it into the results folder and fixes its analysis settings
(:func:`protocol_analysis`); ``verify`` checks that chain. A study file at a URL has its
protocol beside it at the URL, and its data files are hashed as read through the store.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import tomllib

from ckptsel import defaults
from ckptsel._util.io import write_text
from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.errors import CkptselError
from ckptsel.study.configuration import resolve_path

PROTOCOL_SUFFIX = ".protocol.json"
PROTOCOL_SCHEMA = 1
# what an [analysis] table leaves out: the defaults the protocol then fixes
ANALYSIS_DEFAULTS: dict[str, Any] = {
    "permutations": defaults.PERMUTATIONS, "draws": defaults.DRAWS, "seed": defaults.SEED,
    "level": defaults.CONFIDENCE, "interval": defaults.INTERVAL, "budgets": list(defaults.BUDGETS),
}  # fmt: skip
# keys that do not decide choices or estimates: section -> keys (None: the whole section)
OPERATIONAL: dict[str, tuple[str, ...] | None] = {
    "executor": None,
    "log": None,  # experiment trackers (MLflow, W&B, Trackio)
    "measure": ("batch_size", "device"),
    "study": ("runs_dir", "records_dir", "results_dir"),
}


def protocol_path(study_file: str | Path | Location) -> Path | Location:
    """Where the frozen protocol of ``study_file`` lives: ``<study file>.protocol.json`` (a
    :class:`Location` beside a study file at a URL)."""
    if is_url(study_file):
        p = as_location(study_file)
        return p.parent / (p.name + PROTOCOL_SUFFIX)
    p = Path(study_file)
    return p.with_name(p.name + PROTOCOL_SUFFIX)


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _sha256(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _file_digest(path: Location) -> str:
    """SHA-256 of a file, or of a folder's files (relative names and contents, in order), the
    bytes read through the file's store."""
    h = hashlib.sha256()
    if path.is_dir():
        names = sorted(path.listing(), key=lambda rel: rel.split("/"))  # as Path sorts
        files = [(rel, path / rel) for rel in names]
    else:
        files = [(path.name, path)]
    for name, f in files:
        h.update(name.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _data_files(data: dict, root: Path | Location) -> dict[str, str]:
    """``{"section.key[i]": sha256}`` of every existing file named by a ``file``/``files`` key."""
    out = {}
    for section, table in data.items():
        for row, tab in enumerate(table if isinstance(table, list) else [table]):
            if not isinstance(tab, dict):
                continue
            where = f"{section}[{row}]" if isinstance(table, list) else section
            for key in ("file", "files"):
                names = tab.get(key)
                for i, name in enumerate([names] if isinstance(names, str) else names or []):
                    path = as_location(resolve_path(root, str(name)))
                    if path.exists():
                        out[f"{where}.{key}" + (f"[{i}]" if key == "files" else "")] = _file_digest(path)
    return out


def protocol_content(study_file: str | Path | Location) -> dict[str, Any]:
    """The protocol of ``study_file`` (module docstring): ``{"study": …, "data_files": …}``."""
    path = as_location(study_file)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise CkptselError(f"{path}: cannot read the study file ({err})") from err
    kept = {}
    for section, table in data.items():
        drop = OPERATIONAL.get(section, ())
        if drop is None:
            continue
        kept[section] = (
            {k: v for k, v in table.items() if k not in drop} if isinstance(table, dict) else table
        )
    root = path.parent if is_url(path) else path.local.resolve().parent
    return {"study": kept, "data_files": _data_files(data, root)}


def freeze(
    study_file: str | Path | Location, *, started: bool = False, force: bool = False
) -> dict[str, Any]:
    """Write the protocol of ``study_file`` with its SHA-256 and the time (UTC); ``started``
    records that work already existed (the protocol is then not "before training"). An existing
    protocol is kept unless ``force``."""
    out = protocol_path(study_file)
    if out.exists() and not force:
        old = json.loads(out.read_text(encoding="utf-8"))
        raise CkptselError(
            f"{out} exists (frozen at {old.get('frozen_at')}, hash {str(old.get('sha256'))[:12]}); "
            "a protocol is frozen once (--force replaces it, and says so in its time)"
        )
    protocol = protocol_content(study_file)
    record = {
        "schema": PROTOCOL_SCHEMA,
        "study_file": as_location(study_file).name,
        "frozen_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "before_training": not started,
        "protocol": protocol,
        "sha256": _sha256(protocol),
    }
    write_text(out, protocol_json(record))
    return record


def protocol_json(record: dict[str, Any]) -> str:
    """The bytes of a protocol file (also its copy in a results folder)."""
    return json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def read_protocol(path: str | Path | Location) -> dict[str, Any]:
    """A protocol file's record, checked: :class:`CkptselError` when it is unreadable or was
    edited after it was frozen (its content no longer hashes to its recorded SHA-256)."""
    path = as_location(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        stored, claimed = record["protocol"], record["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CkptselError(f"{path}: not a protocol file ({err})") from err
    if _sha256(stored) != claimed:
        raise CkptselError(
            f"{path}: the protocol file was edited after it was frozen (its content hashes to "
            f"{_sha256(stored)[:12]}, not the recorded {str(claimed)[:12]})"
        )
    return record


def protocol_analysis(record: dict[str, Any]) -> dict[str, Any]:
    """The analysis settings a frozen protocol fixes: its study's ``[analysis]`` table over
    :data:`ANALYSIS_DEFAULTS` (budgets as a sorted list without repeats)."""
    table = record["protocol"]["study"].get("analysis", {})
    out = {**ANALYSIS_DEFAULTS, **(table if isinstance(table, dict) else {})}
    out["budgets"] = sorted(set(out["budgets"]))
    return out


def analysis_differences(record: dict[str, Any], used: dict[str, Any]) -> list[str]:
    """``key: protocol -> used`` for every analysis setting (:func:`protocol_analysis`) that
    ``used`` (the same keys) does not hold as the protocol froze it."""
    fixed = protocol_analysis(record)
    used = {**used, "budgets": sorted(set(used["budgets"]))}
    return [f"analysis.{k}: {fixed[k]!r} -> {used[k]!r}" for k in fixed if fixed[k] != used[k]]


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def protocol_diff(before: dict, now: dict) -> list[str]:
    """``key: old -> new`` for every leaf that differs (added and removed keys included)."""
    a, b = _flat(before), _flat(now)
    return [
        f"{k}: {json.dumps(a.get(k, '<absent>'))} -> {json.dumps(b.get(k, '<absent>'))}"
        for k in sorted(set(a) | set(b))
        if a.get(k, "<absent>") != b.get(k, "<absent>")
    ]


def check_protocol(
    study_file: str | Path | Location, overrides: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The frozen protocol record of ``study_file`` when it still holds, None when the study is
    not pre-registered; :class:`CkptselError` naming the differences when the study changed
    after freezing, when the protocol file was edited after the fact, or when ``overrides``
    (``SECTION.KEY=VALUE``, ``run --set``) touch a protocol key."""
    path = protocol_path(study_file)
    if not path.exists():
        if not as_location(study_file).is_file():
            raise CkptselError(f"study file not found: {study_file}")
        return None
    for o in overrides:
        section, _, key = o.split("=", 1)[0].strip().partition(".")
        drop = OPERATIONAL.get(section, ())
        if drop is not None and key not in drop:
            raise CkptselError(
                f"--set {o}: {study_file} has a frozen protocol ({path.name}); only operational "
                f"keys may be overridden ({', '.join(_operational_keys())})"
            )
    record = read_protocol(path)
    claimed = record["sha256"]
    diffs = protocol_diff(record["protocol"], protocol_content(study_file))
    if diffs:
        raise CkptselError(
            f"{study_file}: the study differs from its protocol frozen at {record.get('frozen_at')} "
            f"(hash {claimed[:12]}):\n  " + "\n  ".join(diffs) + "\nundo the change (a "
            "pre-registered protocol is not changed after the fact)"
        )
    return record


def _operational_keys() -> list[str]:
    return [f"{s}.*" if keys is None else f"{s}.{k}" for s, keys in OPERATIONAL.items()
            for k in (keys or ("",))]  # fmt: skip


def protocol_status(record: dict[str, Any] | None) -> str:
    """One line for reports: frozen (when, hash, before training or not) or not pre-registered."""
    if record is None:
        return "not pre-registered"
    when = "before training" if record.get("before_training") else "after work had started"
    return f"protocol frozen at {record['frozen_at']} (hash {record['sha256'][:12]}), {when}"
