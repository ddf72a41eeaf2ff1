"""``ckptsel split``: a data file into train/validation by whole group, with lineage (SPEC §9)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from ckptsel.cli.output import console
from ckptsel.data.split import split_file
from ckptsel.defaults import DATA_SEED


def split(
    data_file: Path = typer.Argument(..., help="JSON list or JSON Lines data file."),
    out: Path = typer.Option(..., "--out", help="Output folder."),
    seed: int = typer.Option(DATA_SEED, "--seed", help="Data seed of the group hash."),
    val_fraction: float = typer.Option(0.1, "--val-fraction", help="Probability that a group goes to validation."),
    group_field: str | None = typer.Option(
        None,
        "--group-field",
        help="Group key field (default: original_question when present, else the question field, i.e. each question is its own group).",
    ),
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when identical question text lands on both sides (different groups)."),
    force: bool = typer.Option(False, "--force", help="Overwrite files in --out that no earlier split wrote (never the input itself)."),
) -> None:
    """Split DATA_FILE into train/validation by whole group (SHA-256 of seed and group
    key), in the input's format, with a lineage table (lineage.json, lineage.md). Files in
    --out are replaced only when an earlier split wrote them, unchanged, or with --force."""
    lin = split_file(data_file, out, seed=seed, val_fraction=val_fraction, group_field=group_field, force=force)
    table = Table(title=f"split of {data_file} (group field {lin['group_field']!r})")
    for col in ("side", "records", "groups"):
        table.add_column(col, justify="left" if col == "side" else "right")
    for side in ("train", "validation", "total"):
        table.add_row(side, str(lin["records"][side]), str(lin["groups"][side]))
    console.print(table)
    inter = lin["intersections"]
    console.print(f"intersections: groups {inter['groups']}, identical question text {inter['question_text']}")
    console.print(f"wrote {out}/train*, validation*, lineage.json, lineage.md")
    if inter["question_text"]:
        Console(stderr=True).print(
            f"[bold red]WARNING: {inter['question_text']} question strings occur in both "
            "train and validation under different groups[/] (see lineage.md)"
        )
        if strict:
            raise typer.Exit(1)
