"""Test helper: tiny random-initialised causal LMs of the families the paper's models come from
(Llama, Qwen2, Qwen3, Mistral, Gemma-2/3, Phi-3, MoE), sliding-window and hybrid caches
included, and the items that exercise them.

``FAMILIES`` maps a name to a function ``tokenizer -> (model class, config)``. Every model has 2
layers and a hidden size of 64; sliding-window families get :data:`WINDOW` tokens, shorter than
most prompt + response lengths of :func:`items`, so windows really cut. Used by
``tests/measure/test_architectures.py`` (float32: identical texts, equal NLL) and
``benchmarks/bench_architectures.py`` (bfloat16 agreement).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

WINDOW = 16
INIT = 0.1  # initializer_range: above the default 0.02, so argmaxes are rarely near-ties
ATTENTION = {"gemma2": ("eager",)}  # Gemma-2's attention soft-capping: no sdpa in transformers


def _common(tok: Any) -> dict[str, Any]:
    return dict(
        vocab_size=len(tok),
        num_hidden_layers=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=INIT,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
    )


def _llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM, LlamaConfig(intermediate_size=128, **_common(tok))


def _qwen2(tok):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM, Qwen2Config(intermediate_size=128, **_common(tok))


def _qwen2_sw(tok):
    """Qwen2 with ``use_sliding_window``: layers from ``max_window_layers`` on slide (hybrid:
    layer 0 full, layer 1 sliding)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM, Qwen2Config(
        intermediate_size=128, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1, **_common(tok)
    )


def _qwen3(tok):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM, Qwen3Config(intermediate_size=128, head_dim=16, **_common(tok))


def _mistral_sw(tok):
    """Mistral with a window shorter than the items (every layer slides)."""
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM, MistralConfig(intermediate_size=128, sliding_window=WINDOW, **_common(tok))


def _gemma2(tok):
    """Gemma-2: alternating sliding/full layers, attention and final logit soft-capping."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM, Gemma2Config(
        intermediate_size=128,
        head_dim=16,
        sliding_window=WINDOW,
        query_pre_attn_scalar=16,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        **_common(tok),
    )


def _gemma3(tok):
    """Gemma-3 text: ``sliding_window_pattern=2`` -> layer 0 sliding, layer 1 full."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return Gemma3ForCausalLM, Gemma3TextConfig(
        intermediate_size=128,
        head_dim=16,
        sliding_window=WINDOW,
        sliding_window_pattern=2,
        query_pre_attn_scalar=16,
        final_logit_softcapping=30.0,
        **_common(tok),
    )


def _phi3_sw(tok):
    """Phi-3 (fused ``qkv_proj`` / ``gate_up_proj``) with a sliding window, as Phi-3-mini."""
    from transformers import Phi3Config, Phi3ForCausalLM

    return Phi3ForCausalLM, Phi3Config(intermediate_size=128, sliding_window=WINDOW, **_common(tok))


def _qwen3_moe(tok):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    return Qwen3MoeForCausalLM, Qwen3MoeConfig(
        intermediate_size=128,
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        head_dim=16,
        decoder_sparse_step=1,
        **_common(tok),
    )


def _mixtral_sw(tok):
    """Mixtral (MoE) with a sliding window."""
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM, MixtralConfig(
        intermediate_size=64, num_local_experts=4, num_experts_per_tok=2, sliding_window=WINDOW, **_common(tok)
    )


FAMILIES: dict[str, Callable[[Any], tuple[Any, Any]]] = {
    "llama": _llama,
    "qwen2": _qwen2,
    "qwen2_sw": _qwen2_sw,
    "qwen3": _qwen3,
    "mistral_sw": _mistral_sw,
    "gemma2": _gemma2,
    "gemma3": _gemma3,
    "phi3_sw": _phi3_sw,
    "qwen3_moe": _qwen3_moe,
    "mixtral_sw": _mixtral_sw,
}
SLIDING = ("qwen2_sw", "mistral_sw", "gemma2", "gemma3", "phi3_sw", "mixtral_sw")


# ------------------------------------------------ state-space, hybrid, length-dependent RoPE
# (issue 29): recurrent states, which the right-padded single pass cannot batch, and RoPE whose
# frequencies depend on the length of the forward call. Tiny configs (2 or 4 layers, hidden 64)


def _ssm(tok: Any) -> dict[str, Any]:
    return dict(
        vocab_size=len(tok),
        num_hidden_layers=2,
        hidden_size=64,
        state_size=8,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=INIT,
    )


def _mamba(tok):
    from transformers import MambaConfig, MambaForCausalLM

    return MambaForCausalLM, MambaConfig(**_ssm(tok))


def _falcon_mamba(tok):
    from transformers import FalconMambaConfig, FalconMambaForCausalLM

    return FalconMambaForCausalLM, FalconMambaConfig(**_ssm(tok))


def _mamba2(tok):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    return Mamba2ForCausalLM, Mamba2Config(num_heads=8, head_dim=16, n_groups=1, chunk_size=16, **_ssm(tok))


def _hybrid(tok: Any) -> dict[str, Any]:
    return dict(_common(tok), num_hidden_layers=4, intermediate_size=128)


def _jamba(tok):
    """Jamba: layer 1 attention, the rest Mamba (``dt_proj`` read as a weight); MoE off."""
    from transformers import JambaConfig, JambaForCausalLM

    return JambaForCausalLM, JambaConfig(
        attn_layer_period=2,
        attn_layer_offset=1,
        expert_layer_period=2,
        expert_layer_offset=1,
        num_experts=2,
        num_experts_per_tok=1,
        use_mamba_kernels=False,
        mamba_d_state=8,
        mamba_dt_rank=8,
        **_hybrid(tok),
    )


def _mamba2_mixer(prefix: str = "mamba_") -> dict[str, Any]:
    return {f"{prefix}n_heads": 8, f"{prefix}d_head": 16, f"{prefix}n_groups": 1, f"{prefix}d_state": 8, f"{prefix}chunk_size": 16}


def _bamba(tok):
    from transformers import BambaConfig, BambaForCausalLM

    return BambaForCausalLM, BambaConfig(attn_layer_indices=[1], **_mamba2_mixer(), **_hybrid(tok))


def _falcon_h1(tok):
    from transformers import FalconH1Config, FalconH1ForCausalLM

    return FalconH1ForCausalLM, FalconH1Config(mamba_d_ssm=128, **_mamba2_mixer(), head_dim=16, **_hybrid(tok))


def _granitemoehybrid(tok):
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    return GraniteMoeHybridForCausalLM, GraniteMoeHybridConfig(
        layer_types=["mamba", "attention", "mamba", "attention"],
        num_local_experts=2,
        num_experts_per_tok=1,
        shared_intermediate_size=64,
        **_mamba2_mixer(),
        **_hybrid(tok),
    )


def _zamba2(tok):
    from transformers import Zamba2Config, Zamba2ForCausalLM

    c = _hybrid(tok)
    c.update(num_hidden_layers=4, num_key_value_heads=4)
    return Zamba2ForCausalLM, Zamba2Config(
        layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
        n_mamba_heads=8,
        mamba_d_state=8,
        mamba_ngroups=1,
        chunk_size=16,
        use_mem_eff_path=False,
        **c,
    )


def _lfm2(tok):
    from transformers import Lfm2Config, Lfm2ForCausalLM

    return Lfm2ForCausalLM, Lfm2Config(
        layer_types=["conv", "full_attention", "conv", "full_attention"], block_auto_adjust_ff_dim=False, **_hybrid(tok)
    )


def _nemotron_h(tok):
    from transformers import NemotronHConfig, NemotronHForCausalLM

    c = _hybrid(tok)
    return NemotronHForCausalLM, NemotronHConfig(
        layers_block_type=["mamba", "attention", "mamba", "mlp"],
        head_dim=16,
        mamba_num_heads=8,
        mamba_head_dim=16,
        n_groups=1,
        ssm_state_size=8,
        chunk_size=16,
        use_mamba_kernels=False,
        **c,
    )


def _qwen3_next(tok):
    """Qwen3-Next: gated DeltaNet (linear attention) layers and full attention, MoE."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    return Qwen3NextForCausalLM, Qwen3NextConfig(
        layer_types=["linear_attention", "full_attention"] * 2,
        head_dim=16,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        **_hybrid(tok),
    )


def _recurrent_gemma(tok):
    from transformers import RecurrentGemmaConfig, RecurrentGemmaForCausalLM

    c = _hybrid(tok)
    c.update(num_hidden_layers=3, num_key_value_heads=1)
    c.pop("max_position_embeddings")
    return RecurrentGemmaForCausalLM, RecurrentGemmaConfig(lru_width=64, attention_window_size=WINDOW, **c)


ROPE_BOUNDARY = 48  # original_max_position_embeddings: about half the items cross it


def _phi3_longrope(tok):
    """Phi-3 with LongRoPE: short factors up to :data:`ROPE_BOUNDARY` positions, long ones for
    a forward call past it (head 16: 8 factors each)."""
    from transformers import Phi3Config, Phi3ForCausalLM

    scaling = {"type": "longrope", "short_factor": [1.0 + k / 8 for k in range(8)], "long_factor": [2.0 + k for k in range(8)]}
    return Phi3ForCausalLM, Phi3Config(
        intermediate_size=128, rope_scaling=scaling, original_max_position_embeddings=ROPE_BOUNDARY, **_common(tok)
    )


def _llama_dynamic(tok):
    """Llama with dynamic NTK RoPE: frequencies rescaled for a forward call past
    :data:`ROPE_BOUNDARY` positions (``max_position_embeddings``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = dict(_common(tok), max_position_embeddings=ROPE_BOUNDARY)
    return LlamaForCausalLM, LlamaConfig(intermediate_size=128, rope_scaling={"rope_type": "dynamic", "factor": 4.0}, **c)


SEAM_FAMILIES: dict[str, Callable[[Any], tuple[Any, Any]]] = {
    "mamba": _mamba,
    "mamba2": _mamba2,
    "falcon_mamba": _falcon_mamba,
    "jamba": _jamba,
    "bamba": _bamba,
    "falcon_h1": _falcon_h1,
    "granitemoehybrid": _granitemoehybrid,
    "zamba2": _zamba2,
    "lfm2": _lfm2,
    "nemotron_h": _nemotron_h,
    "qwen3_next": _qwen3_next,
    "recurrent_gemma": _recurrent_gemma,
    "phi3_longrope": _phi3_longrope,
    "llama_dynamic": _llama_dynamic,
}
FAMILIES.update(SEAM_FAMILIES)
SSM = ("mamba", "mamba2", "falcon_mamba")
HYBRID = ("jamba", "bamba", "falcon_h1", "granitemoehybrid", "zamba2", "lfm2", "nemotron_h", "qwen3_next")
MAMBA_MIXERS = ("mamba", "mamba2", "falcon_mamba", "falcon_h1", "nemotron_h", "jamba", "bamba", "zamba2", "granitemoehybrid")
ROPE = ("phi3_longrope", "llama_dynamic")  # length-dependent RoPE: long items measured alone
STATEFUL = ("recurrent_gemma",)  # no cache returned: every item measured alone
# one attention each (the matrix's cost; Mamba has no sdpa)
ATTENTION.update({f: ("eager",) for f in SEAM_FAMILIES})


def attentions(family: str) -> tuple[str, ...]:
    """The attention implementations ``family`` runs with in transformers."""
    return ATTENTION.get(family, ("eager", "sdpa"))


def build(family: str, tok: Any, attn: str = "sdpa", dtype: Any = None, seed: int = 0, **overrides: Any) -> Any:
    """A random-initialised ``family`` model in eval mode (``overrides`` change its config,
    e.g. ``sliding_window=256``)."""
    import torch

    cls, cfg = FAMILIES[family](tok)
    for key, value in overrides.items():
        setattr(cfg, key, value)
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    return cls(cfg).to(dtype or torch.float32).eval()


WORDS = ("apples pens cards books coins shells Tom Ann Raj Mia has gets more how many does now total each the and of to is").split()


def tokenizer() -> Any:
    """A small byte-level BPE tokenizer (``ckptsel.sim.tiny.build_tokenizer``) on word salad."""
    from ckptsel.sim.tiny import build_tokenizer

    rng = random.Random(7)
    texts = [
        " ".join(rng.choice(WORDS) + (str(rng.randint(0, 99)) if rng.random() < 0.2 else "") for _ in range(rng.randint(3, 40)))
        for _ in range(400)
    ]
    return build_tokenizer(texts, vocab_size=320)


def items(n: int = 12, seed: int = 0) -> tuple[list[str], list[str]]:
    """Prompts of very different lengths (about 3 to 70 tokens: several beyond the window) and
    responses of 3 to 40 tokens."""
    rng = random.Random(seed)
    prompts, responses = [], []
    for i in range(n):
        k = [2, 30, 5, 45, 12, 60, 8, 25][i % 8] + rng.randint(0, 3)
        prompts.append(" ".join(rng.choice(WORDS) for _ in range(k)))
        responses.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30))))
    return prompts, responses


def add_lora(model: Any, seed: int = 0, scale: float = 0.3) -> Any:
    """The model under an unmerged PEFT LoRA adapter (rank 8, random non-zero A and B) on
    every linear layer but the head."""
    import torch
    from peft import LoraConfig, get_peft_model

    # PEFT refuses a LoRA on a Mamba mixer's out_proj and conv1d (its fused kernels read them)
    mamba = model.config.model_type in MAMBA_MIXERS
    cfg = LoraConfig(
        r=8,
        lora_alpha=16,
        lora_dropout=0.0,
        init_lora_weights=False,
        target_modules="all-linear",
        exclude_modules=["out_proj", "conv1d"] if mamba else None,
    )
    torch.manual_seed(1000 + seed)
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * scale)
    return peft_model.eval()


def plant_eos(model: Any, tok: Any, prompts: list[str], max_new: int, at: float = 0.5, seed: int = 0) -> Any:
    """Stops spread over the window: the EOS row of the output embedding becomes ``alpha * u``
    (``u`` a random unit direction orthogonal to the states' mean), ``alpha`` chosen on the model's own greedy continuations
    of ``prompts`` (EOS suppressed) so that they would stop after ``at * max_new`` steps on
    average, each at its own step (a row stops at its first step where ``alpha * h.u`` beats every other
    logit; until then its tokens are unchanged). The model is changed in place and returned;
    ``generate`` sees the same model (a weight, not a logits processor)."""
    import torch

    head = model.get_output_embeddings()
    eos, device = tok.eos_token_id, head.weight.device
    seen: list[Any] = []
    hook = head.register_forward_hook(lambda m, inp, out: seen.append((inp[0][:, -1].float(), out[:, -1].float())))
    side, tok.padding_side = tok.padding_side, "left"
    try:
        enc = tok(prompts, return_tensors="pt", padding=True).to(device)
        with torch.inference_mode():
            model.generate(**enc, max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False, pad_token_id=tok.pad_token_id)
    finally:
        hook.remove()
        tok.padding_side = side
    h = torch.stack([x[0] for x in seen], 1).cpu()  # prompts x steps x hidden
    logits = torch.stack([x[1] for x in seen], 1).cpu()
    logits[..., eos] = -float("inf")
    top = logits.max(-1).values  # prompts x steps
    u = torch.randn(h.shape[-1], generator=torch.Generator().manual_seed(seed))
    mean = h.reshape(-1, h.shape[-1]).mean(0)
    u = u - (u @ mean) / (mean @ mean) * mean  # states share a large mean: h.u spreads both ways
    u = u / u.norm()
    s = h @ u
    need = torch.where(s > 0, top / s.clamp(min=1e-12), torch.full_like(s, float("inf")))
    first_need = need.cummin(1).values  # alpha above it: stopped by that step
    cands = first_need[first_need.isfinite()].unique()
    if len(cands) == 0:
        raise ValueError("plant_eos: no state where EOS can win (try other prompts)")
    # a row's stop step under alpha: the steps before its first need below alpha
    stops = (first_need[None] >= cands[:, None, None]).sum(-1).float()  # cands x prompts
    alpha = float(cands[(stops.mean(1) - at * max_new).abs().argmin()])
    with torch.no_grad():
        head.weight[eos] = (alpha * 1.0001 * u).to(head.weight.dtype).to(device)
    return model


def fresh(model: Any, device: Any = None) -> None:
    """A one-token forward: dynamic RoPE drops the frequencies a longer call left behind, so
    the reference that follows sees what a freshly loaded model sees (a no-op elsewhere)."""
    import torch

    with torch.inference_mode():
        model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), use_cache=False)


def generate_one(model: Any, tok: Any, prompt: str, max_new: int, stops: list[int], device: Any = None) -> str:
    """Reference text: ``model.generate`` on the one unpadded prompt, cut at the first stop."""
    import torch

    fresh(model, device)
    ids = torch.tensor([tok(prompt)["input_ids"]], device=device)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=stops,
        )
    new = out[0, ids.shape[1] :].tolist()
    cut = next((k for k, t in enumerate(new) if t in stops), len(new))
    return tok.decode(new[:cut], skip_special_tokens=True)


def generate_batched(
    model: Any, tok: Any, prompts: list[str], max_new: int, stops: list[int], batch_size: int, device: Any = None
) -> list[str]:
    """HF's own batched ``generate`` (left-padded), as a user would call it: the bf16 baseline."""
    import torch

    texts = []
    for k in range(0, len(prompts), batch_size):
        enc = [tok(p)["input_ids"] for p in prompts[k : k + batch_size]]
        width = max(map(len, enc))
        ids = torch.full((len(enc), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, e in enumerate(enc):
            ids[row, width - len(e) :] = torch.tensor(e)
            mask[row, width - len(e) :] = 1
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new,
                do_sample=False,
                pad_token_id=tok.pad_token_id,
                eos_token_id=stops,
            )
        for row in out[:, width:].tolist():
            cut = next((j for j, t in enumerate(row) if t in stops), len(row))
            texts.append(tok.decode(row[:cut], skip_special_tokens=True))
    return texts


def direct_nll(model: Any, tok: Any, prompt: str, response: str, window: int) -> tuple[float, int]:
    """Reference NLL: one unpadded sequence (prompt + response + EOS) cut to ``window``
    tokens (0: whole), scored in float64."""
    import torch

    p = tok(prompt)["input_ids"]
    r = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seq = (p + r)[:window] if window else p + r
    n = max(0, len(seq) - len(p))
    if n == 0:  # the prompt alone fills the window
        return 0.0, 0
    fresh(model)
    with torch.inference_mode():
        logp = model(input_ids=torch.tensor([seq])).logits[0].double().log_softmax(-1)
    return -sum(float(logp[len(p) - 1 + k, r[k]]) for k in range(n)), n


# ------------------------------------------------ whole runs of a family (issue 38): full-weight
# checkpoints of MoE families whose files name each expert (``experts.<i>.gate_proj.weight``)
# where the model holds them fused (``experts.gate_up_proj``), and Llama-4's MoE, whose router
# (an ``nn.Linear`` returning a tuple) an ``all-linear`` LoRA wraps


def _qwen2_moe(tok):
    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    return Qwen2MoeForCausalLM, Qwen2MoeConfig(
        intermediate_size=128,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        **_common(tok),
    )


def _olmoe(tok):
    from transformers import OlmoeConfig, OlmoeForCausalLM

    return OlmoeForCausalLM, OlmoeConfig(intermediate_size=32, num_experts=4, num_experts_per_tok=2, **_common(tok))


def _llama4(tok):
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    return Llama4ForCausalLM, Llama4TextConfig(
        intermediate_size=64,
        intermediate_size_mlp=128,
        num_local_experts=2,
        num_experts_per_tok=1,
        head_dim=16,
        interleave_moe_layer_step=1,
        **_common(tok),
    )


RUN_FAMILIES: dict[str, Callable[[Any], tuple[Any, Any]]] = {
    "qwen2_moe": _qwen2_moe,
    "olmoe": _olmoe,
    "qwen3_moe": _qwen3_moe,
    "mixtral": _mixtral_sw,
    "llama4": _llama4,
}


def save_run(family: str, tok: Any, root: Any, steps: tuple[int, ...], lora: bool = False) -> Any:
    """A run folder ``root/run`` of ``family`` (from :data:`RUN_FAMILIES`): full checkpoints
    (a differently seeded model per step), or, with ``lora``, the base in ``root/base`` and an
    ``all-linear`` LoRA adapter per step (:func:`add_lora`). Returns the run folder."""

    import torch

    root = Path(root)
    cls, cfg = RUN_FAMILIES[family](tok)
    run = root / "run"
    if lora:
        torch.manual_seed(0)
        cls(cfg).save_pretrained(root / "base")
        tok.save_pretrained(root / "base")
    for k, step in enumerate(steps):
        path = run / f"checkpoint-{step}"
        torch.manual_seed(k)
        if lora:
            add_lora(cls.from_pretrained(root / "base"), seed=k).save_pretrained(path)
        else:
            cls(cfg).save_pretrained(path)
        tok.save_pretrained(path)
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return run


def register_positionless_llama():
    """``PositionlessLlamaForCausalLM``: Llama whose ``forward`` drops the attention mask and
    the position ids it is given. Unpadded, alone (what ``generate`` feeds it), that changes
    nothing; in ckptsel's right-padded batch, a shorter row's decoding then sees columns that
    are not its own and takes the batch's positions — wrong texts, no error: the Mamba kind of
    seam, in a class the check has never seen."""
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    class PositionlessConfig(LlamaConfig):
        model_type = "positionless_llama"

    class PositionlessLlamaForCausalLM(LlamaForCausalLM):
        config_class = PositionlessConfig

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
            return super().forward(input_ids=input_ids, **kwargs)

    try:
        AutoConfig.register("positionless_llama", PositionlessConfig)
        AutoModelForCausalLM.register(PositionlessConfig, PositionlessLlamaForCausalLM)
    except ValueError:  # registered by an earlier test of this process
        pass
    return AutoModelForCausalLM._model_mapping[PositionlessConfig]
