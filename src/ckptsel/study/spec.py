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
    [averages]     last (list of K: average-lastK/), ema (a decay: ema-DECAY/): written after
                   each trajectory is trained, measured with its checkpoints
    [log]          to, run_id, run_name, project, tracking_uri, register, trajectory, rule
                   (results logged to MLflow / W&B / Trackio after analyze; ckptsel.workflows)
    [[configurations]]  a Configuration (trained here), or name + runs = "GLOB" (existing run
                   folders; seed from the folder name, ``...-s42`` / ``..._seed42``), or
                   name + lm_eval = "GLOB" [+ filter]: lm-eval --log_samples folders, per
                   trajectory <folder>/{validation,test}/checkpoint-<step>/ (generations only)

:func:`load_spec` checks every key (known, typed, files present) before anything runs; errors
name the key and its line. :func:`load_study` gives the trained part (a file with ``[train]`` or
``[pool]`` needs no ``[validation]`` or ``[test]`` there). A file without ``schema = 2`` (the
schema-1 form, ``[study]`` task/train/validation/test) is refused in one line that
says how to write it (:data:`SCHEMA1_HOWTO`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.data.pools import PoolSpec
from ckptsel.data.tasks import get_task, is_task_file
from ckptsel.defaults import DATA_SEED
from ckptsel.errors import CkptselError
from ckptsel.records.schema import MAX_AVERAGED, average_step
from ckptsel.study.configuration import DEFAULT_SEEDS, Configuration, Study, resolve_model, resolve_path

_INT, _FLOAT, _STR, _LIST, _BOOL = (int,), (int, float), (str,), (list,), (bool,)
_INT_OR_AUTO = (int, str)  # an int, or the string "auto"
_TABLE = (dict,)
SCHEMA_VERSION = 2
# how a schema-1 file ([study] task, train, validation, test, test_task) is written in schema 2
SCHEMA1_HOWTO = (
    "add `schema = 2` at the top and move [study] task + train to [train] task/file, validation "
    "to [validation] task/file, test (task: test_task, else task) to [test] task/file "
    "(docs/reference/study-toml.md)"
)
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
        "task": (_STR, "task of the fine-tuning pool (loader and answer rules): a name or a task file PATH.toml (relative to this file)"),
        "file": (_STR, "the pool file, split by question group into train and validation"),
        "val_fraction": (_FLOAT, "share of groups that go to validation (default 0.1)"),
        "seed": (_INT, "split seed (default: ckptsel.defaults.DATA_SEED)"),
        "group_field": (_STR, "field that groups paraphrases (default: detected; a task file's group field, else its prompt field)"),
    },
    "train": {"task": (_STR, "task of the training file (a name or PATH.toml; needs a response)"), "file": (_STR, "training items file")},
    "validation": {
        "task": (_STR, "task (loader and answer rules) of the items: a name or PATH.toml"),
        "file": (_STR, "one items file (or folder, for commonsense)"),
        "files": (_LIST, "several item files: a mixture (subtask = file's task)"),
        "n": (_INT, "seeded sample of n items of the whole pool"),
        "per_task": (_INT, "seeded sample of per_task items of every file"),
        "seed": (_INT, "sampling seed (default: ckptsel.defaults.DATA_SEED)"),
    },
    "measure": {
        "max_new_tokens": (_INT, "generation length limit"),
        "batch_size": (_INT_OR_AUTO, "prompts per batch, or auto (16 on a CPU, from GPU memory)"),
        "window": (_INT, "matched NLL window in tokens"),
        "device": (_STR, "cpu | cuda"),
        "backend": (_STR, "hf | vllm"),
        "dtype": (_STR, "auto | float32 | bfloat16 | float16"),
        "max_loras": (_INT, "vLLM: adapter checkpoints in one batch (0: from the work)"),
        "max_lora_rank": (_INT, "vLLM: largest LoRA rank (0: the adapters' own)"),
        "nll_backend": (_STR, "hf | vllm: the engine that scores the NLL (default: backend)"),
        "kv_cache_gib": (_FLOAT, "vLLM: KV cache in GiB (0: sized from the work on a CPU)"),
        "gpu_memory_utilization": (_FLOAT, "vLLM: its share of the GPU (0: 0.6 or 0.85)"),
        "conformance_check": (_BOOL, "false: skip the fast path's conformance check (stamped; at your own risk)"),
        "decoder": (_STR, "HF path: ckptsel (its own loop) | transformers (its continuous batching); texts equal"),
        "prompt_format": (
            _STR,
            "alpaca | chat (the tokenizer's chat template) | a template file (relative to "
            "the study file); training and measurement both use it",
        ),
        "system_prompt": (_STR, "the system turn (chat) or the template's system text"),
        "chat_template_args": (_TABLE, "chat template arguments, e.g. {enable_thinking = false}"),
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
        "budgets": (_LIST, 'finite validation budgets ("full" is always added)'),
    },
    "averages": {
        "last": (_LIST, "average-lastK/ per K: the mean of each trajectory's last K checkpoints, e.g. [3, 5] (2 <= K <= 999)"),
        "ema": (_FLOAT, "ema-DECAY/: every checkpoint weighted decay^(n-1-i), normalized; decay in (0, 1), at most six decimals"),
    },
    "log": {
        "to": (_LIST, 'trackers the results go to: ["mlflow", "wandb", "trackio"]'),
        "run_id": (_STR, "the run to log into (TRACKER=ID with several); default: a new run"),
        "run_name": (_STR, "the training run's name a new run is linked to"),
        "project": (_STR, "MLflow experiment / W&B or Trackio project (default: ckptsel)"),
        "tracking_uri": (_STR, "MLflow tracking URI (default: MLFLOW_TRACKING_URI)"),
        "register": (_STR, "register the recommended checkpoint under this model name"),
        "trajectory": (_STR, "whose checkpoint register registers (default: the only one)"),
        "rule": (_STR, "the rule the recommendation follows (default: accuracy)"),
    },
}
SCHEMA["test"] = SCHEMA["validation"]
_SOURCE_KEYS = {"runs": "existing run folders (glob)", "lm_eval": "lm-eval sample folders (glob)"}
_CONFIG_TYPES: dict[str, tuple[type, ...]] = {
    "name": _STR,
    "adaptation": _STR,
    "rank": _INT,
    "alpha": _FLOAT,
    "lr": _FLOAT,
    "steps": _INT,
    "epochs": _FLOAT,
    "save_every": _INT,
    "batch_size": _INT,
    "micro_batch": _INT,
    "max_length": _INT,
    "warmup_ratio": _FLOAT,
    "weight_decay": _FLOAT,
    "target_modules": _LIST,
    "runs": _STR,
    "lm_eval": _STR,
    "filter": _STR,
}


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
    file: Path | Location
    val_fraction: float = 0.1
    seed: int | None = None
    group_field: str | None = None


@dataclass(frozen=True)
class StudySpec:
    """A whole study (schema 2) for ``ckptsel run``; ``study`` is what ``train`` needs
    (its configurations are the ones trained here)."""

    source: Path | Location  # the study file (a URL: a Location)
    workdir: Path
    study: Study
    validation: PoolSpec  # its files are empty with [pool]: the split's part
    test: PoolSpec
    split: PoolSplit | None
    external: tuple[ExternalConfiguration, ...]
    analysis: dict[str, Any]
    results_dir: Path | Location
    executor: dict[str, Any] = field(default_factory=dict)  # [executor]: where measure runs
    log: dict[str, Any] = field(default_factory=dict)  # [log]: trackers the results go to
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)  # [rules.NAME]: a researcher's own rules
    averages: dict[str, Any] = field(default_factory=dict)  # [averages]: last (list of K), ema (decay)

    @property
    def state_dir(self) -> Path:
        return self.workdir / STATE_DIR

    def average_names(self) -> list[str]:
        """The folders ``[averages]`` writes beside each trajectory's checkpoints:
        ``average-lastK`` per K, then ``ema-DECAY``."""
        ema = self.averages.get("ema")
        return [f"average-last{k}" for k in self.averages.get("last", [])] + ([f"ema-{ema!r}"] if ema is not None else [])

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


def _table_line(text: str, table: str) -> int | None:
    """Line (1-based) of the ``[table]`` header (the first ``[[table]]``), None when absent."""
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("[") and line.strip("[] ") == table:
            return n
    return None


class _Checker:
    """Errors naming the file, the key and its line."""

    def __init__(self, source: str, text: str) -> None:
        self.source, self.text = source, text

    def fail(self, table: str, key: str | None, msg: str, index: int | None = None) -> None:
        where = f"[{table}]" if index is None else f"configurations[{index}]"
        if table == "":
            where = "top level"
        if key:
            line = _line_of(self.text, table, key, index)
        else:  # a whole table (e.g. a key it lacks): the line of its header
            line = _table_line(self.text, table) if table and index is None else None
        at = f", line {line}" if line else ""
        name = f"{where} {key}" if key else where
        raise CkptselError(f"{self.source}{at}: {name}: {msg}")

    def typed(self, table: str, data: dict, types: dict, index: int | None = None) -> None:
        for key, value in data.items():
            if key not in types:
                known = ", ".join(sorted(types))
                self.fail(table, key, f"unknown key (known: {known})", index)
            want = types[key]
            if (isinstance(value, bool) and want != _BOOL) or not isinstance(value, want):
                names = " or ".join(t.__name__ for t in want)
                self.fail(table, key, f"must be {names}, got {value!r}", index)
            if want == _INT_OR_AUTO and isinstance(value, str) and value != "auto":
                self.fail(table, key, f'must be an int or "auto", got {value!r}', index)


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


def load_spec(path: str | Path | Location, *, overrides: Sequence[str] = (), workdir: str | Path | None = None) -> StudySpec:
    """Read and validate a study file (``schema = 2``) for ``ckptsel run``. Every key is
    checked (known, typed, files present) before anything runs; errors name the key and its
    line. ``overrides`` are ``SECTION.KEY=VALUE`` strings applied first (``--set``);
    ``workdir`` (default: the file's folder) holds runs, records, results and the study's
    state. ``path`` may be a URL
    (``s3://…``): its relative references are then below its folder URL, and ``workdir``, a
    local folder, must be given."""
    return _load(path, overrides, workdir, run=True)


def load_study(path: str | Path | Location, *, workdir: str | Path | None = None) -> Study:
    """Read ``study.toml`` (``schema = 2``) for ``ckptsel train``: its trained part. A file with
    ``[train]`` or ``[pool]`` needs no ``[validation]`` or ``[test]`` here. Bad files raise
    :class:`CkptselError` naming the file and key. ``path`` and ``workdir`` as in
    :func:`load_spec`."""
    return _load(path, (), workdir, run=False).study


def _load(path: str | Path | Location, overrides: Sequence[str], workdir: str | Path | None, *, run: bool) -> StudySpec:
    """The steps of :func:`load_spec`; ``run=False`` (:func:`load_study`) lets a file that
    trains leave out its validation and test tables (the spec's pools are then None)."""
    source = as_location(path) if is_url(path) else Path(path)
    text, data = _read(source)
    _apply_overrides(data, overrides)
    chk = _Checker(str(source), text)
    data = _schema2(data, chk)
    _check_tables(data, chk)
    if is_url(source):
        root: Path | Location = source.parent
    else:
        source = source.resolve()
        root = source.parent
    work = _workdir(source, workdir)
    s = data.get("study", {})
    seeds = _seeds(s, chk)
    split, train_task, train_file = _training_data(data, chk, root, work)
    validation = _pool_spec(data, "validation", chk, root, split, train_task, run=run)
    test = _pool_spec(data, "test", chk, root, split, train_task, run=run)
    trained, external = _configurations(data.get("configurations"), chk, root, train_file)
    if trained and train_task and not get_task(train_task).has_response:
        chk.fail(
            "pool" if split else "train",
            "task",
            f"{get_task(train_task).name} has no response field: nothing to fine-tune on (SFT needs one; [fields] response)",
        )
    runs_dir = resolve_path(work, s.get("runs_dir", "runs"))
    if trained and is_url(runs_dir):
        msg = f"must be a local folder, got {runs_dir} (training writes there)"
        chk.fail("study", "runs_dir", msg)
    study = Study(
        name=str(s.get("name", root.name)),
        root=work,
        base_model=resolve_model(root, str(s["base_model"])),
        task=train_task or validation.task,
        test_task=test.task if test is not None else None,
        train=train_file,
        validation=validation.files[0] if validation is not None and validation.files else None,
        test=test.files[0] if test is not None and test.files else None,
        configurations=tuple(trained),
        seeds=tuple(seeds),
        runs_dir=runs_dir,
        records_dir=resolve_path(work, s.get("records_dir", "records")),
        measure=_measure_settings(data.get("measure", {}), chk, root),
    )
    return StudySpec(
        source,
        work,
        study,
        validation,
        test,
        split,
        tuple(external),
        dict(data.get("analysis", {})),
        resolve_path(work, s.get("results_dir", "results")),
        dict(data.get("executor", {})),
        dict(data.get("log", {})),
        {str(k): dict(v) for k, v in (data.get("rules") or {}).items()},
        _averages(data.get("averages", {}), chk),
    )


def _averages(table: dict[str, Any], chk: _Checker) -> dict[str, Any]:
    """``[averages]`` (typed already): ``last``, distinct integers K with 2 <= K <=
    :data:`~ckptsel.records.schema.MAX_AVERAGED`; ``ema``, a decay in (0, 1) whose folder name
    ``ema-DECAY`` records can hold (:func:`~ckptsel.records.schema.average_step`). ``{}``
    without the table; ``{"last": [...], "ema": decay or None}`` with it."""
    if not table:
        return {}
    last = table.get("last", [])
    if not all(isinstance(k, int) and not isinstance(k, bool) for k in last):
        chk.fail("averages", "last", f"must be a list of integers K (average-lastK/), got {last!r}")
    bad = next((k for k in last if not 2 <= k <= MAX_AVERAGED), None)
    if bad is not None:
        chk.fail("averages", "last", f"K must be between 2 and {MAX_AVERAGED} (an average of the last K checkpoints), got {bad}")
    if len(set(last)) != len(last):
        chk.fail("averages", "last", f"contains duplicates: {last}")
    ema = table.get("ema")
    if ema is not None:
        ema = float(ema)
        if not 0.0 < ema < 1.0:
            chk.fail("averages", "ema", f"the decay must be between 0 and 1 (exclusive), got {table['ema']!r}")
        try:
            average_step(f"ema-{ema!r}")
        except CkptselError:
            chk.fail("averages", "ema", f"a decay of at most six decimals (its folder ema-DECAY names it), got {table['ema']!r}")
    if not last and ema is None:
        chk.fail("averages", None, "give last = [K, ...] and/or ema = DECAY")
    return {"last": list(last), "ema": ema}


def _measure_settings(measure: dict[str, Any], chk: _Checker, root: Path | Location) -> dict:
    """``[measure]``, its ``prompt_format`` file (when not alpaca or chat) resolved against the
    study file's folder and required to exist."""
    out = dict(measure)
    fmt = out.get("prompt_format")
    if isinstance(fmt, str) and fmt not in ("alpaca", "chat"):
        out["prompt_format"] = str(_file(chk, root, "measure", "prompt_format", fmt))
    return out


def _workdir(source: Path | Location, workdir: str | Path | None) -> Path:
    """The study's work folder: ``workdir``, else the study file's folder; a local folder (a
    study file at a URL has none of its own: ``--workdir`` must be given)."""
    if workdir is not None and is_url(workdir):
        raise CkptselError(f"--workdir {workdir}: must be a local folder (runs and state go there)")
    if workdir is not None:
        return Path(str(as_location(workdir))).resolve()
    if is_url(source):
        raise CkptselError(
            f"{source}: a study file at a URL has no local folder for its runs, state and results: give --workdir DIR (a local folder)"
        )
    return source.parent


def _read(path: Path | Location) -> tuple[str, dict[str, Any]]:
    """The file's text and its TOML mapping (a URL read through its filesystem)."""
    loc = as_location(path)
    try:
        if not loc.is_file():
            raise CkptselError(f"study file not found: {path}")
        text = loc.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CkptselError(f"{path}: cannot read the study file ({err})") from err
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CkptselError(f"{path}: invalid TOML: {err}") from err


def _schema2(data: dict[str, Any], chk: _Checker) -> dict[str, Any]:
    """The mapping, its ``schema`` version checked (a file without ``schema = 2`` is refused,
    saying how to write it), ``executor = "KIND"`` as its table."""
    version = data.pop("schema", 1)
    if version == 1:
        line = _line_of(chk.text, "", "schema")
        at = f", line {line}" if line else ""
        raise CkptselError(f"{chk.source}{at}: a schema-1 study file (no `schema = 2`) is no longer read: {SCHEMA1_HOWTO}")
    if version != SCHEMA_VERSION:
        chk.fail("", "schema", f"unknown version {version!r} (this ckptsel reads 2)")
    if isinstance(data.get("executor"), str):  # executor = "ray": that kind, default settings
        data["executor"] = {"kind": data["executor"]}
    return data


RULE_KEYS = {
    "signal": (_STR, "your rule's signal: rules.py:function, a Python file beside the study file"),
    "maximize": (_BOOL, "whether a larger signal sum is better (default: true, or the function's own maximize)"),
    "uses_labels": (_BOOL, "whether the signal reads the validation labels (default: false)"),
}


def _check_tables(data: dict[str, Any], chk: _Checker) -> None:
    """Known tables only, each a table of known, typed keys (:data:`SCHEMA`); ``[rules.NAME]``
    tables of :data:`RULE_KEYS`."""
    for table in data:
        if table not in SCHEMA and table not in ("configurations", "rules"):
            chk.fail("", table, f"unknown table (known: {', '.join([*SCHEMA, 'configurations', 'rules'])})")
    rules = data.get("rules", {})
    if not isinstance(rules, dict):
        chk.fail("", "rules", "must be a table")
    for name, rule in rules.items():
        if not isinstance(rule, dict):
            chk.fail("rules", name, "must be a table: [rules.NAME] with signal = 'rules.py:function'")
        chk.typed(f"rules.{name}", rule, {k: v[0] for k, v in RULE_KEYS.items()})
        if "signal" not in rule:
            chk.fail(f"rules.{name}", None, "needs signal = 'rules.py:function'")
    for table, types in SCHEMA.items():
        if table in data:
            if not isinstance(data[table], dict):
                chk.fail("", table, "must be a table")
            chk.typed(table, data[table], {k: v[0] for k, v in types.items()})


def _seeds(s: dict[str, Any], chk: _Checker) -> list[int]:
    """``[study]``: a base model, and distinct integer seeds (default :data:`DEFAULT_SEEDS`)."""
    if "base_model" not in s:
        chk.fail("study", None, "needs 'base_model'")
    seeds = s.get("seeds", list(DEFAULT_SEEDS))
    if not seeds or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds):
        chk.fail("study", "seeds", "must be a non-empty list of integers")
    if len(set(seeds)) != len(seeds):
        chk.fail("study", "seeds", f"contains duplicates: {seeds}")
    if any(not 0 <= x < 2**32 for x in seeds):
        chk.fail("study", "seeds", f"must be in [0, 2**32) (torch and numpy seeds), got {seeds}")
    return seeds


def _file(chk: _Checker, root: Path | Location, table: str, key: str, value: str) -> Path | Location:
    """A path or URL of the file (relative to its folder) that must exist."""
    p = resolve_path(root, value)
    if not p.exists():
        chk.fail(table, key, f"file not found: {p}")
    return p


def _check_task(chk: _Checker, table: str, task: str, root: Path | Location) -> str:
    """A task name, or a task file (``PATH.toml``, relative to the study file: kept absolute)."""
    if is_task_file(task):
        task = str(resolve_path(root, task))
    try:
        get_task(task)
    except CkptselError as err:
        chk.fail(table, "task", str(err))
    return task


def _training_data(
    data: dict[str, Any], chk: _Checker, root: Path | Location, work: Path
) -> tuple[PoolSplit | None, str | None, Path | Location | None]:
    """``(split, train task, train file)``: from ``[pool]`` (split into train + validation
    under the work folder) or from ``[train]`` (both None when nothing is trained here)."""
    if "pool" not in data:
        t = data.get("train", {})
        train_task = _check_task(chk, "train", t["task"], root) if "task" in t else None
        train_file = _file(chk, root, "train", "file", t["file"]) if "file" in t else None
        return None, train_task, train_file
    p = data["pool"]
    for key in ("task", "file"):
        if key not in p:
            chk.fail("pool", None, f"needs '{key}'")
    if "train" in data:
        chk.fail("train", None, "give either [pool] (split into train + validation) or [train]")
    frac = p.get("val_fraction", 0.1)
    if not 0 < frac < 1:
        chk.fail("pool", "val_fraction", f"must be in (0, 1), got {frac}")
    task = _check_task(chk, "pool", p["task"], root)
    fields = get_task(task).fields if is_task_file(task) else None  # a task file's own group
    group_field = p.get("group_field") or (fields and (fields.group or fields.prompt[0]))
    split = PoolSplit(task, _file(chk, root, "pool", "file", p["file"]), float(frac), p.get("seed", DATA_SEED), group_field)
    return split, split.task, work / STATE_DIR / "split" / f"train{split.file.suffix or '.jsonl'}"


def _pool_spec(
    data: dict[str, Any], table: str, chk: _Checker, root: Path | Location, split: PoolSplit | None, train_task: str | None, *, run: bool
) -> PoolSpec | None:
    """``[validation]`` or ``[test]`` as a :class:`~ckptsel.data.PoolSpec`. With ``[pool]``,
    validation defaults to the split's part (files empty: the runner fills them in) and to the
    pool's task. None only for :func:`load_study` (``run=False``) of a file that trains
    (``[train]`` or ``[pool]``) and lacks that table."""
    p = data.get(table)
    if p is None:
        if table == "validation" and split is not None:
            p = {}
        elif not run and train_task is not None:
            return None
        else:
            chk.fail(table, None, "missing table")
    task = p.get("task") or (train_task if table == "validation" else None)
    if task is None:
        chk.fail(table, None, "needs 'task'")
    task = _check_task(chk, table, task, root)
    if "file" in p and "files" in p:
        chk.fail(table, "files", "give 'file' or 'files', not both")
    raw = [p["file"]] if "file" in p else p.get("files")
    if raw is None and not (table == "validation" and split is not None):
        chk.fail(table, None, "needs 'file' or 'files'")
    if raw is not None and not all(isinstance(f, str) for f in raw):
        chk.fail(table, "files", "must be a list of paths")
    key = "file" if "file" in p else "files"
    files = tuple(_file(chk, root, table, key, f) for f in raw or ())
    for key in ("n", "per_task"):
        if key in p and p[key] < 1:
            chk.fail(table, key, f"must be >= 1, got {p[key]}")
    return PoolSpec(task, files, p.get("n"), p.get("per_task"), p.get("seed", DATA_SEED), f"[{table}]")


def _configurations(
    raw_configs: Any, chk: _Checker, root: Path | Location, train_file: Path | Location | None
) -> tuple[list[Configuration], list[ExternalConfiguration]]:
    """``[[configurations]]``: trained here (a :class:`Configuration`, which needs training
    data) or external (``runs`` / ``lm_eval`` globs, nothing else but ``filter``); names unique."""
    if not isinstance(raw_configs, list) or not raw_configs:
        chk.fail("", "configurations", "needs at least one [[configurations]] table")
    trained, external = [], []
    for i, rc in enumerate(raw_configs):
        chk.typed("configurations", rc, _CONFIG_TYPES, i)
        if "name" not in rc:
            chk.fail("configurations", None, "needs 'name'", i)
        kinds = [k for k in _SOURCE_KEYS if k in rc]
        if len(kinds) > 1:
            chk.fail("configurations", "lm_eval", "give 'runs' or 'lm_eval', not both", i)
        if kinds:
            external.append(_external(rc, kinds[0], chk, root, i))
            continue
        if train_file is None:
            chk.fail("train", None, f"configuration {rc['name']!r} is trained: give [train] or [pool]")
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
    return trained, external


def _external(rc: dict[str, Any], kind: str, chk: _Checker, root: Path | Location, index: int) -> ExternalConfiguration:
    """A configuration whose trajectories exist already (``runs`` or ``lm_eval``)."""
    extra = set(rc) - {"name", kind} - ({"filter"} if kind == "lm_eval" else set())
    if extra:
        chk.fail("configurations", sorted(extra)[0], f"a configuration with '{kind}' is not trained here; drop this key", index)
    pattern = str(resolve_path(root, rc[kind]))
    return ExternalConfiguration(rc["name"], kind, pattern, rc.get("filter"))
