"""What checkpoint a unit's rows were measured from, kept in the unit file itself.

``measure`` (and ``watch``) stamps every unit it writes with a :class:`CheckpointStamp`, in
the unit's Parquet key-value metadata under :data:`CHECKPOINT_KEY` (written in the same
atomic write as the rows, beside the provenance of :mod:`ckptsel.records.provenance`), as
JSON::

    {"weights": "sha256:<hex>", "run_final_step": 36, "run_complete": true,
     "files": "sha256:<hex>", "file_digests": {"adapter_config.json": "<16 hex>", ...}}

``weights`` is the fingerprint of the checkpoint's weights
(:func:`ckptsel.train.weights_fingerprint`); ``files`` that of every other file that defines
its function (adapter and model configs, generation config, tokenizer and its template; an
adapter's base model, its files and weights: :func:`ckptsel.train.function_digests`), and
``file_digests`` each of those files' digest, shortened (to name what changed). ``measure``
refuses to reuse or overwrite the records of a step whose weights or files on disk differ from
those recorded (a replaced checkpoint, an edited config, another run under the same trajectory
name) unless told ``--replace``. Units stamped before ``files`` existed (weights only) are
compared on their weights alone, and gain ``files`` at their next write. ``run_final_step`` is
the largest checkpoint step the run folder held when the unit was measured (``watch``: only
a checkpoint whose marker, or ``--until-step``, says it is the last; ``None`` while the run
still trains, so a provisional selection stays possible), and ``run_complete`` whether that
checkpoint said it was the run's last (``None``: nothing said). The analysis refuses a trajectory whose records
stop before the largest ``run_final_step`` any of its units declares
(:func:`declared_final_steps`): the final checkpoint would be the wrong one. Units without a
stamp (older records, ``ingest``, the Trainer callback) constrain nothing.
:func:`~ckptsel.records.store.compact` keeps the stamps in the single file's metadata
(:data:`SINGLE_FILE_KEY`, per trajectory: the fingerprint per step and the declared final).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.locations import Location, as_location
from ckptsel.records import cache
from ckptsel.records.codec import read_schema
from ckptsel.records.units import list_units, single_file, unit_path

CHECKPOINT_KEY = b"ckptsel.checkpoint"
SINGLE_FILE_KEY = b"ckptsel.checkpoint.trajectories"
STAMPED_KINDS = ("generations", "nll")


@dataclass(frozen=True)
class CheckpointStamp:
    """What one unit was measured from: the weights' fingerprint, and what the run folder said
    about its final checkpoint then (see the module docstring)."""

    weights: str | None = None
    run_final_step: int | None = None
    run_complete: bool | None = None
    files: str | None = None  # the other files' fingerprint (None: stamped before it existed)
    file_digests: tuple[tuple[str, str], ...] = ()  # (name, short digest), sorted

    def metadata(self) -> dict[bytes, bytes]:
        """The unit file's key-value metadata."""
        blob: dict[str, Any] = {"weights": self.weights, "run_final_step": self.run_final_step, "run_complete": self.run_complete}
        if self.files:
            blob["files"] = self.files
            blob["file_digests"] = dict(self.file_digests)
        return {CHECKPOINT_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")}


def parse_stamp(blob: bytes | None) -> CheckpointStamp | None:
    """A unit's stamp from its metadata value (``None``: none, or unreadable)."""
    if not blob:
        return None
    try:
        data = json.loads(blob)
        final = data.get("run_final_step")
        complete = data.get("run_complete")
        return CheckpointStamp(
            str(data["weights"]) if data.get("weights") else None,
            None if final is None else int(final),
            None if complete is None else bool(complete),
            str(data["files"]) if data.get("files") else None,
            _digests(data.get("file_digests")),
        )
    except (ValueError, TypeError, AttributeError, KeyError):
        return None  # metadata is never a source of truth: unreadable reads as unstamped


def short_digests(digests: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """``{name: "sha256:<hex>"}`` as a stamp's ``file_digests`` (16 hex digits each)."""
    return tuple(sorted((str(k), str(v).removeprefix("sha256:")[:16]) for k, v in digests.items()))


def _digests(blob: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(blob, dict):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in blob.items()))


def changed_files(recorded: CheckpointStamp, now: CheckpointStamp) -> list[str]:
    """The names of the files whose digest differs between two stamps (added and removed
    ones included; ``[]`` when either stamp does not name its files)."""
    a, b = dict(recorded.file_digests), dict(now.file_digests)
    if not a or not b:
        return []
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def _single_entries(records_dir: Location, kind: str) -> dict[str, Any]:
    """The single file's stamps per trajectory (``{}`` without one)."""
    single = single_file(records_dir, kind)
    if single is None:
        return {}
    try:
        data = json.loads((read_schema(single).metadata or {}).get(SINGLE_FILE_KEY, b"{}"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def recorded_stamps(records_dir: Path | Location | str, trajectory: str, steps: Iterable[int]) -> dict[int, list[CheckpointStamp]]:
    """Per step of ``steps``: the stamps ``trajectory``'s records hold for it (its units of
    every kind, else the single file's; a step whose records carry no fingerprint is left
    out)."""
    records_dir = as_location(records_dir)
    out: dict[int, list[CheckpointStamp]] = {}
    singles = {kind: _single_entries(records_dir, kind).get(trajectory, {}) for kind in STAMPED_KINDS}
    for step in steps:
        for kind in STAMPED_KINDS:
            path = unit_path(records_dir, kind, trajectory, step)
            if path.is_file():
                stamp = parse_stamp((read_schema(path).metadata or {}).get(CHECKPOINT_KEY))
            else:
                stamp = _single_stamp(singles[kind], step)
            if stamp is not None and stamp.weights:
                out.setdefault(int(step), []).append(stamp)
    return out


def _single_stamp(entry: Any, step: int) -> CheckpointStamp | None:
    """One step's stamp from a single file's trajectory entry (``None``: none there)."""
    if not isinstance(entry, dict):
        return None
    weights = (entry.get("weights") or {}).get(str(int(step)))
    files = (entry.get("files") or {}).get(str(int(step)))
    digests = _digests((entry.get("file_digests") or {}).get(str(int(step))))
    return CheckpointStamp(weights, entry.get("run_final_step"), None, files, digests) if weights else None


def read_stamps(records_dir: Path | Location | str, kind: str) -> dict[str, dict[int, CheckpointStamp]]:
    """Every unit's stamp of ``kind``, per trajectory and step (the single file's per-step
    fingerprints first, superseded by units; unstamped units are left out)."""
    records_dir = as_location(records_dir)
    out: dict[str, dict[int, CheckpointStamp]] = {}
    for traj, entry in _single_entries(records_dir, kind).items():
        for step in ((entry or {}).get("weights") or {}) if isinstance(entry, dict) else {}:
            stamp = _single_stamp(entry, int(step))
            if stamp is not None:
                out.setdefault(str(traj), {})[int(step)] = stamp
    units = list_units(records_dir, kind)
    # from the packs' footers, else the units' (as :func:`ckptsel.records.read_provenance`)
    metas = cache.units_metadata(records_dir, kind, units)
    for u, meta in zip(units, metas, strict=True):
        stamp = parse_stamp(meta.get(CHECKPOINT_KEY))
        if stamp is not None:
            out.setdefault(u.trajectory, {})[u.step] = stamp
        else:
            out.get(u.trajectory, {}).pop(u.step, None)
    return out


def single_file_stamps(records_dir: Path | Location | str, kind: str) -> dict[bytes, bytes]:
    """What :func:`~ckptsel.records.store.compact` writes into a single file's metadata: per
    trajectory, the fingerprint of each step and the largest declared final step."""
    blob: dict[str, Any] = {}
    for traj, stamps in sorted(read_stamps(records_dir, kind).items()):
        finals = [s.run_final_step for s in stamps.values() if s.run_final_step is not None]
        blob[traj] = {
            "weights": {str(step): s.weights for step, s in sorted(stamps.items()) if s.weights},
            "run_final_step": max(finals) if finals else None,
        }
        files = {str(step): s for step, s in sorted(stamps.items()) if s.weights and s.files}
        if files:  # stamps of before file fingerprints: the single file as it always was
            blob[traj]["files"] = {k: s.files for k, s in files.items()}
            blob[traj]["file_digests"] = {k: dict(s.file_digests) for k, s in files.items()}
    return {SINGLE_FILE_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")} if blob else {}


def declared_final_steps(records_dir: Path | Location | str) -> dict[str, int]:
    """Per trajectory, the largest final step its generation units declare (trajectories whose
    units declare none are left out); read once per state of the records
    (:mod:`ckptsel.records.cache.memo`)."""
    return cache.cached(records_dir, "declared-finals", lambda: _declared(records_dir), _encode, _decode)


def _declared(records_dir: Path | Location | str) -> dict[str, int]:
    out = {}
    for traj, stamps in read_stamps(records_dir, "generations").items():
        finals = [s.run_final_step for s in stamps.values() if s.run_final_step is not None]
        if finals:
            out[traj] = max(finals)
    return out


def _encode(finals: dict[str, int]) -> dict[str, np.ndarray]:
    return {"finals": cache.json_array(finals)}


def _decode(arrays) -> dict[str, int]:
    return {str(k): int(v) for k, v in cache.array_json(arrays["finals"]).items()}
