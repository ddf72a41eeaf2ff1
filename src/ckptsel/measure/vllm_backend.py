"""Optional vLLM generation backend (GPU only): one engine on the base model and one
``LoRARequest`` per checkpoint adapter, so adapters are swapped by the engine itself.

Only generation goes through vLLM; teacher-forced NLL stays on the Hugging Face path (the
two must score the exact same tokens, and vLLM's prompt log-probs are not that). Greedy
decoding (temperature 0) with the same prompt token ids as the HF path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ckptsel.errors import CkptselError
from ckptsel.measure.checkpoints import Checkpoint

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


class VllmGenerator:
    """A vLLM engine on one base model serving every checkpoint adapter of a run."""

    def __init__(
        self, base: str, *, max_new_tokens: int, max_lora_rank: int = 64, **engine_kw: Any
    ) -> None:
        vllm = import_vllm()
        self._vllm = vllm
        self.base = base
        self.max_new_tokens = max_new_tokens
        self.llm = vllm.LLM(model=base, enable_lora=True, max_lora_rank=max_lora_rank, **engine_kw)
        self.params = vllm.SamplingParams(temperature=0.0, max_tokens=max_new_tokens)

    @classmethod
    def for_checkpoints(cls, ckpts: Sequence[Checkpoint], *, max_new_tokens: int) -> VllmGenerator:
        """Check that the run is a LoRA run on one base, then start the engine."""
        import_vllm()
        full = [c for c in ckpts if c.kind != "adapter"]
        if full:
            raise CkptselError(
                f"{full[0].path}: --backend vllm serves LoRA adapters only; use --backend hf for full checkpoints"
            )
        bases = {c.base for c in ckpts}
        if len(bases) != 1:
            raise CkptselError(
                f"--backend vllm needs one base model for the run, found {sorted(map(str, bases))}"
            )
        rank = max(_lora_rank(c) for c in ckpts)
        return cls(
            str(next(iter(bases))), max_new_tokens=max_new_tokens, max_lora_rank=max(8, rank)
        )

    def generate(self, ckpt: Checkpoint, tokenizer: Any, prompts: Sequence[str]) -> list[str]:
        """Greedy texts for ``prompts`` under ``ckpt``'s adapter, in input order."""
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        from ckptsel.measure.generate import encode_prompts

        reqs = [TokensPrompt(prompt_token_ids=ids) for ids in encode_prompts(tokenizer, prompts)]
        lora = LoRARequest(f"step{ckpt.step}", ckpt.step + 1, str(ckpt.path))
        outs = self.llm.generate(reqs, self.params, lora_request=lora, use_tqdm=False)
        return [o.outputs[0].text for o in outs]

    def close(self) -> None:
        """Release the engine (vLLM frees GPU memory when the object is collected)."""
        self.llm = None


def _lora_rank(ckpt: Checkpoint) -> int:
    import json

    cfg = json.loads((ckpt.path / "adapter_config.json").read_text(encoding="utf-8"))
    return int(cfg.get("r", 8))
