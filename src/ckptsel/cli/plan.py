"""``ckptsel plan``: how many validation items a rule needs (from pilot records, or in closed
form from an accuracy gap and an agreement rate)."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel._util.io import write_bytes
from ckptsel.cli.output import console, json_flag, print_json, print_plan
from ckptsel.defaults import CONFIDENCE, SEED
from ckptsel.errors import CkptselError
from ckptsel.workflows.advise.planning import PlanSettings, closed_form, default_budgets, plan_figure, plan_from_pilot


def plan(
    records_dir: Path = typer.Argument(None, help="Pilot records folder (optional when --delta/--agreement are given)."),
    trajectory: list[str] = typer.Option(None, "--trajectory", help="Pilot trajectory (repeatable; default: all)."),
    rule: str = typer.Option("accuracy", help="accuracy, agreement or nll."),
    max_budget: int = typer.Option(1024, help="Largest budget (budgets 16, 32, … up to it)."),
    budgets: str = typer.Option(None, help="Explicit comma-separated budgets instead."),
    draws: int = typer.Option(2000, help="Simulated fresh validation sets per budget."),
    target: float = typer.Option(0.8, help="Probability of beating the final checkpoint to plan for."),
    delta: float = typer.Option(None, help="Closed form: accuracy gap (pp) candidate − final."),
    agreement: float = typer.Option(None, help="Closed form: fraction of items on which the two checkpoints agree."),
    confidence: float = typer.Option(CONFIDENCE, help="Confidence of the calibrated promise, and the test level of the closed form."),
    seed: int = typer.Option(SEED, help="Resampling seed."),
    method: str = typer.Option(
        "calibrated",
        help="calibrated: promise P(beats final) at the least favourable truth the pilot allows "
        "(default); split / pilot: the older resampling estimates (not calibrated).",
    ),
    figure: Path = typer.Option(None, help="Write the figure here (.png or .svg); without it no figure is written."),
    as_json: bool = json_flag(),
) -> None:
    """How many validation items a rule needs: expected gain and P(beats final) by budget."""
    if records_dir is None and (delta is None or agreement is None):
        raise CkptselError("give pilot RECORDS, or --delta and --agreement for the closed form")
    if (delta is None) != (agreement is None):
        raise CkptselError("--delta and --agreement go together")
    chosen = _budgets(budgets, max_budget)
    if figure is not None and figure.suffix not in (".png", ".svg"):
        raise CkptselError(f"--figure {figure}: use a .png or .svg path")
    pilot = None
    if records_dir is not None:
        settings = PlanSettings(budgets=chosen, draws=draws, seed=seed, target=target, method=method, level=confidence)
        pilot = plan_from_pilot(records_dir, trajectory or None, rule=rule, settings=settings)
    closed = None
    if delta is not None:
        closed = closed_form(delta, agreement, chosen, target=target, level=confidence)
    if figure is not None:
        from ckptsel.report.figures import figure_bytes  # matplotlib: only for a figure

        write_bytes(figure, figure_bytes(plan_figure(pilot, closed), figure.suffix[1:]))
    shown = None if figure is None else str(figure)
    if as_json:
        print_json("plan", {"pilot": pilot, "closed_form": closed, "figure": shown})
    else:
        print_plan(pilot, closed)
        if figure is not None:
            console.print(f"figure: {figure}")


def _budgets(budgets: str | None, max_budget: int) -> tuple[int, ...]:
    """``--budgets`` as sorted distinct integers, else the default ladder up to ``max_budget``."""
    if not budgets:
        return default_budgets(max_budget)
    try:
        return tuple(sorted({int(b) for b in budgets.split(",") if b.strip()}))
    except ValueError as err:
        raise CkptselError(f"--budgets: expected comma-separated integers ({err})") from err
