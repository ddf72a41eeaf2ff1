"""Nothing from outside runs or lands where it should not (issue 30): training state read as
data only, local paths built from remote names kept inside their root, environment forwarded to
Ray workers only when asked, files created with the user's umask."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError

from clirun import run_cli

QUESTIONS = [(f"What is {a} plus {b}?", f"{a} + {b} = {a + b}.\nThe answer is: {a + b}") for a in range(1, 5) for b in range(1, 3)]


# --------------------------------------------------------------------------- resume state


class _Planted:
    """A pickle that touches a marker file when unpickled (what a planted checkpoint does)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny LoRA trajectory interrupted after its first checkpoint (25 of 30 steps)."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import torch

    from ckptsel.data.prompts import format_prompt
    from ckptsel.sim.tiny import save_tiny
    from ckptsel.study.configuration import Configuration
    from ckptsel.train.models import load_tokenizer
    from ckptsel.train.trajectory import encode_example, train_trajectory

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("resume")
    texts = [format_prompt(q) + " " + r for q, r in QUESTIONS]
    base = save_tiny(root / "tiny", texts, vocab_size=200, hidden_size=16, layers=1, heads=2)
    tok = load_tokenizer(str(base))
    examples = [encode_example(tok, format_prompt(q), r) for q, r in QUESTIONS]
    cfg = Configuration(name="c", adaptation="lora", rank=2, alpha=4, lr=1e-2, steps=30, save_every=25, batch_size=2, micro_batch=2)

    def train(run: Path, **kw):
        return train_trajectory(str(base), examples, cfg, 42, run, tokenizer=tok, progress=False, **kw)

    run = root / "run" / "c-s42"
    assert train(run, stop_after=25).saved_steps == [25]
    yield run, train
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_planted_pickle_in_training_state_does_not_run(tiny_run, tmp_path, name):
    import torch

    src, train = tiny_run
    run = tmp_path / "c-s42"
    shutil.copytree(src, run)
    marker = tmp_path / "PWNED"
    torch.save({"state": _Planted(marker)}, run / "checkpoint-25" / name)
    with pytest.raises(CkptselError) as e:
        train(run)
    assert not marker.exists(), "a pickle in a checkpoint ran code"
    msg = str(e.value)
    assert "\n" not in msg and name in msg and "cannot resume" in msg and "posix.system" in msg
    # the original (ckptsel-written) state resumes as before
    shutil.copy2(src / "checkpoint-25" / name, run / "checkpoint-25" / name)
    again = train(run)
    assert again.resumed_from == 25 and again.saved_steps == [30]
    assert not marker.exists()


def test_unreadable_training_state_is_one_line(tiny_run, tmp_path):
    src, train = tiny_run
    run = tmp_path / "c-s42"
    shutil.copytree(src, run)
    (run / "checkpoint-25" / "optimizer.pt").write_bytes(b"not a torch file")
    with pytest.raises(CkptselError, match="optimizer.pt: cannot resume") as e:
        train(run)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- remote names


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "a/.", "", "a\\..\\x", "a\0b", ".."])
def test_safe_join_refuses_names_that_leave_the_root(tmp_path, name):
    from ckptsel._util.locations import safe_join

    with pytest.raises(CkptselError, match="refusing the name") as e:
        safe_join(tmp_path / "root", name, source="s3://b/run")
    assert "\n" not in str(e.value) and str(e.value).startswith("s3://b/run: ")


def test_safe_join_refuses_a_path_through_a_symlink_out_of_the_root(tmp_path):
    from ckptsel._util.locations import safe_join

    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "link").symlink_to(outside)
    (root / "inner").mkdir()
    (root / "same").symlink_to(root / "inner")
    with pytest.raises(CkptselError, match="leads out of"):
        safe_join(root, "link/x", source="manifest.json")
    assert safe_join(root, "same/x") == root / "same" / "x"  # a symlink that stays inside
    assert safe_join(root, "a/b.json") == root / "a" / "b.json"
    assert safe_join(root, "checkpoint-25/adapter_config.json").parent == root / "checkpoint-25"


def _put(s3, key: str, data: bytes) -> None:
    """One object under exactly ``key`` (no client-side normalization of ``..``)."""
    s3.fs.call_s3("put_object", Bucket=s3.bucket, Key=key, Body=data)


@pytest.mark.parametrize(
    ("bad", "target"), [("checkpoint-25/../../ESCAPED", "ESCAPED"), ("checkpoint-25//ESCAPED", "run/checkpoint-25/ESCAPED")]
)
def test_node_cache_refuses_object_keys_that_leave_the_cache(s3, tmp_path, bad, target):
    """d664043 copied ``run/checkpoint-25/../../ESCAPED`` to ``<cache>/ESCAPED`` (the object
    the normalized key names), beside the cache's folders, and returned 0."""
    from ckptsel._util import nodecache

    _put(s3, "run/checkpoint-25/adapter_config.json", b"{}")
    _put(s3, f"run/{bad}", b"planted")
    _put(s3, target, b"planted")
    assert f"{bad}" in s3.keys("run"), s3.keys("run")
    with pytest.raises(CkptselError, match="refusing the name") as e:
        nodecache.local_copy(s3.url("run"))
    msg = str(e.value)
    assert "\n" not in msg and bad in msg and s3.url("run") in msg
    assert not list(tmp_path.rglob("ESCAPED")), list(tmp_path.rglob("ESCAPED"))
    cache = tmp_path / "node-cache"
    assert not cache.exists() or not [p for p in cache.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("entry", ["../../ESCAPED", "/tmp/ESCAPED-abs", "tables/../../../ESCAPED"])
def test_verify_refuses_manifest_entries_that_leave_its_copy(s3, tmp_path, monkeypatch, capsys, entry):
    """d664043 wrote every manifest entry under verify's temporary copy unchecked: ``../../X``
    landed beside the temporary folder (anywhere the user can write, with more ``..``)."""
    import json
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # verify's copy goes below here
    manifest = {"kind": "ckptsel-results", "schema": 1, "files": {"summary.json": "0", entry: "0"}}
    _put(s3, "a/b/results/manifest.json", json.dumps(manifest).encode())
    _put(s3, "a/b/results/summary.json", b"{}")
    _put(s3, "a/ESCAPED", b"planted")  # what a/b/results/../../ESCAPED names
    _put(s3, "a/b/results/tables/ESCAPED", b"planted")
    code, said = run_cli(["verify", s3.url("a", "b", "results")], capsys)
    assert not list(tmp_path.rglob("ESCAPED*")), list(tmp_path.rglob("ESCAPED*"))
    assert not Path("/tmp/ESCAPED-abs").exists()
    assert code == 2 and "Traceback" not in said, said
    line = " ".join(said.split())
    assert "refusing the name" in line and entry in line and "manifest.json" in line


# --------------------------------------------------------------------------- Ray environment


class _FakeRemote:
    """What ``ray.remote(...)(cls)`` returns, recording the ``runtime_env`` it is given."""

    def __init__(self, seen: dict):
        self.seen = seen

    def options(self, runtime_env=None, **_):
        self.seen["runtime_env"] = runtime_env
        return self

    def remote(self, *args):
        return args


class _FakeRay:
    def __init__(self):
        self.seen: dict = {}

    def remote(self, **_):
        return lambda cls: _FakeRemote(self.seen)


def _actor_env(monkeypatch, forward: bool) -> dict[str, str]:
    from ckptsel.measure.executors.base import ExecutorConfig
    from ckptsel.measure.executors.ray_actors import RayExecutor

    ex = RayExecutor.__new__(RayExecutor)  # no Ray: the actors' options are what is checked
    ex.ray, ex.ex = _FakeRay(), ExecutorConfig("ray", workers=1, forward_credentials=forward)
    ex.config, ex.ckpts, ex.base = None, [], None
    ex._start(1)
    return (ex.ray.seen.get("runtime_env") or {}).get("env_vars", {})


def test_fsspec_and_gcsfs_variables_go_to_ray_workers_only_with_forward_credentials(monkeypatch):
    for key in list(os.environ):
        if key.startswith(("AWS_", "FSSPEC_", "GCSFS_", "GOOGLE_")):
            monkeypatch.delenv(key)
    secrets = {
        "FSSPEC_S3_KEY": "AKIA-secret",
        "FSSPEC_S3_SECRET": "s3-secret",
        "GCSFS_TOKEN": "gcs-token",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
    }
    settings = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"}
    for key, value in {**secrets, **settings}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", "/tmp/cache-{node}")
    plain = _actor_env(monkeypatch, forward=False)
    assert not set(secrets) & set(plain), plain
    assert settings.items() <= plain.items() and plain["CKPTSEL_CACHE_DIR"] == "/tmp/cache-{node}"
    forwarded = _actor_env(monkeypatch, forward=True)
    assert {**secrets, **settings}.items() <= forwarded.items()


# --------------------------------------------------------------------------- file modes


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield 0o027
    os.umask(old)


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_mode & 0o777 for p in [root, *root.rglob("*")]}


def test_records_and_results_are_created_with_the_umask(tmp_path, umask_027, capsys):
    """d664043 made every atomically written file 0600 (mkstemp) and the results folder 0700
    (mkdtemp), whatever the umask; ``--force`` narrowed a user's 0755 folder to 0700."""
    import numpy as np

    from ckptsel._util.locations import Location

    import recordsgen as rg

    gen, nll = rg.tables(rg.random_study(np.random.default_rng(3), n_configs=2, seeds=2))
    rec = rg.write(tmp_path / "records", gen, nll)
    for rel, mode in _modes(rec).items():
        assert mode == (0o750 if (rec / rel).is_dir() else 0o640), (rel, oct(mode))
    Location(tmp_path / "plain.bin").write_bytes(b"x")
    assert (tmp_path / "plain.bin").stat().st_mode & 0o777 == 0o640
    fast = ["--permutations", "10", "--draws", "200", "--no-report"]
    code, said = run_cli(["analyze", rec, "--out", tmp_path / "res", *fast], capsys)
    assert code == 0, said
    modes = _modes(tmp_path / "res")
    assert modes["."] == 0o750 and modes["summary.json"] == 0o640, modes
    for rel, mode in modes.items():
        assert mode == (0o750 if (tmp_path / "res" / rel).is_dir() else 0o640), (rel, oct(mode))
    # --force into a user's folder keeps that folder's mode (neither narrowed nor widened)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    for mode in (0o755, 0o700):
        mine.chmod(mode)
        code, said = run_cli(["analyze", rec, "--out", mine, *fast, "--force"], capsys)
        assert code == 0, said
        assert mine.stat().st_mode & 0o777 == mode and (mine / "summary.json").is_file()
