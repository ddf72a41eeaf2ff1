"""Teacher-forced negative log-likelihood of the reference response (SPEC §3): which tokens
are scored (the scoring itself is one step of :mod:`ckptsel.measure.passes`).

The sequence is ``prompt_ids + response_ids + [eos]`` (prompt tokenized with the
tokenizer's own special tokens, response without, then EOS), which is how the SFT labels are
built: only response tokens (and the EOS) are scored. One pass over the complete response
gives every window at once, because a causal LM's prediction at position ``j`` depends only
on tokens ``< j``: truncating prompt+response to ``W`` tokens just drops the response tokens
at positions ``>= W``. ``window == 0`` means the complete response.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Scored:
    """NLL of one response under one window: ``nll_sum`` over ``n_tokens`` scored tokens."""

    nll_sum: float
    n_tokens: int


def encode_responses(tokenizer: Any, responses: Sequence[str]) -> list[list[int]]:
    """Each response's ids (no special tokens) + EOS: the tokens that are scored."""
    if not responses:
        return []
    eos = int(tokenizer.eos_token_id)
    ids = tokenizer(list(responses), add_special_tokens=False)["input_ids"]
    return [[*r, eos] for r in ids]


def scored_positions(n_prompt: int, n_response: int, window: int) -> int:
    """How many response tokens remain scored once prompt+response is cut to ``window``."""
    if window == 0:
        return n_response
    return max(0, min(n_response, window - n_prompt))
