"""A study's trajectories: train (or resume) them all, write the final step each is expected to
reach, and check each one's checkpoints against it (``ckptsel train``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckptsel._util.io import write_text
from ckptsel._util.nodecache import local_ref
from ckptsel.data.prompts import PromptFormat, prompt_format
from ckptsel.data.tasks import get_task, load_items
from ckptsel.errors import CkptselError
from ckptsel.records.schema import FINAL_STEPS_FILE
from ckptsel.study.configuration import Study, final_steps
from ckptsel.train.checkpoints import TrajectoryStatus, checkpoint_steps, trajectory_status
from ckptsel.train.formats import write_run_format
from ckptsel.train.models import load_tokenizer
from ckptsel.train.trajectory import TrainResult, encode_items, train_trajectory


def write_final_steps(study: Study, n_train_examples: int) -> Path:
    """``final_steps.json``: the expected final step per trajectory, for the analysis."""
    path = study.root / FINAL_STEPS_FILE
    write_text(path, json.dumps(final_steps(study, n_train_examples), indent=2, sort_keys=True) + "\n")
    return path


def train_study(
    study: Study,
    *,
    only: Sequence[str] | None = None,
    device: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
) -> list[TrainResult]:
    """Train (or resume) every trajectory of a study; completed ones are skipped."""
    task = get_task(study.task)
    if not task.has_response:
        raise CkptselError(f"task {task.name} has no response field: nothing to fine-tune on (SFT needs one)")
    items = load_items(study.task, study.train)  # a URL: this node's copy
    base = local_ref(study.base_model)  # a URL: this node's copy
    tokenizer = load_tokenizer(base)
    fmt = study_format(study, tokenizer)
    by_len: dict[int, list[dict[str, list[int]]]] = {}
    results = []
    write_final_steps(study, len(items))
    known = {name for name, _, _ in study.trajectories()}
    for name in only or ():
        if name not in known:
            raise CkptselError(f"unknown trajectory {name!r}; the study has {sorted(known)}")
    for name, cfg, seed in study.trajectories():
        if only and name not in only:
            continue
        final = cfg.total_steps(len(items))
        if final in checkpoint_steps(study.run_root / name):
            res = TrainResult(name, study.run_root / name, final, [], final, skipped=True)
        else:
            write_run_format(study.run_root / name, fmt)  # measure reads it (train.formats)
            if cfg.max_length not in by_len:  # tokenize only when something is left to train
                by_len[cfg.max_length] = encode_items(tokenizer, items, cfg.max_length, fmt)
            res = train_trajectory(
                base, by_len[cfg.max_length], cfg, seed, study.run_root / name, tokenizer=tokenizer, device=device, progress=progress
            )
        if log is not None:
            log(_outcome(name, res))
        results.append(res)
    return results


def study_format(study: Study, tokenizer: Any) -> PromptFormat:
    """The prompt format a study trains (and measures) with: ``[measure] prompt_format``,
    ``system_prompt``, ``chat_template_args`` (default alpaca), bound to the base model's
    tokenizer (``chat`` needs its chat template)."""
    m = study.measure
    fmt = prompt_format(m.get("prompt_format"), m.get("system_prompt"), m.get("chat_template_args"))
    return fmt.with_tokenizer(tokenizer, f"base model {study.base_model}: the tokenizer")


def _outcome(name: str, res: TrainResult) -> str:
    """The line ``train_study`` logs for one trajectory."""
    if res.skipped:
        return f"{name}: complete (final checkpoint-{res.final_step}), skipped"
    how = f"resumed from checkpoint-{res.resumed_from}" if res.resumed_from else "trained"
    return f"{name}: {how}, {len(res.saved_steps)} checkpoints, final step {res.final_step}, loss {res.last_loss:.4f}, {res.seconds:.1f}s"


def study_status(study: Study) -> list[TrajectoryStatus]:
    """Status of every trajectory against the final step the study file implies (the item
    count is read only when a configuration is given in epochs)."""
    n_items = 0
    if any(c.epochs is not None for c in study.configurations):
        n_items = len(load_items(study.task, study.train))
    return [trajectory_status(study.run_root / name, cfg.total_steps(n_items)) for name, cfg, _ in study.trajectories()]
