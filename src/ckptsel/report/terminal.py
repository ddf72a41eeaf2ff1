"""The main table and the study's caveats for a terminal (rich), from the typed summary
(:class:`ckptsel.results.Summary`, or its ``summary.json`` dict)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ckptsel.report.tables import budgets_text
from ckptsel.results.summary import Summary


def print_main_table(summary: Summary | dict, console: Console | None = None) -> None:
    summary = Summary.coerce(summary)
    console = console or Console()
    pop = summary.population
    table = Table(
        title=f"ckptsel — {pop.trajectories} trajectories, {pop.configurations} configurations "
        f"(pp; {summary.level_percent}% {summary.interval_label} intervals)"
    )
    d_col = f"D_r = G(full) − G({summary.d_from})"
    for col in ("rule", d_col, "H_r(full): vs matched NLL", "G_r(full): vs final"):
        table.add_column(col)
    for row in summary.main_table_rows():
        table.add_row(*(escape(str(cell)) for cell in row))
    console.print(table)
    console.print(f"validation budgets: {escape(budgets_text(summary))}")
    excluded = pop.validation_exclusions.total
    if excluded:
        console.print(f"validation items excluded (incomplete or empty): {excluded}")
    if summary.protocol is not None:
        console.print(f"protocol: {escape(summary.protocol.status)}")
    for warning in summary.warnings or ():  # text, never Rich markup
        console.print(f"[yellow]caution:[/yellow] {escape(warning)}")
