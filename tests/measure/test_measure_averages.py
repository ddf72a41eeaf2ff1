"""``measure`` records a run's averages (``ckptsel average``) beside its checkpoints.

* a LoRA run's ``average-last2`` (a rank-8 adapter of two rank-4 ones) is recorded at step -2
  with the answers and NLL of the two checkpoints merged and averaged by hand, loaded fresh as
  a full model and measured on its own; a full run's likewise (the average swapped into the
  model in memory, its own hand-made mean loaded afresh);
* the HF backend's unmerged path swaps the rank-8 adapter in after a rank-4 one and gives a
  fresh ``PeftModel``'s logits;
* the final checkpoint stays the largest step in the stamps; killed after the checkpoints, the
  run again measures the average alone, and once more measures nothing, the records the same;
* hostile folders (no record, a record of other sources, ``average-last1``, ``ema-0.90``,
  edited weights) and ``ckptsel average --last 1000`` / ``--ema 0.1234567``: one line naming
  the folder or option, exit 2, nothing written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.records.scan import read_frame  # noqa: E402
from ckptsel.records.weights import declared_final_steps, read_stamps  # noqa: E402
from ckptsel.train.average_write import RECORD_FILE, average_run  # noqa: E402

from clirun import measure_args, run_cli  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
KEY = ["split", "item_id"]
SETTINGS = dict(max_new_tokens=10, batch_size=4, window=48)


class Stop(Exception):
    """A kill after a checkpoint's records are in."""


def measure(run, run_dir: Path, out: Path, **kw):
    config = MeasureConfig("gsm8k", **SETTINGS)
    return measure_run(run_dir, config, validation=run.validation, test=run.test, out=out, **kw)


def at_step(out: Path, step: int) -> tuple:
    """``(generations, nll)`` of ``step`` in key order, trajectory and step dropped."""
    gen = read_frame(out, "generations")
    nll = read_frame(out, "nll")
    gen = gen[gen["step"] == step].sort_values(KEY).reset_index(drop=True)
    nll = nll[nll["step"] == step].sort_values([*KEY, "window"]).reset_index(drop=True)
    assert len(gen) and len(nll)
    drop = ["trajectory", "configuration", "step", "provenance"]
    return gen.drop(columns=drop, errors="ignore"), nll.drop(columns=drop, errors="ignore")


def assert_same_rows(a: tuple, b: tuple) -> None:
    """Texts, answers and token counts equal; the NLL to float32 rounding."""
    assert a[0]["text"].tolist() == b[0]["text"].tolist()
    assert a[0].equals(b[0])
    assert a[1].drop(columns="nll_sum").equals(b[1].drop(columns="nll_sum"))
    assert a[1]["nll_sum"].to_numpy() == pytest.approx(b[1]["nll_sum"].to_numpy(), rel=1e-5, abs=1e-5)


def save_as_full(base: Path, state: dict, folder: Path) -> Path:
    """``state`` (float32 weights of the base's architecture) as a full checkpoint with the
    base's tokenizer and generation config: a model loaded fresh."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    model.save_pretrained(str(folder))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(folder))
    return folder


def merged_state(base: Path, adapter: Path) -> dict:
    """A fresh base with ``adapter`` merged in by PEFT (float32)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), str(adapter))
    return {k: v.detach().clone() for k, v in model.merge_and_unload().state_dict().items()}


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """A LoRA run with ``average-last2``, measured after a kill past its last checkpoint and
    again (the average alone)."""
    root = tmp_path_factory.mktemp("lora")
    run = build_tiny_run(root, steps=(10, 20, 30), n_validation=6, n_test=4, long_every=3)
    average_run(run.run_dir, [2])
    out = root / "records"

    def kill(step: int) -> None:
        if step == 30:
            raise Stop

    with pytest.raises(Stop):
        measure(run, run.run_dir, out, after_checkpoint=kill)
    resumed = measure(run, run.run_dir, out)
    return run, out, resumed


def test_a_lora_average_is_recorded_as_the_mean_of_its_merged_checkpoints(lora, tmp_path):
    run, out, _ = lora
    states = [merged_state(run.base, run.run_dir / f"checkpoint-{s}") for s in (20, 30)]
    mean = {k: (states[0][k] + states[1][k]) / 2 for k in states[0]}
    ref_run = tmp_path / "by-hand"
    save_as_full(run.base, mean, ref_run / "checkpoint-0")
    measure(run, ref_run, tmp_path / "ref")
    assert_same_rows(at_step(out, -2), at_step(tmp_path / "ref", 0))
    # the average is its own model: not the last checkpoint's rows
    assert not at_step(out, -2)[1]["nll_sum"].equals(at_step(out, 30)[1]["nll_sum"])


def test_killed_after_the_checkpoints_the_run_again_measures_the_average_alone(lora):
    run, out, resumed = lora
    assert resumed.measured_steps == [-2]
    assert resumed.reused_steps == [10, 20, 30]
    assert sorted(resumed.steps) == [-2, 10, 20, 30]
    units = sorted((out / "units").rglob("step-*.parquet"))
    assert {p.name for p in units} == {"step--2.parquet", "step-10.parquet", "step-20.parquet", "step-30.parquet"}
    before = {p: p.read_bytes() for p in units}
    again = measure(run, run.run_dir, out)
    assert again.measured_steps == [] and sorted(again.reused_steps) == [-2, 10, 20, 30]
    assert {p: p.read_bytes() for p in units} == before


def test_the_final_checkpoint_stays_the_largest_step(lora):
    run, out, _ = lora
    stamps = read_stamps(out, "generations")["run-a"]
    assert {s.run_final_step for s in stamps.values()} == {30}
    assert declared_final_steps(out) == {"run-a": 30}
    assert stamps[-2].weights and stamps[-2].weights != stamps[30].weights


def test_the_hf_backend_swaps_the_larger_rank_in_unmerged(lora):
    """bfloat16 on the CPU: adapters stay unmerged (PEFT ``load_adapter``), and the rank-8
    average after a rank-4 checkpoint gives what a fresh PeftModel of it gives."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ckptsel.measure.backends.hf import ModelHolder
    from ckptsel.train.average_read import find_averages
    from ckptsel.train.checkpoints import discover_checkpoints

    run = lora[0]
    ckpts = discover_checkpoints(run.run_dir)
    (avg,) = find_averages(run.run_dir, ckpts)
    assert json.loads((avg.path.local / "adapter_config.json").read_text())["r"] == 8
    holder = ModelHolder("cpu", torch.bfloat16)
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    holder.get(ckpts[-1])
    with torch.inference_mode():
        swapped = holder.get(avg)(input_ids=ids).logits
        fresh = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(run.base), dtype=torch.bfloat16), str(avg.path))
        want = fresh.eval()(input_ids=ids).logits
    assert holder.loads == 1
    assert torch.equal(swapped, want)


def test_a_full_average_is_recorded_as_its_hand_made_mean(tmp_path):
    from safetensors.torch import load_file

    run = build_tiny_run(tmp_path / "full", steps=(10, 20, 30), n_validation=6, n_test=4, full=True)
    average_run(run.run_dir, [2])
    out = tmp_path / "records"
    res = measure(run, run.run_dir, out)
    assert res.measured_steps == [-2, 10, 20, 30]
    assert "2 checkpoints and 1 average(s) swapped in place" in res.engines  # 20, 30 and the average
    assert res.weight_swaps == 3 and res.average_swaps == 1
    states = [load_file(str(run.run_dir / f"checkpoint-{s}" / "model.safetensors")) for s in (20, 30)]
    mean = {k: (states[0][k] + states[1][k]) / 2 for k in states[0]}
    ref_run = tmp_path / "by-hand"
    save_as_full(run.base, mean, ref_run / "checkpoint-0")
    measure(run, ref_run, tmp_path / "ref")
    assert_same_rows(at_step(out, -2), at_step(tmp_path / "ref", 0))


# --------------------------------------------------------------------------- hostile


@pytest.fixture(scope="module")
def hostile(lora, tmp_path_factory):
    """A copy of the LoRA run (its average included) for each hostile test to spoil."""
    return lora[0], tmp_path_factory.mktemp("hostile")


def spoiled(hostile, name: str) -> Path:
    run, root = hostile
    copy = root / name / "run-a"
    shutil.copytree(run.run_dir, copy)
    return copy


def assert_refused(hostile, run_dir: Path, capsys, *needles: str) -> None:
    run, _ = hostile
    out = run_dir.parent / "records"
    code, said = run_cli(measure_args(run, run_dir, out), capsys)
    assert code == 2, said
    lines = said.strip().splitlines()
    assert len(lines) == 1, said
    for needle in needles:
        assert needle in lines[0], said
    assert not out.exists()


def test_an_average_folder_without_its_record_is_refused(hostile, capsys):
    run_dir = spoiled(hostile, "no-record")
    shutil.copytree(run_dir / "checkpoint-30", run_dir / "average-last3")
    assert_refused(hostile, run_dir, capsys, str(run_dir / "average-last3"), f"no {RECORD_FILE}")


def test_an_average_of_other_sources_is_refused(hostile, capsys):
    run_dir = spoiled(hostile, "other-sources")
    record = run_dir / "average-last2" / RECORD_FILE
    blob = json.loads(record.read_text())
    blob["sources"][0]["step"], blob["sources"][1]["step"] = 10, 20
    record.write_text(json.dumps(blob))
    assert_refused(hostile, run_dir, capsys, str(record), "names steps [10, 20]", "[20, 30]", "--force")


def test_an_average_made_before_the_run_gained_a_checkpoint_is_refused(hostile, capsys):
    run_dir = spoiled(hostile, "stale")
    shutil.copytree(run_dir / "checkpoint-30", run_dir / "checkpoint-40")
    assert_refused(hostile, run_dir, capsys, "average-last2", "[30, 40]")


def test_an_average_whose_weights_were_edited_is_refused(hostile, capsys):
    from safetensors.torch import load_file, save_file

    run_dir = spoiled(hostile, "edited")
    file = run_dir / "average-last2" / "adapter_model.safetensors"
    tensors = load_file(str(file))
    first = sorted(tensors)[0]
    tensors[first] = tensors[first] * 2
    save_file(tensors, str(file))
    assert_refused(hostile, run_dir, capsys, str(run_dir / "average-last2"), "edited since")


@pytest.mark.parametrize("name", ["average-last1", "ema-0.90", "average-last03", "ema-1.5", "average-lastthree"])
def test_a_folder_named_like_an_average_records_cannot_hold_is_refused(hostile, capsys, name):
    run_dir = spoiled(hostile, f"name-{name}")
    shutil.copytree(run_dir / "average-last2", run_dir / name)
    assert_refused(hostile, run_dir, capsys, str(run_dir / name), "named like an average", "not an average ckptsel can record")


def test_a_record_renamed_with_its_folder_is_refused(hostile, capsys):
    run_dir = spoiled(hostile, "renamed")
    (run_dir / "average-last2").rename(run_dir / "average-last3")
    assert_refused(hostile, run_dir, capsys, "records the average 'average-last2', not 'average-last3'")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--last", "1000"], "--last 1000: an average of more than 999 checkpoints cannot be recorded"),
        (["--ema", "0.1234567"], "--ema 0.1234567: its average ema-0.1234567 cannot be recorded"),
        (["--ema", "1e-07"], "--ema 1e-07: its average ema-1e-07 cannot be recorded"),
    ],
)
def test_average_refuses_what_records_cannot_hold(hostile, capsys, args, needle):
    run_dir = spoiled(hostile, f"average{'-'.join(args)}")
    before = sorted(p.name for p in run_dir.iterdir())
    code, said = run_cli(["average", run_dir, *args], capsys)
    assert code == 2, said
    assert len(said.strip().splitlines()) == 1 and needle in said, said
    assert sorted(p.name for p in run_dir.iterdir()) == before


def test_vllms_max_lora_rank_holds_the_averages(hostile):
    """vLLM's ``max_lora_rank``: the smallest it takes that holds every adapter it serves,
    an average of three rank-4 adapters (rank 12) included; a smaller one asked for is refused."""
    from ckptsel.measure.backends.vllm import _check_checkpoints
    from ckptsel.train.average_read import find_averages
    from ckptsel.train.checkpoints import discover_checkpoints

    run_dir = spoiled(hostile, "ranks")
    average_run(run_dir, [3])
    ckpts = discover_checkpoints(run_dir)
    averages = find_averages(run_dir, ckpts)
    assert [c.step for c in averages] == [-2, -3]
    config = MeasureConfig("gsm8k", **SETTINGS)
    assert _check_checkpoints(config, ckpts) == 8
    assert _check_checkpoints(config, ckpts + averages) == 16
    with pytest.raises(CkptselError, match="--max-lora-rank 8 is below the run's adapter rank 12"):
        _check_checkpoints(MeasureConfig("gsm8k", max_lora_rank=8, **SETTINGS), ckpts + averages)


def test_a_dry_run_counts_the_averages(hostile, capsys):
    run, _ = hostile
    run_dir = spoiled(hostile, "dry")
    code, said = run_cli(measure_args(run, run_dir, run_dir.parent / "records", "--dry-run"), capsys)
    assert code == 0, said
    assert "run-a: 3 checkpoints and 1 average(s); nothing measured (--dry-run)" in said
    assert not (run_dir.parent / "records").exists()
