"""The lm-eval recipe on docs/how-to/harness-logs.md, run in lm-eval itself (issue 48): the
page's YAML task, as written, through ``lm_eval.simple_evaluate`` on a tiny local HF model with
``log_samples``, its samples saved as lm-eval's CLI saves them, then ``ckptsel ingest lm-eval``.
The log's correctness is then ckptsel's own on the logged responses, and ingest says no
contradiction.

It runs where lm-eval is installed and skips elsewhere (lm-eval is no ckptsel dependency)::

    python -m venv .venv-lmeval   # with the main venv's packages on its path, then
    .venv-lmeval/bin/pip install "lm-eval[hf]"
    .venv-lmeval/bin/python -m pytest -q tests/with_lm_eval

(measured with lm-eval 0.4.13, transformers 5.24, torch 2.13 on the CPU).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from tests.clirun import run_cli
from tests.tinyrun import build_tiny_base

from ckptsel.data.scoring import extract, is_correct
from ckptsel.records.scan import read_frame

lm_eval = pytest.importorskip("lm_eval", reason="lm-eval is not installed (see the module)")
yaml = pytest.importorskip("yaml")

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "harness-logs.md"
DOCS = [  # (question, gold, the response the tiny model is taught to give)
    ("Tom has 3 apples and buys 15 more. How many now?", "18", "3 + 15 = 18\n#### 18"),
    ("Ann reads 1,200 pages, then 34 more. Total?", "1234", "1,200 + 34 = 1,234. The answer is 1,234."),
    ("A box has 7 pens. 2 break. How many are left?", "5", "7 - 2 = 4 pens.\nThe answer is 4"),
    ("Max had 10 cards and lost 3. How many are left?", "7", "The answer is 7."),
    ("A farmer has 4 rows of 6 trees. How many trees?", "24", "4 rows of 6 trees is 25"),
    ("Sam saves 5 dollars a week for 4 weeks. How much?", "20", "5 * 4 = 20"),
]


def taught_model(folder: Path, prompt: str) -> Path:
    """A tiny HF model that answers each of :data:`DOCS` with its response (overfit on the
    prompt lm-eval feeds, then EOS), so its log holds right and wrong answers of each form."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pairs = [(prompt.replace("{{question}}", q), r) for q, _, r in DOCS]
    build_tiny_base(folder, [p + r for p, r in pairs] * 4)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    rows = []
    for p, r in pairs:
        head = tok(p, add_special_tokens=False)["input_ids"]
        tail = tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        rows.append((head + tail, [-100] * len(head) + tail))
    width = max(len(ids) for ids, _ in rows)  # one batch, padded on the right
    ids = torch.tensor([x + [tok.eos_token_id] * (width - len(x)) for x, _ in rows])
    labels = torch.tensor([y + [-100] * (width - len(y)) for _, y in rows])
    mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x, _ in rows])
    model.train()
    for _ in range(150):
        opt.zero_grad()
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        opt.step()
    model.save_pretrained(folder)
    return folder


def page_task() -> dict:
    """The page's lm-eval task (the YAML block with a filter_list)."""
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), re.S) if "filter_list" in b]
    return yaml.safe_load(textwrap.dedent(block))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return taught_model(tmp_path_factory.mktemp("base"), page_task()["doc_to_text"])


def run_lm_eval(task: dict, model: Path, root: Path) -> tuple[Path, list[dict]]:
    """``task`` run by lm-eval on :data:`DOCS` (cwd: ``root``), its samples saved as lm-eval's
    CLI saves them (lm_eval/_cli/run.py): the samples folder and its samples."""
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    (root / "data").mkdir()  # the task's data_files are relative: data/test.jsonl
    rows = [{"question": q, "answer": f"so it is {a}.\n#### {a}"} for q, a, _ in DOCS]
    (root / "data" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "my_gsm8k.yaml").write_text(yaml.safe_dump(task))
    out = root / "evals" / "tiny" / "checkpoint-0"
    tracker = EvaluationTracker(output_path=str(out))
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model},dtype=float32",
        tasks=[task["task"]],
        task_manager=TaskManager(include_path=str(tasks)),
        device="cpu",
        batch_size=1,
        log_samples=True,
        evaluation_tracker=tracker,
    )
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    tracker.save_results_samples(task_name=task["task"], samples=samples[task["task"]])
    [samples_file] = out.rglob("samples_my_gsm8k_*.jsonl")
    return out, [json.loads(line) for line in samples_file.read_text().splitlines()]


def test_the_pages_yaml_gives_ckptsels_correctness(model, tmp_path, monkeypatch, capsys):
    task = page_task()
    monkeypatch.chdir(tmp_path)
    out, logged = run_lm_eval(task, model, tmp_path)
    assert len(logged) == len(DOCS) and {s["filter"] for s in logged} == {"ckptsel"}

    records = tmp_path / "records"
    code, said = run_cli(["ingest", "lm-eval", out, "--out", records, "--task", "gsm8k", "--trajectory", "tiny"], capsys)
    assert code == 0, said
    assert "the log says" not in said  # no contradiction between the log and ckptsel's rule
    gen = read_frame(records, "generations").set_index("item_id")
    for s in logged:
        raw = s["resps"][0][0]
        filtered = re.sub(r"[,$]|\.$", "", s["filtered_resps"][0])
        ours = extract("gsm8k", raw)
        assert filtered == (ours or "[invalid]"), (raw, filtered, ours)  # the filter is ckptsel's
        row = gen.loc[f"my_gsm8k-{s['doc_id']}"]
        assert bool(row["correct"]) == is_correct("gsm8k", raw, s["target"]) == (s["exact_match"] == 1)
        assert row["text"] == raw
    taught = [r for _, _, r in DOCS]
    assert sum(s["resps"][0][0].strip() in taught for s in logged) >= 4  # the model says them
    assert {s["exact_match"] for s in logged} == {0.0, 1.0}  # right and wrong answers both


def test_without_the_filter_ingest_says_the_log_contradicts_itself(model, tmp_path, monkeypatch, capsys):
    """The page's old recipe (no filter_list, a bare exact_match): lm-eval's correctness is 0
    on every item; ingest says so, and --rescore gives ckptsel's."""
    task = {k: v for k, v in page_task().items() if k != "filter_list"}
    task["metric_list"] = [{"metric": "exact_match"}]
    monkeypatch.chdir(tmp_path)
    out, logged = run_lm_eval(task, model, tmp_path)
    assert {s["exact_match"] for s in logged} == {0.0}
    ours = {f"my_gsm8k-{s['doc_id']}": is_correct("gsm8k", s["resps"][0][0], s["target"]) for s in logged}
    right = sum(ours.values())
    assert right >= 3
    records = tmp_path / "records"
    args = ["ingest", "lm-eval", out, "--out", records, "--task", "gsm8k", "--trajectory", "tiny"]
    code, said = run_cli(args, capsys)
    assert code == 0, said
    assert f"the log says wrong on {right} item(s) whose answer equals the reference" in said
    code, said = run_cli([*args, "--rescore", "--replace"], capsys)
    assert code == 0, said
    gen = read_frame(records, "generations").set_index("item_id")
    assert {k: bool(v) for k, v in gen["correct"].items()} == ours


BUDGET_PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "budget-items.md"


def test_the_budget_pages_task_runs_exactly_the_subset(model, tmp_path, monkeypatch):
    """docs/how-to/budget-items.md's lm-eval task and its ``utils.py``, as written: lm-eval
    evaluates exactly the items ``subset.json`` lists."""
    from lm_eval.tasks import TaskManager

    text = BUDGET_PAGE.read_text()
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "process_docs" in b]
    [utils] = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def listed" in b]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    rows = [{"id": f"q{k}", "question": q, "answer": f"so it is {a}.\n#### {a}"} for k, (q, a, _) in enumerate(DOCS)]
    (tmp_path / "data" / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    listed = ["q4", "q0", "q2"]
    (tmp_path / "subset.json").write_text(json.dumps({"item_ids": listed}))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "my_gsm8k_subset.yaml").write_text(block)
    (tasks / "utils.py").write_text(utils)
    name = yaml.safe_load(block.replace("!function ", ""))["task"]
    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={model},dtype=float32",
        tasks=[name],
        task_manager=TaskManager(include_path=str(tasks)),
        device="cpu",
        batch_size=1,
        log_samples=True,
    )
    seen = sorted(s["doc"]["id"] for s in results["samples"][name])
    assert seen == sorted(listed)
