"""The root `TrainConfig`, Hydra schema registration, and the task dispatcher `train.py` calls.

Design note: this is the only library module that imports Hydra/OmegaConf. Each group's schema lives beside
its component and is registered here explicitly (`register_configs()`, never at import), so composing
`conf/train.yaml` type-checks every key before anything is built; `run_task` converts the composed
`DictConfig` to dataclasses with `OmegaConf.to_object` (running every `__post_init__` check), so the library
only ever sees dataclasses. `MultirunSummary` is a Hydra callback printing one row per job of a sweep.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.experimental.callback import Callback as HydraCallback
from omegaconf import DictConfig, OmegaConf

from foundry.callbacks.base import CallbacksConfig
from foundry.data.quickstart import QuickstartDataConfig
from foundry.data.text import TextDataConfig
from foundry.loggers.base import LoggerConfig
from foundry.models import ModelConfig, register_model_configs
from foundry.optim import OptimizerConfig, SchedulerConfig, register_optim_configs
from foundry.tokenizers import TokenizerConfig, register_tokenizer_configs
from foundry.train.config import CheckpointConfig, ParallelismConfig, TrainerConfig

__all__ = ["TASKS", "MultirunSummary", "TrainConfig", "register_configs", "run_task", "to_train_config"]

TASKS = ("pretrain", "eval")


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
    eval: Any = None
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
    if importlib.util.find_spec("foundry.eval") is not None:
        eval_pkg = importlib.import_module("foundry.eval")
        if hasattr(eval_pkg, "register_eval_configs"):
            eval_pkg.register_eval_configs(cs)


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """`OmegaConf.to_object` (resolving interpolations and running every schema's validation)."""
    obj = OmegaConf.to_object(cfg)
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


def _eval_task(cfg: TrainConfig, run_dir: Path) -> dict[str, float]:
    if importlib.util.find_spec("foundry.eval") is None:
        raise ValueError("task=eval needs foundry.eval (ICL evaluation), which is not installed in this tree")
    from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart
    from foundry.eval import load_task_configs, run_icl_eval
    from foundry.tokenizers import build_tokenizer
    from foundry.train.run import _build_model, resolve_device

    if cfg.eval is None or not load_task_configs(cfg.eval):
        raise ValueError(
            "task=eval has no ICL tasks: pick an eval group, e.g. eval=offline or eval=gauntlet-v0.3"
        )
    if isinstance(cfg.data, QuickstartDataConfig) and not Path(cfg.tokenizer.name).expanduser().exists():
        # the quick-start tokenizer is built with its data (same arguments as pretrain)
        prepare_quickstart(
            cfg.data, max_seq_len=cfg.data.max_seq_len or getattr(cfg.model, "max_seq_len", 2048)
        )
    device = resolve_device(cfg.trainer.device)
    tokenizer = build_tokenizer(cfg.tokenizer)
    model = _build_model(cfg.model, vocab=len(tokenizer), device=device)
    if cfg.checkpoint.load_path:
        from foundry.checkpoint import load_weights

        load_weights(model, cfg.checkpoint.load_path, cache_root=str(run_dir / ".checkpoint-cache"))
    results = run_icl_eval(cfg.eval, model=model, tokenizer=tokenizer, device=device, output_dir=run_dir)
    (run_dir / "eval_results.json").write_text(json.dumps(results, indent=2, default=str))
    print(
        (run_dir / "icl_results.md").read_text() + f"\n[foundry] ICL results in {run_dir.resolve()}",
        flush=True,
    )
    return {k: float(v) for k, v in results.items() if isinstance(v, int | float)}


def run_task(cfg: DictConfig) -> float | None:
    """Runs the task `cfg.task` selects and returns the sweep objective.

    Writes the resolved config to `<run_dir>/config.yaml` and the final metrics to `final_metrics.json`.

    Returns:
        The final `eval/loss` (else `train/loss`), the value Hydra sweepers (Optuna) minimise.
    """
    run_dir = _run_dir()
    run_dir.mkdir(parents=True, exist_ok=True)
    main = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 writes the run's files
    if main:
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    train_cfg = to_train_config(cfg)
    if train_cfg.task == "pretrain":
        from foundry.train.run import pretrain

        metrics = pretrain(train_cfg, run_dir=run_dir)
    else:
        metrics = _eval_task(train_cfg, run_dir)
    if main:
        (run_dir / "final_metrics.json").write_text(json.dumps(metrics, indent=2))
    for key in ("eval/loss", "train/loss"):
        if key in metrics and math.isfinite(metrics[key]):
            return float(metrics[key])
    return None


class MultirunSummary(HydraCallback):
    """At the end of a multirun, prints (and writes `summary.md`) one row per job: overrides and final loss.

    Args:
        metrics: Keys of `final_metrics.json` shown as columns.
    """

    def __init__(self, metrics: list[str] | None = None) -> None:
        self.metrics = list(metrics or ["train/loss", "eval/loss"])
        self.rows: list[tuple[list[str], dict[str, Any]]] = []

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:  # noqa: ANN401
        """Collects the job's overrides and final metrics (or its error)."""
        overrides = list(getattr(job_return, "overrides", None) or [])
        values: dict[str, Any] = {}
        try:
            out_dir = Path(job_return.hydra_cfg.hydra.runtime.output_dir)
            values = json.loads((out_dir / "final_metrics.json").read_text())
        except Exception as err:  # noqa: BLE001 - a failed job still gets a row
            values = {"error": f"{type(err).__name__}"}
        status = getattr(job_return, "status", None)
        if status is not None and status.name == "FAILED":
            values = {"error": repr(job_return._return_value)[:80]}
        self.rows.append((overrides, values))

    def table(self) -> str:
        """The summary as a Markdown table; overrides shared by every job are left out of the rows."""
        common = set.intersection(*(set(o) for o, _ in self.rows)) if len(self.rows) > 1 else set()
        head = ["job", "overrides", *self.metrics]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for i, (ovr, vals) in enumerate(self.rows):
            cells = [str(i), " ".join(o for o in ovr if o not in common) or "(none)"]
            for m in self.metrics:
                v = vals.get(m)
                cells.append(f"{v:.4f}" if isinstance(v, float) else vals.get("error", "-"))
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:  # noqa: ANN401
        """Prints the table and writes it to `<sweep dir>/summary.md`."""
        text = self.table()
        print(f"\n[foundry] multirun summary ({len(self.rows)} jobs)\n{text}", flush=True)
        try:
            sweep_dir = Path(config.hydra.sweep.dir)
            sweep_dir.mkdir(parents=True, exist_ok=True)
            (sweep_dir / "summary.md").write_text(text + "\n")
        except Exception:  # noqa: BLE001 - printing the table is what matters
            pass
