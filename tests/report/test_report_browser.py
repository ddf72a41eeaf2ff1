"""report.html in a real browser (Debian's headless chromium): it loads without console errors,
the DOM holds the tables and the inlined figures, and the screenshot shows them."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from ckptsel.report.build import write_report
from ckptsel.workflows import analysis as pipeline

import recordsgen as rg

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium) — browser check of report.html skipped"
)
WIDTH, HEIGHT = 1280, 2000


def chromium(user_dir: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={user_dir}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def console_lines(stderr: str) -> list[str]:
    """Messages the page wrote to the JS console (errors, uncaught exceptions, failed loads)."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Failed to load resource" in ln]


class Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.imgs: list[str] = []
        self.rows = 0

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        elif tag == "tr":
            self.rows += 1
        elif tag == "img":
            self.imgs.append(dict(attrs).get("src", ""))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("browser")
    trajs = rg.random_study(np.random.default_rng(8), n_configs=4, seeds=3, T=(4, 6), n_val=(70, 100), n_test=(40, 60))
    records = rg.write(root / "records", *rg.tables(trajs))
    pipeline.analyze(records, root / "results", permutations=20, draws=300)
    write_report(root / "results")
    return root / "results" / "report.html"


def test_report_loads_without_console_errors_and_has_tables_and_figures(report, tmp_path):
    run = chromium(tmp_path / "profile", "--dump-dom", report.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    assert console_lines(run.stderr) == []
    dom = Dom()
    dom.feed(run.stdout)
    assert dom.tables >= 7 and dom.rows > 40
    assert len(dom.imgs) == 5
    assert all(src.startswith("data:image/png;base64,") and len(src) > 5000 for src in dom.imgs)
    assert "Main table" in run.stdout and "The three claims" in run.stdout


def test_console_check_catches_a_broken_page(tmp_path):
    """Positive control: the same check sees a script error."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    run = chromium(tmp_path / "profile", "--dump-dom", bad.as_uri())
    assert any("undefinedFunction" in ln for ln in console_lines(run.stderr))


def test_screenshot_shows_table_and_figures(report, tmp_path):
    from PIL import Image

    shot = tmp_path / "shot.png"
    run = chromium(tmp_path / "profile", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", report.as_uri())
    assert shot.is_file(), run.stderr[-2000:]
    img = Image.open(shot).convert("RGB")
    assert img.size == (WIDTH, HEIGHT)
    px = np.asarray(img).reshape(-1, 3).astype(int)
    colours = np.unique(px, axis=0)
    assert len(colours) > 100  # not blank: text, table rules, plotted data
    assert (px.sum(axis=1) < 600).mean() > 0.02  # a few percent of the page is not near-white

    def near(rgb, tol=12):
        return (np.abs(px - np.array(rgb)).max(axis=1) <= tol).sum()

    assert near((0x1F, 0x77, 0xB4)) > 200  # the accuracy curve's blue: a figure is rendered in view
    assert near((0xF4, 0xF4, 0xF6), tol=1) > 1000  # the table header background: the main table is in view
