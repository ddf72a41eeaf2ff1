"""The embedded task: MetaMathQA-format pool with variant groups, an independent GSM8K-format
test pool, answers that ``ckptsel.data.scoring`` parses, and a cached pre-trained tiny base."""

from __future__ import annotations

import json
import re

import pytest

from ckptsel.data.scoring import is_correct
from ckptsel.data.tasks import load_items
from ckptsel.sim import embedded as E

SMALL = E.EmbeddedConfig(n_original=120, variants=3, n_test=150, n_pretrain=400)


pytestmark = pytest.mark.usefixtures("one_thread")


def _eval(q: str) -> int:
    """Independent solver: read the operation from the question words and the two numbers."""
    a, b = (int(x) for x in re.findall(r"\d+", q))
    if re.search(r"\beach\b", q, re.IGNORECASE):
        return a * b
    if re.search(r"gives|lost|takes out|used", q):
        return a - b
    return a + b


def test_metamath_pool_groups_and_answers():
    rows = E.generate_metamath(SMALL)
    assert len(rows) == SMALL.n_original * (1 + SMALL.variants)
    groups: dict[str, list[dict]] = {}
    for r in rows:
        assert set(r) == {"query", "response", "type", "original_question"}
        groups.setdefault(r["original_question"], []).append(r)
    assert len(groups) == SMALL.n_original
    # no question text (normalized) occurs twice, so no text can straddle the group split
    assert len({E.normalize_question(r["query"]) for r in rows}) == len(rows)
    for original, members in groups.items():
        assert len(members) == 1 + SMALL.variants
        assert members[0]["query"] == original and members[0]["type"] == "GSM_AnsAug"
        assert {m["type"] for m in members[1:]} <= {"GSM_Rephrased", "GSM_Renamed"}
        # variants share the numbers and the answer of their original question
        answers = {m["response"].rsplit("The answer is: ", 1)[1] for m in members}
        assert len(answers) == 1
        assert len({m["query"] for m in members}) > 1  # really rephrased / renamed
    for r in rows:
        ref = r["response"].rsplit("The answer is: ", 1)[1]
        assert int(ref) == _eval(r["query"]), r
        assert is_correct("metamath", r["response"], ref)
        assert not is_correct("metamath", r["response"], str(int(ref) + 1))
    assert rows == E.generate_metamath(SMALL)  # deterministic
    assert rows != E.generate_metamath(E.EmbeddedConfig(**{**SMALL.__dict__, "seed": 1}))


def test_test_pool_is_independent_and_parses(tmp_path):
    files = E.write_embedded(tmp_path, SMALL)
    train = load_items("metamath", files.metamath)
    test = load_items("gsm8k", files.test)
    assert len(train) == SMALL.n_original * (1 + SMALL.variants) and len(test) == SMALL.n_test
    train_q = {E.normalize_question(it.instruction) for it in train}
    test_q = [E.normalize_question(it.instruction) for it in test]
    assert len(set(test_q)) == len(test_q)
    assert not train_q & set(test_q)  # no exact or normalized overlap
    for it in test:
        assert int(it.reference) == _eval(it.instruction)
        assert is_correct("gsm8k", it.response, it.reference)
        assert is_correct("metamath", it.response, it.reference)
    for it in train:
        assert is_correct("metamath", it.response, it.reference)
    # the test pool comes from its own seed stream, not from the fine-tuning one
    raw = [json.loads(x) for x in files.test.read_text().splitlines()]
    assert all(r["answer"].rstrip().split("\n")[-1].startswith("#### ") for r in raw)
    # cached: a second call reuses the files (same bytes, same mtime)
    m0 = files.metamath.stat().st_mtime_ns
    assert E.write_embedded(tmp_path, SMALL) == files and files.metamath.stat().st_mtime_ns == m0


def test_pretraining_text_is_not_instruction_format():
    texts = E.generate_pretraining_text(SMALL)
    assert len(texts) == SMALL.n_pretrain
    assert not any("### Instruction" in t or "The answer is" in t for t in texts)
    _check_sums(texts[:200])


def test_pretraining_mix_has_answered_formatted_problems_outside_the_pools():
    """``formatted_fraction``: that share of the base's texts are answered problems in the
    Alpaca format (an 'instruction-tuned' base), correct, spread over the list, and never a
    question of the fine-tuning or test pool."""
    from ckptsel.data.prompts import format_prompt

    cfg = E.EmbeddedConfig(**{**SMALL.__dict__, "formatted_fraction": 0.25})
    texts = E.pretraining_corpus(cfg)
    assert len(texts) == cfg.n_pretrain
    formatted = [t for t in texts if "### Instruction" in t]
    assert len(formatted) == 100
    head = format_prompt("Q").split("Q")[0]
    pools = E.pool_questions(cfg)
    for t in formatted:
        assert t.startswith(head)
        question = t[len(head) :].split("\n")[0]
        assert E.normalize_question(question) not in pools
        answer = t.rsplit("The answer is: ", 1)[1]
        assert int(answer) == _eval(question), t
    # mixed in, not appended: each quarter of the list holds some
    quarters = [sum("### Instruction" in t for t in texts[k * 100 : (k + 1) * 100]) for k in range(4)]
    assert min(quarters) >= 20, quarters
    _check_sums([t for t in texts if "### Instruction" not in t][:200])
    assert texts == E.pretraining_corpus(cfg)  # deterministic


def _check_sums(texts: list[str]) -> None:
    for t in texts:
        lhs, rhs = re.findall(r"(\d+ [-+*] \d+|\d+ (?:plus|minus|times) \d+) (?:=|is) (\d+)", t)[0]
        a, op, b = lhs.split()
        want = {
            "+": int(a) + int(b),
            "plus": int(a) + int(b),
            "-": int(a) - int(b),
            "minus": int(a) - int(b),
            "*": int(a) * int(b),
            "times": int(a) * int(b),
        }[op]
        assert int(rhs) == want, t


def test_base_is_pretrained_and_cached(tmp_path):
    pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = E.BaseConfig(vocab_size=400, hidden_size=32, layers=1, heads=2, steps=30, batch_size=16)
    out = E.pretrain_base(tmp_path / "base", SMALL, cfg, progress=False)
    meta = json.loads((out / "base.json").read_text())
    assert meta["fingerprint"] == cfg.fingerprint(SMALL)
    tok = AutoTokenizer.from_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out))
    assert model.config.hidden_size == 32 and len(tok) <= 400
    # pre-training lowered the loss from a fresh model's ~log(vocab)
    assert meta["final_loss"] < 0.8 * __import__("math").log(len(tok))
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    assert E.pretrain_base(tmp_path / "base", SMALL, cfg, progress=False) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime  # reused, not retrained


def test_base_weights_do_not_depend_on_the_thread_count(tmp_path):
    """The quickstart pre-trains its base with up to two threads (nothing else runs then); the
    weights must be those of one thread, bit for bit, or the study would change with the
    machine's core count."""
    torch = pytest.importorskip("torch")

    cfg = E.BaseConfig(steps=25, batch_size=48)  # the quickstart's model shape
    before = torch.get_num_threads()
    blobs = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            out = E.pretrain_base(tmp_path / f"base-{n}", SMALL, cfg, progress=False)
            blobs.append((out / "model.safetensors").read_bytes())
    finally:
        torch.set_num_threads(before)
    assert blobs[0] == blobs[1]
