"""The measurer: one model at a time on one backend, measuring the missing rows of a checkpoint.

* :class:`Measurer` — a run's models (one in memory at a time, :mod:`ckptsel.measure.backends.hf`),
  its tokenizer and, when generation or NLL goes through vLLM, the vLLM engine
  (:mod:`ckptsel.measure.backends.vllm`); :meth:`Measurer.measure` returns the new part rows of
  one checkpoint, :meth:`Measurer.measure_many` those of a batch of adapters. Executors
  (:mod:`ckptsel.measure.executors`) hold one each, in this process or in a Ray actor.
* :func:`batch_units` — the one rule for which units are measured together (a batch).
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

from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import (
    ModelHolder,
    decoder_field,
    generation_config,
    hf_provenance,
    resolve_dtype,
    run_tokenizer,
    tokenizer_ref,
)
from ckptsel.measure.backends.vllm import VllmEngine
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.conformance import Conformance
from ckptsel.measure.frames import generation_frame, nll_frame
from ckptsel.measure.parts import ItemPool, StepParts
from ckptsel.measure.passes import measure_items
from ckptsel.measure.tokens import stop_token_ids
from ckptsel.records.provenance import canonical
from ckptsel.records.schema import SPLITS, empty_generations, empty_nll
from ckptsel.study.configuration import default_configuration
from ckptsel.train.checkpoints import Checkpoint


def measure_model(
    model: Any, tokenizer: Any, items: Sequence[Any], config: MeasureConfig, *, split: str, **options: Any
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure a model already in memory (e.g. from a Trainer callback) on the ``items`` of
    one ``split``: :func:`measure_splits` with ``{split: items}``, the same keywords.

    Returns ``(generations, nll)`` as contract frames with ``trajectory``/``step`` filled;
    write them with :func:`ckptsel.records.upsert_records`.
    """
    return measure_splits(model, tokenizer, {split: items}, config, **options)


def measure_splits(
    model: Any, tokenizer: Any, items: dict[str, Sequence[Any]], config: MeasureConfig, *, trajectory: str, **options: Any
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure a model already in memory on the items of several splits (``{split: items}``)
    in one pass over all of them (fuller batches, less padding); frames per split, concatenated.

    Returns ``(generations, nll)`` as contract frames with ``trajectory``/``step`` filled
    (``configuration`` defaults to ``trajectory`` less its seed:
    :func:`~ckptsel.study.default_configuration`); ``generations`` carries ``text``. NLL rows
    are given for ``config.measured.window`` and for the complete response (``window=0``). Generation
    and NLL share one forward pass per batch (:func:`ckptsel.measure.passes.measure_items`);
    prompts are wrapped in ``config``'s prompt format, resolved here for ``tokenizer`` unless
    it already is (:meth:`MeasureConfig.bind_format`: a tokenizer with a chat template and no
    stated format is refused);
    ``options`` are :func:`measure_resolved`'s: ``step``, ``configuration``, ``generate``,
    ``nll``, and that function's ``device`` (where inputs go; default: the model's own device),
    ``on_batch``, ``seconds`` (if given, accumulates the time of its ``forward``, ``nll`` and
    ``decode`` steps) and ``token_cache``. The model is left in eval mode.
    """
    config = config.bind_format(tokenizer, where=f"trajectory {trajectory!r}")
    return measure_resolved(model, tokenizer, items, config, trajectory=trajectory, **options)


def measure_resolved(
    model: Any,
    tokenizer: Any,
    items: dict[str, Sequence[Any]],
    config: MeasureConfig,
    *,
    trajectory: str,
    step: int,
    configuration: str | None = None,
    generate: bool = True,
    nll: bool = True,
    **passes: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`measure_splits` under ``config``'s prompt format as it is, already resolved for
    the run's tokenizer (:class:`Measurer`: once per run, by the driver)."""
    for split in items:
        if split not in SPLITS:
            raise CkptselError(f"unknown split {split!r}: use validation or test")
    configuration = configuration or default_configuration(trajectory)
    flat = [it for its in items.values() for it in its]
    # an item without a response (a task file with none) gets no NLL row: its empty response
    # (the EOS alone) shares the pass and its scores are dropped
    texts, scored = measure_items(
        model,
        tokenizer,
        [it.instruction for it in flat],
        [it.response or "" for it in flat] if nll else None,
        generate=generate,
        windows=config.measured.windows,
        batch_size=config.runtime.batch_size,
        max_new_tokens=config.measured.max_new_tokens,
        fmt=config.measured.prompt,
        items=flat,
        decoder=config.runtime.decoder,
        **passes,
    )
    if scored is not None:
        scored = [{} if it.response is None else s for it, s in zip(flat, scored, strict=True)]
    return split_frames(items, texts, scored, config, trajectory, configuration, step)


def split_frames(
    items: dict[str, Sequence[Any]],
    texts: Sequence[str] | None,
    scored: Sequence[Any] | None,
    config: MeasureConfig,
    trajectory: str,
    configuration: str,
    step: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Contract frames (generations with ``text``, NLL) of ``items`` (``{split: items}``) from
    their texts and scores in the same flat order (``None``: that kind was not measured)."""
    gens, nlls, start = [empty_generations], [empty_nll], 0  # made only when nothing else is
    for split, its in items.items():
        part = slice(start, start + len(its))
        start += len(its)
        if texts is not None:
            gens.append(
                generation_frame(
                    its,
                    texts[part],
                    task=config.measured.task_for(split),
                    split=split,
                    trajectory=trajectory,
                    configuration=configuration,
                    step=step,
                )
            )
        if scored is not None:
            nlls.append(nll_frame(its, scored[part], split=split, trajectory=trajectory, step=step))
    return _concat(gens), _concat(nlls)


def _with_hashes(frames: list[pd.DataFrame], pool: ItemPool) -> list[pd.DataFrame]:
    """Each frame with its rows' ``item_hash`` (by split and item id)."""
    hashes = {(split, it.item_id): h for split, its in pool.splits.items() for it, h in zip(its, pool.hashes[split], strict=True)}
    return [
        f.assign(item_hash=pd.Series([hashes[k] for k in zip(f["split"], f["item_id"], strict=True)], index=f.index, dtype="string"))
        for f in frames
    ]


def stamp(frame: pd.DataFrame, provenance: dict[str, Any]) -> pd.DataFrame:
    """``frame`` with a ``provenance`` column: what measured its rows (a canonical string,
    :func:`ckptsel.records.canonical`); part rows keep it, so a unit written from the part
    cache says what measured each of its items."""
    value = canonical(provenance)
    return frame.assign(provenance=pd.Series([value] * len(frame), index=frame.index, dtype="string"))


def _concat(frames: list[Any]) -> pd.DataFrame:
    """The frames stacked; the first is what makes an empty frame with the contract dtypes,
    called only when no other frame has rows."""
    frames = [f for f in frames[1:] if len(f)] or [frames[0]()]
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
    engine_seconds: float = 0.0  # vLLM engine starts (not in generation/NLL seconds)
    seconds: float = 0.0
    model_loads: int = 0
    conformance_checks: int = 0  # families checked here (not read from the verdict cache)
    conformance_seconds: float = 0.0  # their cost (not in generation/NLL seconds)
    executor_stats: dict[str, Any] = field(default_factory=dict)  # ray: workers, overheads
    engine_starts: int = 0  # fresh models/engines for full checkpoints and bases
    weight_swaps: int = 0  # full checkpoints swapped into the one running (and proven)
    average_swaps: int = 0  # of them, averages of checkpoints
    swap_seconds: float = 0.0
    start_seconds: float = 0.0  # what the fresh models/engines took to load or start
    vllm_calls: int = 0  # vLLM generate calls (a batch of adapters: one per kind)
    engines: str = ""  # in words: "vllm engine started once (31.2 s), 9 checkpoints swapped ..."
    prompt_format: str = ""  # the format measured with, in words (PromptFormat.describe)


def base_key(ckpt: Checkpoint) -> str:
    """The model a checkpoint needs loaded: the adapter's base, or the full checkpoint itself."""
    return str(ckpt.base) if ckpt.kind == "adapter" else f"full:{ckpt.path}"


def batch_units(units: Sequence[tuple[Checkpoint, Any]], size: int, workers: int = 1) -> list[list[Any]]:
    """``units`` (``(checkpoint, parts)``, parts with ``n_todo``) in order, grouped into
    batches, what is measured together: consecutive adapter checkpoints of one base with rows
    to measure, at most ``size`` of them (the engine's, :meth:`Measurer.batch_size`) and at most
    ``ceil(n / workers)``, ``n`` the units with rows to measure (so that ``workers`` actors all
    get work); every other unit alone. Returns ``[[unit, ...], ...]``, the units in order."""
    todo = sum(1 for _, parts in units if parts.n_todo)
    size = min(size, -(-todo // max(workers, 1)))
    joins = lambda u: size > 1 and u[1].n_todo > 0 and u[0].kind == "adapter"  # noqa: E731
    out: list[list[Any]] = []
    for unit in units:
        if out and joins(unit) and joins(out[-1][-1]) and len(out[-1]) < size and (base_key(unit[0]) == base_key(out[-1][-1][0])):
            out[-1].append(unit)
        else:
            out.append([unit])
    return out


def weights_note(ckpt: Checkpoint, log: Any) -> str:
    """How ``ckpt``'s weights got into the model or engine that measured it (the provenance's
    ``weights`` note): an adapter on its base, else what the model holder's or engine's
    :class:`~ckptsel.measure.backends.swap.SwapLog` says of the current full checkpoint
    (``loaded``, ``swapped in place, ...``, ``loaded afresh: <why>``)."""
    return "adapter on its base" if ckpt.kind == "adapter" else (log.last or "loaded")


def record_engines(result: MeasureResult, holder: ModelHolder, vllm: VllmEngine | None) -> None:
    """Engine starts, weight swaps and vLLM calls of a measurer's model holder and vLLM
    engine, added to ``result`` (counts, seconds and one line in words)."""
    logs = [("hf model", holder.log)] + ([("vllm engine", vllm.log)] if vllm is not None else [])
    logs = [(name, log) for name, log in logs if log.starts]
    result.engine_starts += sum(log.starts for _, log in logs)
    result.weight_swaps += sum(log.swaps for _, log in logs)
    result.average_swaps += sum(log.averages for _, log in logs)
    result.swap_seconds += sum(log.swap_seconds for _, log in logs)
    result.start_seconds += sum(log.start_seconds for _, log in logs)
    result.vllm_calls += vllm.calls if vllm is not None else 0
    words = "; ".join(log.words(name) for name, log in logs)
    result.engines = "; ".join(w for w in (result.engines, words) if w)


class Measurer:
    """The run's models (one at a time), its tokenizer and, when generation (``backend``) or
    NLL (``nll_backend``) goes through vLLM, the vLLM engine; measures the missing rows of one
    checkpoint's parts."""

    def __init__(self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: MeasureResult) -> None:
        self.config, self.ckpts, self.base, self.result = config, ckpts, base, result
        config.check_device()
        self.vllm: VllmEngine | None = None
        if config.measured.uses_vllm:
            self.vllm = VllmEngine(config, ckpts, base, tokenizer_ref(ckpts, base))
        spec = config.measured
        self.holder = ModelHolder(spec.device, resolve_dtype(spec.dtype, spec.device), config.runtime.swap_weights)
        self.tokenizer: Any = None
        self.token_cache: dict[tuple[str, str], list[int]] = {}  # the run's one tokenizer
        self.stops: dict[str, list[int]] = {}  # vLLM: stop ids per model
        self.conformance = Conformance(config)  # the fast path checked once per family
        self.check_items: list[Any] = []  # the items it is checked on (the current pool's)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # one set of bars (the caller's), not one per load

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.result.model_loads = self.holder.loads
        self.result.conformance_checks = self.conformance.checks
        self.result.conformance_seconds = self.conformance.seconds
        record_engines(self.result, self.holder, self.vllm)
        self.holder.free()
        if self.vllm is not None:
            self.vllm.close()

    def _begin(self, pool: ItemPool) -> None:
        """The run's tokenizer (loaded once) and the items the conformance check runs on."""
        if self.tokenizer is None:
            self.tokenizer = run_tokenizer(self.ckpts, self.base)
            # the run's format, resolved once by the driver: checked against this tokenizer
            self.config.measured.prompt.check_tokenizer(self.tokenizer, "the run")
        self.check_items = [it for its in pool.splits.values() for it in its]

    def batch_size(self, ckpts: Sequence[Checkpoint]) -> int:
        """How many of ``ckpts``' adapters go into one batch: as many as one vLLM batch takes
        (:meth:`VllmEngine.plan_loras`, which also sizes the engine before it starts); 1
        without vLLM."""
        return 1 if self.vllm is None else self.vllm.plan_loras(ckpts)

    def batches(self, units: Sequence[tuple[Checkpoint, StepParts]]) -> list[list[Any]]:
        """``units`` in order, grouped into what is measured together (:func:`batch_units`,
        batches of :meth:`batch_size`)."""
        return batch_units(units, self.batch_size([c for c, p in units if p.n_todo]))

    def measure_many(
        self, units: Sequence[tuple[Checkpoint, StepParts]], trajectory: str, configuration: str, ticks: Sequence[Callable[[int], None]]
    ) -> list[tuple[list[pd.DataFrame], list[pd.DataFrame]]]:
        """:meth:`measure` of several adapter checkpoints (of one base, sharing one item pool)
        at once: their vLLM requests go into one ``generate`` call per kind, each request with
        its checkpoint's ``LoRARequest``, and the rows are split back per checkpoint (the same
        rows as one checkpoint per call); what goes through the HF model is then measured per
        checkpoint. New rows per unit, in order; ``ticks``: each unit's progress."""
        if len(units) < 2 or self.vllm is None:
            return [self.measure(c, p, trajectory, configuration, t) for (c, p), t in zip(units, ticks, strict=True)]
        cfg = self.config
        self._begin(units[0][1].pool)
        take = lambda todo, pool, engine: {  # noqa: E731
            s: sorted(todo[s]) if engine == "vllm" else [] for s in pool.splits
        }
        work = [
            (c, p.pool, take(p.todo_gen, p.pool, cfg.measured.backend), take(p.todo_nll, p.pool, cfg.measured.nll_backend))
            for c, p in units
        ]
        rows = self._measure_vllm_many(work, (trajectory, configuration), ticks)
        return [self.measure(c, p, trajectory, configuration, t, vllm_rows=r) for (c, p), t, r in zip(units, ticks, rows, strict=True)]

    def measure(
        self,
        ckpt: Checkpoint,
        parts: StepParts,
        trajectory: str,
        configuration: str,
        tick: Callable[[int], None],
        vllm_rows: tuple[list[pd.DataFrame], list[pd.DataFrame]] | None = None,
    ) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
        """New generation and NLL part rows (with ``item_hash``) for what ``parts`` lacks.
        The first time a model family is measured, the fast path is checked on a few of the
        pool's items (:mod:`ckptsel.measure.conformance`): a family it is wrong for raises
        :class:`CkptselError` before any row is made. ``vllm_rows``: what vLLM measured of it
        already (:meth:`measure_many`)."""
        self._begin(parts.pool)
        cfg, pool = self.config, parts.pool
        todo_gen = {s: set(parts.todo_gen[s]) for s in pool.splits}
        todo_nll = {s: set(parts.todo_nll[s]) for s in pool.splits}
        new_gen, new_nll = [], []
        if self.vllm is not None:
            take = lambda todo, engine: {  # noqa: E731
                s: sorted(todo[s]) if engine == "vllm" else [] for s in pool.splits
            }
            if vllm_rows is None:
                spec = cfg.measured
                work = (ckpt, pool, take(todo_gen, spec.backend), take(todo_nll, spec.nll_backend))
                vllm_rows = self._measure_vllm_many([work], (trajectory, configuration), [tick])[0]
            new_gen, new_nll = list(vllm_rows[0]), list(vllm_rows[1])
            todo_gen = {s: set() for s in pool.splits} if cfg.measured.backend == "vllm" else todo_gen
            todo_nll = {s: set() for s in pool.splits} if cfg.measured.nll_backend == "vllm" else todo_nll
        # one pass for the items that need both, one for each kind alone (resumed parts); the
        # splits share each pass (fuller batches)
        groups: dict[tuple[bool, bool], dict[str, list[Any]]] = {}
        for split, its in pool.splits.items():
            gen_todo, nll_todo = todo_gen[split], todo_nll[split]
            for todo, flags in (
                (gen_todo & nll_todo, (True, True)),
                (gen_todo - nll_todo, (True, False)),
                (nll_todo - gen_todo, (False, True)),
            ):
                if todo:
                    groups.setdefault(flags, {})[split] = [its[i] for i in sorted(todo)]
        for (gen, nll), by_split in groups.items():
            g, n = self._measure_hf(ckpt, by_split, gen, nll, trajectory, configuration, tick)
            new_gen += [g] if gen else []
            new_nll += [n] if nll else []
        return _with_hashes(new_gen, pool), _with_hashes(new_nll, pool)

    def _measure_hf(
        self,
        ckpt: Checkpoint,
        by_split: dict[str, list[Any]],
        gen: bool,
        nll: bool,
        trajectory: str,
        configuration: str,
        tick: Callable[[int], None],
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """One shared pass of the HF model over ``by_split``'s items."""
        cfg, res = self.config, self.result
        seconds: dict[str, float] = {}
        model = self.holder.get(ckpt)
        verdict = self.conformance.hf(model, self.tokenizer, self.check_items, cfg.measured.device)
        g, n = measure_resolved(
            model,
            self.tokenizer,
            by_split,
            cfg,
            trajectory=trajectory,
            configuration=configuration,
            step=ckpt.step,
            device=cfg.measured.device,
            generate=gen,
            nll=nll,
            on_batch=lambda k, m=gen + nll: tick(k * m),
            seconds=seconds,
            token_cache=self.token_cache,
        )
        # the forward over prompt + response is the NLL's cost (the prompt prefill that
        # generation needs rides along); without NLL it is generation's prefill
        fwd = seconds.get("forward", 0.0)
        res.generation_seconds += seconds.get("decode", 0.0) + seconds.get("prefill", 0.0)
        res.generation_seconds += 0.0 if nll else fwd
        res.nll_seconds += seconds.get("nll", 0.0) + (fwd if nll else 0.0)
        n_items = sum(map(len, by_split.values()))
        res.generated_items += n_items if gen else 0
        res.scored_items += n_items if nll else 0
        made_by = {
            **hf_provenance(model, cfg.runtime.batch_size, cfg.measured.device),
            "conformance": verdict,
            "weights": weights_note(ckpt, self.holder.log),
            "prompt_format": cfg.measured.format_identity,
        }
        texts_by = {**made_by, **decoder_field(cfg.runtime.decoder)}
        return stamp(g, texts_by), stamp(n, made_by)

    def _measure_vllm_many(
        self,
        work: Sequence[tuple[Checkpoint, ItemPool, dict[str, list[int]], dict[str, list[int]]]],
        names: tuple[str, str],
        ticks: Sequence[Callable[[int], None]],
    ) -> list[tuple[list[pd.DataFrame], list[pd.DataFrame]]]:
        """Per ``(checkpoint, pool, gen, nll)`` of ``work``, the items of ``gen``
        (``{split: indices}``) generated and those of ``nll`` scored by the vLLM engine, every
        checkpoint's requests in one call per kind: NLL first (its prompts then sit in vLLM's
        prefix cache). Frames per checkpoint, in order."""
        cfg, res, tok, cache = self.config, self.result, self.tokenizer, self.token_cache
        out: list[tuple[list[pd.DataFrame], list[pd.DataFrame]]] = [([], []) for _ in work]
        made_by = []
        for ckpt, _, gen, nll in work:
            verdict = None
            if any(gen.values()) or any(nll.values()):
                # an HF model beside vLLM only when the run loads it anyway (module doc)
                verdict = self.conformance.vllm(
                    self.vllm,
                    ckpt,
                    tok,
                    self.check_items,
                    self._stops(ckpt),
                    (lambda c=ckpt: self.holder.get(c)) if cfg.measured.uses_hf else None,
                )
            made_by.append(verdict)
        for kind in ("nll", "gen"):
            per = []  # (index in work, {split: items}, the items in order)
            for k, (_, pool, gen, nll) in enumerate(work):
                todo = nll if kind == "nll" else gen
                items = {s: [pool.splits[s][i] for i in idx] for s, idx in todo.items() if idx}
                flat = [it for its in items.values() for it in its]
                per += [(k, items, flat)] if flat else []
            if not per:
                continue
            t0, started = time.perf_counter(), self.vllm.start_seconds
            flat = [it for _, _, f in per for it in f]
            owners = [work[k][0] for k, _, f in per for _ in f]
            ids, answers = cfg.measured.prompt.encode(
                tok, [it.instruction for it in flat], [it.response for it in flat] if kind == "nll" else None, flat, cache=cache
            )
            if kind == "nll":
                values = self.vllm.score(owners, ids, answers, cfg.measured.windows)
            else:
                values = self.vllm.generate(owners, tok, ids, self._stops(owners[0]), cfg.measured.max_new_tokens)
            spent = time.perf_counter() - t0 - (self.vllm.start_seconds - started)
            start = 0
            for k, items, f in per:
                part, start = values[start : start + len(f)], start + len(f)
                texts, scored = (None, part) if kind == "nll" else (part, None)
                frames = split_frames(items, texts, scored, cfg, *names, work[k][0].step)
                prov = {
                    **self.vllm.provenance(),
                    "conformance": made_by[k],
                    "weights": weights_note(work[k][0], self.vllm.log),
                    "prompt_format": cfg.measured.format_identity,
                }
                out[k][kind == "nll"].append(stamp(frames[kind == "nll"], prov))
                ticks[k](len(f))
            if kind == "nll":
                res.nll_seconds += spent
                res.scored_items += len(flat)
            else:
                res.generation_seconds += spent
                res.generated_items += len(flat)
            res.engine_seconds += self.vllm.start_seconds - started
        return out

    def _stops(self, ckpt: Checkpoint) -> list[int]:
        """The HF path's stop ids for ``ckpt``'s model, without loading it."""
        ref = str(ckpt.base) if ckpt.kind == "adapter" else str(ckpt.path)
        if ref not in self.stops:
            holder = type("Model", (), {"generation_config": generation_config(ref)})
            self.stops[ref] = stop_token_ids(holder, self.tokenizer)
        return self.stops[ref]
