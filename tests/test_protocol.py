"""``ckptsel protocol freeze|check`` and ``ckptsel run``'s check: a study frozen before training
and then edited is refused with the difference; a protocol file edited after the fact is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptsel.cli import main
from ckptsel.errors import CkptselError
from ckptsel.study import check_protocol, freeze, load_spec, protocol_path, protocol_status
from ckptsel.workflows import StudyRun
from test_run_study import MINIMAL, gsm_rows, jsonl, write


@pytest.fixture
def study(tmp_path: Path) -> Path:
    for name, n in (("train", 10), ("val", 6), ("test", 6)):
        jsonl(tmp_path / f"{name}.jsonl", gsm_rows(n))
    return write(tmp_path / "s.toml", MINIMAL + "[measure]\nbatch_size = 4\n[analysis]\ndraws = 500\n")


def run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code


def test_freeze_then_check(study: Path, capsys) -> None:
    assert check_protocol(study) is None and protocol_status(None) == "not pre-registered"
    assert run(["protocol", "freeze", str(study)]) == 0
    out = capsys.readouterr().out
    record = json.loads(protocol_path(study).read_text())
    assert protocol_path(study).name == "s.toml.protocol.json"
    assert record["before_training"] and len(record["sha256"]) == 64 and record["frozen_at"]
    assert f"hash {record['sha256'][:12]}), before training" in out
    assert record["protocol"]["study"]["analysis"] == {"draws": 500}
    assert "batch_size" not in record["protocol"]["study"]["measure"]  # operational
    assert set(record["protocol"]["data_files"]) == {"train.file", "validation.file", "test.file"}
    assert check_protocol(study) == record
    assert run(["protocol", "check", str(study)]) == 0
    # an operational change keeps the protocol
    write(study, study.read_text().replace("batch_size = 4", "batch_size = 8"))
    assert check_protocol(study) == record
    # frozen once
    assert run(["protocol", "freeze", str(study)]) == 2
    assert "frozen once" in capsys.readouterr().err


def test_run_refuses_a_changed_study_with_the_difference(study: Path, capsys) -> None:
    freeze(study)
    job = StudyRun(load_spec(study), device="cpu")
    write(study, study.read_text().replace("draws = 500", "draws = 2000"))
    with pytest.raises(CkptselError, match=r"analysis\.draws: 500 -> 2000"):
        job.run(("prepare",))  # checked before the stage runs
    assert not (study.parent / ".ckptsel").exists()
    assert run(["run", str(study), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "differs from its protocol frozen at" in err and "analysis.draws: 500 -> 2000" in err
    # a data file changed after freezing is a change too
    write(study, study.read_text().replace("draws = 2000", "draws = 500"))
    assert check_protocol(study) is not None
    jsonl(study.parent / "val.jsonl", gsm_rows(7))
    with pytest.raises(CkptselError, match=r"validation\.file: "):
        check_protocol(study)


def test_run_set_may_not_touch_the_protocol(study: Path, capsys) -> None:
    freeze(study)
    assert run(["run", str(study), "--dry-run", "--set", "analysis.draws=100"]) == 2
    assert "only operational keys may be overridden" in capsys.readouterr().err
    assert run(["run", str(study), "--dry-run", "--set", "measure.batch_size=2"]) == 0
    assert "protocol frozen at" in capsys.readouterr().out


def test_protocol_file_edited_after_the_fact_is_caught(study: Path, capsys) -> None:
    freeze(study)
    path = protocol_path(study)
    record = json.loads(path.read_text())
    record["protocol"]["study"]["analysis"]["draws"] = 9999  # rewrite history, keep the hash
    path.write_text(json.dumps(record))
    assert run(["protocol", "check", str(study)]) == 2
    assert "edited after it was frozen" in capsys.readouterr().err
    assert run(["run", str(study), "--dry-run"]) == 2
