"""MLflow, W&B and Trackio offline, in a temporary folder, and reading back what they stored.

:func:`offline_env` points every tracker (and ``HOME`` and the working directory) at one folder:
MLflow at a SQLite store (telemetry off, synchronous logging; artifacts in ``./mlruns``), W&B in offline mode (runs, cache, staging, config), Trackio
at its local store (``TRACKIO_DIR`` is read when trackio is imported, so it must be set first).
Nothing is sent anywhere and the user's home is never written.

W&B 0.31 writes only its transaction log offline (``offline-run-*/run-<id>.wandb``; the JSON
summary files appear at ``wandb sync``) and ships no Python reader for it: :func:`wandb_records`
reads that log (LevelDB log format: 32 KiB blocks, 7-byte record headers crc32/length/type,
after a 7-byte file header ``:W&B`` + 0xBEE1 + version 0; each payload a
``wandb_internal_pb2.Record``), checking every record's checksum.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

_BLOCK, _HEADER = 32768, 7
WANDB_DIRS = {
    "WANDB_DIR": "wandb",
    "WANDB_CACHE_DIR": "wandb-cache",
    "WANDB_DATA_DIR": "wandb-data",
    "WANDB_CONFIG_DIR": "wandb-config",
    "WANDB_ARTIFACT_DIR": "wandb-artifacts",
}
UNSET = (
    "WANDB_API_KEY",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_RUN_ID",
    "TRACKIO_SPACE_ID",
    "TRACKIO_SERVER_URL",
    "TRACKIO_BUCKET_ID",
    "TRACKIO_DATASET_ID",
    "TRACKIO_REGISTRY_BUCKET_ID",
)


def offline_env(mp: pytest.MonkeyPatch, root: Path) -> dict[str, str]:
    """Set the environment of all three trackers under ``root``; returns the MLflow URI."""
    root.mkdir(parents=True, exist_ok=True)
    for name in UNSET:
        mp.delenv(name, raising=False)
    (root / "home").mkdir(exist_ok=True)
    mp.setenv("HOME", str(root / "home"))
    mp.setenv("HF_HOME", str(root / "hf"))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.chdir(root)  # a SQLite store's experiments keep their artifacts in ./mlruns
    uri = f"sqlite:///{root / 'mlflow.db'}"
    mp.setenv("MLFLOW_TRACKING_URI", uri)
    mp.setenv("MLFLOW_REGISTRY_URI", uri)
    mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    mp.setenv("DO_NOT_TRACK", "true")
    mp.setenv("MLFLOW_ENABLE_ASYNC_LOGGING", "false")
    for var, sub in WANDB_DIRS.items():
        (root / sub).mkdir(exist_ok=True)
        mp.setenv(var, str(root / sub))
    for var, value in (("WANDB_MODE", "offline"), ("WANDB_SILENT", "true"), ("WANDB_DISABLE_GIT", "true"), ("WANDB_DISABLE_CODE", "true")):
        mp.setenv(var, value)
    # the session's folder (tests/conftest.py sets it before anything can import trackio)
    trackio_dir = os.environ.get("CKPTSEL_TEST_TRACKIO_DIR") or str(root / "trackio")
    mp.setenv("TRACKIO_DIR", trackio_dir)
    return {"mlflow": uri, "wandb": str(root / "wandb"), "trackio": trackio_dir}


def import_trackio(root: Path):
    """trackio, storing in the folder :func:`offline_env` set for ``root`` (skip when it was
    imported with another folder)."""
    trackio = pytest.importorskip("trackio", reason="trackio not installed: pip install 'ckptsel[trackio]'")
    from trackio import utils

    if Path(utils.TRACKIO_DIR).resolve() != Path(os.environ["TRACKIO_DIR"]).resolve():
        pytest.skip(f"trackio was imported before TRACKIO_DIR was set (it stores in {utils.TRACKIO_DIR})")
    return trackio


def estimates(node, path=()):
    """(path, estimate) of every estimate in a summary, walked independently of ckptsel."""
    if isinstance(node, dict) and {"mean", "lo", "hi"} <= set(node):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from estimates(v, (*path, k))


def expected_metrics(summary: dict) -> dict[str, float]:
    """The documented names: ckptsel/<summary path>/<stat>, budget blocks quantity first."""
    out = {}
    for path, est in estimates(summary):
        p = list(path)
        if "budget" in p and len(p) == p.index("budget") + 4:
            k = p.index("budget")
            p = [*p[:k], p[k + 3], p[k + 1], p[k + 2]]
        for stat in ("mean", "lo", "hi"):
            if est[stat] is not None:
                out["/".join(["ckptsel", *p, stat])] = est[stat]
        out["/".join(["ckptsel", *p, "unresolved"])] = 1.0 if est["unresolved"] else 0.0
        if est.get("not_estimable"):  # no interval (issue 29): said as a metric of its own
            out["/".join(["ckptsel", *p, "not_estimable"])] = 1.0
        if est.get("cannot_resolve"):  # too small a design to resolve (issue 38)
            out["/".join(["ckptsel", *p, "cannot_resolve"])] = 1.0
    return out


def import_mlflow():
    mlflow = pytest.importorskip("mlflow", reason="mlflow not installed: pip install 'ckptsel[mlflow]'")
    for dep in ("sqlalchemy", "alembic"):
        pytest.importorskip(dep, reason=f"{dep} not installed (MLflow's SQLite store): pip install 'ckptsel[mlflow]'")
    return mlflow


# --------------------------------------------------------------------------- W&B read-back
def _payloads(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:_HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), f"{path}: not a W&B transaction log"
    pos, buf = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer
            pos += left
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if crc == length == kind == 0:
            break  # the unwritten tail
        payload = data[pos + _HEADER : pos + _HEADER + length]
        assert zlib.crc32(payload, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == crc, f"{path}: bad checksum at {pos}"
        pos += _HEADER + length
        buf = payload if kind in (1, 2) else buf + payload  # FULL, FIRST | MIDDLE, LAST
        if kind in (1, 4):
            yield buf


def wandb_records(run_dir: Path):
    """The ``Record`` messages of one offline run folder's transaction log."""
    from wandb.proto import wandb_internal_pb2 as pb

    [log] = sorted(Path(run_dir).glob("run-*.wandb"))
    for payload in _payloads(log):
        rec = pb.Record()
        rec.ParseFromString(payload)
        yield rec


def _items(items) -> dict:
    return {(it.key or "/".join(it.nested_key)): json.loads(it.value_json) for it in items}


def complete_records(run_dir: Path, timeout: float = 60.0) -> list:
    """The records of a finished run's log, once its ``exit`` record is there: wandb-core writes
    the log in its own process and may still be writing when ``run.finish()`` returns."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            records = list(wandb_records(run_dir))
        except AssertionError:  # a record still being written: its checksum is not there yet
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
            continue
        if any(r.WhichOneof("record_type") == "exit" for r in records):
            return records
        assert time.monotonic() < deadline, f"{run_dir}: no exit record after {timeout} s"
        time.sleep(0.2)


def wandb_run(run_dir: Path) -> dict:
    """What one finished offline run recorded: run (id, name, group, job type), config, summary,
    history, artifacts (name, type, aliases, description, metadata, files and their staged copies)."""
    out: dict = {"config": {}, "summary": {}, "history": [], "artifacts": []}
    for rec in complete_records(run_dir):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            r = rec.run
            out["run"] = {"id": r.run_id, "name": r.display_name, "group": r.run_group, "job_type": r.job_type}
            out["config"].update(_items(r.config.update))
        elif kind == "config":
            out["config"].update(_items(rec.config.update))
        elif kind == "summary":
            out["summary"].update(_items(rec.summary.update))
        elif kind == "history":
            out["history"].append(_items(rec.history.item))
        elif kind == "artifact":
            a = rec.artifact
            out["artifacts"].append(
                {
                    "name": a.name,
                    "type": a.type,
                    "aliases": list(a.aliases),
                    "description": a.description,
                    "metadata": json.loads(a.metadata) if a.metadata else {},
                    "files": {e.path: (e.local_path or e.ref) for e in a.manifest.contents},
                }
            )
    return out


def wandb_runs(wandb_dir: Path, run_id: str) -> list[Path]:
    """The offline run folders of ``run_id``, oldest first: a resumed run gets one more folder
    (``offline-run-<time>-<id>``, with ``-1``, ``-2``… when the second is the same)."""
    root = Path(wandb_dir) / "wandb"
    found = [*root.glob(f"offline-run-*-{run_id}"), *root.glob(f"offline-run-*-{run_id}-[0-9]*")]
    return sorted(found, key=lambda p: (p.name.split("-")[2], len(p.name), p.name))
