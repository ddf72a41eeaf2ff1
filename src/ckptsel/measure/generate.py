"""Greedy batched generation that gives the same text whatever the batch size.

Why the care: checkpoint agreement compares answers across checkpoints, so a change of
batch size must not change an answer. Prompts are sorted by length (little padding), padded
on the LEFT, and position ids are derived from the attention mask so a padded row sees
exactly the positions it would see alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS


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
    return [list(tokenizer(p)["input_ids"]) for p in prompts]


def _pad_id(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id)


def generate_texts(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    *,
    batch_size: int = BATCH_SIZE,
    max_new_tokens: int = MAX_NEW_TOKENS,
    device: Any = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[str]:
    """Greedy continuation of every prompt, in input order.

    Generation stops at any stop token (see :func:`stop_token_ids`) or after
    ``max_new_tokens``; the returned text excludes the prompt and the stop token.
    ``on_batch(n)`` is called after each batch with its size (progress bars).
    """
    import torch
    from transformers import GenerationConfig

    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    device = device if device is not None else next(model.parameters()).device
    encoded = encode_prompts(tokenizer, prompts)
    stops = stop_token_ids(model, tokenizer)
    pad = _pad_id(tokenizer)
    gen_cfg = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        eos_token_id=stops or None,
        pad_token_id=pad,
        bos_token_id=tokenizer.bos_token_id,
    )
    # longest first: the first batch shows memory problems at once, not at the end
    order = sorted(range(len(encoded)), key=lambda i: (-len(encoded[i]), i))
    out: list[str] = [""] * len(encoded)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            width = max(len(encoded[i]) for i in idx)
            ids = torch.full((len(idx), width), pad, dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, i in enumerate(idx):
                seq = encoded[i]
                ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
                mask[row, width - len(seq) :] = 1
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            ids, mask, pos = ids.to(device), mask.to(device), pos.to(device)
            result = model.generate(
                input_ids=ids, attention_mask=mask, position_ids=pos, generation_config=gen_cfg
            )
            new = result[:, width:].tolist()
            for row, i in enumerate(idx):
                toks = new[row]
                cut = next((k for k, t in enumerate(toks) if t in stops), len(toks))
                out[i] = tokenizer.decode(toks[:cut], skip_special_tokens=True)
            if on_batch is not None:
                on_batch(len(idx))
    return out
