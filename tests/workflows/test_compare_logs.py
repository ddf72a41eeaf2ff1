"""``ckptsel compare-logs LOG_A LOG_B``: two evaluation logs compared paired, as ``ckptsel
compare`` compares two checkpoints of ingested records (the same numbers), on logs inspect-ai
and lighteval wrote (tests/data/harness_logs, see tests/ingest/test_ingest_harnesses.py) and on
lm-eval ``--log_samples`` files written here in lm-eval's format; Holm and Benjamini–Hochberg
against hand-computed answers."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from tests.clirun import run_cli

from ckptsel.errors import CkptselError
from ckptsel.stats.paired import adjust_pvalues, mcnemar_exact
from ckptsel.workflows.advise.comparison import CLUSTERED
from ckptsel.workflows.advise.planning import ItemsNeeded, exact_items_needed, mcnemar_power, mcnemar_power_bound

DATA = Path(__file__).parents[1] / "data" / "harness_logs"
EVALS = sorted((DATA / "inspect").glob("*.eval"))
A80, B80 = EVALS[2], EVALS[5]  # tiny-a and tiny-b at step 80: they differ on 6 of 12 samples
DETAILS = DATA / "lighteval" / "details" / "runs"
DRAWS = ["--draws", "2000"]
SAME = ("items", "clusters", "accuracy_a", "accuracy_b", "difference", "table", "mcnemar_p")


def _json(args: list, capsys) -> dict:
    code, said = run_cli([*args, "--json"], capsys)
    assert code == 0, said
    return json.loads(said[said.index("{") :])


# --------------------------------------------------------------------------- Holm / BH
def test_holm_and_bh_match_hand_computed_values():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005, 0.01, 0.03, 0.04; Holm: 4·0.005, 3·0.01, 2·0.03, max(1·0.04, 0.06)
    np.testing.assert_allclose(adjust_pvalues(p, "holm"), [0.03, 0.06, 0.06, 0.02])
    # BH: 4·p/rank = 0.02, 0.02, 0.04, 0.04, then the running minimum from the largest
    np.testing.assert_allclose(adjust_pvalues(p, "bh"), [0.02, 0.04, 0.04, 0.02])
    np.testing.assert_allclose(adjust_pvalues(np.array([0.4, 0.9]), "holm"), [0.8, 0.9])
    assert adjust_pvalues(np.array([0.7]), "bh")[0] == 0.7


# --------------------------------------------------------------------------- inspect
def _ingested_compare(tmp_path, capsys, ingest: list, split_args: list) -> dict:
    records = tmp_path / "records"
    for args in ingest:
        code, said = run_cli(["ingest", *args, "--out", records, "--trajectory", "T", *split_args], capsys)
        assert code == 0, said
    return _json(["compare", records, "0", "1", "--trajectory", "T", *DRAWS], capsys)


def test_two_inspect_logs_give_the_numbers_of_ingested_records(tmp_path, capsys):
    logs = _json(["compare-logs", A80, B80, "--scorer", "match", *DRAWS], capsys)
    assert [logs["a"]["harness"], logs["b"]["harness"]] == ["inspect", "inspect"]
    records = _ingested_compare(
        tmp_path,
        capsys,
        [
            ["inspect", A80, "--scorer", "match", "--steps", f"{A80.name}=0"],
            ["inspect", B80, "--scorer", "match", "--steps", f"{B80.name}=1"],
        ],
        [],
    )
    by_split = {c["split"]: c for c in logs["comparisons"]}
    assert sorted(by_split) == ["test", "validation"]  # the samples say their split
    for split, c in by_split.items():
        assert {k: c[k] for k in SAME} == {k: records["splits"][split][k] for k in SAME}, split
    val = by_split["validation"]
    assert val["table"] == {"both_correct": 0, "only_a": 2, "only_b": 3, "both_wrong": 3}
    assert val["clusters"] == 7 and "mcnemar_method" in val  # q01, q01b share a group
    p = [by_split[s]["mcnemar_p"] for s in ("test", "validation")]
    holm = [by_split[s]["mcnemar_p_adjusted"] for s in ("test", "validation")]
    np.testing.assert_allclose(holm, adjust_pvalues(np.array(p), "holm"))
    assert val["items_needed"] is not None and val["items_needed"] > val["items"]


def test_text_output_and_a_mix_of_inspect_and_lighteval(capsys):
    code, said = run_cli(["compare-logs", A80, DETAILS / "tiny-a" / "checkpoint-80", "--scorer", "match", *DRAWS], capsys)
    assert code == 0, said
    assert "(inspect, 12 samples)" in said and "(lighteval, 12 samples)" in said
    assert "Holm p" in said and "tiny_gsm" in said


# --------------------------------------------------------------------------- lm-eval
def _line(doc_id: int, correct: bool) -> dict:
    """One lm-eval --log_samples line (generate_until task, one filter)."""
    q = f"What is {doc_id} + 1?"
    answer = str(doc_id + 1) if correct else "0"
    return {
        "doc_id": doc_id,
        "doc": {"question": q, "answer": str(doc_id + 1)},
        "target": str(doc_id + 1),
        "arguments": {"gen_args_0": {"arg_0": f"Question: {q}\nAnswer:", "arg_1": {"until": ["\n"], "do_sample": False}}},
        "resps": [[f" {answer}"]],
        "filtered_resps": [f" {answer}"],
        "filter": "none",
        "metrics": ["exact_match"],
        "doc_hash": hashlib.sha256(q.encode()).hexdigest(),
        "exact_match": float(correct),
    }


def _samples(folder: Path, task: str, correct: np.ndarray, keep: np.ndarray | None = None) -> None:
    sub = folder / "tiny__model"
    sub.mkdir(parents=True, exist_ok=True)
    docs = range(len(correct)) if keep is None else np.flatnonzero(keep)
    lines = [json.dumps(_line(int(i), bool(correct[i]))) for i in docs]
    (sub / f"samples_{task}_2026-11-28T07-00-00.000000.jsonl").write_text("\n".join(lines) + "\n")


@pytest.fixture()
def lm_eval_runs(tmp_path):
    rng = np.random.default_rng(7)
    a, b = rng.random(60) < 0.6, rng.random(60) < 0.4
    keep = np.ones(60, bool)
    keep[[3, 17, 41]] = False  # three samples B's log lacks
    run = tmp_path / "run"
    _samples(run / "checkpoint-0", "arith", a)
    _samples(run / "checkpoint-1", "arith", b, keep)
    return run, a, b, keep


def test_two_lm_eval_logs_give_the_numbers_of_ingested_records(lm_eval_runs, tmp_path, capsys):
    run, a, b, keep = lm_eval_runs
    logs = _json(["compare-logs", run / "checkpoint-0", run / "checkpoint-1", "--split", "validation", *DRAWS], capsys)
    [c] = logs["comparisons"]
    assert (c["split"], c["task"], c["items"]) == ("validation", "arith", 57)
    assert c["not_shared"] == {"only_in_a": 3, "only_in_b": 0}
    x, y = a[keep], b[keep]
    assert c["table"]["only_a"] == int((x & ~y).sum()) and c["table"]["only_b"] == int((~x & y).sum())
    assert c["difference"]["mean"] == pytest.approx(100 * (x.mean() - y.mean()))
    assert c["mcnemar_p_adjusted"] == c["mcnemar_p"]  # one comparison: nothing to adjust
    records = _ingested_compare(tmp_path, capsys, [["lm-eval", run / "checkpoint-0", run / "checkpoint-1"]], ["--split", "validation"])
    assert {k: c[k] for k in SAME} == {k: records["splits"]["validation"][k] for k in SAME}
    # (records keep a trajectory's items measured at every checkpoint: the 3 are gone there)


def test_several_tasks_one_comparison_each_and_adjusted_p(tmp_path, capsys):
    rng = np.random.default_rng(3)
    a_dir, b_dir = tmp_path / "A", tmp_path / "B"
    for task, (pa, pb) in {"t1": (0.8, 0.3), "t2": (0.5, 0.5), "t3": (0.6, 0.4)}.items():
        _samples(a_dir, task, rng.random(40) < pa)
        _samples(b_dir, task, rng.random(40) < pb)
    for method in ("holm", "bh"):
        out = _json(["compare-logs", a_dir, b_dir, "--correction", method, *DRAWS], capsys)
        assert [c["task"] for c in out["comparisons"]] == ["t1", "t2", "t3"]
        p = np.array([c["mcnemar_p"] for c in out["comparisons"]])
        adjusted = [c["mcnemar_p_adjusted"] for c in out["comparisons"]]
        np.testing.assert_allclose(adjusted, adjust_pvalues(p, method))
        assert out["settings"]["correction"] == method


# --------------------------------------------------------------------------- refusals
def test_no_shared_samples_bad_paths_and_options_are_one_line_exit_2(tmp_path, capsys):
    _samples(tmp_path / "A", "arith", np.ones(5, bool))
    keep = np.zeros(10, bool)
    keep[5:] = True
    _samples(tmp_path / "B", "arith", np.ones(10, bool), keep)  # docs 5..9: none in A
    (tmp_path / "notes.txt").write_text("x")
    cases = [
        (["compare-logs", tmp_path / "A", tmp_path / "B"], "share no sample id"),
        (["compare-logs", tmp_path / "A", tmp_path / "missing"], "not found"),
        (["compare-logs", tmp_path / "A", tmp_path / "notes.txt"], "not an evaluation log"),
        (["compare-logs", tmp_path / "A", A80, "--scorer", "match"], "share no task"),
        (["compare-logs", tmp_path / "A", tmp_path / "A", "--correction", "bonf"], "holm or bh"),
    ]
    for args, needle in cases:
        code, said = run_cli(args, capsys)
        assert code == 2, said
        lines = said.strip().splitlines()
        assert len(lines) == 1 and needle in lines[0] and "Traceback" not in said, said


# --------------------------------------------------------------------------- inspect mockllm
def _mock_output(output_type, usage_type, answer: str):
    """mockllm's answer, its token usage given (else inspect counts tokens with tiktoken, which
    downloads its vocabulary)."""
    out = output_type.from_content("mockllm/model", answer)
    out.usage = usage_type(input_tokens=8, output_tokens=1, total_tokens=9)
    return out


@pytest.fixture(scope="module")
def mockllm_logs(tmp_path_factory):
    """Two logs inspect_ai writes for its mockllm model answering 12 samples (6 groups of 2):
    A right where i % 3 != 0, B right where i % 4 != 0."""
    inspect_ai = pytest.importorskip("inspect_ai", reason="inspect_ai not installed")
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    root = tmp_path_factory.mktemp("mockllm")
    samples = [Sample(id=f"q{i:02d}", input=f"What is {i} + 1?", target=str(i + 1), metadata={"group": f"g{i // 2}"}) for i in range(12)]
    paths = []
    for name, wrong_every in (("a", 3), ("b", 4)):
        answers = [str(i + 1) if i % wrong_every else "0" for i in range(12)]
        model = get_model("mockllm/model", custom_outputs=[_mock_output(ModelOutput, ModelUsage, a) for a in answers])
        task = inspect_ai.Task(dataset=samples, solver=generate(), scorer=match(), name="arith")
        [log] = inspect_ai.eval(task, model=model, log_dir=str(root / name), display="none", max_samples=1, max_connections=1)
        assert log.status == "success", log.error
        paths.append(Path(log.location))
    return paths


def test_mockllm_inspect_logs_clustered_and_equal_to_ingested_records(mockllm_logs, tmp_path, capsys):
    a, b = mockllm_logs
    logs = _json(["compare-logs", a, b, "--split", "validation", *DRAWS], capsys)
    [c] = logs["comparisons"]
    # both right: i in {1,2,5,7,10,11}; only A: {4,8}; only B: {3,6,9}; both wrong: {0}
    assert c["table"] == {"both_correct": 6, "only_a": 2, "only_b": 3, "both_wrong": 1}
    assert (c["items"], c["clusters"], c["mcnemar_method"]) == (12, 6, CLUSTERED)
    records = _ingested_compare(
        tmp_path, capsys, [["inspect", a, "--steps", f"{a.name}=0"], ["inspect", b, "--steps", f"{b.name}=1"]], ["--split", "validation"]
    )
    assert {k: c[k] for k in SAME} == {k: records["splits"]["validation"][k] for k in SAME}


# --------------------------------------------------------------------------- issue 44 item 6
def _table_correct(both: int, only_a: int, only_b: int, neither: int) -> tuple[np.ndarray, np.ndarray]:
    """A's and B's correctness over ``both + only_a + only_b + neither`` items, in that order."""
    a = np.repeat([True, True, False, False], [both, only_a, only_b, neither])
    b = np.repeat([True, False, True, False], [both, only_a, only_b, neither])
    return a, b


def _three_task_logs(tmp_path: Path, tasks: dict) -> tuple[Path, Path]:
    a_dir, b_dir = tmp_path / "A", tmp_path / "B"
    for task, counts in tasks.items():
        a, b = _table_correct(*counts)
        _samples(a_dir, task, a)
        _samples(b_dir, task, b)
    return a_dir, b_dir


# t1: 11 only A, 2 only B of 40: exact p = 2·92/8192 = 0.0225 (resolved alone); Holm's ×3 = 0.067
ADJUSTED_TASKS = {"t1": (14, 11, 2, 13), "t2": (15, 5, 5, 15), "t3": (16, 6, 3, 15)}


@pytest.mark.parametrize("correction", ["holm", "bh"])
def test_the_verdict_follows_the_adjusted_p(tmp_path, capsys, correction):
    a_dir, b_dir = _three_task_logs(tmp_path, ADJUSTED_TASKS)
    out = _json(["compare-logs", a_dir, b_dir, "--correction", correction, *DRAWS], capsys)
    t1 = out["comparisons"][0]
    assert t1["task"] == "t1" and t1["mcnemar_p"] == pytest.approx(2 * 92 / 8192)
    assert t1["mcnemar_p"] <= 0.05 < t1["mcnemar_p_adjusted"]
    assert t1["mcnemar_p_adjusted"] == pytest.approx(3 * 2 * 92 / 8192)  # Holm and BH alike here
    name = {"holm": "Holm", "bh": "BH"}[correction]
    why = f"the {name}-adjusted McNemar test's p = {t1['mcnemar_p_adjusted']:.3g} > 0.05"
    d = t1["difference"]
    assert d["unresolved"] is True and d["cannot_resolve"] == why, d
    assert d["lo"] > 0  # the interval alone excludes 0: the adjusted p decides
    for c in out["comparisons"][1:]:  # p > 0.05 already: unresolved by their own test
        assert c["difference"]["unresolved"] is True
    code, said = run_cli(["compare-logs", a_dir, b_dir, "--correction", correction, *DRAWS], capsys)
    assert code == 0, said
    row = next(line for line in said.splitlines() if "│ t1 " in line)
    assert f"unresolved: {why}" in row, said
    # alone (one task: the adjusted p is the raw one), the same table reads resolved
    one = tmp_path / "one"
    alone = _three_task_logs(one, {"t1": ADJUSTED_TASKS["t1"]})
    [c] = _json(["compare-logs", *alone, "--correction", correction, *DRAWS], capsys)["comparisons"]
    assert c["mcnemar_p_adjusted"] == c["mcnemar_p"] and c["difference"]["unresolved"] is False
    code, said = run_cli(["compare-logs", *alone, *DRAWS], capsys)
    assert code == 0 and "adjusted McNemar test's p =" not in said, said


def _brute_power(n: int, p_a: float, p_b: float, level: float) -> float:
    """P(the exact McNemar test rejects at 1 − level), summed over every (only A, only B,
    concordant) outcome of ``n`` items, in exact integer binomial coefficients."""
    total = 0.0
    for a in range(n + 1):
        for b in range(n + 1 - a):
            if mcnemar_exact(a, b) <= 1 - level + 1e-12:
                total += math.comb(n, a) * math.comb(n - a, b) * p_a**a * p_b**b * (1 - p_a - p_b) ** (n - a - b)
    return total


def _brute_powers(ns: np.ndarray, p_a: float, p_b: float, level: float) -> np.ndarray:
    """:func:`_brute_power` for larger ``n``: every outcome's multinomial probability (log
    gamma) and the rejections from a table of :func:`mcnemar_exact`."""
    top = int(max(ns))
    lg = np.array([math.lgamma(k + 1.0) for k in range(top + 1)])
    a, b = np.meshgrid(np.arange(top + 1), np.arange(top + 1), indexing="ij")
    rejects = np.zeros((top + 1, top + 1), bool)
    for i, j in zip(*np.nonzero(a + b <= top), strict=True):
        rejects[i, j] = mcnemar_exact(int(i), int(j)) <= 1 - level + 1e-12
    out = []
    for n in ns:
        c = n - a - b
        ok = rejects & (c >= 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            log = (
                lg[n]
                - lg[a]
                - lg[b]
                - lg[np.clip(c, 0, None)]
                + np.where(a > 0, a * np.log(p_a), 0.0)
                + np.where(b > 0, b * np.log(p_b), 0.0)
                + np.where(c > 0, c * np.log(max(1 - p_a - p_b, 0.0)), 0.0)
            )
        out.append(float(np.exp(log[ok]).sum()))
    return np.array(out)


POWER_CASES = [(0.3, 0.1), (0.5, 0.5), (0.9, 0.0), (0.0, 0.4), (0.05, 0.01), (1.0, 0.0), (0.2, 0.2), (0.6, 0.3), (0.0, 1.0), (5 / 9, 0.0)]


@pytest.mark.parametrize("level", [0.95, 0.99, 0.8])
def test_exact_power_equals_the_brute_force_sum(level):
    for p_a, p_b in POWER_CASES:
        ns = np.arange(13)[::-1]  # any order
        ref = np.array([_brute_power(int(n), p_a, p_b, level) for n in ns])
        np.testing.assert_allclose(mcnemar_power(ns, p_a, p_b, level), ref, rtol=0, atol=1e-12)
    n = np.arange(1, 201)
    ref = _brute_powers(n[-30:], 0.12, 0.04, level)
    np.testing.assert_allclose(mcnemar_power(n, 0.12, 0.04, level)[-30:], ref, rtol=0, atol=1e-12)
    for p_a, p_b in [(0.12, 0.04), (0.3, 0.0), (0.25, 0.2), (0.02, 0.05)]:  # the bound is one
        exact = mcnemar_power(np.arange(1, 3001), p_a, p_b, level)
        assert (mcnemar_power_bound(np.arange(1, 3001), p_a, p_b, level) <= exact + 1e-9).all()


def test_items_needed_is_where_exact_power_reaches_and_stays_at_80_percent(lm_eval_runs, capsys):
    run, *_ = lm_eval_runs
    [c] = _json(["compare-logs", run / "checkpoint-0", run / "checkpoint-1", *DRAWS], capsys)["comparisons"]
    t, items = c["table"], c["items"]
    cases = [(t["only_a"], t["only_b"], items), (15, 6, 80), (3, 0, 4), (5, 0, 9), (1, 0, 5)]
    for only_a, only_b, n in cases:
        answer = exact_items_needed(only_a, only_b, n)
        assert answer.items is not None and answer.note is None
        ns = np.arange(answer.items, answer.items + 21)
        brute = _brute_powers(ns, only_a / n, only_b / n, 0.95)
        assert (brute >= 0.8).all(), (only_a, only_b, n, brute)
        assert answer.power == pytest.approx(brute[0], abs=1e-6)
        assert _brute_powers([answer.items - 1], only_a / n, only_b / n, 0.95)[0] < 0.8
    assert c["items_needed"] == exact_items_needed(t["only_a"], t["only_b"], items).items
    assert c["items_needed_power"] >= 0.8 and c["items_needed_note"] is None
    # the definition, on a search limit small enough to scan every n exactly
    for only_a, only_b, n in [(60, 40, 1000), (15, 6, 80), (3, 0, 4), (33, 20, 100)]:
        power = mcnemar_power(np.arange(1, 5001), only_a / n, only_b / n)
        short = np.flatnonzero(power < 0.8)
        expect = int(short[-1]) + 2 if len(short) else 1
        got = exact_items_needed(only_a, only_b, n, limit=5000)
        assert got.items == (expect if expect <= 5000 else None), (only_a, only_b, n)


def test_items_needed_hostile_tables(tmp_path, capsys):
    assert exact_items_needed(1, 0, 1) == ItemsNeeded(6, 1.0)  # n = 1, every item discordant
    assert exact_items_needed(1, 0, 1, level=0.99).items == 8
    assert exact_items_needed(0, 0, 7) == ItemsNeeded(None, note="the logs agree on every item")
    assert exact_items_needed(4, 4, 9) == ItemsNeeded(None, note="no observed difference")
    far = exact_items_needed(501, 499, 5000)  # the closed form says ~9.8 million
    assert far.items is None and far.note == "over 100000 items"
    assert exact_items_needed(501, 499, 5000, limit=50).note == "over 50 items"
    # p_b = 0 (all discordance one way) and p_a = 0: the same answer by symmetry
    assert exact_items_needed(5, 0, 9) == exact_items_needed(0, 5, 9)
    assert mcnemar_power([0, 5, 6, 7], 0.0, 1.0).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert mcnemar_power([], 0.3, 0.1).shape == (0,) and mcnemar_power([9], 0.0, 0.0)[0] == 0.0
    with pytest.raises(CkptselError, match="not probabilities"):
        mcnemar_power([3], 0.7, 0.6)
    # A right on 1 of 5 samples, B on none (the closed form refused this table: 20 pp "impossible"
    # at agreement 0.8 by rounding) and a one-sample pair of logs: answers, no refusal
    for name, counts in {"one_way": (0, 1, 0, 4), "single": (0, 1, 0, 0)}.items():
        a_dir, b_dir = _three_task_logs(tmp_path / name, {"arith": counts})
        [c] = _json(["compare-logs", a_dir, b_dir, *DRAWS], capsys)["comparisons"]
        n = sum(counts)
        assert c["items_needed"] == exact_items_needed(1, 0, n).items
        assert _brute_powers([c["items_needed"]], 1 / n, 0.0, 0.95)[0] >= 0.8
        code, said = run_cli(["compare-logs", a_dir, b_dir, *DRAWS], capsys)
        assert code == 0 and f"│ {c['items_needed']} " in said.replace("│\n", "│ \n"), said
    # no difference: null with the reason, printed as –
    a_dir, b_dir = _three_task_logs(tmp_path / "even", {"arith": (3, 2, 2, 3)})
    [c] = _json(["compare-logs", a_dir, b_dir, *DRAWS], capsys)["comparisons"]
    assert c["items_needed"] is None and c["items_needed_note"] == "no observed difference"
