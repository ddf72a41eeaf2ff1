"""``ckptsel ingest lm-eval | inspect | lighteval``: generations other harnesses evaluated, as
records (all three through :mod:`ckptsel.ingest`'s one mapping and the one records
writer). What a harness's logs lack is said in one line, and ``analyze`` runs the other rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from ckptsel.cli.options import OptionGroup, with_groups
from ckptsel.errors import CkptselError


def _echo_err(message: str) -> None:
    typer.echo(message, err=True)


def parse_map(values: list[str] | None, option: str, as_int: bool = False) -> dict:
    """``KEY=VALUE`` pairs (repeatable, or comma-separated in one value) as a dict; the key is
    everything before the last ``=`` (log file names may hold ``=`` and ``,`` is rare in them)."""
    out: dict = {}
    for value in values or []:
        for pair in value.split(","):
            if not pair.strip():
                continue
            key, sep, val = pair.strip().rpartition("=")
            if not sep or not key or not val:
                raise CkptselError(f"{option} {pair!r}: use KEY=VALUE")
            if as_int:
                if not val.isdigit():
                    raise CkptselError(f"{option} {pair!r}: the step must be a non-negative integer")
                out[key] = int(val)
            else:
                out[key] = val
    return out


def _report(ingested, out: str) -> None:
    """The one-line summary, each trajectory's configuration and seed, and, on stderr, what the
    logs lack."""
    from ckptsel.ingest.mapping import names_line

    rows = ingested.generations
    for line in ingested.unavailable:
        _echo_err(f"note: {line}")
    typer.echo(names_line(ingested.names))
    if ingested.different_items:
        typer.echo(f"ingested {ingested.different_items} id(s) whose content differs between the logs (--allow-different-items)")
    gen, nll = ingested.replaced
    if gen or nll:
        typer.echo(f"replaced {gen} generation rows and {nll} NLL rows already recorded in {out}")
    trajectories = ", ".join(sorted(rows["trajectory"].unique()))
    nll = 0 if ingested.nll is None else len(ingested.nll)
    typer.echo(
        f"ingested {len(rows)} generation rows and {nll} NLL rows ({rows['step'].nunique()} "
        f"checkpoints, trajectory {trajectories}) -> {out}"
    )


CONFIGURATION = typer.Option(
    None,
    "--configuration",
    help="Default: the log's, else the trajectory's name less its seed, as `ckptsel run` "
    "names trajectories (cfgA-s42: configuration cfgA, seed 42), else the trajectory name.",
)
OUT = typer.Option(
    ...,
    "--out",
    help="Records folder or URL (s3://, gs://, file://). Rows are added; a (trajectory, step, "
    "split, item) already recorded there is refused (nothing written) unless --replace.",
)
REPLACE = typer.Option(False, "--replace", help="Replace rows whose key is already recorded in --out (says how many).")
ALLOW_DIFFERENT = typer.Option(
    False,
    "--allow-different-items",
    help="Ingest an id whose content (lm-eval doc_hash, inspect input and target, lighteval "
    "query and gold) differs between the logs; said, with the count. Default: refused.",
)
RESCORE = typer.Option(
    False,
    "--rescore",
    help="Correctness by --task's answer rule (the answer against the sample's reference), not "
    "the log's; said, with how many changed. Contradictions are said either way.",
)
STEPS = typer.Option(
    None,
    "--steps",
    help="LOG=STEP (repeatable or comma-separated): a log's file name, path or model name "
    "and its checkpoint's step, where the logs do not say.",
)


def rows_options(
    trajectory: str = "Default: what the logs say (metadata, checkpoint folder's parent).",
    task: str = "the harness's task name",
    split: str = "validation or test, for samples whose metadata names none.",
) -> OptionGroup:
    """Where the rows go and how they are named, every ``ingest`` command's: the help of
    ``--trajectory``, ``--task``'s default and ``--split`` as the command says them."""
    return OptionGroup(
        out=(str, OUT),
        replace=(bool, REPLACE),
        trajectory=(str, typer.Option(None, "--trajectory", help=trajectory)),
        configuration=(str, CONFIGURATION),
        task=(
            str,
            typer.Option(None, "--task", help=f"ckptsel task or task file PATH.toml (answers normalized with it); default: {task}."),
        ),
        split=(str, typer.Option("test", "--split", help=split)),
    )


CHECKS = OptionGroup(allow_different_items=(bool, ALLOW_DIFFERENT), rescore=(bool, RESCORE))
"""How the logs' items and correctness are checked, every ``ingest`` command's (last)."""


@with_groups
def lm_eval(
    samples_dirs: list[Path] = typer.Argument(..., help="One folder per checkpoint (checkpoint-<step>)."),
    rows: dict[str, Any] = rows_options("Default: the folders' common parent name.", "lm-eval task name", "validation or test."),
    step: int = typer.Option(None, "--step", help="Step, when a single folder is not named checkpoint-<step>."),
    metric: str = typer.Option(None, "--metric", help="0/1 per-sample metric; default exact_match, else acc."),
    filter_name: str = typer.Option(None, "--filter", help="lm-eval filter to keep when a file has several."),
    id_prefix: str = typer.Option(None, "--id-prefix", help="item_id = <prefix>-<doc_id>; default the lm-eval task."),
    lm_eval_tasks: list[str] = typer.Option(
        None,
        "--lm-eval-task",
        help="The lm-eval task(s) to read under --task when the folders hold several "
        "(repeatable; the others are left out). Several without it: refused.",
    ),
    checks: dict[str, Any] = CHECKS,
) -> None:
    """Read lm-evaluation-harness --log_samples output into generation records."""
    from ckptsel.ingest.lm_eval import ingest_lm_eval_logs

    ingested = ingest_lm_eval_logs(
        samples_dirs,
        **rows,
        **checks,
        step=step,
        metric=metric,
        filter_name=filter_name,
        id_prefix=id_prefix,
        lm_eval_tasks=lm_eval_tasks or None,
        note=_echo_err,
    )
    _report(ingested, rows["out"])


@with_groups
def inspect(
    logs: list[Path] = typer.Argument(..., help="inspect_ai .eval/.json logs, one per checkpoint (files or folders of them)."),
    rows: dict[str, Any] = rows_options(),
    steps: list[str] = STEPS,
    scorer: str = typer.Option(None, "--scorer", help="The scorer giving correctness, when samples carry several."),
    checks: dict[str, Any] = CHECKS,
) -> None:
    """Read inspect_ai evaluation logs (one per checkpoint) into generation records.

    The step comes from --steps, else the eval metadata's `step` (inspect eval --metadata
    step=80), else checkpoint-<step> in the model name (--model hf/runs/sft/checkpoint-80).
    inspect records no log-probabilities of the reference answer: the NLL rule is unavailable.
    A .eval member inflating past 100x its compressed size (16 MiB at least), or a log past 100x
    its size, or past 2 GiB, is refused as a possible ZIP bomb ($CKPTSEL_INFLATE_MAX_RATIO,
    $CKPTSEL_INFLATE_MAX_BYTES raise the limits)."""
    from ckptsel.ingest.inspect import ingest_inspect

    ingested = ingest_inspect(logs, **rows, **checks, steps=parse_map(steps, "--steps", as_int=True), scorer=scorer, note=_echo_err)
    _report(ingested, rows["out"])


@with_groups
def lighteval(
    details: list[Path] = typer.Argument(
        ..., help="lighteval --save-details output: the details folder, a model's folder, or parquet files (one model name per checkpoint)."
    ),
    rows: dict[str, Any] = rows_options(),
    splits: list[str] = typer.Option(None, "--splits", help="LIGHTEVAL_TASK=validation|test (repeatable) for documents that do not say."),
    steps: list[str] = STEPS,
    metric: str = typer.Option(None, "--metric", help="0/1 per-sample metric; default extractive_match or the only one."),
    checks: dict[str, Any] = CHECKS,
) -> None:
    """Read lighteval details files (lighteval ... --save-details) into generation records.

    The step comes from --steps, else checkpoint-<step> in the model name (run lighteval with
    model_name=runs/<trajectory>/checkpoint-<step>)."""
    from ckptsel.ingest.lighteval import ingest_lighteval

    ingested = ingest_lighteval(
        details,
        **rows,
        **checks,
        splits=parse_map(splits, "--splits"),
        steps=parse_map(steps, "--steps", as_int=True),
        metric=metric,
        note=_echo_err,
    )
    _report(ingested, rows["out"])
