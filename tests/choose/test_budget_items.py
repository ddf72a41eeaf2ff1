"""The items behind every budget (issue 46): a results folder's ``choices/budget_items.*`` and
``ckptsel budgets``. Fed back to the independent reference's rules (``tests/reference_impl.py``),
each permutation's listed items give, averaged over the permutations, exactly the frozen
choices, for every trajectory, scheme, rule and budget; the lists from the records equal the
results folder's; one subset prints as JSON with the digest of its sorted ids; bad requests are
one line, exit 2; a results folder written before the lists still verifies."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from ckptsel.choose.budgets import INDEX_FILE, ITEMS_FILE, read_budget_items, subset, subset_digest
from ckptsel.errors import VerificationError
from ckptsel.results import publish
from ckptsel.workflows.analysis import verify

import recordsgen as rg
import reference_impl as ref
from clirun import exit_code, run_cli

PERMUTATIONS, SEED, BUDGETS = 12, 11, "8,16"


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """A random study with groups, ties and excluded items, analysed from the command line."""
    tmp = tmp_path_factory.mktemp("budgets")
    trajs = rg.random_study(np.random.default_rng(5), n_configs=3, seeds=2, n_val=(30, 50))
    gen, nll = rg.tables(trajs)
    rec = rg.write(tmp / "records", gen, nll)
    out = tmp / "results"
    args = ["analyze", rec, "--out", out, "--permutations", PERMUTATIONS, "--seed", SEED, "--budgets", BUDGETS]
    assert exit_code([*args, "--draws", 50, "--no-report"]) == 0
    return rec, out, ref.trajectories_from_tables(gen, nll)


def _frozen_vector(frozen: pd.DataFrame, t: ref.RefTrajectory, scheme: str, rule: str, label: str) -> np.ndarray:
    rows = frozen[(frozen.trajectory == t.name) & (frozen.scheme == scheme) & (frozen.rule == rule) & (frozen.budget == label)]
    vec = np.zeros(len(t.steps))
    vec[[t.steps.index(int(s)) for s in rows.step]] = rows.prob.to_numpy()
    return vec


def test_the_listed_items_reproduce_the_frozen_choices(analyzed):
    rec, out, refs = analyzed
    table, index = read_budget_items(out / "choices")
    frozen = pd.read_parquet(out / "choices" / "choices.parquet")
    by_name = {t.name: t for t in refs}
    checked = 0
    assert {p["pool"] for p in index["pools"]} == set(table["pool"])
    for pool in index["pools"]:
        for name in pool["trajectories"]:
            t = by_name[name]
            at = {item: k for k, item in enumerate(t.val_ids)}
            assert pool["items"] == len(t.val_ids) and pool["digest"] == subset_digest(t.val_ids)
            for scheme, sizes in pool["budgets"].items():
                rules = sorted(set(frozen[(frozen.trajectory == name) & (frozen.scheme == scheme)].rule))
                assert rules, (name, scheme)
                for label, size in sizes.items():
                    lists = [subset(table, index, label, p, pool["pool"], scheme) for p in range(PERMUTATIONS)]
                    assert all(s["items"] == size == len(set(s["item_ids"])) for s in lists)
                    for rule in rules:
                        fed = np.mean([ref.select(t, rule, [at[i] for i in s["item_ids"]]) for s in lists], axis=0)
                        np.testing.assert_allclose(fed, _frozen_vector(frozen, t, scheme, rule, label), atol=1e-12)
                        checked += 1
    assert checked > 50


def test_the_records_give_the_results_folders_lists_and_one_subset_prints(analyzed, tmp_path, capsys):
    rec, out, _ = analyzed
    flags = ["--permutations", PERMUTATIONS, "--seed", SEED, "--budgets", BUDGETS]
    code, said = run_cli(["budgets", rec, "--out", tmp_path / "lists", *flags], capsys)
    assert code == 0, said
    assert "nested budgets" in said and "written:" in said
    mine, theirs = read_budget_items(tmp_path / "lists"), read_budget_items(out / "choices")
    pd.testing.assert_frame_equal(mine[0], theirs[0])
    assert mine[1] == theirs[1]
    assert (tmp_path / "lists" / INDEX_FILE).read_bytes() == (out / "choices" / INDEX_FILE).read_bytes()
    pool = theirs[1]["pools"][0]
    code, said = run_cli(["budgets", out, "--budget", "16", "--permutation", 3, "--pool", pool["pool"]], capsys)
    assert code == 0, said
    one = json.loads(said)
    assert one == subset(*theirs, "16", 3, pool["pool"], "nested") and one["items"] == 16
    assert one["digest"] == hashlib.sha256("\n".join(sorted(one["item_ids"])).encode()).hexdigest()
    rows = theirs[0][(theirs[0].pool == pool["pool"]) & (theirs[0].scheme == "nested") & (theirs[0].permutation == 3)]
    assert one["item_ids"] == rows.sort_values("rank").item_id.tolist()[:16]  # the permutation's first 16
    code, said = run_cli(["budgets", out, "--json", "--out", tmp_path / "again"], capsys)
    assert code == 0 and json.loads(said)["pools"] == theirs[1]["pools"]
    code, said = run_cli(["budgets", out, "--budget", "full", "--permutation", 0, "--pool", pool["pool"]], capsys)
    assert code == 0, said
    whole = json.loads(said)
    assert whole["items"] == pool["items"] and whole["digest"] == pool["digest"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget", "8"], "go together"),
        ([], "give --out DIR"),
        (["--budget", "8", "--permutation", 0], "validation pools: name one with --pool"),
        (["--budget", "8", "--permutation", 0, "--pool", "nope"], "no validation pool 'nope'"),
        (["--budget", "999", "--permutation", 0, "--pool", "{pool}"], "has no nested budget '999'"),
        (["--budget", "8", "--permutation", 12, "--pool", "{pool}"], "--permutation must be 0 to 11"),
        (["--budget", "8", "--permutation", -1, "--pool", "{pool}"], "--permutation must be 0 to 11"),
        (["--budget", "8", "--permutation", 0, "--pool", "{pool}", "--scheme", "x"], "unknown scheme 'x'"),
        (["--out", "{tmp}/o", "--seed", 3], "made with the analysis' own settings; --seed"),
    ],
)
def test_bad_requests_are_one_line(analyzed, tmp_path, capsys, extra, message):
    _, out, _ = analyzed
    pool = read_budget_items(out / "choices")[1]["pools"][0]["pool"]
    args = [str(a).format(pool=pool, tmp=tmp_path) for a in extra]
    code, said = run_cli(["budgets", out, *args], capsys)
    lines = [line for line in said.strip().splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and message in said, said


def test_hostile_files_and_folders(analyzed, tmp_path, capsys):
    _, out, _ = analyzed
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / INDEX_FILE).write_text("[1, 2]")
    (bad / ITEMS_FILE).write_bytes(b"PAR1 not parquet")
    code, said = run_cli(["budgets", bad, "--budget", "8", "--permutation", 0], capsys)
    assert code == 2 and "budget_items" in said and len(said.strip().splitlines()) == 1, said
    (bad / INDEX_FILE).write_text('{"settings": {}, "pools": []}')
    code, said = run_cli(["budgets", bad, "--budget", "8", "--permutation", 0], capsys)
    assert code == 2 and "budget_items" in said, said
    good = json.loads((out / "choices" / INDEX_FILE).read_text())
    (bad / ITEMS_FILE).write_bytes((out / "choices" / ITEMS_FILE).read_bytes())
    pool = good["pools"][0]["pool"]
    edits = {
        "settings.permutations": lambda d: d["settings"].update(permutations="12"),
        "pools[0].budgets": lambda d: d["pools"][0].pop("budgets"),
        "pools[0].budgets.nested.8": lambda d: d["pools"][0]["budgets"]["nested"].update({"8": float("nan")}),
        "pools[0].trajectories": lambda d: d["pools"][0].update(trajectories="x"),
        "pools[0].items": lambda d: d["pools"][0].update(items=-1),
        "is not in budget_items.json": lambda d: d["pools"][0].update(pool="someoneelse"),
    }
    for key, edit in edits.items():
        blob = json.loads(json.dumps(good))
        edit(blob)
        (bad / INDEX_FILE).write_text(json.dumps(blob))
        code, said = run_cli(["budgets", bad, "--budget", "8", "--permutation", 0, "--pool", pool], capsys)
        assert code == 2 and key in said and len(said.strip().splitlines()) == 1, (key, said)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, said = run_cli(["budgets", out, "--out", a_file], capsys)
    assert code == 2 and "not a folder" in said, said
    code, said = run_cli(["budgets", tmp_path / "none", "--out", tmp_path / "o"], capsys)
    assert code == 2 and "records" in said, said


def test_a_results_folder_from_before_the_lists_still_verifies(analyzed, tmp_path):
    import shutil

    rec, out, _ = analyzed
    old = tmp_path / "old"
    shutil.copytree(out, old)
    for name in (ITEMS_FILE, INDEX_FILE):
        (old / "choices" / name).unlink()
    manifest = json.loads((old / publish.MANIFEST_FILE).read_text())
    manifest["files"] = {k: v for k, v in manifest["files"].items() if not k.endswith((ITEMS_FILE, INDEX_FILE))}
    (old / publish.MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n")
    assert any("reproduced exactly" in line for line in verify(old, rec))
    assert any("reproduced exactly" in line for line in verify(out, rec))  # the lists rebuilt and compared
    edited = tmp_path / "edited"
    shutil.copytree(out, edited)
    index = edited / "choices" / INDEX_FILE
    index.write_text(index.read_text().replace('"items"', '"itemz"'))
    with pytest.raises(VerificationError, match="SHA-256"):
        verify(edited, rec)


def test_the_lists_read_from_urls(analyzed, s3, tmp_path, capsys):
    """A results folder and a records folder on object storage (a real S3 API on 127.0.0.1)
    give the same lists and subsets as the local folders; a URL with no lists or records is one line."""
    rec, out, _ = analyzed
    results, records = s3.upload(out, "results"), s3.upload(rec, "records")
    local = read_budget_items(out / "choices")
    code, said = run_cli(["budgets", results, "--out", tmp_path / "from-results"], capsys)
    assert code == 0, said
    assert (tmp_path / "from-results" / INDEX_FILE).read_bytes() == (out / "choices" / INDEX_FILE).read_bytes()
    pd.testing.assert_frame_equal(read_budget_items(tmp_path / "from-results")[0], local[0])
    pool = local[1]["pools"][0]["pool"]
    code, said = run_cli(["budgets", results, "--budget", "8", "--permutation", 2, "--pool", pool], capsys)
    assert code == 0 and json.loads(said) == subset(*local, "8", 2, pool, "nested"), said
    flags = ["--permutations", PERMUTATIONS, "--seed", SEED, "--budgets", BUDGETS]
    code, said = run_cli(["budgets", records, "--out", tmp_path / "from-records", *flags], capsys)
    assert code == 0, said
    assert (tmp_path / "from-records" / INDEX_FILE).read_bytes() == (out / "choices" / INDEX_FILE).read_bytes()
    code, said = run_cli(["budgets", s3.url("nothing-here"), "--out", tmp_path / "none"], capsys)
    assert code == 2 and len(said.strip().splitlines()) == 1, said
