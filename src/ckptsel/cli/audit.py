"""``ckptsel audit``: overlap between fine-tuning, validation and test questions, with a planted
positive control (SPEC §9)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ckptsel.cli.output import console
from ckptsel.data.audit.files import audit_files, write_audit
from ckptsel.data.audit.findings import AuditResult
from ckptsel.errors import CkptselError


def audit(
    train: Path | None = typer.Option(None, "--train", help="Fine-tuning data file."),
    validation: Path | None = typer.Option(None, "--validation", help="Validation file."),
    test: Path | None = typer.Option(None, "--test", help="Test data file."),
    out: Path | None = typer.Option(None, "--out", help="Write audit.json and audit.md here (default: print only)."),
    threshold: float = typer.Option(0.8, "--threshold", help="Character 13-gram Jaccard threshold."),
    plant: bool = typer.Option(True, "--plant/--no-plant", help="Run the planted positive control."),
    seed: int = typer.Option(0, "--seed", help="Seed of the planted control."),
) -> None:
    """Overlap audit between the given pools (exact, normalized, character 13-gram
    Jaccard, word 5-gram) with a planted positive control; exit 1 if the control fails."""
    files = {name: path for name, path in (("train", train), ("validation", validation), ("test", test)) if path is not None}
    if len(files) < 2:
        raise CkptselError("audit needs at least two of --train, --validation, --test")
    result = audit_files(files, threshold=threshold, plant=plant, seed=seed, progress=True)
    _print_checks(result, threshold)
    if out is not None:
        write_audit(result, out)
        console.print(f"wrote {out / 'audit.json'} and {out / 'audit.md'}")
    else:
        console.print(result.to_markdown(), markup=False, highlight=False)
    if plant:
        _report_control(result)
    console.print(f"audit time {result.seconds:.2f} s")


def _print_checks(result: AuditResult, threshold: float) -> None:
    """One row per (pair of pools, check): flagged pairs and the items they touch."""
    table = Table(title=f"overlap audit (char-13 Jaccard >= {threshold})")
    for col in ("pools", "check", "pairs", "items 1st", "items 2nd"):
        table.add_column(col, justify="left" if col in ("pools", "check") else "right", no_wrap=True)
    for p in result.pairs:
        for name, c in p.checks.items():
            table.add_row(f"{p.a}–{p.b}", name, str(c.pairs), f"{c.items_a}/{p.n_a}", f"{c.items_b}/{p.n_b}")
    console.print(table)


def _report_control(result: AuditResult) -> None:
    """Say whether the planted control passed; exit 1 when it failed."""
    n_ok = sum(q.ok for q in result.planted)
    if result.control_ok:
        console.print(f"[green]planted control passed: {n_ok}/{len(result.planted)} found[/]")
        return
    err = Console(stderr=True)
    missing = sorted({"exact", "case_punct"} - {q.kind for q in result.planted})
    why = f" (no {' or '.join(missing)} copy could be planted: pools too small)" if missing else ""
    err.print(f"[bold red]planted control FAILED: {n_ok}/{len(result.planted)} found{why}[/]")
    for note in result.control_notes:
        err.print(f"  {note}", markup=False)
    raise typer.Exit(1)
