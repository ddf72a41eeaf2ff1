"""What checkpoint a unit's rows were measured from, kept in the unit file itself.

``measure`` (and ``watch``) stamps every unit it writes with a :class:`CheckpointStamp`, in
the unit's Parquet key-value metadata under :data:`CHECKPOINT_KEY` (written in the same
atomic write as the rows, beside the provenance of :mod:`ckptsel.records.provenance`), as
JSON::

    {"weights": "sha256:<hex>", "run_final_step": 36, "run_complete": true}

``weights`` is the fingerprint of the checkpoint's weights
(:func:`ckptsel.train.weights_fingerprint`): ``measure`` refuses to reuse or overwrite the
records of a step whose weights on disk differ from those recorded (a replaced checkpoint,
another run under the same trajectory name) unless told ``--replace``. ``run_final_step`` is
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.locations import Location, as_location
from ckptsel.records import memo
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

    def metadata(self) -> dict[bytes, bytes]:
        """The unit file's key-value metadata."""
        blob = {
            "weights": self.weights,
            "run_final_step": self.run_final_step,
            "run_complete": self.run_complete,
        }
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
        )
    except (ValueError, TypeError, AttributeError, KeyError):
        return None  # metadata is never a source of truth: unreadable reads as unstamped


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


def recorded_weights(
    records_dir: Path | Location | str, trajectory: str, steps: Iterable[int]
) -> dict[int, set[str]]:
    """Per step of ``steps``: the weight fingerprints ``trajectory``'s records hold for it
    (its units of every kind, else the single file's; a step whose records carry none is
    left out)."""
    records_dir = as_location(records_dir)
    out: dict[int, set[str]] = {}
    singles = {
        kind: _single_entries(records_dir, kind).get(trajectory, {}) for kind in STAMPED_KINDS
    }
    for step in steps:
        for kind in STAMPED_KINDS:
            path = unit_path(records_dir, kind, trajectory, step)
            if path.is_file():
                stamp = parse_stamp((read_schema(path).metadata or {}).get(CHECKPOINT_KEY))
                weights = stamp.weights if stamp is not None else None
            else:
                weights = (singles[kind].get("weights") or {}).get(str(int(step)))
            if weights:
                out.setdefault(int(step), set()).add(str(weights))
    return out


def read_stamps(
    records_dir: Path | Location | str, kind: str
) -> dict[str, dict[int, CheckpointStamp]]:
    """Every unit's stamp of ``kind``, per trajectory and step (the single file's per-step
    fingerprints first, superseded by units; unstamped units are left out)."""
    records_dir = as_location(records_dir)
    out: dict[str, dict[int, CheckpointStamp]] = {}
    for traj, entry in _single_entries(records_dir, kind).items():
        final = entry.get("run_final_step") if isinstance(entry, dict) else None
        for step, weights in ((entry or {}).get("weights") or {}).items():
            out.setdefault(str(traj), {})[int(step)] = CheckpointStamp(weights, final)
    units = list_units(records_dir, kind)
    # footers only, on a few threads (as :func:`ckptsel.records.read_provenance` reads them)
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(units)))) as pool:
        metas = list(pool.map(lambda u: read_schema(u.path).metadata or {}, units))
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
    return (
        {SINGLE_FILE_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")} if blob else {}
    )


def declared_final_steps(records_dir: Path | Location | str) -> dict[str, int]:
    """Per trajectory, the largest final step its generation units declare (trajectories whose
    units declare none are left out); read once per state of the records
    (:mod:`ckptsel.records.memo`)."""
    return memo.cached(
        records_dir, "declared-finals", lambda: _declared(records_dir), _encode, _decode
    )


def _declared(records_dir: Path | Location | str) -> dict[str, int]:
    out = {}
    for traj, stamps in read_stamps(records_dir, "generations").items():
        finals = [s.run_final_step for s in stamps.values() if s.run_final_step is not None]
        if finals:
            out[traj] = max(finals)
    return out


def _encode(finals: dict[str, int]) -> dict[str, np.ndarray]:
    return {"finals": memo.json_array(finals)}


def _decode(arrays) -> dict[str, int]:
    return {str(k): int(v) for k, v in memo.array_json(arrays["finals"]).items()}
