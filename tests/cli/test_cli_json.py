"""``--json`` on every command that reports (issue 39): stdout is one JSON object with exactly
its command's keys (``ckptsel.cli.output.JSON_SCHEMAS``, from which docs/reference/json.md is
generated), and what it holds is what the command computed; the lines a person reads go to
stderr. ``measure --json`` and ``watch --json`` are tested in test_watch, ``run --json`` in
test_run_study."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckptsel.cli.output import JSON_SCHEMAS
from ckptsel.results.summary import Summary

import recordsgen as rg
from clirun import exit_code


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    kw = {"n_configs": 3, "seeds": 2, "T": (3, 4), "n_val": (40, 60), "n_test": (20, 30)}
    gen, nll = rg.tables(rg.random_study(np.random.default_rng(7), **kw))
    return rg.write(tmp_path_factory.mktemp("json") / "records", gen, nll)


def json_of(args: list, capsys, code: int = 0) -> tuple[dict, str]:
    """(the JSON object on stdout, stderr) of ``ckptsel ARGS``, checked to exit ``code``."""
    assert exit_code(args) == code
    said = capsys.readouterr()
    return json.loads(said.out), said.err


def test_analyze_and_verify_json(records, tmp_path, capsys):
    out = tmp_path / "results"
    answer, err = json_of(["analyze", records, "--out", out, "--permutations", "8", "--draws", "200", "--no-report", "--json"], capsys)
    assert list(answer) == list(JSON_SCHEMAS["analyze"])
    stored = (out / "summary.json").read_text()
    assert answer["summary"] == json.loads(stored)  # summary.json's object, as written
    assert Summary.from_dict(answer["summary"]).keep is not None
    assert answer["summary_file"] == str(out / "summary.json") and answer["report_file"] is None
    assert answer["choices_sha256"] == json.loads(stored)["choices_sha256"]
    assert "wrote" in err and "Main table" not in err  # the person's lines on stderr

    answer, err = json_of(["verify", out, "--json"], capsys)
    assert list(answer) == list(JSON_SCHEMAS["verify"])
    assert answer["ok"] is True and answer["error"] is None and err == ""
    assert any("reproduced exactly" in line for line in answer["checks"])
    data = json.loads(stored)
    data["seed"] += 1  # a summary that the records do not give
    (out / "summary.json").write_text(json.dumps(data, indent=1) + "\n")
    answer, _ = json_of(["verify", out, "--json"], capsys, code=1)
    assert answer["ok"] is False and answer["checks"] == [] and "summary.json" in answer["error"]


def test_select_compare_plan_json_keys(records, capsys):
    settings = ["--partitions", "8", "--draws", "50", "--bootstrap-partitions", "4"]
    one, _ = json_of(["select", records, "--trajectory", "c0-s0", *settings, "--json"], capsys)
    assert list(one) == list(JSON_SCHEMAS["select"])
    every, _ = json_of(["select", records, "--all", *settings, "--json"], capsys)
    assert list(every) == list(JSON_SCHEMAS["select --all"])
    assert every["selections"]["c0-s0"] == one
    assert [r["trajectory"] for r in every["trajectories"]] == list(every["selections"])
    steps = one["steps"]
    pair, _ = json_of(["compare", records, steps[0], steps[-1], "--trajectory", "c0-s0", "--draws", "200", "--json"], capsys)
    assert list(pair) == list(JSON_SCHEMAS["compare"]) and pair["a"]["step"] == steps[0]
    plan, _ = json_of(["plan", "--delta", "3", "--agreement", "0.8", "--json"], capsys)
    assert list(plan) == list(JSON_SCHEMAS["plan"]) and plan["pilot"] is None


def test_every_schema_is_documented_and_every_reporting_command_has_json():
    import inspect

    from ckptsel.cli import app  # noqa: F401 - the commands, as the docs hook reads them
    from ckptsel.cli.app import COMMANDS

    with_json = set()
    for name, command in COMMANDS:
        if "as_json" in inspect.signature(command).parameters:
            with_json.add(name)
    assert with_json == {"average", "measure", "analyze", "verify", "budgets", "watch", "select", "compare", "compare-logs", "plan", "run"}
    assert {c.split()[0] for c in JSON_SCHEMAS} == with_json
    import importlib.util
    from pathlib import Path

    hook = Path(__file__).parents[2] / "docs" / "_hooks" / "generate.py"
    spec = importlib.util.spec_from_file_location("docs_hook", hook)
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)
    page = generate.json_output()
    for command, keys in JSON_SCHEMAS.items():
        assert f"## `ckptsel {command} --json`" in page
        assert all(f"| `{key}` |" in page for key in keys)


def test_piped_tables_keep_whole_numbers(records, capsys):
    """Piped (stdout not a terminal, as under capsys), ``compare``'s table keeps each interval
    on one line: numbers are not folded at 80 columns (issue 39)."""
    from ckptsel.results.estimate import Estimate, fmt

    args = ["compare", records, 25, 75, "--trajectory", "c0-s0", "--draws", "200"]
    pair, _ = json_of([*args, "--json"], capsys)
    assert exit_code(args) == 0
    text = capsys.readouterr().out
    for split in ("validation", "test"):
        shown = fmt(Estimate.read(pair["splits"][split]["difference"], split))
        assert len(shown) > 20 and any(shown in line for line in text.splitlines()), (shown, text)
    assert any("(p = " in line and "reject a true null" in line for line in text.splitlines())
