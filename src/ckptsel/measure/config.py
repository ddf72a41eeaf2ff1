"""How checkpoints are measured: one validated :class:`MeasureConfig` of two parts.

* :class:`MeasureSpec` — *what* is measured: the tasks, the generation length, the NLL
  windows, the engines, dtype and device that the numbers depend on, and the prompt format
  (one :class:`~ckptsel.data.PromptFormat`); it names the part files
  (:meth:`MeasureSpec.part_key`) and the rows' provenance;
* :class:`RunSettings` — *how* it runs: the batch size, the vLLM engine's sizes, weight
  swapping, the conformance check, ``--only``; none of it changes a measured number.

``ckptsel measure``, :func:`ckptsel.measure.measure_run`, :func:`ckptsel.measure.measure_model`
and the Trainer callback (:class:`ckptsel.integrations.RecordingCallback`) all take one
``MeasureConfig``; its defaults come from :mod:`ckptsel.defaults` and the records contract, and
bad values are rejected once, when it is built, with a :class:`CkptselError` that names the
option.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

from ckptsel._util.checks import check_choice, check_int, check_number
from ckptsel.data.prompts import CHAT, PROMPT_TEMPLATE, PromptFormat, resolve_format
from ckptsel.data.prompts import prompt_format as make_format
from ckptsel.data.scoring import check_scorer
from ckptsel.data.tasks import get_task, task_identity, task_ref
from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.errors import CkptselError
from ckptsel.records.schema import COMPLETE_WINDOW, MATCHED_WINDOW

FORMAT_VERSION = 1  # bump when the meaning of a measurement changes
BACKENDS = ("hf", "vllm")
DECODERS = ("ckptsel", "transformers")  # the HF path's greedy decoders (measure.passes, measure.paged)
DTYPES = ("auto", "float32", "bfloat16", "float16")
MAX_NEW_TOKENS_LIMIT = 1 << 17  # 131072: the longest contexts models have; a cache bound


FORMAT_OPTIONS = ("prompt_format", "system_prompt", "chat_template_args")  # -> MeasureSpec.fmt


@dataclass(frozen=True)
class MeasureSpec:
    """What is measured (validated in ``__post_init__``; hashed into the part files' names).

    ``task`` picks the items' loader and answer rule (a task name, or a task file: kept as its
    absolute path, named in the keys by its content hash); ``test_task`` is the test split's
    task when it differs from the validation task (e.g. MetaMathQA validation, GSM8K test;
    ``None``: both splits use ``task``); ``max_new_tokens`` bounds greedy generation;
    ``window`` is the matched NLL window in tokens (the complete response, ``window=0``, is
    always recorded too); ``backend`` generates and ``nll_backend`` scores the NLL (``None``:
    the ``backend``; vLLM's prompt log-probs score the HF path's tokens); ``device`` and
    ``dtype`` say where and in what precision the models run (they name the part files
    unless float32 on the CPU). ``fmt`` is the prompt format (:mod:`ckptsel.data.prompts`):
    ``None`` while none is stated and it is not yet resolved for the run's tokenizer
    (:meth:`MeasureConfig.bind_format`); a chat format names its template only once resolved.
    A format other than alpaca names the part files and the rows' provenance.
    """

    task: str
    test_task: str | None = None
    max_new_tokens: int = MAX_NEW_TOKENS
    window: int = MATCHED_WINDOW
    backend: str = "hf"
    nll_backend: str | None = None
    device: str = "cpu"
    dtype: str = "auto"
    fmt: PromptFormat | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.task, str):
            raise CkptselError(f"--task must be a task name (got {self.task!r})")
        get_task(self.task)  # unknown task -> CkptselError listing the known ones
        check_scorer(self.task)  # a task file's scorer: imported now, before anything is measured
        object.__setattr__(self, "task", task_ref(self.task))  # a task file: its absolute path
        if self.test_task is not None:
            if not isinstance(self.test_task, str):
                raise CkptselError(f"--test-task must be a task name (got {self.test_task!r})")
            object.__setattr__(self, "test_task", task_ref(self.test_task))
            check_scorer(self.test_task)
        check_int(self.max_new_tokens, "--max-new-tokens (max_new_tokens)", low=1, high=MAX_NEW_TOKENS_LIMIT)
        check_int(self.window, "--window (window; 0 = complete response only)", low=0)
        check_choice(self.backend, "--backend", BACKENDS)
        if self.nll_backend is None:
            object.__setattr__(self, "nll_backend", self.backend)
        check_choice(self.nll_backend, "--nll-backend", BACKENDS)
        check_choice(self.dtype, "--dtype", DTYPES)
        if not isinstance(self.device, str) or not (self.device in ("cpu", "cuda") or self.device.startswith("cuda:")):
            raise CkptselError(f"unknown --device {self.device!r}: use cpu or cuda")
        if self.fmt is not None and not isinstance(self.fmt, PromptFormat):
            raise CkptselError(f"the prompt format must be a PromptFormat, not {self.fmt!r}")

    def task_for(self, split: str) -> str:
        """The task (answer rules) of ``split``: ``test_task`` for the test split if set."""
        return self.test_task if split == "test" and self.test_task else self.task

    @property
    def windows(self) -> tuple[int, ...]:
        """The NLL windows recorded: the matched window and the complete response."""
        return tuple(dict.fromkeys((self.window, COMPLETE_WINDOW)))

    @property
    def uses_hf(self) -> bool:
        """Whether a Hugging Face model is loaded (generation or NLL on the HF path)."""
        return "hf" in (self.backend, self.nll_backend)

    @property
    def uses_vllm(self) -> bool:
        """Whether a vLLM engine runs (generation or NLL through vLLM)."""
        return "vllm" in (self.backend, self.nll_backend)

    @property
    def resolved(self) -> bool:
        """Whether the prompt format is resolved (stated or bound; a chat one to its template)."""
        return self.fmt is not None and (self.fmt.kind != CHAT or bool(self.fmt.chat_template))

    @property
    def prompt(self) -> PromptFormat:
        """The resolved prompt format the run measures with (:meth:`MeasureConfig.bind_format`
        first: an unresolved one is an internal error)."""
        if self.fmt is None or not self.resolved:
            raise CkptselError("internal: the prompt format is not resolved for the tokenizer yet")
        return self.fmt

    @property
    def format_identity(self) -> str:
        """The prompt format's identity (:attr:`ckptsel.data.PromptFormat.identity`) for the
        part keys and provenance; a chat format must be bound to its tokenizer first."""
        if self.fmt is None:
            return "alpaca"  # unstated: alpaca or refused (bind_format), never another format
        if self.fmt.kind == CHAT and not self.fmt.chat_template:
            raise CkptselError("internal: the chat prompt format is not bound to a tokenizer yet")
        return self.fmt.identity

    def part_key(self, kind: str) -> str:
        """The key that names ``kind``'s part files (``"generations"``: what determines a
        generated text, greedy decoding implied; ``"nll"``: what determines an NLL row, teacher
        forcing, response + EOS, the windows, and the engine when it is vLLM).

        These rules must never change: released (0.1.0) records are named by them
        (``tests/measure/test_part_keys.py`` pins them); a new setting that changes a measurement
        enters the payload only when it differs from its old value, so old keys stay.
        """
        if kind == "generations":
            payload: dict[str, Any] = {"decoding": "greedy"}
            payload.update(max_new_tokens=self.max_new_tokens, backend=self.backend)
        elif kind == "nll":
            payload = {"nll": "response+eos", "windows": list(self.windows)}
            if self.nll_backend != "hf":  # HF parts keep the keys they always had
                payload["nll_backend"] = self.nll_backend
        else:
            raise CkptselError(f"internal: no part key for {kind!r} (generations or nll)")
        # a task name as given; a task file by its name and content hash (task_identity)
        payload = {"v": FORMAT_VERSION, "task": task_identity(self.task), "template": PROMPT_TEMPLATE, **payload}
        if self.format_identity != "alpaca":  # alpaca parts keep the keys they always had
            payload["prompt_format"] = self.format_identity
        if self.test_task and self.test_task != self.task:  # unchanged keys without it
            payload["test_task"] = task_identity(self.test_task)
        # the numbers: float32 on the CPU (the default there) keeps the keys it always had;
        # another dtype or a GPU is measured again rather than reused
        if self.device != "cpu":
            payload["device"], payload["dtype"] = "cuda", self.dtype
        elif self.dtype not in ("auto", "float32"):
            payload["dtype"] = self.dtype
        blob = json.dumps(payload, sort_keys=True).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class RunSettings:
    """How a measurement runs (validated in ``__post_init__``); nothing here changes a number
    measured, so none of it names a part file.

    ``batch_size`` is prompts per batch (``auto``: 16 on the CPU, sized from free memory on a
    GPU; answers do not depend on it in float32); ``only`` (``generation`` or ``nll``)
    measures and records just that kind; ``max_loras`` / ``max_lora_rank`` size the vLLM
    engine's LoRA slots (``max_loras`` adapter checkpoints in one batch; 0: as many as the
    work has, capped by memory; rank 0: the largest adapter rank of the run);
    ``kv_cache_gib`` sets vLLM's KV cache (0: sized from the work on a CPU,
    ``gpu_memory_utilization`` on a GPU) and ``gpu_memory_utilization`` vLLM's share of the
    GPU (0: 0.6 while the HF model shares the GPU, else 0.85); ``check_here=False`` defers
    the CUDA check to where the models run (a Ray driver without a GPU);
    ``conformance_check`` (``--no-conformance-check`` turns it off) checks the fast path
    against unbatched ``generate`` the first time a model family is measured
    (:mod:`ckptsel.measure.conformance`; every unit records whether it ran);
    ``swap_weights`` (``False``: a fresh model or engine per full checkpoint) loads each full
    checkpoint of a trajectory into the model or vLLM engine already running, proven by
    checksums (:mod:`ckptsel.measure.backends.swap`); ``decoder`` makes the HF path's texts:
    ``ckptsel`` (its own loop, :mod:`ckptsel.measure.passes`) or ``transformers``
    (transformers' continuous batching, :mod:`ckptsel.measure.paged`; texts equal, checked by
    the conformance check like the other).
    """

    batch_size: int | str = "auto"  # "auto": BATCH_SIZE on the CPU, from free memory on a GPU
    only: str | None = None  # "generation" or "nll": measure and record just that kind
    max_loras: int = 0
    max_lora_rank: int = 0
    kv_cache_gib: float = 0.0
    gpu_memory_utilization: float = 0.0
    check_here: bool = field(default=True, compare=False, repr=False)
    conformance_check: bool = True
    swap_weights: bool = True
    decoder: str = DECODERS[0]

    def __post_init__(self) -> None:
        check_choice(self.decoder, "--decoder", DECODERS)
        check_number(self.kv_cache_gib, "--kv-cache-gib (kv_cache_gib)", low=0)
        check_number(self.gpu_memory_utilization, "--gpu-memory-utilization (gpu_memory_utilization)", low=0, high=0.99)
        check_choice(self.only, "--only", (None, "generation", "nll"))
        if not isinstance(self.conformance_check, bool):
            raise CkptselError(f"conformance_check must be true or false, not {self.conformance_check!r}")
        check_int(self.max_loras, "--max-loras (max_loras)", low=0)
        check_int(self.max_lora_rank, "--max-lora-rank (max_lora_rank)", low=0)
        size = self.batch_size  # an int >= 1 or auto (a digit string from the CLI is that int)
        if isinstance(size, str) and size.strip().isdigit():
            size = int(size)
        if size != "auto":
            check_int(size, "--batch-size (batch_size; or auto)", low=1)
        object.__setattr__(self, "batch_size", size)


@dataclass(frozen=True, init=False)
class MeasureConfig:
    """The measurement options: :attr:`measured` (a :class:`MeasureSpec`, what is measured)
    and :attr:`runtime` (a :class:`RunSettings`, how it runs).

    ``MeasureConfig(task, **options)`` takes the options by name, each of :attr:`OPTIONS`
    (the fields of both parts, and ``prompt_format`` — ``alpaca``, ``chat`` or a template
    file's path; ``None``: not stated — ``system_prompt`` and ``chat_template_args``, which
    become the one :attr:`MeasureSpec.fmt`); ``MeasureConfig(measured=..., runtime=...)``
    takes the parts. Bad values are refused once, here, naming the option. ``auto`` batches
    on the CPU are :data:`~ckptsel.defaults.BATCH_SIZE`. The options read as attributes too
    (``cfg.batch_size``), for callers; the package reads ``cfg.measured.x`` / ``cfg.runtime.x``.
    """

    measured: MeasureSpec
    runtime: RunSettings
    # every option the keyword constructor takes, each named once (the CLI's and study.toml's)
    SPEC_OPTIONS: ClassVar[tuple[str, ...]] = tuple(f.name for f in fields(MeasureSpec) if f.name != "fmt")
    RUN_OPTIONS: ClassVar[tuple[str, ...]] = tuple(f.name for f in fields(RunSettings))
    OPTIONS: ClassVar[tuple[str, ...]] = SPEC_OPTIONS + FORMAT_OPTIONS + RUN_OPTIONS

    def __init__(
        self, task: str | None = None, *, measured: MeasureSpec | None = None, runtime: RunSettings | None = None, **options: Any
    ) -> None:
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            raise CkptselError(f"unknown measurement option {unknown[0]!r} (the options: {', '.join(self.OPTIONS)})")
        if measured is None:
            spec = {k: v for k, v in options.items() if k in self.SPEC_OPTIONS}
            if task is not None:
                spec["task"] = task
            if "task" not in spec:
                raise CkptselError("--task must be a task name (got none)")
            stated = [options.get(k) for k in FORMAT_OPTIONS]
            fmt = make_format(*stated)  # bad values refused, each naming its flag
            measured = MeasureSpec(**spec, fmt=None if stated[0] is None else fmt)
        elif task is not None or any(k in self.SPEC_OPTIONS + FORMAT_OPTIONS for k in options):
            raise CkptselError("internal: MeasureConfig takes measured= or its options, not both")
        if runtime is None:
            runtime = RunSettings(**{k: v for k, v in options.items() if k in self.RUN_OPTIONS})
        elif any(k in self.RUN_OPTIONS for k in options):
            raise CkptselError("internal: MeasureConfig takes runtime= or its options, not both")
        if not isinstance(measured, MeasureSpec) or not isinstance(runtime, RunSettings):
            raise CkptselError("internal: MeasureConfig takes a MeasureSpec and a RunSettings")
        if runtime.batch_size == "auto" and not measured.device.startswith("cuda"):
            runtime = replace(runtime, batch_size=BATCH_SIZE)  # a GPU: sized from free memory
        if runtime.decoder != DECODERS[0] and measured.backend != "hf":
            raise CkptselError(f"--decoder {runtime.decoder}: the HF path's decoder; --backend {measured.backend} decodes on its own")
        if runtime.only == "nll" and not any(get_task(t).has_response for t in (measured.task, measured.task_for("test"))):
            name = get_task(measured.task).name
            raise CkptselError(f"--only nll: task {name} has no response field, so no NLL to score")
        object.__setattr__(self, "measured", measured)
        object.__setattr__(self, "runtime", runtime)
        if runtime.check_here:
            self.check_device()

    def __getattr__(self, name: str) -> Any:
        """An option or a :class:`MeasureSpec` property by its name, for callers (``cfg.task``,
        ``cfg.batch_size``, ``cfg.windows``)."""
        if name.startswith("_") or name in ("measured", "runtime"):
            raise AttributeError(name)
        for part in (self.measured, self.runtime):
            if hasattr(type(part), name) or name in part.__dataclass_fields__:
                return getattr(part, name)
        raise AttributeError(f"MeasureConfig has no option {name!r}")

    def with_parts(self, **changes: Any) -> MeasureConfig:
        """These settings with some options changed (the parts' fields by name), validated
        again; the CUDA check is not run again."""
        spec = {k: v for k, v in changes.items() if k not in self.RUN_OPTIONS}
        run = {k: v for k, v in changes.items() if k in self.RUN_OPTIONS}
        return MeasureConfig(measured=replace(self.measured, **spec), runtime=replace(self.runtime, check_here=False, **run))

    def bind_format(self, tokenizer: Any, recorded: PromptFormat | None = None, where: str = "the run") -> MeasureConfig:
        """These settings with the prompt format resolved for ``tokenizer`` (the run's), once
        per run (:func:`ckptsel.data.prompts.resolve_format`: the stated one, bound to the
        tokenizer's chat template for ``chat``, else the one the run folder ``recorded``, else
        ``alpaca`` — refused, in one line naming the choices, when the tokenizer has a chat
        template and nothing says how the run was trained, or when the stated format differs
        from the recorded one)."""
        fmt = resolve_format(self.measured.fmt, tokenizer, recorded, where)
        if fmt == self.measured.fmt:
            return self
        return self.with_parts(fmt=fmt)

    def check_device(self) -> None:
        """The device must exist where the models run (this process, or a Ray actor)."""
        if self.measured.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise CkptselError("--device cuda asked for, but torch sees no CUDA device")

    def generation_fingerprint(self) -> str:
        """:meth:`MeasureSpec.part_key` of the generations."""
        return self.measured.part_key("generations")

    def nll_fingerprint(self) -> str:
        """:meth:`MeasureSpec.part_key` of the NLL rows."""
        return self.measured.part_key("nll")

    def conformance_settings(self) -> dict[str, Any]:
        """The settings that change what the fast path computes beyond the model itself: the
        prompt format (a template file: its text, not its path), the batch size the check runs
        at, the generation length and the decoder. The conformance verdict is keyed by their digest
        (:func:`ckptsel.measure.conformance.hf_key`); add a setting here and it is checked
        again when it changes."""
        identity = self.measured.format_identity
        settings = {
            "prompt": PROMPT_TEMPLATE if identity == "alpaca" else identity,
            "batch_size": self.runtime.batch_size,
            "max_new_tokens": self.measured.max_new_tokens,
        }
        if self.runtime.decoder != DECODERS[0]:  # ckptsel's own: the digest older verdicts have
            settings["decoder"] = self.runtime.decoder
        return settings
