"""``ckptsel quickstart``: the whole pipeline on the embedded task, offline, on a CPU (SPEC §13).

split -> audit -> base -> training -> measurement -> frozen choices -> analysis -> report, each
one call, each skipped when its output already exists (the data, the base model and the
checkpoints are cached in the out folder, and measurement keeps what is recorded), so a
second run only redoes the analysis. Everything a user needs to see what was run is written
into the out folder: ``study.toml``, ``final_steps.json``, ``data/`` with the lineage and
audit, ``runs/``, ``records/`` and ``results/`` (summary, tables, figures, ``report.html``).

The embedded task is made test-pool-independent the way the paper's is: fine-tuning and
validation come from the MetaMathQA-format pool (variants share a group), the test pool is the
independent GSM8K-format file. ``ckptsel measure`` reads both splits with one task, so the test
pool is also written in MetaMathQA form (``data/test_measure.json``: same question, the GSM8K
solution rewritten ``The answer is: N`` as :func:`ckptsel.tasks.gsm8k_response` does, group =
the question itself, ids ``test-<i>``).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel import defaults
from ckptsel.embedded import BaseConfig, EmbeddedConfig, pretrain_base, write_embedded
from ckptsel.io import write_text
from ckptsel.study import Configuration, Study, study_to_toml

TASK = "metamath"
PAPER_SPREAD_PP = 3.5  # the paper's median within-trajectory best-to-worst test-accuracy spread


def cpu_time() -> float:
    """CPU seconds (user + system) of this process and of its finished worker processes."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def claims_in_words(summary: dict) -> list[str]:
    """The report's plain-language reading of the three claims (D, H, G per rule), as text."""
    import html
    import re

    from ckptsel.report.html import claim_sentences

    return [
        html.unescape(re.sub(r"<[^>]+>", "", sentence)) + f" [{verdict}]"
        for verdict, sentence in claim_sentences(summary)
    ]


@dataclass(frozen=True)
class QuickstartPlan:
    """Sizes of the embedded study; ``fast`` trades items and steps for time."""

    task: EmbeddedConfig
    base: BaseConfig
    configurations: tuple[Configuration, ...]
    seeds: tuple[int, ...] = (42, 43, 44)
    max_new_tokens: int = 24
    measure_batch: int = 128
    permutations: int = defaults.PERMUTATIONS
    draws: int = defaults.DRAWS
    seed: int = defaults.SEED


def make_plan(fast: bool = False) -> QuickstartPlan:
    """The default and the ``--fast`` study: five configurations (LoRA ranks 4, 8 and 16 at
    different learning rates, and full fine-tuning at two) × 3 seeds, 10 checkpoints per
    trajectory. The base is pre-trained on a mix that includes answered problems in the
    instruction format (``formatted_fraction``), so, like an instruction-tuned model, it already
    knows the answer format and SFT moves test accuracy by a few points per checkpoint.
    Learning rates are above the SPEC defaults because the model is tiny."""
    steps, every = (60, 6) if fast else (100, 10)
    task = EmbeddedConfig(
        n_original=400 if fast else 700,
        variants=3,
        n_test=200 if fast else 300,
        max_operand=9,
        max_mul=6,
        formatted_fraction=0.5,
    )
    base = BaseConfig(steps=600 if fast else 900)
    common = dict(steps=steps, save_every=every, batch_size=32, micro_batch=32, max_length=256)
    configs = (
        Configuration(name="lora-r4", adaptation="lora", rank=4, alpha=8, lr=3e-3, **common),
        Configuration(name="lora-r8", adaptation="lora", rank=8, alpha=16, lr=2e-3, **common),
        Configuration(name="lora-r16", adaptation="lora", rank=16, alpha=32, lr=1e-3, **common),
        Configuration(name="full-lr3e-4", adaptation="full", lr=3e-4, **common),
        Configuration(name="full-lr1e-4", adaptation="full", lr=1e-4, **common),
    )
    return QuickstartPlan(task=task, base=base, configurations=configs)


@dataclass
class QuickstartResult:
    out: Path
    summary: dict[str, Any] | None
    base_accuracy: float
    final_accuracy: float
    median_spread: float
    spreads: dict[str, float]
    report: Path | None
    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # this process + its workers
    configurations: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "base_test_accuracy_pp": self.base_accuracy,
            "final_test_accuracy_pp": self.final_accuracy,
            "median_best_to_worst_spread_pp": self.median_spread,
            "spread_pp_by_trajectory": self.spreads,
            "report": str(self.report) if self.report else None,
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "configurations": self.configurations,
            "paper_median_spread_pp": PAPER_SPREAD_PP,
        }


def write_measure_test(test_jsonl: Path, out: Path) -> Path:
    """The GSM8K-format test pool in MetaMathQA form, for ``measure`` (see module doc)."""
    from ckptsel.tasks import gsm8k_response

    rows = []
    for i, line in enumerate(test_jsonl.read_text(encoding="utf-8").splitlines()):
        r = json.loads(line)
        rows.append(
            {
                "id": f"test-{i}",
                "query": r["question"],
                "response": gsm8k_response(r["answer"]),
                "type": "GSM8K_test",
                "original_question": r["question"],
            }
        )
    body = json.dumps(rows, indent=1) + "\n"
    if not out.is_file() or out.read_text(encoding="utf-8") != body:
        write_text(out, body)
    return out


def base_test_accuracy(
    base_dir: Path, test_file: Path, plan: QuickstartPlan, device: str | None, cache: Path
) -> float:
    """Test accuracy (pp) of the base model itself — what SFT must beat. Cached in ``cache``."""
    if cache.is_file():
        data = json.loads(cache.read_text())
        if data.get("base") == json.loads((base_dir / "base.json").read_text())["fingerprint"]:
            return float(data["accuracy_pp"])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ckptsel.answers import is_correct
    from ckptsel.measure.generate import generate_texts
    from ckptsel.tasks import format_prompt, load_items

    items = load_items(TASK, test_file)
    tok = AutoTokenizer.from_pretrained(str(base_dir))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    if device:
        model.to(device)
    texts = generate_texts(
        model,
        tok,
        [format_prompt(it.instruction) for it in items],
        batch_size=plan.measure_batch,
        max_new_tokens=plan.max_new_tokens,
    )
    acc = (
        100.0
        * sum(is_correct(TASK, t, it.reference) for t, it in zip(texts, items, strict=True))
        / len(items)
    )
    fp = json.loads((base_dir / "base.json").read_text())["fingerprint"]
    write_text(
        cache, json.dumps({"base": fp, "accuracy_pp": acc, "items": len(items)}, indent=2) + "\n"
    )
    return acc


def test_spreads(records_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per trajectory: best-to-worst test accuracy over its checkpoints (pp), and the final
    checkpoint's test accuracy (pp)."""

    from ckptsel.records import read_rows

    gen = read_rows(
        records_dir, "generations", columns=["trajectory", "step", "split", "correct"]
    ).to_pandas()
    acc = gen[gen["split"] == "test"].groupby(["trajectory", "step"])["correct"].mean() * 100.0
    spreads, finals = {}, {}
    for traj, s in acc.groupby(level=0):
        s = s.droplevel(0).sort_index()
        spreads[str(traj)] = float(s.max() - s.min())
        finals[str(traj)] = float(s.iloc[-1])
    return spreads, finals


def _quiet_transformers() -> None:
    """No per-load 'Loading weights' bars from transformers: ours say what is happening."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def trajectory_job(
    study_file: str, name: str, max_new_tokens: int, batch_size: int, device: str, progress: bool
) -> str:
    """Train (or resume) one trajectory, then measure all its checkpoints into the study's
    records. A top-level function so that worker processes can run it; the records store
    locks its files, so trajectories measured in parallel never clobber each other."""
    import torch

    from ckptsel.commands.measure import progress_bars
    from ckptsel.measure import MeasureConfig, measure_run
    from ckptsel.study import load_study
    from ckptsel.train import train_study

    if device == "cpu":
        torch.set_num_threads(1)
    _quiet_transformers()
    import warnings

    # peft asks transformers 5 for a deprecated attribute on every load: nothing a user can do,
    # and in a log it would be two lines per trajectory
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
    study = load_study(study_file)
    cfg = {n: c for n, c, _ in study.trajectories()}[name]
    lines: list[str] = []
    train_study(study, only=[name], device=device, progress=progress, log=lines.append)
    config = MeasureConfig(
        study.task, batch_size=batch_size, max_new_tokens=max_new_tokens, device=device
    )
    with progress_bars(progress) as on_progress:
        res = measure_run(
            study.run_root / name,
            config,
            validation=study.validation,
            test=study.test,
            out=study.records_root,
            trajectory=name,
            configuration=cfg.name,
            on_progress=on_progress,
        )
    lines.append(
        f"{name}: measured {len(res.measured_steps)} checkpoints, reused {len(res.reused_steps)}"
    )
    return "\n".join(lines)


def finished_trajectories(study: Study) -> set[str]:
    """Trajectories with their final checkpoint AND records of every checkpoint on both
    splits: a second quickstart run skips them without starting a process."""

    from ckptsel.records import read_rows
    from ckptsel.train import study_status

    cols = ["trajectory", "step", "split"]
    tables = {k: read_rows(study.records_root, k, columns=cols) for k in ("generations", "nll")}
    if any(t is None for t in tables.values()):
        return set()
    have = {}
    for name, table in tables.items():
        df = table.to_pandas().drop_duplicates()
        have[name] = {
            (str(t), str(sp)): set(g["step"].astype(int))
            for (t, sp), g in df.groupby(["trajectory", "split"])
        }
    done = set()
    for st in study_status(study):
        if st.valid and all(
            have[f].get((st.trajectory, sp)) == set(st.steps)
            for f in have
            for sp in ("validation", "test")
        ):
            done.add(st.trajectory)
    return done


def run_trajectories(
    study: Study,
    study_file: Path,
    plan: QuickstartPlan,
    *,
    device: str,
    workers: int,
    console: Any,
) -> None:
    """Every unfinished trajectory through :func:`trajectory_job`; with ``workers > 1`` in that
    many spawned processes (one thread each: two tiny-model trajectories on two cores finish
    in about the time of one), otherwise in this process.

    Progress: on a terminal one live display (trajectories done / to do, elapsed time); the
    jobs draw no bars of their own. Either way each finished trajectory prints its lines
    (trained / measured), so a log (no TTY) gets one line per trajectory and stage, not bar
    updates."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    done = finished_trajectories(study)
    names = [n for n, _, _ in study.trajectories() if n not in done]
    if done:
        console.print(f"trained and measured already, skipped: {', '.join(sorted(done))}")
    if not names:
        return
    args = (plan.max_new_tokens, plan.measure_batch, device, False)
    workers = max(1, min(workers, len(names)))
    bar = Progress(
        TextColumn(f"train + measure ({workers} process{'es' if workers > 1 else ''})"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    with bar:
        task = bar.add_task("trajectories", total=len(names))
        if workers == 1:
            for name in names:
                bar.console.print(trajectory_job(str(study_file), name, *args))
                bar.update(task, advance=1)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            futures = [pool.submit(trajectory_job, str(study_file), name, *args) for name in names]
            for fut in as_completed(futures):
                bar.console.print(fut.result())
                bar.update(task, advance=1)


def default_workers(device: str) -> int:
    """Two processes on a multi-core CPU, one on a GPU."""
    import os

    return 1 if device != "cpu" else max(1, min(2, os.cpu_count() or 1))


def run_quickstart(
    out: str | Path,
    *,
    fast: bool = False,
    device: str | None = None,
    plan: QuickstartPlan | None = None,
    console: Any = None,
    analyze: bool = True,
    workers: int | None = None,
) -> QuickstartResult:
    """Run (or resume) the embedded study in ``out``; prints the main table, the median
    best-to-worst test-accuracy spread and the report path."""
    import torch
    from rich.console import Console

    from ckptsel.train import pick_device

    console = console or Console()
    plan = plan or make_plan(fast)
    device = pick_device(device)
    _quiet_transformers()
    threads = torch.get_num_threads()
    if device == "cpu":
        # A tiny model gains nothing from intra-op threads; on a busy machine they spin.
        torch.set_num_threads(1)
    try:
        return _run(
            out,
            plan,
            fast=fast,
            device=device,
            console=console,
            analyze=analyze,
            workers=default_workers(device) if workers is None else workers,
        )
    finally:
        torch.set_num_threads(threads)


PLAN_FILE = "quickstart_plan.json"


def plan_fingerprint(plan: QuickstartPlan) -> str:
    import dataclasses
    import hashlib

    blob = json.dumps(dataclasses.asdict(plan), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_plan(out: Path, plan: QuickstartPlan, fast: bool) -> None:
    """Refuse to mix two different quickstart studies in one folder (their checkpoints would
    be resumed with other settings); record the plan of a new folder."""
    from ckptsel.errors import CkptselError

    fp = plan_fingerprint(plan)
    path = out / PLAN_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("fingerprint") != fp:
            was = "--fast" if old.get("fast") else "default"
            raise CkptselError(
                f"{out} already holds a quickstart study with other settings ({was}); "
                "choose another --out or delete that folder"
            )
        return
    if out.is_dir() and any(out.iterdir()):
        raise CkptselError(f"{out} exists and is not a quickstart folder; choose another --out")
    write_text(path, json.dumps({"fingerprint": fp, "fast": fast}, indent=2) + "\n")


def _run(
    out: str | Path,
    plan: QuickstartPlan,
    *,
    fast: bool,
    device: str,
    console: Any,
    analyze: bool,
    workers: int,
) -> QuickstartResult:
    from ckptsel.audit import audit_pools, write_audit
    from ckptsel.split import split_file
    from ckptsel.tasks import load_items

    out = Path(out).resolve()
    check_plan(out, plan, fast)
    seconds: dict[str, float] = {}
    cpu_seconds: dict[str, float] = {}
    cpu0: list[float] = [cpu_time()]
    say: Callable[[str], None] = console.print

    def stage(name: str, t0: float) -> None:
        seconds[name] = round(time.perf_counter() - t0, 2)
        now = cpu_time()
        cpu_seconds[name] = round(now - cpu0[0], 2)
        cpu0[0] = now
        say(f"[bold]{name}[/bold] done in {seconds[name]:.1f}s")

    t = time.perf_counter()
    files = write_embedded(out / "data", plan.task)
    split_dir = out / "data" / "split"
    if (
        not (split_dir / "lineage.json").is_file()
        or json.loads((split_dir / "lineage.json").read_text()).get("source_sha256") is None
    ):
        split_file(files.metamath, split_dir, seed=defaults.DATA_SEED, val_fraction=0.1)
    else:
        import hashlib

        lin = json.loads((split_dir / "lineage.json").read_text())
        if lin["source_sha256"] != hashlib.sha256(files.metamath.read_bytes()).hexdigest():
            split_file(files.metamath, split_dir, seed=defaults.DATA_SEED, val_fraction=0.1)
    train_file, val_file = split_dir / "train.json", split_dir / "validation.json"
    test_measure = write_measure_test(files.test, out / "data" / "test_measure.json")
    stage("data + split", t)

    t = time.perf_counter()
    audit_dir = out / "data" / "audit"
    if not (audit_dir / "audit.json").is_file():
        pools = {
            "train": [it.instruction for it in load_items(TASK, train_file)],
            "validation": [it.instruction for it in load_items(TASK, val_file)],
            "test": [json.loads(x)["question"] for x in files.test.read_text().splitlines()],
        }
        result = audit_pools(pools)
        write_audit(result, audit_dir)
        if not result.control_ok:
            say("[red]audit: the planted positive control was NOT found; see data/audit[/red]")
    stage("audit", t)

    t = time.perf_counter()
    base_dir = pretrain_base(out / "base", plan.task, plan.base, progress=False)
    stage("base model", t)

    study = Study(
        name="quickstart-fast" if fast else "quickstart",
        root=out,
        base_model=str(base_dir),
        task=TASK,
        test_task=TASK,
        train=train_file,
        validation=val_file,
        test=test_measure,
        configurations=plan.configurations,
        seeds=plan.seeds,
        runs_dir=out / "runs",
        records_dir=out / "records",
        measure={"max_new_tokens": plan.max_new_tokens, "batch_size": plan.measure_batch},
    )
    toml = (
        f"# written by `ckptsel quickstart{' --fast' if fast else ''}`: the embedded study that "
        "was run.\n# Re-train or check it with `ckptsel train study.toml [--check]`.\n"
        + study_to_toml(study)
    )
    if not (out / "study.toml").is_file() or (out / "study.toml").read_text() != toml:
        write_text(out / "study.toml", toml)

    t = time.perf_counter()
    run_trajectories(
        study, out / "study.toml", plan, device=device, workers=workers, console=console
    )
    base_acc = base_test_accuracy(
        base_dir, test_measure, plan, device, out / "results" / "base_accuracy.json"
    )
    stage("training + measurement", t)

    spreads, finals = test_spreads(study.records_root)
    median_spread = statistics.median(spreads.values())
    final_acc = statistics.mean(finals.values())

    summary = None
    report = None
    if analyze:
        from ckptsel.pipeline import analyze as run_analysis
        from ckptsel.report.terminal import print_main_table
        from ckptsel.results import REPORT_FILE

        t = time.perf_counter()
        results = out / "results"
        # the report is built in the staging folder and published with the results as a
        # whole; force: results/ also holds the quickstart's own base_accuracy.json (kept)
        summary = run_analysis(
            study.records_root,
            results,
            permutations=plan.permutations,
            draws=plan.draws,
            seed=plan.seed,
            report=True,
            force=True,
        )
        report = results / REPORT_FILE
        stage("frozen choices + analysis + report", t)
        say("")
        print_main_table(summary, console)
    res = QuickstartResult(
        out, summary, base_acc, final_acc, median_spread, spreads, report, seconds, cpu_seconds,
        len(plan.configurations),
    )
    write_text(out / "results" / "quickstart.json", json.dumps(res.to_dict(), indent=2) + "\n")
    say(
        f"test accuracy: base model {base_acc:.1f}%, final checkpoints {final_acc:.1f}% "
        f"(mean over {len(finals)} trajectories in {len(plan.configurations)} configurations)"
    )
    say(
        f"median best-to-worst test-accuracy spread within a trajectory: {median_spread:.2f} pp "
        f"(the paper's is {PAPER_SPREAD_PP} pp)"
    )
    if summary is not None:
        say("")
        say("[bold]What this study says[/bold] (the three claims, as report.html reads them):")
        for line in claims_in_words(summary):
            say(f"  • {line}")
    if report is not None:
        say(f"report: {report}")
    return res
