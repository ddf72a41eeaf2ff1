"""Locations (issue 21): local paths and fsspec URLs behind one type; writes a reader never
sees half of, conditional writes, fresh listings with version tags, and the per-node cache,
on memory://, local folders and a real S3 API (moto's server on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import pickle
import threading
from pathlib import Path

import pytest

from ckptsel._util import io, nodecache
from ckptsel._util.locations import Location, WriteConflict, as_location, is_url
from ckptsel.errors import CkptselError


def test_a_url_never_goes_through_pathlib():
    run = Location("s3://bucket/runs/a/")
    assert str(run) == "s3://bucket/runs/a" and run.name == "a" and not run.is_local
    ck = run / "checkpoint-10"
    assert str(ck) == "s3://bucket/runs/a/checkpoint-10" and ck.parent == run
    assert str(run / "../base") == "s3://bucket/runs/base"
    assert str(Location("s3://bucket").parent) == "s3://bucket"
    with pytest.raises(TypeError, match="is a URL, not a local path"):
        os.fspath(ck)
    with pytest.raises(TypeError):
        Path(ck)  # would be PosixPath('s3:/bucket/...') if it were allowed
    with pytest.raises(CkptselError, match="a URL, not a local path"):
        _ = ck.local
    assert is_url("gs://b/k") and is_url(run) and not is_url("file:///tmp/x") and not is_url("x/y")
    local = Location("file:///tmp/some/where")
    assert local.is_local and str(local) == "/tmp/some/where" and os.fspath(local) == "/tmp/some/where"
    assert Location(Path("rel/dir")) == Path("rel/dir") and {Location("a/b"): 1}[Location(Path("a/b"))] == 1
    assert as_location(run) is run and ck.suffix == "" and (run / "x.parquet").suffix == ".parquet"


def test_pickles_as_its_string(tmp_path):
    mem = Location("memory://ckptsel-pickle/x")
    _ = mem.fs  # resolved here; a copy resolves its own
    copy = pickle.loads(pickle.dumps(mem))
    assert copy == mem and copy._fs is None
    local = pickle.loads(pickle.dumps(Location(tmp_path)))
    assert local.is_local and local == tmp_path


def test_unknown_protocol_is_one_clear_error():
    with pytest.raises(CkptselError, match="unknown storage protocol"):
        Location("nosuchproto://b/k").exists()


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_writes_reads_listings_and_conditions(kind, tmp_path):
    import uuid

    root = Location(tmp_path / "r") if kind == "local" else Location(f"memory://t-{uuid.uuid4().hex}")
    f = root / "a" / "b.txt"
    assert not f.exists() and f.info() is None and f.read_tagged() is None
    f.write_bytes(b"one")
    assert f.read_bytes() == b"one" and f.is_file() and (root / "a").is_dir()
    data, tag = f.read_tagged()
    assert data == b"one" and tag == f.info().tag
    with pytest.raises(WriteConflict):
        f.write_bytes(b"two", if_absent=True)
    (root / "c.txt").write_bytes(b"new", if_absent=True)
    assert root.listing().keys() == {"a/b.txt", "c.txt"} and root.listing()["c.txt"].size == 3
    assert root.children() == [("a", True), ("c.txt", False)]
    if kind == "memory":  # a stale tag loses, the current one wins
        f.write_bytes(b"two", if_tag=tag)
        with pytest.raises(WriteConflict):
            f.write_bytes(b"three", if_tag=tag)
    f.unlink()
    f.unlink(missing_ok=True)
    root.remove_tree()
    assert root.listing() == {}


def test_object_store_writes_are_one_put_with_conditions(s3):
    f = Location(s3.url("units", "u.parquet"))
    f.write_bytes(b"x" * 1000, if_absent=True)
    with pytest.raises(WriteConflict):
        f.write_bytes(b"y", if_absent=True)
    data, etag = f.read_tagged()
    assert data == b"x" * 1000 and etag == f.info().tag  # the ETag of exactly these bytes
    f.write_bytes(b"z", if_tag=etag)
    with pytest.raises(WriteConflict):  # someone wrote since: the stale ETag loses
        f.write_bytes(b"w", if_tag=etag)
    assert f.read_bytes() == b"z"
    assert s3.fs.list_multipart_uploads(s3.bucket) == []  # no orphan uploads: single PUTs
    # a listing never answers from s3fs's cache: a write by another client is seen at once
    root = Location(s3.url())
    assert set(root.listing()) == {"units/u.parquet"}
    s3.fs.pipe_file(f"{s3.bucket}/units/v.parquet", b"v")
    assert set(root.listing()) == {"units/u.parquet", "units/v.parquet"}
    assert root.children() == [("units", True)] and (root / "units").is_dir()
    assert (root / "units" / "v.parquet").exists() and not (root / "nope").exists()
    assert f.read_range(0, 1) == b"z"


def test_io_writers_and_data_files_take_urls(s3):
    import pandas as pd

    io.write_text(s3.url("r", "a.json"), '{"a": 1}\n')
    io.write_parquet(s3.url("r", "t.parquet"), pd.DataFrame({"x": [1, 2]}))
    io.write_csv(s3.url("r", "t.csv"), pd.DataFrame({"x": [1, 2]}))
    assert json.loads(Location(s3.url("r", "a.json")).read_text()) == {"a": 1}
    assert Location(s3.url("r", "t.csv")).read_text() == "x\n1\n2\n"
    io.write_text(s3.url("d", "items.jsonl"), '{"q": 1}\n{"q": 2}\n')
    got = io.read_json_records(s3.url("d", "items.jsonl"))
    assert got.records == [{"q": 1}, {"q": 2}] and str(got.path).startswith("s3://")
    with pytest.raises(CkptselError, match="cannot read"):
        io.read_json_records(s3.url("d", "missing.jsonl"))


def _folder(s3, tmp_path) -> str:
    src = tmp_path / "ck"
    src.mkdir()
    (src / "adapter_config.json").write_text("{}")
    (src / "adapter_model.safetensors").write_bytes(b"w" * 5000)
    (src / "optimizer.pt").write_bytes(b"o" * 9000)  # never read by a measurement
    (src / "sub").mkdir()
    (src / "sub" / "x.txt").write_text("x")
    return s3.upload(src, "run", "checkpoint-5")


def test_node_cache_downloads_once_and_follows_changes(s3, tmp_path):
    url = _folder(s3, tmp_path)
    before = dict(nodecache.STATS)
    local = nodecache.local_copy(url)
    assert local.is_dir() and str(local).startswith(str(nodecache.cache_root()))
    assert sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "sub/x.txt",
    ]
    assert nodecache.local_copy(url) == local  # a hit: one LIST, nothing downloaded
    assert nodecache.STATS["downloads"] - before["downloads"] == 1
    assert nodecache.STATS["hits"] - before["hits"] == 1
    s3.fs.pipe_file(f"{s3.bucket}/run/checkpoint-5/adapter_config.json", b'{"r": 8}')
    assert (nodecache.local_copy(url) / "adapter_config.json").read_text() == '{"r": 8}'
    assert nodecache.STATS["downloads"] - before["downloads"] == 2
    # a single file, and a local path (returned as it is)
    item = nodecache.local_copy(s3.url("run", "checkpoint-5", "sub", "x.txt"))
    assert item.read_text() == "x" and item.name == "x.txt"
    assert nodecache.local_copy(tmp_path) == tmp_path
    assert nodecache.local_ref("org/model") == "org/model" and nodecache.local_ref(None) is None
    with pytest.raises(CkptselError, match="not found"):
        nodecache.local_copy(s3.url("nothing-here"))


def test_node_cache_one_download_for_concurrent_users(s3, tmp_path):
    url = _folder(s3, tmp_path)
    before = dict(nodecache.STATS)
    got = []
    threads = [threading.Thread(target=lambda: got.append(nodecache.local_copy(url))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 1
    assert nodecache.STATS["downloads"] - before["downloads"] == 1
    assert nodecache.STATS["hits"] - before["hits"] == 2
    # a download killed half way leaves a temp folder that is never trusted
    key = got[0].name
    dead = got[0].parent / f"{key}.tmp-999999"
    dead.mkdir()
    (got[0].parent / f"{key}.json").unlink()  # as if the copy had not been recorded
    assert nodecache.local_copy(url) == got[0] and not dead.exists()
