"""Hostile harness logs through the command line (issues 45 and 48): ``ckptsel ingest`` and
``ckptsel compare-logs`` pair two logs' samples only when they are the same item (lm-eval's
``doc_hash``, inspect's input and target), type-check every field they read, refuse bad logs in
one line naming the file and the sample (exit 2, no traceback, nothing written), say when a
log's correctness contradicts its answers under the task's rule and re-score with
``--rescore``; and the page's lm-eval recipe (docs/how-to/harness-logs.md) has the filter that
makes lm-eval's correctness ckptsel's."""

from __future__ import annotations

import copy
import json
import re
import textwrap
from pathlib import Path

import pytest
from tests.clirun import run_cli
from tests.inspectcase import write_eval
from tests.lmevalcase import gsm8k_line, write_samples

from ckptsel.data.scoring import extract
from ckptsel.records.scan import read_frame

DATA = Path(__file__).parents[1] / "data" / "harness_logs"
[JSON_LOG] = sorted((DATA / "inspect").glob("*.json"))
PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "harness-logs.md"
GOOD = [gsm8k_line(i, f"#### {a}", "strict-match", a, 1.0) for i, a in enumerate(["18", "1234", "5"])]


def _files(root: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}


def refused(args: list, capsys, root: Path, needle: str) -> str:
    """``ckptsel ARGS`` refuses: exit 2, one line (naming ``needle``), no traceback, and no
    file written or changed under ``root``."""
    before = _files(root)
    code, said = run_cli(args, capsys)
    lines = [line for line in said.splitlines() if line.strip()]
    assert code == 2, said
    assert len(lines) == 1, said
    assert "Traceback" not in said and needle in lines[0], said
    assert _files(root) == before
    return lines[0]


# --------------------------------------------------------------------------- lm-eval logs
def _lm_folder(root: Path, step: int, lines: list[dict], task: str = "gsm8k") -> Path:
    folder = root / "evals" / "run" / f"checkpoint-{step}"
    write_samples(folder, task, lines)
    return folder


def _raw_lines(folder: Path, text: str) -> None:
    [path] = folder.rglob("samples_*.jsonl")
    path.write_text(text)


def _with(k: int, **fields) -> list[dict]:
    lines = copy.deepcopy(GOOD)
    lines[k].update(fields)
    return lines


LM_EVAL_CASES = {
    # name: (lines of the second checkpoint, or raw text, what the one line names)
    "different doc_hash under one doc_id": (
        [GOOD[0], gsm8k_line(1, "#### 1234", "strict-match", "1234", 1.0, question="other"), GOOD[2]],
        "different documents: its doc_hash differs",
    ),
    "doc_id a float": (_with(1, doc_id=1.5), "field doc_id is 1.5, not an integer or a string"),
    "doc_id true": (_with(1, doc_id=True), "field doc_id is True"),
    "doc_id a list": (_with(1, doc_id=[1]), "field doc_id is [1]"),
    "doc_id NaN": ('{"doc_id": NaN, "filter": "strict-match", "filtered_resps": ["1"]}\n', "field doc_id is nan"),
    "filter a list": (_with(0, filter=["strict-match"]), "field filter is ['strict-match'], not a string"),
    "doc_hash a number": (_with(2, doc_hash=7), "field doc_hash is 7, not a string"),
    "loglik NaN": (
        '{"doc_id": 0, "filtered_resps": [["NaN", "False"], ["-1", "True"]], "acc": 1}\n',
        "neither text nor [loglik, is_greedy] pairs",
    ),
    "target an object": (_with(0, target={"a": 1}), "field target is {'a': 1}"),
    "deep JSON": ("[" * 100_000 + "]" * 100_000 + "\n", "nested too deeply"),
    "a 5000-digit doc_id": ('{"doc_id": ' + "9" * 5000 + "}\n", ":1: not valid JSON"),
}


@pytest.mark.parametrize("case", list(LM_EVAL_CASES))
def test_ingest_lm_eval_refuses(tmp_path, capsys, case):
    lines, needle = LM_EVAL_CASES[case]
    first = _lm_folder(tmp_path, 1, GOOD)
    second = _lm_folder(tmp_path, 2, GOOD)
    if isinstance(lines, str):
        _raw_lines(second, lines)
    else:
        write_samples(second, "gsm8k", lines)
    out = tmp_path / "records"
    refused(["ingest", "lm-eval", first, second, "--out", out, "--task", "gsm8k"], capsys, tmp_path, needle)
    assert not out.exists()


@pytest.mark.parametrize("case", ["different doc_hash under one doc_id", "doc_id a float", "deep JSON"])
def test_compare_logs_lm_eval_refuses(tmp_path, capsys, case):
    lines, needle = LM_EVAL_CASES[case]
    a, b = _lm_folder(tmp_path, 1, GOOD), _lm_folder(tmp_path, 2, GOOD)
    if isinstance(lines, str):
        _raw_lines(b, lines)
    else:
        write_samples(b, "gsm8k", lines)
    refused(["compare-logs", a, b], capsys, tmp_path, needle)


def test_two_lm_eval_tasks_under_one_task_are_refused_unless_named(tmp_path, capsys):
    folder = _lm_folder(tmp_path, 1, GOOD)
    write_samples(folder, "gsm8k_cot", GOOD)
    out = tmp_path / "records"
    line = refused(
        ["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k"], capsys, tmp_path, "lm-eval tasks 'gsm8k' and 'gsm8k_cot'"
    )
    assert "--task gsm8k" in line and "--lm-eval-task" in line
    refused(
        ["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k", "--lm-eval-task", "nope"],
        capsys,
        tmp_path,
        "--lm-eval-task nope: no samples of that lm-eval task",
    )
    code, said = run_cli(["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k", "--lm-eval-task", "gsm8k"], capsys)
    assert code == 0, said
    assert "gsm8k_cot" in said  # left out, said
    gen = read_frame(out, "generations")
    assert sorted(gen["item_id"]) == ["gsm8k-0", "gsm8k-1", "gsm8k-2"]


def test_different_items_pair_only_when_allowed_and_it_is_said(tmp_path, capsys):
    other = [GOOD[0], gsm8k_line(1, "#### 9", "strict-match", "9", 0.0, question="other"), GOOD[2]]
    a, b = _lm_folder(tmp_path, 1, GOOD), _lm_folder(tmp_path, 2, other)
    code, said = run_cli(["compare-logs", a, b, "--allow-different-items", "--json", "--draws", "200"], capsys)
    assert code == 0, said
    assert "paired anyway (--allow-different-items)" in said and "'gsm8k-1'" in said
    result = json.loads(said[said.index("{") :])
    assert result["settings"]["allow_different_items"] is True
    assert result["comparisons"][0]["different_items"] == 1
    out = tmp_path / "records"
    code, said = run_cli(["ingest", "lm-eval", a, b, "--out", out, "--allow-different-items"], capsys)
    assert code == 0, said
    assert "1 id(s) whose content differs" in said


# --------------------------------------------------------------------------- contradictions
def _unfiltered(root: Path) -> Path:
    """The docs' old recipe: no filter, so exact_match compares whole generations (0 on all)."""
    raws = ["3 + 15 = 18\n#### 18", "The answer is 1,234.", "7 - 2 = 4"]
    lines = [gsm8k_line(i, raw, "none", raw, 0.0) for i, raw in enumerate(raws)]
    return _lm_folder(root, 1, lines)


def test_a_log_contradicting_its_answers_is_said_and_rescore_fixes_it(tmp_path, capsys):
    folder = _unfiltered(tmp_path)
    out = tmp_path / "records"
    code, said = run_cli(["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k"], capsys)
    assert code == 0, said
    [warning] = [line for line in said.splitlines() if "the log says" in line]
    assert "the log says wrong on 2 item(s) whose answer equals the reference under the task's gsm8k rule" in warning
    assert "'gsm8k-0'" in warning and "--rescore" in warning
    assert not read_frame(out, "generations")["correct"].any()  # the log's, as it says
    code, said = run_cli(["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k", "--rescore", "--replace"], capsys)
    assert code == 0, said
    assert "--rescore: 3 of 3 samples" in said and "(2 changed)" in said
    gen = read_frame(out, "generations").set_index("item_id")
    assert gen["correct"].to_dict() == {"gsm8k-0": True, "gsm8k-1": True, "gsm8k-2": False}


def test_says_right_where_the_answer_differs(tmp_path, capsys):
    folder = _lm_folder(tmp_path, 1, [gsm8k_line(0, "#### 17", "strict-match", "17", 1.0)])
    code, said = run_cli(["ingest", "lm-eval", folder, "--out", tmp_path / "r", "--task", "gsm8k"], capsys)
    assert code == 0 and "the log says right on 1 item(s) whose answer differs from the reference" in said


def test_compare_logs_rescore_changes_the_numbers(tmp_path, capsys):
    a = _unfiltered(tmp_path / "a")
    b = _lm_folder(tmp_path / "b", 1, [gsm8k_line(i, "nothing", "none", "nothing", 0.0) for i in range(3)])
    args = ["compare-logs", a, b, "--task", "gsm8k", "--json", "--draws", "200"]
    code, said = run_cli(args, capsys)
    assert code == 0, said
    assert "the log says wrong on 2" in said
    assert json.loads(said[said.index("{") :])["comparisons"][0]["table"]["only_a"] == 0
    code, said = run_cli([*args, "--rescore"], capsys)
    result = json.loads(said[said.index("{") :])
    assert result["settings"]["rescore"] is True and result["comparisons"][0]["table"]["only_a"] == 2
    # a task that is no ckptsel task has no rule to re-score with
    c = _lm_folder(tmp_path / "c", 1, GOOD, task="arith")
    refused(["compare-logs", c, c, "--rescore"], capsys, tmp_path, "--rescore: no sample can be")


# --------------------------------------------------------------------------- inspect logs
def _inspect_log(path: Path, step: int, edit=None) -> Path:
    log = json.loads(JSON_LOG.read_text())
    log["eval"]["metadata"] = {"step": step, "trajectory": "run"}
    if edit:
        edit(log)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(log) if not isinstance(log, str) else log)
    return path


def _rotate(log: dict) -> None:
    """The samples' input and target rotated under unchanged ids."""
    s = log["samples"]
    moved = [(x["input"], x["target"]) for x in s]
    for k, x in enumerate(s):
        x["input"], x["target"] = moved[(k + 1) % len(s)]


def _sample(**fields):
    def edit(log: dict) -> None:
        log["samples"][1].update(fields)

    return edit


def _set(key, value):
    def edit(log: dict) -> None:
        log[key] = value

    return edit


INSPECT_CASES = {
    "rotated samples": (_rotate, "different documents: its input and target differs"),
    "epoch a string": (_sample(epoch="1"), "field epoch is '1', not an integer"),
    "epoch a float": (_sample(epoch=1.5), "field epoch is 1.5"),
    "epoch NaN": (_sample(epoch=float("nan")), "field epoch is nan"),
    "id a float": (_sample(id=2.5), "field id is 2.5, not a string or an integer"),
    "id true": (_sample(id=True), "field id is True"),
    "id an object": (_sample(id={"a": 1}), "field id is {'a': 1}"),
    "scores a list": (_sample(scores=["C"]), "field scores is ['C'], not an object"),
    "metadata a string": (_sample(metadata="test"), "field metadata is 'test', not an object"),
    "split an integer": (_sample(metadata={"split": 1}), "field split is 1, not a string"),
    "target an object": (_sample(target={"t": 1}), "field target is {'t': 1}"),
    "a sample not an object": (lambda log: log["samples"].append([1]), "sample 12: the sample is [1]"),
    "samples not a list": (_set("samples", {"a": 1}), "field samples is {'a': 1}, not a list"),
    "eval a list": (_set("eval", [1]), "field eval is [1], not an object"),
    "eval metadata a list": (lambda log: log["eval"].update(metadata=[1]), "field metadata is [1]"),
}


def _broken_pair(tmp_path: Path, case: str) -> tuple[Path, Path, str]:
    edit, needle = INSPECT_CASES[case]
    a = _inspect_log(tmp_path / "logs" / "a.json", 1)
    b = _inspect_log(tmp_path / "logs" / "b.json", 2, edit)
    return a, b, needle


@pytest.mark.parametrize("case", list(INSPECT_CASES))
def test_ingest_inspect_refuses(tmp_path, capsys, case):
    a, b, needle = _broken_pair(tmp_path, case)
    out = tmp_path / "records"
    refused(["ingest", "inspect", a, b, "--out", out, "--scorer", "match"], capsys, tmp_path, needle)
    assert not out.exists()


@pytest.mark.parametrize("case", ["rotated samples", "epoch a string", "epoch a float", "id a float"])
def test_compare_logs_inspect_refuses(tmp_path, capsys, case):
    a, b, needle = _broken_pair(tmp_path, case)
    refused(["compare-logs", a, b, "--scorer", "match"], capsys, tmp_path, needle)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("kind", [".json", ".eval"])
def test_deep_json_in_an_inspect_log(tmp_path, capsys, kind):
    path = tmp_path / "logs" / f"a{kind}"
    path.parent.mkdir()
    if kind == ".json":
        path.write_text(DEEP)
    else:
        log = json.loads(JSON_LOG.read_text())
        log.pop("samples")
        write_eval(path, {"header.json": json.dumps(log).encode(), "samples/q_epoch_1.json": DEEP.encode()})
    refused(["ingest", "inspect", path, "--out", tmp_path / "r"], capsys, tmp_path, "nested too deeply")


def test_an_eval_log_whose_sample_is_not_an_object(tmp_path, capsys):
    log = json.loads(JSON_LOG.read_text())
    log.pop("samples")
    log["eval"]["metadata"] = {"step": 1, "trajectory": "run"}
    members = {"header.json": json.dumps(log).encode(), "samples/q1_epoch_1.json": b'"a string"'}
    path = write_eval(tmp_path / "logs" / "a.eval", members) if (tmp_path / "logs").mkdir() is None else None
    refused(
        ["ingest", "inspect", path, "--out", tmp_path / "r"],
        capsys,
        tmp_path,
        "member samples/q1_epoch_1.json: the sample is 'a string', not an object",
    )


# --------------------------------------------------------------------------- lighteval details
def _lighteval_case(tmp_path: Path, edit) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    [src] = sorted((DATA / "lighteval" / "details" / "runs" / "tiny-a" / "checkpoint-80").rglob("*test*.parquet"))
    rows = pq.read_table(src).to_pylist()
    edit(rows[0])
    dest = tmp_path / "details" / "runs" / "tiny-a" / "checkpoint-80" / src.parent.name / src.name
    dest.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), dest)
    return tmp_path / "details"


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda r: r["doc"].update(gold_index=7), "doc.gold_index 7 is not an index of its 1 choices"),
        (lambda r: r["doc"].update(choices=None), "doc.gold_index 0 is not an index of its 0 choices"),
    ],
)
def test_lighteval_refuses(tmp_path, capsys, edit, needle):
    details = _lighteval_case(tmp_path, edit)
    refused(["ingest", "lighteval", details, "--out", tmp_path / "r"], capsys, tmp_path, needle)


# --------------------------------------------------------------------------- the page's recipe
def _page_blocks(kind: str) -> list[str]:
    return [textwrap.dedent(b) for b in re.findall(rf"```{kind}\n(.*?)```", PAGE.read_text(), re.S)]


def lm_eval_regex_filter(pattern: str, group_select: int, response: str, fallback: str = "[invalid]") -> str:
    """lm-eval 0.4.x's ``regex`` filter on one response (lm_eval/filters/extraction.py,
    RegexFilter.apply): the ``group_select``-th of ``findall``; of a tuple of groups the first
    non-empty one; stripped; the fallback where nothing matches."""
    match = re.compile(pattern).findall(response)
    if not match:
        return fallback
    match = match[group_select]
    if isinstance(match, tuple):
        match = next((m for m in match if m), fallback)
    return match.strip()


def test_the_pages_lm_eval_recipe_filters_answers_as_ckptsel_extracts_them():
    yaml = pytest.importorskip("yaml")
    [task] = [yaml.safe_load(b) for b in _page_blocks("yaml") if "output_type" in b]
    [chain] = [f["filter"] for f in task["filter_list"]]  # one filter: ingest needs no --filter
    assert [step["function"] for step in chain] == ["regex", "take_first"]
    regex = chain[0]
    [metric] = task["metric_list"]
    assert metric["metric"] == "exact_match"
    [examples] = [b for b in _page_blocks("json") if '"response"' in b]
    cases = [json.loads(line) for line in examples.splitlines()]
    assert len(cases) >= 5
    for case in cases:
        kept = lm_eval_regex_filter(regex["regex_pattern"], regex.get("group_select", 0), case["response"])
        for ignored in metric["regexes_to_ignore"]:  # exact_match's, on both sides
            kept = re.sub(ignored, "", kept)
        ours = extract("gsm8k", case["response"])
        assert ours == case["answer"], case
        assert kept == (ours or "[invalid]"), case  # what lm-eval compares is ckptsel's answer


# --------------------------------------------------------------------------- a log that hangs
@pytest.mark.parametrize("harness", ["lm-eval", "inspect", "lighteval"])
def test_a_fifo_log_is_refused_not_read_forever(tmp_path, capsys, harness):
    """A named pipe where a log file should be: reading it would block until someone writes."""
    import os
    import signal

    name = {
        "lm-eval": "checkpoint-1/m/samples_gsm8k_2025-03-04T05-06-07.jsonl",
        "inspect": "logs/2026-01-01T00-00-00_t_x.eval",
        "lighteval": "details/runs/checkpoint-1/2026-01-01T00-00-00/details_t|0_2026-01-01T00-00-00.parquet",
    }[harness]
    fifo = tmp_path / name
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    folder = tmp_path / name.split("/")[0]

    def hung(*_):
        raise AssertionError(f"ckptsel ingest {harness} blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    try:
        refused(["ingest", harness, folder, "--out", tmp_path / "r", "--trajectory", "t"], capsys, tmp_path, "not a regular file")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
