"""Training: SFT trajectories with a checkpoint grid (SPEC §11), and the checkpoint folders
every later stage reads.

* :mod:`~ckptsel.train.checkpoints` — the one ``checkpoint-<step>/`` parser (Hugging Face
  Trainer layout): which folders are checkpoints, which are complete, what each holds
  (adapter or full model), whether a trajectory reached its final step;
* :mod:`~ckptsel.train.formats` — the prompt format a run folder was trained with;
* :mod:`~ckptsel.train.models` — device, tokenizer and the trainable model (LoRA or full);
* :mod:`~ckptsel.train.trajectory` — the resumable training loop of one trajectory;
* :mod:`~ckptsel.train.study` — a study's trajectories: train them all, check them.

torch/transformers/peft are imported inside functions only.
"""

from __future__ import annotations

from ckptsel.train.checkpoints import (
    CHECKPOINT_RE,
    STATE_FILE,
    Checkpoint,
    checkpoint_readiness,
    checkpoint_steps,
    discover_checkpoints,
    files_fingerprint,
    function_digests,
    inspect_checkpoint,
    is_final_checkpoint,
    layout_pattern,
    weights_fingerprint,
)
from ckptsel.train.formats import read_run_format, write_run_format
from ckptsel.train.models import check_lora_targets, load_tokenizer, pick_device
from ckptsel.train.study import study_status, train_study

__all__ = [
    "CHECKPOINT_RE",
    "STATE_FILE",
    "Checkpoint",
    "check_lora_targets",
    "checkpoint_readiness",
    "checkpoint_steps",
    "discover_checkpoints",
    "files_fingerprint",
    "function_digests",
    "inspect_checkpoint",
    "is_final_checkpoint",
    "layout_pattern",
    "load_tokenizer",
    "pick_device",
    "read_run_format",
    "study_status",
    "train_study",
    "weights_fingerprint",
    "write_run_format",
]
