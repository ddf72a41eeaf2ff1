"""``analyze`` and ``verify`` with records and results at URLs (issue 21), against a real S3
API (moto's server on 127.0.0.1): ``ckptsel analyze s3://…/records --out s3://…/results``
writes the same summary.json and tables as from local folders (the manifest last, each file one
PUT); ``ckptsel verify`` on the URL passes, and names the URL of a file changed there; a second
analysis replaces the first; a prefix that holds other files is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckptsel.cli.app import main
from ckptsel.records.store import upsert_records

import recordsgen as rg

FAST = ["--permutations", "20", "--draws", "200", "--budgets", "8", "--no-report"]


def cli(args: list[str], capsys) -> tuple[int, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    got = capsys.readouterr()
    return code, " ".join((got.out + got.err).split())  # rich wraps long lines


def test_analyze_and_verify_at_urls(s3, tmp_path, capsys):
    gen, nll = rg.tables(rg.random_study(np.random.default_rng(5), n_configs=2, seeds=2))
    local = tmp_path / "records"
    upsert_records(local, generations=gen, nll=nll)
    remote = s3.upload(local, "records")
    code, said = cli(["analyze", local, "--out", tmp_path / "results", *FAST], capsys)
    assert code == 0, said
    out = s3.url("results")
    code, said = cli(["analyze", remote, "--out", out, *FAST], capsys)
    assert code == 0, said
    assert f"wrote {out}/summary.json" in said
    manifest = json.loads((tmp_path / "results" / "manifest.json").read_text())
    assert s3.keys("results") == sorted([*manifest["files"], "manifest.json"])
    for rel in manifest["files"]:
        if rel != "run.json":  # names the records folder analyzed
            assert s3.fs.cat_file(f"{s3.bucket}/results/{rel}") == (tmp_path / "results" / rel).read_bytes(), rel
    assert json.loads(s3.fs.cat_file(f"{s3.bucket}/results/run.json"))["records_dir"] == remote
    assert s3.fs.list_multipart_uploads(s3.bucket) == []

    code, said = cli(["verify", out], capsys)  # the records found through run.json
    assert code == 0, said
    assert f"results: {out}/summary.json reproduced exactly" in said

    # again, with another seed: the new results replace the old, nothing left over
    code, said = cli(["analyze", remote, "--out", out, *FAST, "--seed", "7"], capsys)
    assert code == 0, said
    assert json.loads(s3.fs.cat_file(f"{s3.bucket}/results/summary.json"))["seed"] == 7
    assert cli(["verify", out], capsys)[0] == 0

    table = f"{s3.bucket}/results/tables/main.md"
    s3.fs.pipe_file(table, s3.fs.cat_file(table) + b"\n")
    code, said = cli(["verify", out], capsys)
    assert code == 1 and f"{out}/tables/main.md" in said, said

    s3.fs.pipe_file(f"{s3.bucket}/mine/notes.txt", b"mine")
    code, said = cli(["analyze", remote, "--out", s3.url("mine"), *FAST], capsys)
    assert code == 2 and "not a ckptsel results folder" in said and said.startswith("error:")
    assert s3.keys("mine") == ["notes.txt"]
    code, said = cli(["verify", s3.url("nothing")], capsys)
    assert code == 2 and "no summary to verify" in said, said


@pytest.fixture(autouse=True)
def _moto(s3):  # every test here needs the server
    return s3


def test_results_and_records_at_urls_logged_to_a_tracker(s3, tmp_path, capsys, monkeypatch):
    """``analyze s3://…/records --out s3://…/results --log mlflow``: the run holds the results'
    files (summary.json byte for byte), names the URLs, and hashes the records at their URL as
    the local folder they were uploaded from (the read cache the analysis left there aside)."""
    import re

    from ckptsel.trackers.base import records_sha256

    from offline_trackers import import_mlflow, offline_env

    mlflow = import_mlflow()
    uri = offline_env(monkeypatch, tmp_path / "stores")["mlflow"]
    gen, nll = rg.tables(rg.random_study(np.random.default_rng(6), n_configs=2, seeds=2))
    local = tmp_path / "records"
    upsert_records(local, generations=gen, nll=nll)
    remote, out = s3.upload(local, "records"), s3.url("results")
    code, said = cli(["analyze", remote, "--out", out, *FAST, "--log", "mlflow"], capsys)
    assert code == 0, said
    [run_id] = re.findall(r"mlflow: logged to run \S+ \((\w+)\)", said)
    client = mlflow.MlflowClient(tracking_uri=uri)
    data = client.get_run(run_id).data
    given = {**data.tags, **data.params}  # settings are params now (a changed re-log: a tag)
    assert given["ckptsel.results_dir"] == out and given["ckptsel.records_dir"] == remote
    assert given["ckptsel.records_sha256"] == records_sha256(local) == records_sha256(remote)
    got = mlflow.artifacts.download_artifacts(
        run_id=run_id, artifact_path="ckptsel/summary.json", dst_path=str(tmp_path / "dl"), tracking_uri=uri
    )
    assert open(got, "rb").read() == s3.fs.cat_file(f"{s3.bucket}/results/summary.json")
