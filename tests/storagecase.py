"""Test helper shared by the storage tests (issue 21): one tiny run and its records measured
from local folders (the reference every URL, cluster and watcher run must reproduce), built
once per test process, and the comparison they all use (every unit's bytes, every row)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ckptsel._util.locations import Location
from ckptsel.records.codec import read_table
from ckptsel.records.provenance import PROVENANCE_KEY
from ckptsel.records.scan import read_frame
from ckptsel.records.units import list_units
from ckptsel.records.weights import CHECKPOINT_KEY

from tinyrun import TinyRun, build_tiny_run

STEPS = (10, 20, 30)
_BUILT: dict[str, Case] = {}


@dataclass(frozen=True)
class Case:
    run: TinyRun
    records: Path  # measured from the local folders by the local executor


def config():
    from ckptsel.measure.config import MeasureConfig

    return MeasureConfig("gsm8k", batch_size=2, max_new_tokens=8, window=64)


def tiny_case(tmp_path_factory) -> Case:
    """The tiny run (three LoRA checkpoints) and its reference records, built once."""
    if "case" not in _BUILT:
        from ckptsel.measure.run import measure_run

        root = tmp_path_factory.mktemp("storage-case")
        run = build_tiny_run(root, steps=STEPS, n_validation=6, n_test=4)
        out = root / "records-local"
        res = measure_run(run.run_dir, config(), validation=run.validation, test=run.test, out=out)
        assert res.measured_steps == list(STEPS)
        _BUILT["case"] = Case(run, out)
    return _BUILT["case"]


def assert_same_records(expected: Path | str, got: Path | str) -> None:
    """Identical records: the same units with the same bytes, the same rows."""
    for kind in ("generations", "nll", "texts"):
        a, b = list_units(expected, kind), list_units(got, kind)
        assert [(u.trajectory, u.step) for u in a] == [(u.trajectory, u.step) for u in b], kind
        for x, y in zip(a, b, strict=True):
            if x.path.read_bytes() == y.path.read_bytes():
                continue
            # a watcher's units may say less of the run's final checkpoint than a one-shot
            # measure's (ckptsel.records.weights); everything else is the same, byte for byte
            tx, ty = read_table(x.path), read_table(y.path)
            assert tx.replace_schema_metadata(None).equals(ty.replace_schema_metadata(None)), y.path
            assert _same_meta(tx.schema.metadata) == _same_meta(ty.schema.metadata), y.path
    for kind in ("generations", "nll"):
        g = read_frame(got, kind)
        key = ["trajectory", "step", "split", "item_id"] + (["window"] if kind == "nll" else [])
        assert not g.duplicated(key).any()
        pd.testing.assert_frame_equal(read_frame(expected, kind), g)


def _same_meta(meta: dict | None) -> dict:
    """A unit's metadata without what it says of the run's final checkpoint, nor whether its
    conformance verdict was checked in that run or read from the cache (and that entry's time
    and digest: issue 38)."""
    meta = dict(meta or {})
    if CHECKPOINT_KEY in meta:
        stamp = json.loads(meta[CHECKPOINT_KEY])
        meta[CHECKPOINT_KEY] = stamp["weights"]
    if PROVENANCE_KEY in meta:
        prov = json.loads(meta[PROVENANCE_KEY])
        where = r"; (checked in this run|read from the cache).*\)$"
        prov["conformance"] = sorted({re.sub(where, ")", v) for v in prov.get("conformance", [])})
        meta[PROVENANCE_KEY] = prov
    return meta


def upload_run(s3, case: Case) -> dict[str, str]:
    """The run, its base model and the item files on the local S3 server; URLs by name."""
    return {
        "run": s3.upload(case.run.run_dir, "runs", case.run.run_dir.name),
        "base": s3.upload(case.run.base, "models", "base"),
        "validation": s3.upload(case.run.validation, "data", "validation.jsonl"),
        "test": s3.upload(case.run.test, "data", "test.jsonl"),
    }


def units_of(records: Path | str | Location, kind: str = "generations") -> set[int]:
    return {u.step for u in list_units(records, kind)}
