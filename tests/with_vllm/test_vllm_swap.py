"""One vLLM engine per full-weight trajectory: each checkpoint's weights reloaded into it and
proven there, records equal to an engine per checkpoint in float32 (issue 31).

Ten checkpoints, as a trajectory of the paper has: one engine start for all of them, against
ten for the restart path (the first engine start in a process costs 20-40 s on this CPU, later
ones a few seconds); a reload that does not take (made a no-op) stops in one line.
"""

from __future__ import annotations

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure.backends import vllm as vllm_backend  # noqa: E402
from ckptsel.measure.backends.vllm import VllmEngine  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.train.checkpoints import discover_checkpoints  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

STEPS = tuple(range(2, 21, 2))  # ten full checkpoints


def config(**kw) -> MeasureConfig:
    return MeasureConfig("gsm8k", batch_size=4, max_new_tokens=12, window=64, dtype="float32", backend="vllm", **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("vswap")
    return build_tiny_run(root, steps=STEPS, n_validation=6, n_test=4, full=True, hidden_size=128)


def test_one_engine_per_full_trajectory_gives_the_restart_records(run, tmp_path):
    kw = dict(validation=run.validation, test=run.test)
    swapped = measure_run(run.run_dir, config(), out=tmp_path / "swap", **kw)
    fresh = measure_run(run.run_dir, config(swap_weights=False), out=tmp_path / "fresh", **kw)
    n = len(STEPS)
    assert swapped.engine_starts == 1 and swapped.weight_swaps == n - 1, swapped.engines
    assert fresh.engine_starts == n and fresh.weight_swaps == 0, fresh.engines
    assert swapped.measured_steps == list(STEPS) == fresh.measured_steps
    assert "started once" in swapped.engines and f"{n - 1} checkpoints swapped" in swapped.engines
    g1, n1 = frames(tmp_path / "swap")
    assert_same((g1, n1), frames(tmp_path / "fresh"))
    # the checkpoints differ: each swap changed what was measured
    assert n1.groupby("step")["nll_sum"].sum().nunique() == len(STEPS)


def test_a_reload_that_did_not_take_stops_in_one_line(run, monkeypatch):
    ckpts = discover_checkpoints(run.run_dir)
    engine = VllmEngine(config(kv_cache_gib=0.05), ckpts, None, str(ckpts[0].path))
    try:
        engine.score(ckpts[0], [[1, 5, 6]], [[7, 8]], (0,))
        llm = engine.llm
        monkeypatch.setattr(vllm_backend, "reload_engine", lambda llm, ref: None)
        with pytest.raises(CkptselError) as err:
            engine.score(ckpts[1], [[1, 5, 6]], [[7, 8]], (0,))
    finally:
        engine.close()
    line = str(err.value)
    assert "\n" not in line and "did not swap in" in line and "checkpoint-4" in line
    assert engine.starts == 1
    # the engine that stopped was shut down then, not left to the garbage collector (which,
    # with the engine still referenced, as here, would run its teardown later and destroy the
    # parallel state of an engine started after it)
    assert not llm.llm_engine.engine_core._finalizer.alive


def test_a_stale_packed_lm_head_stops_in_one_line(run, monkeypatch):
    """vLLM's CPU reload leaves the packed weights of an LM head tied to the embedding stale
    (found here: the records differed while every parameter matched); ckptsel repacks them,
    and the proof probes each packed layer against the tensor it keeps."""
    ckpts = discover_checkpoints(run.run_dir)
    engine = VllmEngine(config(kv_cache_gib=0.05), ckpts, None, str(ckpts[0].path))
    try:
        engine.score(ckpts[0], [[1, 5, 6]], [[7, 8]], (0,))
        monkeypatch.setattr(vllm_backend, "_repack_shared", lambda model: None)
        with pytest.raises(CkptselError) as err:
            engine.score(ckpts[1], [[1, 5, 6]], [[7, 8]], (0,))
    finally:
        engine.close()
    line = str(err.value)
    assert "\n" not in line and "packed GEMM weights of lm_head" in line
