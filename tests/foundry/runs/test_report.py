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
    assert (
        "optimizer.lr=0.01" in html
        and "optimizer.lr=0.03" in html
        and "core_average" in html
        and "icl/piqa/acc" in html
    )
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
    assert labels(["a/b/0_x=1", "a/b/1_x=2"]) == {"a/b/0_x=1": "x=1", "a/b/1_x=2": "x=2"}
    assert labels(["quickstart"]) == {"quickstart": "quickstart"}


def test_long_labels_keep_the_part_that_differs() -> None:
    """Issue 40 item 6: labels were cut at 45 characters, before the part where two sweep jobs differ."""
    names = [
        f"sweep/{i}_data.remote=s3://bucket/corpora/the-pile/deduplicated/version-{v}"
        for i, v in enumerate("AB")
    ]
    got = labels(names)
    assert len(set(got.values())) == 2 and all(len(v) <= 48 for v in got.values()), got
    assert got[names[0]].endswith("version-A") and got[names[1]].endswith("version-B"), got


def test_report_names_runs_by_what_differs_lists_swept_keys_first_and_hides_test_blobs(
    tmp_path: Path,
) -> None:
    """Issue 26 item 13: sweep names cut to the part that differs, the swept parameters before derived ones,
    no empty plot (MFU on a CPU run), no "render check" blob on the page."""
    from tests.foundry.runs.conftest import write_run

    base = tmp_path / "outputs" / "multirun" / "grid"
    for i, (lr, wd) in enumerate([(0.01, 0.1), (0.03, 0.1)]):
        run = base / f"{i}_optimizer.lr={lr},optimizer.weight_decay={wd}"
        write_run(run, lr=lr)
        (run / ".hydra" / "rank0").mkdir(parents=True)
        (run / ".hydra" / "rank0" / "overrides.yaml").write_text(
            f"- optimizer.lr={lr}\n- optimizer.weight_decay={wd}\n"
        )
        record = json.loads((run / "run.json").read_text())
        record["config"]["data"] = {"derived": lr / 10}  # follows from the swept lr (sorts before it)
        (run / "run.json").write_text(json.dumps(record))
        for f in (run / "metrics.jsonl",):
            rows = [json.loads(x) for x in f.read_text().splitlines()]
            f.write_text(
                "".join(json.dumps({k: v for k, v in r.items() if "mfu" not in k}) + "\n" for r in rows)
            )
    names = [f"multirun/grid/{p.name}" for p in sorted(base.iterdir())]
    assert labels(names) == {names[0]: "optimizer.lr=0.01", names[1]: "optimizer.lr=0.03"}
    root = RunRoot(str(tmp_path / "outputs"))
    runs = [load_run(root, n) for n in names]
    assert sweep_params(runs, {"optimizer.lr", "optimizer.weight_decay"}) == ["optimizer.lr", "data.derived"]
    assert sweep_params(runs) == ["data.derived", "optimizer.lr"]
    out = tmp_path / "grid.html"
    assert main(["--root", str(tmp_path / "outputs"), "report", "multirun/grid", "-o", str(out)]) == 0
    html = out.read_text()
    assert "Render check" not in html and 'id="render-check" hidden' in html
    assert "MFU" not in html and "Training loss" in html
    assert json.loads(parse(html).texts["foundry-report-data"])["params"] == ["optimizer.lr", "data.derived"]
