"""``ckptsel compare``: two checkpoints on the same items, paired (A − B, interval, McNemar)."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.cli.output import print_comparison, print_json
from ckptsel.defaults import CONFIDENCE, SEED
from ckptsel.workflows import CompareSettings, compare_checkpoints


def compare(
    records_dir: Path = typer.Argument(..., help="Records folder (single files or units)."),
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
    """Paired comparison of two checkpoints on the same items: A − B, interval, McNemar (exact;
    clustered, by sign flips of whole groups, when items share groups)."""
    result = compare_checkpoints(
        records_dir, trajectory, step_a, step_b, trajectory_b=trajectory_b,
        settings=CompareSettings(draws=draws, seed=seed, level=confidence),
    )  # fmt: skip
    if as_json:
        print_json("compare", result)
    else:
        print_comparison(result)
