"""``ckptsel analyze``: choose on validation records (frozen + hashed), score the choices on test
records, and report G, H, D and B with intervals."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from ckptsel import defaults
from ckptsel._util.locations import as_location
from ckptsel.choose.settings import parse_budget_list
from ckptsel.cli.options import CHECKPOINTS, LOG, RECORDS_DIR, RULES, log_settings, parse_rules, with_groups
from ckptsel.cli.output import console as stdout_console
from ckptsel.cli.output import err_console, json_flag, print_json
from ckptsel.results.layout import REPORT_FILE, SUMMARY_FILE
from ckptsel.stats.intervals import METHODS
from ckptsel.workflows.advise.selection import SelectSettings
from ckptsel.workflows.analysis import AnalysisEvents, AnalysisSettings
from ckptsel.workflows.analysis import analyze as run_analysis
from ckptsel.workflows.tracking import log_analysis


@with_groups
def analyze(
    records_dir: str = RECORDS_DIR,
    out: str = typer.Option(..., "--out", help="Results folder or URL (summary.json, choices/, tables/)."),
    permutations: int = typer.Option(defaults.PERMUTATIONS, help="Nested validation permutations per trajectory."),
    draws: int = typer.Option(defaults.DRAWS, help="Bootstrap draws."),
    seed: int = typer.Option(defaults.SEED, help="Seed for permutations, partitions and bootstraps."),
    confidence: float = typer.Option(defaults.CONFIDENCE, help="Interval level."),
    interval: str = typer.Option(
        defaults.INTERVAL,
        "--interval",
        help=f"Interval method: {' | '.join(METHODS)} (percentile = the paper's configuration "
        "bootstrap; wild needs 3 or more configurations; see the docs' explanation 'What the "
        "intervals estimate'). Whatever the method, an estimate whose design gives no variance "
        "information (1 configuration, 1 test-question cluster, no spread) has no interval: "
        "'not estimable'.",
    ),
    budgets: str = typer.Option(
        ",".join(str(b) for b in defaults.BUDGETS),
        "--budgets",
        help="Finite validation budgets, comma-separated ('full' is always added); D = G(full) − G(smallest budget). E.g. 32,128,512,1024.",
    ),
    rules: list[str] = RULES,
    report: bool = typer.Option(True, "--report/--no-report", help="Also write tables, figures and report.html."),
    force: bool = typer.Option(False, "--force", help="Allow a non-empty --out that is not a results folder (its files are kept)."),
    log: dict[str, Any] = LOG,
    trajectory: str = typer.Option(
        None,
        "--trajectory",
        help="Whose recommended checkpoint --register registers (default: the records' only trajectory); its select answer is logged too.",
    ),
    checkpoints: Path = CHECKPOINTS,
    as_json: bool = json_flag("Print one JSON object (the summary and where it is); the rest goes to stderr."),
) -> None:
    """Choose checkpoints on validation records (frozen + hashed), score them on test records,
    and report G, H, D and B with bootstrap intervals."""
    start = time.perf_counter()
    settings = AnalysisSettings.of(
        permutations=permutations,
        draws=draws,
        seed=seed,
        level=confidence,
        interval=interval,
        budgets=parse_budget_list(budgets),
        rules=parse_rules(rules),
    )
    tracking = log_settings(log, trajectory=trajectory, checkpoints=checkpoints)
    tracking = tracking.for_records(records_dir)
    console = err_console if as_json else stdout_console  # with --json, stdout is the JSON alone
    with console.status("choosing on validation records, then scoring frozen choices…") as status:

        class Events(AnalysisEvents):
            def phase(self, line: str) -> None:  # one line per phase, in a log too; the spinner says it
                console.print(
                    f"analyze: {line} [{time.perf_counter() - start:.1f} s]", style="dim", markup=False, highlight=False, soft_wrap=True
                )
                status.update(line)

            def note(self, line: str) -> None:
                console.print(f"note: {line}", style="yellow", soft_wrap=True)

            def warn(self, line: str) -> None:
                console.print(f"warning: {line}", style="bold red", soft_wrap=True)

        summary = run_analysis(records_dir, out, settings=settings, report=report, force=force, events=Events())
    from ckptsel.report.terminal import print_main_table  # when run (see ckptsel.cli)

    if not as_json:
        print_main_table(summary, console)
    if report:
        console.print(f"report: {as_location(out) / REPORT_FILE}")
    console.print(
        f"wrote {as_location(out) / SUMMARY_FILE} (choices SHA-256 {(summary.choices_sha256 or '')[:16]}…) "
        f"in {time.perf_counter() - start:.1f} s"
    )
    if tracking.to:
        with console.status(f"logging to {', '.join(tracking.to)}…"):
            log_analysis(
                records_dir,
                out,
                tracking,
                select_settings=SelectSettings(seed=seed, level=confidence),
                note=lambda line: console.print(line, soft_wrap=True),
            )
    if as_json:
        print_json(
            "analyze",
            {
                "results": str(as_location(out)),
                "summary_file": str(as_location(out) / SUMMARY_FILE),
                "report_file": str(as_location(out) / REPORT_FILE) if report else None,
                "choices_sha256": summary.choices_sha256,
                "summary": summary.to_dict(),
            },
        )
