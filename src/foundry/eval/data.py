"""Task data: jsonl rows from a local path, an object-store URL, `hf://` (datasets) or `offline://` (code).

Design note: every source ends as a list of plain dicts in llm-foundry's jsonl formats (foundry.md §5.2), so
prompt construction never knows where rows came from. A missing local file raises `MissingTaskData`, whose
message names the file and how to get it; the runner turns it into a skip. Remote files are cached in a
per-user folder (`cache_dir`), never a shared predictable path under /tmp; they are fetched whole with
`streaming.storage.open_url` (smart_open, with the streaming backends' client configuration). Skipping is for
some files absent (llm-foundry's v0.3 list names files no mirror has); when every task's file is absent,
`check_task_data` refuses the whole evaluation with one message naming the data folder, before any model
is built or any result written.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from foundry.errors import ConfigError
from foundry.eval.config import EvalConfig, ICLTaskConfig, default_data_root, load_task_configs
from foundry.eval.synthetic import OFFLINE_TASKS, generate_offline
from stackbase.bounded import NotJSON, parse_json, read_text_lines
from stackbase.bounded import short_repr as show
from streaming.storage import open_url, redact
from streaming.util.safepath import private_dir

__all__ = [
    "MissingTaskData",
    "cache_dir",
    "check_rows",
    "check_task_data",
    "load_rows",
    "local_task_file",
    "resolve_local",
    "row_fields",
]

_REPO = Path(__file__).resolve().parents[3]
_LF_PREFIXES = ("eval/local_data/", "scripts/eval/local_data/")


class MissingTaskData(FileNotFoundError):
    """A task's data file is absent (the message says which and how to get it)."""


def resolve_local(uri: str, data_root: str | Path) -> Path:
    """A local `dataset_uri` as a path: absolute as is, else under `data_root` (llm-foundry's
    `eval/local_data/` prefix is dropped, so its task yamls work against a mirror of that folder)."""
    path = Path(uri).expanduser()
    if path.is_absolute():
        return path
    for prefix in _LF_PREFIXES:
        if uri.startswith(prefix):
            uri = uri[len(prefix) :]
    root = Path(data_root).expanduser()
    if not root.is_absolute() and not root.is_dir() and (_REPO / root).is_dir():
        # a repo-relative default (evals/data) when run from elsewhere
        root = _REPO / root
    return root / uri


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    # a line over 16 MiB: refused, not read whole
    for n, line in enumerate(read_text_lines(path), 1):
        if line.strip():
            # nesting capped: a deep value is one error, not a RecursionError
            try:
                rows.append(parse_json(line, source=f"{path}:{n}"))
            except NotJSON as err:
                raise ValueError(str(err).replace(": not valid JSON", ": not a JSON line", 1)) from None
    return rows


def cache_dir(sub: str = "") -> Path:
    """The per-user cache folder (`$FOUNDRY_CACHE`, else `$XDG_CACHE_HOME/foundry`, else
    `~/.cache/foundry`), or its subfolder `sub`: created with mode 0700 and checked to belong to the
    current user and not be group/world-writable (`PermissionError` otherwise)."""
    if os.environ.get("FOUNDRY_CACHE"):
        root, source = Path(os.environ["FOUNDRY_CACHE"]).expanduser(), "$FOUNDRY_CACHE"
    elif os.environ.get("XDG_CACHE_HOME"):
        root, source = Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "foundry", "$XDG_CACHE_HOME/foundry"
    else:
        root, source = Path.home() / ".cache" / "foundry", "~/.cache/foundry"
    fix = "remove it, `chmod 700` it if it is yours, or point $FOUNDRY_CACHE at a private folder"
    private_dir(root, what=f"cache folder ({source})", fix=fix)
    return Path(private_dir(root / sub, what=f"cache folder ({source})", fix=fix)) if sub else root


def _download(url: str) -> Path:
    """The cached copy of a remote task file, fetched whole on first use."""
    cache = cache_dir("icl_data")
    local = cache / hashlib.sha1(url.encode()).hexdigest()[:16] / Path(url.split("?")[0]).name
    if not local.is_file():
        # open_url writes a local file under a temporary name and renames it when complete, so a failed
        # fetch never leaves a truncated cache file
        with open_url(url, "rb") as src, open_url(str(local), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return local


def _load_hf(task: ICLTaskConfig) -> list[dict[str, Any]]:
    import datasets

    name = task.dataset_uri.removeprefix("hf://")
    kwargs = dict(task.hf_loading_vars)
    data = datasets.load_dataset(name, **kwargs)
    if isinstance(data, datasets.DatasetDict):
        if len(data) != 1:
            raise ValueError(
                f"icl_tasks[{task.label!r}]: {task.dataset_uri} has splits {list(data)}; pick one with "
                "hf_loading_vars: {split: ...}"
            )
        data = next(iter(data.values()))
    rows = []
    for row in data:
        if task.hf_parsing_map:
            mapped = {key: " ".join(str(row[c]) for c in cols) for key, cols in task.hf_parsing_map.items()}
            row = {**row, **mapped}
        rows.append(dict(row))
    return rows


_CHOICES = {"multiple_choice": "choices", "schema": "context_options"}
_TEXT, _TEXTS, _LIST, _INDEX = "a string", "a non-empty list of strings", "a list of strings", "index"


def row_fields(task: ICLTaskConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The fields every row of `task` must have and those it may have, each with what it must be (the keys
    `foundry.eval.prompts` reads for the task's type, `context_key`/`answer_key` included)."""
    kind = task.icl_task_type
    context = task.context_key or ("query" if kind == "multiple_choice" else "context")
    answer = task.answer_key or ("continuation" if kind == "language_modeling" else "answer")
    optional = {"category": _TEXT} if task.has_categories else {}
    if kind == "language_modeling":
        return {context: _TEXT, answer: _TEXT}, optional
    if kind == "multiple_choice":
        return {context: _TEXT, "choices": _TEXTS, "gold": _INDEX}, optional
    if kind == "schema":
        return {"context_options": _TEXTS, "continuation": _TEXT, "gold": _INDEX}, optional
    return {context: _TEXT, answer: _TEXT}, {**optional, "aliases": _LIST, "chain_of_thought": _TEXT}


# `value`: a JSON value
def _fits(value: Any, kind: str) -> bool:
    if kind == _TEXT:
        return isinstance(value, str)
    if kind in (_TEXTS, _LIST):
        return (
            isinstance(value, list)
            and all(isinstance(v, str) for v in value)
            and (kind == _LIST or bool(value))
        )
    # gold: checked against its options below
    return True


def check_rows(rows: list[Any], task: ICLTaskConfig, *, source: str) -> list[dict[str, Any]]:
    """`rows`, once each is an object with the fields `task`'s type reads, of the right types, and every
    multiple-choice or schema row's `gold` is an index into its options (issue 39: a row with `gold: -1` was
    scored against the last choice, silently; a row of the wrong shape ended in a KeyError or TypeError).

    Raises:
        ValueError: naming `source`, the task, the row and the field.
    """
    required, optional = row_fields(task)
    for n, row in enumerate(rows, 1):
        where = f"{source}: task {task.label!r}, row {n}"
        if not isinstance(row, dict):
            raise ValueError(f"{where}: not a JSON object (got {type(row).__name__})")
        for key, kind in {**required, **optional}.items():
            if key not in row or (key in optional and row[key] is None):
                if key in required:
                    raise ValueError(
                        f"{where}: no `{key}` ({task.icl_task_type} rows need {', '.join(required)})"
                    )
                continue
            if not _fits(row[key], kind):
                raise ValueError(f"{where}: `{key}` must be {kind}, got {show(row[key])}")
        choices = _CHOICES.get(task.icl_task_type)
        if choices is not None:
            gold, options = row["gold"], row[choices]
            if isinstance(gold, bool) or not isinstance(gold, int) or not 0 <= gold < len(options):
                raise ValueError(
                    f"{where}: gold={show(gold)} is not an index of its {len(options)} {choices} "
                    f"(0 to {len(options) - 1})"
                )
    return rows


def load_rows(task: ICLTaskConfig, *, data_root: str | Path) -> list[dict[str, Any]]:
    """The task's rows (dicts in llm-foundry's jsonl format), multiple-choice and schema golds checked.

    Raises:
        MissingTaskData: a local file is absent. ValueError: an unknown offline task, a malformed line, or a
            gold that is not an index of its row's options.
    """
    rows, source = _load_rows(task, data_root=data_root)
    return check_rows(rows, task, source=source)


def _load_rows(task: ICLTaskConfig, *, data_root: str | Path) -> tuple[list[dict[str, Any]], str]:
    """The rows and where they came from (a path, or the `dataset_uri`)."""
    uri = task.dataset_uri
    if uri.startswith("offline://"):
        name = uri.removeprefix("offline://")
        if name not in OFFLINE_TASKS:
            raise ValueError(
                f"icl_tasks[{task.label!r}].dataset_uri={uri!r}: offline tasks are {OFFLINE_TASKS}"
            )
        return generate_offline(name), uri
    if uri.startswith("hf://"):
        return _load_hf(task), uri
    if "://" in uri and not uri.startswith("file://"):
        return _read_jsonl(_download(uri)), redact(uri)
    path = resolve_local(uri.removeprefix("file://"), data_root)
    if not path.is_file():
        raise MissingTaskData(
            f"task {task.label!r}: data file {path} not found. Copy llm-foundry's "
            f"scripts/eval/local_data/{uri.split('local_data/')[-1]} there, point eval.data_root (or "
            "$EVAL_DATA) at a folder holding it, or give dataset_uri an object-store URL / hf:// dataset"
        )
    return _read_jsonl(path), str(path)


def local_task_file(task: ICLTaskConfig, *, data_root: str | Path) -> Path | None:
    """The local file `task` reads, or None when its rows come from elsewhere (offline://, hf://, a URL)."""
    uri = task.dataset_uri
    if uri.startswith(("offline://", "hf://")) or ("://" in uri and not uri.startswith("file://")):
        return None
    return resolve_local(uri.removeprefix("file://"), data_root)


def check_task_data(cfg: EvalConfig) -> None:
    """Refuses an evaluation in which every task would be skipped for want of its data file.

    Cheap (no file is read): call it before building the model or writing results.

    Raises:
        ConfigError: Every task of `cfg` reads a local file and none of them exists; one line naming the data
            folder, where it came from (`eval.data_root`, `$EVAL_DATA` or the default) and how to set it.
    """
    tasks = load_task_configs(cfg)
    root = cfg.data_root or default_data_root()
    files = [local_task_file(t, data_root=root) for t in tasks]
    if not tasks or not cfg.skip_missing or any(f is None or f.is_file() for f in files):
        # something to evaluate (or skip_missing=false: the first absent file raises by name)
        return
    if cfg.data_root:
        source = "eval.data_root"
    elif os.environ.get("EVAL_DATA"):
        source = "$EVAL_DATA"
    else:
        source = "the default; $EVAL_DATA is not set"
    suite = f" of {cfg.icl_tasks_file}" if cfg.icl_tasks_file else ""
    raise ConfigError(
        f"no data for any of the {len(tasks)} ICL tasks{suite}: the data folder {Path(root).expanduser()} "
        f"({source}) has none of their files (e.g. {files[0]}). Set EVAL_DATA=<folder> (or eval.data_root) "
        "to a copy of llm-foundry's scripts/eval/local_data (this project's tests use ../shared/data/icl), "
        "or use eval=offline, which needs no data; nothing was evaluated and no results were written"
    )
