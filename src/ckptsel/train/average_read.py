"""The averages beside a run's checkpoints, found and checked for measuring.

``ckptsel average`` (:mod:`ckptsel.train.average_write`) writes ``average-lastK/`` and
``ema-D/`` folders beside a run's ``checkpoint-<step>/`` folders. :func:`find_averages` lists
them as :class:`~ckptsel.train.checkpoints.Checkpoint` s whose step is the average's reserved
negative step (:func:`~ckptsel.records.schema.average_step`: ``average-last3`` is step -3), so
``measure`` records them beside the checkpoints, on the same items and settings. A folder is
an average when its name starts with ``average-`` or ``ema-``; it is measured only when
everything agrees, else it is refused in one line naming it (nothing measured):

* its name is one records can hold (``average-last1``, ``ema-0.90``: refused);
* its :data:`~ckptsel.train.average_write.RECORD_FILE` is ckptsel's and names this folder, its
  method and ``k`` or decay;
* its sources are the run's checkpoints now: the last ``K`` (a mean) or all of them (an EMA),
  each with the weights fingerprint recorded, and the weights the method gives them;
* its own weights are those the record fingerprints (not edited since);
* it loads as its record's kind (a LoRA adapter, or a full model).

An average made before the run gained a checkpoint is refused (``mean_last3`` names the
run's last three): ``ckptsel average ... --force`` writes it again.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, as_location
from ckptsel.errors import CkptselError
from ckptsel.records.schema import average_step
from ckptsel.train.average import EMA, MEAN, ema_weights, mean_weights
from ckptsel.train.average_write import RECORD_FILE, RECORD_SCHEMA
from ckptsel.train.checkpoints import Checkpoint, inspect_checkpoint, weights_fingerprint

AVERAGE_NAME = re.compile(r"^(average-|ema-)")  # folders taken for averages (dot folders are not)
KINDS = {"lora": "adapter", "full": "full"}  # the record's kind -> the checkpoint's


def find_averages(run_dir: Path | Location | str, ckpts: Sequence[Checkpoint], base: str | None = None) -> list[Checkpoint]:
    """The averages of ``run_dir`` (module docstring), checked against its checkpoints
    ``ckpts`` (ascending by step), as checkpoints at their reserved steps, descending
    (``average-last2``, ``average-last3``, …, then the EMAs): measured after the checkpoints.
    ``base`` overrides an adapter's base model, as for the checkpoints."""
    run_dir = as_location(run_dir)
    found = []
    for name, folder in sorted(run_dir.children()):
        if folder and AVERAGE_NAME.match(name):
            found.append(_checked(run_dir, name, ckpts, base))
    return sorted(found, key=lambda c: -c.step)


def _checked(run_dir: Location, name: str, ckpts: Sequence[Checkpoint], base: str | None) -> Checkpoint:
    path = run_dir / name
    try:
        step = average_step(name)
    except CkptselError as err:
        raise CkptselError(f"{path}: named like an average, but {err}; rename or move this folder") from None
    record = _record(path)
    _check_method(path, name, record)
    _check_sources(path, record, ckpts)
    if record.get("fingerprint") != weights_fingerprint(path):
        raise CkptselError(f"{path}: its weights differ from those {RECORD_FILE} fingerprints (edited since ckptsel average wrote it)")
    ckpt = inspect_checkpoint(path, step, run_dir, base)
    if KINDS.get(record.get("kind")) != ckpt.kind:
        raise CkptselError(f"{path}: {RECORD_FILE} says kind {record.get('kind')!r}, but the folder holds a {ckpt.kind} checkpoint")
    return ckpt


def _record(path: Location) -> dict[str, Any]:
    """The folder's record, a JSON object of ckptsel's schema."""
    file = path / RECORD_FILE
    if not file.is_file():
        raise CkptselError(
            f"{path}: named like an average, but has no {RECORD_FILE} (write averages with ckptsel average, or move this folder)"
        )
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CkptselError(f"{file}: not valid JSON ({err})") from err
    if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
        raise CkptselError(f"{file}: not a record ckptsel average writes (schema {RECORD_SCHEMA} JSON object)")
    if record.get("name") != path.name:
        raise CkptselError(f"{file}: records the average {record.get('name')!r}, not {path.name!r} (renamed?)")
    return record


def _check_method(path: Location, name: str, record: dict[str, Any]) -> None:
    """The record's method, ``k`` and decay are the folder name's."""
    file = path / RECORD_FILE
    if name.startswith("average-last"):
        k = int(name[len("average-last") :])
        if record.get("method") != MEAN or record.get("k") != k:
            raise CkptselError(f"{file}: records method {record.get('method')!r}, k {record.get('k')!r}, not the mean of the last {k}")
    elif record.get("method") != EMA or f"ema-{record.get('decay')!r}" != name:
        raise CkptselError(f"{file}: records method {record.get('method')!r}, decay {record.get('decay')!r}, not {name}")


def _check_sources(path: Location, record: dict[str, Any], ckpts: Sequence[Checkpoint]) -> None:
    """The sources are the run's checkpoints the name says, as they are now, each weighted as
    the method weights it."""
    file = path / RECORD_FILE
    sources = record.get("sources")
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        raise CkptselError(f"{file}: its sources are not a list of objects")
    if record["method"] == MEAN:
        k = record["k"]
        want, weights, which = list(ckpts[-k:]) if len(ckpts) >= k else [], mean_weights(k), f"last {k} checkpoints"
    else:
        want, weights, which = list(ckpts), ema_weights(len(ckpts), record["decay"]), "checkpoints"
    named = [s.get("step") for s in sources]
    steps = [c.step for c in want]
    if named != steps:
        raise CkptselError(
            f"{file}: names steps {named}, but the run's {which} are {steps} (the run changed since): "
            "write it again with ckptsel average --force"
        )
    for src, ckpt, w in zip(sources, want, weights, strict=True):
        if src.get("path") != ckpt.path.name:
            raise CkptselError(f"{file}: names {src.get('path')!r} for step {ckpt.step}, but the run's is {ckpt.path.name}")
        if src.get("fingerprint") != weights_fingerprint(ckpt.path):
            raise CkptselError(
                f"{file}: {ckpt.path.name}'s weights differ from those it was averaged from (replaced since): "
                "write it again with ckptsel average --force"
            )
        weight = src.get("weight")
        if not isinstance(weight, (int, float)) or not math.isclose(weight, w, rel_tol=1e-12, abs_tol=1e-15):
            raise CkptselError(f"{file}: weighs step {ckpt.step} {weight!r}, not {w!r} as its method does")
