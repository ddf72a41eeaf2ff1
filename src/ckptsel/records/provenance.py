"""What measured the records: each unit's *provenance*, kept in the unit file itself.

A measured unit names what produced its rows: the engine and its version (``hf`` =
transformers, ``vllm``), the dtype, the attention implementation, the batch size and the device
kind (:data:`FIELDS`). It is stored in the unit's Parquet key-value metadata under
:data:`PROVENANCE_KEY` (written in the same atomic write as the rows), as JSON::

    {"measured_by": [<provenance>, ...], "conformance": [<verdict>, ...],
     "mixed": [<provenance>, ...]}

``measured_by`` lists the distinct provenances of the unit's rows (one, unless its items were
measured by different runs); ``conformance`` (when its rows say) lists the verdicts of the
conformance check they were measured under (:mod:`ckptsel.measure.conformance`: ``passed (6
items at batch size 4: ...; checked in this run, entry hmac-sha256:...)``, ``...; read from the
cache (keyed): checked <time>, entry hmac-sha256:...)`` or ``skipped by --no-conformance-check``) — a note beside the
provenance, never part of what must match (:func:`provenance_identity`); ``weights`` (when its
rows say), a note too, says how the checkpoint's weights got into the model or engine
(``loaded``, ``swapped in place, proven by 3 tensor checksums``, ``loaded afresh: <why>``,
``adapter on its base``); ``mixed`` is present only when ``measure --allow-mixed-engines``
wrote the unit into a trajectory recorded with other provenance, and lists every provenance
the trajectory then held. Readers never need it (the contract columns are unchanged); units
written by other producers (ingest, older versions) carry none and read as *unrecorded*.
:func:`~ckptsel.records.store.compact` keeps the provenance in the single file's metadata
(:data:`SINGLE_FILE_KEY`, per trajectory; the ``weights`` notes per step, as
``weights_by_step``, since they differ between a trajectory's checkpoints).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.locations import Location, as_location
from ckptsel.records import cache
from ckptsel.records.codec import read_schema
from ckptsel.records.units import list_units, single_file

PROVENANCE_KEY = b"ckptsel.provenance"
SINGLE_FILE_KEY = b"ckptsel.provenance.trajectories"
FIELDS = ("engine", "version", "dtype", "attention", "batch_size", "device")
# fields a provenance has only when they differ from what every older record implies, with the
# value implied: the prompt format (absent = alpaca, the only format before formats existed) and
# the HF decoder (absent = ckptsel's own loop), so older units keep their bytes
OPTIONAL_FIELDS = {"prompt_format": "alpaca", "decoder": "ckptsel"}
PROVENANCE_KINDS = ("generations", "nll")
NOTE = "conformance"  # the conformance verdict: carried beside the provenance, never compared
WEIGHTS_NOTE = "weights"  # how the weights got in ("loaded", "swapped in place, ..."): a note too
WEIGHTS_BY_STEP = "weights_by_step"  # the single file's form of it: {step: [notes]}


def canonical(provenance: dict[str, Any]) -> str:
    """One provenance as a canonical JSON string (the :data:`FIELDS`, in that order, then the
    conformance verdict when it has one): equal provenances give equal strings."""
    blob = _identity_fields(provenance)
    if provenance.get(NOTE) is not None:
        blob[NOTE] = str(provenance[NOTE])
    if provenance.get(WEIGHTS_NOTE) is not None:
        blob[WEIGHTS_NOTE] = str(provenance[WEIGHTS_NOTE])
    return json.dumps(blob, separators=(",", ":"))


def provenance_identity(provenance: dict[str, Any] | str) -> str:
    """What must match between rows of one trajectory: the canonical :data:`FIELDS` only (the
    conformance verdict left out)."""
    p = json.loads(provenance) if isinstance(provenance, str) else provenance
    return json.dumps(_identity_fields(p), separators=(",", ":"))


def _identity_fields(p: dict[str, Any]) -> dict[str, Any]:
    """The :data:`FIELDS` in order, then the :data:`OPTIONAL_FIELDS` a provenance has (the
    value older records imply is written as no field: an alpaca prompt format, ckptsel's
    decoder)."""
    blob = {k: p.get(k) for k in FIELDS}
    blob.update({k: p[k] for k, implied in OPTIONAL_FIELDS.items() if p.get(k) not in (None, implied)})
    return blob


def _verdicts(provenances: Iterable[str], note: str = NOTE) -> set[str]:
    return {str(v) for v in (json.loads(p).get(note) for p in provenances) if v is not None}


def describe(provenance: dict[str, Any] | str) -> str:
    """One provenance in words, e.g. ``hf 5.23.0, float32, sdpa attention, batch 16, cpu,
    prompt format alpaca`` (fields not known are left out; no prompt format is alpaca)."""
    p = json.loads(provenance) if isinstance(provenance, str) else provenance
    engine = " ".join(str(p[k]) for k in ("engine", "version") if p.get(k) is not None)
    parts = [engine or "unknown engine"]
    parts += [str(p["dtype"])] if p.get("dtype") else []
    parts += [f"{p['attention']} attention"] if p.get("attention") else []
    parts += [f"batch {p['batch_size']}"] if p.get("batch_size") is not None else []
    parts += [str(p["device"])] if p.get("device") else []
    parts += [f"decoder {p['decoder']}"] if p.get("decoder") not in (None, OPTIONAL_FIELDS["decoder"]) else []
    parts += [f"prompt format {p.get('prompt_format') or 'alpaca'}"]
    return ", ".join(parts)


@dataclass(frozen=True)
class UnitProvenance:
    """What one unit records: the provenances of its rows and what it knowingly mixed with
    (canonical strings, sorted)."""

    measured_by: tuple[str, ...]
    mixed: tuple[str, ...] = ()
    conformance: tuple[str, ...] = ()
    weights: tuple[str, ...] = ()  # how the weights got in (a note, like ``conformance``)

    def metadata(self) -> dict[bytes, bytes]:
        """The unit file's key-value metadata."""
        blob: dict[str, Any] = {"measured_by": [json.loads(p) for p in self.measured_by]}
        if self.conformance:
            blob[NOTE] = list(self.conformance)
        if self.weights:
            blob[WEIGHTS_NOTE] = list(self.weights)
        if self.mixed:
            blob["mixed"] = [json.loads(p) for p in self.mixed]
        return {PROVENANCE_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")}


def unit_provenance(
    measured_by: Iterable[str], mixed: Iterable[str] = (), conformance: Iterable[str] = (), weights: Iterable[str] = ()
) -> UnitProvenance:
    """A :class:`UnitProvenance` from canonical strings (deduplicated, sorted): the
    conformance verdicts in ``measured_by`` go to ``conformance``, beside ``conformance``, and
    how the weights got in to ``weights``, beside ``weights``."""
    measured_by, mixed = list(measured_by), list(mixed)
    return UnitProvenance(
        tuple(sorted({provenance_identity(p) for p in measured_by})),
        tuple(sorted({provenance_identity(p) for p in mixed})),
        tuple(sorted(_verdicts(measured_by) | set(conformance))),
        tuple(sorted(_verdicts(measured_by, WEIGHTS_NOTE) | set(weights))),
    )


def _parse(blob: bytes | None) -> UnitProvenance | None:
    if not blob:
        return None
    try:
        data = json.loads(blob)
        return unit_provenance(
            (canonical(p) for p in data.get("measured_by", [])),
            (canonical(p) for p in data.get("mixed", [])),
            (str(v) for v in data.get(NOTE, [])),
            (str(v) for v in data.get(WEIGHTS_NOTE, [])),
        )
    except (ValueError, TypeError, AttributeError):
        return None  # metadata is never a source of truth: unreadable reads as unrecorded


@dataclass
class TrajectoryProvenance:
    """A trajectory's provenance for one kind: the distinct provenances its units record,
    what ``--allow-mixed-engines`` mixed, how many units record none, and the conformance
    verdicts its units record."""

    measured_by: set[str] = field(default_factory=set)
    mixed: set[str] = field(default_factory=set)
    units: int = 0
    unrecorded: int = 0
    conformance: set[str] = field(default_factory=set)
    weights: dict[int, set[str]] = field(default_factory=dict)  # step -> how its weights got in

    def add(self, unit: UnitProvenance | None, step: int | None = None) -> None:
        self.units += 1
        if unit is None or not unit.measured_by:
            self.unrecorded += 1
            return
        self.measured_by.update(unit.measured_by)
        self.mixed.update(unit.mixed)
        self.conformance.update(unit.conformance)
        if step is not None and unit.weights:
            self.weights.setdefault(int(step), set()).update(unit.weights)

    def add_weights(self, by_step: Any) -> None:
        """The single file's ``weights_by_step`` (``{"<step>": [note, ...]}``; anything else is
        ignored: metadata is never a source of truth)."""
        if not isinstance(by_step, dict):
            return
        for step, notes in by_step.items():
            if str(step).isdigit() and isinstance(notes, list):
                self.weights.setdefault(int(step), set()).update(str(n) for n in notes)


def read_provenance(
    records_dir: Path | Location | str, kind: str, trajectories: Sequence[str] | None = None
) -> dict[str, TrajectoryProvenance]:
    """Per trajectory (only ``trajectories`` when given), what its units of ``kind``
    (``generations`` or ``nll``) record, read from the units' footers and the single file's
    metadata."""
    wanted = None if trajectories is None else set(trajectories)
    out: dict[str, TrajectoryProvenance] = {}
    single = single_file(as_location(records_dir), kind)
    if single is not None:
        meta = read_schema(single).metadata or {}
        try:
            per_traj = json.loads(meta.get(SINGLE_FILE_KEY, b"{}"))
        except ValueError:
            per_traj = {}
        for traj, entry in per_traj.items():
            if (wanted is None or traj in wanted) and isinstance(entry, dict):
                unit = _parse(json.dumps(entry).encode("utf-8"))
                prov = out.setdefault(traj, TrajectoryProvenance())
                prov.add(unit)
                prov.add_weights(entry.get(WEIGHTS_BY_STEP))
    units = [u for u in list_units(as_location(records_dir), kind) if wanted is None or u.trajectory in wanted]
    # one pack footer per trajectory, or the units' footers (~0.5 ms each: ~1 s for the 1,563
    # units of a kind at paper scale) where a trajectory has no current pack
    metas = cache.units_metadata(records_dir, kind, units)
    for u, meta in zip(units, metas, strict=True):
        out.setdefault(u.trajectory, TrajectoryProvenance()).add(_parse(meta.get(PROVENANCE_KEY)), u.step)
    return out


def single_file_metadata(per_trajectory: dict[str, TrajectoryProvenance]) -> dict[bytes, bytes]:
    """What :func:`~ckptsel.records.store.compact` writes into a single file's metadata: each
    trajectory's provenance (trajectories that record none are left out), with how each
    step's weights got in (``weights_by_step``)."""
    blob = {}
    for traj, p in sorted(per_trajectory.items()):
        if not p.measured_by:
            continue
        entry = json.loads(unit_provenance(p.measured_by, p.mixed, p.conformance).metadata()[PROVENANCE_KEY])
        if p.weights:
            entry[WEIGHTS_BY_STEP] = {str(k): sorted(v) for k, v in sorted(p.weights.items())}
        blob[traj] = entry
    return {SINGLE_FILE_KEY: json.dumps(blob, separators=(",", ":")).encode("utf-8")} if blob else {}


def study_provenance(records_dir: Path | Location | str) -> dict[str, dict[str, TrajectoryProvenance]]:
    """Every trajectory's provenance, per kind (``generations``, ``nll``); the footers of
    thousands of units are read once per state of the records (:mod:`ckptsel.records.cache.memo`)."""
    return cache.cached(
        records_dir, "provenance", lambda: {kind: read_provenance(records_dir, kind) for kind in PROVENANCE_KINDS}, _encode, _decode
    )


def _encode(study: dict[str, dict[str, TrajectoryProvenance]]) -> dict[str, np.ndarray]:
    plain = {
        kind: {
            t: [
                sorted(p.measured_by),
                sorted(p.mixed),
                p.units,
                p.unrecorded,
                sorted(p.conformance),
                {str(k): sorted(v) for k, v in sorted(p.weights.items())},
            ]
            for t, p in per.items()
        }
        for kind, per in study.items()
    }
    return {"study": cache.json_array(plain)}


def _decode(arrays) -> dict[str, dict[str, TrajectoryProvenance]]:
    return {
        kind: {
            t: TrajectoryProvenance(set(m), set(x), u, n, set(c), {int(k): set(v) for k, v in w.items()})
            for t, (m, x, u, n, c, w) in per.items()
        }
        for kind, per in cache.array_json(arrays["study"]).items()
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


def provenance_lines(records_dir: Path | Location | str) -> tuple[list[str], list[str]]:
    """What ``analyze`` prints: one line per kind and provenance (how many trajectories), and
    the warnings: a kind measured with more than one provenance across the study, trajectories
    that mix (and whether ``--allow-mixed-engines`` allowed it)."""
    lines: list[str] = []
    warnings: list[str] = []
    for kind, per_traj in study_provenance(records_dir).items():
        counts: dict[str, int] = {}
        for p in per_traj.values():
            for prov in p.measured_by:
                counts[prov] = counts.get(prov, 0) + 1
        unrecorded = sum(1 for p in per_traj.values() if p.unrecorded)
        for prov, n in sorted(counts.items()):
            lines.append(f"{kind} measured by {describe(prov)} ({_count(n, 'trajectory')})")
        if unrecorded:
            lines.append(f"{kind}: {_count(unrecorded, 'trajectory')} with units that record no provenance")
        skipped = sorted(t for t, p in per_traj.items() if any(v.startswith("skipped") for v in p.conformance))
        if skipped:
            shown = ", ".join(skipped[:5]) + (" …" if len(skipped) > 5 else "")
            warnings.append(
                f"{kind} of {_count(len(skipped), 'trajectory')} ({shown}) were measured without "
                "the conformance check (--no-conformance-check): nothing checked that ckptsel's "
                "fast path is right for their model family"
            )
        if len(counts) > 1:
            mixing = sorted(t for t, p in per_traj.items() if len(p.measured_by) > 1)
            allowed = sum(1 for t in mixing if per_traj[t].mixed)
            shown = ", ".join(mixing[:5]) + (" …" if len(mixing) > 5 else "")
            where = f"; within {_count(len(mixing), 'trajectory')} ({shown}; {allowed} allowed by --allow-mixed-engines)" if mixing else ""
            differ = _differing(counts)
            warnings.append(
                f"the study's {kind} were measured with {len(counts)} different provenances "
                f"(they differ in {differ}){where}: results can differ by {differ} as well as "
                "by checkpoint"
            )
    return lines, warnings


# each compared field in words (the prompt format absent = alpaca, as :func:`describe` says)
_FIELD_WORDS = {
    "engine": "engine",
    "version": "engine version",
    "dtype": "dtype",
    "attention": "attention",
    "batch_size": "batch size",
    "device": "device",
    "prompt_format": "prompt format",
    "decoder": "decoder",
}


def _differing(counts: dict[str, int]) -> str:
    """The fields (in words, in :data:`FIELDS` order) whose values differ across the
    provenances ``counts`` names, e.g. ``prompt format`` or ``dtype and device``."""
    blobs = [json.loads(p) for p in counts]
    names = [_FIELD_WORDS[k] for k in (*FIELDS, *OPTIONAL_FIELDS) if len({str(b.get(k) or OPTIONAL_FIELDS.get(k, "")) for b in blobs}) > 1]
    if not names:  # equal identities, other notes: no field to name
        return "what measured them"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
