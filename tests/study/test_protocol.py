"""``ckptsel protocol freeze|check`` and ``ckptsel run``'s check: a study frozen before training
and then edited is refused with the difference; a protocol file edited after the fact is caught."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckptsel.cli.app import main
from ckptsel.errors import CkptselError
from ckptsel.study.protocol import check_protocol, freeze, protocol_path, protocol_status
from ckptsel.study.spec import load_spec
from ckptsel.workflows.study_run.job import StudyRun

from tinyrun import MINIMAL, gsm_rows, jsonl, write


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


# ------------------------------------------------------------------ the chain protocol → results
def _resha(record: dict) -> dict:
    """A protocol record rewritten after the fact *with* a fresh hash (a careful forger: the
    SHA-256 is not a signature)."""
    import hashlib

    keys = ("schema", "study_file", "frozen_at", "before_training", "protocol", "evidence")
    hashed = record["protocol"] if record.get("schema", 1) == 1 else {k: record.get(k) for k in keys}
    canon = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {**record, "sha256": hashlib.sha256(canon.encode()).hexdigest()}


@pytest.fixture
def bound(study: Path, tmp_path: Path) -> tuple[Path, Path]:
    """Simulated records analysed under the study's frozen protocol (draws = 500 there)."""
    from ckptsel.sim.simulate import write_simulation
    from ckptsel.workflows.analysis import analyze

    write(study, study.read_text() + "permutations = 20\n")  # in [analysis]
    record = freeze(study)
    records = write_simulation(tmp_path / "sim", "small")
    out = tmp_path / "res"
    summary = analyze(records, out, permutations=20, draws=500, protocol=record, protocol_file=str(protocol_path(study)))
    assert summary.protocol.status == protocol_status(record)
    return out, protocol_path(study)


def test_results_say_and_copy_the_frozen_protocol(bound, capsys) -> None:
    out, pfile = bound
    record = json.loads(pfile.read_text())
    said = json.loads((out / "summary.json").read_text())["protocol"]
    assert said == {
        "status": protocol_status(record),
        "sha256": record["sha256"],
        "frozen_at": record["frozen_at"],
        "before_training": True,
    }
    assert said["status"].startswith("protocol frozen at ") and said["status"].endswith(", before training")
    assert (out / "protocol.json").read_bytes() == pfile.read_bytes()
    assert json.loads((out / "run.json").read_text())["protocol_file"] == str(pfile)
    assert run(["verify", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"{pfile} unedited, SHA-256 {record['sha256']}" in text.replace("\n", "")
    assert "protocol → choices" in text and "reproduced exactly" in text


def test_verify_catches_a_protocol_file_edited_after_the_fact(bound, capsys) -> None:
    out, pfile = bound
    record = json.loads(pfile.read_text())
    edited = json.loads(json.dumps(record))
    edited["protocol"]["study"]["analysis"]["draws"] = 2000  # history rewritten, hash kept
    pfile.write_text(json.dumps(edited))
    assert run(["verify", str(out)]) == 1
    assert "edited after it was frozen" in capsys.readouterr().err
    pfile.write_text(json.dumps(_resha(edited)))  # ... and rehashed: not the results' protocol
    assert run(["verify", str(out)]) == 1
    assert "is not the one the results were bound to" in capsys.readouterr().err.replace("\n", "")
    pfile.write_text(json.dumps(record))  # the original again (any formatting)
    assert run(["verify", str(out)]) == 0


def test_verify_catches_results_not_made_under_their_protocol(bound, tmp_path, capsys) -> None:
    """A summary that names a protocol whose analysis settings it did not use, or whose copy
    is missing, fails; a copy in a folder that says "not pre-registered" fails too."""
    from ckptsel.results import publish

    out, pfile = bound
    copy = out / "protocol.json"
    other = json.loads(copy.read_text())
    other["protocol"]["study"]["analysis"]["draws"] = 2000
    other = _resha(other)
    summary = json.loads((out / "summary.json").read_text())
    summary["protocol"]["sha256"] = other["sha256"]
    for path, data in ((copy, other), (out / "summary.json", summary)):
        path.write_text(json.dumps(data, indent=1) + "\n")
    assert run(["verify", str(out), "--protocol", str(tmp_path / "absent.json")]) == 1
    assert "analysis.draws: 2000 -> 500" in capsys.readouterr().err
    assert publish.MANIFEST_FILE  # (the manifest would catch these edits too; the chain comes first)
    copy.unlink()
    assert run(["verify", str(out)]) == 1
    assert "protocol.json" in capsys.readouterr().err


def test_an_analysis_that_differs_from_its_protocol_is_refused(study: Path, tmp_path: Path) -> None:
    from ckptsel.sim.simulate import write_simulation
    from ckptsel.workflows.analysis import analyze

    record = freeze(study)
    records = write_simulation(tmp_path / "sim", "small")
    with pytest.raises(
        CkptselError,
        match=r"differ from the protocol frozen at (.|\n)*"
        r"analysis\.permutations: 200 -> 20\n  analysis\.draws: 500 -> 300",
    ):
        analyze(records, tmp_path / "res", permutations=20, draws=300, protocol=record)
    assert not (tmp_path / "res").exists()  # refused before any work


# ------------------------------------------------------------ the record cannot be forged (issue 30)
def _base_model(study: Path) -> Path:
    """A local base model folder (``base_model = "base"`` in the study): config, tokenizer and a
    small safetensors file (8-byte header length, JSON header, data)."""
    base = study.parent / "base"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text('{"model_type": "gpt2", "n_layer": 2}\n')
    (base / "tokenizer.json").write_text('{"version": "1.0"}\n')
    (base / "README.md").write_text("a tiny model\n")  # not part of the identity
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    (base / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    return base


def test_freeze_force_after_training_then_edited_times_are_caught(study: Path, capsys) -> None:
    """``freeze --force`` after work started says so; editing frozen_at / before_training
    afterwards no longer matches the hash (on d664043 it did: the hash covered the protocol only)."""
    (study.parent / ".ckptsel").mkdir()
    (study.parent / ".ckptsel" / "fingerprint.json").write_text("{}\n")  # the runner had started
    assert run(["protocol", "freeze", str(study), "--force"]) == 0
    assert "after work had started" in capsys.readouterr().out
    path = protocol_path(study)
    record = json.loads(path.read_text())
    assert record["before_training"] is False and record["evidence"]["work_started"] is True
    for edit in (
        {"before_training": True},
        {"frozen_at": "2020-01-01T00:00:00+00:00"},
        {"before_training": True, "frozen_at": "2020-01-01T00:00:00+00:00"},
    ):
        path.write_text(json.dumps({**record, **edit}, indent=2))
        assert run(["protocol", "check", str(study)]) == 2
        err = capsys.readouterr().err
        assert "edited after it was frozen" in err and len(err.strip().splitlines()) == 1, err
        assert run(["run", str(study), "--dry-run"]) == 2
        assert "edited after it was frozen" in capsys.readouterr().err


def test_a_rehashed_before_training_claim_meets_older_checkpoints(study: Path, capsys) -> None:
    """A forger who also rehashes the record (SHA-256 is no signature) is caught by the clock
    evidence: a checkpoint older than frozen_at contradicts "before training"."""
    ckpt = study.parent / "runs" / "a-s1" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    record = freeze(study)
    assert record["before_training"] is False and record["evidence"]["checkpoints"] == ["a-s1/checkpoint-1"]
    forged = _resha({**record, "before_training": True, "evidence": {**record["evidence"], "checkpoints": []}})
    protocol_path(study).write_text(json.dumps(forged))
    old = datetime_ts(record["frozen_at"]) - 3600
    os.utime(ckpt, (old, old))  # trained an hour before the freeze
    assert run(["protocol", "check", str(study)]) == 2
    err = capsys.readouterr().err
    assert "checkpoint-1: written at" in err and "which says before training" in err, err
    assert len(err.strip().splitlines()) == 1


def test_editing_the_base_model_after_the_freeze_is_refused(study: Path, capsys) -> None:
    base = _base_model(study)
    record = freeze(study)
    files = record["protocol"]["base_model"]["files"]
    assert set(files) == {"config.json", "tokenizer.json", "model.safetensors"}  # README: not the model
    assert "header_sha256" in files["model.safetensors"]
    assert run(["protocol", "check", str(study)]) == 0
    (base / "README.md").write_text("edited\n")
    assert run(["protocol", "check", str(study)]) == 0
    capsys.readouterr()
    (base / "config.json").write_text('{"model_type": "gpt2", "n_layer": 4}\n')
    for argv in (["protocol", "check", str(study)], ["run", str(study), "--dry-run"]):
        assert run(argv) == 2
        err = capsys.readouterr().err
        assert f"{base / 'config.json'}: base model file content changed" in err.replace("\n", ""), err
        assert len(err.strip().splitlines()) == 1
    with pytest.raises(CkptselError, match="config.json: base model file content changed"):
        StudyRun(load_spec(study), device="cpu").run(("prepare",))
    (base / "config.json").write_text('{"model_type": "gpt2", "n_layer": 2}\n')  # restored
    assert check_protocol(study) == record
    weights = base / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] = 1  # one weight's last byte
    weights.write_bytes(bytes(data))
    with pytest.raises(CkptselError, match="model.safetensors: base model file content changed"):
        check_protocol(study)
    weights.write_bytes(data[:-8].replace(b"[2]", b"[1]") + bytes(8))  # the header edited
    with pytest.raises(CkptselError, match="tensor layout changed"):
        check_protocol(study)


def test_a_schema_1_protocol_is_refused_and_never_before_training(study: Path) -> None:
    """A pre-release protocol file (hash over the protocol alone) is refused in one line that
    says to freeze again; a record without a schema-2 hash handed over in memory is never
    "before training", in the status or in the results."""
    from ckptsel.study.protocol import before_training, read_protocol
    from ckptsel.workflows.analysis import Bound

    record = freeze(study)
    old = {k: v for k, v in record.items() if k not in ("evidence",)}
    old["schema"] = 1
    old["protocol"] = {k: v for k, v in record["protocol"].items() if k != "base_model"}
    old = _resha(old)
    protocol_path(study).write_text(json.dumps(old))
    for read in (check_protocol, lambda s: read_protocol(protocol_path(s))):
        with pytest.raises(CkptselError) as err:
            read(study)
        said = str(err.value)
        assert "\n" not in said and said.startswith(str(protocol_path(study)))
        assert "schema-1 protocol record" in said and "ckptsel protocol freeze" in said
    assert run(["protocol", "check", str(study)]) == 2
    status = protocol_status(old)
    assert status.endswith("time not covered by the hash") and "before training" not in status
    assert before_training(old) is False and Bound(old).preregistration.before_training is False
    protocol_path(study).unlink()
    again = freeze(study)  # what the refusal says to do
    assert check_protocol(study) == again and before_training(again)


def datetime_ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def test_a_pre_registered_rule_is_its_code(study: Path) -> None:
    """``[rules.NAME]`` is frozen with the SHA-256 of its Python file: editing the rule's code
    after freezing is refused like editing the study."""
    (study.parent / "rules.py").write_text("def short(v):\n    return -v.answers\n")
    write(study, study.read_text() + '[rules.short]\nsignal = "rules.py:short"\n')
    record = freeze(study)
    assert "rules.short.signal" in record["protocol"]["data_files"]
    assert record["protocol"]["study"]["rules"] == {"short": {"signal": "rules.py:short"}}
    assert check_protocol(study) == record
    (study.parent / "rules.py").write_text("def short(v):\n    return v.answers\n")
    with pytest.raises(CkptselError, match=r"rules\.short\.signal"):
        check_protocol(study)
