"""``ckptsel report``: paper-style tables, figures and one self-contained report.html from a
results folder."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from ckptsel.cli.output import console
from ckptsel.results import publish


def report(
    results_dir: Path = typer.Argument(..., help="A results folder written by `ckptsel analyze`."),
    formats: str = typer.Option(
        "md,tex,csv,png,svg,html", "--formats", help="Comma-separated: md,tex,csv (tables), png,svg (figures), html."
    ),
    trajectory: str = typer.Option(None, "--trajectory", help="Trajectory of the within-trajectory figure (default: the first)."),
) -> None:
    """Write paper-style tables, figures and one self-contained report.html from a results folder."""
    from ckptsel.report.build import load_results, write_report  # when run (see ckptsel.cli)

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
