"""``ckptsel quickstart``: ``ckptsel run`` on an embedded study, offline, on a CPU (SPEC §13).

The quickstart writes the embedded task's files (:mod:`ckptsel.sim.embedded`) into ``data/``,
pre-trains a tiny base model that already knows the answer format into ``base/`` (both cached
by fingerprint), writes a schema-2 ``study.toml`` into the out folder and runs it through
:class:`ckptsel.workflows.StudyRun` — split + audit, training, measurement, frozen choices,
analysis and report, each stage skipping what is done — then adds its own reading: the base
model's test accuracy, the within-trajectory spreads beside the paper's 3.5 pp, and the three
claims in plain words (``results/quickstart.json``). :func:`run_quickstart` sets the threads and
device; its steps are :func:`check_plan` (one study per folder), :func:`write_inputs` (data, base,
study file), the study's stages, :func:`base_test_accuracy` and :func:`test_spreads` (the
quickstart's own reading of the records), the analysis and the lines printed; each stage's wall
and CPU seconds are kept by :class:`StageClock`.

The study is arranged the way the paper's is: fine-tuning and validation come from the
MetaMathQA-format pool (``[pool]``, split by question group: variants share a group), the test
pool is the independent GSM8K-format file read by the ``gsm8k`` task (``[test]``). A user can
edit ``study.toml`` and re-run it with ``ckptsel run study.toml``: on a finished folder that
measures nothing new and rewrites the same ``summary.json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel import defaults
from ckptsel._util.io import write_text
from ckptsel.data.prompts import format_prompt
from ckptsel.data.scoring import is_correct
from ckptsel.errors import CkptselError
from ckptsel.measure.passes import generate_texts
from ckptsel.records.scan import read_rows
from ckptsel.report.html import claim_sentences
from ckptsel.report.terminal import print_main_table
from ckptsel.results.layout import REPORT_FILE
from ckptsel.results.publish import MANIFEST_FILE
from ckptsel.sim.embedded import BaseConfig, EmbeddedConfig, pretrain_base, write_embedded
from ckptsel.study.configuration import Configuration, configurations_toml
from ckptsel.study.spec import load_spec
from ckptsel.train.models import pick_device
from ckptsel.workflows.study_run.job import StudyRun
from ckptsel.workflows.study_run.progress import quiet_transformers

TASK = "metamath"  # the fine-tuning pool's task (validation too)
TEST_TASK = "gsm8k"  # the independent test pool's
VAL_FRACTION = 0.1
STUDY_FILE = "study.toml"
PAPER_SPREAD_PP = 3.5  # the paper's median within-trajectory best-to-worst test-accuracy spread


def cpu_time() -> float:
    """CPU seconds (user + system) of this process and of its finished worker processes."""
    import resource  # Unix only

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def claims_in_words(summary: dict) -> list[str]:
    """The report's plain-language reading of the three claims (D, H, G per rule), as text."""
    return [html.unescape(re.sub(r"<[^>]+>", "", sentence)) + f" [{verdict}]" for verdict, sentence in claim_sentences(summary)]


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
    steps, every = (40, 4) if fast else (100, 10)
    task = EmbeddedConfig(
        n_original=400 if fast else 700, variants=3, n_test=150 if fast else 300, max_operand=9, max_mul=6, formatted_fraction=0.5
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


def study_toml(plan: QuickstartPlan, fast: bool) -> str:
    """The embedded study as a schema-2 study file (paths relative to the out folder)."""
    v = json.dumps  # TOML values here are strings, numbers and lists of integers

    flag = " --fast" if fast else ""
    lines = [
        f"# Written by `ckptsel quickstart{flag}`: the embedded study it runs. Edit it and",
        "# re-run it with `ckptsel run study.toml` (paths are relative to this file). A change",
        "# that invalidates recorded work is refused; new configurations or seeds are added.",
        "schema = 2",
        "",
        "[study]",
        f"name = {v('quickstart-fast' if fast else 'quickstart')}",
        'base_model = "base"              # the tiny base pre-trained by the quickstart',
        f"seeds = {v(list(plan.seeds))}",
        "",
        "[pool]                            # split by question group into train + validation",
        f"task = {v(TASK)}",
        'file = "data/metamath.json"',
        f"val_fraction = {v(VAL_FRACTION)}",
        f"seed = {v(defaults.DATA_SEED)}",
        "",
        "[test]                            # the independent GSM8K-format test pool",
        f"task = {v(TEST_TASK)}",
        'file = "data/test.jsonl"',
        "",
        "[measure]",
        f"max_new_tokens = {v(plan.max_new_tokens)}",
        f"batch_size = {v(plan.measure_batch)}",
        "",
        "[averages]                        # the mean of each run's last 3 checkpoints, measured and",
        "last = [3]                        # analysed beside them: average or select?",
        "",
        "[analysis]",
        f"permutations = {v(plan.permutations)}",
        f"draws = {v(plan.draws)}",
        f"seed = {v(plan.seed)}",
        *configurations_toml(plan.configurations),
    ]
    return "\n".join(lines) + "\n"


def base_test_accuracy(base_dir: Path, items: list, plan: QuickstartPlan, device: str | None, cache: Path) -> float:
    """Test accuracy (pp) of the base model itself on the study's test ``items`` — what SFT
    must beat. Cached in ``cache`` (keyed by the base's fingerprint and the items)."""
    fp = json.loads((base_dir / "base.json").read_text())["fingerprint"]
    ids = hashlib.sha256("\n".join(it.item_id for it in items).encode()).hexdigest()[:16]
    key = {"base": fp, "items": len(items), "item_ids": ids, "task": TEST_TASK}
    if cache.is_file():
        data = json.loads(cache.read_text())
        if all(data.get(k) == x for k, x in key.items()):
            return float(data["accuracy_pp"])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base_dir))
    model = AutoModelForCausalLM.from_pretrained(str(base_dir))
    if device:
        model.to(device)
    texts = generate_texts(
        model, tok, [format_prompt(it.instruction) for it in items], batch_size=plan.measure_batch, max_new_tokens=plan.max_new_tokens
    )
    right = sum(is_correct(TEST_TASK, t, it.reference) for t, it in zip(texts, items, strict=True))
    acc = 100.0 * right / len(items)
    write_text(cache, json.dumps({**key, "accuracy_pp": acc}, indent=2) + "\n")
    return acc


def test_spreads(records_dir: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Per trajectory: best-to-worst test accuracy over its checkpoints (pp), and the final
    checkpoint's test accuracy (pp)."""
    gen = read_rows(records_dir, "generations", columns=["trajectory", "step", "split", "correct"]).to_pandas()
    gen = gen[(gen["split"] == "test") & (gen["step"] >= 0)]  # checkpoints only (averages sit at negative steps)
    acc = gen.groupby(["trajectory", "step"])["correct"].mean() * 100.0
    spreads, finals = {}, {}
    for traj, s in acc.groupby(level=0):
        s = s.droplevel(0).sort_index()
        spreads[str(traj)] = float(s.max() - s.min())
        finals[str(traj)] = float(s.iloc[-1])
    return spreads, finals


def default_workers(device: str) -> int:
    """Two processes on a multi-core CPU, one on a GPU."""
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

    if workers is not None and (isinstance(workers, bool) or workers < 1):
        raise CkptselError(f"--workers must be an integer >= 1, got {workers!r}")
    console = console or Console()
    plan = plan or make_plan(fast)
    device = pick_device(device)  # checked before anything is written
    quiet_transformers()
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
            base_threads=min(2, threads),
        )
    finally:
        torch.set_num_threads(threads)


PLAN_FILE = "quickstart_plan.json"


def plan_fingerprint(plan: QuickstartPlan) -> str:
    blob = json.dumps(dataclasses.asdict(plan), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_plan(out: Path, plan: QuickstartPlan, fast: bool) -> None:
    """Refuse to mix two different quickstart studies in one folder (their checkpoints would
    be resumed with other settings); record the plan of a new folder."""
    fp = plan_fingerprint(plan)
    path = out / PLAN_FILE
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("fingerprint") != fp:
            was = "--fast" if old.get("fast") else "default"
            raise CkptselError(
                f"{out} already holds a quickstart study with other settings ({was}); choose another --out or delete that folder"
            )
        return
    if out.is_dir() and any(out.iterdir()):
        raise CkptselError(f"{out} exists and is not a quickstart folder; choose another --out")
    write_text(path, json.dumps({"fingerprint": fp, "fast": fast}, indent=2) + "\n")


class StageClock:
    """Wall and CPU seconds per quickstart stage, and the lines it prints."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self._cpu = cpu_time()

    def say(self, text: str, markup: bool = True) -> None:
        # soft_wrap: a log (no TTY) gets whole lines, never words cut at 80 columns
        self.console.print(text, soft_wrap=True, markup=markup, highlight=False)

    def stage(self, name: str, t0: float) -> None:
        """``name`` ended now (it started at ``t0``, a ``time.perf_counter()``)."""
        self.seconds[name] = round(time.perf_counter() - t0, 2)
        now = cpu_time()
        self.cpu_seconds[name] = round(now - self._cpu, 2)
        self._cpu = now
        self.say(f"[bold]{name}[/bold] done in {self.seconds[name]:.1f}s")


def write_inputs(out: Path, plan: QuickstartPlan, fast: bool, base_threads: int, say: Callable[[str], None] = lambda line: None) -> Path:
    """The embedded task's files, the pre-trained base (both cached by fingerprint) and
    ``study.toml`` (rewritten only when it differs); returns the base model's folder.
    ``say(line)`` hears each step as it starts, and the pre-training's progress every tenth of
    its steps."""
    import torch

    say(f"quickstart: writing the embedded task into {out / 'data'}…")
    write_embedded(out / "data", plan.task)
    # the base pre-trains alone (nothing else runs yet): up to two threads, which give it the
    # same weights bit for bit as one (tests/sim/test_quickstart.py checks)
    threads = torch.get_num_threads()
    torch.set_num_threads(base_threads)
    steps = plan.base.steps
    say(f"quickstart: pre-training the tiny base model into {out / 'base'} ({steps} steps; reused when it is already there)…")
    every = max(1, steps // 10)

    def step_line(step: int, total: int, loss: float) -> None:
        if step == 1 or step % every == 0 or step == total:
            say(f"quickstart: pre-training the tiny base model (step {step}/{total}, loss {loss:.3f})…")

    try:
        base_dir = pretrain_base(out / "base", plan.task, plan.base, progress=step_line)
    finally:
        torch.set_num_threads(threads)
    toml = study_toml(plan, fast)
    study_file = out / STUDY_FILE
    if not study_file.is_file() or study_file.read_text(encoding="utf-8") != toml:
        write_text(study_file, toml)
    return base_dir


def _run(
    out: str | Path, plan: QuickstartPlan, *, fast: bool, device: str, console: Any, analyze: bool, workers: int, base_threads: int = 1
) -> QuickstartResult:
    """Inputs, then the study's stages through :class:`StudyRun`, then the quickstart's own
    reading of the records (base accuracy, spreads) and of the summary (the three claims)."""
    out = Path(out).resolve()
    check_plan(out, plan, fast)
    clock = StageClock(console)
    t = time.perf_counter()
    base_dir = write_inputs(out, plan, fast, base_threads, lambda m: clock.say(m, markup=False))
    clock.stage("data + base model", t)

    job = StudyRun(load_spec(out / STUDY_FILE), device=device, log=lambda m: clock.say(m, markup=False), workers=workers, console=console)
    t = time.perf_counter()
    job.run(("prepare",))
    clock.stage("split + audit", t)

    t = time.perf_counter()
    job.run(("train", "measure"))
    _, test_items = job.pools()
    base_acc = base_test_accuracy(base_dir, test_items, plan, device, out / "data" / "base_accuracy.json")
    clock.stage("training + measurement", t)

    spreads, finals = test_spreads(job.records_dir)
    summary = _analyze(job, clock) if analyze else None
    results = job.spec.results_dir
    res = QuickstartResult(
        out,
        summary,
        base_acc,
        statistics.mean(finals.values()),
        statistics.median(spreads.values()),
        spreads,
        results / REPORT_FILE if analyze else None,
        clock.seconds,
        clock.cpu_seconds,
        len(plan.configurations),
    )
    if (results / MANIFEST_FILE).is_file():  # beside the results (never before them: the
        # analysis publishes only into an empty folder or a results folder)
        write_text(results / "quickstart.json", json.dumps(res.to_dict(), indent=2) + "\n")
    _print_reading(res, len(finals), clock.say)
    clock.say(f"study file: {out / STUDY_FILE} (edit it and re-run: ckptsel run {out / STUDY_FILE})", markup=False)
    return res


def _analyze(job: StudyRun, clock: StageClock) -> dict:
    """The analyze stage, timed, then the main table."""
    t = time.perf_counter()
    summary = job.run(("analyze",))
    clock.stage("frozen choices + analysis + report", t)
    clock.say("")
    print_main_table(summary, clock.console)
    return summary


def _print_reading(res: QuickstartResult, n_trajectories: int, say: Callable[..., None]) -> None:
    """Base and final test accuracy, the median spread beside the paper's, the three claims in
    plain words and the report's path."""
    say(
        f"test accuracy: base model {res.base_accuracy:.1f}%, final checkpoints "
        f"{res.final_accuracy:.1f}% (mean over {n_trajectories} trajectories in "
        f"{res.configurations} configurations)"
    )
    say(f"median best-to-worst test-accuracy spread within a trajectory: {res.median_spread:.2f} pp (the paper's is {PAPER_SPREAD_PP} pp)")
    if res.summary is not None:
        say("")
        say("[bold]What this study says[/bold] (the three claims, as report.html reads them):")
        for line in claims_in_words(res.summary):
            say(f"  • {line}", markup=False)
    if res.report is not None:
        say(f"report: {res.report}", markup=False)
