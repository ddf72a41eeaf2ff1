"""What greedy generation stops at and how prompts are tokenized (the decoding itself is one
step of :mod:`ckptsel.measure.passes`).

Why the care: checkpoint agreement compares answers across checkpoints, so a change of batch
size must not change an answer. Prompts are sorted by length (little padding), padded on the
LEFT, and position ids are derived from the attention mask so a padded row sees exactly the
positions it would see alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """EOS ids that end a generation: the tokenizer's EOS plus the model's generation EOS ids
    (instruction-tuned models often declare extra end-of-turn tokens there)."""
    ids: list[int] = []
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    gen_cfg = getattr(model, "generation_config", None)
    extra = getattr(gen_cfg, "eos_token_id", None) if gen_cfg is not None else None
    if isinstance(extra, int):
        extra = [extra]
    for i in extra or []:
        if int(i) not in ids:
            ids.append(int(i))
    return ids


def encode_prompts(tokenizer: Any, prompts: Sequence[str]) -> list[list[int]]:
    """Token ids of each prompt, with the tokenizer's own special tokens (e.g. BOS)."""
    return [list(ids) for ids in tokenizer(list(prompts))["input_ids"]] if prompts else []


def pad_id(tokenizer: Any) -> int:
    """The pad token (EOS when the tokenizer has none)."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id)
