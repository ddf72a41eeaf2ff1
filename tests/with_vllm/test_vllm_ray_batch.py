"""A LoRA trajectory's adapters in one vLLM batch in a Ray actor (issue 31): with
``--executor ray`` the actor gets the trajectory's adapters as one batch
(:func:`ckptsel.measure.measurer.batch_units`), starts one engine and makes one ``generate``
call per kind; the records equal the local executor's (float32 on the CPU: texts identical, NLL
to 1e-6). The calls are counted in the actor (``VllmEngine.calls``) and sent back with its
stats: a monkeypatch here would not reach the actor's process.

Two engine starts in all (each costs 20-40 s on this CPU).
"""

from __future__ import annotations

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from ckptsel.measure import ExecutorConfig, MeasureConfig, measure_run  # noqa: E402
from ckptsel.records import read_provenance  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

STEPS = (2, 4, 6, 8)


def config() -> MeasureConfig:
    return MeasureConfig(
        "gsm8k", batch_size=4, max_new_tokens=12, window=64, dtype="float32", backend="vllm",
        conformance_check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(
        tmp_path_factory.mktemp("vray"), steps=STEPS, n_validation=6, n_test=4, hidden_size=128
    )


def measure(run, out, executor=None):
    return measure_run(
        run.run_dir, config(), validation=run.validation, test=run.test, out=out,
        executor=executor,
    )  # fmt: skip


def test_a_ray_actor_measures_the_trajectorys_adapters_in_one_batch(run, tmp_path):
    local = measure(run, tmp_path / "local")
    assert local.engine_starts == 1 and local.vllm_calls == 2  # one call per kind
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = measure(run, tmp_path / "ray", executor=ExecutorConfig(kind="ray", workers=1))
    finally:
        ray.shutdown()
    assert result.measured_steps == list(STEPS)
    stats = result.executor_stats
    assert stats["units"] == len(STEPS) and stats["batches"] == 1
    assert result.engine_starts == 1 and result.vllm_calls == 2 < len(STEPS)
    a, b = frames(tmp_path / "ray"), frames(tmp_path / "local")
    assert_same(a, b)
    # the checkpoints differ: each row came back to its own checkpoint
    assert a[1].groupby("step")["nll_sum"].sum().nunique() == len(STEPS)
    # the same engine, settings and weights notes recorded
    for kind in ("generations", "nll"):
        assert read_provenance(tmp_path / "ray", kind) == read_provenance(tmp_path / "local", kind)
