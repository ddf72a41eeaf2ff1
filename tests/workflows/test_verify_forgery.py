"""``verify`` checks instead of trusting (issue 30, item 4): a forged read cache, a report file
deleted with its manifest entry, a report rewritten with its manifest "fixed", a manifest entry
the analysis never writes, and an edited ``run.json`` are each refused with one line."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from ckptsel._util.locations import as_location
from ckptsel.cli.app import main
from ckptsel.records.cache import memo
from ckptsel.results import publish
from ckptsel.sim.simulate import write_simulation
from ckptsel.workflows.analysis import analyze, verify

FAST = dict(permutations=20, draws=300)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> tuple[Path, Path]:
    """Simulated records and their analysis with the full report (made once)."""
    tmp = tmp_path_factory.mktemp("forgery")
    records = write_simulation(tmp / "sim", "small")
    analyze(records, tmp / "res", report=True, **FAST)
    return records, tmp / "res"


@pytest.fixture
def results(analysed, tmp_path: Path) -> Path:
    """A private copy of the analysed results folder (run.json still names the records)."""
    out = tmp_path / "res"
    shutil.copytree(analysed[1], out)
    verify(out)  # the untouched copy passes
    return out


def refused(out: Path, capsys, *needles: str) -> str:
    """``ckptsel verify OUT`` exits 1 with one line (rich may wrap it) naming ``needles``."""
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(out)])
    err = capsys.readouterr().err
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    assert exc.value.code == 1, err
    assert lines and lines[0].startswith("error:") and "Traceback" not in err, err
    text = " ".join(lines)
    for needle in needles:
        assert needle in text, text
    return text


def _refresh_manifest(out: Path, drop: tuple[str, ...] = (), meta: bool = True) -> None:
    """What a careful forger does after editing files: the manifest rehashed to match, the
    ``drop`` entries removed, and (``meta=False``) its report options removed too."""
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] = {rel: publish.sha256_file(out / rel) for rel in manifest["files"] if rel not in drop}
    if not meta:
        manifest.pop("report", None)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


def test_a_forged_read_cache_is_not_trusted(analysed, tmp_path: Path, capsys) -> None:
    """A different, CRC-valid ``.cache/validation.arrays`` under the right key: the analysis
    made from it differs from the one the Parquet records give, and verify recomputes from the
    records themselves."""
    records = tmp_path / "sim"
    shutil.copytree(analysed[0], records)  # mtimes kept: the cache key still matches
    path = records / memo.MEMO_DIR / "validation.arrays"
    key = memo.source_key(as_location(records), "validation")
    arrays = memo._read(path, key)
    assert arrays is not None  # the cache is current for the copy
    forged = {name: np.array(a, order="K") for name, a in arrays.items()}
    forged["0.correct"] = 1 - forged["0.correct"]  # the first trajectory's validation answers flipped
    memo._write(path, key, forged)
    assert memo._read(path, key) is not None  # CRC-valid, under the right key
    out = tmp_path / "res"
    analyze(records, out, **FAST)  # read through the forged cache
    clean = json.loads((analysed[1] / "summary.json").read_text())
    assert json.loads((out / "summary.json").read_text()) != clean
    refused(out, capsys, "choices recomputed from", "SHA-256")
    # ... and verify neither read nor rewrote the cache: the forged file is still there
    assert memo._read(path, key) is not None and memo._read(path, key)["0.correct"].sum() == forged["0.correct"].sum()


def test_a_forged_pack_is_not_trusted(analysed, tmp_path: Path) -> None:
    """A pack edited with its footer kept is not believed (its rows' digest, under the keyed
    footer, does not hold: issue 45, item 7), nor carried into the pack rebuilt after it;
    inside ``uncached`` the records' units are read, not the trajectories' packs."""
    import pandas as pd
    import pyarrow.parquet as pq

    from ckptsel.records.cache.memo import uncached
    from ckptsel.records.scan import read_rows
    from ckptsel.records.store import write_unit

    gen = pd.read_parquet(analysed[0] / "generations.parquet")
    records = tmp_path / "units"
    traj = str(gen["trajectory"].iloc[0])
    for step, rows in list(gen[gen["trajectory"] == traj].groupby("step", observed=True))[:3]:
        write_unit(records, traj, int(step), generations=rows.reset_index(drop=True))
    full = read_rows(records, "generations")  # the writer kept the trajectory's pack
    packs = [p for p in sorted(records.rglob("*.parquet")) if ".packs" in p.parts and "generations" in p.parts]
    assert len(packs) == 1, packs
    table = pq.read_table(packs[0])
    pq.write_table(table.slice(1).replace_schema_metadata(table.schema.metadata), packs[0])
    with uncached():
        assert read_rows(records, "generations").equals(full)
    assert pq.read_table(packs[0]).num_rows == full.num_rows - 1  # neither read nor rewritten
    assert read_rows(records, "generations").equals(full)  # not believed: the units are read
    assert pq.read_table(packs[0]).num_rows == full.num_rows  # and the pack rebuilt from them


@pytest.mark.parametrize("rel", ["report.html", "tables/main_table.csv", "figures/matched_half.svg"])
def test_a_deleted_output_with_its_manifest_entry_is_refused(results: Path, rel: str, capsys) -> None:
    (results / rel).unlink()
    _refresh_manifest(results, drop=(rel,))
    publish.check_manifest(results)  # the manifest alone is consistent
    refused(results, capsys, rel, "a file this analysis writes is missing")


def test_a_deleted_report_with_its_manifest_options_is_refused(results: Path, capsys) -> None:
    """The manifest's own report options do not decide what is rebuilt."""
    (results / "report.html").unlink()
    _refresh_manifest(results, drop=("report.html",), meta=False)
    refused(results, capsys, "report.html", "missing")


def test_a_rewritten_report_with_the_manifest_updated_is_refused(results: Path, capsys) -> None:
    page = results / "report.html"
    text = page.read_text(encoding="utf-8")
    assert "unresolved" in text
    page.write_text(text.replace("unresolved", "RESOLVED POSITIVE"), encoding="utf-8")
    _refresh_manifest(results, meta=False)  # rehashed, and the report options dropped
    refused(results, capsys, "report.html", "recomputed file has SHA-256")


def test_a_manifest_entry_the_analysis_does_not_write_is_refused(results: Path, capsys) -> None:
    (results / "tables" / "bonus.csv").write_text("rule,gain\naccuracy,+9.9\n")
    manifest = json.loads((results / "manifest.json").read_text())
    manifest["files"]["tables/bonus.csv"] = publish.sha256_file(results / "tables" / "bonus.csv")
    (results / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    refused(results, capsys, "tables/bonus.csv", "not a file this analysis writes")


def test_an_edited_run_record_is_refused(results: Path, capsys) -> None:
    run = json.loads((results / "run.json").read_text())
    run["measured_by"] = ["measured by vllm 9.9 (bfloat16) on an H100"]
    (results / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    _refresh_manifest(results)
    refused(results, capsys, "run.json", "measured_by")


def test_a_report_in_every_format_is_rebuilt(results: Path) -> None:
    lines = verify(results)
    assert lines[3].startswith("manifest:")
    n = len(publish.read_manifest(results)) - 1  # run.json: its own line
    assert lines[5].startswith("run: ")
    assert f"all {n} files the analysis writes recomputed and identical, with the report" in lines[4]


# ------------------------------------------------------------ Markdown escaped (issue 30, item 5)
HOSTILE = "<svg/onload=alert(2)>|`x`\n[a](javascript:b)&"


def test_md_cell_escapes_what_a_renderer_would_interpret() -> None:
    from ckptsel._util.markdown import md_cell

    assert md_cell(HOSTILE) == "&lt;svg/onload=alert(2)&gt;\\|\\`x\\` [a\\](javascript:b)&amp;"
    assert md_cell("+1.2 [-0.3, 2.6]") == "+1.2 [-0.3, 2.6]" and md_cell("c0-s1_a") == "c0-s1_a"
    assert md_cell("a\\|b") == "a\\\\\\|b"  # the backslash first: the pipe stays escaped


def test_a_hostile_task_name_is_escaped_in_every_markdown_table(analysed, tmp_path: Path) -> None:
    """A task named like HTML, with pipes, backticks, a link and a newline, reads as text in
    tables/task_strata.md (on d664043 it appeared raw) and keeps every table's shape."""
    import pandas as pd

    from ckptsel.records.schema import GENERATIONS_FILE, NLL_FILE
    from ckptsel.records.store import write_records
    from ckptsel.report.build import write_report

    gen = pd.read_parquet(analysed[0] / "generations.parquet")
    nll = pd.read_parquet(analysed[0] / "nll.parquet")
    gen["task"] = gen["task"].astype(str).replace("math", HOSTILE)
    if "task" in nll:
        nll["task"] = nll["task"].astype(str).replace("math", HOSTILE)
    records = tmp_path / "records"
    write_records(records / GENERATIONS_FILE, gen)
    write_records(records / NLL_FILE, nll)
    out = tmp_path / "res"
    analyze(records, out, **FAST)
    write_report(out, formats=["md"])
    strata = (out / "tables" / "task_strata.md").read_text(encoding="utf-8")
    assert "&lt;svg/onload=alert(2)&gt;\\|\\`x\\` [a\\](javascript:b)&amp;" in strata
    for md in sorted((out / "tables").glob("*.md")):
        text = md.read_text(encoding="utf-8")
        assert "<svg" not in text and not re.search(r"(?<!\\)\]\(", text), md.name
        for block in text.split("\n\n"):  # every table: the same number of cells in each row
            rows = [r for r in block.splitlines() if r.startswith("|")]
            cells = {len(r.replace("\\|", "").split("|")) for r in rows}
            assert len(cells) <= 1, (md.name, rows)


def test_the_audit_markdown_escapes_pool_names_and_texts() -> None:
    from ckptsel.data.audit.findings import AuditResult, CheckResult, PairReport

    check = CheckResult(pairs=1, items_a=1, items_b=1, examples=[{"i": 0, "j": 0, "a_text": HOSTILE, "b_text": "<b>x</b>"}])
    pair = PairReport(a=HOSTILE, b="test", n_a=1, n_b=1, checks={"exact": check, "word5": CheckResult(0, 0, 0)})
    text = AuditResult(
        threshold=0.5, pools={HOSTILE: 1, "test": 1}, pairs=[pair], planted=[], control_run=False, control_notes=[HOSTILE], seconds=0.1
    ).to_markdown()
    assert "<svg" not in text and "<b>" not in text and "&lt;svg" in text
