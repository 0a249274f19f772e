"""Task data sources: every llm-foundry file in the shared mirror parses, absent files are skipped with a
message, object-store URLs (loopback S3), hf:// (datasets, on a local folder) and offline:// tasks."""

from __future__ import annotations

import json

import pytest

from foundry.errors import ConfigError
from foundry.eval.config import EvalConfig, ICLTaskConfig, default_data_root
from foundry.eval.data import MissingTaskData, check_task_data, load_rows, resolve_local
from foundry.eval.prompts import build_prompts
from foundry.eval.runner import load_tasks
from foundry.eval.synthetic import OFFLINE_TASKS, generate_offline


def _kind(row: dict) -> str | None:
    if "context_options" in row:
        return "schema"
    if "choices" in row:
        return "multiple_choice"
    if "answer" in row:
        return "generation_task_with_answers"
    if "continuation" in row:
        return "language_modeling"
    return None  # code evaluation (HumanEval), removed in llm-foundry v0.9


def test_every_shared_icl_file_parses_and_builds_prompts(shared_data, icl_tokenizer):
    root = shared_data / "icl"
    if not root.is_dir():
        pytest.skip(f"no ICL data at {root}")
    files = sorted(root.rglob("*.jsonl"))
    assert files
    built = 0
    for path in files:
        rel = str(path.relative_to(root))
        with open(path) as f:
            first = json.loads(f.readline())
        kind = _kind(first)
        if kind is None:
            assert "programming" in rel
            continue
        cfg = ICLTaskConfig(
            label=path.stem, dataset_uri=rel, icl_task_type=kind, has_categories="category" in first
        )
        rows = load_rows(cfg, data_root=root)  # every row checked against its type's fields
        assert rows, rel
        examples = build_prompts(cfg, rows, icl_tokenizer, num_fewshot=1, max_seq_len=2048, limit=3).examples
        assert len(examples) >= 1 and all(r.context for ex in examples for r in ex.requests), rel
        built += 1
    assert built >= 30


def test_missing_file_is_skipped_with_a_message_naming_it(tmp_path, capsys):
    cfg = EvalConfig(
        icl_tasks=[
            {"label": "squad", "dataset_uri": "eval/local_data/reading_comprehension/squad.jsonl",
             "icl_task_type": "generation_task_with_answers"},
            {"label": "copy", "dataset_uri": "offline://repeat_copy", "icl_task_type": "language_modeling"},
        ],
        data_root=str(tmp_path),
    )  # fmt: skip
    skipped: list[str] = []
    tasks = load_tasks(cfg, skipped=skipped)
    assert [t.label for t in tasks] == ["copy/0-shot"]
    assert str(tmp_path / "reading_comprehension" / "squad.jsonl") in skipped[0]
    assert "EVAL_DATA" in skipped[0] and "skipping ICL task" in capsys.readouterr().out
    cfg.skip_missing = False
    with pytest.raises(MissingTaskData, match="squad.jsonl"):
        load_tasks(cfg)


def test_check_task_data_refuses_only_when_every_task_would_be_skipped(tmp_path, monkeypatch):
    monkeypatch.delenv("EVAL_DATA", raising=False)
    mc = {"label": "mc", "dataset_uri": "eval/local_data/mc.jsonl", "icl_task_type": "multiple_choice"}
    lm = {"label": "lm", "dataset_uri": "lm.jsonl", "icl_task_type": "language_modeling"}
    cfg = EvalConfig(icl_tasks=[mc, lm], data_root=str(tmp_path))
    with pytest.raises(ConfigError, match="no data for any of the 2 ICL tasks") as info:
        check_task_data(cfg)
    assert f"data folder {tmp_path} (eval.data_root)" in str(info.value) and "EVAL_DATA" in str(info.value)
    assert str(tmp_path / "mc.jsonl") in str(info.value)
    (tmp_path / "lm.jsonl").write_text("")  # one task with data: the others are skipped as before
    check_task_data(cfg)
    offline = {"label": "copy", "dataset_uri": "offline://repeat_copy", "icl_task_type": "language_modeling"}
    check_task_data(EvalConfig(icl_tasks=[mc, offline], data_root=str(tmp_path / "none")))
    check_task_data(EvalConfig(icl_tasks=[mc], data_root=str(tmp_path / "none"), skip_missing=False))
    monkeypatch.setenv("EVAL_DATA", str(tmp_path / "none"))
    with pytest.raises(ConfigError, match=r"\(\$EVAL_DATA\)"):
        check_task_data(EvalConfig(icl_tasks=[mc]))


def test_data_root_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("EVAL_DATA", str(tmp_path))
    assert EvalConfig().data_root is None and default_data_root() == str(tmp_path)
    assert resolve_local("eval/local_data/a/b.jsonl", tmp_path) == tmp_path / "a" / "b.jsonl"


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_object_store_url(s3_bucket, s3_env, tmp_path, monkeypatch):
    import boto3

    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    rows = [{"context": "a b", "continuation": "c"}, {"context": "d", "continuation": "e"}]
    _write(tmp_path / "lm.jsonl", rows)
    bucket = s3_bucket.removeprefix("s3://")
    boto3.client("s3", endpoint_url=s3_env).upload_file(str(tmp_path / "lm.jsonl"), bucket, "icl/lm.jsonl")
    task = ICLTaskConfig(
        label="lm", dataset_uri=f"{s3_bucket}/icl/lm.jsonl", icl_task_type="language_modeling"
    )
    assert load_rows(task, data_root=tmp_path / "nowhere") == rows
    # fetched once into the per-user cache (complete, no temporary left), then read from there
    cached = [p for p in (tmp_path / "cache" / "icl_data").rglob("*") if p.is_file()]
    assert [p.name for p in cached] == ["lm.jsonl"]
    assert cached[0].read_bytes() == (tmp_path / "lm.jsonl").read_bytes()
    boto3.client("s3", endpoint_url=s3_env).delete_object(Bucket=bucket, Key="icl/lm.jsonl")
    assert load_rows(task, data_root=tmp_path / "nowhere") == rows


def test_missing_object_store_file_names_the_url_and_caches_nothing(s3_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("FOUNDRY_CACHE", str(tmp_path / "cache"))
    url = f"s3://AKIDEXAMPLE:s3cr/et@{s3_bucket.removeprefix('s3://')}/icl/absent.jsonl"
    task = ICLTaskConfig(label="lm", dataset_uri=url, icl_task_type="language_modeling")
    with pytest.raises(FileNotFoundError, match="absent.jsonl") as err:
        load_rows(task, data_root=tmp_path)
    assert "s3cr/et" not in str(err.value)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_hf_uri_with_parsing_map_on_a_local_folder(tmp_path):
    pytest.importorskip("datasets")
    _write(tmp_path / "ds" / "test.jsonl", [{"q": "Capital of", "q2": "France?", "a": "Paris"}])
    task = ICLTaskConfig(
        label="hf", dataset_uri=f"hf://{tmp_path / 'ds'}", icl_task_type="generation_task_with_answers",
        hf_loading_vars={"split": "test", "cache_dir": str(tmp_path / "hf-cache")}, hf_parsing_map={"context": ["q", "q2"], "answer": ["a"]},
    )  # fmt: skip
    rows = load_rows(task, data_root=tmp_path)
    assert rows[0]["context"] == "Capital of France?" and rows[0]["answer"] == "Paris"


def test_offline_tasks_are_deterministic_and_well_formed():
    for name in OFFLINE_TASKS:
        rows = generate_offline(name)
        assert rows == generate_offline(name) and len(rows) == 100
    mc = generate_offline("arithmetic_mc")
    assert all(eval(r["query"].rstrip("=")) == int(r["choices"][r["gold"]]) for r in mc)
    schema = generate_offline("compare_schema")
    assert all(r["context_options"][r["gold"]].startswith(r["continuation"].split()[-1][:-1]) for r in schema)
    with pytest.raises(ValueError, match="offline tasks are"):
        load_rows(
            ICLTaskConfig(label="x", dataset_uri="offline://nope", icl_task_type="schema"), data_root="."
        )


def test_cache_dir_is_per_user_private_and_refuses_a_planted_folder(tmp_path, monkeypatch):
    """Remote task files are cached under $FOUNDRY_CACHE / $XDG_CACHE_HOME/foundry / ~/.cache/foundry, created
    0700; a folder others can write (planted) is refused (the old code used a shared /tmp/icl_data)."""
    import os
    import stat

    from foundry.eval.data import cache_dir

    monkeypatch.delenv("FOUNDRY_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = cache_dir("icl_data")
    assert got == tmp_path / "xdg" / "foundry" / "icl_data" and got.is_dir()
    for p in (got, got.parent):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "foundry"
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chmod(planted, 0o777)
    monkeypatch.setenv("FOUNDRY_CACHE", str(planted))
    with pytest.raises(
        PermissionError, match=r"\(\$FOUNDRY_CACHE\) \S*planted is writable by group or other users"
    ):
        cache_dir("icl_data")
    assert not (planted / "icl_data").exists()
    os.chmod(planted, 0o700)
    (planted / "icl_data").mkdir(mode=0o777)
    os.chmod(planted / "icl_data", 0o777)
    with pytest.raises(PermissionError, match="icl_data"):
        cache_dir("icl_data")
    if os.getuid() == 0:  # as root we can plant a folder owned by someone else
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 65534, 65534)
        monkeypatch.setenv("FOUNDRY_CACHE", str(other))
        with pytest.raises(PermissionError, match="owned by uid 65534"):
            cache_dir()


@pytest.mark.parametrize("gold", [-1, 3, "0", 1.0, True, None])
@pytest.mark.parametrize(("kind", "key"), [("multiple_choice", "choices"), ("schema", "context_options")])
def test_a_gold_that_is_not_an_index_of_its_options_is_refused(tmp_path, kind, key, gold):
    """Issue 39: a row with `gold: -1` was scored against the last choice, silently."""
    import json as _json

    from foundry.eval.config import ICLTaskConfig
    from foundry.eval.data import load_rows

    path = tmp_path / "t.jsonl"
    good = {"query": "q", "continuation": "c", key: ["a", "b", "c"], "gold": 2}
    path.write_text(_json.dumps(good) + "\n" + _json.dumps({**good, "gold": gold}) + "\n")
    task = ICLTaskConfig(label="t", dataset_uri=str(path), icl_task_type=kind)
    with pytest.raises(
        ValueError, match=rf"task 't', row 2: gold={gold!r} is not an index of its 3 {key} \(0 to 2\)"
    ):
        load_rows(task, data_root=tmp_path)
    path.write_text(_json.dumps(good) + "\n")
    assert load_rows(task, data_root=tmp_path) == [good]


_GOOD = {
    "language_modeling": {"context": "c", "continuation": "x"},
    "multiple_choice": {"query": "q", "choices": ["a", "b"], "gold": 1},
    "schema": {"context_options": ["a", "b"], "continuation": "x", "gold": 0},
    "generation_task_with_answers": {"context": "c", "answer": "x", "aliases": ["x"]},
}


@pytest.mark.parametrize(
    ("kind", "line", "task_keys", "message"),
    [  # rows the fuzz suite (tests/fuzz/test_fuzz_icl_tasks.py, issue 39) found ending in a raw traceback
        ("schema", "null", {}, r"row 2: not a JSON object \(got NoneType\)"),  # AttributeError (data.py)
        (
            "language_modeling",
            "[[1]]",
            {},
            r"row 2: not a JSON object \(got list\)",
        ),  # AttributeError (prompts)
        (
            "schema",
            '{"context_options": ["a"], "gold": 0}',
            {},
            r"row 2: no `continuation` \(schema rows need",
        ),
        (
            "language_modeling",
            '{"context": "c", "continuation": "x"}',
            {"context_key": "nope"},
            r"row 1: no `nope`",
        ),
        (
            "multiple_choice",
            '{"query": "q", "choices": "ab", "gold": 0}',
            {},
            r"`choices` must be a non-empty list",
        ),
        (
            "generation_task_with_answers",
            '{"context": "c", "answer": "x", "aliases": {"a": 1}}',
            {},
            r"`aliases` must",
        ),
        (
            "language_modeling",
            '{"context": 5, "continuation": "x"}',
            {},
            r"row 2: `context` must be a string, got 5",
        ),
        (
            "multiple_choice",
            '{"query": "q", "choices": ["a"], "gold": 0, "category": {"a": 1}}',
            {"has_categories": True},
            r"row 2: `category` must be a string",  # was TypeError: unhashable type (prompts.py)
        ),
        ("language_modeling", '{"a":' * 2000 + "0" + "}" * 2000, {}, r"t\.jsonl:2: JSON nested too deeply"),
        ("language_modeling", "1" * 5000, {}, r"t\.jsonl:2: not a JSON line \(Exceeds the limit"),
    ],
)
def test_a_row_of_the_wrong_shape_is_named(tmp_path, kind, line, task_keys, message):
    path = tmp_path / "t.jsonl"
    good = dict(_GOOD[kind], **({"category": "a"} if task_keys.get("has_categories") else {}))
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    task = ICLTaskConfig(label="t", dataset_uri=str(path), icl_task_type=kind, **task_keys)
    with pytest.raises(ValueError, match=message) as err:
        load_rows(task, data_root=tmp_path)
    assert str(path) in str(err.value)


def test_a_line_that_is_not_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(_GOOD["language_modeling"]).encode() + b'\n{"context": "\xec"}\n')
    task = ICLTaskConfig(label="t", dataset_uri=str(path), icl_task_type="language_modeling")
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not UTF-8 text"):  # was UnicodeDecodeError
        load_rows(task, data_root=tmp_path)
