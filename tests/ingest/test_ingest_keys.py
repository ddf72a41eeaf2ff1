"""``ingest`` gives the right rows or stops (issue 29): keys already recorded (here by
``measure``) are refused in one line, nothing written, unless ``--replace``, which says how many
it replaced; a trajectory keeps its configuration; ``--out`` at a URL writes the records there
through the one writer (a local S3 server), as every other ``--out`` does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.records.scan import read_frame
from ckptsel.records.store import upsert_records
from lmevalcase import gsm8k_line, write_samples

INSPECT = Path(__file__).parents[1] / "data" / "harness_logs" / "inspect"
EVALS = sorted(INSPECT.glob("*.eval"))


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    got = capsys.readouterr()
    return e.value.code or 0, got.out, got.err


def _bytes(folder: Path) -> dict:
    """The records' own files (not what readers derive from them: the cache of loaded arrays,
    part files, and the packs, which a reader rewrites when they list other unit versions, as
    after a copy of the folder: units are new files there)."""
    return {
        p.relative_to(folder): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if not {".cache", ".parts", ".packs"} & set(p.parts)
    }


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Records ``measure`` wrote: trajectory run-a, steps 10/20/30, gsm8k, 6 validation + 4 test
    items, generations and NLL."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from storagecase import tiny_case

    return tiny_case(tmp_path_factory).records


def _lm_eval_over(root: Path, measured: Path, steps=(10, 20)) -> tuple[list[Path], str]:
    """lm-eval samples of run-a's test items at ``steps``, every answer "7" (wrong): what an
    lm-eval run of the same checkpoints would write. Returns the folders and the id prefix."""
    gen = read_frame(measured, "generations")
    ids = sorted(gen.loc[gen["split"] == "test", "item_id"].unique())
    prefix = ids[0].rsplit("-", 1)[0]
    assert ids == sorted(f"{prefix}-{i}" for i in range(len(ids)))  # <task>-<index>, as lm-eval
    folders = []
    for step in steps:
        folder = root / "evals" / "run-a" / f"checkpoint-{step}"
        lines = [gsm8k_line(i % 3, "#### 7", "strict-match", "7", 0.0) for i in range(len(ids))]
        for i, line in enumerate(lines):
            line["doc_id"] = i
        write_samples(folder, "gsm8k", lines)
        folders.append(folder)
    return folders, prefix


def test_keys_measure_recorded_are_refused_unless_replace(measured, tmp_path, capsys):
    out = tmp_path / "records"
    shutil.copytree(measured, out)
    before, rows_before = _bytes(out), read_frame(out, "generations")
    folders, prefix = _lm_eval_over(tmp_path, measured)
    args = ["ingest", "lm-eval", *folders, "--out", out, "--task", "gsm8k", "--id-prefix", prefix]
    code, stdout, err = _cli(args, capsys)
    assert code == 2 and "ingested" not in stdout
    [line] = err.strip().splitlines()  # one line, naming the first clashing key and how many
    assert f"{out}: 8 generation row(s) of these logs are already recorded there" in line
    assert f"(first: trajectory 'run-a' step 10 test item '{prefix}-0')" in line
    assert "--replace" in line
    assert _bytes(out) == before  # nothing written: the measured answers are intact
    code, stdout, _ = _cli([*args, "--replace"], capsys)
    assert code == 0
    assert f"replaced 8 generation rows and 0 NLL rows already recorded in {out}" in stdout
    after = read_frame(out, "generations")
    assert len(after) == len(rows_before)
    mine = (after["split"] == "test") & after["step"].isin([10, 20])
    assert set(after.loc[mine, "answer"]) == {"7"} and not after.loc[mine, "correct"].any()
    key = ["trajectory", "step", "split", "item_id"]
    keep = rows_before.set_index(key).drop(columns="text")
    kept = after[~mine].set_index(key).drop(columns="text")
    pd.testing.assert_frame_equal(kept, keep.loc[kept.index])  # the rest as measure wrote it
    assert len(kept) == len(keep) - 8


def test_new_checkpoints_of_a_measured_trajectory_are_added(measured, tmp_path, capsys):
    out = tmp_path / "records"
    shutil.copytree(measured, out)
    n = len(read_frame(out, "generations"))
    folders, prefix = _lm_eval_over(tmp_path, measured, steps=(40,))
    code, stdout, _ = _cli(["ingest", "lm-eval", *folders, "--out", out, "--task", "gsm8k", "--id-prefix", prefix], capsys)
    assert code == 0 and "replaced" not in stdout
    assert len(read_frame(out, "generations")) == n + 4


def test_a_trajectory_keeps_its_configuration(tmp_path, capsys):
    """Rows recorded for cfgA-s42 under configuration cfgA-s42 (the trajectory name, as before
    names were read): new rows under cfgA are refused, an explicit --configuration matches."""
    out = tmp_path / "records"
    row = {
        "trajectory": "cfgA-s42",
        "configuration": "cfgA-s42",
        "task": "gsm8k",
        "step": 1,
        "split": "test",
        "item_id": "x",
        "group": "x",
        "subtask": "",
        "answer": "",
        "correct": False,
    }
    upsert_records(out, generations=pd.DataFrame([row]))
    before = _bytes(out)
    folder = tmp_path / "evals" / "cfgA-s42" / "checkpoint-100"
    write_samples(folder, "gsm8k", [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0)])
    args = ["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k"]
    code, _, err = _cli(args, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "trajectory 'cfgA-s42' is already recorded with configuration 'cfgA-s42', not 'cfgA'" in err
    assert _bytes(out) == before
    code, _, _ = _cli([*args, "--configuration", "cfgA-s42"], capsys)
    assert code == 0 and set(read_frame(out, "generations")["configuration"]) == {"cfgA-s42"}


def test_out_at_a_url_writes_the_records_there(s3, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    local = tmp_path / "local"
    args = ["ingest", "inspect", *EVALS, "--scorer", "match", "--out"]
    assert _cli([*args, local], capsys)[0] == 0
    url = s3.url("records")
    code, stdout, _ = _cli([*args, url], capsys)
    assert code == 0 and stdout.strip().splitlines()[-1].endswith(f"-> {url}")
    assert not (tmp_path / "s3:").exists()  # no local folder named after the URL
    assert any(k.startswith("units/generations/") for k in s3.keys("records"))
    pd.testing.assert_frame_equal(read_frame(url, "generations"), read_frame(local, "generations"))
    # the same rows again: refused at the URL too, nothing written; --replace replaces them
    keys = s3.keys("records")
    code, _, err = _cli([*args, url], capsys)
    assert code == 2 and "72 generation row(s) of these logs are already recorded" in err
    assert s3.keys("records") == keys
    code, stdout, _ = _cli([*args, url, "--replace"], capsys)
    assert code == 0 and "replaced 72 generation rows and 0 NLL rows" in stdout
    pd.testing.assert_frame_equal(read_frame(url, "generations"), read_frame(local, "generations"))
