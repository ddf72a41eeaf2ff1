"""Records are tied to every file that defines a checkpoint's function (issue 38, item 7), not
only its weights: an adapter or model config, the tokenizer or its chat template, the generation
config changed after measuring is refused in one line (or measured again with ``--replace``),
never "already recorded"; records stamped before these fingerprints existed keep reading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ckptsel.records.codec import read_schema
from ckptsel.records.scan import read_frame
from ckptsel.records.store import compact
from ckptsel.records.units import list_units

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from clirun import run_cli as cli  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("files"), steps=(10, 20), n_validation=6, n_test=4)


def measure_args(run, run_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "measure",
        str(run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "4",
        "--window",
        "512",
        "--no-progress",
        "--no-conformance-check",
        *extra,
    ]


def stamp(out: Path, step: int) -> dict:
    from ckptsel.records.weights import CHECKPOINT_KEY

    unit = next(u for u in list_units(out, "generations") if u.step == step)
    return json.loads(read_schema(unit.path).metadata[CHECKPOINT_KEY])


def copy_run(run, tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "traj"
    shutil.copytree(run.run_dir, run_dir)
    return run_dir


def test_item7_a_changed_adapter_config_is_refused_then_measured_again(run, tmp_path, capsys):
    run_dir, out = copy_run(run, tmp_path), tmp_path / "records"
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0
    before = read_frame(out, "nll").sort_values(["split", "item_id", "window", "step"])
    recorded = stamp(out, 20)
    # lora_alpha 8 -> 9: the same size, the same weights, another function
    cfg_path = run_dir / "checkpoint-20" / "adapter_config.json"
    text = cfg_path.read_text()
    assert '"lora_alpha": 8' in text
    cfg_path.write_text(text.replace('"lora_alpha": 8', '"lora_alpha": 9'))
    code, said = cli(measure_args(run, run_dir, out), capsys)
    lines = [x for x in said.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1, said  # before: 0, "2 already recorded"
    assert "'traj' step 20" in said and "adapter_config.json" in said and "--replace" in said
    assert "already recorded" not in said
    compact(out)  # the single file keeps the fingerprints: still refused
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 2
    code, said = cli(measure_args(run, run_dir, out, "--replace"), capsys)
    assert code == 0 and "1 measured" in said and "1 already recorded" in said, said
    after = read_frame(out, "nll").sort_values(["split", "item_id", "window", "step"])
    changed = before["nll_sum"].to_numpy() != after["nll_sum"].to_numpy()
    steps = set(after["step"].to_numpy()[changed])
    assert steps == {20}, steps  # the kept rows are those of the new config
    assert recorded["files"].startswith("sha256:") and stamp(out, 20)["files"] != recorded["files"]
    assert stamp(out, 20)["weights"] == recorded["weights"]
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0  # now they agree


@pytest.mark.parametrize(
    "name, edit",
    [
        ("generation_config.json", lambda d: {**d, "eos_token_id": [d.get("eos_token_id", 2), 5]}),
        # (a chat template added where no prompt format is stated is refused before this, by
        # the prompt-format rule: tests/measure/test_prompt_formats.py)
        ("tokenizer_config.json", lambda d: {**d, "clean_up_tokenization_spaces": not d.get("clean_up_tokenization_spaces", False)}),
        ("config.json", lambda d: {**d, "rms_norm_eps": 1e-3}),
    ],
)
def test_item7_a_changed_model_or_tokenizer_file_is_refused(run, tmp_path, capsys, name, edit):
    """A full checkpoint's generation config, tokenizer template or model config changed after
    measuring: refused (it was "already recorded")."""
    from tinyrun import save_full_checkpoints

    run_dir, out = tmp_path / "runs" / "full", tmp_path / "records"
    save_full_checkpoints(run.base, run_dir, [10])
    path = run_dir / "checkpoint-10" / name
    if not path.exists():
        path.write_text(json.dumps({"eos_token_id": 2}))
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    code, said = cli(measure_args(run, run_dir, out), capsys)
    assert code == 2 and name in said, said


def test_records_stamped_before_file_fingerprints_keep_reading(run, tmp_path, capsys):
    """Units stamped with the weights alone (before this change): reused, not measured again,
    and their stamp gains the files' fingerprint at the next write."""
    import pyarrow.parquet as pq

    from ckptsel.records.weights import CHECKPOINT_KEY

    run_dir, out = copy_run(run, tmp_path), tmp_path / "records"
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0
    for kind in ("generations", "nll"):
        for unit in list_units(out, kind):
            table = pq.read_table(unit.path)
            meta = dict(table.schema.metadata)
            old = json.loads(meta[CHECKPOINT_KEY])
            old.pop("files")
            meta[CHECKPOINT_KEY] = json.dumps(old, separators=(",", ":")).encode()
            pq.write_table(table.replace_schema_metadata(meta), unit.path)
    assert "files" not in stamp(out, 10)
    code, said = cli(measure_args(run, run_dir, out), capsys)
    assert code == 0 and "(0 measured, 2 already recorded)" in said, said
    assert stamp(out, 10)["files"].startswith("sha256:")


def test_item7_parts_of_other_files_are_not_reused(run, tmp_path, capsys):
    """The records deleted but the part cache kept, then the adapter config edited: the parts
    measured from the old config are not recorded as the new one's."""
    run_dir, out = copy_run(run, tmp_path), tmp_path / "records"
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0
    for path in out.iterdir():
        if path.name != ".parts":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    cfg_path = run_dir / "checkpoint-20" / "adapter_config.json"
    cfg_path.write_text(cfg_path.read_text().replace('"lora_alpha": 8', '"lora_alpha": 9'))
    code, said = cli(measure_args(run, run_dir, out), capsys)
    assert code == 0 and "(1 measured, 1 already recorded)" in said, said  # before: 0 measured
    fresh = tmp_path / "fresh"
    assert cli(measure_args(run, run_dir, fresh), capsys)[0] == 0
    key = ["split", "item_id", "window", "step"]
    got, want = (read_frame(o, "nll").sort_values(key).reset_index(drop=True) for o in (out, fresh))
    assert got.equals(want)


def test_what_the_files_fingerprint_covers(run, tmp_path):
    """An adapter's own configs and tokenizer files, its base model's files and weights (read
    once per base); not the trainer's state, which says nothing of the function."""
    from ckptsel.train.checkpoints import discover_checkpoints, files_fingerprint, function_digests

    run_dir = copy_run(run, tmp_path)
    ckpts = discover_checkpoints(run_dir)
    bases: dict = {}
    digests = function_digests(ckpts[0], bases)
    assert "adapter_config.json" in digests and "base/weights" in digests
    assert "base/config.json" in digests and "base/tokenizer_config.json" in digests
    assert not any("trainer_state" in name for name in digests)
    assert list(bases) == [str(ckpts[0].base)]
    before = files_fingerprint(digests)
    state = run_dir / "checkpoint-10" / "trainer_state.json"
    state.write_text(json.dumps({"global_step": 10, "max_steps": 20}))
    assert files_fingerprint(function_digests(ckpts[0])) == before
    (run_dir / "checkpoint-10" / "chat_template.jinja").write_text("{{ messages }}")
    assert files_fingerprint(function_digests(ckpts[0])) != before
