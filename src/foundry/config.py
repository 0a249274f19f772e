"""The root `TrainConfig`, schema registration, validation, and the task dispatcher `train.py` calls.

Design note: `conf/train.yaml` composes onto the typed root schema `train_schema` (`TrainConfig`); each
group's schema lives beside its component and is registered here explicitly (`register_configs()`, never at
import), so composing type-checks every value before anything is built. Hydra lets `+key=value` add keys a
schema does not declare (it opens the struct), so `to_train_config` first rejects every undeclared key
(`unknown_keys`, naming the closest declared one), then converts the composed `DictConfig` to dataclasses with
`OmegaConf.to_object` (running every `__post_init__` check); both raise `foundry.errors.ConfigError`. The
library only ever sees dataclasses. `run_task` validates before it writes a file, and writes atomically.
The tasks themselves live in `foundry.tasks`; `MultirunSummary` is the Hydra callback tabulating a sweep.
"""

from __future__ import annotations

import atexit
import difflib
import json
import math
import os
import time
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from foundry.callbacks.base import CallbacksConfig
from foundry.checkpoint.config import CheckpointConfig
from foundry.data.quickstart import QuickstartDataConfig
from foundry.data.text import TextDataConfig
from foundry.errors import ConfigError
from foundry.eval.config import EvalConfig, register_eval_configs
from foundry.loggers.base import LoggerConfig
from foundry.models import ModelConfig, register_model_configs
from foundry.optim import OptimizerConfig, SchedulerConfig, register_optim_configs
from foundry.parallel.config import ParallelismConfig
from foundry.tasks.run_files import write_text_atomic
from foundry.tokenizers import TokenizerConfig, register_tokenizer_configs
from foundry.train.config import TrainerConfig

__all__ = [
    "TASKS",
    "MultirunSummary",
    "TrainConfig",
    "register_configs",
    "run_task",
    "to_train_config",
    "unknown_key_message",
    "unknown_keys",
]

TASKS = ("pretrain", "eval")
GROUP_ONLY_KEYS = ("experiment", "debug", "sweep", "local")
"""Config groups of `conf/train.yaml` that pick files but are not `TrainConfig` fields (for suggestions)."""
LLM_FOUNDRY_KEYS = {
    "train_loader": "data=... and data.* (data.train_split)",
    "eval_loader": "data.eval_split",
    "icl_tasks": "eval=... (conf/eval/)",
    "fsdp_config": "parallelism=fsdp and parallelism.*",
    "loggers": "logger=...",
    "max_seq_len": "model.max_seq_len (data.max_seq_len follows it)",
    "max_duration": "trainer.max_duration",
    "eval_interval": "trainer.eval_interval",
    "global_train_batch_size": "trainer.global_train_batch_size",
    "device_train_microbatch_size": "trainer.device_train_microbatch_size",
    "precision": "trainer.precision",
    "save_folder": "checkpoint.save_folder",
    "load_path": "checkpoint.load_path",
    "autoresume": "checkpoint.autoresume",
}
"""Top-level keys of llm-foundry YAMLs and where they live here."""
KEY_RULE = (
    "Every key must be declared by its schema: `key=value` sets one, and `+key=value` cannot add new ones "
    "(free-form values go under `+variables.<name>=value`)."
)


@dataclass(kw_only=True)
class TrainConfig:
    """The root of `conf/train.yaml`: one field per config group plus run-level keys."""

    task: str = "pretrain"
    """What `train.py` runs: `pretrain`, or `eval` (ICL evaluation of `model`)."""
    run_name: str = "dev"
    """Names the run directory (`outputs/<run_name>`) and the W&B run."""
    seed: int = 17
    """Seeds Python, numpy and torch; the data shuffle seed when `data.shuffle_seed` is null."""
    model: ModelConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: TextDataConfig
    optimizer: OptimizerConfig
    scheduler: SchedulerConfig
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    eval: EvalConfig | None = None
    """The ICL evaluation config (`eval` group); null when no ICL eval is configured."""
    tags: list[str] = field(default_factory=list)
    """Free-form labels (logged to W&B)."""
    variables: dict[str, Any] = field(default_factory=dict)
    """A free namespace for `${variables.x}` interpolation; ignored otherwise."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}: choose one of {list(TASKS)}")
        if not self.run_name or "/" in self.run_name:
            raise ValueError(f"run_name={self.run_name!r} must be a non-empty name without '/'")


def register_configs() -> None:
    """Stores every schema node in Hydra's `ConfigStore` (idempotent; call before composing)."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    register_model_configs(cs)
    register_optim_configs(cs)
    register_tokenizer_configs(cs)
    cs.store(group="data", name="_text", node=TextDataConfig)
    cs.store(group="data", name="_quickstart", node=QuickstartDataConfig)
    cs.store(group="trainer", name="_trainer", node=TrainerConfig)
    cs.store(group="parallelism", name="_parallelism", node=ParallelismConfig)
    cs.store(group="checkpoint", name="_checkpoint", node=CheckpointConfig)
    cs.store(group="logger", name="_logger", node=LoggerConfig)
    cs.store(group="callbacks", name="_callbacks", node=CallbacksConfig)
    register_eval_configs(cs)


def unknown_keys(cfg: DictConfig) -> list[tuple[str, type, Any]]:
    """Every key of `cfg` that its node's schema (a dataclass) does not declare: `(full key, schema, value)`.

    Free-form nodes (`dict` fields such as `variables`) may hold any key; their children are still checked.
    """
    found: list[tuple[str, type, Any]] = []
    _collect_unknown(cfg, "", found)
    return found


def _collect_unknown(node: Any, path: str, found: list[tuple[str, type, Any]]) -> None:  # noqa: ANN401
    if not isinstance(node, DictConfig | ListConfig):
        return
    if node._is_none() or node._is_missing() or node._is_interpolation():
        return
    if isinstance(node, ListConfig):
        for i in range(len(node)):
            _collect_unknown(node._get_node(i), f"{path}[{i}]", found)
        return
    schema = OmegaConf.get_type(node)
    declared = {f.name for f in fields(schema)} if isinstance(schema, type) and is_dataclass(schema) else None
    for key in node.keys():
        full = f"{path}.{key!s}" if path else str(key)
        child = node._get_node(key)
        if declared is not None and schema is not None and key not in declared:
            value = None if child is None or isinstance(child, DictConfig | ListConfig) else child._value()
            found.append((full, schema, value))
        else:
            _collect_unknown(child, full, found)


def unknown_key_message(full_key: str, schema: type, value: Any = None) -> str:  # noqa: ANN401
    """One line about `full_key`, which `schema` does not declare: the llm-foundry equivalent or closest key.

    Args:
        full_key: The dotted key, e.g. `modle` or `model.d_modle`.
        schema: The dataclass of the node holding it.
        value: The value given, used in the suggestion (`model=mpt-125m`) when it is a plain value.
    """
    parent, _, key = full_key.rpartition(".")
    prefix = f"{parent}." if parent else ""
    names = [f.name for f in fields(schema)]
    head = f"unknown config key '{full_key}' ({schema.__name__} has no field '{key}')"
    if not parent and key in LLM_FOUNDRY_KEYS:
        return f"{head}: that is an llm-foundry key; here it is {LLM_FOUNDRY_KEYS[key]}"
    close = difflib.get_close_matches(key, names + (list(GROUP_ONLY_KEYS) if not parent else []), n=1)
    if not close:
        return f"{head}; valid keys: {', '.join(names)}"
    example = f" (e.g. {prefix}{close[0]}={value})" if isinstance(value, str | int | float) else ""
    return f"{head}: did you mean '{prefix}{close[0]}'?{example}"


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """Validates the composed config and converts it to dataclasses.

    Rejects keys no schema declares (Hydra's `+key=value` adds them silently), then runs `OmegaConf.to_object`
    (resolving interpolations and running every schema's `__post_init__` check).

    Raises:
        ConfigError: Naming every undeclared key (and the closest declared one), or the value a schema rejects.
    """
    unknown = unknown_keys(cfg)
    if unknown:
        lines = [unknown_key_message(key, schema, value) for key, schema, value in unknown]
        raise ConfigError("\n".join([*lines, KEY_RULE]))
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except (ValueError, OmegaConfBaseException) as err:  # a schema check, or an unresolvable interpolation
        raise ConfigError(str(err)) from err
    if not isinstance(obj, TrainConfig):
        raise TypeError(
            f"the composed config is a {type(obj).__name__}, not TrainConfig: is train_schema first?"
        )
    return obj


def _run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path("outputs") / "dev"


def run_task(cfg: DictConfig) -> float | None:
    """Runs the task `cfg.task` selects and returns the sweep objective.

    Validates `cfg` (`to_train_config`) before writing anything, so a rejected command leaves an existing run
    directory as it was; then writes the resolved config to `<run_dir>/config.yaml` and the final metrics to
    `final_metrics.json`, each atomically.

    Returns:
        The final `eval/loss` (else `train/loss`), the value Hydra sweepers (Optuna) minimise.
    """
    train_cfg = to_train_config(cfg)
    run_dir = _run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 writes the run's files
    if main:
        from foundry.hydra_callbacks import redacted_yaml  # credentials masked in every file a run writes

        write_text_atomic(run_dir / "config.yaml", redacted_yaml(cfg, resolve=True))
    if train_cfg.task == "pretrain":
        from foundry.train.run import pretrain

        metrics = pretrain(train_cfg, run_dir=run_dir)
    else:
        from foundry.tasks.eval import eval_task

        metrics = eval_task(train_cfg, run_dir)
    if main:
        write_text_atomic(run_dir / "final_metrics.json", json.dumps(metrics, indent=2))
    for key in ("eval/loss", "train/loss"):
        if key in metrics and math.isfinite(metrics[key]):
            return float(metrics[key])
    return None


class MultirunSummary(HydraCallback):
    """Tabulates a multirun, one row per job: its overrides, final metrics and status (`ok` or its error).

    Each sweep writes its own `<sweep dir>/summary-<YYYYmmdd-HHMMSS>.md` (sweeps sharing a `run_name` share
    the sweep dir, so a fixed name would be overwritten), rewritten atomically after every job. The table is
    printed when the sweep ends; when a job fails, Hydra aborts the sweep without `on_multirun_end`, so the
    table is printed at interpreter exit instead (after the error; the exit code stays non-zero).

    Args:
        metrics: Keys of `final_metrics.json` shown as columns.
    """

    def __init__(self, metrics: list[str] | None = None) -> None:
        self.metrics = list(metrics or ["train/loss", "eval/loss"])
        self.rows: list[tuple[list[str], dict[str, Any]]] = []
        self.path: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ANN401
        """Reserves this sweep's summary file and arranges for the table to be printed even if a job fails."""
        self.rows = []
        try:
            self.path = _reserve_summary_path(Path(config.hydra.sweep.dir))
        except OSError:
            self.path = None
        atexit.register(self._print)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:  # noqa: ANN401
        """Collects the job's overrides and final metrics (or its error) and rewrites the summary file."""
        overrides = list(getattr(job_return, "overrides", None) or [])
        status = getattr(job_return, "status", None)
        if status is not None and status.name == "FAILED":
            err = job_return._return_value
            values: dict[str, Any] = {"status": f"failed: {type(err).__name__}: {err}"}
        else:
            try:
                out_dir = Path(job_return.hydra_cfg.hydra.runtime.output_dir)
                values = {**json.loads((out_dir / "final_metrics.json").read_text()), "status": "ok"}
            except (OSError, ValueError, AttributeError) as err:  # a job without metrics still gets a row
                values = {"status": f"no final_metrics.json ({type(err).__name__})"}
        self.rows.append((overrides, values))
        if self.path is not None:
            write_text_atomic(self.path, self.table() + "\n")

    def table(self) -> str:
        """The summary as a Markdown table; overrides shared by every job are left out of the rows."""
        from streaming.storage.redact import redact_text  # overrides may carry tokens or signed URLs

        common = set.intersection(*(set(o) for o, _ in self.rows)) if len(self.rows) > 1 else set()
        head = ["job", "overrides", *self.metrics, "status"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i, (ovr, vals) in enumerate(self.rows):
            cells = [str(i), redact_text(" ".join(o for o in ovr if o not in common)) or "(none)"]
            for m in self.metrics:
                v = vals.get(m)
                cells.append(f"{v:.4f}" if isinstance(v, int | float) else "-")
            cells.append(_cell(redact_text(str(vals.get("status", "-")))))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ANN401
        """Prints the table (and where it was written)."""
        self._print()

    def _print(self) -> None:
        atexit.unregister(self._print)
        failed = sum(not str(v.get("status", "")).startswith("ok") for _, v in self.rows)
        where = f" -> {self.path}" if self.path is not None else ""
        head = f"[foundry] multirun summary ({len(self.rows)} jobs, {failed} failed){where}"
        print(f"\n{head}\n{self.table()}", flush=True)


def _cell(text: str, limit: int = 120) -> str:
    """`text` as one Markdown table cell: one line, no `|`, at most `limit` characters."""
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _reserve_summary_path(sweep_dir: Path) -> Path:
    """Creates (exclusively) and returns `sweep_dir/summary-<time>[-N].md`, a name no other sweep holds."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(1000):
        path = sweep_dir / (f"summary-{stamp}.md" if n == 0 else f"summary-{stamp}-{n}.md")
        try:
            with path.open("x"):
                return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{sweep_dir}: too many summary-{stamp}*.md files")
