"""The measurer: one model at a time on one backend, measuring the missing rows of a checkpoint.

* :class:`Measurer` — a run's models (one in memory at a time, :mod:`ckptsel.measure.backends.hf`),
  its tokenizer and, with ``backend="vllm"``, the vLLM engine; :meth:`Measurer.measure` returns
  the new part rows of one checkpoint. Executors (:mod:`ckptsel.measure.executors`) hold one
  each, in this process or in a Ray actor.
* :func:`measure_model` / :func:`measure_splits` — a model already in memory (the Trainer
  callback) on items of one or several splits: generation and NLL share one forward pass per
  batch (:mod:`ckptsel.measure.passes`); returns contract frames.
* :class:`MeasureResult` — what a run did (measured vs reused checkpoints, rows, time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ckptsel.data import format_prompt
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import ModelHolder, resolve_dtype, run_tokenizer
from ckptsel.measure.backends.vllm import VllmGenerator
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.frames import generation_frame, nll_frame
from ckptsel.measure.parts import ItemPool, StepParts
from ckptsel.measure.passes import measure_items
from ckptsel.records import SPLITS, empty_generations, empty_nll
from ckptsel.train import Checkpoint


def measure_model(
    model: Any,
    tokenizer: Any,
    items: Sequence[Any],
    config: MeasureConfig,
    *,
    split: str,
    trajectory: str,
    step: int,
    configuration: str | None = None,
    device: Any = None,
    generate: bool = True,
    nll: bool = True,
    on_batch: Callable[[int], None] | None = None,
    seconds: dict[str, float] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure a model already in memory (e.g. from a Trainer callback) on ``items``.

    Returns ``(generations, nll)`` as contract frames with ``trajectory``/``step`` filled
    (``configuration`` defaults to ``trajectory``); ``generations`` carries ``text``. NLL rows
    are given for ``config.window`` and for the complete response (``window=0``). ``device``
    is where inputs go (default: the model's own device). Generation and NLL share one forward
    pass per batch (:mod:`ckptsel.measure.passes`); ``seconds`` (if given) accumulates the time
    of its ``forward``, ``nll`` and ``decode`` steps. Write the frames with
    :func:`ckptsel.records.upsert_records`. The model is left in eval mode.
    """
    return measure_splits(
        model, tokenizer, {split: items}, config, trajectory=trajectory, step=step,
        configuration=configuration, device=device, generate=generate, nll=nll,
        on_batch=on_batch, seconds=seconds,
    )  # fmt: skip


def measure_splits(
    model: Any,
    tokenizer: Any,
    items: dict[str, Sequence[Any]],
    config: MeasureConfig,
    *,
    trajectory: str,
    step: int,
    configuration: str | None = None,
    device: Any = None,
    generate: bool = True,
    nll: bool = True,
    on_batch: Callable[[int], None] | None = None,
    seconds: dict[str, float] | None = None,
    token_cache: dict[tuple[str, str], list[int]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`measure_model` for the items of several splits (``{split: items}``) at once: one
    pass over all of them (fuller batches, less padding), frames per split, concatenated.
    ``token_cache``: see :func:`ckptsel.measure.passes.measure_items`."""
    for split in items:
        if split not in SPLITS:
            raise CkptselError(f"unknown split {split!r}: use validation or test")
    configuration = configuration or trajectory
    flat = [it for its in items.values() for it in its]
    texts, scored = measure_items(
        model,
        tokenizer,
        [format_prompt(it.instruction) for it in flat],
        [it.response for it in flat] if nll else None,
        generate=generate,
        windows=config.windows,
        batch_size=config.batch_size,
        max_new_tokens=config.max_new_tokens,
        device=device,
        on_batch=on_batch,
        seconds=seconds,
        token_cache=token_cache,
    )
    gens, nlls, start = [empty_generations()], [empty_nll()], 0
    for split, its in items.items():
        part = slice(start, start + len(its))
        start += len(its)
        if texts is not None:
            gens.append(generation_frame(
                its, texts[part], task=config.task_for(split), split=split,
                trajectory=trajectory, configuration=configuration, step=step,
            ))  # fmt: skip
        if scored is not None:
            nlls.append(
                nll_frame(its, scored[part], split=split, trajectory=trajectory, step=step)
            )
    return _concat(gens), _concat(nlls)


def _with_hashes(frames: list[pd.DataFrame], pool: ItemPool) -> list[pd.DataFrame]:
    """Each frame with its rows' ``item_hash`` (by split and item id)."""
    hashes = {
        (split, it.item_id): h
        for split, its in pool.splits.items()
        for it, h in zip(its, pool.hashes[split], strict=True)
    }
    return [
        f.assign(item_hash=pd.Series(
            [hashes[k] for k in zip(f["split"], f["item_id"], strict=True)], index=f.index,
            dtype="string",
        ))  # fmt: skip
        for f in frames
    ]


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The frames stacked (the first, empty one only keeps the contract dtypes)."""
    frames = [f for f in frames[1:] if len(f)] or frames[:1]
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


@dataclass
class MeasureResult:
    """What a run did: measured vs reused checkpoints, rows written, time taken."""

    trajectory: str
    configuration: str
    steps: list[int]
    measured_steps: list[int] = field(default_factory=list)
    reused_steps: list[int] = field(default_factory=list)
    generated_items: int = 0
    scored_items: int = 0
    generation_seconds: float = 0.0
    nll_seconds: float = 0.0
    seconds: float = 0.0
    model_loads: int = 0
    executor_stats: dict[str, Any] = field(default_factory=dict)  # ray: workers, overheads


class Measurer:
    """The run's models (one at a time), its tokenizer and, with ``backend="vllm"``, the vLLM
    engine; measures the missing rows of one checkpoint's parts."""

    def __init__(
        self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: MeasureResult
    ) -> None:
        self.config, self.ckpts, self.base, self.result = config, ckpts, base, result
        config.check_device()
        self.vllm = None
        if config.backend == "vllm":
            self.vllm = VllmGenerator.for_checkpoints(
                ckpts,
                max_new_tokens=config.max_new_tokens,
                max_loras=config.max_loras,
                max_lora_rank=config.max_lora_rank,
            )
        self.holder = ModelHolder(config.device, resolve_dtype(config.dtype, config.device))
        self.tokenizer: Any = None
        self.token_cache: dict[tuple[str, str], list[int]] = {}  # the run's one tokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one set of bars (the caller's), not one per load

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.result.model_loads = self.holder.loads
        self.holder.free()
        if self.vllm is not None:
            self.vllm.close()

    def measure(
        self,
        ckpt: Checkpoint,
        parts: StepParts,
        trajectory: str,
        configuration: str,
        tick: Callable[[int], None],
    ) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
        """New generation and NLL part rows (with ``item_hash``) for what ``parts`` lacks."""
        if self.tokenizer is None:
            self.tokenizer = run_tokenizer(self.ckpts, self.base)
        model = self.holder.get(ckpt)
        cfg, res, pool = self.config, self.result, parts.pool
        new_gen, new_nll = [], []
        # one pass for the items that need both, one for each kind alone (resumed parts); the
        # splits share each pass (fuller batches)
        groups: dict[tuple[bool, bool], dict[str, list[Any]]] = {}
        for split, its in pool.splits.items():
            gen_todo, nll_todo = set(parts.todo_gen[split]), set(parts.todo_nll[split])
            if self.vllm is not None and gen_todo:
                t0 = time.perf_counter()
                sel = [its[i] for i in sorted(gen_todo)]
                new_gen.append(self._generate_vllm(ckpt, sel, split, trajectory, configuration))
                res.generation_seconds += time.perf_counter() - t0
                res.generated_items += len(sel)
                tick(len(sel))
                gen_todo = set()
            for todo, flags in (
                (gen_todo & nll_todo, (True, True)),
                (gen_todo - nll_todo, (True, False)),
                (nll_todo - gen_todo, (False, True)),
            ):
                if todo:
                    groups.setdefault(flags, {})[split] = [its[i] for i in sorted(todo)]
        for (gen, nll), by_split in groups.items():
            seconds: dict[str, float] = {}
            g, n = measure_splits(
                model, self.tokenizer, by_split, cfg, trajectory=trajectory,
                configuration=configuration, step=ckpt.step, device=cfg.device,
                generate=gen, nll=nll, on_batch=lambda k, m=gen + nll: tick(k * m),
                seconds=seconds, token_cache=self.token_cache,
            )  # fmt: skip
            # the forward over prompt + response is the NLL's cost (the prompt prefill that
            # generation needs rides along); without NLL it is generation's prefill
            fwd = seconds.get("forward", 0.0)
            res.generation_seconds += seconds.get("decode", 0.0) + seconds.get("prefill", 0.0)
            res.generation_seconds += 0.0 if nll else fwd
            res.nll_seconds += seconds.get("nll", 0.0) + (fwd if nll else 0.0)
            n_items = sum(map(len, by_split.values()))
            if gen:
                res.generated_items += n_items
                new_gen.append(g)
            if nll:
                res.scored_items += n_items
                new_nll.append(n)
        return _with_hashes(new_gen, pool), _with_hashes(new_nll, pool)

    def _generate_vllm(
        self, ckpt: Checkpoint, items: list[Any], split: str, trajectory: str, configuration: str
    ) -> pd.DataFrame:
        prompts = [format_prompt(it.instruction) for it in items]
        texts = self.vllm.generate(ckpt, self.tokenizer, prompts)
        return generation_frame(
            items,
            texts,
            task=self.config.task_for(split),
            split=split,
            trajectory=trajectory,
            configuration=configuration,
            step=ckpt.step,
        )
