"""Fuzz (issue 39), entry point 7: run folders read by `python -m foundry.runs` (`list`, `show`, `resume`,
`report`; not `stop`, which signals processes, nor `logs -f`, which follows forever).

Each input is a valid run folder (run.json, events.jsonl, live.json, metrics.jsonl, final_metrics.json,
config.yaml, train.log, .hydra/rank0/overrides.yaml, a checkpoint manifest, ICL results) under a root that
anyone could write (a shared `outputs/`, a synced bucket), with one hostile change: a value, key or record of
one file replaced (garbage, wrong types, deep JSON), its bytes edited, a hostile YAML for the overrides, or the
run folder named oddly. `foundry.runs.cli.main` reports a user error itself (one `error:` line, exit 2), so
anything it raises is a traceback.

`foundry.runs` is another engineer's (issue 39 work in progress), not fixed here: the findings this suite still
makes there are listed in `KNOWN` (exception type and file) and reported without failing, so the suite runs in
CI meanwhile; remove an entry when its fix lands (a new kind of finding in those files still fails).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import SECRET_ENV, fuzz

ENTRY = "run folders (python -m foundry.runs)"
ALLOWED = (ValueError,)  # exit 2 with one `error:` line (raised below as a ValueError naming the run folder)
SHORT_EXAMPLES = 25
KNOWN: list[tuple[str, str, str]] = []
"""(kind, exception type or "*", source file prefix or "*") of findings in files this suite may not fix yet
(`foundry.runs`, `foundry.live`: being changed by another engineer): reported, not failed."""

T0 = 1_700_000_000.0
FILES = {
    "run.json": {
        "config": {"task": "pretrain", "run_name": "r", "checkpoint": {"save_folder": "{run_dir}/checkpoints"}},
        "derived": {"max_steps": 30},
    },
    "events.jsonl": [
        {"event": "start", "time": T0, "launch_id": "x-1", "pid": 1, "torchrun_options": ["--nproc-per-node=2"],
         "max_restarts": 3, "script": "train.py"},
        {"event": "failure", "time": T0 + 20, "cause": "exited", "rank": 1, "attempt": 0},
        {"event": "restart", "time": T0 + 21, "attempt": 1},
        {"event": "resumed", "time": T0 + 30, "attempt": 1, "step": 10, "time_lost_s": 9.0},
        {"event": "summary", "time": T0 + 60, "ok": True, "exit_code": 0, "restarts": 1},
    ],
    "live.json": {"pid": 1, "host": "elsewhere", "step": 30, "max_steps": 30, "phase": "done", "time": T0 + 60,
                  "started": T0, "attempt": 1, "interval_s": 10.0},
    "metrics.jsonl": [{"step": s, "train/loss": 5.0 - s / 10, "throughput/tokens_per_sec": 100.0 * s} for s in
                      range(1, 31)],
    "final_metrics.json": {"train/loss": 2.0, "eval/loss": 2.1},
    "checkpoints/ep0-ba30/manifest.json": {
        "step": 30, "epoch": 0, "format": "full", "world_size": 1, "weights_only": False,
        "files": {"model.pt": {"bytes": 4, "sha256": "0" * 64}},
    },
    "icl/step_30/icl_results.json": {"metrics": {"icl/x/0-shot/accuracy": 0.5}, "tasks": []},
    "icl_results.json": {"metrics": {"icl/x/0-shot/accuracy": 0.5}},
}  # fmt: skip
TEXTS = {
    "config.yaml": "task: pretrain\nrun_name: r\n",
    "train.log": "step 1 loss 5.0\n",
    ".hydra/rank0/overrides.yaml": "- run_name=r\n- trainer.max_duration=30ba\n",
    "checkpoints/ep0-ba30/model.pt": "abcd",
}
YAMLS = [
    "[1, 2, {a: b}]",
    "{a: 1}",
    "!!python/object/apply:os.system ['touch PWNED']",
    "- " + "[" * 1500 + "]" * 1500,
    "a0: &a0 [x, x, x, x, x, x, x, x, x]\n"
    + "\n".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)),
    "- ${oc.env:" + SECRET_ENV + "}",
    "- 'x\n  y'",
    "- \udc80",
    "- null\n- 5",
]
NAMES_ODD = ["r", "..", "a\nb", "x" * 250, "-", " ", "r/../r", "\udc80"]


def prepare(work: Path) -> None:
    import foundry.runs.cli  # noqa: F401 - imported before the memory limit is set


def cases() -> st.SearchStrategy[dict[str, Any]]:
    json_file = st.sampled_from(sorted(FILES))
    edit = st.one_of(
        st.tuples(st.just("json"), json_file, hostile.json_edits()),
        st.tuples(st.just("bytes"), json_file | st.sampled_from(sorted(TEXTS)), hostile.byte_edits()),
        st.tuples(st.just("overrides"), st.sampled_from(YAMLS)),
        st.tuples(st.just("name"), st.sampled_from(NAMES_ODD)),
    )
    return st.fixed_dictionaries(
        {"edit": edit, "command": st.sampled_from(["list", "show", "resume", "report"])}
    )


def EXAMPLES() -> list[dict[str, Any]]:
    return [{"edit": ("none",), "command": c, "check": True} for c in ("list", "show", "resume", "report")]


def write_roots(folder: Path) -> list[Path]:
    return [folder / "out"]


def _write(run: Path, rel: str, data: bytes) -> None:
    (run / rel).parent.mkdir(parents=True, exist_ok=True)
    (run / rel).write_bytes(data)


def _text(value: Any) -> bytes:
    if isinstance(value, list):
        return "".join(hostile.dumps(r) + "\n" for r in value).encode("utf-8", "surrogatepass")
    return hostile.dumps(value).encode("utf-8", "surrogatepass")


def build(case: dict[str, Any], folder: Path, base: None) -> dict[str, Any]:
    edit = case["edit"]
    name = edit[1] if edit[0] == "name" else "r"
    root = folder / "outputs"
    run = root / ("odd" if name in ("..", "r/../r", "-", " ") else name.replace("\udc80", "_"))
    run.mkdir(parents=True)
    for rel, value in FILES.items():
        _write(run, rel, _text(json.loads(json.dumps(value))))
    for rel, text in TEXTS.items():
        _write(run, rel, text.encode())
    if edit[0] == "json":
        rel = edit[1]
        value = hostile.edit_value(json.loads(json.dumps(FILES[rel])), edit[2])
        if edit[2][0] == "text":
            data = hostile.apply_bytes((run / rel).read_bytes(), edit[2][1])
        elif edit[2][0] == "replace":
            data = edit[2][1].encode("utf-8", "surrogatepass")
        else:
            data = _text(value) if rel.endswith(".jsonl") and isinstance(value, list) else _text(value)
        _write(run, rel, data)
    elif edit[0] == "bytes":
        _write(run, edit[1], hostile.apply_bytes((run / edit[1]).read_bytes(), edit[2]))
    elif edit[0] == "overrides":
        _write(
            run,
            ".hydra/rank0/overrides.yaml",
            edit[1].replace("PWNED", str(folder / "PWNED")).encode("utf-8", "surrogatepass"),
        )
    return {**case, "root": root, "name": name if edit[0] == "name" else "r"}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from foundry.runs.cli import main

    command, root, name = built["command"], str(built["root"]), built["name"]
    argv = ["--root", root, command]
    if command == "report":
        argv += ["-o", str(folder / "out" / "report.html")]
    if command != "list":
        argv += ["--", name]  # a run folder named `-x` is a name
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    text = err.getvalue()
    sys.stderr.write(text)  # the harness checks it for the secret and tracebacks
    if code == 2:
        lines = [line for line in text.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), f"not one error line: {text!r:.300}"
        raise ValueError(f"{folder}: refused with exit 2: {lines[0]}")
    assert code == 0, code
    if built.get("check") and command == "report":
        assert (folder / "out" / "report.html").is_file()


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
