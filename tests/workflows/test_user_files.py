"""ckptsel never overwrites a file a user owns (issue 30, item 11): ``split`` never writes over
its own input nor over output files no earlier split wrote; ``simulate`` never replaces records
that no simulation wrote; ``--force`` says otherwise in so many words."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from clirun import run_cli


def refused(args: list, capsys, *needles: str) -> None:
    code, err = run_cli(args, capsys)
    assert code == 2, err
    assert "Traceback" not in err, err
    assert err.strip().startswith("error:"), err
    text = " ".join(err.split())
    for needle in needles:
        assert needle in text, text


def pool(path: Path, n: int = 30) -> Path:
    rows = [{"query": f"q{i} plus {i}", "response": f"so #### {i}", "original_question": f"g{i % 12}"} for i in range(n)]
    path.write_text(json.dumps(rows, indent=4) + "\n")
    return path


def test_split_never_overwrites_its_own_input(tmp_path, capsys):
    src = pool(tmp_path / "train.json")
    before = src.read_bytes()
    refused(["split", src, "--out", tmp_path], capsys, "overwrite its own input")
    refused(["split", src, "--out", tmp_path, "--force"], capsys, "overwrite its own input")
    assert src.read_bytes() == before
    assert not (tmp_path / "validation.json").exists()


def test_split_keeps_a_foreign_lineage_unless_forced(tmp_path, capsys):
    src, out = pool(tmp_path / "pool.json"), tmp_path / "out"
    out.mkdir()
    mine = out / "lineage.json"
    mine.write_text('{"my": "notes"}\n')
    refused(["split", src, "--out", out], capsys, "lineage.json exists", "--force")
    assert mine.read_text() == '{"my": "notes"}\n'
    assert not (out / "train.json").exists()
    code, err = run_cli(["split", src, "--out", out, "--force"], capsys)
    assert code == 0, err
    assert "source_sha256" in json.loads(mine.read_text())


def test_split_replaces_what_an_earlier_split_wrote_but_not_an_edited_file(tmp_path, capsys):
    src, out = pool(tmp_path / "pool.json"), tmp_path / "out"
    assert run_cli(["split", src, "--out", out], capsys)[0] == 0
    assert run_cli(["split", src, "--out", out, "--seed", "7"], capsys)[0] == 0  # its own files
    assert json.loads((out / "lineage.json").read_text())["seed"] == 7
    (out / "train.json").write_text("[]\n")  # edited by a person since
    refused(["split", src, "--out", out], capsys, "train.json exists", "changed since")
    assert (out / "train.json").read_text() == "[]\n"


def test_simulate_never_replaces_measured_records(tmp_path, capsys):
    out = tmp_path / "records"
    out.mkdir()
    frame = pd.DataFrame({"trajectory": ["mine"], "step": [1]})
    frame.to_parquet(out / "generations.parquet")
    before = (out / "generations.parquet").read_bytes()
    refused(["simulate", out], capsys, "no simulation wrote", "generations.parquet", "--force")
    assert (out / "generations.parquet").read_bytes() == before
    assert not (out / "nll.parquet").exists()
    assert run_cli(["simulate", out, "--force"], capsys)[0] == 0
    assert (out / "simulation.json").is_file()


def test_simulate_rewrites_its_own_folder(tmp_path, capsys):
    out = tmp_path / "sim"
    assert run_cli(["simulate", out], capsys)[0] == 0
    first = (out / "nll.parquet").read_bytes()
    assert run_cli(["simulate", out], capsys)[0] == 0  # a simulation's folder: no --force
    assert (out / "nll.parquet").read_bytes() == first
