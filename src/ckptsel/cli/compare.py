"""``ckptsel compare``: two checkpoints on the same items, paired (A − B, interval, McNemar);
``ckptsel compare-logs``: the same on two evaluation logs of any harness (its own command, so
that ``compare RECORDS STEP_A STEP_B`` keeps its arguments and output)."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.cli.output import json_flag, print_comparison, print_json, print_log_comparison
from ckptsel.defaults import CONFIDENCE, SEED
from ckptsel.workflows.advise.comparison import CompareSettings, compare_checkpoints
from ckptsel.workflows.advise.log_comparison import compare_logs as compare_log_files


def compare(
    records_dir: Path = typer.Argument(..., help="Records folder (single files or units)."),
    step_a: str = typer.Argument(
        ..., help="Checkpoint A: its step, checkpoint-<step>, or an average (average-last3, ema-0.9, mean_last3)."
    ),
    step_b: str = typer.Argument(..., help="Checkpoint B, named the same ways."),
    trajectory: str = typer.Option(..., "--trajectory", help="Trajectory of A (and of B)."),
    trajectory_b: str = typer.Option(None, "--trajectory-b", help="Trajectory of B when it is another run on the same items."),
    as_json: bool = json_flag(),
    draws: int = typer.Option(10000, help="Paired bootstrap draws."),
    seed: int = typer.Option(SEED, help="Bootstrap seed."),
    confidence: float = typer.Option(CONFIDENCE, help="Interval level."),
) -> None:
    """Paired comparison of two checkpoints on the same items: A − B, interval, McNemar (exact;
    clustered, by sign flips of whole groups, when items share groups)."""
    result = compare_checkpoints(
        records_dir,
        trajectory,
        step_a,
        step_b,
        trajectory_b=trajectory_b,
        settings=CompareSettings(draws=draws, seed=seed, level=confidence),
    )
    if as_json:
        print_json("compare", result)
    else:
        print_comparison(result)


def compare_logs(
    log_a: Path = typer.Argument(
        ..., help="Log A: inspect .eval/.json (or folder), lm-eval --log_samples folder or samples file, lighteval details."
    ),
    log_b: Path = typer.Argument(..., help="Log B, of the same samples (any of those harnesses)."),
    as_json: bool = json_flag(),
    correction: str = typer.Option(
        "holm", "--correction", help="Across tasks: holm (family-wise error) or bh (Benjamini–Hochberg, false discovery rate)."
    ),
    split: str = typer.Option("test", "--split", help="validation or test, for samples whose metadata names none."),
    task: str = typer.Option(None, "--task", help="Read every task of both logs as this one (ckptsel task or name)."),
    scorer: str = typer.Option(None, "--scorer", help="inspect: the scorer giving correctness."),
    metric: str = typer.Option(None, "--metric", help="lm-eval/lighteval: the 0/1 metric."),
    filter_name: str = typer.Option(None, "--filter", help="lm-eval: the filter to keep."),
    allow_different_items: bool = typer.Option(
        False,
        "--allow-different-items",
        help="Pair a shared id whose content (lm-eval doc_hash, inspect input and target, "
        "lighteval query and gold) differs between the logs; said, and counted. Default: refused.",
    ),
    rescore: bool = typer.Option(False, "--rescore", help="Correctness by --task's answer rule (answer against reference), not the logs'."),
    draws: int = typer.Option(10000, help="Paired bootstrap draws."),
    seed: int = typer.Option(SEED, help="Bootstrap seed."),
    confidence: float = typer.Option(CONFIDENCE, help="Interval level."),
) -> None:
    """Paired comparison of two evaluation logs (inspect, lm-eval, lighteval, or a mix), per
    task: samples aligned by id, A − B with a bootstrap interval of whole groups, McNemar
    (clustered when samples share groups), p-values adjusted across tasks (Holm or BH), and the
    items a paired test needs to detect the difference. Nothing is written.

    The numbers are those `ckptsel compare` gives on the two logs ingested as two checkpoints
    of one trajectory (same --split, --draws, --seed). Samples in one log only are counted and
    left out; a task whose samples the logs do not share is refused, and so is a shared id whose
    content differs between two logs of one harness (--allow-different-items pairs it)."""
    from ckptsel.ingest.logs import LogOptions

    def note(line: str) -> None:
        typer.echo(line, err=True)

    result = compare_log_files(
        log_a,
        log_b,
        split=split,
        correction=correction,
        note=note,
        options=LogOptions(scorer=scorer, metric=metric, filter_name=filter_name, task=task, rescore=rescore),
        settings=CompareSettings(draws=draws, seed=seed, level=confidence),
        allow_different_items=allow_different_items,
    )
    if as_json:
        print_json("compare-logs", result)
    else:
        print_log_comparison(result)
