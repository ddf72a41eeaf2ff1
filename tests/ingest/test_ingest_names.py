"""What ``ingest`` names the rows (issue 29): configuration and seed read from trajectory names
exactly as ``ckptsel run`` reads them, the mapping said once; each note said once per ingest,
not once per log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptsel.ingest.inspect import ingest_inspect
from ckptsel.ingest.lm_eval import ingest_lm_eval
from ckptsel.records.scan import read_frame
from ckptsel.study.configuration import configuration_and_seed, seed_of, trajectory_name
from lmevalcase import gsm8k_checkpoint, gsm8k_line, write_samples

INSPECT = Path(__file__).parents[1] / "data" / "harness_logs" / "inspect"
[JSON_LOG] = sorted(INSPECT.glob("*.json"))


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as e:
        main(args)
    got = capsys.readouterr()
    return e.value.code or 0, got.out, got.err


def test_names_read_as_run_reads_them():
    for conf in ("cfgA", "lora-r8", "x.y_z"):
        for seed in (0, 42, 1234):
            name = trajectory_name(conf, seed)  # how run names what it trains
            assert configuration_and_seed(name) == (conf, seed) and seed_of(name) == seed
    assert configuration_and_seed("lora_seed7") == ("lora", 7) == ("lora", seed_of("lora_seed7"))
    assert configuration_and_seed("run-seed-3") == ("run", 3)
    for plain in ("lora-r8", "run-x", "s42", "tiny-a"):
        assert configuration_and_seed(plain) == (plain, None)
    from ckptsel.workflows.study_run.context import seed_of as old_home

    assert old_home is seed_of  # the old import still works


def _seeded_evals(root: Path) -> list[Path]:
    """lm-eval folders of two seeds of one configuration: evals/cfgA-s42, evals/cfgA-s43."""
    return [
        gsm8k_checkpoint(root / "evals" / f"cfgA-s{seed}" / "checkpoint-100", ["#### 18", "#### 1234", "#### 4"], [True, seed == 42, False])
        for seed in (42, 43)
    ]


def test_seeds_of_one_configuration_are_one_configuration(tmp_path, capsys):
    folders = _seeded_evals(tmp_path)
    out = tmp_path / "records"
    lines = []
    for folder in folders:  # one trajectory per invocation (the folder's parent names it)
        code, stdout, _ = _cli(["ingest", "lm-eval", str(folder), "--out", str(out), "--task", "gsm8k", "--filter", "strict-match"], capsys)
        assert code == 0
        lines += [x for x in stdout.splitlines() if x.startswith("trajectories:")]
    gen = read_frame(out, "generations")
    assert sorted(set(zip(gen["trajectory"], gen["configuration"], strict=True))) == [("cfgA-s42", "cfgA"), ("cfgA-s43", "cfgA")]
    assert lines == [  # the mapping, said once per ingest
        "trajectories: cfgA-s42 -> configuration cfgA, seed 42",
        "trajectories: cfgA-s43 -> configuration cfgA, seed 43",
    ]


def test_an_explicit_configuration_still_wins(tmp_path, capsys):
    folders = _seeded_evals(tmp_path)
    out = tmp_path / "records"
    code, stdout, _ = _cli(
        ["ingest", "lm-eval", str(folders[0]), "--out", str(out), "--task", "gsm8k", "--filter", "strict-match", "--configuration", "mine"],
        capsys,
    )
    assert code == 0 and "cfgA-s42 -> configuration mine, seed 42" in stdout
    assert set(read_frame(out, "generations")["configuration"]) == {"mine"}
    rows = ingest_lm_eval(
        [folders[1]], out=tmp_path / "r2", task="gsm8k", filter_name="strict-match", trajectory="plain", note=lambda m: None
    )
    assert set(rows["configuration"]) == {"plain"}  # no seed in the name: its own configuration


def _not_greedy_logs(tmp_path: Path) -> list[Path]:
    """Three inspect logs (steps 10, 20, 30) that do not record greedy decoding."""
    out = []
    for step in (10, 20, 30):
        log = json.loads(JSON_LOG.read_text())
        log["eval"]["model"] = f"hf/runs/tiny-c/checkpoint-{step}"
        log["eval"]["model_args"]["do_sample"] = True
        p = tmp_path / f"step{step}.json"
        p.write_text(json.dumps(log))
        out.append(p)
    return out


def test_a_note_is_said_once_per_ingest_not_once_per_log(tmp_path):
    logs = _not_greedy_logs(tmp_path)
    notes: list[str] = []
    ingest_inspect(logs, out=tmp_path / "records", scorer="match", note=notes.append)
    greedy = [n for n in notes if "greedy" in n]
    assert len(greedy) == 1, notes
    assert "3 log(s)" in greedy[0] and all(str(p) in greedy[0] for p in logs)


def test_lm_eval_passed_over_files_are_one_note(tmp_path):
    folders = []
    for step in (1, 2):
        folder = tmp_path / "run" / f"checkpoint-{step}"
        old = [gsm8k_line(0, "#### 3", "strict-match", "3", 0.0)]
        write_samples(folder, "gsm8k", old, stamp="2024-01-01T00-00-00.000001")
        write_samples(folder, "gsm8k", [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0)])
        folders.append(folder)
    notes: list[str] = []
    rows = ingest_lm_eval(folders, out=tmp_path / "rec", task="gsm8k", note=notes.append)
    assert rows["answer"].tolist() == ["18", "18"]
    assert len(notes) == 1 and "2 log(s)" in notes[0] and notes[0].count("2024-01-01") == 2
