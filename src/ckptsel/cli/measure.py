"""``ckptsel measure`` (checkpoints -> records) and ``ckptsel ingest lm-eval``.

The measurement runner has no UI code: it reports :class:`ckptsel.measure.ProgressEvent` s,
which :func:`progress_bars` renders as rich progress bars (one for the run, one for the
checkpoint being measured, each with its items/s).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer

from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.records import MATCHED_WINDOW


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[Callable[[Any], None]]:
    """A ``measure_run`` progress callback that draws rich bars (none when not ``enabled``)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, disable=not enabled, transient=False) as bar:
        state: dict[str, Any] = {}

        def rate(done: int, since: float) -> str:
            return f"{done / max(time.perf_counter() - since, 1e-9):.1f} items/s"

        def on_event(ev: Any) -> None:
            if ev.kind == "run":
                state.update(t0=time.perf_counter(), done=0, recorded=0, units=0)
                state.update(name=ev.trajectory, n_units=ev.units)
                state["overall"] = bar.add_task(ev.trajectory, total=ev.total, rate="")
            elif ev.kind == "step":
                state.update(step_t0=time.perf_counter(), step_done=0, step_total=max(ev.total, 1))
                state["step"] = bar.add_task(f"  step {ev.step}", total=state["step_total"], rate="")
            elif ev.kind == "items":
                state["step_done"] += ev.done
                state["done"] += ev.done
                step_rate = rate(state["step_done"], state["step_t0"])
                bar.update(state["step"], advance=ev.done, rate=step_rate)
                bar.update(state["overall"], advance=ev.done, rate=rate(state["done"], state["t0"]))
            elif ev.kind == "step_done":
                state["recorded"] += ev.total
                state["units"] += 1
                units = f"{state['name']} ({state['units']}/{state['n_units']} checkpoints)"
                bar.update(state["overall"], completed=state["recorded"], description=units)
                bar.update(state["step"], completed=state["step_total"])
                bar.remove_task(state["step"])

        yield on_event


def register(app: typer.Typer) -> None:
    """Add ``measure`` and the ``ingest`` sub-app to the CLI."""

    @app.command()
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
        trajectory: str = typer.Option(
            None, "--trajectory", help="Default: the run folder's name."
        ),
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
        from ckptsel.measure import ExecutorConfig, MeasureConfig, measure_run

        config = MeasureConfig(
            task=task,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            window=window,
            device=device,
            backend=backend,
            dtype=dtype,
            only=only,
            test_task=test_task,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            check_here=executor != "ray",  # on Ray the GPUs are the workers', not the driver's
        )
        ex = ExecutorConfig(
            kind=executor,
            address=ray_address,
            workers=workers,
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            max_retries=max_retries,
        )
        with progress_bars(progress) as on_progress:
            res = measure_run(
                run_dir,
                config,
                validation=validation,
                test=test,
                out=out,
                base=base,
                trajectory=trajectory,
                configuration=configuration,
                on_progress=on_progress,
                executor=ex,
            )
        reused = f", {len(res.reused_steps)} already recorded" if res.reused_steps else ""
        typer.echo(
            f"{res.trajectory}: {len(res.steps)} checkpoints ({len(res.measured_steps)} measured{reused}); "
            f"{res.generated_items} generations, {res.scored_items} NLL items in {res.seconds:.1f}s -> {out}"
        )

    ingest_app = typer.Typer(
        no_args_is_help=True, help="Import generations evaluated by other tools."
    )

    @ingest_app.command("lm-eval")
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
        from ckptsel.measure import ingest_lm_eval

        rows = ingest_lm_eval(
            samples_dirs,
            out=out,
            trajectory=trajectory,
            configuration=configuration,
            task=task,
            split=split,
            step=step,
            metric=metric,
            filter_name=filter_name,
            id_prefix=id_prefix,
            note=lambda m: typer.echo(m, err=True),
        )
        typer.echo(
            f"ingested {len(rows)} generation rows ({rows['step'].nunique()} checkpoints, "
            f"trajectory {rows['trajectory'].iloc[0]}) -> {out}"
        )

    app.add_typer(ingest_app, name="ingest")
