"""Optional vLLM generation backend (GPU only): one engine on the base model and one
``LoRARequest`` per checkpoint adapter, so adapters are swapped by the engine itself.

Only generation goes through vLLM; teacher-forced NLL stays on the Hugging Face path (the
two must score the exact same tokens, and vLLM's prompt log-probs are not that). Greedy
decoding (temperature 0) with the same prompt token ids as the HF path. A base model or an
adapter at a URL is served from this node's copy (:mod:`ckptsel._util.nodecache`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckptsel._util.nodecache import local_ref
from ckptsel.errors import CkptselError
from ckptsel.measure.tokens import encode_prompts
from ckptsel.train import Checkpoint

INSTALL_HINT = "pip install 'ckptsel[vllm]' (or pip install vllm) on a machine with a CUDA GPU"


def import_vllm() -> Any:
    """The ``vllm`` module, or a clear error saying how to get it."""
    try:
        import vllm
    except ImportError as err:
        raise CkptselError(
            f"--backend vllm needs the vllm package, which is not installed: {INSTALL_HINT}"
        ) from err
    return vllm


VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # max_lora_rank values vLLM accepts
GPU_MEMORY_UTILIZATION = 0.6  # the rest of the GPU is for the Hugging Face model (NLL)


def vllm_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds adapters of ``rank``."""
    for r in VLLM_RANKS:
        if r >= rank:
            return r
    raise CkptselError(f"LoRA rank {rank} is above what vLLM serves ({VLLM_RANKS[-1]})")


class VllmGenerator:
    """A vLLM engine on one base model serving every checkpoint adapter of a run.

    Checked against vLLM 0.8–0.11's offline API: ``LLM(model, enable_lora=True, max_loras,
    max_lora_rank, gpu_memory_utilization)``, ``LoRARequest(name, int_id, path)`` and
    ``LLM.generate(prompts, sampling_params, lora_request=..., use_tqdm=False)``. In a Ray
    actor with ``num_gpus=1`` the engine sees the actor's one GPU (Ray sets
    ``CUDA_VISIBLE_DEVICES``); the engine is single-GPU (no tensor parallelism), so vLLM uses
    its in-process executor and does not start Ray workers of its own.
    """

    def __init__(
        self,
        base: str,
        *,
        max_new_tokens: int,
        max_lora_rank: int = 64,
        max_loras: int = 1,
        **engine_kw: Any,
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.base = base
        self.max_new_tokens = max_new_tokens
        engine_kw.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION)
        self.llm = vllm.LLM(
            model=base,
            enable_lora=True,
            max_loras=max_loras,
            max_lora_rank=max_lora_rank,
            **engine_kw,
        )
        self.params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)

    @classmethod
    def for_checkpoints(
        cls,
        ckpts: Sequence[Checkpoint],
        *,
        max_new_tokens: int,
        max_loras: int = 1,
        max_lora_rank: int = 0,
    ) -> VllmGenerator:
        """Check that the run is a LoRA run on one base, then start the engine.
        ``max_lora_rank=0``: the largest adapter rank of the run (rounded up for vLLM)."""
        import_vllm()
        full = [c for c in ckpts if c.kind != "adapter"]
        if full:
            raise CkptselError(
                f"{full[0].path}: --backend vllm serves LoRA adapters only; "
                "use --backend hf for full checkpoints"
            )
        bases = {c.base for c in ckpts}
        if len(bases) != 1:
            raise CkptselError(
                f"--backend vllm needs one base model for the run, found {sorted(map(str, bases))}"
            )
        rank = max(_lora_rank(c) for c in ckpts)
        if max_lora_rank and max_lora_rank < rank:
            raise CkptselError(
                f"--max-lora-rank {max_lora_rank} is below the run's adapter rank {rank}"
            )
        return cls(
            local_ref(next(iter(bases))),
            max_new_tokens=max_new_tokens,
            max_lora_rank=vllm_rank(max_lora_rank or rank),
            max_loras=max_loras,
        )

    def generate(self, ckpt: Checkpoint, tokenizer: Any, prompts: Sequence[str]) -> list[str]:
        """Greedy texts for ``prompts`` under ``ckpt``'s adapter, in input order."""
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        reqs = [TokensPrompt(prompt_token_ids=ids) for ids in encode_prompts(tokenizer, prompts)]
        lora = LoRARequest(f"step{ckpt.step}", ckpt.step + 1, local_ref(ckpt.path))
        outs = self.llm.generate(reqs, self.params, lora_request=lora, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def close(self) -> None:
        """Release the engine (vLLM frees GPU memory when the object is collected)."""
        self.llm = None


def _lora_rank(ckpt: Checkpoint) -> int:
    import json

    cfg = json.loads((ckpt.path / "adapter_config.json").read_text(encoding="utf-8"))
    return int(cfg.get("r", 8))
