"""Greedy texts through transformers' own continuous batching: the manager behind
``generate_batch`` (a paged KV cache, requests joining and leaving at every step, CUDA graphs
and flash attention on a GPU where transformers has them). It is ckptsel's second HF decoder
(``--decoder transformers``), beside its own loop (:mod:`ckptsel.measure.passes`, the
default); the NLL is scored by that module's forward either way, so only the texts come from
here, and the conformance check compares them with unbatched ``generate`` as it does ckptsel's.

It serves the models transformers' paged cache holds exactly: every cached layer full or
sliding-window attention, RoPE that does not depend on the call's length. Any other model is
refused in one line before anything runs: state-space and hybrid layers
(transformers raises on them), and length-dependent RoPE (longrope, dynamic NTK), where the
frequencies follow the batch that transformers schedules and the texts differ from a single
``generate``. A request that fails, goes missing or stops unfinished is an error, not a text.

Shapes: ``prompts`` is ``N`` token lists; the texts come back as ``N`` token lists, in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ckptsel.errors import CkptselError

PAGE_SIZE = 16  # tokens per page of the paged cache on the CPU (transformers sizes it on a GPU)
RESULT_WAIT = 1.0  # seconds one wait for a finished request lasts before the manager is checked


def paged_refusal(model: Any, layout_kind: str, rope: Any) -> str | None:
    """Why ``--decoder transformers`` cannot decode ``model`` (``layout_kind``: its
    :class:`~ckptsel.measure.passes.CacheLayout` kind; ``rope``: its
    :func:`~ckptsel.measure.passes.length_rope`), or None when it can."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    family = type(inner).__name__
    try:
        from transformers.generation.configuration_utils import ContinuousBatchingConfig  # noqa: F401
    except ImportError:
        ContinuousBatchingConfig = None  # noqa: N806
    if ContinuousBatchingConfig is None or not hasattr(inner, "continuous_batching_context_manager"):
        import transformers

        return f"this transformers ({transformers.__version__}) has no continuous batching manager with its config (generate_batch)"
    if layout_kind not in ("full", "sliding"):
        return f"{family} caches layers other than full or sliding-window attention, which transformers' paged cache does not hold"
    if rope is not None:
        return f"{family} has length-dependent RoPE ({rope[0]}), whose frequencies would follow transformers' batches"
    return None


def paged_texts(
    model: Any,
    prompts: Sequence[list[int]],
    stops: Sequence[int],
    pad: int,
    max_new_tokens: int,
    rows: int | None,
    on_done: Callable[[int], None] | None = None,
) -> list[list[int]]:
    """The greedy new tokens of each of ``prompts`` (``N`` token lists, in order), at most
    ``max_new_tokens``, ending at the first of ``stops`` when one comes; ``rows``: requests
    decoded together (None: transformers sizes it from free GPU memory); ``on_done(1)`` after
    each finished request."""
    from transformers import GenerationConfig

    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, eos_token_id=list(stops), pad_token_id=pad)
    options: dict[str, Any] = {"continuous_batching_config": _paged_config(inner, prompts, max_new_tokens, rows)}
    hints = _workload_hints(prompts, max_new_tokens)
    if hints is not None:
        options["workload_hints"] = hints
    out: dict[str, Any] = {}
    with inner.continuous_batching_context_manager(generation_config=cfg, block=True, timeout=5, **options) as manager:
        ids = manager.add_requests(inputs=[list(p) for p in prompts], max_new_tokens=max_new_tokens)
        while len(out) < len(ids):
            res = manager.get_result(timeout=RESULT_WAIT)
            if res is None:
                if not manager.is_running():
                    break
                continue
            if res.is_finished():
                out[res.request_id] = res
                if on_done is not None:
                    on_done(1)
    return [_checked_tokens(out.get(rid), k, max_new_tokens, stops) for k, rid in enumerate(ids)]


def _paged_config(model: Any, prompts: Sequence[list[int]], max_new_tokens: int, rows: int | None) -> Any:
    """The paged cache's sizes: on a GPU transformers' own (from free memory), ``rows``
    requests at most when given; on the CPU a cache just large enough for ``rows`` requests
    of the longest prompt plus ``max_new_tokens`` (transformers' own sizing there takes long
    and sizes for memory a CPU run does not use)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    if next(model.parameters()).device.type == "cuda":
        return ContinuousBatchingConfig(max_requests_per_batch=rows) if rows else ContinuousBatchingConfig()
    rows = rows or len(prompts)
    longest = max(map(len, prompts)) + max_new_tokens
    per_request = math.ceil(longest / PAGE_SIZE) + 1
    return ContinuousBatchingConfig(
        page_size=PAGE_SIZE, num_blocks=per_request * rows + 1, max_batch_tokens=max(256, longest), max_requests_per_batch=rows
    )


def _workload_hints(prompts: Sequence[list[int]], max_new_tokens: int) -> Any:
    """transformers' workload hints (what ``generate_batch`` passes), where it has them."""
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints
    except ImportError:
        return None
    return WorkloadHints(max_prompt_length=max(map(len, prompts)), max_generated_length=max_new_tokens, num_requests=len(prompts))


def _checked_tokens(res: Any, k: int, max_new_tokens: int, stops: Sequence[int]) -> list[int]:
    """Request ``k``'s new tokens, refused in one line when transformers lost it, failed it,
    or returned more than asked for."""
    where = f"--decoder transformers: item {k} of the batch"
    if res is None:
        raise CkptselError(f"{where}: no result (transformers' continuous batching stopped early); use --decoder ckptsel")
    if res.error is not None:
        raise CkptselError(f"{where}: transformers failed it ({str(res.error)[:200]}); use --decoder ckptsel")
    toks = [int(t) for t in res.generated_tokens]
    if len(toks) > max_new_tokens or any(t in stops for t in toks[:-1]):
        raise CkptselError(f"{where}: {len(toks)} new tokens for at most {max_new_tokens}, ending at the first stop; use --decoder ckptsel")
    return toks
