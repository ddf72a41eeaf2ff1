"""How checkpoints are measured: one validated :class:`MeasureConfig`.

``ckptsel measure``, :func:`ckptsel.measure.measure_run`, :func:`ckptsel.measure.measure_model`
and the Trainer callback (:class:`ckptsel.integrations.RecordingCallback`) all take one
``MeasureConfig``; its defaults come from :mod:`ckptsel.defaults` and the records contract, and
bad values are rejected once, when it is built, with a :class:`CkptselError` that names the
option.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from ckptsel._util.checks import check_choice, check_int, check_number
from ckptsel.data import (
    CHAT,
    FORMAT_CHOICES,
    FORMAT_FILE,
    PROMPT_TEMPLATE,
    PromptFormat,
    chat_template_of,
    check_scorer,
    get_task,
    task_identity,
    task_ref,
)
from ckptsel.data import prompt_format as make_format
from ckptsel.defaults import BATCH_SIZE, MAX_NEW_TOKENS
from ckptsel.errors import CkptselError
from ckptsel.records import COMPLETE_WINDOW, MATCHED_WINDOW

FORMAT_VERSION = 1  # bump when the meaning of a measurement changes
BACKENDS = ("hf", "vllm")
DTYPES = ("auto", "float32", "bfloat16", "float16")
MAX_NEW_TOKENS_LIMIT = 1 << 17  # 131072: the longest contexts models have; a cache bound


@dataclass(frozen=True)
class MeasureConfig:
    """The measurement options (validated in ``__post_init__``).

    ``task`` picks the items' loader and answer rule (a task name, or a task file: kept as its
    absolute path, named in the fingerprints by its content hash); ``max_new_tokens`` bounds greedy
    generation; ``window`` is the matched NLL window in tokens (the complete response,
    ``window=0``, is always recorded too); ``batch_size`` is prompts per batch (answers do not
    depend on it; ``auto``, the default: 16 on the CPU, sized from free memory on a GPU);
    ``device``/``dtype``/``backend`` say where and how models run;
    ``max_loras`` / ``max_lora_rank`` size the vLLM engine's LoRA slots: ``max_loras`` adapter
    checkpoints are measured in one batch (0: as many as the work has, capped by memory; 1: one
    checkpoint per call; it changes nothing measured), rank 0: the largest adapter rank of the
    run; ``nll_backend`` is the engine that scores the NLL (``None``: the
    ``backend``; vLLM's prompt log-probs score the HF path's tokens); ``kv_cache_gib`` sets
    vLLM's KV cache (0: sized from the work on a CPU, ``gpu_memory_utilization`` on a GPU) and
    ``gpu_memory_utilization`` vLLM's share of the GPU (0: 0.6 while the HF model shares the
    GPU, else 0.85); ``check_here=False`` defers the CUDA check to where the models
    run (a Ray driver without a GPU; :meth:`check_device` runs on the worker). Task,
    generation length, window and backend name the part files (see the fingerprints), so a
    changed setting is measured again rather than reused (so do the NLL engine when it is vLLM,
    and the dtype and device unless float32 on the CPU; the memory settings change nothing
    measured). ``test_task`` is the test split's
    task when it differs from the validation task (e.g. MetaMathQA validation, GSM8K test);
    ``None`` means both splits use ``task``. ``conformance_check`` (``--no-conformance-check``
    turns it off) checks the fast path against unbatched ``generate`` the first time a model
    family is measured (:mod:`ckptsel.measure.conformance`); it changes nothing measured, so
    it names no part file, and every unit records whether it ran. ``swap_weights``
    (``False``: a fresh model or engine per full checkpoint) loads each full checkpoint of a
    trajectory into the model or vLLM engine already running, proven by checksums
    (:mod:`ckptsel.measure.backends.swap`); it changes nothing measured. ``prompt_format``
    (``alpaca``, ``chat`` or a template file's path; ``None``: not stated), ``system_prompt`` and
    ``chat_template_args`` say how an item's prompt is wrapped
    (:mod:`ckptsel.data.prompts`); ``bound_format`` is that format once resolved for the run's
    tokenizer (:meth:`bind_format`: stated, else recorded by the run folder, else alpaca unless
    the tokenizer has a chat template, which is refused). A format other than alpaca names the
    part files and the rows' provenance.
    """

    task: str
    batch_size: int | str = "auto"  # "auto": BATCH_SIZE on the CPU, from free memory on a GPU
    max_new_tokens: int = MAX_NEW_TOKENS
    window: int = MATCHED_WINDOW
    device: str = "cpu"
    backend: str = "hf"
    dtype: str = "auto"
    only: str | None = None  # "generation" or "nll": measure and record just that kind
    max_loras: int = 0
    max_lora_rank: int = 0
    nll_backend: str | None = None
    kv_cache_gib: float = 0.0
    gpu_memory_utilization: float = 0.0
    check_here: bool = field(default=True, compare=False, repr=False)
    test_task: str | None = None
    conformance_check: bool = True
    swap_weights: bool = True
    prompt_format: str | None = None  # alpaca | chat | a template file; None: not stated
    system_prompt: str | None = None
    chat_template_args: Any = ""  # a dict or JSON object text (kept as canonical JSON text)
    bound_format: PromptFormat | None = field(default=None, repr=False)

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
        check_int(
            self.max_new_tokens, "--max-new-tokens (max_new_tokens)", low=1,
            high=MAX_NEW_TOKENS_LIMIT,
        )  # fmt: skip
        check_int(self.window, "--window (window; 0 = complete response only)", low=0)
        check_choice(self.backend, "--backend", BACKENDS)
        if self.nll_backend is None:
            object.__setattr__(self, "nll_backend", self.backend)
        check_choice(self.nll_backend, "--nll-backend", BACKENDS)
        check_number(self.kv_cache_gib, "--kv-cache-gib (kv_cache_gib)", low=0)
        check_number(
            self.gpu_memory_utilization, "--gpu-memory-utilization (gpu_memory_utilization)",
            low=0, high=0.99,
        )  # fmt: skip
        check_choice(self.only, "--only", (None, "generation", "nll"))
        if self.only == "nll" and not any(
            get_task(t).has_response for t in (self.task, self.task_for("test"))
        ):
            name = get_task(self.task).name
            raise CkptselError(f"--only nll: task {name} has no response field, so no NLL to score")
        check_choice(self.dtype, "--dtype", DTYPES)
        if not isinstance(self.device, str) or not (
            self.device in ("cpu", "cuda") or self.device.startswith("cuda:")
        ):
            raise CkptselError(f"unknown --device {self.device!r}: use cpu or cuda")
        self._check_batch_size()
        if not isinstance(self.conformance_check, bool):
            raise CkptselError(
                f"conformance_check must be true or false, not {self.conformance_check!r}"
            )
        check_int(self.max_loras, "--max-loras (max_loras)", low=0)
        check_int(self.max_lora_rank, "--max-lora-rank (max_lora_rank)", low=0)
        if self.bound_format is None:
            stated = make_format(self.prompt_format, self.system_prompt, self.chat_template_args)
            object.__setattr__(self, "chat_template_args", stated.template_args)
            if self.prompt_format is not None and stated.kind != CHAT:
                object.__setattr__(self, "bound_format", stated)  # needs no tokenizer
        elif not isinstance(self.bound_format, PromptFormat):
            raise CkptselError(f"bound_format must be a PromptFormat, not {self.bound_format!r}")
        if self.check_here:
            self.check_device()

    def _check_batch_size(self) -> None:
        """An int >= 1 or ``auto`` (a digit string from the CLI is that int); ``auto`` on the
        CPU is :data:`BATCH_SIZE` (what it always was), on a GPU it stays ``auto``: sized from
        free memory where the model runs (:func:`ckptsel.measure.passes.batch_plan`)."""
        size = self.batch_size
        if isinstance(size, str) and size.strip().isdigit():
            size = int(size)
        if size == "auto" and not self.device.startswith("cuda"):
            size = BATCH_SIZE
        if size != "auto":
            check_int(size, "--batch-size (batch_size; or auto)", low=1)
        object.__setattr__(self, "batch_size", size)

    @property
    def stated_format(self) -> PromptFormat | None:
        """The prompt format the settings state (``None``: none stated, ``prompt_format`` unset;
        a chat format not yet bound to its tokenizer's template)."""
        if self.bound_format is not None:
            return self.bound_format
        if self.prompt_format is None:
            return None
        return make_format(self.prompt_format, self.system_prompt, self.chat_template_args)

    def bind_format(
        self, tokenizer: Any, recorded: PromptFormat | None = None, where: str = "the run"
    ) -> MeasureConfig:
        """These settings with the prompt format resolved for ``tokenizer`` (the run's):
        the stated one (bound to the tokenizer's chat template for ``chat``), else the one the
        run folder ``recorded`` (how it was trained), else ``alpaca`` — unless the tokenizer
        has a chat template and nothing says how the run was trained: that is refused in one
        line naming the choices (never measured silently under the Alpaca prompt). A stated
        format that differs from the recorded one is refused too."""
        fmt = self.format_for(tokenizer, recorded, where)
        if fmt == self.bound_format:
            return self
        return replace(self, bound_format=fmt, check_here=False)

    def format_for(
        self, tokenizer: Any, recorded: PromptFormat | None = None, where: str = "the run"
    ) -> PromptFormat:
        """The prompt format to measure with, given the tokenizer (:meth:`bind_format`); a
        format already bound to a chat template must find that template in ``tokenizer``."""
        bound = self.bound_format
        if bound is not None and bound.kind == CHAT and recorded is None:
            if chat_template_of(tokenizer) != bound.chat_template:
                raise CkptselError(
                    f"{where}: its tokenizer's chat template is not the one the run was "
                    f"resolved with ({bound.identity}); measure each run with its own tokenizer"
                )
            return bound
        stated = self.stated_format
        if stated is not None and stated.kind == CHAT:
            stated = stated.with_tokenizer(tokenizer, f"{where}'s tokenizer")
        if recorded is not None and recorded.kind == CHAT:
            recorded = recorded.with_tokenizer(tokenizer, f"{where}'s tokenizer")
        if stated is not None and recorded is not None and not stated.bos:
            stated = replace(stated, bos=recorded.bos)  # the run folder's BOS, where it says one
        if stated is not None and recorded is not None and stated.identity != recorded.identity:
            differ = stated.differences(recorded, "stated", "prompt_format.json")
            raise CkptselError(
                f"{where} was trained with the prompt format {recorded.describe()}, not "
                f"{stated.describe()}; they differ in {differ or 'their identity'}: measure it "
                "with the format it was trained with (drop --prompt-format, --system-prompt "
                "and --chat-template-args), or measure a copy whose prompt_format.json you "
                "changed"
            )
        fmt = stated or recorded
        if fmt is None:
            if chat_template_of(tokenizer):
                raise CkptselError(
                    f"{where}: its tokenizer has a chat template and nothing says how the run "
                    f"was trained; pass {FORMAT_CHOICES} (in study.toml: [measure] "
                    "prompt_format), with --system-prompt TEXT and --chat-template-args JSON if "
                    "the run was trained with a system turn or template arguments; or state it "
                    f"once in the run folder's {FORMAT_FILE}, e.g. "
                    '{"prompt_format": "chat", "system_prompt": "..."}'
                )
            fmt = PromptFormat()
        return fmt

    @property
    def format_identity(self) -> str:
        """The prompt format's identity (:attr:`ckptsel.data.PromptFormat.identity`) for the
        fingerprints and provenance; a chat format must be bound to its tokenizer first."""
        fmt = self.stated_format
        if fmt is None:
            return "alpaca"  # unstated: alpaca or refused (bind_format), never another format
        if fmt.kind == CHAT and not fmt.chat_template:
            raise CkptselError("internal: the chat prompt format is not bound to a tokenizer yet")
        return fmt.identity

    def check_device(self) -> None:
        """The device must exist where the models run (this process, or a Ray actor)."""
        if self.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise CkptselError("--device cuda asked for, but torch sees no CUDA device")

    def task_for(self, split: str) -> str:
        """The task (answer rules) of ``split``: ``test_task`` for the test split if set."""
        return self.test_task if split == "test" and self.test_task else self.task

    @property
    def windows(self) -> tuple[int, ...]:
        """The NLL windows recorded: the matched window and the complete response."""
        return tuple(dict.fromkeys((self.window, COMPLETE_WINDOW)))

    def _hash(self, payload: dict[str, Any]) -> str:
        # a task name as given; a task file by its name and content hash (task_identity)
        task = task_identity(self.task)
        payload = {"v": FORMAT_VERSION, "task": task, "template": PROMPT_TEMPLATE, **payload}
        if self.format_identity != "alpaca":  # alpaca parts keep the hashes they always had
            payload["prompt_format"] = self.format_identity
        if self.test_task and self.test_task != self.task:  # unchanged hashes without it
            payload["test_task"] = task_identity(self.test_task)
        # the numbers: float32 on the CPU (the default there) keeps the hashes it always had;
        # another dtype or a GPU is measured again rather than reused
        if self.device != "cpu":
            payload["device"], payload["dtype"] = "cuda", self.dtype
        elif self.dtype not in ("auto", "float32"):
            payload["dtype"] = self.dtype
        blob = json.dumps(payload, sort_keys=True).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()[:16]

    def generation_fingerprint(self) -> str:
        """Hash of what determines a generated text (greedy decoding is implied)."""
        return self._hash(
            {"decoding": "greedy", "max_new_tokens": self.max_new_tokens, "backend": self.backend}
        )

    def nll_fingerprint(self) -> str:
        """Hash of what determines an NLL row (teacher forcing, response + EOS, windows; the
        engine when it is vLLM: its rows never mix silently with the HF path's)."""
        payload: dict[str, Any] = {"nll": "response+eos", "windows": list(self.windows)}
        if self.nll_backend != "hf":  # HF parts keep the hashes they always had
            payload["nll_backend"] = self.nll_backend
        return self._hash(payload)

    def conformance_settings(self) -> dict[str, Any]:
        """The settings that change what the fast path computes beyond the model itself: the
        prompt format (a template file: its text, not its path), the batch size the check runs
        at and the generation length. The conformance verdict is keyed by their digest
        (:func:`ckptsel.measure.conformance.hf_key`); add a setting here and it is checked
        again when it changes."""
        return {
            "prompt": PROMPT_TEMPLATE if self.format_identity == "alpaca" else self.format_identity,
            "batch_size": self.batch_size,
            "max_new_tokens": self.max_new_tokens,
        }  # fmt: skip

    @property
    def uses_hf(self) -> bool:
        """Whether a Hugging Face model is loaded (generation or NLL on the HF path)."""
        return "hf" in (self.backend, self.nll_backend)

    @property
    def uses_vllm(self) -> bool:
        """Whether a vLLM engine runs (generation or NLL through vLLM)."""
        return "vllm" in (self.backend, self.nll_backend)
