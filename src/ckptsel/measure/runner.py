"""Measure every checkpoint of a run into records (SPEC §2–3): generation + NLL, both splits.

Design (why it looks like this):

* The base model is loaded once per run and LoRA adapters are swapped in place
  (``PeftModel.from_pretrained`` for the first, then ``load_adapter`` / ``set_adapter`` /
  ``delete_adapter``); full checkpoints are loaded one at a time and freed.
* Resumable and lossless: each checkpoint's rows go first to a *part* file
  ``RECORDS_DIR/.parts/<trajectory>/step-<step>.<fingerprint>.{gen,nll}.parquet`` (atomic),
  then are upserted into the contract files ``generations.parquet`` / ``nll.parquet``.
  The fingerprint hashes everything that changes a measurement (task, prompt template,
  decoding settings, window, backend); part rows also carry a hash of each item's content.
  A re-run reuses matching part rows and measures only what is missing, so a killed job
  restarted ends with exactly the records of an uninterrupted one.
* ``answer``/``correct`` are always re-derived from the stored generated ``text`` with the
  current :mod:`ckptsel.answers`, so a scorer fix never needs a re-generation.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ckptsel import io
from ckptsel.errors import CkptselError
from ckptsel.measure.checkpoints import Checkpoint, discover_checkpoints
from ckptsel.measure.store import (
    coerce_generations,
    coerce_nll,
    read_table,
    upsert_records,
)
from ckptsel.schema import COMPLETE_WINDOW, GENERATIONS_FILE, MATCHED_WINDOW, NLL_FILE

FORMAT_VERSION = 1  # bump when the meaning of a measurement changes
PARTS_DIR = ".parts"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=@,-]*$")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class MeasureSettings:
    """Everything that changes a measurement; its hashes name the part files."""

    task: str
    max_new_tokens: int = 512
    window: int = MATCHED_WINDOW
    backend: str = "hf"

    @property
    def windows(self) -> tuple[int, ...]:
        """The NLL windows recorded: the matched window and the complete response."""
        return tuple(dict.fromkeys((self.window, COMPLETE_WINDOW)))

    def _hash(self, payload: dict[str, Any]) -> str:
        from ckptsel.tasks import PROMPT_TEMPLATE

        payload = {"v": FORMAT_VERSION, "task": self.task, "template": PROMPT_TEMPLATE, **payload}
        blob = json.dumps(payload, sort_keys=True).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()[:16]

    def generation_fingerprint(self) -> str:
        """Hash of what determines a generated text (greedy decoding is implied)."""
        return self._hash(
            {"decoding": "greedy", "max_new_tokens": self.max_new_tokens, "backend": self.backend}
        )

    def nll_fingerprint(self) -> str:
        """Hash of what determines an NLL row (teacher forcing, response + EOS, windows)."""
        return self._hash({"nll": "response+eos", "windows": list(self.windows)})


def item_hash(item: Any) -> str:
    """Content hash of an item, so an edited items file is re-measured, not reused."""
    blob = json.dumps(
        [item.item_id, item.instruction, item.response, item.reference, item.group, item.subtask]
    ).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16]


def check_name(kind: str, name: str) -> str:
    """Trajectory/configuration names become folder names: keep them plain."""
    if not _NAME_RE.match(name):
        raise CkptselError(
            f"{kind} name {name!r} must start with a letter/digit and use only letters, digits and ._+=@,-"
        )
    return name


# --------------------------------------------------------------------------- in memory


def score_texts(
    task: str, items: Sequence[Any], texts: Sequence[str]
) -> tuple[list[str], list[bool]]:
    """Normalized answers and correctness of generated texts (``ckptsel.answers``)."""
    from ckptsel import answers

    # the item's subtask picks the label pattern in a mixed commonsense pool
    pairs = list(zip(texts, items, strict=True))
    ans = [answers.extract(task, t, subtask=it.subtask) for t, it in pairs]
    ok = [bool(answers.is_correct(task, t, it.reference, subtask=it.subtask)) for t, it in pairs]
    return ans, ok


def generation_frame(
    items: Sequence[Any],
    texts: Sequence[str],
    *,
    task: str,
    split: str,
    trajectory: str,
    configuration: str,
    step: int,
) -> pd.DataFrame:
    """Contract generation rows (+ ``text``) for ``items`` with their generated ``texts``."""
    ans, ok = score_texts(task, items, texts)
    df = pd.DataFrame(
        {
            "trajectory": trajectory,
            "configuration": configuration,
            "task": task,
            "step": int(step),
            "split": split,
            "item_id": [it.item_id for it in items],
            "group": [it.group for it in items],
            "subtask": [it.subtask for it in items],
            "answer": ans,
            "correct": ok,
            "text": list(texts),
        },
        index=range(len(items)),
    )
    return coerce_generations(df)


def nll_frame(
    items: Sequence[Any],
    scored: Sequence[dict[int, Any]],
    *,
    split: str,
    trajectory: str,
    step: int,
) -> pd.DataFrame:
    """Contract NLL rows: one per item and window."""
    rows = [
        {
            "trajectory": trajectory,
            "step": int(step),
            "split": split,
            "item_id": it.item_id,
            "nll_sum": s.nll_sum,
            "n_tokens": s.n_tokens,
            "window": w,
        }
        for it, per in zip(items, scored, strict=True)
        for w, s in per.items()
    ]
    if not rows:
        from ckptsel.measure.store import empty_nll

        return empty_nll()
    return coerce_nll(pd.DataFrame(rows))


def measure_model(
    model: Any,
    tokenizer: Any,
    items: Sequence[Any],
    *,
    task: str,
    split: str,
    trajectory: str,
    step: int,
    configuration: str | None = None,
    batch_size: int = 16,
    max_new_tokens: int = 512,
    window: int = MATCHED_WINDOW,
    device: Any = None,
    generate: bool = True,
    nll: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Measure a model already in memory (e.g. from a Trainer callback) on ``items``.

    Returns ``(generations, nll)`` as contract frames with ``trajectory``/``step`` filled
    (``configuration`` defaults to ``trajectory``); ``generations`` carries ``text``. NLL rows
    are given for ``window`` and for the complete response (``window=0``). Write them with
    :func:`ckptsel.measure.store.upsert_records`. The model is left in eval mode.
    """
    from ckptsel.measure.generate import generate_texts
    from ckptsel.measure.nll import response_nll
    from ckptsel.tasks import format_prompt

    if split not in ("validation", "test"):
        raise CkptselError(f"unknown split {split!r}: use validation or test")
    configuration = configuration or trajectory
    prompts = [format_prompt(it.instruction) for it in items]
    if generate:
        texts = generate_texts(
            model,
            tokenizer,
            prompts,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            device=device,
            on_batch=on_batch,
        )
        gen = generation_frame(
            items,
            texts,
            task=task,
            split=split,
            trajectory=trajectory,
            configuration=configuration,
            step=step,
        )
    else:
        from ckptsel.measure.store import empty_generations

        gen = empty_generations()
    if nll:
        windows = MeasureSettings(task, max_new_tokens, window).windows
        scored = response_nll(
            model,
            tokenizer,
            prompts,
            [it.response for it in items],
            windows=windows,
            batch_size=batch_size,
            device=device,
            on_batch=on_batch,
        )
        nl = nll_frame(items, scored, split=split, trajectory=trajectory, step=step)
    else:
        from ckptsel.measure.store import empty_nll

        nl = empty_nll()
    return gen, nl


# --------------------------------------------------------------------------- models


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto``: float32 on CPU (exact, batch-invariant); bfloat16 on GPUs that have it."""
    import torch

    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_available():
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise CkptselError(f"unknown --dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return table[dtype]


class ModelHolder:
    """Keeps at most one model in memory: the base (+ the current adapter) or one full
    checkpoint. Adapters are swapped in place instead of reloading the base."""

    def __init__(self, device: str, dtype: Any) -> None:
        self.device = device
        self.dtype = dtype
        self.model: Any = None
        self.base: str | None = None  # set while self.model is a PeftModel on that base
        self.adapter: str | None = None
        self.loads = 0  # base/full model loads, for tests and benchmarks

    def _load(self, ref: str | Path) -> Any:
        from transformers import AutoModelForCausalLM

        self.loads += 1
        try:
            model = AutoModelForCausalLM.from_pretrained(str(ref), dtype=self.dtype)
        except (OSError, ValueError) as err:
            raise CkptselError(f"{ref}: cannot load model ({err})") from err
        return model.to(self.device).eval()

    def free(self) -> None:
        """Drop the model and give its memory back."""
        self.model = self.base = self.adapter = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    def get(self, ckpt: Checkpoint) -> Any:
        """The model for ``ckpt``, ready for inference."""
        if ckpt.kind == "full":
            self.free()
            self.model = self._load(ckpt.path)
            return self.model
        from peft import PeftModel

        name = f"step{ckpt.step}"
        if self.model is None or self.base != ckpt.base:
            self.free()
            base = self._load(ckpt.base)
            self.model = PeftModel.from_pretrained(base, str(ckpt.path), adapter_name=name)
            self.model.to(self.device).eval()
            self.base, self.adapter = ckpt.base, name
            return self.model
        if name != self.adapter:
            old = self.adapter
            self.model.load_adapter(str(ckpt.path), adapter_name=name, torch_device=self.device)
            self.model.set_adapter(name, inference_mode=True)
            self.model.delete_adapter(old)
            self.adapter = name
            self.model.eval()
        return self.model


def load_tokenizer(ckpts: Sequence[Checkpoint], base: str | None) -> Any:
    """One tokenizer for the whole run: the first checkpoint that ships one, else the base."""
    from transformers import AutoTokenizer

    refs: list[str] = [str(c.path) for c in ckpts if (c.path / "tokenizer_config.json").exists()]
    refs += [c.base for c in ckpts if c.base] + ([base] if base else [])
    if not refs:
        raise CkptselError("no tokenizer found in the checkpoints; pass --base MODEL_DIR")
    try:
        tok = AutoTokenizer.from_pretrained(refs[0])
    except (OSError, ValueError) as err:
        raise CkptselError(f"{refs[0]}: cannot load tokenizer ({err})") from err
    if tok.eos_token_id is None:
        raise CkptselError(f"{refs[0]}: tokenizer has no EOS token (needed to end responses)")
    return tok


# --------------------------------------------------------------------------- run


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


def _part_path(records_dir: Path, trajectory: str, step: int, fp: str, kind: str) -> Path:
    return records_dir / PARTS_DIR / trajectory / f"step-{step}.{fp}.{kind}.parquet"


def _load_part(path: Path) -> pd.DataFrame | None:
    if not path.exists():
        return None
    try:
        return pd.read_parquet(path)
    except Exception:  # a damaged part is only a cache: measure again
        return None


def _missing(
    part: pd.DataFrame | None, split: str, items: Sequence[Any], hashes: list[str]
) -> list[int]:
    """Indices of ``items`` that the part does not hold with the same content hash."""
    if part is None or len(part) == 0:
        return list(range(len(items)))
    have = set(
        zip(
            part["split"].astype(str),
            part["item_id"].astype(str),
            part["item_hash"].astype(str),
            strict=True,
        )
    )
    return [i for i, it in enumerate(items) if (split, it.item_id, hashes[i]) not in have]


def _load_items(task: str, path: Path, split: str) -> list[Any]:
    from ckptsel.tasks import load_items

    path = Path(path)
    if not path.exists():
        raise CkptselError(f"{path}: {split} items file not found")
    items = list(load_items(task, path))
    if not items:
        raise CkptselError(f"{path}: no {split} items")
    seen: set[str] = set()
    for it in items:
        if it.item_id in seen:
            raise CkptselError(f"{path}: duplicate item_id {it.item_id!r}")
        seen.add(it.item_id)
    return items


def _check_trajectory_identity(
    table, out: Path, trajectory: str, configuration: str, task: str
) -> None:
    """A trajectory name already in ``out`` must keep its configuration and task (else the mix
    would only surface at ``analyze``)."""
    if table is None or table.num_rows == 0:
        return
    cols = [c for c in ("trajectory", "configuration", "task") if c in table.column_names]
    if len(cols) < 3:
        return
    df = table.select(cols).to_pandas().drop_duplicates()
    mine = df[df["trajectory"] == trajectory]
    for column, value in (("configuration", configuration), ("task", task)):
        other = sorted(set(mine[column].astype(str)) - {value})
        if other:
            raise CkptselError(
                f"{out / GENERATIONS_FILE}: trajectory {trajectory!r} is already recorded with "
                f"{column} {other[0]!r}, not {value!r}; pick another --trajectory name"
            )


def measure_run(
    run_dir: Path,
    *,
    task: str,
    validation: Path,
    test: Path,
    out: Path,
    base: str | None = None,
    trajectory: str | None = None,
    configuration: str | None = None,
    batch_size: int = 16,
    max_new_tokens: int = 512,
    window: int = MATCHED_WINDOW,
    device: str = "cpu",
    backend: str = "hf",
    dtype: str = "auto",
    progress: bool = True,
    after_checkpoint: Callable[[int], None] | None = None,
) -> MeasureResult:
    """Measure every checkpoint of ``run_dir`` on the validation and test items into ``out``.

    Everything (task, items, checkpoints, base models, records already in ``out``) is
    validated before the first write; bad input raises :class:`CkptselError`. Rows of other
    trajectories in ``out`` are kept. ``after_checkpoint(step)`` is called once a step's
    records are in the contract files (tests use it).
    """
    t_start = time.perf_counter()
    run_dir, out = Path(run_dir), Path(out)
    from ckptsel.tasks import task_family

    try:
        task_family(task)
    except KeyError as err:  # the tasks module raises CkptselError; be safe with KeyError
        raise CkptselError(f"unknown task {task!r}") from err
    trajectory = check_name("trajectory", trajectory or run_dir.resolve().name)
    configuration = check_name("configuration", configuration or trajectory)
    if batch_size < 1:
        raise CkptselError(f"--batch-size must be >= 1 (got {batch_size})")
    if max_new_tokens < 1:
        raise CkptselError(f"--max-new-tokens must be >= 1 (got {max_new_tokens})")
    if window < 0:
        raise CkptselError(f"--window must be >= 0 (0 = complete response; got {window})")
    if backend not in ("hf", "vllm"):
        raise CkptselError(f"unknown --backend {backend!r}: use hf or vllm")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise CkptselError(f"unknown --device {device!r}: use cpu or cuda")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise CkptselError("--device cuda asked for, but torch sees no CUDA device")
    splits = {
        "validation": _load_items(task, validation, "validation"),
        "test": _load_items(task, test, "test"),
    }
    ckpts = discover_checkpoints(run_dir, base)
    for name in (GENERATIONS_FILE, NLL_FILE):  # unreadable records: stop before measuring
        read_table(out / name)
    _check_trajectory_identity(
        read_table(out / GENERATIONS_FILE), out, trajectory, configuration, task
    )
    vllm_gen = None
    if backend == "vllm":
        from ckptsel.measure.vllm_backend import VllmGenerator

        vllm_gen = VllmGenerator.for_checkpoints(ckpts, max_new_tokens=max_new_tokens)

    settings = MeasureSettings(task, max_new_tokens, window, backend)
    gfp, nfp = settings.generation_fingerprint(), settings.nll_fingerprint()
    hashes = {s: [item_hash(it) for it in its] for s, its in splits.items()}
    result = MeasureResult(trajectory, configuration, [c.step for c in ckpts])
    holder = ModelHolder(device, resolve_dtype(dtype, device))
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one set of bars (ours), not one per weight load
    tokenizer = None

    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    n_units = sum(len(v) for v in splits.values()) * 2  # generate + score each item
    with Progress(*columns, disable=not progress, transient=False) as bar:
        overall = bar.add_task(f"{trajectory}", total=len(ckpts) * n_units, rate="")
        total_done = [0]  # items generated or scored in this invocation (overall items/s)
        for k, ckpt in enumerate(ckpts):
            gen_path = _part_path(out, trajectory, ckpt.step, gfp, "gen")
            nll_path = _part_path(out, trajectory, ckpt.step, nfp, "nll")
            gen_part, nll_part = _load_part(gen_path), _load_part(nll_path)
            todo_gen = {s: _missing(gen_part, s, its, hashes[s]) for s, its in splits.items()}
            todo_nll = {s: _missing(nll_part, s, its, hashes[s]) for s, its in splits.items()}
            n_todo = sum(map(len, todo_gen.values())) + sum(map(len, todo_nll.values()))
            step_task = bar.add_task(f"  step {ckpt.step}", total=max(n_todo, 1), rate="")
            t0 = time.perf_counter()
            done = [0]

            def tick(n: int, _task=step_task, _t0=t0, _done=done) -> None:
                _done[0] += n
                rate = f"{_done[0] / max(time.perf_counter() - _t0, 1e-9):.1f} items/s"
                bar.update(_task, advance=n, rate=rate)
                total_done[0] += n
                overall_rate = total_done[0] / max(time.perf_counter() - t_start, 1e-9)
                bar.update(overall, advance=n, rate=f"{overall_rate:.1f} items/s")

            if n_todo:
                if tokenizer is None:
                    tokenizer = load_tokenizer(ckpts, base)
                model = holder.get(ckpt)
                new_gen, new_nll = [], []
                for split, its in splits.items():
                    # what both passes (generation only, NLL only) share
                    common = dict(
                        task=task, split=split, trajectory=trajectory,
                        configuration=configuration, step=ckpt.step, batch_size=batch_size,
                        max_new_tokens=max_new_tokens, window=window, device=device,
                        on_batch=tick,
                    )  # fmt: skip
                    sel = [its[i] for i in todo_gen[split]]
                    if sel:
                        tg = time.perf_counter()
                        if vllm_gen is not None:
                            from ckptsel.tasks import format_prompt

                            texts = vllm_gen.generate(
                                ckpt, tokenizer, [format_prompt(it.instruction) for it in sel]
                            )
                            tick(len(sel))
                            g = generation_frame(
                                sel,
                                texts,
                                task=task,
                                split=split,
                                trajectory=trajectory,
                                configuration=configuration,
                                step=ckpt.step,
                            )
                        else:
                            g, _ = measure_model(model, tokenizer, sel, nll=False, **common)
                        result.generation_seconds += time.perf_counter() - tg
                        result.generated_items += len(sel)
                        new_gen.append(
                            g.assign(item_hash=[hashes[split][i] for i in todo_gen[split]])
                        )
                    sel = [its[i] for i in todo_nll[split]]
                    if sel:
                        tn = time.perf_counter()
                        _, n = measure_model(model, tokenizer, sel, generate=False, **common)
                        result.nll_seconds += time.perf_counter() - tn
                        result.scored_items += len(sel)
                        ih = dict(zip((it.item_id for it in its), hashes[split], strict=True))
                        new_nll.append(n.assign(item_hash=n["item_id"].map(ih).astype("string")))
                gen_part = _merge_part(gen_part, new_gen, splits, hashes, ("split", "item_id"))
                nll_part = _merge_part(
                    nll_part, new_nll, splits, hashes, ("split", "item_id", "window")
                )
                if new_gen:
                    io.write_parquet(gen_path, gen_part)
                if new_nll:
                    io.write_parquet(nll_path, nll_part)
                result.measured_steps.append(ckpt.step)
            else:
                result.reused_steps.append(ckpt.step)
            bar.update(overall, completed=(k + 1) * n_units)
            bar.update(step_task, completed=max(n_todo, 1))
            bar.remove_task(step_task)
            upsert_records(
                out,
                generations=_contract_generations(
                    gen_part, splits, hashes, task, trajectory, configuration
                ),
                nll=_contract_nll(nll_part, splits, hashes, trajectory),
            )
            if after_checkpoint is not None:
                after_checkpoint(ckpt.step)
    result.model_loads = holder.loads
    holder.free()
    if vllm_gen is not None:
        vllm_gen.close()
    result.seconds = time.perf_counter() - t_start
    return result


def _current(
    part: pd.DataFrame, splits: dict[str, list[Any]], hashes: dict[str, list[str]]
) -> pd.DataFrame:
    """Rows of ``part`` whose (split, item_id, item_hash) belong to the current items."""
    keep = {
        (s, it.item_id, h)
        for s, its in splits.items()
        for it, h in zip(its, hashes[s], strict=True)
    }
    mask = [
        (s, i, h) in keep
        for s, i, h in zip(
            part["split"].astype(str),
            part["item_id"].astype(str),
            part["item_hash"].astype(str),
            strict=True,
        )
    ]
    return part[mask]


def _merge_part(
    old: pd.DataFrame | None,
    new: list[pd.DataFrame],
    splits: dict[str, list[Any]],
    hashes: dict[str, list[str]],
    key: tuple[str, ...],
) -> pd.DataFrame | None:
    """Old part rows for current items, replaced by new rows with the same key."""
    frames = ([_current(old, splits, hashes)] if old is not None and len(old) else []) + new
    if not frames:
        return old
    merged = pd.concat(frames, ignore_index=True)
    merged = merged.drop_duplicates(list(key), keep="last")
    return merged.sort_values(list(key), kind="mergesort").reset_index(drop=True)


def _contract_generations(
    part: pd.DataFrame | None,
    splits: dict[str, list[Any]],
    hashes: dict[str, list[str]],
    task: str,
    trajectory: str,
    configuration: str,
) -> pd.DataFrame | None:
    """Contract rows for the current items, answers re-derived from the stored text."""
    if part is None:
        return None
    cur = _current(part, splits, hashes)
    frames = []
    for split, its in splits.items():
        rows = cur[cur["split"] == split]
        by_id = {it.item_id: it for it in its}
        sel = [by_id[i] for i in rows["item_id"].astype(str)]
        frames.append(
            generation_frame(
                sel,
                rows["text"].astype(str).tolist(),
                task=task,
                split=split,
                trajectory=trajectory,
                configuration=configuration,
                step=int(rows["step"].iloc[0]) if len(rows) else 0,
            )
        )
    return pd.concat(frames, ignore_index=True)


def _contract_nll(
    part: pd.DataFrame | None,
    splits: dict[str, list[Any]],
    hashes: dict[str, list[str]],
    trajectory: str,
) -> pd.DataFrame | None:
    if part is None:
        return None
    cur = _current(part, splits, hashes).assign(trajectory=trajectory)
    return coerce_nll(cur)
