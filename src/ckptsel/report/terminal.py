"""The main table and the study's caveats for a terminal (rich), from the typed summary
(:class:`ckptsel.results.Summary`, or its ``summary.json`` dict)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ckptsel.results import Summary


def print_main_table(summary: Summary | dict, console: Console | None = None) -> None:
    summary = Summary.coerce(summary)
    console = console or Console()
    pop = summary.population
    table = Table(
        title=f"ckptsel — {pop.trajectories} trajectories, {pop.configurations} configurations "
        f"(pp; {summary.level_percent}% {summary.interval_label} intervals)",
    )
    d_col = f"D_r = G(full) − G({summary.d_from})"
    for col in ("rule", d_col, "H_r(full): vs matched NLL", "G_r(full): vs final"):
        table.add_column(col)
    for row in summary.main_table_rows():
        table.add_row(*row)
    console.print(table)
    budgets = ", ".join(str(n) for n in summary.finite_budgets)
    console.print(f"validation budgets: {budgets}, full; D_r = G_r(full) − G_r({summary.d_from})")
    excluded = pop.validation_exclusions.total
    if excluded:
        console.print(f"validation items excluded (incomplete or empty): {excluded}")
    if summary.protocol is not None:
        console.print(f"protocol: {summary.protocol.status}")
    for warning in summary.warnings or ():
        console.print(f"[yellow]caution:[/yellow] {warning}")
