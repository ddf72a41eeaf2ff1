"""Tiny causal language models built locally (no hub access): a byte-level BPE tokenizer
trained with ``tokenizers`` on the caller's texts, and a small Llama-style ``transformers``
model. Saved with ``save_pretrained`` so that everything downstream loads them through the
same ``AutoTokenizer``/``AutoModelForCausalLM`` path as a real pretrained model."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


def build_tokenizer(texts: Iterable[str], vocab_size: int = 512):
    """Train a byte-level BPE tokenizer on ``texts`` and wrap it as a HF fast tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, **SPECIAL_TOKENS)
    hf.padding_side = "left"  # generation pads on the left; training code sets what it needs
    return hf


def build_model(tokenizer, hidden_size: int = 64, layers: int = 2, heads: int = 4, seed: int = 0, max_positions: int = 1024):
    """A freshly initialised tiny Llama-style causal LM sized for ``tokenizer``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    special = {f"{name}_token_id": getattr(tokenizer, f"{name}_token_id") for name in ("bos", "eos", "pad")}
    shape = {"hidden_size": hidden_size, "intermediate_size": hidden_size * 2, "num_hidden_layers": layers}
    heads_of = {"num_attention_heads": heads, "num_key_value_heads": heads, "max_position_embeddings": max_positions}
    config = LlamaConfig(vocab_size=len(tokenizer), **shape, **heads_of, **special, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def save_tiny(out_dir: Path, texts: Iterable[str], vocab_size: int = 512, seed: int = 0, **model_kw) -> Path:
    """Build a tokenizer + model and save both to ``out_dir`` (HF layout). Returns ``out_dir``."""
    out_dir = Path(out_dir)
    tok = build_tokenizer(texts, vocab_size=vocab_size)
    model = build_model(tok, seed=seed, **model_kw)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    return out_dir
