"""Issue 45, items 5 (the wheel) and 7 (caches), through the command line as a user types it.

* Without torch, transformers or jinja2 (a ``sitecustomize`` on ``PYTHONPATH`` makes importing
  them raise ``ModuleNotFoundError``; nothing is uninstalled), every command that needs them
  says in one line which extra to install, exit 2, and writes nothing; ``run --dry-run`` plans
  a study without torch.
* The caches bind their entries to a per-user key outside the cache folder (HMAC-SHA256): a
  conformance verdict flipped to "passed" with ckptsel's plain digest recomputed, a pack with
  every ``correct`` flipped and its footer kept, an array memo with its CRC recomputed, an
  entry keyed by another user's key: none is trusted (the numbers are the unforged ones). A
  key file that is not one (truncated, a folder, a FIFO, open to others, ...) is refused in
  one line naming it, exit 2, nothing written.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ckptsel.records.cache import memo, pack
from ckptsel.records.store import upsert_records
from ckptsel.records.units import UNITS_DIR, list_units

import recordsgen as rg
from clirun import run_cli
from tinyrun import POOL_STUDY

HINT = "pip install 'ckptsel[ml]'"
BLOCKER = """
import os, sys

class _Blocked:
    names = set(os.environ.get("CKPTSEL_TEST_BLOCK", "").split(","))

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Blocked())
"""
ALL = "torch,transformers,jinja2"


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def one_line(code: int, said: str, *needles: str, exit_code: int = 2) -> str:
    """The refusal: ``exit_code``, exactly one line of message naming ``needles``, no traceback."""
    lines = [ln for ln in said.strip().splitlines() if ln.strip()]
    assert code == exit_code, said
    assert len(lines) == 1 and lines[0].startswith("error:"), said
    assert "Traceback" not in said, said
    for needle in needles:
        assert needle in lines[0], said
    return lines[0]


# ------------------------------------------------------------------ without torch (item 5)


@pytest.fixture(scope="module")
def blocker(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return folder


@pytest.fixture
def place(tmp_path: Path) -> Path:
    """A study (no base model here), a run folder with one checkpoint, a prompt template."""
    rows = [
        {
            "query": f"Ann has {a} pens and gets {a + 1} more. How many?",
            "response": f"The answer is: {2 * a + 1}",
            "original_question": f"q{a}",
        }
        for a in range(40)
    ]
    (tmp_path / "pool.json").write_text(json.dumps(rows))
    test = [{"question": f"Bo has {a} cups; {a} more?", "answer": f"#### {2 * a}"} for a in range(6)]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in test))
    (tmp_path / "study.toml").write_text(POOL_STUDY)
    (tmp_path / "run" / "checkpoint-1").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-1" / "config.json").write_text("{}")
    (tmp_path / "template.txt").write_text("### Q\n{{ instruction }}\n### A\n")
    return tmp_path


def ckptsel(args: list[str], where: Path, blocker: Path, block: str = ALL) -> tuple[int, str, str]:
    """``ckptsel ARGS`` in a new process, in ``where``, with ``block``'s packages unimportable."""
    path = os.pathsep.join(p for p in (str(blocker), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CKPTSEL_TEST_BLOCK": block}
    done = subprocess.run([sys.executable, "-m", "ckptsel", *args], cwd=where, env=env, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


MEASURE = ["measure", "run", "--task", "gsm8k", "--validation", "test.jsonl", "--test", "test.jsonl", "--out", "rec", "--no-progress"]
NEEDS_ML = [
    pytest.param(MEASURE, ALL, ["ckptsel measure", "torch and transformers"], id="measure"),
    pytest.param(MEASURE, "torch", ["ckptsel measure needs torch,"], id="measure-torch-only"),
    pytest.param(MEASURE, "transformers", ["ckptsel measure needs transformers,"], id="measure-transformers-only"),
    pytest.param([*MEASURE[:-1], "--only", "nll"], ALL, ["ckptsel measure"], id="measure-only-nll"),
    pytest.param(["watch", *MEASURE[1:], "--timeout", "5", "--poll", "1", "--settle", "0"], ALL, ["ckptsel watch"], id="watch"),
    pytest.param(["quickstart", "--fast", "--out", "qs"], ALL, ["ckptsel quickstart"], id="quickstart"),
    pytest.param(["run", "study.toml"], ALL, ["ckptsel run", "--only analyze"], id="run"),
    pytest.param(["run", "study.toml", "--until", "train"], ALL, ["ckptsel run"], id="run-until-train"),
    pytest.param(["run", "study.toml", "--only", "measure"], ALL, ["ckptsel run"], id="run-only-measure"),
    pytest.param(["run", "study.toml", "--device", "cuda"], ALL, ["ckptsel run"], id="run-device"),
    pytest.param(["run", "study.toml", "--json"], ALL, ["ckptsel run"], id="run-json"),
]


@pytest.mark.parametrize(("args", "block", "needles"), NEEDS_ML)
def test_a_command_that_needs_the_ml_extra_says_which_to_install(place, blocker, args, block, needles):
    before = files_under(place)
    code, out, err = ckptsel(args, place, blocker, block)
    one_line(code, err, HINT, *needles)
    assert "Traceback" not in out, out
    assert files_under(place) == before  # nothing written (no records, no status, no split)


def test_a_template_file_without_jinja2_says_so_in_one_line(place, blocker):
    """jinja2 is a core dependency (pyproject.toml): a broken install names it."""
    code, out, err = ckptsel(["tasks", "show", "gsm8k", "--prompt-format", "template.txt"], place, blocker)
    one_line(code, err, "ckptsel tasks show needs jinja2", "pip install jinja2")
    assert "Traceback" not in out


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_run_dry_run_plans_without_torch_and_writes_nothing(place, blocker, as_json):
    before = files_under(place)
    code, out, err = ckptsel(["run", "study.toml", "--dry-run", *(["--json"] if as_json else [])], place, blocker)
    assert code == 0 and "Traceback" not in out + err, out + err
    said = out + err
    assert "LoRA target modules not checked (torch and transformers not installed" in said, said
    assert HINT in said
    if as_json:
        plan = json.loads(out)["plan"]
        assert [(p["trajectory"], p["generations_todo"]) for p in plan] == [("a-s1", 16)], plan
    else:
        assert "16 generations to do" in out, out
    assert files_under(place) == before


def test_the_analysis_runs_without_torch(place, blocker):
    code, out, err = ckptsel(["simulate", "sim", "--preset", "small"], place, blocker)
    assert code == 0, out + err
    code, out, err = ckptsel(["analyze", "sim", "--out", "res", "--no-report", "--draws", "200", "--permutations", "10"], place, blocker)
    assert code == 0 and (place / "res" / "summary.json").is_file(), out + err


# ------------------------------------------------------------------ the key file (item 7)


@pytest.fixture(scope="module")
def study():
    return rg.tables(rg.random_study(np.random.default_rng(45), n_configs=2, seeds=2))


@pytest.fixture(scope="module")
def reference(study, tmp_path_factory) -> bytes:
    """summary.json from the single-file form of the records (no units, no packs, no memo)."""
    tmp = tmp_path_factory.mktemp("ref")
    rg.write(tmp / "single", *study)
    code, said = _analyze(tmp / "single", tmp / "out")
    assert code == 0, said
    return (tmp / "out" / "summary.json").read_bytes()


def _analyze(folder: Path, out: Path, capsys=None) -> tuple[int, str]:
    from clirun import exit_code

    args = ["analyze", folder, "--out", out, "--no-report", "--draws", "300", "--permutations", "20"]
    if capsys is None:
        return exit_code(args), ""
    return run_cli(args, capsys)


@pytest.fixture
def units(study, tmp_path: Path) -> Path:
    """The study as units, with the packs the writer keeps (under this session's key)."""
    folder = tmp_path / "units"
    gen, nll = study
    upsert_records(folder, generations=gen, nll=nll)
    return folder


def _key(tmp_path: Path, monkeypatch, make) -> Path:
    path = tmp_path / "keys" / "key"
    path.parent.mkdir(parents=True, exist_ok=True)
    path = make(path) or path
    monkeypatch.setenv("CKPTSEL_KEY_FILE", str(path))
    return path


def _bytes(n: int, mode: int = 0o600):
    def make(path: Path) -> None:
        path.write_bytes(os.urandom(n))
        path.chmod(mode)

    return make


def _through_a_file(path: Path) -> Path:
    path.write_bytes(os.urandom(32))
    return path / "key"


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere" / "key")


BAD_KEYS = [
    pytest.param(_bytes(16), "holds 16 bytes, not 32", id="truncated"),
    pytest.param(_bytes(0), "holds 0 bytes, not 32", id="empty"),
    pytest.param(_bytes(1 << 20), "holds 33+ bytes, not 32", id="huge"),
    pytest.param(lambda p: p.mkdir(), "is a folder, not a file", id="a-folder"),
    pytest.param(lambda p: os.mkfifo(p, 0o600), "is not a regular file", id="a-fifo-never-opened"),
    pytest.param(_bytes(32, 0o644), "open to other users (mode 0644", id="readable-by-others"),
    pytest.param(_bytes(32, 0o622), "open to other users (mode 0622", id="writable-by-others"),
    pytest.param(_through_a_file, "cannot be read", id="under-a-file"),
    pytest.param(_dangling, "cannot be read", id="dangling-link"),
    pytest.param(
        _bytes(32, 0o000),
        "cannot be read",
        id="unreadable",
        marks=pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000"),
    ),
]


@pytest.mark.parametrize(("make", "needle"), BAD_KEYS)
def test_a_key_file_that_is_not_one_is_refused_by_analyze(units, tmp_path, monkeypatch, capsys, make, needle):
    path = _key(tmp_path, monkeypatch, make)
    before = files_under(units)
    code, said = _analyze(units, tmp_path / "res", capsys)
    one_line(code, said, str(path), needle, "the key of ckptsel's caches")
    assert not (tmp_path / "res").exists() and files_under(units) == before


@pytest.mark.parametrize("command", ["measure", "watch"])
@pytest.mark.parametrize(("make", "needle"), BAD_KEYS[:4:3])
def test_a_key_file_that_is_not_one_is_refused_before_measure_writes(place, tmp_path, monkeypatch, capsys, make, needle, command):
    path = _key(tmp_path, monkeypatch, make)
    monkeypatch.chdir(place)
    before = files_under(place)
    code, said = run_cli([command, *MEASURE[1:]], capsys)
    one_line(code, said, str(path), needle)
    assert files_under(place) == before


@pytest.mark.parametrize(("make", "needle"), BAD_KEYS[:4])
def test_a_key_file_that_is_not_one_is_refused_by_verify_conformance(tmp_path, monkeypatch, capsys, make, needle):
    _conformance_entry(tmp_path, monkeypatch)
    path = _key(tmp_path, monkeypatch, make)
    code, said = run_cli(["verify", "--conformance"], capsys)
    one_line(code, said, str(path), needle)


def test_the_key_is_made_on_first_use_0600_outside_the_caches(units, tmp_path, monkeypatch, reference):
    monkeypatch.delenv("CKPTSEL_KEY_FILE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    code, _ = _analyze(units, tmp_path / "res")
    assert code == 0 and (tmp_path / "res" / "summary.json").read_bytes() == reference
    key = tmp_path / "config" / "ckptsel" / "key"
    assert key.is_file() and len(key.read_bytes()) == 32
    assert key.stat().st_mode & 0o777 == 0o600 and key.parent.stat().st_mode & 0o077 == 0
    assert not files_under(units) & {"key", ".cache/key"}


# ------------------------------------------------------------------ forged caches (item 7)


def _pack_files(folder: Path) -> list[Path]:
    return sorted((folder / UNITS_DIR / pack.PACKS_DIR / "generations").glob("*.parquet"))


def _flip_pack(path: Path, recompute: bool) -> None:
    """Every ``correct`` of the pack flipped, its footer kept (``recompute``: and its rows'
    digest recomputed by ckptsel's own function, as a careful forger would)."""
    with pq.ParquetFile(path) as f:
        meta = dict(f.schema_arrow.metadata)
        groups = [f.read_row_group(g) for g in range(f.metadata.num_row_groups)]
    i = groups[0].schema.get_field_index("correct")
    groups = [t.set_column(i, "correct", pc.invert(t.column("correct"))) for t in groups]
    _write_groups(path, groups, meta)
    if recompute and hasattr(pack, "rows_digest"):
        data = path.read_bytes()
        blob = json.loads(meta[pack.PACK_KEY])
        blob["rows"] = pack.rows_digest(data, pq.ParquetFile(pa.BufferReader(data)))
        meta[pack.PACK_KEY] = json.dumps(blob, separators=(",", ":")).encode()
        _write_groups(path, groups, meta)


def _write_groups(path: Path, groups: list[pa.Table], meta: dict) -> None:
    """The pack's layout kept: one row group per split, page checksums on, its footer ``meta``."""
    schema = groups[0].schema.with_metadata(meta)
    with pq.ParquetWriter(path, schema, write_page_checksum=True) as writer:
        for t in groups:
            writer.write_table(t.replace_schema_metadata(meta), row_group_size=t.num_rows)


def _keep_listing(folder: Path, forge) -> None:
    """``forge`` every pack, their modification times put back (nothing else tells)."""
    for path in _pack_files(folder):
        st = path.stat()
        forge(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("recompute", [False, True], ids=["footer-kept", "rows-digest-recomputed"])
def test_a_pack_with_every_correct_flipped_does_not_change_the_summary(units, tmp_path, reference, recompute):
    assert _pack_files(units)
    _keep_listing(units, lambda p: _flip_pack(p, recompute))
    for out in ("res1", "res2"):  # twice: the second after the reader rebuilt the packs
        shutil.rmtree(units / memo.MEMO_DIR, ignore_errors=True)
        code, _ = _analyze(units, tmp_path / out)
        assert code == 0
        assert (tmp_path / out / "summary.json").read_bytes() == reference


def test_a_pack_keyed_by_another_user_is_not_trusted_and_gives_the_same_numbers(units, tmp_path, monkeypatch, reference):
    copied = units  # a shared records folder read by another user (a local copy has new inodes:
    # its packs are stale anyway; on an object store the ETags stay)
    monkeypatch.setenv("CKPTSEL_KEY_FILE", str(tmp_path / "other-user" / "key"))
    assert _pack_files(copied)
    for path in _pack_files(copied):
        traj = path.stem
        meta = pq.read_schema(path).metadata
        assert pack.current(meta, list_units(copied, "generations", traj)) is None
    shutil.rmtree(copied / memo.MEMO_DIR, ignore_errors=True)
    code, _ = _analyze(copied, tmp_path / "res")
    assert code == 0 and (tmp_path / "res" / "summary.json").read_bytes() == reference


def _forge_memo(path: Path) -> None:
    """The first ``correct`` array of a memo file flipped and its CRC32 recomputed (what a
    forger of the old format had to do), its header otherwise kept."""
    buf = bytearray(path.read_bytes())
    magic = b"CKPTSEL-MEMO\n"
    n = int.from_bytes(buf[len(magic) : len(magic) + 8], "little")
    start = len(magic) + 8 + n
    head = json.loads(bytes(buf[len(magic) + 8 : start]))
    name = next(k for k in head["arrays"] if k.endswith("correct"))
    stored, shape, offset, _, _ = head["arrays"][name]
    size = int(np.prod(shape)) * np.dtype(stored).itemsize
    a = np.frombuffer(bytes(buf[start + offset : start + offset + size]), dtype=stored)
    buf[start + offset : start + offset + size] = (1 - a).astype(stored).tobytes()
    if "crc32" in head:
        head["crc32"] = zlib.crc32(bytes(buf[start:]))
    raw = json.dumps(head).encode()
    path.write_bytes(magic + len(raw).to_bytes(8, "little") + raw + bytes(buf[start:]))


def test_an_array_memo_edited_with_its_crc_recomputed_is_not_trusted(units, tmp_path, reference):
    code, _ = _analyze(units, tmp_path / "res1")  # fills the memo
    assert code == 0
    path = units / memo.MEMO_DIR / "validation.arrays"
    assert path.is_file()
    _forge_memo(path)
    code, _ = _analyze(units, tmp_path / "res2")
    assert code == 0 and (tmp_path / "res2" / "summary.json").read_bytes() == reference


# ------------------------------------------------------------------ conformance verdicts (item 7)


def _verdict(conformance, passed: bool = False):
    return conformance.Verdict(
        passed=passed,
        family="LlamaForCausalLM",
        dtype="float32",
        items=16,
        batch=4,
        checked="2026-01-01T00:00Z",
        texts=16,
        equal=16 if passed else 2,
        ties=0,
        wrong=0 if passed else 14,
        nll_worst=None,
        texts_against=conformance.UNBATCHED,
        nll_against="",
    )


def _conformance_entry(tmp_path: Path, monkeypatch, passed: bool = False) -> Path:
    """A refusal of a family (2 of 16 texts right) saved in this test's own verdict cache."""
    from ckptsel.measure import conformance

    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    key = conformance.key_string({"model": "transformers.LlamaForCausalLM", "engine": "hf", "dtype": "float32"})
    conformance.save_verdict(key, _verdict(conformance, passed))
    return conformance.cache_path()


def _plain_digest(cache: Path, **changes) -> None:
    """Every entry changed and its digest recomputed as ckptsel's unkeyed SHA-256 was."""
    import hashlib

    data = json.loads(cache.read_text())
    for key, entry in data["verdicts"].items():
        entry.update(changes)
        fields = {k: v for k, v in entry.items() if k != "digest"}
        blob = json.dumps([key, fields], sort_keys=True, separators=(",", ":"))
        entry["digest"] = "sha256:" + hashlib.sha256(blob.encode()).hexdigest()
    cache.write_text(json.dumps(data))


def test_verify_conformance_says_a_held_entry_holds(tmp_path, monkeypatch, capsys):
    _conformance_entry(tmp_path, monkeypatch)
    code, said = run_cli(["verify", "--conformance"], capsys)
    assert code == 0 and "LlamaForCausalLM float32 (hf): refused (2 of 16 texts" in said, said
    assert "holds under this user's key" in said


@pytest.mark.parametrize("how", ["flipped-to-passed-plain-digest", "another-users-key", "garbage"])
def test_verify_conformance_refuses_an_entry_that_does_not_hold(tmp_path, monkeypatch, capsys, how):
    cache = _conformance_entry(tmp_path, monkeypatch)
    if how == "flipped-to-passed-plain-digest":
        _plain_digest(cache, passed=True, equal=16, wrong=0)
    elif how == "another-users-key":
        monkeypatch.setenv("CKPTSEL_KEY_FILE", str(tmp_path / "other" / "key"))
    else:
        data = json.loads(cache.read_text())
        for entry in data["verdicts"].values():
            entry.update(passed="[red]yes[/red]\nfine", digest=None)
        cache.write_text(json.dumps(data))
    before = cache.read_bytes()
    code, said = run_cli(["verify", "--conformance"], capsys)
    line = one_line(code, said, str(cache), "do not hold under this user's key", exit_code=1)
    assert "LlamaForCausalLM float32 (hf)" in line and "[red]" not in line
    assert cache.read_bytes() == before  # verify writes nothing


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["verify"], "give a RESULTS_DIR"), (["verify", "res", "--conformance"], "not both")],
    ids=["nothing-to-verify", "both"],
)
def test_verify_says_what_to_give(tmp_path, capsys, args, needle):
    code, said = run_cli(args, capsys)
    one_line(code, said, needle)


def test_a_refusal_flipped_to_passed_with_the_plain_digest_recomputed_is_checked_again(tmp_path, monkeypatch, capsys):
    """The issue's case: a family the check refuses, its cached verdict flipped to "passed"
    and ckptsel's unkeyed digest recomputed, measured with exit 0 and "passed … read from the
    cache" in every unit. Now the entry does not hold: checked again, refused, nothing written."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from ckptsel.measure import conformance

    from archmodels import register_positionless_llama
    from clirun import measure_args
    from tinyrun import build_tiny_run

    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    tiny = build_tiny_run(tmp_path / "tiny", steps=(10,), n_validation=6, n_test=4)
    broken = tmp_path / "base-broken"
    shutil.copytree(tiny.base, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg.update(model_type="positionless_llama", architectures=["PositionlessLlamaForCausalLM"])
    (broken / "config.json").write_text(json.dumps(cfg))
    register_positionless_llama()
    code, said = run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "a", "--base", broken), capsys)
    assert code == 2 and "PositionlessLlamaForCausalLM float32" in said, said
    cache = conformance.cache_path()
    ((entry,),) = [list(json.loads(cache.read_text())["verdicts"].values())]
    _plain_digest(cache, passed=True, equal=entry["texts"], ties=0, wrong=0)
    checks = conformance.STATS["checks"]
    out = tmp_path / "b"
    code, said = run_cli(measure_args(tiny, tiny.run_dir, out, "--base", broken), capsys)
    one_line(code, said, "PositionlessLlamaForCausalLM float32", "conformance check run now")
    assert conformance.STATS["checks"] == checks + 1  # checked again, not read
    assert not list(out.rglob("*.parquet"))
