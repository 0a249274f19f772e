"""The HTML report: self-contained, and its plotted points equal metrics.jsonl (the page read back as HTML)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from foundry.runs.cli import main
from foundry.runs.report import labels, sweep_params
from foundry.runs.state import load_run
from foundry.runs.store import RunRoot
from tests.foundry.runs.dom import check_against_metrics, parse


def _runs(sweep: Path) -> dict[str, str]:
    return {f"multirun/sweep/{p.name}": p for p in sorted(sweep.iterdir())}  # type: ignore[misc]


def test_report_of_a_sweep_is_self_contained_and_matches_metrics(
    sweep_dir: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "r.html"
    assert main(["--root", str(sweep_dir.parents[1]), "report", "multirun/sweep", "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out.resolve())
    html = out.read_text()
    # no network at view time: no external script/style/image/link, nothing but the SVG namespace URL
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert set(re.findall(r"https?://[^\s\"'<>]+", html)) <= {"http://www.w3.org/2000/svg"}
    n = check_against_metrics(html, _runs(sweep_dir))
    assert n == 2 * (30 + 3 + 30 + 30 + 30) - 1  # loss (one NaN left out), eval loss, lr, tokens/s, MFU
    blob = json.loads(parse(html).texts["foundry-report-data"])
    assert blob["params"] == ["optimizer.lr"]
    assert "job 0" in html and "job 1" in html and "core_average" in html and "icl/piqa/acc" in html
    assert html.count('class="event"') == 5  # job 1's timeline: start, failure, restart, resumed, summary
    assert html.count('class="downtime"') == 1 and "time lost 9.5 s" in html  # failure -> resumed


def test_report_of_several_runs(sweep_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "two.html"
    root = str(sweep_dir)
    assert main(["--root", root, "report", "0_optimizer.lr=0.01", "1_optimizer.lr=0.03", "-o", str(out)]) == 0
    assert check_against_metrics(out.read_text(), {p.name: p for p in sweep_dir.iterdir()}) == 2 * 123 - 1
    assert main(["--root", root, "report", "0_optimizer.lr=0.01", str(tmp_path), "-o", str(out)]) == 2


def test_single_run_report_goes_into_the_run_dir(sweep_dir: Path) -> None:
    run = sweep_dir / "1_optimizer.lr=0.03"
    assert main(["report", str(run)]) == 0
    html = (run / "report.html").read_text()
    assert check_against_metrics(html, {".": run}) == 30 + 3 + 30 + 30 + 30
    assert "Sweep parameters" not in html


def test_sweep_params_and_labels(sweep_dir: Path) -> None:
    root = RunRoot(str(sweep_dir))
    runs = [load_run(root, r) for r in root.runs()]
    assert sweep_params(runs) == ["optimizer.lr"]
    assert labels(["a/b/0_x=1", "a/b/1_x=2"]) == {"a/b/0_x=1": "job 0", "a/b/1_x=2": "job 1"}
    assert labels(["quickstart"]) == {"quickstart": "quickstart"}
