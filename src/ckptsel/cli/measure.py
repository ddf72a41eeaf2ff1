"""``ckptsel measure``: every checkpoint of a run folder into records (greedy answers +
response NLL), here or on a Ray cluster."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from ckptsel._util.extras import require_ml
from ckptsel._util.keys import user_key
from ckptsel.cli import options
from ckptsel.cli.output import json_flag, print_json, progress_bars
from ckptsel.records.schema import counted

# Python's collector runs after every 700 new container objects by default: the command's
# imports (torch, transformers) and passes make millions, and its runs cost a tenth of a small
# measurement's CPU time, mostly walking objects that live until the process ends; every 10,000
# it runs a fourteenth as often (bench_measure --small, BENCHMARKS.md). Cycles are
# still collected, just in larger steps; a model that must go is collected explicitly.
GC_THRESHOLD = 10_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """The garbage collector's first threshold at :data:`GC_THRESHOLD` while in this block
    (the previous thresholds restored after: an in-process caller keeps its own)."""
    before = gc.get_threshold()
    gc.set_threshold(max(GC_THRESHOLD, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


def dry_run_cost(run: dict[str, Any], engine: dict[str, Any], more: dict[str, Any], only: str | None, probe: bool, as_json: bool) -> None:
    """``measure --dry-run``: what measuring the run folder would cost, nothing measured (a
    benchmarked GPU's name in ``--device``: its measured rate, the part keys of cuda)."""
    from ckptsel.measure.cost import named_gpu, run_cost

    rate_device, named = engine["device"], named_gpu(engine["device"])
    engine = {**engine, "device": "cuda"} if named else engine
    run_dir, config, where = options.measure_inputs(run, engine, more, only=only, check_here=not named)
    keep = ("validation", "test", "out", "base", "trajectory")
    name, steps, cost = run_cost(run_dir, config, **{k: where.get(k) for k in keep}, probe=probe, rate_device=rate_device)
    if as_json:
        print_json("measure --dry-run", {"trajectory": name, "records": str(where["out"]), "steps": steps, "cost": cost.to_dict()})
        return
    typer.echo(f"{name}: {counted(steps)}; nothing measured (--dry-run)")
    typer.echo("\n".join(cost.lines()))


@options.with_groups
@fewer_collections()  # the whole command, its imports included
def measure(
    run: dict[str, Any] = options.run_options(
        run_dir="Run folder or URL (s3://, gs://, file://) holding checkpoint-<step>/ folders.",
        out="Records folder or URL (shared by runs; rows are appended).",
    ),
    engine: dict[str, Any] = options.ENGINE,
    executor: str = typer.Option("local", "--executor", help="local (this process) or ray (a Ray cluster)."),
    ray_address: str = typer.Option(None, "--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else local)."),
    workers: int = typer.Option(0, "--workers", help="Ray actors (0: as many as the cluster's resources hold)."),
    num_cpus: float = typer.Option(1.0, "--num-cpus", help="CPUs per Ray actor."),
    num_gpus: float = typer.Option(0.0, "--num-gpus", help="GPUs per Ray actor (1: one actor per GPU)."),
    max_retries: int = typer.Option(3, "--max-retries", help="Ray: restarts of a dead actor (its unit runs again)."),
    vllm_and_mixing: dict[str, Any] = options.VLLM_AND_MIXING,
    forward_credentials: bool = typer.Option(
        False,
        "--forward-credentials",
        help="Ray: hand the driver's storage credentials (AWS_ACCESS_KEY_ID, ..., "
        "GOOGLE_APPLICATION_CREDENTIALS, every FSSPEC_* and GCSFS_*) to the workers; "
        "without it only settings (endpoint, region, profile name) travel.",
    ),
    progress: bool = options.PROGRESS,
    only: str = typer.Option(None, "--only", help="generation or nll: measure and record just that kind."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Print what measuring would cost (items, prompt, generation and NLL tokens, a time estimate) and measure "
        "nothing; --device may then name a benchmarked GPU (h200).",
    ),
    probe: bool = typer.Option(False, "--probe", help="With --dry-run: time a few items through the base model here (loads it once)."),
    as_json: bool = json_flag("Print one JSON object (what was measured and reused, counts, seconds); no progress bars."),
) -> None:
    """Measure every checkpoint of RUN_DIR (greedy answers + response NLL) into OUT."""
    from ckptsel.measure.cost import check_probe

    check_probe(probe, dry_run, engine["device"])
    if dry_run:
        return dry_run_cost(run, engine, vllm_and_mixing, only, probe, as_json)
    user_key()  # the key of the caches (verdicts, packs) checked before anything is written
    if executor != "ray":  # on Ray the models load in the workers, not the driver
        require_ml("ckptsel measure")  # before anything is read or written
    # the measurement stage loads when the command runs (see ckptsel.cli)
    from ckptsel.data.tasks import get_task
    from ckptsel.measure.executors.base import ExecutorConfig
    from ckptsel.measure.run import measure_run

    run_dir, config, where = options.measure_inputs(
        run,
        engine,
        vllm_and_mixing,
        only=only,
        check_here=executor != "ray",  # on Ray the GPUs are the workers', not the driver's
    )
    ex = ExecutorConfig(
        kind=executor,
        address=ray_address,
        workers=workers,
        num_cpus=num_cpus,
        num_gpus=num_gpus,
        max_retries=max_retries,
        forward_credentials=forward_credentials,
    )
    with progress_bars(progress and not as_json) as on_progress:  # bars draw on stdout
        res = measure_run(run_dir, config, **where, on_progress=on_progress, executor=ex)
    if as_json:
        print_json(
            "measure",
            {
                "trajectory": res.trajectory,
                "configuration": res.configuration,
                "records": str(where["out"]),
                "steps": res.steps,
                "measured_steps": res.measured_steps,
                "reused_steps": res.reused_steps,
                "generated_items": res.generated_items,
                "scored_items": res.scored_items,
                "seconds": round(res.seconds, 3),
                "engines": res.engines,
                "prompt_format": res.prompt_format,
            },
        )
        return
    reused = f", {len(res.reused_steps)} already recorded" if res.reused_steps else ""
    typer.echo(
        f"{res.trajectory}: {counted(res.steps)} ({len(res.measured_steps)} measured{reused}); "
        f"{res.generated_items} generations, {res.scored_items} NLL items in {res.seconds:.1f}s -> {where['out']}"
    )
    if not where.get("configuration") and res.configuration != res.trajectory:
        typer.echo(
            f"  configuration {res.configuration!r}: the trajectory name less its seed, as run "
            "and ingest read it (--configuration to set another)"
        )
    if res.prompt_format:
        typer.echo(f"  prompt format: {res.prompt_format}")
    spec = config.measured
    no_nll = sorted({get_task(t).name for t in (spec.task, spec.task_for("test")) if not get_task(t).has_response})
    if no_nll and config.runtime.only != "generation":
        typer.echo(f"  no NLL rows for task {', '.join(no_nll)}: it has no response field (the NLL rules of analyze need one)")
    if res.weight_swaps or res.engine_starts > 1:  # "vllm engine started once, ..."
        typer.echo(f"  {res.engines}")
