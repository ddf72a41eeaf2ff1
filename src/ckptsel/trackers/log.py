"""``log_results``: one results folder (and optionally a selection) to one or more trackers, and
the recommended checkpoint registered in each of them."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.results import publish
from ckptsel.trackers.base import Logged, LogJob, LogTarget, build_payload, check_trackers, registration, require
from ckptsel.trackers.mlflow import log_mlflow
from ckptsel.trackers.trackio import log_trackio
from ckptsel.trackers.wandb import log_wandb

LOGGERS = {"mlflow": log_mlflow, "wandb": log_wandb, "trackio": log_trackio}


def log_results(
    results_dir: str | Path | Location | None,
    trackers: Sequence[str],
    *,
    selection: Any = None,
    register: str | None = None,
    checkpoint: Path | None = None,
    targets: Mapping[str, LogTarget] | None = None,
    note: Callable[[str], None] = print,
) -> list[Logged]:
    """Log ``results_dir`` (an analysis) and/or ``selection`` (a recommendation:
    ``select_checkpoint``'s typed ``Selection`` or its ``to_dict()``) to each of ``trackers`` (``mlflow``, ``wandb``, ``trackio``).

    ``register``: the name under which the recommended checkpoint is registered (needs
    ``selection``); ``checkpoint``: its folder, referenced by the registration; ``targets``: where
    in each tracker (:class:`LogTarget`; default: a new run named ``ckptsel``). Every tracker
    package is imported (a missing one is one line with its install hint) and the payload is
    built before anything is logged. A results folder at a URL is logged from a local copy of
    what its manifest names (the parameters name the URL).
    """
    names = check_trackers(list(trackers))
    if selection is not None and not isinstance(selection, dict):
        selection = selection.to_dict()
    for name in names:
        require(name)
    if results_dir is None or not is_url(results_dir):
        local = None if results_dir is None else Path(results_dir)
        return _log(build_payload(local, selection), names, register, checkpoint, targets, note)
    url = as_location(results_dir)
    with tempfile.TemporaryDirectory(prefix=".ckptsel-log-") as tmp:
        copy = publish.fetch_results(url, Path(tmp) / "results")
        payload = build_payload(copy, selection, named=str(url))
        return _log(payload, names, register, checkpoint, targets, note)


def _log(payload, names, register, checkpoint, targets, note) -> list[Logged]:
    reg = registration(payload, register, checkpoint) if register else None
    out = []
    for name in names:
        target = (targets or {}).get(name) or LogTarget()
        logged = LOGGERS[name](LogJob(payload, target, reg))
        note(logged.line())
        out.append(logged)
    return out
