"""``ckptsel verify``: recompute a results folder's frozen choices and results."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.cli.output import console
from ckptsel.workflows import verify as run_verify


def verify(
    results_dir: Path = typer.Argument(..., help="A results folder written by `ckptsel analyze`."),
    records: Path = typer.Option(
        None, "--records", help="Records folder (default: the one analyzed)."
    ),
) -> None:
    """Recompute the frozen choices and the results; exit 1 on any mismatch."""
    for line in run_verify(results_dir, records):
        console.print(f"[green]ok[/green] {line}")
