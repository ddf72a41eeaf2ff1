"""The embedded default task (SPEC §13): procedurally generated math word problems.

Why generated: ``ckptsel quickstart`` must run the whole pipeline offline on a 2-core CPU. The
generator gives

* a fine-tuning pool in the MetaMathQA format (``query``, ``response``, ``type``,
  ``original_question``): each original question comes with augmented variants (rephrased
  templates, renamed people and objects; same numbers, same answer) that share its group;
* an INDEPENDENT test pool in the GSM8K format (``question``, ``answer`` ending ``#### N``) from
  a disjoint seed stream, with every question that also occurs in the fine-tuning pool removed;
* pre-training text for a tiny base model: plain statements and sums, plus a share
  (``formatted_fraction``) of answered problems in the Alpaca instruction format, drawn from
  their own seed stream and never a question of the fine-tuning or test pool. Like an
  instruction-tuned model, the base therefore already knows the answer format and solves many
  problems; SFT moves test accuracy by a few points from checkpoint to checkpoint, as in the
  paper's setting (median within-trajectory spread 3.5 pp), instead of teaching the format
  from scratch (which made early checkpoints tens of points worse than late ones).

Responses are one reasoning line and ``The answer is: N``, which ``ckptsel.data.scoring`` parses.
Everything is deterministic in its seed; ``random.Random`` is seeded with strings, never with
Python's salted ``hash()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.io import write_text
from ckptsel.data.prompts import format_prompt
from ckptsel.sim.tiny import build_model, build_tokenizer

NAMES = ("Tom", "Anna", "Ben", "Mia", "Sam", "Lily", "Max", "Zoe", "Leo", "Emma", "Jack", "Nora", "Paul", "Rosa", "Ivan", "Kate")
OBJECTS = ("apples", "pencils", "books", "marbles", "cookies", "stickers", "cards", "balloons", "shells", "stamps", "coins", "eggs")
CONTAINERS = ("boxes", "bags", "baskets", "jars")

# Templates per operation: (question, reasoning). Fields: n=name, m=friend, o=object,
# c=container, a/b=numbers, r=result. Several phrasings per operation make the variants.
TEMPLATES: dict[str, list[str]] = {
    "add": [
        "{n} has {a} {o} and buys {b} more. How many {o} does {n} have now?",
        "{n} had {a} {o}. Then {n} got {b} more {o}. How many {o} does {n} have in all?",
        "There are {a} {o} on a table. {n} puts {b} more {o} on it. How many {o} are on the table?",
        "{n} found {a} {o} in the morning and {b} {o} in the afternoon. How many {o} did {n} find?",
    ],
    "sub": [
        "{n} has {a} {o} and gives {b} of them to {m}. How many {o} does {n} have left?",
        "{n} had {a} {o}. {n} lost {b} {o}. How many {o} does {n} have now?",
        "There are {a} {o} in a box. {n} takes out {b} {o}. How many {o} are still in the box?",
        "{n} bought {a} {o} and used {b} of them. How many {o} are left?",
    ],
    "mul": [
        "{n} has {a} {c} with {b} {o} in each. How many {o} does {n} have?",
        "There are {a} {c} and each holds {b} {o}. How many {o} are there in total?",
        "{n} fills {a} {c} with {b} {o} each. How many {o} does {n} use?",
        "Each of {n}'s {a} {c} has {b} {o}. How many {o} does {n} have altogether?",
    ],
}
REASONING = {"add": "{n} has {a} + {b} = {r} {o}.", "sub": "{n} has {a} - {b} = {r} {o} left.", "mul": "{n} has {a} * {b} = {r} {o}."}
PRETRAIN = {
    "add": ["{a} + {b} = {r}.", "{a} plus {b} is {r}.", "{n} had {a} {o} and got {b} more, so {n} had {a} + {b} = {r} {o}."],
    "sub": ["{a} - {b} = {r}.", "{a} minus {b} is {r}.", "{n} had {a} {o} and gave away {b}, so {n} had {a} - {b} = {r} {o} left."],
    "mul": ["{a} * {b} = {r}.", "{a} times {b} is {r}.", "{n} had {a} {c} of {b} {o}, so {n} had {a} * {b} = {r} {o}."],
}


@dataclass(frozen=True)
class EmbeddedConfig:
    """Size and difficulty of the generated task (``--fast`` uses fewer originals)."""

    n_original: int = 600  # original questions of the fine-tuning pool
    variants: int = 3  # augmented variants per original (besides the original itself)
    n_test: int = 300  # GSM8K-format test questions
    max_operand: int = 12  # operands drawn from 1..max_operand (mul: 2..max_mul)
    max_mul: int = 9
    operations: tuple[str, ...] = ("add", "sub", "mul")
    seed: int = 0
    n_pretrain: int = 20000  # pre-training sentences
    formatted_fraction: float = 0.0  # share of pre-training texts that are answered, formatted problems

    def fingerprint(self) -> str:
        blob = json.dumps(self.__dict__, sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _rng(*parts: Any) -> random.Random:
    return random.Random("|".join(str(p) for p in parts))


def _numbers(op: str, rng: random.Random, cfg: EmbeddedConfig) -> tuple[int, int, int]:
    if op == "add":
        a, b = rng.randint(1, cfg.max_operand), rng.randint(1, cfg.max_operand)
        return a, b, a + b
    if op == "sub":
        a = rng.randint(2, cfg.max_operand + 8)
        b = rng.randint(1, a - 1)
        return a, b, a - b
    if op == "mul":
        a, b = rng.randint(2, cfg.max_mul), rng.randint(2, cfg.max_mul)
        return a, b, a * b
    raise ValueError(f"unknown operation {op!r}")


def _fields(rng: random.Random, a: int, b: int, r: int) -> dict[str, Any]:
    n, m = rng.sample(NAMES, 2)
    return {"n": n, "m": m, "o": rng.choice(OBJECTS), "c": rng.choice(CONTAINERS), "a": a, "b": b, "r": r}


def _question(op: str, template: int, f: dict[str, Any]) -> str:
    return TEMPLATES[op][template].format(**f)


def _draw(rng: random.Random, cfg: EmbeddedConfig) -> tuple[str, dict[str, Any], int]:
    """One problem from ``rng``: its operation, its fields and its answer (the draws in the
    fixed order every pool uses: operation, numbers, fields)."""
    op = rng.choice(cfg.operations)
    a, b, r = _numbers(op, rng, cfg)
    return op, _fields(rng, a, b, r), r


def _drawn_question(rng: random.Random, cfg: EmbeddedConfig) -> tuple[str, dict[str, Any], int, str]:
    """:func:`_draw` and the question, in a template drawn next."""
    op, f, r = _draw(rng, cfg)
    return op, f, r, _question(op, rng.randrange(len(TEMPLATES[op])), f)


def _response(op: str, f: dict[str, Any]) -> str:
    return REASONING[op].format(**f) + f"\nThe answer is: {f['r']}"


def normalize_question(text: str) -> str:
    """Case, whitespace and punctuation folded (the audit's 'normalized match')."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def generate_metamath(cfg: EmbeddedConfig) -> list[dict[str, str]]:
    """The fine-tuning pool: originals plus variants sharing ``original_question``.

    Variant types follow MetaMathQA's names: ``GSM_AnsAug`` (the original question),
    ``GSM_Rephrased`` (another template, same entities) and ``GSM_Renamed`` (another person
    and object, same numbers and answer).
    """
    rows: list[dict[str, str]] = []
    seen: set[str] = set()  # every question of the pool, normalized: no text in two groups
    n_groups = 0
    i = 0
    while n_groups < cfg.n_original:
        rng = _rng("metamath", cfg.seed, i)
        i += 1
        op, f, r = _draw(rng, cfg)
        a, b = f["a"], f["b"]
        t0 = rng.randrange(len(TEMPLATES[op]))
        original = _question(op, t0, f)
        out = [(original, "GSM_AnsAug", f)]
        others = [t for t in range(len(TEMPLATES[op])) if t != t0]
        for v in range(cfg.variants):
            if v % 2 == 0:
                t = others[(v // 2) % len(others)]
                out.append((_question(op, t, f), "GSM_Rephrased", f))
            else:
                g = dict(f)
                g.update(_fields(rng, a, b, r))
                out.append((_question(op, rng.randrange(len(TEMPLATES[op])), g), "GSM_Renamed", g))
        keys = [normalize_question(q) for q, _, _ in out]
        if len(set(keys)) < len(keys) or seen.intersection(keys):
            continue  # a duplicate variant, or a question another group already has: redraw
        seen.update(keys)
        n_groups += 1
        for q, kind, ff in out:
            rows.append({"query": q, "response": _response(op, ff), "type": kind, "original_question": original})
    return rows


def generate_test(cfg: EmbeddedConfig, exclude: set[str] | None = None) -> list[dict[str, str]]:
    """The independent GSM8K-format test pool (disjoint seed stream ``"test"``); questions whose
    normalized text occurs in ``exclude`` (the fine-tuning pool) are skipped and redrawn."""
    exclude = exclude or set()
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    i = 0
    while len(rows) < cfg.n_test:
        op, f, r, q = _drawn_question(_rng("test", cfg.seed, i), cfg)
        i += 1
        key = normalize_question(q)
        if key in exclude or key in seen:
            continue
        seen.add(key)
        rows.append({"question": q, "answer": REASONING[op].format(**f) + f"\n#### {r}"})
    return rows


def generate_pretraining_text(cfg: EmbeddedConfig, exclude: set[str] | None = None) -> list[str]:
    """Text for the base model: statements and sums; a share ``cfg.formatted_fraction`` of the
    texts are answered problems in the Alpaca format (prompt, one reasoning line, ``The answer
    is: N``) from the seed stream ``"pretrain-sft"``, skipping questions whose normalized text is
    in ``exclude`` (the fine-tuning and test pools)."""
    exclude = exclude or set()
    n_formatted = int(round(cfg.formatted_fraction * cfg.n_pretrain))
    out = []
    for i in range(cfg.n_pretrain - n_formatted):
        rng = _rng("pretrain", cfg.seed, i)
        op, f, r = _draw(rng, cfg)
        out.append(rng.choice(PRETRAIN[op]).format(**f))
    i = 0
    formatted = []
    while len(formatted) < n_formatted:
        op, f, r, q = _drawn_question(_rng("pretrain-sft", cfg.seed, i), cfg)
        i += 1
        if normalize_question(q) in exclude:
            continue
        formatted.append(format_prompt(q) + " " + _response(op, f))
    # interleaved deterministically, so that any prefix of the list has the same mix
    mixed: list[str] = []
    step = len(out) / max(1, n_formatted)
    k = 0
    for j, text in enumerate(formatted):
        upto = int(round((j + 1) * step))
        mixed += out[k:upto]
        k = upto
        mixed.append(text)
    return mixed + out[k:]


def pool_questions(cfg: EmbeddedConfig) -> set[str]:
    """Normalized questions of the fine-tuning and test pools (kept out of pre-training)."""
    mm = generate_metamath(cfg)
    keys = {normalize_question(r["query"]) for r in mm}
    return keys | {normalize_question(r["question"]) for r in generate_test(cfg, exclude=keys)}


def pretraining_corpus(cfg: EmbeddedConfig) -> list[str]:
    """The base model's pre-training texts: no question of the fine-tuning or test pool."""
    return generate_pretraining_text(cfg, pool_questions(cfg) if cfg.formatted_fraction else None)


def tokenizer_corpus(cfg: EmbeddedConfig) -> list[str]:
    """Texts the tokenizer is trained on: pre-training text, the prompt template and a sample
    of instructions/responses (so the long Alpaca template compresses to few tokens)."""
    mm = generate_metamath(EmbeddedConfig(**{**cfg.__dict__, "n_original": 200}))
    return pretraining_corpus(cfg) + [format_prompt(r["query"]) + " " + r["response"] for r in mm]


@dataclass(frozen=True)
class EmbeddedFiles:
    metamath: Path
    test: Path
    pretrain: Path


def write_embedded(out_dir: str | Path, cfg: EmbeddedConfig | None = None) -> EmbeddedFiles:
    """Write ``metamath.json`` (fine-tuning pool), ``test.jsonl`` (GSM8K format) and
    ``pretrain.json`` (a list of texts) into ``out_dir``; an existing set with the same fingerprint is reused."""
    cfg = cfg or EmbeddedConfig()
    out_dir = Path(out_dir)
    files = EmbeddedFiles(out_dir / "metamath.json", out_dir / "test.jsonl", out_dir / "pretrain.json")
    stamp = out_dir / "embedded.json"
    if stamp.is_file() and all(p.is_file() for p in files.__dict__.values()):
        if json.loads(stamp.read_text()).get("fingerprint") == cfg.fingerprint():
            return files
    mm = generate_metamath(cfg)
    test = generate_test(cfg, exclude={normalize_question(r["query"]) for r in mm})
    write_text(files.metamath, json.dumps(mm, indent=1) + "\n")
    write_text(files.test, "".join(json.dumps(r) + "\n" for r in test))
    pools = {normalize_question(r["query"]) for r in mm}
    pools |= {normalize_question(r["question"]) for r in test}
    texts = generate_pretraining_text(cfg, pools if cfg.formatted_fraction else None)
    write_text(files.pretrain, json.dumps(texts, indent=0) + "\n")
    write_text(stamp, json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.__dict__}, indent=2, default=list) + "\n")
    return files


@dataclass(frozen=True)
class BaseConfig:
    """The tiny base model and its brief pre-training (cache key: the fingerprint)."""

    vocab_size: int = 1024
    hidden_size: int = 64
    layers: int = 2
    heads: int = 4
    steps: int = 400
    batch_size: int = 64
    lr: float = 3e-3
    seed: int = 0

    def fingerprint(self, task: EmbeddedConfig) -> str:
        blob = json.dumps({"base": self.__dict__, "task": task.fingerprint()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


RESPONSE_MARK = "### Response:"


def _encode_pretraining(tok, text: str) -> list[int]:
    """Token ids of one pre-training text. A formatted problem is encoded exactly as SFT and
    generation see it (:func:`ckptsel.train.trajectory.encode_example`: the prompt as the
    tokenizer encodes it, the response tokenized on its own, then EOS), so the base learns the
    format it will be prompted with; a statement is BOS + text + EOS."""
    if RESPONSE_MARK in text:
        cut = text.index(RESPONSE_MARK) + len(RESPONSE_MARK)
        prompt, response = text[:cut], text[cut:].lstrip(" ")
        return (
            list(tok(prompt, add_special_tokens=True)["input_ids"])
            + list(tok(response, add_special_tokens=False)["input_ids"])
            + [tok.eos_token_id]
        )
    return [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]


def pretrain_base(
    out_dir: str | Path,
    task: EmbeddedConfig | None = None,
    cfg: BaseConfig | None = None,
    *,
    progress: bool | Callable[[int, int, float], None] = True,
) -> Path:
    """Build the tokenizer and tiny Llama model, pre-train it briefly on generic text (plain
    causal-LM loss on statements and sums), and save it in HF layout to ``out_dir``.
    ``progress``: a tqdm bar (True), nothing (False), or ``progress(step, steps, loss)`` called
    after each step.

    Cached: a folder whose ``base.json`` holds the same fingerprint is reused as is. The model
    is written to a temp folder first and renamed, so a killed run leaves no half base.
    """
    task = task or EmbeddedConfig()
    cfg = cfg or BaseConfig()
    out_dir = Path(out_dir)
    fp = cfg.fingerprint(task)
    stamp = out_dir / "base.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("fingerprint") == fp:
        return out_dir
    texts = pretraining_corpus(task)
    tok = build_tokenizer(tokenizer_corpus(task), vocab_size=cfg.vocab_size)
    model = build_model(tok, hidden_size=cfg.hidden_size, layers=cfg.layers, heads=cfg.heads, seed=cfg.seed)
    loss = _pretrain(model, tok, texts, cfg, progress)
    meta = {"fingerprint": fp, "base": cfg.__dict__, "task": task.fingerprint(), "final_loss": loss}
    _save_base(out_dir, tok, model, meta)
    return out_dir


def _pretrain(model, tok, texts: list[str], cfg: BaseConfig, progress) -> float:
    """``cfg.steps`` AdamW steps (linear warm-up and decay) of plain causal-LM loss on batches
    of ``texts``; returns the last step's loss.

    Batches are of one kind (formatted problems or short statements), drawn in proportion to
    the mix: a short statement padded to a formatted problem's length would cost as much as
    one."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    enc = [_encode_pretraining(tok, t) for t in texts]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = get_linear_schedule_with_warmup(opt, max(1, cfg.steps // 20), cfg.steps)
    rng = np.random.default_rng(cfg.seed)
    model.train()
    bar = None
    report = progress if callable(progress) else None
    if progress is True:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.steps, desc="pre-train base", unit="step", leave=False)
    loss_v = float("nan")
    formatted = np.array(["### Instruction" in t for t in texts])
    pools = [np.flatnonzero(~formatted), np.flatnonzero(formatted)]
    pools = [p for p in pools if len(p)]
    share = np.array([len(p) for p in pools], dtype=np.float64) / len(texts)
    for step in range(1, cfg.steps + 1):
        pool = pools[int(rng.choice(len(pools), p=share))] if len(pools) > 1 else pools[0]
        idx = pool[rng.integers(0, len(pool), cfg.batch_size)]
        ids, mask, labels = _batch([enc[i] for i in idx], tok.pad_token_id)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        loss_v = float(loss.detach())
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_v:.3f}")
        if report is not None:
            report(step, cfg.steps, loss_v)
    if bar is not None:
        bar.close()
    return loss_v


def _batch(seqs: list[list[int]], pad_id: int):
    """Right-padded ``(input ids, attention mask, labels)`` of token sequences (every real token
    is a label; padding is masked out)."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, : len(s)] = torch.tensor(s)
        labels[r, : len(s)] = torch.tensor(s)
        mask[r, : len(s)] = 1
    return ids, mask, labels


def _save_base(out_dir: Path, tok, model, meta: dict[str, Any]) -> None:
    """Tokenizer, model and ``base.json`` into a temp folder, then renamed to ``out_dir``."""
    tmp = out_dir.with_name(f".{out_dir.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    tok.save_pretrained(tmp)
    model.save_pretrained(tmp)
    write_text(tmp / "base.json", json.dumps(meta, indent=2) + "\n")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)
