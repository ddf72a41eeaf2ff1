"""``ckptsel run STUDY.toml``: a whole study as one resumable job.

Stages, in order (:data:`STAGES`), each idempotent, so a job killed anywhere and run again
continues and ends with the same records and the same ``summary.json``:

* ``prepare`` — with ``[pool]``, split the fine-tuning file into train + validation
  (:func:`ckptsel.split.split_file`, skipped when its lineage matches the file) and audit the
  train, validation and test questions for overlap (:mod:`ckptsel.audit`, once); build the
  validation and test pools (:mod:`ckptsel.pools`) and write them (with their strata) under
  ``<workdir>/.ckptsel/``; check the study against the fingerprint of the recorded work
  (a changed setting that invalidates it is refused, with the difference) and store it.
* ``train`` — every trajectory of the configurations trained here that lacks its final
  checkpoint (:func:`ckptsel.train.train_study`; finished ones are skipped, others resume).
* ``measure`` — every checkpoint of every trajectory (trained here, or existing run folders
  found by a glob), on both pools (:func:`ckptsel.measure.measure_run`, whose part cache skips
  what is recorded); lm-eval sample folders are ingested (:mod:`ckptsel.ingest`).
* ``analyze`` — :func:`ckptsel.pipeline.analyze` with the report.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from glob import glob
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError
from ckptsel.io import write_text
from ckptsel.study import StudySpec

STAGES = ("prepare", "train", "measure", "analyze")
FINGERPRINT_FILE = "fingerprint.json"
_SEED_RE = re.compile(r"(?:^|[-_.])(?:s|seed)[-_]?(\d+)$")

Log = Callable[[str], None]


def stages_to_run(until: str | None = None, only: str | None = None) -> tuple[str, ...]:
    """The stages selected by ``--until`` / ``--only`` (one of them at most)."""
    for flag, value in (("--until", until), ("--only", only)):
        if value is not None and value not in STAGES:
            raise CkptselError(f"{flag} {value!r}: stages are {', '.join(STAGES)}")
    if until and only:
        raise CkptselError("give --until or --only, not both")
    if only:
        return (only,)
    if until:
        return STAGES[: STAGES.index(until) + 1]
    return STAGES


def seed_of(folder: str) -> int | None:
    """The seed in a run folder's name: ``...-s42``, ``..._seed42``, ``...-seed-42``."""
    m = _SEED_RE.search(Path(folder).name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Trajectory:
    """One trajectory of the study and where its checkpoints are (or will be)."""

    name: str
    configuration: str
    source: str  # "train" | "runs" | "lm_eval"
    folder: Path
    expected_steps: tuple[int, ...] = ()  # trained here: the checkpoint grid
    filter: str | None = None  # lm-eval filter


class StudyRun:
    """A loaded study file and its stages."""

    def __init__(self, spec: StudySpec, *, device: str | None = None, log: Log = print) -> None:
        self.spec, self.log = spec, log
        self.device = device
        from ckptsel.measure.executors import ExecutorConfig

        try:  # [executor] is checked before anything runs
            self.executor = ExecutorConfig.coerce(spec.executor)
        except CkptselError as err:
            raise CkptselError(f"{spec.source}: [executor]: {err}") from err
        self._pools: tuple[list, list] | None = None

    # ---------------------------------------------------------------- inputs
    @property
    def records_dir(self) -> Path:
        return self.spec.study.records_root

    def validation_spec(self):
        """The validation pool spec; with ``[pool]`` its file is the split's validation part."""
        from dataclasses import replace

        v = self.spec.validation
        if not v.files and self.spec.split is not None:
            ext = self.spec.split.file.suffix or ".jsonl"
            return replace(v, files=(self.spec.state_dir / "split" / f"validation{ext}",))
        return v

    def pools(self) -> tuple[list, list]:
        """(validation items, test items), built once."""
        from ckptsel.pools import build_pools

        if self._pools is None:
            self._pools = build_pools(self.validation_spec(), self.spec.test)
        return self._pools

    def measure_config(self):
        from ckptsel.measure import MeasureConfig

        m = dict(self.spec.study.measure)
        if self.device is not None:
            m["device"] = self.device
        m.setdefault("device", _default_device())
        v, t = self.spec.validation.task, self.spec.test.task
        # on Ray the GPUs are the workers', not this process's: checked where the models run
        check_here = self.executor.kind != "ray"
        return MeasureConfig(task=v, test_task=t if t != v else None, check_here=check_here, **m)

    def n_train(self) -> int:
        from ckptsel.tasks import load_items

        st = self.spec.study
        if not st.configurations or st.train is None or not st.train.exists():
            return 0
        return len(load_items(st.task, st.train))

    def trajectories(self) -> list[Trajectory]:
        """Trained-here trajectories, then those found by each external configuration's glob."""
        st = self.spec.study
        n = self.n_train() if any(c.epochs is not None for c in st.configurations) else 0
        out = [
            Trajectory(name, cfg.name, "train", st.run_root / name, tuple(cfg.save_steps(n)))
            for name, cfg, _seed in st.trajectories()
        ]
        for ext in self.spec.external:
            folders = sorted(p for p in glob(ext.pattern) if Path(p).is_dir())
            if not folders:
                raise CkptselError(
                    f"configuration {ext.name!r}: {ext.kind} = {ext.pattern!r} matches no folder"
                )
            for f in folders:
                seed = seed_of(f)
                if seed is None:
                    raise CkptselError(
                        f"configuration {ext.name!r}: cannot read a seed from folder {f} "
                        "(name it ...-s<seed> or ..._seed<seed>)"
                    )
                out.append(
                    Trajectory(f"{ext.name}-s{seed}", ext.name, ext.kind, Path(f), (), ext.filter)
                )
        names = [t.name for t in out]
        dup = sorted({x for x in names if names.count(x) > 1})
        if dup:
            raise CkptselError(f"trajectory names occur twice: {dup} (two folders, one seed?)")
        return out

    # ---------------------------------------------------------------- fingerprint
    def fingerprint(self) -> dict[str, Any]:
        """The settings that recorded work depends on."""
        from ckptsel.pools import pool_digest

        st, val, test = self.spec.study, *self.pools()
        cfg = self.measure_config()
        return {
            "base_model": st.base_model,
            "train": {
                "task": st.task,
                "file": str(st.train) if st.configurations else None,
                "split": None if self.spec.split is None else _jsonable(asdict(self.spec.split)),
            },
            "validation": {**self.validation_spec().settings(), "items": pool_digest(val)},
            "test": {**self.spec.test.settings(), "items": pool_digest(test)},
            "measure": {
                "generation": cfg.generation_fingerprint(),
                "nll": cfg.nll_fingerprint(),
            },
            "seeds": list(st.seeds),
            "configurations": {
                **{c.name: _jsonable(asdict(c)) for c in st.configurations},
                **{e.name: _jsonable(asdict(e)) for e in self.spec.external},
            },
        }

    def check_fingerprint(self, write: bool = True) -> list[str]:
        """Differences from the stored fingerprint that invalidate recorded work (raises
        :class:`CkptselError` listing them); stores the current one when ``write``."""
        path = self.spec.state_dir / FINGERPRINT_FILE
        now = self.fingerprint()
        if path.is_file():
            before = json.loads(path.read_text(encoding="utf-8"))
            diffs = fingerprint_diff(before, now)
            if diffs:
                raise CkptselError(
                    f"{self.spec.source}: the study changed in a way that invalidates its recorded "
                    f"work in {self.spec.workdir}:\n  " + "\n  ".join(diffs) + "\nundo the change, "
                    f"or start in a new --workdir (or delete {path} and the records to redo it)"
                )
        if write:
            write_text(path, json.dumps(now, indent=2, sort_keys=True) + "\n")
        return []

    # ---------------------------------------------------------------- stages
    def prepare(self) -> None:
        spec = self.spec
        if spec.split is not None:
            self._split()
        self.check_fingerprint()
        val, test = self.pools()
        from ckptsel.pools import strata_counts

        for split, items in (("validation", val), ("test", test)):
            rows = [{**asdict(it)} for it in items]
            write_text(
                spec.state_dir / "pools" / f"{split}.json",
                json.dumps(rows, indent=1, ensure_ascii=False) + "\n",
            )
        strata = {"validation": strata_counts(val), "test": strata_counts(test)}
        write_text(spec.state_dir / "pools" / "strata.json", json.dumps(strata, indent=2) + "\n")
        self.log(
            f"prepare: validation {len(val)} items ({self.spec.validation.task}), "
            f"test {len(test)} items ({self.spec.test.task})"
            + (f"; strata {strata['test']}" if len(strata["test"]) > 1 else "")
        )
        if spec.split is not None:
            self._audit(val, test)

    def _split(self) -> None:
        import hashlib

        from ckptsel.split import split_file

        sp, out = self.spec.split, self.spec.state_dir / "split"
        lineage = out / "lineage.json"
        sha = hashlib.sha256(sp.file.read_bytes()).hexdigest()
        if lineage.is_file():
            lin = json.loads(lineage.read_text(encoding="utf-8"))
            same = lin.get("source_sha256") == sha and lin.get("seed") == sp.seed
            if same and lin.get("val_fraction") == sp.val_fraction:
                self.log("prepare: split is done (lineage matches the pool file)")
                return
        split_file(
            sp.file, out, seed=sp.seed, val_fraction=sp.val_fraction, group_field=sp.group_field
        )
        self.log(f"prepare: split {sp.file.name} into train + validation ({out})")

    def _audit(self, val: list, test: list) -> None:
        from ckptsel.audit import audit_pools, write_audit
        from ckptsel.tasks import load_items

        out = self.spec.state_dir / "audit"
        if (out / "audit.json").is_file():
            return
        st = self.spec.study
        train = [it.instruction for it in load_items(st.task, st.train)]
        res = audit_pools(
            {
                "train": train,
                "validation": [it.instruction for it in val],
                "test": [it.instruction for it in test],
            }
        )
        write_audit(res, out)
        self.log(f"prepare: overlap audit written to {out / 'audit.md'}")

    def train(self) -> None:
        st = self.spec.study
        if not st.configurations:
            self.log("train: no configuration is trained here")
            return
        from ckptsel.train import train_study

        train_study(st, device=self.device, progress=False, log=lambda m: self.log(f"train: {m}"))

    def measure(self) -> None:
        from ckptsel.measure import measure_run

        val, test = self.pools()
        cfg = self.measure_config()
        for t in self.trajectories():
            if t.source == "lm_eval":
                self._ingest(t)
                continue
            res = measure_run(
                t.folder, cfg, validation=val, test=test, out=self.records_dir,
                trajectory=t.name, configuration=t.configuration, executor=self.executor,
            )  # fmt: skip
            self.log(
                f"measure: {t.name}: {len(res.steps)} checkpoints, "
                f"{len(res.measured_steps)} measured, {len(res.reused_steps)} already recorded "
                f"({res.seconds:.1f}s)"
            )

    def _ingest(self, t: Trajectory) -> None:
        """lm-eval samples: ``<trajectory folder>/<split>/checkpoint-<step>/`` per split."""
        from ckptsel.ingest import ingest_lm_eval

        for split in ("validation", "test"):
            folders = sorted(p for p in (t.folder / split).glob("checkpoint-*") if p.is_dir())
            if not folders:
                raise CkptselError(f"{t.folder / split}: no checkpoint-<step>/ sample folders")
            task = self.spec.test.task if split == "test" else self.spec.validation.task
            ingest_lm_eval(
                folders, out=self.records_dir, trajectory=t.name, configuration=t.configuration,
                task=task, split=split, filter_name=t.filter,
                note=lambda m: self.log(f"measure: {m}"),
            )  # fmt: skip
        self.log(f"measure: {t.name}: lm-eval samples ingested")

    def analyze(self) -> dict:
        from ckptsel.pipeline import analyze

        settings = dict(self.spec.analysis)
        budgets = settings.pop("budgets", None)
        if budgets is not None:
            if "budgets" not in inspect.signature(analyze).parameters:
                raise CkptselError("[analysis] budgets: this ckptsel's analyze has no budgets")
            settings["budgets"] = budgets
        out = self.spec.results_dir
        summary = analyze(self.records_dir, out, report=True, **settings)
        self.log(f"analyze: results in {out}")
        return summary

    # ---------------------------------------------------------------- plan
    def plan(self) -> list[dict[str, Any]]:
        """Per trajectory: checkpoints (existing or to train), items, generations to do/done."""
        from ckptsel.measure.checkpoints import discover_checkpoints
        from ckptsel.measure.parts import ItemPool, StepParts
        from ckptsel.train import checkpoint_steps

        val, test = self.pools()
        cfg = self.measure_config()
        pool = ItemPool.load(cfg.task, val, test, cfg.test_task)
        rows = []
        for t in self.trajectories():
            if t.source == "lm_eval":  # generations made elsewhere: only ingested here
                n_ckpt = len(list((t.folder / "test").glob("checkpoint-*")))
                rows.append(
                    {
                        "trajectory": t.name, "source": t.source, "checkpoints": n_ckpt,
                        "trained": n_ckpt, "items": pool.n_items, "generations_todo": 0,
                        "generations_done": 0, "nll_todo": 0,
                    }
                )  # fmt: skip
                continue
            have = checkpoint_steps(t.folder)
            if t.source == "runs" and not have:
                have = [c.step for c in discover_checkpoints(t.folder)]
            steps = sorted(set(have) | set(t.expected_steps))
            to_gen = done_gen = to_score = 0
            for step in steps:
                parts = StepParts(self.records_dir, t.name, step, cfg, pool)
                g = sum(map(len, parts.todo_gen.values()))
                to_gen += g
                done_gen += pool.n_items - g
                to_score += sum(map(len, parts.todo_nll.values()))
            rows.append(
                {
                    "trajectory": t.name, "source": t.source, "checkpoints": len(steps),
                    "trained": len([s for s in steps if s in have]), "items": pool.n_items,
                    "generations_todo": to_gen, "generations_done": done_gen,
                    "nll_todo": to_score,
                }
            )  # fmt: skip
        return rows

    def run(self, stages: Sequence[str] = STAGES) -> dict | None:
        summary = None
        for stage in STAGES:
            if stage in stages:
                if stage != "prepare":  # a resumed stage still checks the study first
                    self.check_fingerprint(write=False)
                out = getattr(self, stage)()
                if stage == "analyze":
                    summary = out
        return summary


def fingerprint_diff(before: dict, now: dict) -> list[str]:
    """Changes from ``before`` that invalidate recorded work (added configurations or seeds
    do not: they are new work)."""
    diffs = []
    for key in sorted(set(before) | set(now)):
        a, b = before.get(key), now.get(key)
        if key == "configurations":
            a, b = a or {}, b or {}
            for name in sorted(a):
                if name not in b:
                    diffs.append(f"configuration {name!r} was removed (its records remain)")
                elif a[name] != b[name]:
                    both = set(a[name]) | set(b[name])
                    keys = sorted(k for k in both if a[name].get(k) != b[name].get(k))
                    diffs.append(
                        f"configuration {name!r}: "
                        + ", ".join(f"{k} {a[name].get(k)!r} -> {b[name].get(k)!r}" for k in keys)
                    )
        elif key == "seeds":
            gone = sorted(set(a or []) - set(b or []))
            if gone:
                diffs.append(f"seeds {gone} were removed (their records remain)")
        elif a != b:
            old, new = json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)
            diffs.append(f"{key}: {old} -> {new}")
    return diffs


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"


def format_plan(rows: list[dict[str, Any]]) -> str:
    """The ``--dry-run`` table."""
    head = ("trajectory", "source", "checkpoints", "trained", "items", "gen todo", "gen done")
    keys = ("trajectory", "source", "checkpoints", "trained", "items", "generations_todo",
            "generations_done")  # fmt: skip
    table = [head] + [tuple(str(r[k]) for k in keys) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in table]
    n_ckpt = sum(r["checkpoints"] for r in rows)
    items = rows[0]["items"] if rows else 0
    todo = sum(r["generations_todo"] for r in rows)
    done = sum(r["generations_done"] for r in rows)
    lines.append(
        f"{len(rows)} trajectories x {n_ckpt} checkpoints in all x {items} items: "
        f"{todo} generations to do, {done} already recorded"
    )
    return "\n".join(lines)
