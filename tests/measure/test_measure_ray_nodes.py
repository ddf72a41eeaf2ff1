"""A Ray cluster whose nodes share no disk (issue 21): two nodes on one machine
(``ray.cluster_utils.Cluster``: a head without CPUs, two 1-CPU nodes), checkpoints and base
model only in the local S3 server (127.0.0.1), records written there. Actors get URLs, never
paths, and reach the server only through the settings the driver forwards (the nodes were
started without any ``AWS_*`` variable); each works in a private directory and each node
caches its own downloads. The records are the local executor's, byte for byte."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
ray = pytest.importorskip("ray")

from storagecase import STEPS, assert_same_records, config, tiny_case, upload_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return tiny_case(tmp_path_factory)


@pytest.fixture(scope="module")
def two_nodes():
    """Head (no CPUs) + two 1-CPU nodes, started with no storage settings in their env."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    hidden = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("AWS_")}
    hidden.update({k: os.environ.pop(k) for k in ("CKPTSEL_CACHE_DIR",) if k in os.environ})
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        os.environ.update(hidden)
        ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
        yield [n.node_id for n in nodes]
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.update(hidden)


def test_two_nodes_without_shared_disk_give_the_local_records(case, two_nodes, s3, tmp_path, monkeypatch):
    from ckptsel.measure.executors.base import ExecutorConfig
    from ckptsel.measure.run import measure_run

    urls = upload_run(s3, case)
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache-{node}"))  # one per node
    out = s3.url("records")
    res = measure_run(
        urls["run"],
        config(),
        validation=urls["validation"],
        test=urls["test"],
        out=out,
        base=urls["base"],
        executor=ExecutorConfig("ray", workers=2, num_cpus=1, forward_credentials=True),
    )
    assert res.measured_steps == list(STEPS)
    assert_same_records(case.records, out)
    stats = res.executor_stats
    nodes = stats["worker_nodes"]
    assert len(nodes) == 2 and set(nodes.values()) == set(two_nodes)  # one actor per node
    workdirs = set(stats["worker_workdirs"].values())
    assert len(workdirs) == 2 and all(Path(w).name.startswith("ckptsel-actor-") for w in workdirs)
    assert not [w for w in workdirs if Path(w).exists()]  # removed when the actors closed
    assert all(str(Path(w).parent) == tempfile.gettempdir() for w in workdirs)
    for node in two_nodes:  # each node its own copy of what its actor loaded
        copies = {p.name.split("-", 1)[1] for p in (tmp_path / f"cache-{node[:16]}").iterdir() if p.is_dir()}
        assert "base" in copies and copies & {f"checkpoint-{s}" for s in STEPS}
    driver = tmp_path / f"cache-{socket.gethostname()}"  # the driver read only the item files
    assert sorted(p.name.split("-", 1)[1] for p in driver.iterdir() if p.is_dir()) == ["test.jsonl", "validation.jsonl"]
