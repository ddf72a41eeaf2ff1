"""The main table and the study's caveats for a terminal (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ckptsel.defaults import BUDGETS
from ckptsel.results import d_from, interval_label, main_table_rows


def print_main_table(summary: dict, console: Console | None = None) -> None:
    console = console or Console()
    pop = summary["population"]
    table = Table(
        title=f"ckptsel — {pop['trajectories']} trajectories, {pop['configurations']} configurations "
        f"(pp; {int(summary['confidence'] * 100)}% {interval_label(summary)} intervals)",
    )
    d_col = f"D_r = G(full) − G({d_from(summary)})"
    for col in ("rule", d_col, "H_r(full): vs matched NLL", "G_r(full): vs final"):
        table.add_column(col)
    for row in main_table_rows(summary):
        table.add_row(*row)
    console.print(table)
    budgets = ", ".join(str(n) for n in summary.get("budgets", BUDGETS))
    console.print(f"validation budgets: {budgets}, full; D_r = G_r(full) − G_r({d_from(summary)})")
    excluded = pop["validation_exclusions"]["total"]
    if excluded:
        console.print(f"validation items excluded (incomplete or empty): {excluded}")
    for warning in summary.get("warnings", []):
        console.print(f"[yellow]caution:[/yellow] {warning}")
