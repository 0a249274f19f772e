"""Hydra's files without credentials: redacted YAML dumps, the `.hydra/` callback,
and the sweep-folder resolver.

Hydra records the composed config, its own config and the command-line overrides (`.hydra/*.yaml`,
`multirun.yaml`) and names sweep job folders after the overrides (`hydra.job.override_dirname`); a signed URL
or a token given on the command line would land verbatim in all of them. `conf/hydra/default.yaml` therefore
sets `output_subdir: null` (Hydra writes no `.hydra/`); `write_hydra_files` writes the same three files
through `stackbase.secrets.redact_value` once the run is accepted (`foundry.rundir.record`: a refused command
writes nothing), `RedactedHydraFiles` redacts the sweep's `multirun.yaml`, and sweep job folders are named
with the `${foundry.redact:...}` resolver. `RedactingFilter` masks every log line the job and Hydra itself log
(the console and `<run_dir>/train.log`; Hydra's launcher logs each job's overrides). The task itself never
reads these files and keeps the real values.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback as HydraCallback
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf

from stackbase.secrets import redact_text, redact_value

__all__ = [
    "REDACT_RESOLVER",
    "RedactedHydraFiles",
    "RedactingFilter",
    "redacted_yaml",
    "register_redact_resolver",
    "write_hydra_files",
]

REDACT_RESOLVER = "foundry.redact"


def redacted_yaml(cfg: Any, *, resolve: bool = False) -> str:
    """`OmegaConf.to_yaml` of `cfg` (a DictConfig, ListConfig or plain container) with every credential
    masked (`cfg` itself is not changed).

    Args:
        cfg: A `DictConfig`/`ListConfig` or a plain dict/list.
        resolve: Resolve interpolations first (the run directory's `config.yaml`); Hydra's own dumps don't.
    """
    if isinstance(cfg, DictConfig | ListConfig):
        cfg = OmegaConf.to_container(cfg, resolve=resolve, enum_to_str=True)
    return OmegaConf.to_yaml(redact_value(cfg))


def register_redact_resolver() -> None:
    """Registers `${foundry.redact:<text>}` (the text with its secrets masked); idempotent."""
    OmegaConf.register_new_resolver(REDACT_RESOLVER, lambda text="": redact_text(str(text)), replace=True)


class RedactingFilter(logging.Filter):
    """A `logging` filter that masks credentials in each record's message (it never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Replaces the formatted message by its redacted text when it holds a secret."""
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


def _write(path: Path, text: str) -> None:
    """Writes `text` atomically (a reader never sees a torn file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_hydra_files(out: Path, task_cfg: DictConfig) -> None:
    """Writes the running job's `config.yaml`, `hydra.yaml` and `overrides.yaml` to `out` (`<run_dir>/.hydra/
    rank<R>`): the content of Hydra's own files, secrets masked, each atomically. Needs a running Hydra job.

    Args:
        out: The folder (created if missing).
        task_cfg: The job's config (`hydra` node removed, as the task function receives it).
    """
    hydra_cfg = HydraConfig.get()
    task = OmegaConf.to_container(task_cfg, resolve=False, enum_to_str=True)
    assert isinstance(task, dict)
    task.pop("hydra", None)
    hydra_node = OmegaConf.to_container(hydra_cfg, resolve=False, enum_to_str=True)
    _write(out / "config.yaml", redacted_yaml(task))
    _write(out / "hydra.yaml", redacted_yaml({"hydra": hydra_node}))
    # as typed: iterating the ListConfig would resolve a quoted `'${oc.env:X}'` into the value (issue 39)
    _write(
        out / "overrides.yaml", redacted_yaml(OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False))
    )


class RedactedHydraFiles(HydraCallback):
    """Redacts the sweep's `multirun.yaml` and the overrides a failed job prints.

    Registered in `conf/hydra/default.yaml` together with `output_subdir: null`, so the unredacted files are
    never written (a job's own three files: `write_hydra_files`). Creating it registers the `foundry.redact`
    resolver the sweep `subdir` uses.
    """

    def __init__(self) -> None:
        register_redact_resolver()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Rewrites the sweep's `multirun.yaml` with secrets masked (a sweep job only)."""
        hydra_cfg = HydraConfig.get()
        if hydra_cfg.mode == RunMode.MULTIRUN:
            _redact_file(Path(str(hydra_cfg.sweep.dir)) / "multirun.yaml")

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        """Masks the job's recorded overrides (Hydra prints them to stderr when the job failed)."""
        overrides = getattr(job_return, "overrides", None)
        if overrides:
            job_return.overrides = [redact_text(str(o)) for o in overrides]


def _redact_file(path: Path) -> None:
    """Rewrites a YAML file Hydra already wrote (the sweep's `multirun.yaml`) redacted,
    if it holds secrets."""
    if not path.is_file():
        return
    original = OmegaConf.to_container(OmegaConf.load(path), resolve=False, enum_to_str=True)
    redacted = redact_value(original)
    if redacted != original:
        _write(path, OmegaConf.to_yaml(redacted))
