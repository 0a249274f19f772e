"""llm-foundry's ICL sections (`icl_tasks:`, `eval_gauntlet:`) and its eval entry's YAMLs -> the `eval` group.

Design note: two callers. A training YAML's `icl_tasks` / `eval_gauntlet` go through `eval_section` (ICL
evaluation during training); a YAML for llm-foundry's eval entry (`scripts/eval/eval.py`: a `models:` list,
or a top-level `model` with no `train_loader`) goes through `translate_eval` and becomes `task=eval`. Both
read the task list and the gauntlet the way `train.py` later will (`foundry.eval.config.task_config`,
`foundry.eval.gauntlet.gauntlet_config`), so an unknown task or gauntlet key fails at translation, naming
it. A string `icl_tasks` / `eval_gauntlet` is a path relative to llm-foundry's `scripts/` folder (its own
YAMLs say `eval/yamls/tasks_v0.3.yaml`); one found from the cwd or the checkout (as `train.py` looks) is kept
as given, else it is looked up from the YAML's folder and each folder above it, then as a file of that name
beside the YAML, and written out absolute. Pure functions of the resolved YAML; no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from foundry.compat.llmfoundry import sections
from foundry.compat.llmfoundry.keys import PRECISIONS
from foundry.compat.llmfoundry.result import Out, Translation
from foundry.eval.config import read_yaml_key, task_config
from foundry.eval.gauntlet import gauntlet_config

__all__ = ["eval_section", "is_eval_yaml", "translate_eval"]

_REPO = Path(__file__).resolve().parents[4]
_EVAL_PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
_EVAL_IGNORED = {
    "python_log_level": "log levels come from Hydra's job_logging (conf/hydra/)",
    "log_config": "the resolved config is always recorded (run.json, config.yaml)",
    "console_log_interval": "task=eval prints one line per task (eval.progress_interval for progress)",
    "dist_timeout": "the collective timeout is not configurable here",
    "metadata": "not recorded here",
    "fsdp_config": "task=eval loads the whole model on one device here",
    "model_name": "the run is named by run_name here",
}
_EVAL_REFUSED = {
    "icl_subset_num_batches": "not supported: eval.limit caps examples per task, not batches",
    "eval_loader": "task=eval runs ICL tasks only; the loss on an eval split is not computed",
    "eval_loaders": "task=eval runs ICL tasks only; the loss on an eval split is not computed",
    "eval_subset_num_batches": "no eval loader here (task=eval runs ICL tasks only)",
    "callbacks": "no callbacks run in task=eval here",
    "code_paths": "no code is imported from YAMLs here",
    "loggers": "task=eval writes its results to files (icl_results.json / .md) and the console",
}


def is_eval_yaml(cfg: Mapping[str, Any]) -> bool:
    """Whether `cfg` is for llm-foundry's eval entry
    (a `models:` list, or a `model` without a train loader)."""
    return "models" in cfg or ("train_loader" not in cfg and "model" in cfg)


def _find(out: Out, key: str, path: str, hint: str) -> str:
    """`path` as given when `train.py` finds it (cwd, then the checkout), else found from the YAML's folders
    and written absolute; fails naming `key`."""
    p = Path(path).expanduser()
    if p.is_file() or (not p.is_absolute() and (_REPO / p).is_file()):
        return path
    if not p.is_absolute():
        here = Path(out.source).resolve().parent if Path(out.source).is_file() else None
        tries = [base / p for base in ([here, *here.parents] if here else [])]
        # llm-foundry's YAMLs copied into one folder
        tries += [here / p.name] if here else []
        for candidate in tries:
            if candidate.is_file():
                return str(candidate.resolve())
    raise out.fail(key, f"{path!r}: no such file (looked in the cwd and the YAML's folders); {hint}")


# `value`: a path or a list of task mappings
def _tasks(out: Out, value: Any) -> None:
    if isinstance(value, str):
        path = _find(
            out, "icl_tasks", value, "give the path of a task yaml, e.g. ours: evals/tasks_v0.3.yaml"
        )
        try:
            items = read_yaml_key(path, "icl_tasks")
            if not isinstance(items, list):
                raise ValueError("its `icl_tasks:` must be a list of tasks")
            for item in items:
                task_config(item, where=f"{path}: icl_tasks")
        except ValueError as err:
            raise out.fail("icl_tasks", str(err)) from None
        out.set("eval.icl_tasks_file", path)
        return
    if not isinstance(value, list):
        raise out.fail(
            "icl_tasks", f"must be a list of tasks or a task yaml's path, got {type(value).__name__}"
        )
    try:
        for item in value:
            task_config(item, where="icl_tasks")
    except ValueError as err:
        raise out.fail("icl_tasks", str(err)) from None
    out.set("eval.icl_tasks", value)


# `value`: a path or the mapping
def _gauntlet(out: Out, key: str, value: Any) -> None:
    if value is None:
        return
    try:
        if isinstance(value, str):
            value = _find(
                out, key, value, "give the path of a gauntlet yaml, e.g. ours: evals/gauntlet_v0.3.yaml"
            )
            gauntlet_config(read_yaml_key(value, "eval_gauntlet"))
        elif isinstance(value, Mapping):
            gauntlet_config(value)
        else:
            raise ValueError(f"must be a mapping or a gauntlet yaml's path, got {type(value).__name__}")
    except (ValueError, TypeError, KeyError) as err:
        raise out.fail(key, str(err).strip("'\"")) from None
    out.set("eval.gauntlet", value)


def eval_section(out: Out, cfg: Mapping[str, Any]) -> None:
    """`icl_tasks`, `eval_gauntlet` (validated, paths made absolute) and the ICL batch size."""
    if cfg.get("icl_tasks") is None:
        if cfg.get("eval_gauntlet") is not None:
            out.ignore("eval_gauntlet", "no icl_tasks: llm-foundry builds no gauntlet either")
        return
    out.choose("eval", "_eval")
    _tasks(out, cfg["icl_tasks"])
    _gauntlet(out, "eval_gauntlet", cfg.get("eval_gauntlet"))
    if cfg.get("device_eval_batch_size") is not None:
        out.set("eval.batch_size", cfg["device_eval_batch_size"])


def _model_entry(out: Out, entry: Any) -> None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("model"), Mapping):
        raise out.fail("models[0]", "must be a mapping with `model:` (and `tokenizer:`, `load_path:`)")
    for key, value in entry.items():
        if key == "model":
            sections.model(out, value)
        elif key == "tokenizer":
            sections.tokenizer(out, value)
        elif key == "load_path":
            if value is not None:
                out.set("checkpoint.load_path", value)
        elif key in _EVAL_IGNORED:
            out.ignore(f"models[0].{key}", _EVAL_IGNORED[key])
        else:
            out.refuse(f"models[0].{key}", "not an llm-foundry 0.22 eval model key supported here")
    if entry.get("tokenizer") is None:
        raise out.fail(
            "models[0].tokenizer", "missing: llm-foundry requires it (and so does the translation)"
        )


def translate_eval(cfg: Mapping[str, Any], *, source: str = "YAML") -> Translation:
    """Translates a resolved YAML of llm-foundry's eval entry into `task=eval` overrides.

    Raises:
        ConfigError: Several models, no model or tokenizer, no ICL tasks, an unknown task or gauntlet key, an
            unsupported precision: naming the key and the fix.
    """
    out = Out(source)
    models = cfg.get("models")
    # llm-foundry's eval turns a top-level model / tokenizer / load_path into models[0]
    if models is None:
        models = [{k: cfg[k] for k in ("model", "tokenizer", "load_path", "model_name") if k in cfg}]
    if not isinstance(models, list) or len(models) != 1:
        n = len(models) if isinstance(models, list) else 0
        raise out.fail("models", f"{n} models: a run evaluates one model here; run once per model")
    if cfg.get("icl_tasks") is None:
        raise out.fail("icl_tasks", "missing: task=eval runs ICL tasks (a list, or a task yaml's path)")
    out.set("task", "eval")
    _model_entry(out, models[0])
    eval_section(out, cfg)
    for key, value in cfg.items():
        if key in ("models", "model", "tokenizer", "load_path", "icl_tasks", "eval_gauntlet", "variables"):
            continue
        if key in ("max_seq_len", "icl_seq_len"):
            out.set("eval.max_seq_len", value)
        elif key == "device_eval_batch_size":
            # handled in eval_section
            continue
        elif key == "precision":
            if value not in _EVAL_PRECISIONS:
                known = [p for p in PRECISIONS if p in _EVAL_PRECISIONS]
                raise out.fail(key, f"{value!r} is not supported by task=eval here; use one of {known}")
            out.set("eval.precision", value)
        elif key == "seed":
            out.set("seed", value)
        elif key == "run_name":
            if value is not None:
                out.set("run_name", value)
        elif key in _EVAL_IGNORED:
            out.ignore(key, _EVAL_IGNORED[key])
        elif key in _EVAL_REFUSED:
            out.refuse(key, _EVAL_REFUSED[key])
        else:
            out.refuse(
                key, "not an llm-foundry 0.22 eval key (llm-foundry refuses it as an unused parameter)"
            )
    return out.tr
