"""Which tokens measurement feeds, scores and stops at (the forward and the decoding are
:mod:`ckptsel.measure.passes`).

* generation: prompts tokenized with the tokenizer's own special tokens (e.g. BOS); greedy
  decoding stops at any of :func:`stop_token_ids` (the tokenizer's EOS plus the model's
  generation EOS ids); the pad token is the tokenizer's, else EOS.
* teacher-forced NLL (SPEC §3): the sequence is ``prompt_ids + response_ids + [eos]``
  (response without special tokens, then EOS), which is how the SFT labels are built: only
  response tokens (and the EOS) are scored. A causal LM's prediction at position ``j``
  depends only on tokens ``< j``, so truncating prompt+response to ``W`` tokens just drops
  the response tokens at positions ``>= W`` (:func:`scored_positions`); ``window == 0`` means
  the complete response. Under a prompt format (:meth:`ckptsel.data.prompts.PromptFormat.encode`) the response ids
  are the format's: a template file's are the tokens after the prompt's in the prompt and
  response tokenized together (as a run trained on ``tokenizer(prompt + response)`` has
  them), a chat template's its continuation; the BOS is the one the run had
  (:attr:`ckptsel.data.PromptFormat.bos`).

Why the care: checkpoint agreement compares answers across checkpoints, so a change of batch
size must not change an answer, and NLLs of one item must score the same tokens at every
checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class ResponseNll:
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


def window_sums(cums: Sequence[float], n_prompt: int, windows: Sequence[int]) -> dict[int, ResponseNll]:
    """``{window: ResponseNll}`` from the cumulative NLL of the response tokens (float64, in
    token order): what every engine records, so that all of them score the same tokens."""
    n_response = len(cums)
    out = {}
    for w in windows:
        k = scored_positions(n_prompt, n_response, w)
        out[w] = ResponseNll(float(cums[k - 1]) if k > 0 else 0.0, k)
    return out


def cut_at_stop(tokens: Sequence[int], stops: Sequence[int]) -> list[int]:
    """The generated tokens before the first stop token (the text excludes it)."""
    stop = set(stops)
    return list(tokens[: next((k for k, t in enumerate(tokens) if t in stop), len(tokens))])
