"""Inflate limits on inspect ``.eval`` logs (issue 30): a ZIP whose member inflates far past
its compressed size is refused in one line naming the file and the member, streamed with a
counter (never inflated whole), and nothing is written. Real bombs, built here."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError
from ckptsel.ingest.inspect import ingest_inspect, read_inspect_log
from inspectcase import eval_members, write_eval  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "harness_logs" / "inspect"
[JSON_LOG] = sorted(DATA.glob("*.json"))
QUIET = {"note": lambda m: None}
PAD = 40 << 20  # a 40 MiB member: past the 16 MiB floor, about 1.3 KB compressed with zstd


def test_a_plain_built_log_reads_as_the_json_log(tmp_path):
    """The writer above makes logs the reader takes (so the refusals below are the limit's)."""
    for method in (93, 8):
        p = write_eval(tmp_path / f"ok{method}.eval", eval_members(), method)
        header, samples = read_inspect_log(p)
        want_header, want = read_inspect_log(JSON_LOG)
        assert header["eval"] == want_header["eval"] and samples == want


@pytest.mark.parametrize("method", [93, 8])
def test_a_zip_bomb_member_is_refused_naming_file_and_member(tmp_path, method):
    bomb = write_eval(tmp_path / "bomb.eval", eval_members(PAD), method)
    assert bomb.stat().st_size < 200_000  # a small file ...
    with zipfile.ZipFile(bomb) as zf:  # ... holding a member of 40 MiB
        assert max(i.file_size for i in zf.infolist()) > PAD
    out = tmp_path / "records"
    with pytest.raises(CkptselError) as err:
        ingest_inspect([bomb], out=out, scorer="match", **QUIET)
    msg = str(err.value)
    assert "\n" not in msg and str(bomb) in msg
    first = next(n for n in eval_members() if n.startswith("samples/"))
    assert f"member {first} inflates to more than" in msg and "ZIP bomb" in msg
    assert not out.exists()


def test_the_limits_follow_the_environment(tmp_path, monkeypatch):
    """A cap below a member's size refuses it; a higher ratio lets a bomb through."""
    members = eval_members()
    ok = write_eval(tmp_path / "ok.eval", members)
    head = len(members["header.json"])
    monkeypatch.setenv("CKPTSEL_INFLATE_MAX_BYTES", str(head - 1))
    with pytest.raises(CkptselError, match=f"member header.json inflates to more than {head - 1} "):
        read_inspect_log(ok)
    # each member under the cap, the log over it: refused at the member that passes it
    monkeypatch.setenv("CKPTSEL_INFLATE_MAX_BYTES", str(head + 100))
    with pytest.raises(CkptselError, match=rf"member samples/\S+ inflates to more than the {head + 100} bytes the whole log"):
        read_inspect_log(ok)
    monkeypatch.setenv("CKPTSEL_INFLATE_MAX_BYTES", "a lot")
    with pytest.raises(CkptselError, match=r"CKPTSEL_INFLATE_MAX_BYTES='a lot'"):
        read_inspect_log(ok)
    monkeypatch.delenv("CKPTSEL_INFLATE_MAX_BYTES")
    small = write_eval(tmp_path / "small.eval", eval_members(20 << 20))
    with pytest.raises(CkptselError, match="ZIP bomb"):
        read_inspect_log(small)
    monkeypatch.setenv("CKPTSEL_INFLATE_MAX_RATIO", "1000000")
    header, samples = read_inspect_log(small)
    assert len(samples) == len(read_inspect_log(JSON_LOG)[1])


def test_an_lm_eval_gzip_bomb_is_refused_while_it_inflates(tmp_path, monkeypatch):
    """lm-eval's ``.jsonl.gz`` samples are held to the same limits: a line padded to 40 MiB
    (valid JSON, about 40 KB compressed) is refused in one line naming the file, and a plain
    ``.jsonl.gz`` reads as its ``.jsonl``."""
    import gzip
    import tracemalloc

    from ckptsel.ingest.lm_eval import ingest_lm_eval, read_samples
    from lmevalcase import gsm8k_line, write_samples

    lines = [gsm8k_line(0, "#### 18", "strict-match", "18", 1.0)]
    plain = write_samples(tmp_path / "plain", "gsm8k", lines)
    zipped = write_samples(tmp_path / "zipped", "gsm8k", lines, gz=True)
    assert read_samples(zipped) == read_samples(plain)
    folder = tmp_path / "evals" / "checkpoint-100"
    bomb = write_samples(folder, "gsm8k", lines, gz=True)
    with gzip.open(bomb, "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(lines[0]) + " " * PAD + "\n")
    assert bomb.stat().st_size < 200_000
    out = tmp_path / "records"
    tracemalloc.start()
    try:
        with pytest.raises(CkptselError) as err:
            ingest_lm_eval([folder], out=out, task="gsm8k", filter_name="strict-match", **QUIET)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(err.value)
    assert "\n" not in msg and str(bomb) in msg and "gzip bomb" in msg
    assert peak < 24 << 20  # stopped at the 16 MiB floor, never read whole (40 MiB)
    assert not out.exists()
    monkeypatch.setenv("CKPTSEL_INFLATE_MAX_RATIO", "1000000")  # the limits are the user's
    assert len(read_samples(bomb)) == 1
