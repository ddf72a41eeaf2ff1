"""A trajectory's configuration, when none is given, is its name less its seed (``cfgA-s42`` ->
``cfgA``) in ``measure``, the Trainer callback and ``measure_model``, as ``run`` names
trajectories and ``ingest`` reads them: seeds of one configuration recorded as configurations
of their own would be resampled as independent by the configuration bootstrap (SPEC §4)."""

from __future__ import annotations

import pytest

from ckptsel.study.configuration import default_configuration

from clirun import run_cli
from tinyrun import build_tiny_run

pytest.importorskip("torch")
pytest.importorskip("peft")


@pytest.mark.parametrize(
    ("trajectory", "configuration"),
    [
        ("cfgA-s42", "cfgA"),
        ("lora_r8_seed7", "lora_r8"),
        ("full-seed-3", "full"),
        ("lora-r8", "lora-r8"),
        ("s42", "s42"),
        ("cfg-s42x", "cfg-s42x"),
    ],
)
def test_the_default_configuration_is_the_name_less_its_seed(trajectory, configuration):
    assert default_configuration(trajectory) == configuration


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("cfgseed"), steps=(2,), n_validation=3, n_test=2, run_name="cfgA-s42")


def measure_args(run, out, *extra) -> list:
    return [
        "measure",
        run.run_dir,
        "--task",
        "gsm8k",
        "--validation",
        run.validation,
        "--test",
        run.test,
        "--out",
        out,
        "--batch-size",
        "4",
        "--max-new-tokens",
        "4",
        "--window",
        "16",
        "--dtype",
        "float32",
        "--no-progress",
        "--no-conformance-check",
        *extra,
    ]


def test_measure_records_the_configuration_the_name_says(run, tmp_path, capsys):
    from ckptsel.records.scan import read_frame

    code, said = run_cli(measure_args(run, tmp_path / "rec"), capsys)
    assert code == 0, said
    assert "configuration 'cfgA': the trajectory name less its seed" in said
    frame = read_frame(tmp_path / "rec", "generations")  # (the NLL rows carry no configuration)
    assert set(frame["trajectory"]) == {"cfgA-s42"} and set(frame["configuration"]) == {"cfgA"}
    # given, it is taken as it is (and not remarked on)
    code, said = run_cli(measure_args(run, tmp_path / "own", "--configuration", "mine"), capsys)
    assert code == 0 and "the trajectory name less its seed" not in said, said
    assert set(read_frame(tmp_path / "own", "generations")["configuration"]) == {"mine"}


def test_records_of_the_old_default_are_refused_with_the_way_to_keep_them(run, tmp_path, capsys):
    out = tmp_path / "rec"
    code, said = run_cli(measure_args(run, out, "--configuration", "cfgA-s42"), capsys)
    assert code == 0, said
    (run.run_dir / "checkpoint-2").rename(run.run_dir / "checkpoint-4")  # a new checkpoint
    try:
        code, said = run_cli(measure_args(run, out), capsys)
    finally:
        (run.run_dir / "checkpoint-4").rename(run.run_dir / "checkpoint-2")
    assert code == 2 and "\n" not in said.strip(), said
    assert "configuration 'cfgA-s42', not 'cfgA'" in said
    assert "pass --configuration cfgA-s42 to keep it" in said


def test_the_callback_defaults_alike(run):
    from ckptsel.integrations.hf_trainer import RecordingCallback

    cb = RecordingCallback(run.validation, "gsm8k", run.run_dir.parent / "cb", "cfgB_seed1")
    assert cb.configuration == "cfgB"
    assert RecordingCallback(run.validation, "gsm8k", run.run_dir.parent / "cb", "cfgB_seed1", "given").configuration == "given"
