"""Issue 26 item 10: ICL evaluation shows progress per task (a line every few seconds with examples/s and the
time left, and one when the task ends); `EVAL=light` had silent gaps of up to 142 s."""

from __future__ import annotations

import logging
import re

from foundry.eval import EvalConfig, run_icl_eval
from foundry.eval.progress import TaskProgress
from tests.foundry.eval.test_runner import _offline_cfg


def test_a_line_every_interval_with_rate_and_time_left_then_a_closing_line():
    now = [0.0]
    lines: list[str] = []
    p = TaskProgress(
        "hellaswag/0-shot", index=2, count=7, examples=100, requests=400, every_s=5, emit=lines.append,
        clock=lambda: now[0],
    )  # fmt: skip
    for _ in range(10):  # 40 requests (10 examples) per second
        now[0] += 1
        p(40)
    assert (
        lines
        == [
            "[eval] task 2/7 hellaswag/0-shot: 50/100 examples (50%), 10.0 examples/s, ~5 s left",
            "[eval] task 2/7 hellaswag/0-shot: 100/100 examples (100%), 10.0 examples/s, ~0 s left",
        ][:1]
    )  # the last batch completes the task: the closing line says the rest
    p.finish({"InContextLearningMultipleChoiceAccuracy": 0.25})
    assert lines[-1] == (
        "[eval] task 2/7 hellaswag/0-shot: 100 examples in 10.0 s (10.0 examples/s): "
        "InContextLearningMultipleChoiceAccuracy=0.2500"
    )


def test_run_icl_eval_reports_every_task(icl_model, icl_tokenizer, tmp_path, caplog):
    lines: list[str] = []
    cfg: EvalConfig = _offline_cfg(limit=8, progress_interval=1e-9)
    with caplog.at_level(logging.INFO, logger="foundry.eval.runner"):
        run_icl_eval(
            cfg,
            model=icl_model,
            tokenizer=icl_tokenizer,
            device="cpu",
            output_dir=tmp_path,
            emit=lines.append,
        )
    assert caplog.records == []  # issue 40 item 6: a log line repeated each task's closing line
    closing = [line for line in lines if " in " in line and "examples/s)" in line]
    n_tasks = len(cfg.icl_tasks) * 2  # 0 and 2 shots
    assert len(closing) == n_tasks
    assert [re.search(r"task (\d+)/", line).group(1) for line in closing] == [
        str(i) for i in range(1, n_tasks + 1)
    ]
    assert any("~" in line and "left" in line for line in lines), "lines while a task runs"


def test_no_lines_without_an_emitter(icl_model, icl_tokenizer, tmp_path, capsys):
    run_icl_eval(
        _offline_cfg(limit=2), model=icl_model, tokenizer=icl_tokenizer, device="cpu", output_dir=tmp_path
    )
    assert "[eval] task" not in capsys.readouterr().out
