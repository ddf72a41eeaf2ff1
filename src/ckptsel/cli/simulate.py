"""``ckptsel simulate``: synthetic records with known truth (for tests, benchmarks, demos)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import typer
from rich.table import Table

from ckptsel._util.locations import Location
from ckptsel.cli.output import console
from ckptsel.errors import CkptselError
from ckptsel.records.schema import GENERATIONS_FILE


def simulate(
    out_dir: str = typer.Argument(..., help="Local folder for the records and the truth."),
    preset: str = typer.Option("small", "--preset", help="Simulation preset: small | paper."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed → identical files)."),
    force: bool = typer.Option(False, "--force", help="Replace records in OUT_DIR that no simulation wrote."),
    average_last: list[int] = typer.Option(
        [], "--average-last", help="Also record the average of the last K checkpoints (step -K), as ckptsel average writes it; repeatable."
    ),
    average_gain: float = typer.Option(
        0.0, "--average-gain", help="A planted averaging gain: the averages' true accuracy minus the mean of their checkpoints', points."
    ),
    study: bool = typer.Option(
        False,
        "--study",
        help="Write study files of the preset's shape instead (its configurations' grids and seeds, filler pools of its sizes "
        "and lengths), for `ckptsel run OUT_DIR/<task>/study.toml --dry-run`: what measuring that shape costs.",
    ),
) -> None:
    """Write synthetic generations.parquet and nll.parquet (the records contract) plus
    truth.parquet (true test accuracy per checkpoint) and simulation.json to OUT_DIR.
    Records a simulation did not write (a measured folder) are kept unless --force.
    --average-last K adds the average of each trajectory's last K checkpoints (its true accuracy
    the mean of theirs plus --average-gain points).
    With --study, study files of the preset's shape instead (nothing trained or measured)."""
    from ckptsel.sim.simulate import TRUTH_FILE, write_simulation  # when run (see ckptsel.cli)

    if "://" in out_dir and not out_dir.startswith("file://"):  # Path() would make s3:/b/...
        raise CkptselError(
            f"{out_dir}: simulate writes a local folder, not a URL; write it here and upload the folder (ckptsel reads records at URLs)"
        )
    out_dir = Location(out_dir).local
    if study:
        return write_shape(out_dir, preset, seed)
    start = time.perf_counter()
    if average_gain and not average_last:
        raise CkptselError("--average-gain plants a gain in the averages: name them with --average-last K")
    spec = preset
    if average_last:
        from dataclasses import replace

        from ckptsel.sim.presets import PRESETS

        if preset not in PRESETS:
            raise CkptselError(f"simulate: unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
        spec = replace(PRESETS[preset], average_last=tuple(average_last), average_gain_pp=float(average_gain))
    out = write_simulation(out_dir, spec, seed, force=force)
    elapsed = time.perf_counter() - start
    truth = pd.read_parquet(out / TRUTH_FILE)
    gen = pd.read_parquet(out / GENERATIONS_FILE, columns=["task", "split", "item_id"])
    table = Table(title=f"simulated records (preset {preset!r}, seed {seed})")
    for col in ("task", "configurations", "trajectories", "checkpoints", "validation", "test"):
        table.add_column(col, justify="left" if col == "task" else "right")
    items = gen.drop_duplicates().groupby(["task", "split"]).size()
    for task, t in truth.groupby("task", sort=False):
        table.add_row(
            str(task),
            str(t["configuration"].nunique()),
            str(t["trajectory"].nunique()),
            str(len(t)),
            str(items.get((task, "validation"), 0)),
            str(items.get((task, "test"), 0)),
        )
    console.print(table)
    console.print(f"wrote {out}/generations.parquet, nll.parquet, truth.parquet, simulation.json in {elapsed:.1f} s")


def write_shape(out_dir: Path, preset: str, seed: int) -> None:
    """``simulate --study``: the preset's shape as study files, and how to ask their cost."""
    from ckptsel.sim.shape import write_study_shape

    for path in write_study_shape(out_dir, preset, seed):
        console.print(f"wrote {path}")
    console.print(
        "what measuring each would cost: ckptsel run FILE --dry-run --device h200 (a benchmarked GPU; cpu: --probe, with a local base model)"
    )
