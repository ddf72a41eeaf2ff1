"""The Ray executor (``ckptsel measure --executor ray``) on a local Ray cluster
(``ray.init(num_cpus=2)``, one per module) with the tiny model: the same records as the
local executor; a worker killed mid-run is restarted and its unit measured again, with
complete records and no duplicates; a driver killed and re-run finishes the rest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.errors import CkptselError
from ckptsel.measure.executors.base import ExecutorConfig, import_ray
from ckptsel.records.scan import read_frame, read_rows

STEPS = (10, 20, 30, 40)
KEY = ["trajectory", "step", "split", "item_id"]


def test_executor_config_rejects_bad_settings():
    for kw, said in (
        (dict(kind="dask"), "--executor"),
        (dict(kind="ray", workers=-1), "--workers"),
        (dict(kind="ray", num_cpus=-1), "--num-cpus"),
        (dict(kind="ray", num_cpus=0, num_gpus=0), "both 0"),
        (dict(kind="ray", max_retries=1.5), "--max-retries"),
    ):
        with pytest.raises(CkptselError, match=said):
            ExecutorConfig(**kw)
    assert ExecutorConfig.coerce(None).kind == "local"
    assert ExecutorConfig.coerce("ray").kind == "ray"
    # a study file's table
    assert ExecutorConfig.coerce({"kind": "ray", "workers": 4}) == ExecutorConfig("ray", workers=4)
    with pytest.raises(CkptselError, match="unknown setting 'gpus'"):
        ExecutorConfig.coerce({"kind": "ray", "gpus": 1})


def test_ray_address_from_environment(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert ExecutorConfig("ray").resolved_address() == "10.0.0.1:6379"
    assert ExecutorConfig("ray", address="head:6379").resolved_address() == "head:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ExecutorConfig("ray").resolved_address() is None


def test_without_ray_one_line_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(CkptselError, match=r"pip install 'ckptsel\[ray\]'"):
        import_ray()


def test_units_are_grouped_by_base_and_actors_keep_theirs():
    from ckptsel.measure.executors.ray_actors import order_units, pick_batch
    from ckptsel.train.checkpoints import Checkpoint

    def ck(step, base):
        kind = "adapter" if base else "full"
        return Checkpoint(step, Path(f"/r/checkpoint-{step}"), kind, base), None

    units = [ck(30, "A"), ck(10, "B"), ck(20, "A"), ck(5, None), ck(15, "B"), ck(1, "A")]
    ordered = order_units(units)
    assert [(c.base, c.step) for c, _ in ordered] == [("A", 1), ("A", 20), ("A", 30), ("B", 10), ("B", 15), (None, 5)]
    # an actor holding B takes B's next batch; a fresh actor avoids the base another holds
    batches = [ordered[:2], ordered[2:3], ordered[3:5], ordered[5:]]
    assert pick_batch(batches, "B", {"A"}) == 2
    assert pick_batch(batches, None, {"A"}) == 2
    assert pick_batch(batches, None, {"A", "B"}) == 3
    assert pick_batch(batches[:2], None, {"A"}) == 0  # nothing else left: share the base


def test_batches_are_consecutive_adapters_of_one_base_with_work():
    """The one batching rule (both executors): known answers by hand."""
    from types import SimpleNamespace

    from ckptsel.measure.measurer import batch_units
    from ckptsel.train.checkpoints import Checkpoint

    def u(step, base, todo=5):
        kind = "adapter" if base else "full"
        ckpt = Checkpoint(step, Path(f"/r/checkpoint-{step}"), kind, base)
        return ckpt, SimpleNamespace(n_todo=todo)

    def steps(batches):
        return [[c.step for c, _ in batch] for batch in batches]

    # a full checkpoint, a unit with nothing to do and another base all break a batch
    mixed = [u(1, "A"), u(2, "A"), u(3, None), u(4, "A"), u(5, "A", todo=0), u(6, "A"), u(7, "A"), u(8, "B"), u(9, "B")]
    assert steps(batch_units(mixed, 16)) == [[1, 2], [3], [4], [5], [6, 7], [8, 9]]
    assert steps(batch_units(mixed, 1)) == [[k] for k in range(1, 10)]  # HF: one unit each
    # at most ``size`` (the engine's)
    five = [u(k, "A") for k in range(1, 6)]
    assert steps(batch_units(five, 2)) == [[1, 2], [3, 4], [5]]
    # at most ceil(units to measure / workers): every actor gets work
    assert steps(batch_units(five, 16, workers=2)) == [[1, 2, 3], [4, 5]]
    assert steps(batch_units(five, 16, workers=4)) == [[1, 2], [3, 4], [5]]
    assert steps(batch_units(five, 16, workers=9)) == [[1], [2], [3], [4], [5]]
    # 8 units to measure: ceil(8 / 4) = 2 keeps the pairs, ceil(8 / 5) = 2 too, ceil(8 / 8) = 1
    # breaks them
    for workers, pairs in ((4, True), (5, True), (8, False)):
        want = [[1, 2], [3], [4], [5], [6, 7], [8, 9]] if pairs else [[k] for k in range(1, 10)]
        assert steps(batch_units(mixed, 16, workers=workers)) == want
    # nothing to measure: each unit alone
    done = [u(k, "A", todo=0) for k in range(1, 4)]
    assert steps(batch_units(done, 16)) == [[1], [2], [3]]
    assert batch_units([], 16) == []


# ---- on a local Ray cluster with the tiny model --------------------------------------------

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("ray"), steps=STEPS, n_validation=6, n_test=4)


def config():
    from ckptsel.measure.config import MeasureConfig

    return MeasureConfig("gsm8k", batch_size=2, max_new_tokens=8, window=64)


def measure(run, out: Path, executor=None):
    from ckptsel.measure.run import measure_run

    return measure_run(run.run_dir, config(), validation=run.validation, test=run.test, out=out, executor=executor)


def read(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return read_frame(out, "generations"), read_frame(out, "nll")


@pytest.fixture(scope="module")
def local(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "records"
    res = measure(run, out)
    assert res.measured_steps == list(STEPS)
    return read(out)


def assert_same_records(out: Path, local) -> None:
    """Same rows, answers and texts as the local executor; NLL within 1e-6."""
    g, n = read(out)
    assert not g.duplicated(KEY).any() and not n.duplicated([*KEY, "window"]).any()
    assert sorted(g["step"].unique()) == list(STEPS)
    pd.testing.assert_frame_equal(g, local[0])
    exact = [c for c in n.columns if c != "nll_sum"]
    pd.testing.assert_frame_equal(n[exact], local[1][exact])
    assert (n["nll_sum"] - local[1]["nll_sum"]).abs().max() <= 1e-6


def test_ray_executor_matches_local(ray_cluster, run, local, tmp_path, capsys):
    from ckptsel.cli.app import main

    out = tmp_path / "records"
    args = ["measure", str(run.run_dir), "--task", "gsm8k", "--validation", str(run.validation)]
    args += ["--test", str(run.test), "--out", str(out), "--batch-size", "2"]
    args += ["--max-new-tokens", "8", "--window", "64", "--no-progress"]
    args += ["--executor", "ray", "--workers", "2"]
    with pytest.raises(SystemExit) as e:
        main(args)
    assert (e.value.code or 0) == 0, capsys.readouterr()
    assert "4 checkpoints (4 measured)" in capsys.readouterr().out
    assert_same_records(out, local)
    # a re-run on Ray measures nothing and changes nothing
    res = measure(run, out, ExecutorConfig("ray", workers=2))
    assert res.measured_steps == [] and res.reused_steps == list(STEPS)
    assert_same_records(out, local)


def test_a_chat_format_run_on_ray_matches_local(ray_cluster, run, tmp_path, capsys):
    """--prompt-format chat through Ray actors, progress bars on: the records the local
    executor makes (issue 36: the format reaches the actors bound to the run's template)."""
    import shutil

    from transformers import AutoTokenizer

    from ckptsel.cli.app import main

    from tinyrun import CHAT_TEMPLATE

    base = tmp_path / "base"
    shutil.copytree(run.base, base)
    tok = AutoTokenizer.from_pretrained(str(base))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(base))
    args = [
        "measure",
        str(run.run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--base",
        str(base),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "8",
        "--prompt-format",
        "chat",
    ]
    for out, extra in (("local", []), ("ray", ["--executor", "ray", "--workers", "2"])):
        with pytest.raises(SystemExit) as e:
            main([*args, "--out", str(tmp_path / out), *extra])
        said = capsys.readouterr()
        assert (e.value.code or 0) == 0, said
        assert "prompt format: chat" in said.out
    assert_same_records(tmp_path / "ray", read(tmp_path / "local"))


def test_ray_actors_send_engine_starts_back(ray_cluster, run, tmp_path):
    res = measure(run, tmp_path / "records", ExecutorConfig("ray", workers=1))
    assert res.measured_steps == list(STEPS)
    assert res.engine_starts == 1 and res.weight_swaps == 0  # one actor: the base loaded once
    assert res.engines == "1 model/engine start on 1 Ray worker"
    # the HF backend: a batch is one checkpoint, no vLLM call
    assert res.executor_stats["batches"] == len(STEPS) and res.vllm_calls == 0


def test_study_file_with_ray_executor_matches_local(ray_cluster, run, local, tmp_path, capsys):
    """``ckptsel run`` on a study whose file says ``executor = "ray"``: the same records as the
    local executor (trajectory named from the folder), measured by Ray actors."""
    from ckptsel.cli.app import main

    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "tiny-s1").symlink_to(run.run_dir, target_is_directory=True)
    study = tmp_path / "study.toml"
    study.write_text(
        f"""schema = 2
executor = "ray"
[study]
base_model = "{run.base}"
[validation]
task = "gsm8k"
file = "{run.validation}"
[test]
task = "gsm8k"
file = "{run.test}"
[measure]
batch_size = 2
max_new_tokens = 8
window = 64
device = "cpu"
[[configurations]]
name = "tiny"
runs = "ext/tiny-s*"
"""
    )
    with pytest.raises(SystemExit) as e:
        main(["run", str(study), "--until", "measure"])
    assert (e.value.code or 0) == 0, capsys.readouterr()
    g, n = read(tmp_path / "records")
    assert set(g["trajectory"]) == {"tiny-s1"} and set(g["configuration"]) == {"tiny"}
    same = {"trajectory": local[0]["trajectory"].iloc[0], "configuration": local[0]["configuration"].iloc[0]}
    pd.testing.assert_frame_equal(g.assign(**same).astype(local[0].dtypes), local[0])
    exact = [c for c in n.columns if c not in ("nll_sum", "trajectory")]
    pd.testing.assert_frame_equal(n[exact], local[1][exact])
    # an unknown executor setting is one error naming the table, before anything runs
    study.write_text(study.read_text().replace('executor = "ray"', '[executor]\nkind = "dask"'))
    with pytest.raises(SystemExit) as e:
        main(["run", str(study), "--until", "measure"])
    assert e.value.code == 2 and "[executor]" in capsys.readouterr().err


def test_worker_killed_mid_run_is_retried(ray_cluster, run, local, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv("CKPTSEL_RAY_KILL_ONCE", str(marker))
    out = tmp_path / "records"
    written: list[int] = []
    from ckptsel.measure.run import measure_run

    res = measure_run(
        run.run_dir,
        config(),
        validation=run.validation,
        test=run.test,
        out=out,
        executor=ExecutorConfig("ray", workers=2, max_retries=2),
        after_checkpoint=written.append,
    )
    assert marker.exists()  # a worker really died, on its first unit
    assert sorted(written) == list(STEPS)  # every unit written once, none twice
    assert res.measured_steps == list(STEPS)
    assert res.generated_items == len(STEPS) * 10 and res.scored_items == len(STEPS) * 10
    stats = res.executor_stats
    assert stats["workers"] == 2 and len(stats["batch_roundtrip_seconds"]) == len(STEPS)
    assert int(marker.read_text()) not in stats["worker_peak_rss_mb"]  # the dead one sent none
    assert_same_records(out, local)


def recorded_steps(out: Path) -> set[int]:
    table = read_rows(out, "generations", columns=["step"])  # None until a unit is written
    return set() if table is None else set(table.column("step").to_pylist())


@pytest.mark.slow  # a second driver process (imports torch and ray) on top of the cluster
def test_driver_killed_and_rerun_finishes_the_rest(ray_cluster, run, local, tmp_path):
    out = tmp_path / "records"
    address = ray_cluster.get_runtime_context().gcs_address
    args = [sys.executable, "-m", "ckptsel", "measure", str(run.run_dir), "--task", "gsm8k"]
    args += ["--validation", str(run.validation), "--test", str(run.test), "--out", str(out)]
    args += ["--batch-size", "2", "--max-new-tokens", "8", "--window", "64", "--no-progress"]
    args += ["--executor", "ray", "--ray-address", address, "--workers", "1"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 150
    try:
        while not recorded_steps(out) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, f"ended before it was killed: {proc.stderr.read()[-3000:]}"
        proc.kill()
    finally:
        proc.wait()
    partial = recorded_steps(out)
    assert partial and partial < set(STEPS), partial
    res = measure(run, out, ExecutorConfig("ray", workers=2))
    assert set(res.reused_steps) >= partial and set(res.measured_steps) == set(STEPS) - set(res.reused_steps)
    assert_same_records(out, local)


def test_worker_start_error_is_one_clear_error(ray_cluster, run, tmp_path):
    """A worker that cannot start (no CUDA device on its node) stops the run with the
    measurement's own error, not a restart loop or a Ray traceback; nothing is written."""
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    cfg = MeasureConfig("gsm8k", max_new_tokens=8, device="cuda", check_here=False)
    out = tmp_path / "records"
    with pytest.raises(CkptselError) as err:
        measure_run(run.run_dir, cfg, validation=run.validation, test=run.test, out=out, executor=ExecutorConfig("ray", workers=1))
    assert str(err.value) == "--device cuda asked for, but torch sees no CUDA device"
    assert read_rows(out, "generations") is None


def test_unit_work_carries_only_the_missing_items(run):
    from ckptsel.measure.executors.ray_actors import unit_work
    from ckptsel.measure.parts import ItemPool

    pool = ItemPool.load("gsm8k", run.validation, run.test)

    class Parts:  # what unit_work reads of a StepParts
        pass

    parts = Parts()
    parts.pool = pool
    parts.todo_gen = {"validation": [1, 4], "test": []}
    parts.todo_nll = {"validation": [4, 5], "test": [2]}
    work = unit_work(parts)
    v = work.pool.splits["validation"]
    assert [it.item_id for it in v] == [pool.splits["validation"][i].item_id for i in (1, 4, 5)]
    assert work.pool.hashes["validation"] == [pool.hashes["validation"][i] for i in (1, 4, 5)]
    assert work.todo_gen == {"validation": [0, 1], "test": []}
    assert work.todo_nll == {"validation": [1, 2], "test": [0]}
    assert [it.item_id for it in work.pool.splits["test"]] == [pool.splits["test"][2].item_id]


def test_vllm_rank_is_one_vllm_accepts():
    from ckptsel.measure.backends.vllm import vllm_rank

    assert [vllm_rank(r) for r in (1, 4, 8, 9, 64, 100, 512)] == [1, 8, 8, 16, 64, 128, 512]  # vLLM 0.32 serves rank 1
    with pytest.raises(CkptselError, match="above"):
        vllm_rank(513)


def test_cuda_check_runs_where_the_models_run():
    from ckptsel.measure.config import MeasureConfig

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(CkptselError, match="no CUDA device"):
        MeasureConfig("gsm8k", device="cuda")
    cfg = MeasureConfig("gsm8k", device="cuda", check_here=False)  # a Ray driver without GPU
    with pytest.raises(CkptselError, match="no CUDA device"):
        cfg.check_device()  # what the worker runs first
    with pytest.raises(CkptselError, match="--max-loras"):
        MeasureConfig("gsm8k", max_loras=-1)


@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="no CUDA GPU here: the GPU vLLM-in-actor path (--executor ray --backend vllm "
    "--num-gpus 1) is checked by benchmarks/gpu_check.py; the CPU one by tests/with_vllm",
)
def test_vllm_in_ray_actor_agrees_with_hf(ray_cluster, run, local, tmp_path):
    """On a GPU: one vLLM engine per GPU actor, one LoRARequest per checkpoint."""
    pytest.importorskip("vllm", reason="vllm is not installed (pip install 'ckptsel[vllm]')")
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    cfg = MeasureConfig("gsm8k", batch_size=2, max_new_tokens=8, window=64, device="cuda", backend="vllm", dtype="float32")
    out = tmp_path / "records"
    res = measure_run(
        run.run_dir,
        cfg,
        validation=run.validation,
        test=run.test,
        out=out,
        executor=ExecutorConfig("ray", workers=1, num_cpus=1, num_gpus=1),
    )
    assert res.measured_steps == list(STEPS)
    g, n = read(out)
    assert len(g) == len(local[0]) and len(n) == len(local[1])
    assert (g["answer"].to_numpy() == local[0]["answer"].to_numpy()).mean() >= 0.9
    assert (n["nll_sum"] - local[1]["nll_sum"]).abs().max() <= 1e-3


def test_ray_actors_run_the_conformance_check_and_refuse_in_one_line(ray_cluster, run, tmp_path, monkeypatch):
    """The actor checks the family (the verdict cache is the driver's CKPTSEL_CACHE_DIR, handed
    to the workers), the units record the verdict; a refused verdict there is refused by the
    actor, in the driver's one line, and nothing is written."""
    from dataclasses import fields

    from ckptsel.measure import conformance
    from ckptsel.records.provenance import read_provenance

    cache = tmp_path / "cache" / "conformance.json"
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(cache.parent))
    ex = ExecutorConfig(kind="ray", workers=1)
    measure(run, tmp_path / "a", executor=ex)
    verdicts = json.loads(cache.read_text())["verdicts"]
    ((key, v),) = verdicts.items()
    assert v["passed"] and v["family"] == "LlamaForCausalLM"
    ((stamp,),) = [read_provenance(tmp_path / "a", "generations")["run-a"].conformance]
    assert stamp == (
        "passed (6 items at batch size 2: texts vs unbatched generate, NLL vs an unpadded "
        f"forward; checked in this run, entry {v['digest'][:19]})"
    )
    # a well-formed refusal in the cache (the actor reads it, and refuses at once)
    same = {f.name: v[f.name] for f in fields(conformance.Verdict)}
    refused = {**same, "passed": False, "equal": 0, "ties": 0, "wrong": 6}
    conformance.save_verdict(key, conformance.Verdict(**refused))
    out = tmp_path / "b"
    with pytest.raises(CkptselError, match=r"^LlamaForCausalLM float32 \(6 items at batch size 2\): 0 of 6 texts") as err:
        measure(run, out, executor=ex)
    assert "\n" not in str(err.value)
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
