"""``ckptsel run STUDY.toml``: a whole study as one resumable job.

Stages, in order (:data:`STAGES`), each idempotent, so a job killed anywhere and run again
continues and ends with the same records and the same ``summary.json``:

* ``prepare`` — with ``[pool]``, split the fine-tuning file into train + validation
  (:func:`ckptsel.data.split_file`, skipped when its lineage matches the file) and audit the
  train, validation and test questions for overlap (:mod:`ckptsel.data.audit`, once); build the
  validation and test pools (:mod:`ckptsel.data.pools`) and write them (with their strata) under
  ``<workdir>/.ckptsel/``; check the study against the fingerprint of the recorded work
  (a changed setting that invalidates it is refused, with the difference) and store it.
* ``train`` — every trajectory of the configurations trained here that lacks its final
  checkpoint (:func:`ckptsel.train.train_study`; finished ones are skipped, others resume).
* ``measure`` — every checkpoint of every trajectory (trained here, or existing run folders
  found by a glob), on both pools (:func:`ckptsel.measure.measure_run`, whose part cache skips
  what is recorded); lm-eval sample folders are ingested (:mod:`ckptsel.measure.ingest`).
* ``analyze`` — :func:`ckptsel.workflows.analyze` with the report.

With ``workers > 1`` (``ckptsel run --workers N``) the ``train`` and ``measure`` stages run per
trajectory instead: :func:`trajectory_job` trains one trajectory (when it is trained here) and
measures its checkpoints, in ``N`` spawned processes with one torch thread each. Every
trajectory's training is seeded on its own and the records store takes per-trajectory units
under a lock, so the records and ``summary.json`` are those of ``workers = 1``. Trajectories
already trained and fully recorded are skipped without starting a process.

Progress: every stage and trajectory logs one line (a log gets no bar updates); with a
``console`` that is a terminal, one live display counts the trajectories as well.
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

from ckptsel._util.io import write_text
from ckptsel.errors import CkptselError
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

    def __init__(
        self,
        spec: StudySpec,
        *,
        device: str | None = None,
        log: Log = print,
        workers: int = 1,
        console: Any = None,
    ) -> None:
        """``workers``: processes that train + measure trajectories (1: this process, stage
        by stage); ``console``: a rich console for the live display (shown only when it is a
        terminal)."""
        self.spec, self.log = spec, log
        self.device = device
        from ckptsel.measure import ExecutorConfig

        try:  # [executor] is checked before anything runs
            self.executor = ExecutorConfig.coerce(spec.executor)
        except CkptselError as err:
            raise CkptselError(f"{spec.source}: [executor]: {err}") from err
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise CkptselError(f"--workers must be an integer >= 1, got {workers!r}")
        if workers > 1 and self.executor.kind == "ray":
            raise CkptselError(
                f"--workers {workers}: [executor] is ray, which spreads the measurement over "
                "its cluster itself; run with --workers 1"
            )
        self.workers, self.console = workers, console
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
        from ckptsel.data import build_pools

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
        from ckptsel.data import load_items

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
        from ckptsel.data import pool_digest

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
        from ckptsel.data import strata_counts

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

        from ckptsel.data import split_file

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
        from ckptsel.data import audit_pools, load_items, write_audit

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

    def train(self, only: Sequence[str] | None = None) -> None:
        """Train (or resume) the trajectories trained here (``only``: these names)."""
        st = self.spec.study
        if not st.configurations:
            self.log("train: no configuration is trained here")
            return
        from ckptsel.train import train_study

        with self._live("train", len(st.trajectories()) if only is None else 0) as advance:

            def log(m: str) -> None:  # train_study logs one line per trajectory
                self.log(f"train: {m}")
                advance()

            train_study(st, only=only, device=self.device, progress=False, log=log)

    def measure(self, only: Sequence[str] | None = None) -> None:
        """Measure every checkpoint of every trajectory (``only``: these names)."""
        from ckptsel.measure import measure_run

        val, test = self.pools()
        cfg = self.measure_config()
        trajs = [t for t in self.trajectories() if only is None or t.name in only]
        with self._live("measure", len(trajs) if only is None else 0) as advance:
            for t in trajs:
                if t.source == "lm_eval":
                    self._ingest(t)
                    advance()
                    continue
                res = measure_run(
                    t.folder, cfg, validation=val, test=test, out=self.records_dir,
                    trajectory=t.name, configuration=t.configuration, executor=self.executor,
                )  # fmt: skip
                self.log(
                    f"measure: {t.name}: {len(res.steps)} checkpoints, "
                    f"{len(res.measured_steps)} measured, {len(res.reused_steps)} already "
                    f"recorded ({res.seconds:.1f}s)"
                )
                advance()

    def train_and_measure(self, train: bool = True, measure: bool = True) -> None:
        """The ``train`` and/or ``measure`` stages per trajectory in ``workers`` spawned
        processes (:func:`trajectory_job`); lm-eval samples are ingested here afterwards."""
        trajs = [t for t in self.trajectories() if t.source != "lm_eval"]
        done = self.finished(trajs) if measure else set()
        if done:
            self.log(f"train + measure: already done, skipped: {', '.join(sorted(done))}")
        todo = [t.name for t in trajs if t.name not in done]
        what = " + ".join(s for s, on in (("train", train), ("measure", measure)) if on)
        if todo:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            n = min(self.workers, len(todo))
            ctx = multiprocessing.get_context("spawn")
            label = f"{what} ({n} process{'es' if n > 1 else ''})"
            with self._live(label, len(todo)) as advance:
                with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
                    futures = [
                        pool.submit(trajectory_job, self.spec, self.device, name, train, measure)
                        for name in todo
                    ]
                    try:
                        for fut in as_completed(futures):
                            for line in fut.result():
                                self.log(line)
                            advance()
                    except BaseException:
                        for f in futures:
                            f.cancel()
                        raise
        if measure:
            for t in self.trajectories():
                if t.source == "lm_eval":
                    self._ingest(t)

    def finished(self, trajectories: Sequence[Trajectory]) -> set[str]:
        """Names of the trajectories whose checkpoints are all there (trained here: the whole
        grid) and whose generations and NLL rows cover every item of both pools at every
        checkpoint: nothing is left to train or measure."""
        from ckptsel.records import read_rows
        from ckptsel.train import checkpoint_steps, discover_checkpoints

        val, test = self.pools()
        size = {"validation": len({it.item_id for it in val}),
                "test": len({it.item_id for it in test})}  # fmt: skip
        cols = ["trajectory", "step", "split", "item_id"]
        counts = []
        for kind in ("generations", "nll"):
            table = read_rows(self.records_dir, kind, columns=cols)
            if table is None:
                return set()
            df = table.to_pandas()
            n = df.groupby(["trajectory", "split", "step"])["item_id"].nunique()
            counts.append({(str(t), str(sp), int(st)): int(c) for (t, sp, st), c in n.items()})
        done = set()
        for t in trajectories:
            if t.source == "train":
                have = set(checkpoint_steps(t.folder))
                if not t.expected_steps or not set(t.expected_steps) <= have:
                    continue
                steps = sorted(have)
            else:
                steps = [c.step for c in discover_checkpoints(t.folder)]
            if steps and all(
                c.get((t.name, sp, step)) == size[sp]
                for c in counts
                for sp in size
                for step in steps
            ):
                done.add(t.name)
        return done

    def _live(self, label: str, total: int):
        """A live display counting ``total`` trajectories on a terminal console (a context
        manager yielding ``advance()``); a no-op otherwise."""
        from contextlib import contextmanager, nullcontext

        console = self.console
        if not total or console is None or not getattr(console, "is_terminal", False):
            return nullcontext(lambda: None)

        @contextmanager
        def bar():
            from rich import progress as rp

            with rp.Progress(
                rp.TextColumn(label), rp.BarColumn(), rp.MofNCompleteColumn(),
                rp.TextColumn("trajectories"), rp.TimeElapsedColumn(), console=console,
                transient=True,
            ) as progress:  # fmt: skip
                task = progress.add_task(label, total=total)
                yield lambda: progress.update(task, advance=1)

        return bar()

    def _ingest(self, t: Trajectory) -> None:
        """lm-eval samples: ``<trajectory folder>/<split>/checkpoint-<step>/`` per split."""
        from ckptsel.measure import ingest_lm_eval

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
        from ckptsel.workflows.analysis import analyze

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
        from ckptsel.measure import ItemPool, StepParts
        from ckptsel.train import checkpoint_steps, discover_checkpoints

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
        """Run ``stages`` in order; with ``workers > 1`` train and measure together, per
        trajectory (:meth:`train_and_measure`)."""
        summary = None
        together = self.workers > 1
        for stage in STAGES:
            if stage in stages:
                if stage != "prepare":  # a resumed stage still checks the study first
                    self.check_fingerprint(write=False)
                if together and stage in ("train", "measure"):
                    if stage == "measure" and "train" in stages:
                        continue  # done with the train stage
                    self.train_and_measure(train="train" in stages, measure="measure" in stages)
                    continue
                out = getattr(self, stage)()
                if stage == "analyze":
                    summary = out
        return summary


def trajectory_job(
    spec: StudySpec, device: str | None, name: str, train: bool = True, measure: bool = True
) -> list[str]:
    """Train (when it is trained here and ``train``) and measure (when ``measure``) one
    trajectory of ``spec``; returns its log lines. A top-level function so that spawned worker
    processes can run it: one torch thread each (tiny models gain nothing from more, and
    ``workers`` processes share the cores); the records store takes per-trajectory units
    under a lock, so trajectories measured in parallel never clobber each other."""
    import warnings

    import torch

    torch.set_num_threads(1)
    quiet_transformers()
    # peft asks transformers 5 for a deprecated attribute on every load: nothing a user can do,
    # and in a log it would be two lines per trajectory
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
    lines: list[str] = []
    job = StudyRun(spec, device=device, log=lines.append)
    source = {t.name: t.source for t in job.trajectories()}[name]
    if train and source == "train":
        job.train(only=[name])
    if measure:
        job.measure(only=[name])
    return lines


def quiet_transformers() -> None:
    """No per-load 'Loading weights' bars from transformers: the runner's lines say what is
    happening."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        return
    hf_logging.disable_progress_bar()


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
