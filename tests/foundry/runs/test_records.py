"""`foundry.runs.records` and `foundry.live.read_live`: a run folder's records are untrusted input (issue 39:
garbage, wrong types or deep JSON in run.json, live.json, manifests or overrides.yaml were raw tracebacks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from foundry.live import read_live
from foundry.runs.cli import main
from foundry.runs.records import DamagedRun, record, rows, yaml_list


def test_records_of_the_wrong_shape_read_as_missing() -> None:
    assert record(
        '{"config": [1], "derived": {"max_steps": 3}}', source="run.json", mappings=("config", "derived")
    ) == {"derived": {"max_steps": 3}}
    assert record("[1, 2]", source="run.json") == {} and record("not json", source="x") == {}
    assert record("[" * 5000 + "]" * 5000, source="x") == {}  # too deep: refused before parsing
    assert rows('{"a": 1}\n[2]\n{bad\n{"b": 2}\n', source="m.jsonl") == [{"a": 1}, {"b": 2}]


@pytest.mark.parametrize("text", ["{a: 1}", "[[1]]", "!!python/object/apply:os.system ['true']", "- [" * 200])
def test_overrides_that_are_not_a_list_of_values_are_one_error(text) -> None:
    with pytest.raises(DamagedRun, match="overrides.yaml: not a list of overrides"):
        yaml_list(text, source="r/.hydra/rank0/overrides.yaml")


@pytest.mark.parametrize(
    "live",
    [{"pid": "1"}, {"time": "soon"}, {"step": True}, {"phase": 3}, {"extra": 1}, {"time": float("nan")}],
)
def test_a_live_record_with_a_field_of_the_wrong_type_is_no_record(live) -> None:
    good = {"pid": 1, "host": "h", "step": 3, "max_steps": 9, "phase": "step", "time": 1.0, "started": 0.0}
    assert read_live(json.dumps(good)) is not None
    assert read_live(json.dumps({**good, **live})) is None


def test_runs_commands_on_damaged_folders_list_or_refuse_in_one_line(tmp_path: Path, capsys) -> None:
    run = tmp_path / "outputs" / "r"
    (run / ".hydra" / "rank0").mkdir(parents=True)
    (run / "run.json").write_text('{"config": {"run_name": ["x"]}, "derived": "x"}')
    (run / "live.json").write_text('{"pid": "x"}')
    (run / "events.jsonl").write_text('{"event": "start", "time": "later"}\n')
    (run / ".hydra" / "rank0" / "overrides.yaml").write_text("{a: 1}")
    assert main(["--root", str(tmp_path / "outputs"), "list"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("r ")
    for command in ("show", "resume"):
        code = main(["--root", str(tmp_path / "outputs"), command, "r"])
        err = capsys.readouterr().err
        assert code in (0, 2) and "Traceback" not in err
        if code == 2:
            assert err.startswith("error: ") and len(err.splitlines()) == 1, err
