"""Measuring from and into an object store (issue 21), against a real S3 API (moto's server
on 127.0.0.1): checkpoints, base model and item files only at ``s3://`` URLs, records
written there; the same records (every unit's bytes) as from local folders; a measurement
killed mid-way resumes with nothing duplicated or lost; bad remote checkpoints are clear
errors before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from ckptsel._util import nodecache
from ckptsel._util.locations import Location
from ckptsel.errors import CkptselError
from ckptsel.records.provenance import read_provenance

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from storagecase import STEPS, assert_same_records, config, tiny_case, units_of, upload_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return tiny_case(tmp_path_factory)


def measure(urls: dict[str, str], out: str):
    from ckptsel.measure.run import measure_run

    return measure_run(urls["run"], config(), validation=urls["validation"], test=urls["test"], out=out, base=urls["base"])


def test_measure_from_s3_into_s3_gives_the_local_records(case, s3):
    urls = upload_run(s3, case)
    before = dict(nodecache.STATS)
    res = measure(urls, s3.url("records"))
    assert res.measured_steps == list(STEPS) and res.model_loads == 1
    assert_same_records(case.records, s3.url("records"))
    assert {k.split("/")[0] for k in s3.keys("records")} == {".parts", "units"}
    # the units at the URL say what measured them, as local ones do
    for kind in ("generations", "nll"):
        (only,) = read_provenance(s3.url("records"), kind).values()
        assert [json.loads(p)["engine"] for p in only.measured_by] == ["hf"] and not only.unrecorded
    # this node copied the base, the item files and each checkpoint once
    assert nodecache.STATS["downloads"] - before["downloads"] == 3 + len(STEPS)
    # a re-run reads the parts back from S3: nothing measured, nothing loaded, same records
    res = measure(urls, s3.url("records"))
    assert res.measured_steps == [] and res.reused_steps == list(STEPS) and res.model_loads == 0
    assert_same_records(case.records, s3.url("records"))


def test_killed_measure_into_s3_resumes(case, s3):
    urls = upload_run(s3, case)
    out = s3.url("records")
    script = (
        "from ckptsel.measure import MeasureConfig, measure_run\n"
        "measure_run({run!r}, MeasureConfig('gsm8k', batch_size=2, max_new_tokens=8, window=64),"
        " validation={validation!r}, test={test!r}, out={out!r}, base={base!r})\n"
    ).format(out=out, **urls)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    try:
        while not units_of(out) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, f"finished before it could be killed: {proc.stderr.read()[-2000:]}"
        proc.kill()
    finally:
        proc.wait()
    partial = units_of(out)
    assert partial and partial < set(STEPS), partial
    assert units_of(out, "nll") <= set(STEPS)
    res = measure(urls, out)
    assert set(res.reused_steps) >= partial and set(res.measured_steps) | set(res.reused_steps) == set(STEPS)
    assert_same_records(case.records, out)


def test_bad_remote_runs_are_clear_errors(case, s3, tmp_path):
    from ckptsel.train.checkpoints import discover_checkpoints

    urls = upload_run(s3, case)
    with pytest.raises(CkptselError, match=r"s3://.*/runs/none: run directory not found"):
        discover_checkpoints(s3.url("runs", "none"))
    ckpts = discover_checkpoints(urls["run"], base=urls["base"])
    assert [str(c.path) for c in ckpts] == [f"{urls['run']}/checkpoint-{s}" for s in STEPS]
    assert all(c.base == urls["base"] for c in ckpts)
    # the adapter names a base folder that this machine may not have: found when it exists
    assert discover_checkpoints(urls["run"])[0].base == str(case.run.base.resolve())
    with pytest.raises(CkptselError, match="base model 'no/such-dir/x' not found"):
        discover_checkpoints(urls["run"], base="no/such-dir/x")
    # weights cut short at a URL: named, before anything is written
    weights = Location(f"{urls['run']}/checkpoint-20/adapter_model.safetensors")
    weights.write_bytes(weights.read_bytes()[:-100])
    with pytest.raises(CkptselError, match=r"checkpoint-20/adapter_model.safetensors: truncated"):
        measure(urls, s3.url("records"))
    assert not s3.keys("records")
