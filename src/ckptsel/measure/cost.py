"""What measuring will cost, before it runs (``ckptsel run --dry-run``, ``ckptsel measure
--dry-run``): :func:`count_cost` counts the tokens of what is left to do, no weights loaded, and
:func:`estimate_time` turns them into seconds from a measured rate, never a guessed one.

* Token counts: the prompt tokens fed (each item to generate or score, once per checkpoint,
  with the study's tokenizer and prompt format; one batch call of the tokenizer per split),
  the generation tokens (at most: items × ``max_new_tokens``; greedy decoding stops earlier at
  EOS) and the NLL's teacher-forced target tokens (the scored response tokens and their end).
  Only what the part cache lacks counts (:class:`~ckptsel.measure.parts.CheckpointTodo`). When
  the tokenizer is not on this machine, a stated estimate of 4 characters per token.
* A rate: by a probe when asked (:func:`probe_rate`: the base model loaded once here, a handful
  of items generated and scored with the run's settings), else the measured row of
  :data:`BENCH_ROWS` (BENCHMARKS.md) for the device named and the model's size; else no
  estimate, and the line says how to get one. Every estimate names where its rate came from.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.extras import missing_ml
from ckptsel.data.prompts import ALPACA, CHAT, PromptFormat, format_prompt
from ckptsel.errors import CkptselError
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.parts import CheckpointTodo, ItemPool

CHARS_PER_TOKEN = 4  # the fallback count when the tokenizer is not on this machine
PROBE_ITEMS = 32  # at most, and one batch at most: a few seconds on a tiny model
PROBE_SECONDS = 1.0  # the probe's batch is timed again until this much time is measured (5 runs at most)
SIZE_FACTOR = 4.0  # a row's rate is used for models within this factor of its shape's size


@dataclass(frozen=True)
class BenchRow:
    """A measured throughput of BENCHMARKS.md: ``items_per_s`` checkpoint × item measurements
    (greedy generation of ``new_tokens`` and the item's NLL) per second on ``device`` (the name
    ``--device`` takes in a dry run) for a model of ``params`` parameters (``shape``)."""

    device: str
    shape: str
    params: float
    items_per_s: float
    new_tokens: int
    source: str
    gpu: bool = True


# the rows of BENCHMARKS.md that measured items per second of generation + NLL; add one here
# when a device is measured (its section's name in ``source``)
BENCH_ROWS: tuple[BenchRow, ...] = (
    BenchRow(
        "h200",
        "Qwen3-1.7B",
        1.7e9,
        8.5,
        64,
        "BENCHMARKS.md gpu_check: NVIDIA H200, Qwen3-1.7B shape, HF backend, bf16, batch 32, 64 new tokens: 8.5 items/s",
    ),
    BenchRow(
        "h200",
        "Llama-3-8B",
        8.03e9,
        7.7,
        64,
        "BENCHMARKS.md gpu_check: NVIDIA H200, Llama-3-8B shape, HF backend, bf16, batch 32, 64 new tokens: 7.7 items/s",
    ),
    BenchRow(
        "cpu",
        "tiny Llama (hidden 64, 2 layers)",
        1.08e5,
        1 / (1 / 446.9 + 1 / 784.7),  # generation 446.9 items/s, then NLL 784.7 items/s
        16,
        "BENCHMARKS.md bench_measure: x86_64 CPU, 1 torch thread, tiny Llama (hidden 64, 2 layers), fp32, batch 32, "
        "16 new tokens: generation 446.9 items/s + NLL 784.7 items/s",
        gpu=False,
    ),
    BenchRow(
        "cpu",
        "small Llama (hidden 512, 6 layers)",
        2.31e7,
        0.78,
        64,
        "BENCHMARKS.md decode_throughput_cpu: x86_64 CPU, 1 torch thread, small Llama (hidden 512, 6 layers), fp32, "
        "batch 16, 64 new tokens (rows stop at about half), generation + NLL: 0.78 items/s",
        gpu=False,
    ),
)


def bench_devices() -> set[str]:
    """The device names with measured rows."""
    return {r.device for r in BENCH_ROWS}


def check_probe(probe: bool, dry_run: bool, device: str | None) -> None:
    """``--probe`` goes with ``--dry-run`` and measures this machine's device, not a named one;
    a benchmarked GPU's name (``--device h200``) is a dry run's rate, never a device to run on."""
    if named_gpu(device) and not dry_run:
        raise CkptselError(f"--device {device} names a benchmarked GPU's measured rate, for --dry-run only; to run on a GPU: --device cuda")
    if probe and not dry_run:
        raise CkptselError("--probe times the work of a --dry-run: use them together")
    if probe and named_gpu(device):
        raise CkptselError(
            f"--probe measures this machine's device, not a named one: use --device cpu or cuda with it, or drop --probe for {device}'s measured rate"
        )


def named_gpu(device: str | None) -> bool:
    """Whether ``device`` names a benchmarked GPU (``h200``): a dry run's rate, measured as cuda."""
    return bool(device) and any(r.gpu and r.device == str(device).lower() for r in BENCH_ROWS)


@dataclass(frozen=True)
class Rate:
    """Generated-token slots per second (``max_new_tokens`` per item, its NLL pass included)
    and where that rate was measured."""

    tokens_per_s: float
    source: str


@dataclass(frozen=True)
class Cost:
    """What is left to measure, in items and tokens, and the time it will take (``seconds``:
    ``None`` when no measured rate applies; ``note`` says why and how to get one)."""

    generations: int
    nll_items: int
    prompt_tokens: int
    generation_tokens: int  # at most: generations × max_new_tokens
    nll_tokens: int
    max_new_tokens: int
    counted: str  # how the tokens were counted
    seconds: float | None = None
    rate: Rate | None = None
    note: str = ""

    @property
    def work_tokens(self) -> int:
        """Generated-token slots of the work: the items generated or scored × max new tokens
        (the generation tokens at most whenever generations are left)."""
        return max(self.generations, self.nll_items) * self.max_new_tokens

    def with_rate(self, rate: Rate | None, note: str = "") -> Cost:
        seconds = None if rate is None else self.work_tokens / rate.tokens_per_s
        return replace(self, rate=rate, seconds=seconds, note=note)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rate"] = None if self.rate is None else asdict(self.rate)
        out["seconds"] = None if self.seconds is None else round(self.seconds, 1)
        out["note"] = self.note or None
        return out

    def lines(self) -> list[str]:
        """The cost lines of the dry-run table."""
        out = [
            f"cost: {self.generations:,} generations and {self.nll_items:,} NLL items to do; {self.prompt_tokens:,} prompt tokens, "
            f"at most {self.generation_tokens:,} generation tokens ({self.max_new_tokens} new at most each), "
            f"{self.nll_tokens:,} NLL target tokens",
            f"  tokens counted with {self.counted}",
        ]
        if self.seconds is None or self.rate is None:
            return [*out, f"  time: no estimate ({self.note})"]
        return [
            *out,
            f"  time: about {duration(self.seconds)} if every generation runs to {self.max_new_tokens} new tokens (less where they stop "
            f"at EOS), at {self.rate.tokens_per_s:,.1f} token slots/s (rate: {self.rate.source})",
        ]


def size_text(params: float) -> str:
    """``1.7B``, ``23.1M``, ``108K``."""
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if params >= scale:
            return f"{params / scale:.3g}{unit}"
    return f"{params:.0f}"


def duration(seconds: float) -> str:
    """``0.4 s``, ``42 s``, ``13.2 min``, ``5.1 h``, ``3.4 days``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def local_tokenizer(ref: str | Path) -> Any:
    """The tokenizer at ``ref`` when it is on this machine (a folder, or a hub name in the local
    cache; nothing is downloaded), else ``None``."""
    try:
        from transformers import AutoTokenizer
    except ImportError:  # the analysis-only install
        return None
    try:
        tok = AutoTokenizer.from_pretrained(str(ref), local_files_only=True)
    except (OSError, ValueError):
        return None
    if tok.eos_token_id is None:
        return None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def bound_format(config: MeasureConfig, tokenizer: Any) -> PromptFormat | None:
    """The prompt format measured with, bound to ``tokenizer`` (``None`` when it cannot be
    bound here: the count falls back to alpaca's text)."""
    try:
        return config.bind_format(tokenizer, where="the dry run").measured.prompt
    except CkptselError:
        return None


def item_lengths(pool: ItemPool, fmt: PromptFormat | None, tokenizer: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per split, each item's prompt tokens and scored response tokens (the response and its
    end), with ``tokenizer`` (one batch call per split), or characters / 4 without one."""
    out = {}
    for split, items in pool.splits.items():
        instructions = [it.instruction for it in items]
        responses = [it.response or "" for it in items]
        if tokenizer is not None and fmt is not None:
            prompts, answers = fmt.encode(tokenizer, instructions, responses, items)
            out[split] = (np.fromiter(map(len, prompts), int, len(items)), np.fromiter(map(len, answers or []), int, len(items)))
            continue
        texts = _texts(fmt, instructions, items)
        prompt = np.ceil(np.char.str_len(np.array(texts, dtype=str)) / CHARS_PER_TOKEN).astype(int)
        answer = np.ceil(np.char.str_len(np.array(responses, dtype=str)) / CHARS_PER_TOKEN).astype(int) + 1
        out[split] = (prompt, answer)
    return out


def _texts(fmt: PromptFormat | None, instructions: list[str], items: Sequence[Any]) -> list[str]:
    """The prompts' texts without a tokenizer: alpaca's, a template file's, else the
    instructions alone (a chat template is the tokenizer's)."""
    if fmt is None or fmt.kind == ALPACA:
        return [format_prompt(i) for i in instructions]
    if fmt.kind == CHAT:
        return instructions
    try:
        return fmt.render_many(instructions, items)
    except CkptselError:
        return instructions


def count_cost(todos: Sequence[CheckpointTodo], pool: ItemPool, config: MeasureConfig, tokenizer: Any, ref: str) -> Cost:
    """The items and tokens of ``todos`` (every trajectory's checkpoints left to measure)."""
    fmt = bound_format(config, tokenizer) if tokenizer is not None else config.measured.fmt
    lengths = item_lengths(pool, fmt, tokenizer if fmt is not None else None)
    fed = {s: np.zeros(len(its), int) for s, its in pool.splits.items()}
    scored = {s: np.zeros(len(its), int) for s, its in pool.splits.items()}
    generations = 0
    for c in todos:
        for s in pool.splits:
            g, k = c.generate_at.get(s, []), c.score_at.get(s, [])
            mask = np.zeros(len(fed[s]), bool)
            mask[g], mask[k] = True, True
            fed[s] += mask
            scored[s][k] += 1
            generations += len(g)
    max_new = config.measured.max_new_tokens
    if tokenizer is None or fmt is None:
        why = "the prompt format cannot be bound here"
        if tokenizer is None:
            why = "transformers is not installed" if "transformers" in missing_ml() else "the tokenizer is not on this machine"
        counted = f"an estimate of {CHARS_PER_TOKEN} characters per token ({why}: {ref})"
    else:
        counted = f"the tokenizer of {ref}, prompt format {fmt.describe()}"
    return Cost(
        generations=int(generations),
        nll_items=int(sum(int(v.sum()) for v in scored.values())),
        prompt_tokens=int(sum(int(fed[s] @ lengths[s][0]) for s in fed)),
        generation_tokens=int(generations * max_new),
        nll_tokens=int(sum(int(scored[s] @ lengths[s][1]) for s in fed)),
        max_new_tokens=max_new,
        counted=counted,
    )


def model_params(ref: str | Path) -> float | None:
    """The base model's parameters: counted from a local folder's safetensors headers, else read
    from its name (``...-1.7B``, ``...-135M``); ``None`` when neither says."""
    folder = Path(str(ref))
    if folder.is_dir():
        n = sum(_safetensors_params(f) for f in folder.glob("*.safetensors"))
        if n:
            return float(n)
    m = re.search(r"(\d+(?:\.\d+)?)\s*([bBmM])(?![a-zA-Z])", Path(str(ref)).name)
    if m is None:
        return None
    return float(m.group(1)) * (1e9 if m.group(2) in "bB" else 1e6)


def _safetensors_params(path: Path) -> int:
    """Parameters in one safetensors file, from its JSON header (no tensor is read)."""
    with path.open("rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    return sum(math.prod(v["shape"]) for k, v in header.items() if k != "__metadata__")


def bench_rate(device: str, params: float | None, max_new_tokens: int) -> tuple[Rate | None, str]:
    """The measured row of ``device`` nearest the model's size (within :data:`SIZE_FACTOR`), as a
    :class:`Rate`, or ``None`` and why there is none."""
    rows = [r for r in BENCH_ROWS if r.device == device.lower()]
    names = ", ".join(sorted(bench_devices()))
    if not rows:
        return None, f"no measured rate for device {device!r} (rows for: {names}; name one with --device), or --probe measures one here"
    if params is None:
        return None, "the base model's size is not known here (no local weights, no size in its name); --probe measures a rate"
    row = min(rows, key=lambda r: abs(math.log(params / r.params)))
    if abs(math.log(params / row.params)) > math.log(SIZE_FACTOR):
        return None, (
            f"no measured rate on {device} for a model of {size_text(params)} parameters (nearest: {row.shape}); --probe measures one here"
        )
    scaled = f"; scaled to {max_new_tokens} new tokens, decoding per token" if max_new_tokens != row.new_tokens else ""
    return Rate(row.items_per_s * row.new_tokens, f"{row.source}{scaled}"), ""


def probe_items(pool: ItemPool, batch_size: int | str) -> list[Any]:
    """The pool's first items (validation first): :data:`PROBE_ITEMS` at most, one batch at most."""
    n = min(PROBE_ITEMS, batch_size if isinstance(batch_size, int) else PROBE_ITEMS)
    return [it for its in pool.splits.values() for it in its][:n]


def probe_rate(config: MeasureConfig, ref: str, pool: ItemPool, tokenizer: Any) -> Rate:
    """A rate measured here: the base model at ``ref`` loaded once on the run's device and dtype,
    one item as a warm-up, then one batch of the pool's first items (:func:`probe_items`)
    generated and scored with the run's settings (batch size, max new tokens, windows, prompt
    format), again until :data:`PROBE_SECONDS` are timed. A model that cannot be loaded is one
    line."""
    from ckptsel.measure.backends.hf import resolve_dtype
    from ckptsel.measure.passes import measure_items

    if tokenizer is None:
        raise CkptselError(f"--probe: no tokenizer for {ref} on this machine (nothing is downloaded)")
    fmt = bound_format(config, tokenizer)
    if fmt is None:
        raise CkptselError(f"--probe: the prompt format cannot be bound to the tokenizer of {ref}")
    spec = config.measured
    dtype = resolve_dtype(spec.dtype, spec.device)
    model = _load(ref, dtype).to(spec.device)
    items = probe_items(pool, config.runtime.batch_size)
    kw = dict(
        windows=spec.windows,
        batch_size=config.runtime.batch_size,
        max_new_tokens=spec.max_new_tokens,
        fmt=fmt,
        decoder=config.runtime.decoder,
    )
    measure_items(model, tokenizer, [items[0].instruction], [items[0].response or ""], items=items[:1], **kw)
    runs, t0 = 0, time.perf_counter()
    while runs < 5 and (runs == 0 or time.perf_counter() - t0 < PROBE_SECONDS):
        measure_items(model, tokenizer, [it.instruction for it in items], [it.response or "" for it in items], items=items, **kw)
        runs += 1
    seconds = max(time.perf_counter() - t0, 1e-9)
    source = (
        f"a probe here: {len(items)} items of the pool x {runs} through {ref} on {spec.device} ({str(dtype).removeprefix('torch.')}, "
        f"batch {config.runtime.batch_size}, {spec.max_new_tokens} new tokens, generation + NLL) in {seconds:.2f} s"
    )
    return Rate(runs * len(items) * spec.max_new_tokens / seconds, source)


def _load(ref: str, dtype: Any) -> Any:
    """The causal LM at ``ref`` from this machine (nothing downloaded), or one line."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(str(ref), dtype=dtype, local_files_only=True)
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CkptselError(f"--probe: cannot load the base model {ref} here ({first[:200]})") from None


def estimate_time(cost: Cost, *, device: str, probe: Rate | None, params: float | None) -> Cost:
    """``cost`` with its time: from the probe's rate when there is one, else from the measured
    row of ``device`` (:func:`bench_rate`), else none (and the note says how to get one)."""
    if probe is not None:
        return cost.with_rate(probe)
    rate, note = bench_rate(device, params, cost.max_new_tokens)
    return cost.with_rate(rate, note)


def run_cost(
    run_dir: Path | str,
    config: MeasureConfig,
    *,
    validation: Any,
    test: Any,
    out: Any,
    base: str | None = None,
    trajectory: str | None = None,
    probe: bool = False,
    rate_device: str | None = None,
) -> tuple[str, list[int], Cost]:
    """``measure --dry-run``: (the trajectory, its checkpoints' steps, what measuring what the
    records folder ``out`` lacks of them costs), no weights loaded unless ``probe``."""
    from ckptsel.measure.backends.hf import tokenizer_ref
    from ckptsel.measure.parts import left_to_measure
    from ckptsel.measure.run import trajectory_name
    from ckptsel.train.average_read import find_averages
    from ckptsel.train.checkpoints import discover_checkpoints

    ckpts = discover_checkpoints(run_dir, base)
    ckpts += find_averages(run_dir, ckpts, base)  # measured after the checkpoints
    pool = ItemPool.load(config.measured.task, validation, test, config.measured.test_task)
    name = trajectory or trajectory_name(run_dir)
    steps = [c.step for c in ckpts]
    todos = left_to_measure(out, name, steps, config, pool)
    ref = tokenizer_ref(ckpts, base)
    tokenizer = local_tokenizer(ref)
    model = str(base or ckpts[0].base or ckpts[0].path)
    counted = count_cost(todos, pool, config, tokenizer, ref)
    rate = probe_rate(config, model, pool, tokenizer) if probe else None
    return name, steps, estimate_time(counted, device=rate_device or config.measured.device, probe=rate, params=model_params(model))
