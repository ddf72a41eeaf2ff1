"""``ckptsel report`` (tables, figures, HTML from a results folder) and ``ckptsel select``
(which checkpoint of one trajectory to keep)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from ckptsel import defaults
from ckptsel.errors import CkptselError
from ckptsel.results import fmt

if TYPE_CHECKING:
    from ckptsel.workflows import Selection

console = Console()


def _clusters(clusters: int | None, items: int) -> str:
    """Text naming the clusters when items share groups (resampled together), else empty."""
    return f" in {clusters} clusters" if clusters is not None and clusters < items else ""


def print_selection(result: Selection) -> None:
    """The human-readable form of :func:`ckptsel.workflows.select_checkpoint`'s answer."""
    s = result.settings
    level = int(round(s.level * 100))
    table = Table(
        title=f"{result.trajectory} ({result.task}): checkpoints {result.steps[0]}…{result.final_step} "
        f"(final = {result.final_step}), {result.validation_items} eligible validation items"
        + _clusters(result.validation_clusters, result.validation_items)
        + (f", {result.test_items} test items" if result.test_items else ", no test records")
    )
    for col in (
        "rule",
        "full-pool choice",
        "budget curve (n → step, prob.)",
        f"split-validation gain, pp ({level}%)",
        f"test gain, pp ({level}%)",
    ):
        table.add_column(col)
    for rule, r in result.rules.items():
        choice = ", ".join(
            f"{st} ({p:.2f})" if p < 1 else st for st, p in r.probabilities.items()
        )
        curve = "; ".join(
            f"{c.budget} → {c.most_likely_step} ({c.probability:.2f})" for c in r.budget_curve
        )
        test = None if r.test is None else r.test.estimate
        table.add_row(rule, choice, curve, fmt(r.split_validation.estimate), fmt(test))
    console.print(table)
    rec = result.recommendation
    what = "keep the final checkpoint" if rec.keep_final else f"keep checkpoint {rec.keep_step}"
    colour = "yellow" if rec.keep_final else "green"
    console.print(
        f"[bold {colour}]recommendation: {what}[/bold {colour}] (step {rec.keep_step}) — {rec.reason}."
    )
    console.print(
        f"split validation: choose on one random half of the eligible validation pool, score accuracy on the other "
        f"half ({s.partitions} partitions, both directions); interval: {s.draws} question-bootstrap draws "
        f"× {s.bootstrap_partitions} partitions, the choice redone on each."
    )


def register(app: typer.Typer) -> None:
    @app.command()
    def report(
        results_dir: Path = typer.Argument(
            ..., help="A results folder written by `ckptsel analyze`."
        ),
        formats: str = typer.Option(
            "md,tex,csv,png,svg,html",
            "--formats",
            help="Comma-separated: md,tex,csv (tables), png,svg (figures), html.",
        ),
        trajectory: str = typer.Option(
            None,
            "--trajectory",
            help="Trajectory of the within-trajectory figure (default: the first).",
        ),
    ) -> None:
        """Write paper-style tables, figures and one self-contained report.html from a results folder."""
        from ckptsel.report import load_results, write_report
        from ckptsel.results import publish

        start = time.perf_counter()
        chosen = [f.strip() for f in formats.split(",") if f.strip()]
        load_results(results_dir)  # a results folder, before anything is staged
        meta = {"report": {"formats": chosen, "trajectory": trajectory}}
        with console.status("writing tables, figures and report.html…"):
            with publish.staged(results_dir, carry=True, meta=meta) as stage:  # swapped in whole
                written = write_report(stage, formats=chosen, trajectory=trajectory)
        for kind, paths in written.items():
            if paths:
                where = results_dir / paths[0].parent.relative_to(stage)
                console.print(f"{kind}: {len(paths)} file(s) in {where}")
        console.print(f"done in {time.perf_counter() - start:.1f} s")

    @app.command()
    def select(
        records_dir: Path = typer.Argument(
            ..., help="Records folder (single files or units)."
        ),
        trajectory: str = typer.Option(
            ..., "--trajectory", help="The trajectory (run) to choose a checkpoint for."
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print a machine-readable JSON object instead of tables."
        ),
        rule: str = typer.Option(
            "accuracy",
            "--rule",
            help="Rule the recommendation follows: accuracy, agreement or nll.",
        ),
        partitions: int = typer.Option(
            defaults.PERMUTATIONS, help="Random half/half partitions of the validation pool."
        ),
        draws: int = typer.Option(1000, help="Question-bootstrap draws for the intervals."),
        bootstrap_partitions: int = typer.Option(20, help="Partitions per bootstrap draw."),
        seed: int = typer.Option(
            defaults.SEED, help="Seed for permutations, partitions and bootstraps."
        ),
        confidence: float = typer.Option(defaults.CONFIDENCE, help="Interval level."),
    ) -> None:
        """Which checkpoint of one trajectory to keep, and an honest estimate of its gain over the final one."""
        from ckptsel.workflows import SelectSettings, select_checkpoint

        if not 0.0 < confidence < 1.0:
            raise CkptselError("--confidence must be between 0 and 1")
        settings = SelectSettings(
            partitions=partitions,
            draws=draws,
            bootstrap_partitions=bootstrap_partitions,
            seed=seed,
            level=confidence,
        )
        result = select_checkpoint(records_dir, trajectory, rule=rule, settings=settings)
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=1, allow_nan=False))
        else:
            print_selection(result)
