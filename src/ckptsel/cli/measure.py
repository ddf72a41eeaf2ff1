"""``ckptsel measure``: every checkpoint of a run folder into records (greedy answers +
response NLL), here or on a Ray cluster."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.cli.output import progress_bars
from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.records import MATCHED_WINDOW


def measure(
    run_dir: Path = typer.Argument(..., help="Run folder holding checkpoint-<step>/ folders."),
    task: str = typer.Option(
        ..., "--task", help="gsm8k, metamath, math, commonsense or a commonsense task."
    ),
    validation: Path = typer.Option(..., "--validation", help="Validation items file."),
    test: Path = typer.Option(..., "--test", help="Test items file."),
    test_task: str = typer.Option(
        None, "--test-task", help="Task of the test file when it differs (e.g. gsm8k)."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Records folder (shared by runs; rows are appended)."
    ),
    base: str = typer.Option(
        None, "--base", help="Base model folder for adapters (overrides adapter_config.json)."
    ),
    trajectory: str = typer.Option(None, "--trajectory", help="Default: the run folder's name."),
    configuration: str = typer.Option(
        None, "--configuration", help="Default: the trajectory name."
    ),
    batch_size: int = typer.Option(
        BATCH_SIZE, "--batch-size", help="Prompts per batch (answers do not depend on it)."
    ),
    max_new_tokens: int = typer.Option(
        MAX_NEW_TOKENS, "--max-new-tokens", help="Generation length limit."
    ),
    window: int = typer.Option(
        MATCHED_WINDOW, "--window", help="Matched NLL window in tokens (0 = complete only)."
    ),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    backend: str = typer.Option(
        "hf", "--backend", help="hf, or vllm (GPU, LoRA runs; NLL stays on hf)."
    ),
    dtype: str = typer.Option(
        "auto", "--dtype", help="auto (fp32 on CPU, bf16 on GPU), float32, bfloat16, float16."
    ),
    executor: str = typer.Option(
        "local", "--executor", help="local (this process) or ray (a Ray cluster)."
    ),
    ray_address: str = typer.Option(
        None, "--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else local)."
    ),
    workers: int = typer.Option(
        0, "--workers", help="Ray actors (0: as many as the cluster's resources hold)."
    ),
    num_cpus: float = typer.Option(1.0, "--num-cpus", help="CPUs per Ray actor."),
    num_gpus: float = typer.Option(
        0.0, "--num-gpus", help="GPUs per Ray actor (1: one actor per GPU)."
    ),
    max_retries: int = typer.Option(
        3, "--max-retries", help="Ray: restarts of a dead actor (its unit runs again)."
    ),
    max_loras: int = typer.Option(
        1, "--max-loras", help="vLLM: adapters the engine holds at once."
    ),
    max_lora_rank: int = typer.Option(
        0, "--max-lora-rank", help="vLLM: largest LoRA rank (0: the run's adapters' rank)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars."),
    only: str = typer.Option(
        None, "--only", help="generation or nll: measure and record just that kind."
    ),
) -> None:
    """Measure every checkpoint of RUN_DIR (greedy answers + response NLL) into OUT."""
    # the measurement stage loads when the command runs (see ckptsel.cli)
    from ckptsel.measure import ExecutorConfig, MeasureConfig, measure_run

    config = MeasureConfig(
        task=task, batch_size=batch_size, max_new_tokens=max_new_tokens, window=window,
        device=device, backend=backend, dtype=dtype, only=only, test_task=test_task,
        max_loras=max_loras, max_lora_rank=max_lora_rank,
        check_here=executor != "ray",  # on Ray the GPUs are the workers', not the driver's
    )  # fmt: skip
    ex = ExecutorConfig(
        kind=executor, address=ray_address, workers=workers, num_cpus=num_cpus,
        num_gpus=num_gpus, max_retries=max_retries,
    )  # fmt: skip
    with progress_bars(progress) as on_progress:
        res = measure_run(
            run_dir, config, validation=validation, test=test, out=out, base=base,
            trajectory=trajectory, configuration=configuration, on_progress=on_progress,
            executor=ex,
        )  # fmt: skip
    reused = f", {len(res.reused_steps)} already recorded" if res.reused_steps else ""
    typer.echo(
        f"{res.trajectory}: {len(res.steps)} checkpoints ({len(res.measured_steps)} measured{reused}); "
        f"{res.generated_items} generations, {res.scored_items} NLL items in {res.seconds:.1f}s -> {out}"
    )
