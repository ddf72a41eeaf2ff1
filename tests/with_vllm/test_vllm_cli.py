"""``ckptsel measure --backend vllm`` typed the way a user types it (issue 38, item 1): a LoRA
trajectory of three adapters measured in one batch (the default ``--max-loras``), whose
checkpoints send their progress events interleaved, runs end to end with the progress bars on
and off, locally and on a Ray actor, and records every checkpoint the same as one adapter per
call. Before, the bars raised a ``KeyError`` after step 2 was recorded (145 lines of traceback).
"""

from __future__ import annotations

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from clirun import exit_code, run_cli  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

STEPS = (2, 4, 6)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("vcli"), steps=STEPS, n_validation=4, n_test=3, hidden_size=128)


def args(run, out, *extra) -> list:
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
        "--backend",
        "vllm",
        "--dtype",
        "float32",
        "--batch-size",
        "4",
        "--max-new-tokens",
        "8",
        "--window",
        "64",
        "--no-conformance-check",
        *extra,
    ]


def measure(run, out, capsys, *extra):
    return run_cli(args(run, out, *extra), capsys)


@pytest.fixture(scope="module")
def one_per_call(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "records"
    assert exit_code(args(run, out, "--max-loras", "1", "--no-progress")) == 0
    return frames(out)


@pytest.mark.parametrize("progress", ["--progress", "--no-progress"])
def test_a_lora_trajectory_measures_from_the_command_line(run, one_per_call, tmp_path, capsys, progress):
    code, said = measure(run, tmp_path / "r", capsys, progress)
    assert code == 0, said
    assert "Traceback" not in said and "3 checkpoints (3 measured)" in said
    assert_same(frames(tmp_path / "r"), one_per_call)
    # again: every checkpoint recorded, nothing measured twice, the bars still whole
    code, said = measure(run, tmp_path / "r", capsys, progress)
    assert code == 0 and "(0 measured, 3 already recorded)" in said, said


def test_a_lora_trajectory_measures_on_ray_from_the_command_line(run, one_per_call, tmp_path, capsys):
    pytest.importorskip("ray")
    code, said = measure(run, tmp_path / "r", capsys, "--executor", "ray", "--workers", "1", "--progress")
    assert code == 0, said
    assert "3 checkpoints (3 measured)" in said
    assert_same(frames(tmp_path / "r"), one_per_call)
