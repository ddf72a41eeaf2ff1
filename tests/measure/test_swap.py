"""Full checkpoints swapped into the one HF model in memory, and every swap proven (issue 31).

A tiny full-fine-tuning run measured with ``swap_weights`` (one model load, each checkpoint's
tensors loaded into it) gives the same records as a fresh model per checkpoint, in float32;
a swap that does not take (the loader made a no-op) stops the run in one line; a checkpoint
whose config differs is loaded afresh, and the reason is kept.
"""

from __future__ import annotations

import json

import pytest

from ckptsel.errors import CkptselError
from ckptsel.measure.backends import swap
from ckptsel.measure.backends.hf import ModelHolder
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.run import measure_run
from ckptsel.records.scan import read_frame
from ckptsel.train.checkpoints import discover_checkpoints

from tinyrun import build_tiny_run

KEY = ["trajectory", "step", "split", "item_id"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("swap")
    return build_tiny_run(root, steps=(2, 4, 6), n_validation=4, n_test=3, full=True)


def measure(run, out, **kw):
    config = MeasureConfig("gsm8k", batch_size=4, max_new_tokens=8, window=32, dtype="float32", **kw)
    return measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=out)


def frames(out):
    gen = read_frame(out, "generations").sort_values(KEY).reset_index(drop=True)
    nll = read_frame(out, "nll").sort_values([*KEY, "window"]).reset_index(drop=True)
    return gen.drop(columns=["provenance"], errors="ignore"), nll.drop(columns=["provenance"], errors="ignore")


def test_swapped_records_equal_a_fresh_model_per_checkpoint(run, tmp_path):
    swapped = measure(run, tmp_path / "swap")
    fresh = measure(run, tmp_path / "fresh", swap_weights=False)
    assert swapped.model_loads == 1 and fresh.model_loads == 3
    assert swapped.measured_steps == [2, 4, 6]
    g1, n1 = frames(tmp_path / "swap")
    g2, n2 = frames(tmp_path / "fresh")
    assert g1["text"].tolist() == g2["text"].tolist()
    assert g1.equals(g2) and n1.equals(n2)


def test_a_swap_that_did_not_take_stops_in_one_line(run, monkeypatch):
    monkeypatch.setattr(swap, "load_into", lambda model, tensors: None)
    holder = ModelHolder("cpu", __import__("torch").float32)
    ckpts = discover_checkpoints(run.run_dir)
    holder.get(ckpts[0])
    with pytest.raises(CkptselError) as err:
        holder.get(ckpts[1])
    line = str(err.value)
    assert "\n" not in line and "did not swap in" in line and "checkpoint-4" in line


def test_a_checkpoint_with_another_config_is_loaded_afresh(run, tmp_path):
    import shutil

    ckpts = discover_checkpoints(run.run_dir)
    other = tmp_path / "other"
    shutil.copytree(ckpts[1].path, other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["rms_norm_eps"] = 1e-5 if cfg.get("rms_norm_eps") != 1e-5 else 1e-6
    (other / "config.json").write_text(json.dumps(cfg))
    assert "config differs (rms_norm_eps)" == swap.swap_refusal(ckpts[0].path, other)
    holder = ModelHolder("cpu", __import__("torch").float32)
    holder.get(ckpts[0])
    holder.get(ckpts[1])
    assert holder.loads == 1 and holder.log.swaps == 1
    assert "started once" in holder.log.words("hf model")
    holder.swap = False
    holder.get(ckpts[2])
    assert holder.loads == 2 and holder.log.fallbacks == {"step 6": "swapping off (--no-swap)"}


def test_the_result_says_how_the_weights_got_in(run, tmp_path):
    res = measure(run, tmp_path / "rec")
    assert res.engine_starts == 1 and res.weight_swaps == 2
    assert res.engines.startswith("hf model started once") and "2 checkpoints swapped" in res.engines
    # each unit says how its checkpoint's weights got in, beside the provenance (a note, not
    # compared: the loaded and swapped units sit in one trajectory, one provenance)
    import pyarrow.parquet as pq

    from ckptsel.records.provenance import read_provenance
    from ckptsel.records.units import unit_path

    notes = {}
    for step in (2, 4, 6):
        meta = pq.read_schema(unit_path(tmp_path / "rec", "nll", "run-a", step).local).metadata
        notes[step] = json.loads(meta[b"ckptsel.provenance"])["weights"]
    assert notes[2] == ["loaded"]
    assert notes[4] == notes[6] == ["swapped in place, proven by 3 tensor checksums"]
    prov = read_provenance(tmp_path / "rec", "nll")["run-a"]
    assert len(prov.measured_by) == 1 and "weights" not in next(iter(prov.measured_by))
    assert prov.weights == {step: set(notes[step]) for step in (2, 4, 6)}
    # compact keeps each step's note (the single file's metadata), and the provenance
    import shutil

    from ckptsel.records.store import compact
    from ckptsel.records.units import UNITS_DIR

    shutil.copytree(tmp_path / "rec", tmp_path / "compacted")
    compact(tmp_path / "compacted")
    assert not (tmp_path / "compacted" / UNITS_DIR).exists()
    after = read_provenance(tmp_path / "compacted", "nll")["run-a"]
    assert after.weights == prov.weights and after.measured_by == prov.measured_by
    # --no-swap (measure and watch): loaded afresh, and why
    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as done:
        main(
            [
                "measure",
                str(run.run_dir),
                "--task",
                "gsm8k",
                "--validation",
                str(run.validation),
                "--test",
                str(run.test),
                "--out",
                str(tmp_path / "fresh"),
                "--batch-size",
                "4",
                "--max-new-tokens",
                "8",
                "--window",
                "32",
                "--dtype",
                "float32",
                "--no-progress",
                "--no-swap",
            ]
        )
    assert not done.value.code
    meta = pq.read_schema(unit_path(tmp_path / "fresh", "nll", "run-a", 4).local).metadata
    assert json.loads(meta[b"ckptsel.provenance"])["weights"] == ["loaded afresh: swapping off (--no-swap)"]


def test_a_watched_run_says_how_its_weights_got_in(run, tmp_path):
    """The watcher swaps too (one session for the run), and its status says so at the end."""
    from ckptsel.measure.watch import WatchSettings, status_path, watch_run

    config = MeasureConfig("gsm8k", batch_size=4, max_new_tokens=8, window=32, dtype="float32")
    status = watch_run(
        run.run_dir,
        config,
        validation=run.validation,
        test=run.test,
        out=tmp_path / "rec",
        settings=WatchSettings(poll=0, settle=0, until_step=6, marker=None),
        sleep=lambda s: None,
    )
    assert status.state == "done" and sorted(status.recorded) == [2, 4, 6]
    assert status.engines.startswith("hf model started once") and "2 checkpoints swapped" in (status.engines)
    saved = json.loads(status_path(tmp_path / "rec", status.trajectory).read_text())
    assert saved["engines"] == status.engines
