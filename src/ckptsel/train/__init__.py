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

__all__: list[str] = []  # other stages import from the defining modules
