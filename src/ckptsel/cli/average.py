"""``ckptsel average RUN_DIR``: averaged checkpoints (the mean of the last K, an EMA) written
beside the run's checkpoints, under names that are not steps (measured at reserved steps)."""

from __future__ import annotations

import typer
from rich.markup import escape

from ckptsel.cli.output import console, json_flag, print_json


def average(
    run_dir: str = typer.Argument(..., help="A run folder of checkpoint-<step>/ folders (LoRA adapters or full models, safetensors)."),
    last: list[int] = typer.Option(
        None, "--last", help="Write average-lastK/: the mean of the last K checkpoints by step (repeatable: --last 3 --last 5)."
    ),
    ema: float = typer.Option(
        None, "--ema", help="Write ema-DECAY/: every checkpoint weighted decay^(n-1-i) in step order (normalized), decay in (0, 1)."
    ),
    base: str = typer.Option(None, "--base", help="Base model folder or URL for adapters (overrides adapter_config.json)."),
    layout: str = typer.Option(
        "hf", "--layout", help="Checkpoint folder names: hf (checkpoint-<step>) or torchtune (epoch_<n>, step_<n>)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an average of the same name made from other checkpoints (or edited)."),
    as_json: bool = json_flag("Print one JSON object: the run folder and, per average, its folder, method, sources and status."),
) -> None:
    """Write averaged checkpoints beside RUN_DIR's checkpoints: average-lastK/ (--last K) and
    ema-DECAY/ (--ema DECAY). Full models: the float32 mean of each tensor, in the checkpoints'
    dtype, with the last checkpoint's config and tokenizer. LoRA adapters: the exact mean of
    their weight deltas, an adapter of rank K·r. Each folder's ckptsel_average.json names its
    sources (step, folder, weights fingerprint, weight) and method. measure records them after
    the checkpoints at reserved steps (average-lastK: -K). The same inputs again: already there."""
    from ckptsel.train.average_write import average_run  # torch and safetensors when run

    answers = average_run(run_dir, last or (), ema, base, force, layout)
    if as_json:
        print_json("average", {"run_dir": run_dir, "averages": answers})
        return
    for a in answers:
        how = f"mean of the last {a['k']}" if a["method"] == "mean" else f"EMA (decay {a['decay']!r}) of {a['k']}"
        steps = ", ".join(str(s) for s in a["steps"])
        console.print(
            f"{escape(a['folder'])}: {a['status']} ({how} {a['kind']} checkpoints: steps {steps})", soft_wrap=True, highlight=False
        )
