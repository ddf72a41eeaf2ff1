"""``ckptsel compare`` (two checkpoints on the same items, paired) and ``ckptsel plan`` (how
many validation items a rule needs)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ckptsel.defaults import CONFIDENCE, SEED
from ckptsel.errors import CkptselError
from ckptsel.results import fmt

console = Console()


def _p(p: float) -> str:
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def print_comparison(result: dict) -> None:
    a, b = result["a"], result["b"]
    level = int(round(result["settings"]["level"] * 100))
    name_a = f"{a['trajectory']}@{a['step']}"
    name_b = f"{b['trajectory']}@{b['step']}"
    table = Table(title=f"A = {name_a}  vs  B = {name_b}  (paired, same items)")
    for col in (
        "split",
        "items (clusters)",
        "acc A %",
        "acc B %",
        f"A − B pp [{level}%]",
        "✓✓/A/B/✗✗",
        "McNemar p",
    ):
        table.add_column(col, no_wrap=col in ("split", "items (clusters)"))
    for split, r in result["splits"].items():
        if r is None:
            table.add_row(split, "no records", "–", "–", "–", "–", "–")
            continue
        t = r["table"]
        diff = fmt(r["difference"])  # the stored estimate, printed like every other
        table.add_row(
            split,
            f"{r['items']} ({r['clusters']})",
            f"{r['accuracy_a']:.2f}",
            f"{r['accuracy_b']:.2f}",
            diff,
            f"{t['both_correct']} / {t['only_a']} / {t['only_b']} / {t['both_wrong']}",
            _p(r["mcnemar_p"]),
        )
    console.print(table)
    console.print(
        "✓✓/A/B/✗✗: items both right / only A right / only B right / both wrong; McNemar p: exact "
        "two-sided binomial test on the discordant items."
    )
    for split, r in result["splits"].items():
        if r and (r["not_shared"]["only_in_a"] or r["not_shared"]["only_in_b"]):
            console.print(
                f"{split}: compared on the {r['items']} shared items; "
                f"{r['not_shared']['only_in_a']} item(s) "
                f"only in A's pool and {r['not_shared']['only_in_b']} only in B's were left out."
            )
    console.print(
        f"Interval: {result['settings']['draws']} bootstrap draws of whole clusters (items "
        "sharing a group are resampled together). An interval that contains 0 is unresolved, "
        "not 'no difference'."
    )


def print_plan(pilot: dict | None, closed: dict | None) -> None:
    if pilot is not None:
        s = pilot["settings"]
        trajs = pilot["trajectories"]
        table = Table(
            title=f"plan from pilot records: rule {pilot['rule']}, {len(trajs)} trajectory(ies), "
            f"pilot {pilot['pilot_items']} items (smallest), {s['draws']} draws per budget"
        )
        for col in (
            "budget",
            "× pilot",
            "E gain over final, pp",
            "P(beats final)",
            "P(worse than final)",
            "P(keeps final)",
        ):
            table.add_column(col, justify="right")
        for r in pilot["rows"]:
            x = f"{r['extrapolation']:.2f}" + ("*" if r["extrapolation"] > 1 else "")
            table.add_row(
                str(r["budget"]), x, f"{r['gain']:+.2f}", f"{r['p_beat']:.3f}",
                f"{r['p_worse']:.3f}", f"{r['p_final']:.3f}",
            )  # fmt: skip
        console.print(table)
        nb = pilot["planned_budget"]
        console.print(
            f"planned budget for P(beats final) ≥ {s['target']:.2f}: "
            + (f"[bold]{nb}[/bold] items" if nb else "not reached within the budgets tried")
            + ". Truth = accuracy on the pilot pool; budgets above the pilot size (*) extrapolate "
            "(the pilot's differences are taken as exact), and a small pilot makes truly equal "
            "checkpoints look different, so P(beats final) is optimistic there."
        )
    if closed is not None:
        table = Table(
            title=f"closed form: candidate better than final by δ = {closed['delta']:g} pp, "
            f"agreement {closed['agreement']:g} (discordant {closed['discordant']:.3f})"
        )
        for col in ("budget", "P(rule picks the better)", "E gain, pp", "paired SE, pp"):
            table.add_column(col, justify="right")
        for r in closed["rows"]:
            table.add_row(
                str(r["budget"]), f"{r['p_pick']:.3f}", f"{r['gain']:+.2f}", f"{r['se']:.2f}"
            )
        console.print(table)
        console.print(
            f"budget for P(pick) ≥ {closed['target']:.2f}: "
            f"[bold]{closed['budget_to_pick']}[/bold]; for a paired (McNemar) test at "
            f"{closed['level']:.2f} with power {closed['target']:.2f}: "
            f"[bold]{closed['budget_for_test']}[/bold] (normal approximation)."
        )


def register(app: typer.Typer) -> None:
    @app.command()
    def compare(
        records_dir: Path = typer.Argument(
            ..., help="Records folder (single files or units)."
        ),
        step_a: int = typer.Argument(..., help="Step of checkpoint A."),
        step_b: int = typer.Argument(..., help="Step of checkpoint B."),
        trajectory: str = typer.Option(..., "--trajectory", help="Trajectory of A (and of B)."),
        trajectory_b: str = typer.Option(
            None, "--trajectory-b", help="Trajectory of B when it is another run on the same items."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        draws: int = typer.Option(10000, help="Paired bootstrap draws."),
        seed: int = typer.Option(SEED, help="Bootstrap seed."),
        confidence: float = typer.Option(CONFIDENCE, help="Interval level."),
    ) -> None:
        """Paired comparison of two checkpoints on the same items: A − B, interval, McNemar."""
        from ckptsel.workflows import CompareSettings, compare_checkpoints

        result = compare_checkpoints(
            records_dir, trajectory, step_a, step_b, trajectory_b=trajectory_b,
            settings=CompareSettings(draws=draws, seed=seed, level=confidence),
        )  # fmt: skip
        if as_json:
            typer.echo(json.dumps(result, indent=1, allow_nan=False))
        else:
            print_comparison(result)

    @app.command()
    def plan(
        records_dir: Path = typer.Argument(
            None, help="Pilot records folder (optional when --delta/--agreement are given)."
        ),
        trajectory: list[str] = typer.Option(
            None, "--trajectory", help="Pilot trajectory (repeatable; default: all)."
        ),
        rule: str = typer.Option("accuracy", help="accuracy, agreement or nll."),
        max_budget: int = typer.Option(1024, help="Largest budget (budgets 16, 32, … up to it)."),
        budgets: str = typer.Option(None, help="Explicit comma-separated budgets instead."),
        draws: int = typer.Option(2000, help="Resampled validation sets per budget."),
        target: float = typer.Option(
            0.8, help="Probability of beating the final checkpoint to plan for."
        ),
        delta: float = typer.Option(None, help="Closed form: accuracy gap (pp) candidate − final."),
        agreement: float = typer.Option(
            None, help="Closed form: fraction of items on which the two checkpoints agree."
        ),
        confidence: float = typer.Option(CONFIDENCE, help="Test level of the closed form."),
        seed: int = typer.Option(SEED, help="Resampling seed."),
        method: str = typer.Option(
            "split",
            help="split: choose on one half of the pilot, score the choice on the other (default); "
            "pilot: choose and score on the whole pilot (optimistic).",
        ),
        figure: Path = typer.Option(
            None, help="Write the figure here (.png or .svg); without it no figure is written."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    ) -> None:
        """How many validation items a rule needs: expected gain and P(beats final) by budget."""
        from ckptsel._util.io import write_bytes
        from ckptsel.report import figure_bytes
        from ckptsel.workflows import (
            PlanSettings,
            closed_form,
            default_budgets,
            plan_figure,
            plan_from_pilot,
        )

        if records_dir is None and (delta is None or agreement is None):
            raise CkptselError("give pilot RECORDS, or --delta and --agreement for the closed form")
        if (delta is None) != (agreement is None):
            raise CkptselError("--delta and --agreement go together")
        if budgets:
            try:
                chosen = tuple(sorted({int(b) for b in budgets.split(",") if b.strip()}))
            except ValueError as err:
                raise CkptselError(f"--budgets: expected comma-separated integers ({err})") from err
        else:
            chosen = default_budgets(max_budget)
        if figure is not None and figure.suffix not in (".png", ".svg"):
            raise CkptselError(f"--figure {figure}: use a .png or .svg path")
        pilot = None
        if records_dir is not None:
            settings = PlanSettings(
                budgets=chosen, draws=draws, seed=seed, target=target, method=method
            )
            pilot = plan_from_pilot(records_dir, trajectory or None, rule=rule, settings=settings)
        closed = None
        if delta is not None:
            closed = closed_form(delta, agreement, chosen, target=target, level=confidence)
        if figure is not None:
            write_bytes(figure, figure_bytes(plan_figure(pilot, closed), figure.suffix[1:]))
        shown = None if figure is None else str(figure)
        if as_json:
            typer.echo(json.dumps({"pilot": pilot, "closed_form": closed, "figure": shown},
                                  indent=1, allow_nan=False))  # fmt: skip
        else:
            print_plan(pilot, closed)
            if figure is not None:
                console.print(f"figure: {figure}")
