"""A LoRA trajectory's adapters in one vLLM batch in a Ray actor (issue 31): with
``--executor ray`` the actor gets the trajectory's adapters as one batch
(:func:`ckptsel.measure.measurer.batch_units`), starts one engine and makes one ``generate``
call per kind; the records equal the local executor's (float32 on the CPU: texts identical, NLL
to 1e-6). The calls are counted in the actor (``VllmEngine.calls``) and sent back with its
stats: a monkeypatch here would not reach the actor's process.

With three workers asked for, the four adapters make two batches of two (at most
``ceil(4 / 3)``), and only the two actors they need are started.

Four engine starts in all (each costs 20-40 s on this CPU).
"""

from __future__ import annotations

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.executors.base import ExecutorConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.records.provenance import read_provenance  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

STEPS = (2, 4, 6, 8)


def config() -> MeasureConfig:
    return MeasureConfig("gsm8k", batch_size=4, max_new_tokens=12, window=64, dtype="float32", backend="vllm", conformance_check=False)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("vray"), steps=STEPS, n_validation=6, n_test=4, hidden_size=128)


def measure(run, out, executor=None):
    return measure_run(run.run_dir, config(), validation=run.validation, test=run.test, out=out, executor=executor)


@pytest.fixture(scope="module")
def local(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("vray-local") / "records"
    result = measure(run, out)
    assert result.engine_starts == 1 and result.vllm_calls == 2  # one call per kind
    return out


def on_ray(run, out, workers: int, cpus: int):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        return measure(run, out, executor=ExecutorConfig(kind="ray", workers=workers))
    finally:
        ray.shutdown()


def test_a_ray_actor_measures_the_trajectorys_adapters_in_one_batch(run, local, tmp_path):
    result = on_ray(run, tmp_path / "ray", workers=1, cpus=2)
    assert result.measured_steps == list(STEPS)
    stats = result.executor_stats
    assert stats["units"] == len(STEPS) and stats["batches"] == 1
    assert result.engine_starts == 1 and result.vllm_calls == 2 < len(STEPS)
    a, b = frames(tmp_path / "ray"), frames(local)
    assert_same(a, b)
    # the checkpoints differ: each row came back to its own checkpoint
    assert a[1].groupby("step")["nll_sum"].sum().nunique() == len(STEPS)
    # the same engine, settings and weights notes recorded
    for kind in ("generations", "nll"):
        assert read_provenance(tmp_path / "ray", kind) == read_provenance(local, kind)


def test_no_more_actors_than_batches(run, local, tmp_path):
    """Three workers asked for, two batches of two adapters: two actors, each one engine and
    one call per kind; the same records."""
    result = on_ray(run, tmp_path / "ray", workers=3, cpus=3)
    stats = result.executor_stats
    assert stats["batches"] == 2 and stats["workers"] == 2 == stats["worker_processes"]
    assert result.engine_starts == 2 and result.vllm_calls == 4
    assert_same(frames(tmp_path / "ray"), frames(local))
