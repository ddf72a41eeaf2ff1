"""Provenance in the records (issue 20, part 2): every measured unit says what measured it
(engine + version, dtype, attention, batch size, device kind); measuring into a trajectory
recorded with other provenance is refused in one line (exit 2, records untouched) unless
``--allow-mixed-engines``, which writes what it mixed into the units; ``analyze`` prints the
provenance and warns when a study mixes."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ckptsel.records.provenance import canonical, read_provenance, unit_provenance
from ckptsel.records.store import compact
from ckptsel.records.units import UNITS_DIR

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
TRAJ = "run-a"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("prov"), steps=(10, 20), n_validation=6, n_test=4)


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    from ckptsel.cli.app import main

    code = 0
    try:
        main(args)
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def measure_args(run, out: Path, run_dir: Path | None = None, batch: int = 2) -> list[str]:
    return [
        "measure",
        str(run_dir or run.run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        str(batch),
        "--max-new-tokens",
        "4",
        "--no-progress",
        "--trajectory",
        TRAJ,
    ]


def unit_hashes(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / UNITS_DIR).rglob("step-*.parquet"))}


@pytest.fixture(scope="module")
def measured(run, tmp_path_factory):
    """The tiny run measured once with batch size 2 (records folder)."""
    from ckptsel.cli.app import main

    out = tmp_path_factory.mktemp("measured") / "records"
    try:
        main(measure_args(run, out))
    except SystemExit as e:
        assert not e.code
    return out


def test_every_unit_records_what_measured_it(measured, tmp_path):
    import transformers

    for kind in ("generations", "nll"):
        prov = read_provenance(measured, kind)[TRAJ]
        assert prov.units == 2 and prov.unrecorded == 0 and not prov.mixed
        (one,) = prov.measured_by
        p = json.loads(one)
        assert p["engine"] == "hf" and p["version"] == transformers.__version__
        assert p["dtype"] == "float32" and p["batch_size"] == 2 and p["device"] == "cpu"
        assert p["attention"] in ("sdpa", "eager")  # what the loaded model ran with
    # the texts unit says the same as its generations; each unit file carries it itself
    texts = next((measured / UNITS_DIR / "texts" / TRAJ).glob("step-*.parquet"))
    meta = json.loads(pq.read_schema(texts).metadata[b"ckptsel.provenance"])
    assert canonical(meta["measured_by"][0]) == one
    # compact keeps it (the single file's metadata, per trajectory)
    copy = tmp_path / "records"
    shutil.copytree(measured, copy)
    compact(copy)
    assert not (copy / UNITS_DIR).exists()
    assert read_provenance(copy, "nll")[TRAJ].measured_by == {one}


def test_other_provenance_is_refused_in_one_line_and_records_stay(run, measured, tmp_path, capsys):
    out = tmp_path / "records"
    shutil.copytree(measured, out)
    run_dir = tmp_path / "run"
    shutil.copytree(run.run_dir, run_dir)
    shutil.copytree(run_dir / "checkpoint-20", run_dir / "checkpoint-30")  # a new checkpoint
    before = unit_hashes(out)
    code, stdout, stderr = cli(measure_args(run, out, run_dir, batch=3), capsys)
    said = (stdout + stderr).strip()
    assert code == 2 and "\n" not in said, said
    assert "batch 2" in said and "batch 3" in said and repr(TRAJ) in said
    assert "--allow-mixed-engines" in said
    # only the batch size differs (e.g. GPU records at 32 and the default auto): the line says
    # which batch size measures the same way
    assert "measure with --batch-size 2, as they were" in said
    assert unit_hashes(out) == before  # nothing written, step 30 not recorded
    # the same settings are accepted (and measure only the new checkpoint)
    code, stdout, _ = cli(measure_args(run, out, run_dir, batch=2), capsys)
    assert code == 0 and "1 measured" in stdout
    assert len(read_provenance(out, "generations")[TRAJ].measured_by) == 1


def test_allow_mixed_engines_records_the_mix_and_analyze_warns(run, measured, tmp_path, capsys):
    out = tmp_path / "records"
    shutil.copytree(measured, out)
    run_dir = tmp_path / "run"
    shutil.copytree(run.run_dir, run_dir)
    shutil.copytree(run_dir / "checkpoint-20", run_dir / "checkpoint-30")
    args = measure_args(run, out, run_dir, batch=3) + ["--allow-mixed-engines"]
    assert cli(args, capsys)[0] == 0
    for kind in ("generations", "nll"):
        prov = read_provenance(out, kind)[TRAJ]
        batches = sorted(json.loads(p)["batch_size"] for p in prov.measured_by)
        assert batches == [2, 3] and prov.mixed == prov.measured_by
    unit = out / UNITS_DIR / "nll" / TRAJ / "step-30.parquet"
    meta = json.loads(pq.read_schema(unit).metadata[b"ckptsel.provenance"])
    assert [p["batch_size"] for p in meta["measured_by"]] == [3]
    assert sorted(p["batch_size"] for p in meta["mixed"]) == [2, 3]
    # analyze prints what measured the records and warns about the mix
    code, stdout, stderr = cli(
        ["analyze", str(out), "--out", str(tmp_path / "results"), "--permutations", "10", "--draws", "20", "--no-report"], capsys
    )
    assert code == 0, stdout + stderr
    flat = " ".join(stdout.split())
    assert "generations measured by hf" in flat and "batch 2" in flat and "batch 3" in flat
    assert "warning: the study's generations were measured with 2 different provenances" in flat
    assert "within 1 trajectory (run-a; 1 allowed by --allow-mixed-engines)" in flat
    run_json = json.loads((tmp_path / "results" / "run.json").read_text())
    assert len(run_json["provenance_warnings"]) == 2 and run_json["measured_by"]


def test_analyze_of_one_provenance_prints_it_without_warning(measured, tmp_path, capsys):
    code, stdout, stderr = cli(
        ["analyze", str(measured), "--out", str(tmp_path / "results"), "--permutations", "10", "--draws", "20", "--no-report"], capsys
    )
    flat = " ".join(stdout.split())
    assert code == 0, stdout + stderr
    assert "nll measured by hf" in flat and "(1 trajectory)" in flat
    assert "warning" not in flat


def test_the_gate_checks_what_only_the_loaded_model_tells(measured):
    """Settings that agree but a model that ran with another attention implementation: the
    rows are refused before they are cached or recorded."""
    from ckptsel.errors import CkptselError
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.provenance import ProvenanceGate

    gate = ProvenanceGate(measured, TRAJ, None)
    gate.check_settings(MeasureConfig("gsm8k", batch_size=2))  # nothing known differs
    (held,) = gate.recorded["nll"]
    other = json.loads(held)
    other["attention"] = "flash_attention_2" if other["attention"] != "flash_attention_2" else "eager"
    with pytest.raises(CkptselError, match="flash_attention_2|eager") as refused:
        gate.admit({"nll": {canonical(other)}})
    assert "--batch-size" not in str(refused.value)  # more than the batch size differs
    batch = {**json.loads(held), "batch_size": 64}
    with pytest.raises(CkptselError, match="measure with --batch-size 2, as they were"):
        gate.admit({"nll": {canonical(batch)}})
    gate.admit({"nll": {held}})  # what is recorded is admitted
    # a trajectory that records nothing admits anything; --allow-mixed-engines admits the mix
    ProvenanceGate(measured, "another", None).admit({"nll": {canonical(other)}})
    ProvenanceGate(measured, TRAJ, None, allow_mixed=True).admit({"nll": {canonical(other)}})
    assert unit_provenance([held, held]).measured_by == (held,)
