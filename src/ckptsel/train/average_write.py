"""Averaged checkpoints written beside a run's checkpoints (``ckptsel average``).

An average is a folder of the run directory whose name is not a step (``average-last3/``,
``ema-0.9/``), so the checkpoint listing (:func:`~ckptsel.train.checkpoints.discover_checkpoints`)
ignores it; ``measure`` finds it (:func:`~ckptsel.train.average_read.find_averages`) and records
it at its reserved step (:func:`~ckptsel.records.schema.average_step`), and a name that step
cannot hold (``--last 1000``, a decay of seven decimals) is refused before anything is read. It loads like any checkpoint of its
kind (a PEFT adapter, or a full model with the last source's config and tokenizer files), and
:data:`RECORD_FILE` inside it says how it was made: the method, ``k`` or the decay, each
source's step, folder (relative to the run directory), weights fingerprint and weight, the
dtype, the kind, and the average's own weights fingerprint. The math is
:mod:`ckptsel.train.average`.

Everything is checked before anything is written (a refusal leaves nothing behind); each
folder is written under a temporary name beside it and renamed into place. The same inputs
again find the folder already there (its record and weights unchanged); with ``force`` it is
written again, to the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.locations import Location, is_url, temp_dir
from ckptsel.errors import CkptselError
from ckptsel.records.schema import MAX_AVERAGED, average_step
from ckptsel.train.average import (
    DTYPES,
    EMA,
    MEAN,
    average_lora,
    averaged_lora_config,
    check_count,
    check_decay,
    check_lora_configs,
    check_same_tensors,
    ema_weights,
    lora_factor_pairs,
    mean_weights,
    weighted_mean,
)
from ckptsel.train.checkpoints import Checkpoint, discover_checkpoints, function_files, weight_files, weights_fingerprint

RECORD_FILE = "ckptsel_average.json"
RECORD_SCHEMA = 1
ADAPTER_FILE, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"
RULES = {MEAN: "w_i = 1/k", EMA: "w_i = decay^(n-1-i) / sum_j decay^(n-1-j), i = 0..n-1 in step order"}


@dataclass(frozen=True)
class Source:
    """One source checkpoint: its folder, its tensors (name -> (dtype, shape)), the weight file
    holding each, its weights' fingerprint."""

    checkpoint: Checkpoint
    tensors: dict[str, tuple[str, tuple[int, ...]]]
    files: dict[str, str]
    fingerprint: str  # of its weights (weights_fingerprint)


@dataclass(frozen=True)
class Plan:
    """One average to write: its folder, method, sources and their weights, and its record
    (less the average's own fingerprint)."""

    folder: Path
    method: str
    sources: tuple[Source, ...]
    weights: tuple[float, ...]
    record: dict[str, Any]

    @property
    def kind(self) -> str:
        return "lora" if self.sources[0].checkpoint.kind == "adapter" else "full"


# --------------------------------------------------------------------------- checking


def _local_run(run_dir: str | Path) -> Path:
    """The run folder, local and existing, or one line naming it."""
    if is_url(run_dir):
        raise CkptselError(f"{run_dir}: averages are written beside the checkpoints: give a local run folder")
    path = Path(run_dir)
    if not path.exists():
        raise CkptselError(f"{path}: run directory not found")
    if not path.is_dir():
        raise CkptselError(f"{path}: not a run directory (a file, not a folder)")
    return path


def _source(ckpt: Checkpoint, where: Path) -> Source:
    """A source's tensors (dtype, shape) from its safetensors headers (no tensor read)."""
    from safetensors import safe_open

    files = weight_files(ckpt.path)
    odd = next((f for f in files if not f.endswith(".safetensors")), None)
    if odd is not None:
        raise CkptselError(f"{where}: {ckpt.path.name}/{odd} is not safetensors; only safetensors checkpoints are averaged")
    shapes, home = {}, {}
    for file in files:
        with safe_open(str(ckpt.path.local / file), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                piece = fh.get_slice(name)
                shapes[name] = (piece.get_dtype(), tuple(piece.get_shape()))
                home[name] = file
    return Source(ckpt, shapes, home, weights_fingerprint(ckpt.path))


def _check_sources(sources: Sequence[Source], where: Path) -> None:
    """One kind; the same tensors, dtypes and shapes; for adapters, one LoRA config."""
    kinds = {s.checkpoint.kind for s in sources}
    if len(kinds) > 1:
        full = next(s for s in sources if s.checkpoint.kind == "full").checkpoint.path.name
        lora = next(s for s in sources if s.checkpoint.kind == "adapter").checkpoint.path.name
        raise CkptselError(f"{where}: {lora} is a LoRA adapter but {full} a full model; cannot average them")
    check_same_tensors({s.checkpoint.path.name: s.tensors for s in sources}, where)
    if kinds == {"adapter"}:
        configs = {s.checkpoint.path.name: _read_json(s.checkpoint.path.local / ADAPTER_CONFIG) for s in sources}
        check_lora_configs(configs, where)
        lora_factor_pairs(list(sources[0].tensors), where)  # before anything is written


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CkptselError(f"{path}: not valid JSON ({err})") from err


def plan_averages(
    run_dir: str | Path, last: Sequence[int] = (), ema: float | None = None, base: str | None = None, layout: str = "hf"
) -> list[Plan]:
    """The averages asked for, checked: ``last`` (the mean of the last K checkpoints by step,
    for each K) and ``ema`` (the EMA of all checkpoints with this decay); ``base`` overrides
    the adapters' base model, as in ``measure``; ``layout``: the checkpoint folders' names
    (:func:`~ckptsel.train.checkpoints.discover_checkpoints`). Nothing is read but headers,
    configs and the fingerprinted weights."""
    where = _local_run(run_dir)
    if not last and ema is None:
        raise CkptselError(f"{where}: say which average: --last K (repeatable) and/or --ema DECAY")
    if ema is not None:
        check_decay(ema)
    _check_recordable(last, ema, where)
    ckpts = discover_checkpoints(where, base, layout)
    read: dict[int, Source] = {}
    plans = []
    for name, method, chosen, weights, decay in _asked(ckpts, last, ema, where):
        picked = tuple(read.get(c.step) or read.setdefault(c.step, _source(c, where)) for c in chosen)
        _check_sources(picked, where)
        plans.append(Plan(where / name, method, picked, weights, _record(name, method, picked, weights, decay)))
    return plans


def _check_recordable(last: Sequence[int], ema: float | None, where: Path) -> None:
    """Each average asked for has a name records can hold (:func:`average_step`): K at most
    :data:`MAX_AVERAGED`, a decay of at most six decimals; else one line, nothing written."""
    for k in last:
        if k > MAX_AVERAGED:
            raise CkptselError(f"{where}: --last {k}: an average of more than {MAX_AVERAGED} checkpoints cannot be recorded")
    if ema is not None:
        try:
            average_step(f"ema-{ema!r}")
        except CkptselError:
            raise CkptselError(
                f"{where}: --ema {ema!r}: its average ema-{ema!r} cannot be recorded (a decay of at most six decimals, e.g. 0.999)"
            ) from None


def _asked(ckpts: Sequence[Checkpoint], last: Sequence[int], ema: float | None, where: Path) -> list[tuple]:
    """``(name, method, sources, weights, decay)`` of each average asked for, its count checked."""
    steps = [c.step for c in ckpts]
    asked = []
    for k in dict.fromkeys(last):
        check_count(k, steps, where)
        asked.append((f"average-last{k}", MEAN, ckpts[-k:], mean_weights(k), None))
    if ema is not None:
        if len(ckpts) < 2:
            raise CkptselError(f"{where}: --ema {ema!r}: an average needs at least 2 checkpoints; the run has {len(ckpts)}")
        asked.append((f"ema-{ema!r}", EMA, tuple(ckpts), ema_weights(len(ckpts), ema), ema))
    return asked


def _record(name: str, method: str, sources: Sequence[Source], weights: Sequence[float], decay: float | None) -> dict[str, Any]:
    """What :data:`RECORD_FILE` says (its ``fingerprint`` added once the weights are written)."""
    dtypes = sorted({DTYPES.get(d, d) for s in sources for d, _ in s.tensors.values()})
    kind = "lora" if sources[0].checkpoint.kind == "adapter" else "full"
    return {
        "schema": RECORD_SCHEMA,
        "name": name,
        "method": method,
        "k": len(sources),
        "decay": decay,
        "weights_rule": RULES[method],
        "kind": kind,
        "dtype": ", ".join(dtypes),
        "sources": [
            {"step": s.checkpoint.step, "path": s.checkpoint.path.name, "fingerprint": s.fingerprint, "weight": w}
            for s, w in zip(sources, weights, strict=True)
        ],
    }


# --------------------------------------------------------------------------- writing


def status_of(plan: Plan) -> str:
    """``"new"``; ``"there"`` when the folder holds this very average (its record, less the
    fingerprint, and its weights' fingerprint unchanged); ``"other"`` when it holds another
    average (other sources, or edited); a folder ckptsel did not write is refused."""
    if not plan.folder.exists():
        return "new"
    record = plan.folder / RECORD_FILE
    if not plan.folder.is_dir() or not record.is_file():
        raise CkptselError(f"{plan.folder}: exists and is not an average ckptsel wrote (no {RECORD_FILE}); move it away first")
    found = _read_json(record)
    same = isinstance(found, dict) and {k: v for k, v in found.items() if k != "fingerprint"} == plan.record
    return "there" if same and found.get("fingerprint") == weights_fingerprint(plan.folder) else "other"


def write_average(plan: Plan) -> None:
    """Write ``plan``'s folder under a temporary name beside it, then rename it into place
    (an older average there is replaced in one swap)."""
    tmp = Path(temp_dir(plan.folder.parent, prefix=f".{plan.folder.name}.", like=plan.sources[-1].checkpoint.path.local))
    try:
        if plan.kind == "lora":
            _write_lora(plan, tmp)
        else:
            _write_full(plan, tmp)
        _copy_function_files(plan.sources[-1].checkpoint.path, tmp, skip=(ADAPTER_CONFIG,))
        record = {**plan.record, "fingerprint": weights_fingerprint(tmp)}
        write_text(tmp / RECORD_FILE, json.dumps(record, indent=2) + "\n")
        _swap_in(tmp, plan.folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _swap_in(tmp: Path, folder: Path) -> None:
    if not folder.exists():
        os.rename(tmp, folder)
        return
    old = Path(temp_dir(folder.parent, prefix=f".{folder.name}.old."))
    os.rename(folder, old / folder.name)
    os.rename(tmp, folder)
    shutil.rmtree(old)


def _copy_function_files(src: Location, dest: Path, skip: tuple[str, ...]) -> None:
    """The last source's config, generation config, tokenizer and templates, as they are."""
    for name in function_files(src):
        if name not in skip:
            shutil.copyfile(src.local / name, dest / name)


def _write_lora(plan: Plan, tmp: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    paths = [s.checkpoint.path.local / ADAPTER_FILE for s in plan.sources]
    with safe_open(str(paths[-1]), framework="pt") as fh:
        metadata = fh.metadata() or {"format": "pt"}
    averaged = average_lora([load_file(str(p)) for p in paths], plan.weights, plan.folder.parent)
    save_file(averaged, str(tmp / ADAPTER_FILE), metadata=metadata)
    shutil.copymode(paths[-1], tmp / ADAPTER_FILE)  # safetensors writes 0600: the source's mode
    config = averaged_lora_config(_read_json(plan.sources[-1].checkpoint.path.local / ADAPTER_CONFIG), len(plan.sources))
    write_text(tmp / ADAPTER_CONFIG, json.dumps(config, indent=2, sort_keys=True) + "\n")


def _write_full(plan: Plan, tmp: Path) -> None:
    """Each weight file of the last source again, its tensors averaged one at a time (one file
    of tensors in memory), and its shard index as it is."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    last = plan.sources[-1]
    with contextlib.ExitStack() as stack:
        handles = {
            (s.checkpoint.step, file): stack.enter_context(safe_open(str(s.checkpoint.path.local / file), framework="pt"))
            for s in plan.sources
            for file in set(s.files.values())
        }
        for file in sorted(set(last.files.values())):
            tensors = {}
            for name in (n for n, f in last.files.items() if f == file):
                parts = [handles[(s.checkpoint.step, s.files[name])].get_tensor(name) for s in plan.sources]
                tensors[name] = weighted_mean(parts, plan.weights, f"{plan.folder.parent}: {name}")
            metadata = handles[(last.checkpoint.step, file)].metadata() or {"format": "pt"}
            save_file(tensors, str(tmp / file), metadata=metadata)
            shutil.copymode(last.checkpoint.path.local / file, tmp / file)
    index = last.checkpoint.path.local / "model.safetensors.index.json"
    if index.is_file():
        shutil.copyfile(index, tmp / index.name)


def average_run(
    run_dir: str | Path,
    last: Sequence[int] = (),
    ema: float | None = None,
    base: str | None = None,
    force: bool = False,
    layout: str = "hf",
) -> list[dict[str, Any]]:
    """Write the averages asked for beside ``run_dir``'s checkpoints (see :func:`plan_averages`);
    one answer per average: its name, folder, method, k, decay, kind, source steps and what
    happened (``written``, ``already there``, ``replaced``). All are checked before the first
    is written; an average there from other sources is refused unless ``force``."""
    plans = plan_averages(run_dir, last, ema, base, layout)
    statuses = [status_of(p) for p in plans]
    other = next((p for p, s in zip(plans, statuses, strict=True) if s == "other"), None)
    if other is not None and not force:
        raise CkptselError(f"{other.folder}: an average of other checkpoints (or edited since) is there; pass --force to replace it")
    answers = []
    for plan, status in zip(plans, statuses, strict=True):
        if status != "there" or force:
            write_average(plan)
        done = {"new": "written", "there": "already there" if not force else "written again", "other": "replaced"}[status]
        answers.append(_answer(plan, done))
    return answers


def _answer(plan: Plan, status: str) -> dict[str, Any]:
    r = plan.record
    return {
        "name": r["name"],
        "folder": str(plan.folder),
        "method": r["method"],
        "k": r["k"],
        "decay": r["decay"],
        "kind": r["kind"],
        "steps": [s["step"] for s in r["sources"]],
        "status": status,
    }
