"""Tiny local checkpoints for the harness logs under ``tests/data/harness_logs`` (no hub access).

A byte-level BPE tokenizer trained on the items and a tiny Llama (hidden 64, 2 layers), fully
fine-tuned for a few dozen steps so that its checkpoints answer differently (``checkpoint-0`` is
the untrained model). Layout: ``<root>/runs/<trajectory>/checkpoint-<step>/`` (HF format).

Two trajectories, in two configurations (learning rate), so that ``ckptsel analyze`` on the logs
has a configuration spread to resample.
"""

from __future__ import annotations

from pathlib import Path

# GSM8K-like items: (id, question, numeric answer, split, group). q01 and q01b are variants of one
# source question, so they share a group.
ITEMS = [
    ("q01", "Tom has 3 apples and buys 4 more. How many apples does he have?", "7", "validation", "g01"),
    ("q01b", "Tom had 3 apples and got 4 more. How many apples are there now?", "7", "validation", "g01"),
    ("q02", "A box holds 5 pens. How many pens are in 2 boxes?", "10", "validation", "q02"),
    ("q03", "Sara had 9 stickers and gave away 4. How many are left?", "5", "validation", "q03"),
    ("q04", "There are 6 cats and 2 dogs. How many animals are there?", "8", "validation", "q04"),
    ("q05", "Ben reads 3 pages a day for 3 days. How many pages does he read?", "9", "validation", "q05"),
    ("q06", "A bag has 12 marbles. 7 are red. How many are not red?", "5", "validation", "q06"),
    ("q07", "Lea has 4 shells and finds 5 more. How many shells does she have?", "9", "validation", "q07"),
    ("q08", "Ann has 2 coins and finds 2 more. How many coins does she have?", "4", "test", "q08"),
    ("q09", "A farm has 4 cows and 4 goats. How many animals are there?", "8", "test", "q09"),
    ("q10", "Max had 10 cards and lost 3. How many cards are left?", "7", "test", "q10"),
    ("q11", "Each car has 4 wheels. How many wheels do 3 cars have?", "12", "test", "q11"),
]
PROMPT = "user: {q}\n"  # what inspect's hf provider sends when the tokenizer has no chat template
TARGET = "The answer is {a}."
STEPS = (0, 40, 80)
# trajectory -> (learning rate, seed)
TRAJECTORIES = {"tiny-a": (3e-3, 0), "tiny-b": (2e-3, 1)}


def build(root: Path, trajectory: str) -> list[Path]:
    """Tokenizer + tiny Llama; full fine-tune on the validation items and two test items."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    lr, seed = TRAJECTORIES[trajectory]
    special = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [PROMPT.format(q=q) + TARGET.format(a=a) for _, q, a, _, _ in ITEMS]
    corpus = texts + [f"{i} {j} {i + j}" for i in range(20) for j in range(20)]
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=list(special.values()), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus, trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    hf_tok.padding_side = "left"
    cfg = LlamaConfig(
        vocab_size=len(hf_tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        bos_token_id=hf_tok.bos_token_id,
        eos_token_id=hf_tok.eos_token_id,
        pad_token_id=hf_tok.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg)
    train = [t + hf_tok.eos_token for t, (_, _, _, s, _) in zip(texts, ITEMS, strict=True) if s == "validation"]
    train += [t + hf_tok.eos_token for t, (_, _, _, s, _) in zip(texts, ITEMS, strict=True) if s == "test"][:2]
    enc = [torch.tensor(hf_tok(t)["input_ids"]) for t in train]
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    out, step = [], 0
    for target in STEPS:
        model.train()
        while step < target:
            ids = enc[step % len(enc)].unsqueeze(0)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad()
            step += 1
        folder = Path(root) / "runs" / trajectory / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        model.eval()
        model.save_pretrained(folder)
        hf_tok.save_pretrained(folder)
        out.append(folder)
    return out


def checkpoints(root: Path, trajectory: str) -> list[Path]:
    """The trajectory's checkpoints under ``root``, built when missing."""
    found = sorted((Path(root) / "runs" / trajectory).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    return found if len(found) == len(STEPS) else build(root, trajectory)
