"""Supervised fine-tuning trajectories with a checkpoint grid (SPEC §11).

A plain PyTorch loop on top of ``transformers`` models and ``peft`` LoRA, rather than
``Trainer``, because the grid has to be exact and resumable bit for bit: the example order of
step ``k`` is a pure function of (seed, k), and every checkpoint carries the optimizer,
scheduler and RNG state, so a trajectory restarted from its last checkpoint ends with the same
weights as one that never stopped. Checkpoints use the Hugging Face Trainer folder layout
(``RUN_DIR/<trajectory>/checkpoint-<step>/`` with ``trainer_state.json``, ``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth``) so that ``ckptsel measure`` and any HF tool read them.

Loss: response-masked cross-entropy (prompt tokens labelled -100), averaged over the supervised
tokens of the whole effective batch, so micro-batch x accumulation equals one big batch.
torch/transformers/peft are imported inside functions: the analysis layer never pays for them.
A study's trajectories (train them all, check them) are :mod:`ckptsel.train.study`'s.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.io import write_text
from ckptsel.data.prompts import PromptFormat
from ckptsel.data.taskdef import Item
from ckptsel.errors import CkptselError
from ckptsel.study.configuration import Configuration
from ckptsel.train.checkpoints import CHECKPOINT_PREFIX, STATE_FILE, checkpoint_steps
from ckptsel.train.models import build_trainable, load_tokenizer, pick_device, use_bf16

IGNORE_INDEX = -100


# --------------------------------------------------------------------------- examples


def encode_example(tokenizer, prompt: str, response: str, max_length: int = 512) -> dict[str, list[int]]:
    """Token ids and labels of one SFT example.

    The prompt and the response are tokenized separately and concatenated (prompt with the
    tokenizer's special tokens, e.g. BOS; response without, then EOS), so the prompt tokens are
    exactly what generation later starts from. Prompt tokens get label -100; response tokens and
    the EOS are supervised. Truncated to ``max_length`` tokens from the right.
    """
    if tokenizer.eos_token_id is None:
        raise CkptselError("tokenizer has no eos token; cannot mark the end of a response")
    p = list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    r = list(tokenizer(response, add_special_tokens=False)["input_ids"])
    return _example(p, r, tokenizer.eos_token_id, max_length)


def _example(p: list[int], r: list[int], eos: int, max_length: int) -> dict[str, list[int]]:
    return _supervised(p, [*r, eos], max_length)


def _supervised(p: list[int], r: list[int], max_length: int) -> dict[str, list[int]]:
    """Prompt ``p`` (label -100) then response ``r`` (its end included, supervised)."""
    return {"input_ids": (p + r)[:max_length], "labels": ([IGNORE_INDEX] * len(p) + r)[:max_length]}


def encode_items(tokenizer, items: Sequence[Item], max_length: int = 512, fmt: PromptFormat | None = None) -> list[dict[str, list[int]]]:
    """Encode ``ckptsel.data.Item`` objects under the prompt format ``fmt`` (default: the
    Alpaca prompt, SPEC §9): the prompt tokens (label -100) then the scored response tokens,
    exactly as measurement feeds and scores them (:meth:`ckptsel.data.PromptFormat.encode`:
    for alpaca, what :func:`encode_example` gives; for a chat template, the template's
    continuation after the generation prompt). Prompts and responses are tokenized in one batch
    call each."""
    if tokenizer.eos_token_id is None:
        raise CkptselError("tokenizer has no eos token; cannot mark the end of a response")
    if not items:
        return []
    fmt = fmt or PromptFormat()
    prompts, responses = fmt.encode(tokenizer, [it.instruction for it in items], [it.response for it in items], items)
    return [_supervised(p, r, max_length) for p, r in zip(prompts, responses, strict=True)]


def collate(examples: Sequence[dict[str, list[int]]], pad_id: int) -> dict[str, Any]:
    """Right-pad a micro-batch; padding is masked out of attention and of the loss."""
    import torch

    n = max(len(e["input_ids"]) for e in examples)
    ids = torch.full((len(examples), n), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), n), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros((len(examples), n), dtype=torch.long)
    for i, e in enumerate(examples):
        k = len(e["input_ids"])
        ids[i, :k] = torch.tensor(e["input_ids"])
        labels[i, :k] = torch.tensor(e["labels"])
        mask[i, :k] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def example_order(n_examples: int, total_examples: int, seed: int) -> np.ndarray:
    """The example stream of a trajectory: one seeded permutation per epoch, concatenated.

    Step ``k`` uses ``stream[k*B:(k+1)*B]``, so the data a step sees depends only on
    (seed, k) — what makes resuming exact without saving a data-loader state.
    """
    if n_examples < 1:
        raise CkptselError("no training examples")
    epochs = math.ceil(total_examples / n_examples)
    parts = [np.random.default_rng([seed, e]).permutation(n_examples) for e in range(epochs)]
    return np.concatenate(parts)[:total_examples]


def _rng_state() -> dict[str, Any]:
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


# --------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    trajectory: str
    run_dir: Path
    final_step: int
    saved_steps: list[int] = field(default_factory=list)
    resumed_from: int | None = None
    skipped: bool = False
    seconds: float = 0.0
    last_loss: float | None = None


def _save_checkpoint(
    model, tokenizer, optimizer, scheduler, run_dir: Path, step: int, state: dict[str, Any], config: Configuration, base_model: str
) -> Path:
    """Write ``checkpoint-<step>/`` into a temp folder, then rename it into place, so a killed
    job never leaves a half-written checkpoint that looks complete."""
    import torch

    final = run_dir / f"{CHECKPOINT_PREFIX}{step}"
    tmp = run_dir / f".{CHECKPOINT_PREFIX}{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    if config.adaptation == "full":
        tokenizer.save_pretrained(tmp)
    else:
        # The adapter must point at the base folder that ``measure`` will load.
        cfg_path = tmp / "adapter_config.json"
        acfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        if acfg.get("base_model_name_or_path") != base_model:
            acfg["base_model_name_or_path"] = base_model
            write_text(cfg_path, json.dumps(acfg, indent=2, sort_keys=True) + "\n")
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    torch.save(_rng_state(), tmp / "rng_state.pth")
    write_text(tmp / STATE_FILE, json.dumps(state, indent=2) + "\n")
    if final.exists():  # an earlier incomplete leftover of the same step
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def train_trajectory(
    base_model: str,
    examples: Sequence[dict[str, list[int]]],
    config: Configuration,
    seed: int,
    run_dir: str | Path,
    *,
    tokenizer=None,
    device: str | None = None,
    stop_after: int | None = None,
    progress: bool = True,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train one trajectory into ``run_dir`` (= ``RUN_DIR/<trajectory>``), resuming from its
    last complete checkpoint if there is one.

    ``examples`` are encoded with :func:`encode_example`. ``stop_after`` stops after saving the
    checkpoint of that step (used to test resuming; a killed job behaves the same).
    """
    t0 = time.perf_counter()
    run_dir = Path(run_dir)
    name, n = run_dir.name, len(examples)
    # labels are the prompt's (ignored) then the response's, cut from the right: an example
    # keeps a response token exactly when its last label is one
    if not any(ex["labels"] and ex["labels"][-1] != IGNORE_INDEX for ex in examples):
        raise CkptselError(
            f"trajectory {name!r}: no training example keeps a response token within "
            f"max_length = {config.max_length}: nothing would be trained; raise max_length"
        )
    total = config.total_steps(n)
    save_at = set(config.save_steps(n))
    have = checkpoint_steps(run_dir)
    resume_step = max((s for s in have if s in save_at), default=None)
    if resume_step is not None and resume_step >= total:
        return TrainResult(name, run_dir, total, have, resume_step, skipped=True, seconds=time.perf_counter() - t0)
    device = pick_device(device)
    bf16 = use_bf16(device)
    if tokenizer is None:
        tokenizer = load_tokenizer(base_model)
    resume_dir = run_dir / f"{CHECKPOINT_PREFIX}{resume_step}" if resume_step else None
    prev = _resume_state(resume_dir, seed, total, config) if resume_dir is not None else {}
    model, optimizer, scheduler = _setup(base_model, config, seed, total, resume_dir, device, bf16)
    log_history: list[dict[str, Any]] = []
    start = 0
    if resume_dir is not None:
        _restore(resume_dir, optimizer, scheduler, device)
        log_history = list(prev.get("log_history", []))
        start = resume_step

    order = example_order(n, total * config.batch_size, seed)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    saved: list[int] = []
    last_loss = None
    bar = _progress_bar(total, start, name) if progress else None
    for step in range(start + 1, total + 1):
        idx = order[(step - 1) * config.batch_size : step * config.batch_size]
        batch = [examples[i] for i in idx]
        loss = _train_step(model, optimizer, scheduler, batch, config.micro_batch, pad_id, device, bf16)
        last_loss = loss
        if not math.isfinite(loss):
            raise CkptselError(
                f"trajectory {name}: loss became {loss} at step {step}; lower the learning rate of configuration {config.name!r}"
            )
        log_history.append({"step": step, "loss": round(loss, 6), "learning_rate": scheduler.get_last_lr()[0]})
        if on_step is not None:
            on_step(step, loss)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
        if step in save_at:
            state = _trainer_state(step, total, n, seed, name, config, base_model, bf16, log_history)
            _save_checkpoint(model, tokenizer, optimizer, scheduler, run_dir, step, state, config, base_model)
            saved.append(step)
            if stop_after is not None and step >= stop_after:
                break
    if bar is not None:
        bar.close()
    return TrainResult(name, run_dir, total, saved, resume_step, False, time.perf_counter() - t0, last_loss)


def _resume_state(resume_dir: Path, seed: int, total: int, config: Configuration) -> dict:
    """The ``trainer_state.json`` of the checkpoint to resume from, after checking that the
    training state is all there and was written with this trajectory's settings."""
    missing = [f for f in (STATE_FILE, "optimizer.pt", "scheduler.pt", "rng_state.pth") if not (resume_dir / f).is_file()]
    if missing:
        raise CkptselError(f"{resume_dir}: cannot resume, training state missing ({', '.join(missing)})")
    prev = json.loads((resume_dir / STATE_FILE).read_text(encoding="utf-8"))
    want = {"seed": seed, "max_steps": total, "configuration": config.name, "effective_batch_size": config.batch_size}
    diff = {k: (prev.get(k), v) for k, v in want.items() if k in prev and prev[k] != v}
    if diff:
        raise CkptselError(
            f"{resume_dir}: cannot resume, it was written with different settings "
            + ", ".join(f"{k}={a!r} (now {b!r})" for k, (a, b) in diff.items())
            + "; move the run folder away or restore the study settings"
        )
    return prev


def _setup(
    base_model: str, config: Configuration, seed: int, total: int, resume_dir: Path | None, device: str, bf16: bool
) -> tuple[Any, Any, Any]:
    """Seed every RNG, then build the trainable model (from ``resume_dir``'s weights when
    resuming), its AdamW optimizer and the linear warm-up/decay schedule over ``total`` steps."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    _seed_all(seed)
    with warnings.catch_warnings():
        # peft 0.21 asks transformers 5 for a deprecated attribute; nothing for a user to do
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        model = build_trainable(base_model, config, seed, resume_dir, frozen_bf16=bf16)
    model.to(device)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, betas=(0.9, 0.999), eps=1e-8, weight_decay=config.weight_decay)
    warmup = math.ceil(config.warmup_ratio * total)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    return model, optimizer, scheduler


def _numpy_globals() -> list:
    """What a NumPy RNG state (``np.random.get_state()``: a name, a uint32 array, numbers)
    needs beyond tensors and plain containers; the same list the HF Trainer allows."""
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def load_training_state(path: Path, device: str = "cpu") -> Any:
    """One training-state file (``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``) read
    without running any code it carries: ``torch.load(weights_only=True)`` with only the NumPy
    array types of an RNG state allowed. A file that needs anything else (a planted pickle, a
    custom class) is refused in one line naming it; nothing in it is executed."""
    import pickle

    import torch

    try:
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        keep = [
            " ".join(p.split())
            for p in str(e).split("\n\n")
            if p.strip() and not p.startswith(("Weights only load failed", "Check the doc"))
        ]
        raise CkptselError(
            f"{path}: cannot resume, refusing a training state that is not plain tensors and "
            f"numbers ({' '.join(keep)[:200]}); delete this checkpoint folder to train it again"
        ) from None
    except (RuntimeError, EOFError, ValueError, OSError) as e:
        why = " ".join(str(e).split())[:200]
        raise CkptselError(
            f"{path}: cannot resume, training state unreadable ({type(e).__name__}: {why}); delete this checkpoint folder to train it again"
        ) from None


def _restore(resume_dir: Path, optimizer, scheduler, device: str) -> None:
    """Optimizer, scheduler and RNG states as the checkpoint saved them, read as data only
    (:func:`load_training_state`): a run folder may be shared or downloaded."""
    optimizer.load_state_dict(load_training_state(resume_dir / "optimizer.pt", device))
    scheduler.load_state_dict(load_training_state(resume_dir / "scheduler.pt"))
    _set_rng_state(load_training_state(resume_dir / "rng_state.pth"))


def _progress_bar(total: int, start: int, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc=name, unit="step", leave=False)


def _train_step(
    model, optimizer, scheduler, batch: Sequence[dict[str, list[int]]], micro_batch: int, pad_id: int, device: str, bf16: bool
) -> float:
    """One optimizer step on an effective batch, in micro-batches of ``micro_batch``: the
    response-masked cross-entropy summed over the batch's supervised tokens and divided by
    their number (so the accumulated gradient is that of one big batch). Returns the loss."""
    import torch

    n_tok = sum(sum(1 for x in e["labels"][1:] if x != IGNORE_INDEX) for e in batch)
    n_tok = max(n_tok, 1)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for m0 in range(0, len(batch), micro_batch):
        mb = collate(batch[m0 : m0 + micro_batch], pad_id)
        mb = {k: v.to(device) for k, v in mb.items()}
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=mb["input_ids"], attention_mask=mb["attention_mask"]).logits
        logits = logits[:, :-1].float()
        target = mb["labels"][:, 1:]
        loss = (
            torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
            )
            / n_tok
        )
        loss.backward()
        loss_sum += float(loss.detach())
    optimizer.step()
    scheduler.step()
    return loss_sum


def _trainer_state(
    step: int,
    total: int,
    n_examples: int,
    seed: int,
    name: str,
    config: Configuration,
    base_model: str,
    bf16: bool,
    log_history: list[dict[str, Any]],
) -> dict[str, Any]:
    """``trainer_state.json`` of the checkpoint at ``step`` (HF Trainer keys, plus what a
    resume checks: seed, configuration, effective batch size)."""
    return {
        "global_step": step,
        "max_steps": total,
        "save_steps": config.save_every,
        "train_batch_size": config.micro_batch,
        "gradient_accumulation_steps": config.grad_accum,
        "effective_batch_size": config.batch_size,
        "num_train_examples": n_examples,
        "epoch": step * config.batch_size / n_examples,
        "seed": seed,
        "trajectory": name,
        "configuration": config.name,
        "adaptation": config.adaptation,
        "learning_rate": config.learning_rate,
        "base_model": base_model,
        "bf16": bf16,
        "log_history": log_history,
    }
