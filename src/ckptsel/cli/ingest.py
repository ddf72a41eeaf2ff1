"""``ckptsel ingest lm-eval``: generations evaluated by lm-evaluation-harness, as records."""

from __future__ import annotations

from pathlib import Path

import typer


def lm_eval(
    samples_dirs: list[Path] = typer.Argument(
        ..., help="One folder per checkpoint (checkpoint-<step>)."
    ),
    out: Path = typer.Option(..., "--out", help="Records folder (rows are appended)."),
    trajectory: str = typer.Option(
        None, "--trajectory", help="Default: the folders' common parent name."
    ),
    configuration: str = typer.Option(
        None, "--configuration", help="Default: the trajectory name."
    ),
    task: str = typer.Option(
        None,
        "--task",
        help="ckptsel task (answers normalized with it); default: lm-eval task name.",
    ),
    split: str = typer.Option("test", "--split", help="validation or test."),
    step: int = typer.Option(
        None, "--step", help="Step, when a single folder is not named checkpoint-<step>."
    ),
    metric: str = typer.Option(
        None, "--metric", help="0/1 per-sample metric; default exact_match, else acc."
    ),
    filter_name: str = typer.Option(
        None, "--filter", help="lm-eval filter to keep when a file has several."
    ),
    id_prefix: str = typer.Option(
        None, "--id-prefix", help="item_id = <prefix>-<doc_id>; default the lm-eval task."
    ),
) -> None:
    """Read lm-evaluation-harness --log_samples output into generation records."""
    from ckptsel.measure import ingest_lm_eval  # when run (see ckptsel.cli)

    rows = ingest_lm_eval(
        samples_dirs, out=out, trajectory=trajectory, configuration=configuration, task=task,
        split=split, step=step, metric=metric, filter_name=filter_name, id_prefix=id_prefix,
        note=lambda m: typer.echo(m, err=True),
    )  # fmt: skip
    typer.echo(
        f"ingested {len(rows)} generation rows ({rows['step'].nunique()} checkpoints, "
        f"trajectory {rows['trajectory'].iloc[0]}) -> {out}"
    )
