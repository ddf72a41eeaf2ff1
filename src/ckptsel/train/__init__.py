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
    CHECKPOINT_PREFIX,
    CHECKPOINT_RE,
    LAYOUTS,
    STATE_FILE,
    Checkpoint,
    TrajectoryStatus,
    checkpoint_readiness,
    checkpoint_steps,
    discover_checkpoints,
    inspect_checkpoint,
    is_final_checkpoint,
    layout_pattern,
    trajectory_status,
    weight_files,
    weights_fingerprint,
)
from ckptsel.train.formats import read_run_format, write_run_format
from ckptsel.train.models import (
    build_trainable,
    check_device,
    check_lora_targets,
    load_tokenizer,
    pick_device,
    use_bf16,
)
from ckptsel.train.study import study_status, train_study, write_final_steps
from ckptsel.train.trajectory import (
    TrainResult,
    encode_example,
    encode_items,
    example_order,
    train_trajectory,
)

__all__ = [
    "CHECKPOINT_PREFIX",
    "CHECKPOINT_RE",
    "LAYOUTS",
    "STATE_FILE",
    "Checkpoint",
    "TrainResult",
    "TrajectoryStatus",
    "build_trainable",
    "check_device",
    "check_lora_targets",
    "checkpoint_readiness",
    "checkpoint_steps",
    "discover_checkpoints",
    "encode_example",
    "encode_items",
    "example_order",
    "inspect_checkpoint",
    "is_final_checkpoint",
    "layout_pattern",
    "load_tokenizer",
    "pick_device",
    "read_run_format",
    "study_status",
    "train_study",
    "train_trajectory",
    "trajectory_status",
    "use_bf16",
    "weight_files",
    "weights_fingerprint",
    "write_run_format",
    "write_final_steps",
]
