"""``ckptsel select``: which checkpoint of one trajectory to keep, and an honest estimate of its
gain over the final one. (Named ``selection`` to keep clear of the standard library's
``select``.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ckptsel import defaults
from ckptsel.cli.options import CHECKPOINTS, LOG, RECORDS_DIR, log_settings, parse_rules, with_groups
from ckptsel.cli.output import json_flag, print_json, print_keep_table, print_selection
from ckptsel.errors import CkptselError
from ckptsel.workflows.advise.selection import AnswerSettings, SelectSettings, select_all, select_checkpoint
from ckptsel.workflows.tracking import log_selection


@with_groups
def select(
    records_dir: str = RECORDS_DIR,
    trajectory: str = typer.Option(None, "--trajectory", help="The trajectory (run) to choose a checkpoint for."),
    every: bool = typer.Option(
        False,
        "--all",
        help="Every trajectory of the records: a table of which checkpoint to keep for each (what analyze writes in summary.json's keep).",
    ),
    as_json: bool = json_flag("Print a machine-readable JSON object instead of tables."),
    rule: str = typer.Option(
        "accuracy",
        "--rule",
        help="Rule the recommendation follows: accuracy, agreement or nll; or your own, FILE.py:function or "
        "NAME=FILE.py:function (its signal sees the validation records only; the file runs as code).",
    ),
    partitions: int = typer.Option(defaults.PERMUTATIONS, help="Random half/half partitions of the validation pool."),
    draws: int = typer.Option(1000, help="Question-bootstrap draws for the intervals."),
    bootstrap_partitions: int = typer.Option(20, help="Partitions per bootstrap draw."),
    seed: int = typer.Option(defaults.SEED, help="Seed for permutations, partitions and bootstraps."),
    confidence: float = typer.Option(defaults.CONFIDENCE, help="Interval level."),
    degenerate_share: float = typer.Option(
        defaults.DEGENERATE_SHARE,
        "--degenerate-share",
        help="A checkpoint giving one answer to this share of its validation items or more (at "
        f"least {defaults.DEGENERATE_MIN_ITEMS}), wrong on most of them, is flagged as degenerate "
        "and not recommended.",
    ),
    allow_degenerate: bool = typer.Option(
        False,
        "--allow-degenerate",
        help="Recommend a degenerate checkpoint when the rule picks it (the recommendation says it is flagged).",
    ),
    strict_answers: bool = typer.Option(
        False,
        "--strict-answers",
        help="Count an answer that only the answer rule's fallback found (gsm8k: the last number, "
        "no 'The answer is' marker) as wrong; needs the records' generated texts.",
    ),
    log: dict[str, Any] = LOG,
    checkpoints: Path = CHECKPOINTS,
) -> None:
    """Which checkpoint of one trajectory to keep, and an honest estimate of its gain over the
    final one; with --all, the checkpoint to keep for every trajectory."""
    if not 0.0 < confidence < 1.0:
        raise CkptselError("--confidence must be between 0 and 1")
    if every == (trajectory is not None):
        raise CkptselError("give one --trajectory, or --all for every trajectory")
    own = parse_rules([rule]) if ":" in rule else ()
    if own:
        rule = own[0].name
        if log.get("log"):
            raise CkptselError("--log logs a built-in rule's selection; your own rule's answer is printed (and in --json)")
    tracking = log_settings(log, rule="accuracy" if own else rule, checkpoints=checkpoints)
    if every and tracking.to:
        raise CkptselError("--log logs one trajectory's selection: give --trajectory, not --all")
    settings = SelectSettings(partitions=partitions, draws=draws, bootstrap_partitions=bootstrap_partitions, seed=seed, level=confidence)
    answers = AnswerSettings(share=degenerate_share, allow=allow_degenerate, strict=strict_answers)
    if every:
        study = select_all(records_dir, rule=rule, settings=settings, answers=answers, own=own)
        if as_json:
            print_json("select --all", study.to_dict())
        else:
            print_keep_table(study.keep, study.notes)
        return
    result = select_checkpoint(records_dir, trajectory, rule=rule, settings=settings, answers=answers, own=own)
    if as_json:
        print_json("select", result.to_dict())
    else:
        print_selection(result)
    # with --json, stdout is the JSON object alone
    log_selection(result, tracking, note=lambda line: typer.echo(line, err=as_json))
