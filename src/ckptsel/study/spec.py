"""A whole study for ``ckptsel run`` (``schema = 2``), read and validated key by key.

A schema-2 file describes a whole study (README "ckptsel run")::

    schema = 2
    [study]        name, base_model, seeds, runs_dir, records_dir, results_dir
    [pool]         optional: one fine-tuning file split into train + validation (data.split)
                   task, file, val_fraction (0.1), seed (DATA_SEED), group_field
    [train]        task, file                         (when there is no [pool])
    [validation]   task, file | files, n, per_task, seed   (file(s) default: the pool's part)
    [test]         task, file | files, n, per_task, seed
    [measure]      max_new_tokens, batch_size, window, device, backend, dtype
    [executor]     kind, address, workers, num_cpus, num_gpus, max_retries
    [analysis]     permutations, draws, seed, level, interval, budgets
    [[configurations]]  a Configuration (trained here), or name + runs = "GLOB" (existing run
                   folders; seed from the folder name, ``...-s42`` / ``..._seed42``), or
                   name + lm_eval = "GLOB" [+ filter]: lm-eval --log_samples folders, per
                   trajectory <folder>/{validation,test}/checkpoint-<step>/ (generations only)

:func:`load_spec` checks every key (known, typed, files present) before anything runs; errors
name the key and its line. A schema-1 file (:mod:`ckptsel.study.configuration`) is converted on
load: one validation and one test file. :func:`load_study` gives the trained part of either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from ckptsel.errors import CkptselError
from ckptsel.study.configuration import (
    DEFAULT_SEEDS,
    Configuration,
    Study,
    resolve_model,
    resolve_path,
    study_from_dict,
)

_INT, _FLOAT, _STR, _LIST = (int,), (int, float), (str,), (list,)
SCHEMA_VERSION = 2
STATE_DIR = ".ckptsel"  # the study's own files (pools, split, fingerprint) under the workdir
SCHEMA: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "study": {
        "name": (_STR, "study name (default: the file's folder name)"),
        "base_model": (_STR, "base model: a hub name or a folder (relative to the file)"),
        "seeds": (_LIST, "training seeds; trajectories are <configuration>-s<seed>"),
        "runs_dir": (_STR, "where trained runs go (default: <workdir>/runs)"),
        "records_dir": (_STR, "records folder (default: <workdir>/records)"),
        "results_dir": (_STR, "analysis results folder (default: <workdir>/results)"),
    },
    "pool": {
        "task": (_STR, "task of the fine-tuning pool (loader and answer rules)"),
        "file": (_STR, "the pool file, split by question group into train and validation"),
        "val_fraction": (_FLOAT, "share of groups that go to validation (default 0.1)"),
        "seed": (_INT, "split seed (default: ckptsel.defaults.DATA_SEED)"),
        "group_field": (_STR, "field that groups paraphrases (default: detected)"),
    },
    "train": {
        "task": (_STR, "task of the training file"),
        "file": (_STR, "training items file"),
    },
    "validation": {
        "task": (_STR, "task (answer family) of the validation items"),
        "file": (_STR, "one items file (or folder, for commonsense)"),
        "files": (_LIST, "several item files: a mixture (subtask = file's task)"),
        "n": (_INT, "seeded sample of n items of the whole pool"),
        "per_task": (_INT, "seeded sample of per_task items of every file"),
        "seed": (_INT, "sampling seed (default: ckptsel.defaults.DATA_SEED)"),
    },
    "measure": {
        "max_new_tokens": (_INT, "generation length limit"),
        "batch_size": (_INT, "prompts per batch"),
        "window": (_INT, "matched NLL window in tokens"),
        "device": (_STR, "cpu | cuda"),
        "backend": (_STR, "hf | vllm"),
        "dtype": (_STR, "auto | float32 | bfloat16 | float16"),
        "max_loras": (_INT, "vLLM: adapters the engine holds at once"),
        "max_lora_rank": (_INT, "vLLM: largest LoRA rank (0: the adapters' own)"),
    },
    "executor": {
        "kind": (_STR, "local (this process, default) | ray (a Ray cluster)"),
        "address": (_STR, "Ray cluster to join (default: $RAY_ADDRESS, else a local one)"),
        "workers": (_INT, "Ray actors (0: as many as the cluster's resources hold)"),
        "num_cpus": (_FLOAT, "CPUs each actor reserves"),
        "num_gpus": (_FLOAT, "GPUs each actor reserves (1: one actor per GPU)"),
        "max_retries": (_INT, "restarts of a dead actor (its checkpoint is measured again)"),
    },
    "analysis": {
        "permutations": (_INT, "permutations of the configuration bootstrap"),
        "draws": (_INT, "bootstrap draws"),
        "seed": (_INT, "analysis seed"),
        "level": (_FLOAT, "confidence level"),
        "interval": (_STR, "cr2 | wild | percentile"),
        "budgets": (_LIST, "finite validation budgets (\"full\" is always added)"),
    },
}
SCHEMA["test"] = SCHEMA["validation"]
_SOURCE_KEYS = {"runs": "existing run folders (glob)", "lm_eval": "lm-eval sample folders (glob)"}
_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "name": _STR, "adaptation": _STR, "rank": _INT, "alpha": _FLOAT, "lr": _FLOAT,
    "steps": _INT, "epochs": _FLOAT, "save_every": _INT, "batch_size": _INT,
    "micro_batch": _INT, "max_length": _INT, "warmup_ratio": _FLOAT, "weight_decay": _FLOAT,
    "target_modules": _LIST, "runs": _STR, "lm_eval": _STR, "filter": _STR,
}  # fmt: skip


@dataclass(frozen=True)
class ExternalConfiguration:
    """A configuration whose trajectories exist already: run folders or lm-eval samples."""

    name: str
    kind: str  # "runs" | "lm_eval"
    pattern: str  # absolute glob
    filter: str | None = None  # lm-eval: the filter to keep (e.g. "strict-match")


@dataclass(frozen=True)
class PoolSplit:
    """``[pool]``: one fine-tuning file split into train and validation (:mod:`ckptsel.data.split`)."""

    task: str
    file: Path
    val_fraction: float = 0.1
    seed: int | None = None
    group_field: str | None = None


@dataclass(frozen=True)
class StudySpec:
    """A whole study (schema 2) for ``ckptsel run``; ``study`` is what ``train`` needs
    (its configurations are the ones trained here)."""

    source: Path
    workdir: Path
    study: Study
    validation: Any  # ckptsel.data.PoolSpec (its files are empty with [pool]: the split part)
    test: Any  # ckptsel.data.PoolSpec
    split: PoolSplit | None
    external: tuple[ExternalConfiguration, ...]
    analysis: dict[str, Any]
    results_dir: Path
    executor: dict[str, Any] = field(default_factory=dict)  # [executor]: where measure runs

    @property
    def state_dir(self) -> Path:
        return self.workdir / STATE_DIR

    def trajectory_names(self) -> list[str]:
        return [name for name, _, _ in self.study.trajectories()]


def _line_of(text: str, table: str, key: str, index: int | None = None) -> int | None:
    """Line (1-based) of ``key = ...`` in ``[table]`` (or the ``index``-th ``[[table]]``)."""
    current, count = "", -1
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("[["):
            current = line.strip("[] ")
            if current == table:
                count += 1
            continue
        if line.startswith("["):
            current = line.strip("[] ")
            continue
        if current == table and (index is None or count == index):
            head = line.split("=", 1)[0].strip().strip('"')
            if "=" in line and head == key:
                return n
    if index is None and table == "":
        return None
    return None


class _Checker:
    """Errors naming the file, the key and its line."""

    def __init__(self, source: str, text: str) -> None:
        self.source, self.text = source, text

    def fail(self, table: str, key: str | None, msg: str, index: int | None = None) -> None:
        where = f"[{table}]" if index is None else f"configurations[{index}]"
        if table == "":
            where = "top level"
        line = _line_of(self.text, table, key, index) if key else None
        at = f", line {line}" if line else ""
        name = f"{where} {key}" if key else where
        raise CkptselError(f"{self.source}{at}: {name}: {msg}")

    def typed(self, table: str, data: dict, types: dict, index: int | None = None) -> None:
        for key, value in data.items():
            if key not in types:
                known = ", ".join(sorted(types))
                self.fail(table, key, f"unknown key (known: {known})", index)
            want = types[key]
            if isinstance(value, bool) or not isinstance(value, want):
                names = " or ".join(t.__name__ for t in want)
                self.fail(table, key, f"must be {names}, got {value!r}", index)


def _apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> None:
    """``section.key=TOML-value`` (``configurations.key`` sets every configuration)."""
    for ov in overrides:
        if "=" not in ov or "." not in ov.split("=", 1)[0]:
            raise CkptselError(f"--set {ov!r}: expected SECTION.KEY=VALUE, e.g. study.seeds=[1]")
        path, raw = ov.split("=", 1)
        section, key = path.strip().split(".", 1)
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw  # a bare string
        if section == "configurations":
            for c in data.get("configurations", []):
                c[key] = value
        else:
            data.setdefault(section, {})[key] = value


def load_spec(
    path: str | Path, *, overrides: Sequence[str] = (), workdir: str | Path | None = None
) -> StudySpec:
    """Read and validate a study file for ``ckptsel run`` (schema 1 files are read as a
    study with one validation and one test file). Every key is checked (known, typed, files
    present) before anything runs; errors name the key and its line. ``overrides`` are
    ``SECTION.KEY=VALUE`` strings applied first (``--set``); ``workdir`` (default: the file's
    folder) holds runs, records, results and the study's state."""
    from ckptsel.data import PoolSpec
    from ckptsel.defaults import DATA_SEED

    path = Path(path)
    if not path.is_file():
        raise CkptselError(f"study file not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CkptselError(f"{path}: invalid TOML: {err}") from err
    _apply_overrides(data, overrides)
    root = path.resolve().parent
    work = Path(workdir).resolve() if workdir is not None else root
    chk = _Checker(str(path), text)
    version = data.pop("schema", 1)
    if version == 1:
        return _spec_from_v1(data, root, work, path, chk)
    if version != SCHEMA_VERSION:
        chk.fail("", "schema", f"unknown version {version!r} (this ckptsel reads 1 and 2)")
    if isinstance(data.get("executor"), str):  # executor = "ray": that kind, default settings
        data["executor"] = {"kind": data["executor"]}
    for table in data:
        if table not in SCHEMA and table != "configurations":
            chk.fail("", table, f"unknown table (known: {', '.join([*SCHEMA, 'configurations'])})")
    for table, types in SCHEMA.items():
        if table in data:
            if not isinstance(data[table], dict):
                chk.fail("", table, "must be a table")
            chk.typed(table, data[table], {k: v[0] for k, v in types.items()})
    s = data.get("study", {})
    if "base_model" not in s:
        chk.fail("study", None, "needs 'base_model'")
    seeds = s.get("seeds", list(DEFAULT_SEEDS))
    if not seeds or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
        chk.fail("study", "seeds", "must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        chk.fail("study", "seeds", f"contains duplicates: {seeds}")

    def file_of(table: str, key: str, value: str) -> Path:
        p = resolve_path(root, value)
        if not p.exists():
            chk.fail(table, key, f"file not found: {p}")
        return p

    split = None
    if "pool" in data:
        p = data["pool"]
        for key in ("task", "file"):
            if key not in p:
                chk.fail("pool", None, f"needs '{key}'")
        if "train" in data:
            chk.fail("train", None, "give either [pool] (split into train + validation) or [train]")
        frac = p.get("val_fraction", 0.1)
        if not 0 < frac < 1:
            chk.fail("pool", "val_fraction", f"must be in (0, 1), got {frac}")
        split = PoolSplit(
            _check_task(chk, "pool", p["task"]), file_of("pool", "file", p["file"]), float(frac),
            p.get("seed", DATA_SEED), p.get("group_field"),
        )  # fmt: skip
        train_task = split.task
        train_file = work / STATE_DIR / "split" / f"train{split.file.suffix or '.jsonl'}"
    else:
        t = data.get("train", {})
        train_task = _check_task(chk, "train", t["task"]) if "task" in t else None
        train_file = file_of("train", "file", t["file"]) if "file" in t else None

    def pool_spec(table: str) -> PoolSpec:
        p = data.get(table)
        if p is None:
            if table == "validation" and split is not None:
                p = {}
            else:
                chk.fail(table, None, "missing table")
        task = p.get("task") or (train_task if table == "validation" else None)
        if task is None:
            chk.fail(table, None, "needs 'task'")
        task = _check_task(chk, table, task)
        if "file" in p and "files" in p:
            chk.fail(table, "files", "give 'file' or 'files', not both")
        raw = [p["file"]] if "file" in p else p.get("files")
        if raw is None and not (table == "validation" and split is not None):
            chk.fail(table, None, "needs 'file' or 'files'")
        if raw is not None and not all(isinstance(f, str) for f in raw):
            chk.fail(table, "files", "must be a list of paths")
        files = tuple(file_of(table, "file" if "file" in p else "files", f) for f in raw or ())
        for key in ("n", "per_task"):
            if key in p and p[key] < 1:
                chk.fail(table, key, f"must be >= 1, got {p[key]}")
        return PoolSpec(
            task, files, p.get("n"), p.get("per_task"), p.get("seed", DATA_SEED), f"[{table}]"
        )

    validation, test = pool_spec("validation"), pool_spec("test")
    trained, external = [], []
    raw_configs = data.get("configurations")
    if not isinstance(raw_configs, list) or not raw_configs:
        chk.fail("", "configurations", "needs at least one [[configurations]] table")
    for i, rc in enumerate(raw_configs):
        chk.typed("configurations", rc, _CONFIG_TYPES, i)
        if "name" not in rc:
            chk.fail("configurations", None, "needs 'name'", i)
        kinds = [k for k in _SOURCE_KEYS if k in rc]
        if len(kinds) > 1:
            chk.fail("configurations", "lm_eval", "give 'runs' or 'lm_eval', not both", i)
        if kinds:
            extra = set(rc) - {"name", kinds[0]} - ({"filter"} if kinds[0] == "lm_eval" else set())
            if extra:
                chk.fail(
                    "configurations", sorted(extra)[0],
                    f"a configuration with '{kinds[0]}' is not trained here; drop this key", i,
                )  # fmt: skip
            pattern = str(resolve_path(root, rc[kinds[0]]))
            external.append(
                ExternalConfiguration(rc["name"], kinds[0], pattern, rc.get("filter"))
            )
            continue
        if train_file is None:
            chk.fail(
                "train", None, f"configuration {rc['name']!r} is trained: give [train] or [pool]"
            )
        kw = dict(rc)
        if "target_modules" in kw:
            kw["target_modules"] = tuple(kw["target_modules"])
        try:
            trained.append(Configuration(**kw))
        except CkptselError as err:
            chk.fail("configurations", None, str(err), i)
    names = [c.name for c in trained] + [c.name for c in external]
    if len(set(names)) != len(names):
        chk.fail("configurations", None, f"names must be unique, got {names}")
    m = data.get("measure", {})
    study = Study(
        name=str(s.get("name", root.name)),
        root=work,
        base_model=resolve_model(root, str(s["base_model"])),
        task=train_task or validation.task,
        test_task=test.task,
        train=train_file,
        validation=validation.files[0] if validation.files else None,
        test=test.files[0] if test.files else None,
        configurations=tuple(trained),
        seeds=tuple(seeds),
        runs_dir=resolve_path(work, s.get("runs_dir", "runs")),
        records_dir=resolve_path(work, s.get("records_dir", "records")),
        measure=dict(m),
    )
    return StudySpec(
        path.resolve(), work, study, validation, test, split, tuple(external),
        dict(data.get("analysis", {})), resolve_path(work, s.get("results_dir", "results")),
        dict(data.get("executor", {})),
    )  # fmt: skip


def _check_task(chk: _Checker, table: str, task: str) -> str:
    from ckptsel.data import get_task

    try:
        get_task(task)
    except CkptselError as err:
        chk.fail(table, "task", str(err))
    return task


def _spec_from_v1(data: dict, root: Path, work: Path, path: Path, chk: _Checker) -> StudySpec:
    """A schema-1 (``ckptsel train``) file as a whole study: one validation, one test file."""
    from ckptsel.data import PoolSpec
    from ckptsel.defaults import DATA_SEED

    study = study_from_dict(data, root, source=str(path))
    if study.validation is None or study.test is None:
        chk.fail("study", None, "`ckptsel run` needs 'validation' and 'test' files")
    for key, p in (("validation", study.validation), ("test", study.test)):
        if not p.exists():
            chk.fail("study", key, f"file not found: {p}")
    tt = study.test_task or study.task
    return StudySpec(
        path.resolve(), work, study,
        PoolSpec(study.task, (study.validation,), seed=DATA_SEED, where="[study] validation"),
        PoolSpec(tt, (study.test,), seed=DATA_SEED, where="[study] test"),
        None, (), {}, work / "results",
    )  # fmt: skip


def load_study(path: str | Path) -> Study:
    """Read ``study.toml``; bad files raise :class:`CkptselError` naming the file and key."""
    path = Path(path)
    if not path.is_file():
        raise CkptselError(f"study file not found: {path}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise CkptselError(f"{path}: invalid TOML: {err}") from err
    if data.get("schema", 1) != 1:  # a whole-study file (``ckptsel run``): its trained part
        return load_spec(path).study
    return study_from_dict(data, path.resolve().parent, source=str(path))


