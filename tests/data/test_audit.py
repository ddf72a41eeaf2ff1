"""Overlap audit (SPEC §9): hand-computed features, the indexed Jaccard against brute force,
the real GSM8K train×test finding, planted copies, and a control that catches a broken check."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

import ckptsel.data.audit.indexes as audit_indexes
from ckptsel.cli.app import main
from ckptsel.data.audit.files import audit_files, read_questions
from ckptsel.data.audit.grams import char_ngrams, jaccard, normalize, word_ngrams
from ckptsel.data.audit.indexes import brute_force_jaccard_pairs, jaccard_pairs, shared_ngram_pairs
from ckptsel.data.audit.plant import _case_punct, _one_word
from ckptsel.data.audit.run import audit_pools
from ckptsel.errors import CkptselError


def _run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


# ---------------------------------------------------------------- hand-computed features


def test_normalize_char_and_word_grams_by_hand():
    assert normalize("  Hello,   World!\tHOW are   you?? ") == "hello world how are you"
    assert normalize("3,000 apples; “quoted”—dash") == "3 000 apples quoted dash"
    assert normalize("ＡＢＣ $5+2=7") == "abc $5+2=7"  # NFKC; symbols ($ + =) are kept
    assert char_ngrams("abcdefghijklmn") == {"abcdefghijklm", "bcdefghijklmn"}
    assert char_ngrams("short") == {"short"} and char_ngrams("") == frozenset()
    assert word_ngrams("a b c d e f") == {"a b c d e", "b c d e f"}
    assert word_ngrams("a b c d") == frozenset()
    x, y = char_ngrams("abcdefghijklmn"), char_ngrams("abcdefghijklmx")
    assert jaccard(x, y) == pytest.approx(1 / 3)


def test_threshold_is_an_exact_fraction():
    x = frozenset("abcde")  # five 1-character "grams"
    y = frozenset("abcd")  # Jaccard exactly 4/5
    assert jaccard_pairs([x], [y], 0.8) == [(0, 0, 0.8)]
    assert jaccard_pairs([x], [y], 0.81) == []
    assert brute_force_jaccard_pairs([x], [y], 0.8) == [(0, 0, 0.8)]
    with pytest.raises(CkptselError, match="threshold"):
        jaccard_pairs([x], [y], 0.0)


def _word_soup(rng: random.Random, n: int) -> list[str]:
    """Texts over a 25-word vocabulary: many pairs at every Jaccard level."""
    vocab = [f"w{k}" for k in range(25)]
    base = [" ".join(rng.choices(vocab, k=rng.randint(3, 30))) for _ in range(n)]
    out = []
    for s in base:
        words = s.split()
        if rng.random() < 0.5 and len(words) > 2:  # a near copy of an earlier text
            k = rng.randrange(len(words))
            words[k] = rng.choice(vocab)
        out.append(" ".join(words))
    return out


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.7, 0.8, 0.9, 1.0])
def test_indexed_jaccard_equals_brute_force_on_synthetic_text(threshold):
    rng = random.Random(7)
    a = _word_soup(rng, 150)
    b = a[:60] + _word_soup(rng, 90)
    sa = [char_ngrams(normalize(s)) for s in a]
    sb = [char_ngrams(normalize(s)) for s in b]
    ref = brute_force_jaccard_pairs(sa, sb, threshold)
    assert len(ref) >= 60  # the copies at least
    assert sorted(jaccard_pairs(sa, sb, threshold)) == sorted(ref)


def test_indexed_jaccard_equals_brute_force_on_real_questions(shared_data: Path):
    train = read_questions(shared_data / "gsm8k" / "train.jsonl")
    test = read_questions(shared_data / "gsm8k" / "test.jsonl")
    rng = random.Random(3)
    a = rng.sample(train, 250) + [train[1314], train[5162], train[20]]
    b = rng.sample(test, 120) + [test[602], test[632]]
    # light edits of some real questions so the sample has pairs near every threshold
    for s in rng.sample(a, 30):
        words = s.split()
        for _ in range(rng.randint(1, 8)):
            words[rng.randrange(len(words))] = "zzz"
        b.append(" ".join(words))
    sa = [char_ngrams(normalize(s)) for s in a]
    sb = [char_ngrams(normalize(s)) for s in b]
    for threshold in (0.4, 0.6, 0.8):
        ref = brute_force_jaccard_pairs(sa, sb, threshold)
        assert sorted(jaccard_pairs(sa, sb, threshold)) == sorted(ref)
    assert len(brute_force_jaccard_pairs(sa, sb, 0.4)) > len(brute_force_jaccard_pairs(sa, sb, 0.8))


def test_shared_ngram_pairs_counts_by_hand():
    sa = [frozenset({"p", "q", "r"}), frozenset({"x"}), frozenset()]
    sb = [frozenset({"q", "r", "s"}), frozenset({"p"}), frozenset({"y"})]
    i, j, c = shared_ngram_pairs(sa, sb)
    assert list(zip(i.tolist(), j.tolist(), c.tolist(), strict=True)) == [(0, 0, 2), (0, 1, 1)]


def test_word_check_ignores_template_ngrams_and_matches_a_hand_count():
    rng = random.Random(5)
    vocab = [f"t{k}" for k in range(60)]
    template = "Please answer the following question with true or false, question: "
    a = [template + " ".join(rng.choices(vocab, k=8)) for _ in range(60)]
    b = [template + " ".join(rng.choices(vocab, k=8)) for _ in range(40)]
    wa = [word_ngrams(normalize(s)) for s in a]
    wb = [word_ngrams(normalize(s)) for s in b]
    # by hand: a gram is template when in >= max(5% of a pool, 20) of its questions
    df_a = {g: sum(g in x for x in wa) for g in set().union(*wa)}
    df_b = {g: sum(g in y for y in wb) for g in set().union(*wb)}
    tmpl = {g for g, d in df_a.items() if d >= 20} | {g for g, d in df_b.items() if d >= 20}
    assert "please answer the following question" in tmpl
    ref = {(i, j): len((x & y) - tmpl) for i, x in enumerate(wa) for j, y in enumerate(wb) if (x & y) - tmpl}
    i, j, c = shared_ngram_pairs(wa, wb)
    assert dict(zip(zip(i.tolist(), j.tolist(), strict=True), c.tolist(), strict=True)) == ref
    # without the template rule every pair would be flagged
    i0, _, _ = shared_ngram_pairs(wa, wb, template_fraction=1.1)
    assert i0.size == len(a) * len(b)


def test_word_check_on_real_prompt_formatted_pools(shared_data: Path):
    obqa = shared_data / "commonsense" / "openbookqa"
    files = {"train": obqa / "train.json", "test": obqa / "test.json"}
    result = audit_files(files)
    rep = result.pair("train", "test")
    # measured: two near-duplicate OpenBookQA train/test questions (J 0.947 and 0.808)
    assert [(e["i"], e["j"], e["jaccard"]) for e in rep.checks["char13"].examples] == [(3930, 3, 0.9474), (1611, 381, 0.8079)]
    assert rep.checks["exact"].pairs == 0 and rep.checks["normalized"].pairs == 0
    w5 = rep.checks["word5"]
    # the prompt template ("please choose the correct answer ...") is in every question
    assert w5.n_template_ngrams == 12
    assert ["please choose the correct answer", 4957, 500] in w5.template_ngrams
    assert (w5.pairs, w5.items_a, w5.items_b, w5.dropped_ngrams) == (19288, 3063, 463, 0)
    # a tiny pair budget truncates the pair list, says so, and keeps the item counts exact
    small = audit_files(files, max_word_pairs=1000, plant=False).pair("train", "test")
    s5 = small.checks["word5"]
    assert s5.dropped_ngrams > 0 and s5.pairs < w5.pairs
    assert (s5.items_a, s5.items_b) == (w5.items_a, w5.items_b)
    assert s5.to_dict()["ngrams_left_out_of_pair_list"] == s5.dropped_ngrams
    assert result.control_ok


# ---------------------------------------------------------------- the real GSM8K pools


@pytest.fixture(scope="module")
def gsm8k_pools(shared_data: Path) -> dict[str, list[str]]:
    return {"train": read_questions(shared_data / "gsm8k" / "train.jsonl"), "test": read_questions(shared_data / "gsm8k" / "test.jsonl")}


@pytest.fixture(scope="module")
def gsm8k_audit(gsm8k_pools):
    start = time.perf_counter()
    result = audit_pools(gsm8k_pools, threshold=0.8, plant=True, seed=0)
    return result, time.perf_counter() - start


def test_gsm8k_train_test_finding(gsm8k_audit, gsm8k_pools):
    result, seconds = gsm8k_audit
    assert seconds < 30  # measured ~3 s alone on 2 cores; see BENCHMARKS.md
    rep = result.pair("train", "test")
    assert (rep.n_a, rep.n_b) == (7473, 1319)
    # measured finding: no exact, normalized or char-13 (J >= 0.8) overlap between GSM8K
    # train and test; the closest pairs (J = 0.622, 0.611) share a template with new numbers
    assert rep.checks["exact"].pairs == 0
    assert rep.checks["normalized"].pairs == 0
    assert rep.checks["char13"].pairs == 0
    # word 5-grams: templated phrasing is shared widely (11,877 pairs touch 917 test items);
    # only 36 pairs share 5 or more distinct 5-grams
    w5 = rep.checks["word5"]
    assert (w5.pairs, w5.items_a, w5.items_b) == (11877, 3026, 917)
    assert w5.histogram == {"1": 9360, "2-4": 2481, "5-9": 30, ">=10": 6}
    assert w5.examples[0]["shared"] == 30 and (w5.examples[0]["i"], w5.examples[0]["j"]) == (20, 632)
    # the near-template pair is found by the index at a lower threshold, with its exact J
    near = jaccard_pairs([char_ngrams(normalize(s)) for s in gsm8k_pools["train"]], [char_ngrams(normalize(gsm8k_pools["test"][602]))], 0.6)
    assert [(i, round(j_, 4)) for i, _, j_ in near] == [(1314, 0.6111), (5162, 0.6224)]
    # control: 6 planted pairs (2 exact, 2 case/punct, 2 one-word) all found
    assert result.control_ok
    assert sorted(q.kind for q in result.planted) == ["case_punct"] * 2 + ["exact"] * 2 + ["one_word"] * 2
    assert all(q.ok for q in result.planted)
    d = json.loads(json.dumps(result.to_dict()))
    assert d["control"]["ok"] is True and d["pairs"][0]["checks"]["char13"]["pairs"] == 0
    assert "Planted positive control: PASSED" in result.to_markdown()


def test_planted_duplicates_and_near_duplicates_are_all_found(gsm8k_pools):
    train = gsm8k_pools["train"][:2500]
    test = list(gsm8k_pools["test"])
    n_real = len(test)
    rng = random.Random(11)
    long_ones = [k for k, s in enumerate(train) if len(normalize(s)) >= 220]
    src = rng.sample(long_ones, 30)
    planted = {}
    for k, i in enumerate(src):
        kind = ("exact", "case_punct", "one_word")[k % 3]
        text = {"exact": train[i], "case_punct": _case_punct(train[i])}.get(kind) or _one_word(train[i])
        planted[(i, len(test))] = kind
        test.append(text)
    result = audit_pools({"train": train, "test": test}, plant=False)
    rep = result.pair("train", "test")
    flagged = {name: {tuple(p[:2]) for p in rep.checks[name].pair_list} for name in ("exact", "normalized", "char13")}
    for pair, kind in planted.items():
        assert (pair in flagged["exact"]) == (kind == "exact"), (pair, kind)
        assert (pair in flagged["normalized"]) == (kind != "one_word"), (pair, kind)
        assert pair in flagged["char13"], (pair, kind)
    # nothing else: the real pools have no such overlap
    assert {p for p in flagged["char13"] if p[1] < n_real} == set()
    assert rep.checks["char13"].pairs == 30 and rep.checks["exact"].pairs == 10
    # what each check adds over the stricter one: case/punct copies, then one-word edits
    assert rep.checks["normalized"].new_pairs == 10 and rep.checks["char13"].new_pairs == 10
    assert all(ex["a_text"] != ex["b_text"] for ex in rep.checks["normalized"].examples)
    wi, wj, _ = shared_ngram_pairs([word_ngrams(normalize(s)) for s in train], [word_ngrams(normalize(s)) for s in test])
    w5 = set(zip(wi.tolist(), wj.tolist(), strict=True))
    assert all(pair in w5 for pair in planted)


def test_planting_does_not_change_the_real_findings(gsm8k_pools):
    pools = {
        "train": gsm8k_pools["train"][:1500] + gsm8k_pools["test"][:5],  # 5 real duplicates
        "test": gsm8k_pools["test"][:400],
    }
    with_plant = audit_pools(pools, plant=True, seed=5)
    without = audit_pools(pools, plant=False)
    assert with_plant.control_ok and not without.control_ok  # not run = not passed
    assert [p.to_dict() for p in with_plant.pairs] == [p.to_dict() for p in without.pairs]
    exact = without.pair("train", "test").checks["exact"]
    assert exact.pair_list == [[1500 + k, k] for k in range(5)]


def test_control_fails_when_a_check_is_broken(monkeypatch, tmp_path: Path):
    rng = random.Random(2)
    vocab = [f"word{k}" for k in range(400)]
    a = [" ".join(rng.choices(vocab, k=40)) for _ in range(30)]
    b = [" ".join(rng.choices(vocab, k=40)) for _ in range(30)]
    assert audit_pools({"a": a, "b": b}).control_ok
    monkeypatch.setattr(audit_indexes.JaccardIndex, "query", lambda self, x: [])  # a broken index
    broken = audit_pools({"a": a, "b": b})
    assert not broken.control_ok
    assert any("NOT found by char13" in n for n in broken.control_notes)
    fa, fb = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    fa.write_text("".join(json.dumps({"question": s}) + "\n" for s in a), encoding="utf-8")
    fb.write_text("".join(json.dumps({"question": s}) + "\n" for s in b), encoding="utf-8")
    assert _run_cli(["audit", "--train", str(fa), "--test", str(fb)]) == 1


def test_short_pools_skip_one_word_plants_but_still_check_the_rest():
    a = ["how many apples are left over now", "what is the total cost of the toys"]
    b = ["something else entirely is asked here", "nothing in common with the others"]
    result = audit_pools({"a": a, "b": b}, n_plant=3)
    assert sorted(q.kind for q in result.planted) == ["case_punct", "exact"]
    assert any("one_word" in n and "skipped" in n for n in result.control_notes)
    assert result.control_ok


# ---------------------------------------------------------------- files and CLI


def test_read_questions_sniffs_each_format(tmp_path: Path, shared_data: Path):
    assert read_questions(shared_data / "math500" / "test.jsonl")[0].startswith("Convert the point $(0,3)$")
    boolq = read_questions(shared_data / "commonsense" / "boolq" / "test.json")
    assert len(boolq) == 3270 and boolq[0].startswith("Please answer the following question")
    mm = tmp_path / "mm.json"
    mm.write_text(json.dumps([{"query": "Q1?", "response": "r", "type": "t", "original_question": "O"}]), encoding="utf-8")
    assert read_questions(mm) == ["Q1?"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a"}\n{"answer": "b"}\n', encoding="utf-8")
    with pytest.raises(CkptselError, match=r"bad\.jsonl, line 2: missing .* 'question'"):
        read_questions(bad)
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text('{"text": "a"}\n', encoding="utf-8")
    with pytest.raises(CkptselError, match="no question field"):
        read_questions(nofield)


def test_audit_cli_writes_json_and_markdown(tmp_path: Path, shared_data: Path, capsys):
    math = shared_data / "math500" / "test.jsonl"
    train = tmp_path / "train.jsonl"
    rows = [json.loads(x) for x in math.read_text(encoding="utf-8").splitlines()[:60]]
    train.write_text("".join(json.dumps({"query": r["problem"]}) + "\n" for r in rows), "utf-8")
    out = tmp_path / "audit"
    code = _run_cli(["audit", "--train", str(train), "--test", str(math), "--out", str(out)])
    assert code == 0
    d = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    # the 60 copied problems are exact duplicates of MATH-500 items 0..59
    assert d["pairs"][0]["checks"]["exact"]["pair_list"][:3] == [[0, 0], [1, 1], [2, 2]]
    assert d["pairs"][0]["checks"]["exact"]["items_b"] >= 60
    assert d["control"]["ok"] is True
    assert "Planted positive control: PASSED" in (out / "audit.md").read_text(encoding="utf-8")
    assert _run_cli(["audit", "--train", str(train)]) == 2
    assert "at least two" in capsys.readouterr().err
    files = audit_files({"train": train, "test": math}, plant=False)
    assert files.pair("train", "test").checks["exact"].pairs == d["pairs"][0]["checks"]["exact"]["pairs"]
