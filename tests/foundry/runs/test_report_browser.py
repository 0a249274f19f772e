"""The report in a real browser: Debian's Chromium, headless, renders it; the screenshot is not blank and the
DOM after rendering (the inline script ran, the SVG was parsed) holds exactly the metrics.jsonl points."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from foundry.runs.cli import main
from foundry.runs.plots import PALETTE
from tests.foundry.runs.dom import check_against_metrics, parse

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # ~10 s: two Chromium starts
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)",
    ),
]
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"
    profile.mkdir(exist_ok=True)
    cmd = [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


def render(html: Path, tmp: Path) -> tuple[Path, str]:
    """(the screenshot, the rendered DOM) of `html`."""
    png = tmp / "report.png"
    chromium(tmp, f"--screenshot={png}", "--window-size=1280,2000", html.as_uri())
    dom = chromium(tmp, "--dump-dom", "--virtual-time-budget=2000", html.as_uri()).stdout
    return png, dom


def test_report_renders_in_chromium(sweep_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    assert main(["report", str(sweep_dir), "-o", str(out)]) == 0
    png, dom = render(out, tmp_path)
    print(f"screenshot: {png}")  # pytest -s shows where to look at it
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 2000)
    colours = image.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "the screenshot is (nearly) blank"
    present = {c for _, c in colours}
    for hex_colour in PALETTE[:2]:  # both runs' lines were drawn
        rgb = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
        assert rgb in present, hex_colour
    runs = {p.name: p for p in sweep_dir.iterdir()}
    n = check_against_metrics(dom, runs)
    assert n == 2 * (30 + 3 + 30 + 30 + 30) - 1
    rendered = json.loads(
        parse(dom).texts["render-check"]
    )  # written by the page's script after parsing the SVG
    for chart in parse(dom).charts:
        for line in chart["lines"]:
            key = f"{line['data-metric']}|{line['data-run']}"
            assert rendered[key] == len(line["data-steps"].split(",")), key
