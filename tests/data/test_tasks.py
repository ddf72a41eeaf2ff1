"""Task loaders (SPEC §9): real files, item counts, ids, groups and bad-input errors."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from ckptsel.data import prompts, tasks
from ckptsel.data import scoring as answers
from ckptsel.data.taskdef import Item
from ckptsel.errors import CkptselError

COMMONSENSE_COUNTS = {
    "boolq": 3270,
    "piqa": 1838,
    "social_i_qa": 1954,
    "hellaswag": 1000,
    "winogrande": 1267,
    "ARC-Challenge": 1172,
    "ARC-Easy": 2376,
    "openbookqa": 500,
}


def _write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_prompt_template_is_the_alpaca_no_input_text() -> None:
    assert prompts.format_prompt("Add 2 and 3.") == (
        "Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nAdd 2 and 3.\n\n### Response:"
    )


def test_registry_names_families_and_aliases() -> None:
    assert tasks.task_family("gsm8k") == "gsm8k"
    assert tasks.task_family("metamath") == "gsm8k"
    assert tasks.task_family("MetaMathQA") == "gsm8k"
    assert tasks.task_family("math500") == "math"
    assert tasks.task_family("commonsense") == "commonsense"
    for name in tasks.COMMONSENSE_TASKS:
        assert tasks.task_family(name) == "commonsense"
        assert tasks.get_task(name.lower()).subtask == name
    assert tasks.get_task("arc_challenge").name == "ARC-Challenge"
    assert tasks.task_family("gsm8k-raw") == "gsm8k"
    with pytest.raises(CkptselError, match=r"unknown task 'gsm9k'; known tasks: gsm8k, gsm8k-raw, metamath"):
        tasks.task_family("gsm9k")


def test_register_task_adds_a_cli_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    monkeypatch.setattr(tasks, "_LOOKUP", dict(tasks._LOOKUP))

    def load_tsv(path: Path, task: tasks.Task) -> list[Item]:
        rows = [line.split("\t") for line in path.read_text().splitlines()]
        return [Item(f"{task.name}-{i}", q, a, f"The answer is: {a}", f"g{i}") for i, (q, a) in enumerate(rows)]

    tasks.register_task("arith-tsv", "gsm8k", load_tsv, aliases=("arith",))
    data = tmp_path / "arith.tsv"
    data.write_text("1+1?\t2\n2+3?\t5\n")
    items = tasks.load_items("ARITH", data)
    assert [i.item_id for i in items] == ["arith-tsv-0", "arith-tsv-1"]
    assert answers.is_correct("arith", "so: The answer is 5", items[1].reference)
    with pytest.raises(CkptselError, match="already registered"):
        tasks.register_task("arith", "math", load_tsv)
    with pytest.raises(CkptselError, match="unknown answer family 'chess'"):
        tasks.register_task("chess", "chess", load_tsv)
    tasks.register_task("arith-tsv", "math", load_tsv, replace=True)
    assert tasks.task_family("arith-tsv") == "math"
    with pytest.raises(CkptselError, match="unknown task 'arith'"):
        tasks.task_family("arith")  # the replaced task's alias went with it


# --------------------------------------------------------------------------- real files


def test_gsm8k_test_file(shared_data: Path) -> None:
    items = tasks.load_items("gsm8k", shared_data / "gsm8k" / "test.jsonl")
    assert len(items) == 1319
    first = items[0]
    assert first.item_id == "gsm8k-0" and first.group == "gsm8k-0" and first.subtask == ""
    assert first.instruction.startswith("Janet\u2019s ducks lay 16 eggs per day.")
    assert first.reference == "18"
    assert first.response == (
        "Janet sells 16 - 3 - 4 = 9 duck eggs a day.\nShe makes 9 * 2 = $18 every day at the farmer\u2019s market.\nThe answer is: 18"
    )
    assert len({i.item_id for i in items}) == 1319
    assert all(i.group == i.item_id for i in items)
    for item in items:
        assert "<<" not in item.response and "####" not in item.response
        assert item.response.endswith(f"\nThe answer is: {item.reference}")
    assert sorted(i.reference for i in items if i.reference.startswith("-")) == ["-10", "-3"]
    assert sum("," in i.reference for i in items) == 14  # kept as written, e.g. "1,450,000"


def test_gsm8k_train_file(shared_data: Path) -> None:
    items = tasks.load_items("gsm8k", shared_data / "gsm8k" / "train.jsonl")
    assert len(items) == 7473
    assert len({i.item_id for i in items}) == 7473


def test_math500_file(shared_data: Path) -> None:
    items = tasks.load_items("math", shared_data / "math500" / "test.jsonl")
    assert len(items) == 500
    assert items[0].item_id == "test/precalculus/807.json"  # ids come from unique_id
    assert items[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert items[0].subtask == "Precalculus"
    assert len({i.item_id for i in items}) == 500
    assert all(i.group == i.item_id for i in items)
    assert Counter(i.subtask for i in items) == {
        "Algebra": 124,
        "Intermediate Algebra": 97,
        "Prealgebra": 82,
        "Number Theory": 62,
        "Precalculus": 56,
        "Geometry": 41,
        "Counting & Probability": 38,
    }


def test_commonsense_folder_loads_all_eight_tasks(shared_data: Path) -> None:
    items = tasks.load_items("commonsense", shared_data / "commonsense")
    counts = Counter(i.subtask for i in items)
    assert counts == COMMONSENSE_COUNTS
    assert len(items) == 13377
    assert len({i.item_id for i in items}) == len(items)
    # order: the tasks in the fixed order, each in file order
    assert [i.subtask for i in items[:: len(items) - 1]] == ["boolq", "openbookqa"]
    assert items[0].item_id == "boolq-0" and items[-1].item_id == "openbookqa-499"
    assert all(i.group == i.item_id for i in items)
    first = items[0]
    assert first.reference == "false" and first.response == "the correct answer is false"
    assert first.instruction.startswith("Please answer the following question with true or false")


@pytest.mark.parametrize("task", list(COMMONSENSE_COUNTS))
def test_each_commonsense_task_three_ways(shared_data: Path, task: str) -> None:
    root = shared_data / "commonsense"
    from_root = tasks.load_items(task, root)
    from_folder = tasks.load_items(task, root / task)
    test_file = root / task / ("test_subset1000_llmadapters_format.json" if task == "hellaswag" else "test.json")
    from_file = tasks.load_items("commonsense", test_file)  # subtask from the folder name
    assert len(from_root) == COMMONSENSE_COUNTS[task]
    assert from_root == from_folder == from_file
    assert {i.subtask for i in from_root} == {task}
    assert from_root[7].item_id == f"{task}-7"


def test_commonsense_train_files(shared_data: Path) -> None:
    root = shared_data / "commonsense"
    expected = {"boolq": 9427, "openbookqa": 4957, "ARC-Challenge": 1119, "ARC-Easy": 2251}
    for task, count in expected.items():
        assert len(tasks.load_items(task, root / task / "train.json")) == count


# --------------------------------------------------------------------------- small formats


def test_metamath_json_list(tmp_path: Path) -> None:
    records = [
        {
            "query": "Janet has 3 apples and buys 2 more. How many?",
            "response": "3 + 2 = 5.\nThe answer is: 5",
            "type": "GSM_Rephrased",
            "original_question": "Janet has 3 apples and gets 2. How many?",
        },
        {
            "query": "What is half of pi?",
            "response": "Half of $\\pi$ is $\\frac{\\pi}{2}$.\nThe answer is: \\frac{\\pi}{2}",
            "type": "MATH_AnsAug",
            "original_question": "What is half of pi?",
        },
        {"query": "2*4?", "response": "The answer is 8. No: The answer is: 9.", "type": "GSM_SV"},
    ]
    path = tmp_path / "metamath.json"
    path.write_text(json.dumps(records, indent=1))
    items = tasks.load_items("metamath", path)
    assert [i.item_id for i in items] == ["metamath-0", "metamath-1", "metamath-2"]
    assert [i.reference for i in items] == ["5", "\\frac{\\pi}{2}", "9"]
    assert [i.subtask for i in items] == ["GSM_Rephrased", "MATH_AnsAug", "GSM_SV"]
    assert items[0].group == "Janet has 3 apples and gets 2. How many?"
    assert items[2].group == "metamath-2"  # no original_question: the item is its own group
    assert items[0].instruction == records[0]["query"]
    assert items[0].response == records[0]["response"]
    for item in items:
        assert answers.is_correct("metamath", item.response, item.reference)
    # the same records as jsonl load identically
    assert tasks.load_items("metamathqa", _write_jsonl(tmp_path / "m.jsonl", records)) == items


def test_math_without_answer_field_takes_the_boxed_solution(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "math.jsonl", [{"problem": "1+1?", "solution": "It is $\\boxed{2}$.", "level": "Level 1", "type": "Algebra"}]
    )
    (item,) = tasks.load_items("math", path)
    assert item == Item("math-0", "1+1?", "2", "It is $\\boxed{2}$.", "math-0", "")


def test_commonsense_input_field_is_appended(tmp_path: Path) -> None:
    path = tmp_path / "piqa.json"
    path.write_text(json.dumps([{"instruction": "Pick one.", "input": "ctx", "output": "solution2", "answer": "Solution2"}]))
    (item,) = tasks.load_items("piqa", path)
    assert item.instruction == "Pick one.\n\nctx" and item.reference == "solution2"
    assert item.item_id == "piqa-0" and item.subtask == "piqa"


# --------------------------------------------------------------------------- bad input


GOOD_GSM8K = {"question": "1+1?", "answer": "1+1=2\n#### 2"}


@pytest.mark.parametrize(
    ("task", "records", "pattern"),
    [
        ("gsm8k", [GOOD_GSM8K, {"question": "2+2?"}], r"line 2: missing required field 'answer'"),
        ("gsm8k", [{"question": "q", "answer": "4"}], r"line 1: field 'answer' has no '#### N'"),
        ("gsm8k", [{"question": "q", "answer": "#### four"}], r"line 1: .*'four' is not a number"),
        ("gsm8k", [GOOD_GSM8K, ["not", "an", "object"]], r"line 2: expected a JSON object"),
        ("gsm8k", [{"question": ["q"], "answer": "#### 1"}], r"line 1: field 'question' must be a string"),
        ("metamath", [{"query": "q", "response": "it is 4"}], r"line 1: field 'response' has no answer"),
        ("metamath", [{"response": "The answer is: 4"}], r"line 1: missing required field 'query'"),
        ("math", [{"problem": "p", "solution": "no box"}], r"line 1: missing required field 'answer'"),
        (
            "math",
            [
                {"problem": "p", "solution": "s", "answer": "1", "unique_id": "a"},
                {"problem": "p", "solution": "s", "answer": "1", "unique_id": "b"},
                {"problem": "p", "solution": "s", "answer": "1", "unique_id": "a"},
            ],
            r"line 3: duplicate item id 'a' \(first at line 1\)",
        ),
        ("boolq", [{"instruction": "i", "output": "o", "answer": "maybe"}], r"line 1: field 'answer' 'maybe' is not a label of boolq"),
        ("commonsense", [{"instruction": "i", "answer": "true"}], r"line 1: missing required field 'output'"),
    ],
)
def test_bad_records_name_file_line_and_field(tmp_path: Path, task: str, records: list, pattern: str) -> None:
    path = _write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(CkptselError, match=pattern) as info:
        tasks.load_items(task, path)
    assert str(path) in str(info.value)


def test_malformed_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(GOOD_GSM8K) + "\n\n" + '{"question": "q", "answer": \n')
    with pytest.raises(CkptselError, match=r"broken\.jsonl: line 3: malformed JSON") as info:
        tasks.load_items("gsm8k", path)
    assert str(path) in str(info.value)


def test_malformed_json_list(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n {"instruction": "i", "output": "true", "answer": "true"},\n {"instruction": \n]')
    with pytest.raises(CkptselError, match=r"broken\.json: line 4: malformed JSON"):
        tasks.load_items("boolq", path)


def test_json_list_errors_name_the_record_index(tmp_path: Path) -> None:
    path = tmp_path / "list.json"
    path.write_text(json.dumps([GOOD_GSM8K, GOOD_GSM8K, {"answer": "#### 3"}]))
    with pytest.raises(CkptselError, match=r"list\.json: record 3: missing required field 'question'"):
        tasks.load_items("gsm8k", path)


def test_missing_empty_and_folder_paths(tmp_path: Path) -> None:
    with pytest.raises(CkptselError, match=r"nope\.jsonl: no such file"):
        tasks.load_items("gsm8k", tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(CkptselError, match="empty file"):
        tasks.load_items("gsm8k", empty)
    with pytest.raises(CkptselError, match="is a folder"):
        tasks.load_items("gsm8k", tmp_path)
    with pytest.raises(CkptselError, match="no commonsense task folders"):
        tasks.load_items("commonsense", tmp_path)
    with pytest.raises(CkptselError, match="no piqa/ folder"):
        tasks.load_items("piqa", tmp_path)
    with pytest.raises(CkptselError, match="unknown task 'squad'"):
        tasks.load_items("squad", empty)


def test_commonsense_folder_with_two_test_files_is_ambiguous(tmp_path: Path) -> None:
    folder = tmp_path / "boolq"
    folder.mkdir()
    record = [{"instruction": "i", "output": "true", "answer": "true"}]
    for name in ("test_a.json", "test_b.json"):
        (folder / name).write_text(json.dumps(record))
    with pytest.raises(CkptselError, match="several test files"):
        tasks.load_items("boolq", folder)
    (folder / "test.json").write_text(json.dumps(record * 2))  # test.json wins
    assert len(tasks.load_items("boolq", tmp_path)) == 2
