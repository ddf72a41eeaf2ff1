"""Teacher-forced negative log-likelihood of the reference response (SPEC §3).

The sequence is ``prompt_ids + response_ids + [eos]`` (prompt tokenized with the
tokenizer's own special tokens, response without, then EOS), which is how the SFT labels are
built: only response tokens (and the EOS) are scored. One forward pass over the complete
sequence gives every window at once, because a causal LM's prediction at position ``j``
depends only on tokens ``< j``: truncating prompt+response to ``W`` tokens just drops the
response tokens at positions ``>= W``. ``window == 0`` means the complete response.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ckptsel.defaults import BATCH_SIZE
from ckptsel.records.schema import COMPLETE_WINDOW, MATCHED_WINDOW


@dataclass(frozen=True)
class Scored:
    """NLL of one response under one window: ``nll_sum`` over ``n_tokens`` scored tokens."""

    nll_sum: float
    n_tokens: int


def encode_pair(tokenizer: Any, prompt: str, response: str) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids + EOS): the exact tokens that are scored."""
    p = list(tokenizer(prompt)["input_ids"])
    r = list(tokenizer(response, add_special_tokens=False)["input_ids"])
    return p, r + [int(tokenizer.eos_token_id)]


def scored_positions(n_prompt: int, n_response: int, window: int) -> int:
    """How many response tokens remain scored once prompt+response is cut to ``window``."""
    if window == 0:
        return n_response
    return max(0, min(n_response, window - n_prompt))


def response_nll(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    responses: Sequence[str],
    *,
    windows: Sequence[int] = (MATCHED_WINDOW, COMPLETE_WINDOW),
    batch_size: int = BATCH_SIZE,
    device: Any = None,
    on_batch: Callable[[int], None] | None = None,
) -> list[dict[int, Scored]]:
    """Per item, ``{window: Scored}`` for each requested window (input order).

    Log-softmax runs in float32 (or the logits' dtype if wider); per-token NLLs are summed in
    float64 in token order, so a sum is reproducible to the last bit for a given batch.
    Batches are right-padded (causal attention makes right padding harmless).
    """
    import torch

    if len(prompts) != len(responses):
        raise ValueError("prompts and responses differ in length")
    device = device if device is not None else next(model.parameters()).device
    pairs = [encode_pair(tokenizer, p, r) for p, r in zip(prompts, responses, strict=True)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    order = sorted(range(len(pairs)), key=lambda i: (-(len(pairs[i][0]) + len(pairs[i][1])), i))
    out: list[dict[int, Scored]] = [{} for _ in pairs]
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            seqs = [pairs[i][0] + pairs[i][1] for i in idx]
            width = max(len(s) for s in seqs)
            ids = torch.full((len(idx), width), int(pad), dtype=torch.long)
            mask = torch.zeros((len(idx), width), dtype=torch.long)
            for row, s in enumerate(seqs):
                ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
                mask[row, : len(s)] = 1
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            for row, i in enumerate(idx):
                n_p, n_r = len(pairs[i][0]), len(pairs[i][1])
                if n_p == 0:
                    raise ValueError("empty prompt: nothing conditions the first response token")
                # logits at position j predict token j+1: response token k sits at n_p + k
                lg = logits[row, n_p - 1 : n_p + n_r - 1]
                if lg.dtype not in (torch.float32, torch.float64):
                    lg = lg.float()
                target = torch.tensor(pairs[i][1], dtype=torch.long, device=lg.device)
                tok_nll = -lg.log_softmax(-1).gather(-1, target[:, None])[:, 0]
                tok_nll = tok_nll.double().cpu()
                cums = torch.cumsum(tok_nll, 0)
                for w in windows:
                    k = scored_positions(n_p, n_r, w)
                    out[i][w] = Scored(float(cums[k - 1]) if k > 0 else 0.0, k)
            if on_batch is not None:
                on_batch(len(idx))
    return out
