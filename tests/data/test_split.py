"""Group split with lineage (SPEC §9): determinism, whole groups, lineage = recount, errors."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest

from ckptsel.cli.app import main
from ckptsel.data.split import group_unit, is_validation_group, read_records, split_file, split_records
from ckptsel.errors import CkptselError


def _run_cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


def _groups_to(side: bool, n: int, prefix: str, seed: int = 42, frac: float = 0.1) -> list[str]:
    """The first n group names f"{prefix}{k}" that the hash sends to validation (side=True)
    or to train (side=False)."""
    out, k = [], 0
    while len(out) < n:
        name = f"{prefix}{k}"
        if is_validation_group(name, seed, frac) == side:
            out.append(name)
        k += 1
    return out


def test_hash_rule_is_the_documented_formula():
    # hand-computed from the formula in the docstring, not from the module
    digest = hashlib.sha256(b"42:How many apples?").digest()
    assert group_unit("How many apples?", 42) == int.from_bytes(digest[:8], "big") / 2**64
    assert group_unit("How many apples?", 42) != group_unit("How many apples?", 43)
    # known value, pinned so the rule cannot drift silently
    assert group_unit("a", 42) == pytest.approx(int.from_bytes(hashlib.sha256(b"42:a").digest()[:8], "big") / 2**64, abs=0)
    u = group_unit("a", 42)
    assert is_validation_group("a", 42, u + 1e-12) and not is_validation_group("a", 42, u)


@pytest.fixture(scope="module")
def gsm8k_split(tmp_path_factory, shared_data: Path):
    src = shared_data / "gsm8k" / "train.jsonl"
    out1 = tmp_path_factory.mktemp("split1")
    out2 = tmp_path_factory.mktemp("split2")
    return src, out1, split_file(src, out1), out2, split_file(src, out2)


def test_gsm8k_split_deterministic_and_lineage_is_a_recount(gsm8k_split):
    src, out1, lin1, out2, lin2 = gsm8k_split
    for name in ("train.jsonl", "validation.jsonl", "lineage.md"):
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes()
    assert lin1 == lin2

    src_lines = [line for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    train_lines = (out1 / "train.jsonl").read_text(encoding="utf-8").splitlines()
    val_lines = (out1 / "validation.jsonl").read_text(encoding="utf-8").splitlines()
    # same format, lines copied verbatim, nothing lost or duplicated
    assert Counter(train_lines + val_lines) == Counter(src_lines)
    train = [json.loads(x) for x in train_lines]
    val = [json.loads(x) for x in val_lines]
    g_train = {r["question"] for r in train}
    g_val = {r["question"] for r in val}
    assert not g_train & g_val  # groups (= questions) never cross
    # every record sits where the hash rule puts it
    assert all(is_validation_group(r["question"]) for r in val)
    assert not any(is_validation_group(r["question"]) for r in train)

    on_disk = json.loads((out1 / "lineage.json").read_text(encoding="utf-8"))
    assert on_disk == lin1
    assert lin1["group_field"] == "question"
    assert lin1["records"] == {"total": 7473, "train": len(train), "validation": len(val)}
    assert lin1["groups"] == {"total": len(g_train | g_val), "train": len(g_train), "validation": len(g_val)}
    assert lin1["intersections"] == {"groups": 0, "question_text": 0}
    # measured: 725 of 7,473 GSM8K train questions go to validation with seed 42 (9.70%)
    assert len(val) == 725
    assert 0.09 < lin1["validation_share"]["groups"] < 0.11
    digest = hashlib.sha256((out1 / "validation.jsonl").read_bytes()).hexdigest()
    assert lin1["files"]["validation"] == {"path": "validation.jsonl", "sha256": digest}
    assert lin1["source_sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    md = (out1 / "lineage.md").read_text(encoding="utf-8")
    assert "| validation | 725 | 725 |" in md and "WARNING" not in md


def test_different_seed_gives_a_different_split(shared_data: Path):
    records, _, _, _ = read_records(shared_data / "gsm8k" / "train.jsonl")
    _, v42, _ = split_records(records, seed=42)
    _, v43, lin43 = split_records(records, seed=43)
    q42, q43 = {r["question"] for r in v42}, {r["question"] for r in v43}
    assert q42 != q43
    # independent 10% draws overlap in about 1% of groups, far from identical
    assert len(q42 & q43) < 0.5 * len(q42)
    assert 0.09 < lin43["validation_share"]["groups"] < 0.11


def _metamath_records() -> list[dict]:
    """MetaMathQA format: several augmented variants (query) per original_question."""
    recs = []
    for k in range(80):
        orig = f"Tom has {k + 3} apples and buys {k % 7 + 2} more. How many apples does he have?"
        for v in range(1 + k % 4):
            recs.append(
                {
                    "query": f"[variant {v}] {orig}",
                    "response": f"He has {k + 3} + {k % 7 + 2} = {2 * k + 5 - k}. The answer is: {k + 3 + k % 7 + 2}",
                    "type": ["GSM_Rephrased", "GSM_AnsAug", "GSM_SV", "GSM_FOBAR"][v],
                    "original_question": orig,
                }
            )
    return recs


def test_metamath_variants_move_together(tmp_path: Path):
    recs = _metamath_records()
    src = tmp_path / "metamath.json"
    src.write_text(json.dumps(recs, indent=4), encoding="utf-8")
    lin = split_file(src, tmp_path / "out", seed=42, val_fraction=0.25)
    assert lin["group_field"] == "original_question" and lin["question_field"] == "query"
    assert lin["format"] == "json"
    train = json.loads((tmp_path / "out" / "train.json").read_text(encoding="utf-8"))
    val = json.loads((tmp_path / "out" / "validation.json").read_text(encoding="utf-8"))
    assert train and val
    sizes = Counter(r["original_question"] for r in recs)
    for side in (train, val):
        got = Counter(r["original_question"] for r in side)
        assert got == {g: sizes[g] for g in got}  # every variant of a group is on this side
    assert not {r["original_question"] for r in train} & {r["original_question"] for r in val}
    assert sorted(json.dumps(r) for r in train + val) == sorted(json.dumps(r) for r in recs)
    # input order is kept within each side
    order = {json.dumps(r): k for k, r in enumerate(recs)}
    assert [order[json.dumps(r)] for r in val] == sorted(order[json.dumps(r)] for r in val)
    assert lin["records"]["validation"] == len(val)
    assert lin["groups"] == {
        "total": 80,
        "train": len({r["original_question"] for r in train}),
        "validation": len({r["original_question"] for r in val}),
    }
    # the in-memory API gives the same split
    t2, v2, lin2 = split_records(recs, seed=42, val_fraction=0.25)
    assert (t2, v2) == (train, val)
    assert lin2["records"] == lin["records"]


def test_identical_question_text_under_different_groups_is_reported(tmp_path: Path):
    g_val = _groups_to(True, 1, "val-group-")[0]
    g_train = _groups_to(False, 1, "train-group-")[0]
    recs = [
        {"query": "What is 2 + 2?", "response": "4", "type": "x", "original_question": g_val},
        {"query": "What is 2 + 2?", "response": "4", "type": "x", "original_question": g_train},
        {"query": "Other?", "response": "1", "type": "x", "original_question": g_train},
    ]
    src = tmp_path / "mm.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    lin = split_file(src, tmp_path / "o")
    assert lin["intersections"] == {"groups": 0, "question_text": 1}
    assert lin["question_text_examples"] == ["What is 2 + 2?"]
    assert "WARNING" in (tmp_path / "o" / "lineage.md").read_text(encoding="utf-8")
    # reported, not fatal by default; --strict makes it exit 1
    assert _run_cli(["split", str(src), "--out", str(tmp_path / "c1")]) == 0
    assert _run_cli(["split", str(src), "--out", str(tmp_path / "c2"), "--strict"]) == 1


def test_bad_input_errors_name_file_line_and_field(tmp_path: Path, capsys):
    src = tmp_path / "bad.jsonl"
    src.write_text(
        json.dumps({"query": "a", "original_question": "g1"}) + "\n\n" + json.dumps({"query": "b", "orig": "g2"}) + "\n", encoding="utf-8"
    )
    with pytest.raises(
        CkptselError,
        match=r"bad\.jsonl, line 3: missing group field "
        r"'original_question'",
    ):
        split_file(src, tmp_path / "o")
    assert not (tmp_path / "o").exists()  # nothing written on bad input

    assert _run_cli(["split", str(src), "--out", str(tmp_path / "o")]) == 2
    assert "line 3" in capsys.readouterr().err

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"question": "a"}\n{"question": \n', encoding="utf-8")
    with pytest.raises(CkptselError, match=r"broken\.jsonl: line 2: malformed JSON"):
        split_file(broken, tmp_path / "o")

    ok = tmp_path / "ok.jsonl"
    ok.write_text('{"question": "a"}\n', encoding="utf-8")
    with pytest.raises(CkptselError, match="val-fraction"):
        split_file(ok, tmp_path / "o", val_fraction=1.5)
    with pytest.raises(CkptselError, match=r"record 2: missing group field 'topic'"):
        split_records([{"topic": "x"}, {"question": "y"}], group_field="topic")
    with pytest.raises(CkptselError, match="non-empty string"):
        split_records([{"question": 3}])
    nofield = tmp_path / "nofield.json"
    nofield.write_text(json.dumps([{"text": "a"}]), encoding="utf-8")
    with pytest.raises(CkptselError, match="no group field"):
        split_file(nofield, tmp_path / "o")


def test_jsonl_lines_with_unicode_separators_round_trip_verbatim(tmp_path: Path):
    # U+2028 is legal inside a JSON string; str.splitlines() would cut the record in two
    recs = [{"question": f"Q{k}\u2028naïve {k}?", "answer": "#### 1"} for k in range(40)]
    lines = [json.dumps(r, ensure_ascii=False) for r in recs]
    src = tmp_path / "u.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lin = split_file(src, tmp_path / "o", val_fraction=0.3)
    out = [
        line
        for side in ("train", "validation")
        for line in (tmp_path / "o" / f"{side}.jsonl").read_text(encoding="utf-8").split("\n")
        if line
    ]
    assert sorted(out) == sorted(lines)
    assert lin["records"]["total"] == 40 and lin["format"] == "jsonl"
