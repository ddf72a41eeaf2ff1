"""What a study costs before it runs (issue 47): ``run --dry-run`` and ``measure --dry-run`` count
the prompt, generation and NLL tokens left to do with the study's tokenizer (a brute-force count
by hand agrees), time them from a measured rate only (a probe here, or a BENCHMARKS.md row, each
named), and ``--json`` carries the cost; the paper's shape (``simulate --study``) is costed too."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from clirun import run_cli
from tinyrun import build_tiny_base, make_gsm8k_rows, save_lora_checkpoints, write_jsonl

pytestmark = pytest.mark.usefixtures("one_thread")

MAX_NEW = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    pytest.importorskip("peft")
    texts = [r["question"] + " " + r["answer"] for r in make_gsm8k_rows(40)]
    return build_tiny_base(tmp_path_factory.mktemp("base") / "base", texts)


def study_file(folder: Path, base_model: str) -> Path:
    """A study trained here (2 checkpoints, seed 1) on 5 validation and 4 test GSM8K items."""
    write_jsonl(folder / "train.jsonl", make_gsm8k_rows(6, seed=3))
    write_jsonl(folder / "val.jsonl", make_gsm8k_rows(5, seed=1))
    write_jsonl(folder / "test.jsonl", make_gsm8k_rows(4, seed=2))
    path = folder / "study.toml"
    path.write_text(
        f'schema = 2\n[study]\nbase_model = "{base_model}"\nseeds = [1]\n'
        '[train]\ntask = "gsm8k"\nfile = "train.jsonl"\n[validation]\ntask = "gsm8k"\nfile = "val.jsonl"\n'
        f'[test]\ntask = "gsm8k"\nfile = "test.jsonl"\n[measure]\nmax_new_tokens = {MAX_NEW}\ndevice = "cpu"\n'
        '[[configurations]]\nname = "a"\nsteps = 2\nsave_every = 1\n'
    )
    return path


def by_hand(folder: Path, tokenizer=None) -> tuple[int, int, int]:
    """(items, prompt tokens, NLL target tokens) of one checkpoint, item by item: the Alpaca
    prompt with the tokenizer's special tokens, the response alone then EOS (or characters / 4)."""
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items

    items = load_items("gsm8k", folder / "val.jsonl") + load_items("gsm8k", folder / "test.jsonl")
    if tokenizer is None:
        prompt = sum(math.ceil(len(format_prompt(it.instruction)) / 4) for it in items)
        return len(items), prompt, sum(math.ceil(len(it.response) / 4) + 1 for it in items)
    prompt = sum(len(tokenizer(format_prompt(it.instruction))["input_ids"]) for it in items)
    nll = sum(len(tokenizer(it.response, add_special_tokens=False)["input_ids"]) + 1 for it in items)
    return len(items), prompt, nll


def cost_of(args: list, capsys) -> dict:
    code, out = run_cli([*args, "--json"], capsys)
    assert code == 0, out
    return json.loads(out[out.index("{") :])["cost"]


def test_run_dry_run_counts_tokens_as_by_hand(base: Path, tmp_path: Path, capsys) -> None:
    from transformers import AutoTokenizer

    study = study_file(tmp_path, str(base))
    code, out = run_cli(["run", study, "--dry-run"], capsys)
    assert code == 0, out
    n, prompt, nll = by_hand(tmp_path, AutoTokenizer.from_pretrained(str(base)))
    line = next(x for x in out.splitlines() if x.startswith("cost:"))
    assert line == (
        f"cost: {2 * n} generations and {2 * n} NLL items to do; {2 * prompt:,} prompt tokens, "
        f"at most {2 * n * MAX_NEW:,} generation tokens ({MAX_NEW} new at most each), {2 * nll:,} NLL target tokens"
    )
    assert f"tokens counted with the tokenizer of {base}" in out
    said = run_cli(["run", study, "--dry-run", "--json"], capsys)[1]
    answer = json.loads(said[said.index("{") :])
    from ckptsel.cli.output import JSON_SCHEMAS

    assert list(answer) == list(JSON_SCHEMAS["run"])
    cost = answer["cost"]
    assert (cost["prompt_tokens"], cost["nll_tokens"], cost["generation_tokens"]) == (2 * prompt, 2 * nll, 2 * n * MAX_NEW)
    # the quickstart's size on a CPU: the tiny-Llama row of BENCHMARKS.md, timed by hand
    row = 1 / (1 / 446.9 + 1 / 784.7) * 16  # items/s × its 16 new tokens
    assert "bench_measure" in cost["rate"]["source"] and cost["rate"]["tokens_per_s"] == pytest.approx(row)
    assert cost["seconds"] == pytest.approx(2 * n * MAX_NEW / row, abs=0.05)


def test_named_device_row_and_chars_fallback(tmp_path: Path, capsys) -> None:
    """A base model that is not here: characters / 4, said; an 8B name on --device h200: the
    Llama-3-8B row's 7.7 items/s at 64 new tokens, by hand; no row: no estimate, and how."""
    study = study_file(tmp_path, "nowhere/Model-8B")
    code, out = run_cli(["run", study, "--dry-run", "--device", "h200"], capsys)
    assert code == 0, out
    assert "4 characters per token (the tokenizer is not on this machine: nowhere/Model-8B)" in out
    cost = cost_of(["run", study, "--dry-run", "--device", "h200"], capsys)
    n, prompt, nll = by_hand(tmp_path)
    assert (cost["prompt_tokens"], cost["nll_tokens"]) == (2 * prompt, 2 * nll)
    assert cost["seconds"] == pytest.approx(2 * n * MAX_NEW / (7.7 * 64), abs=0.05)
    assert "Llama-3-8B shape" in cost["rate"]["source"] and cost["note"] is None
    cost = cost_of(["run", study, "--dry-run", "--device", "cpu"], capsys)  # no CPU row for 8B
    assert cost["seconds"] is None and "--probe measures one here" in cost["note"]
    code, out = run_cli(["run", study, "--dry-run", "--device", "cpu"], capsys)
    assert "time: no estimate (no measured rate on cpu for a model of 8B parameters" in out


def test_probe_rate_times_the_work(base: Path, tmp_path: Path, capsys) -> None:
    cost = cost_of(["run", study_file(tmp_path, str(base)), "--dry-run", "--probe"], capsys)
    rate = cost["rate"]
    assert rate["tokens_per_s"] > 0 and rate["source"].startswith("a probe here: 9 items of the pool x ")
    assert cost["seconds"] == pytest.approx(cost["generation_tokens"] / rate["tokens_per_s"], abs=0.05)


def test_probe_refusals_are_one_line(base: Path, tmp_path: Path, capsys) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(base, broken)
    for weights in broken.glob("*.safetensors"):
        weights.unlink()
    study = study_file(tmp_path, str(broken))
    for extra, said in (
        (["--dry-run", "--probe"], f"--probe: cannot load the base model {broken} here"),
        (["--probe"], "--probe times the work of a --dry-run"),
        (["--dry-run", "--probe", "--device", "h200"], "--probe measures this machine's device"),
        (["--device", "h200"], "names a benchmarked GPU's measured rate, for --dry-run only; to run on a GPU: --device cuda"),
    ):
        code, out = run_cli(["run", study, *extra], capsys)
        assert code == 2 and said in out, out
        assert "Traceback" not in out and len(out.strip().splitlines()[-1]) < 400


def test_measure_dry_run_after_measuring_has_nothing_to_do(base: Path, tmp_path: Path, capsys) -> None:
    save_lora_checkpoints(base, tmp_path / "run-s1", [5, 10])
    val = write_jsonl(tmp_path / "val.jsonl", make_gsm8k_rows(3, seed=1))
    test = write_jsonl(tmp_path / "test.jsonl", make_gsm8k_rows(2, seed=2))
    args = ["measure", tmp_path / "run-s1", "--task", "gsm8k", "--validation", val, "--test", test, "--out", tmp_path / "rec"]
    args += ["--max-new-tokens", "4", "--batch-size", "4"]
    before = cost_of([*args, "--dry-run"], capsys)
    assert (before["generations"], before["generation_tokens"]) == (10, 40)
    code, out = run_cli([*args, "--no-progress"], capsys)
    assert code == 0, out
    code, out = run_cli([*args, "--dry-run"], capsys)
    assert code == 0 and "run-s1: 2 checkpoints; nothing measured (--dry-run)" in out, out
    assert "cost: 0 generations and 0 NLL items to do; 0 prompt tokens, at most 0 generation tokens" in out
    after = cost_of([*args, "--dry-run"], capsys)
    assert (after["prompt_tokens"], after["nll_tokens"], after["seconds"]) == (0, 0, 0.0)


def test_paper_shape_costs(tmp_path: Path, capsys) -> None:
    """``simulate --preset paper --study``: the preset's gsm8k configurations with 3 seeds as a
    study; its dry run counts the preset's checkpoints and pools and times them on an H200."""
    code, out = run_cli(["simulate", tmp_path / "shape", "--preset", "paper", "--study"], capsys)
    assert code == 0, out
    files = sorted(p.parent.name for p in (tmp_path / "shape").glob("*/study.toml"))
    assert files == ["commonsense", "gsm8k", "gsm8k-4-seeds", "math", "math-4-seeds"]
    code, out = run_cli(["run", tmp_path / "shape" / "gsm8k" / "study.toml", "--dry-run", "--device", "h200"], capsys)
    assert code == 0, out
    assert "24 trajectories x 528 checkpoints in all x 2343 items: 1237104 generations to do" in out
    assert "at most 633,397,248 generation tokens (512 new at most each)" in out
    assert "time: about 14.9 days" in out and "Llama-3-8B shape" in out
