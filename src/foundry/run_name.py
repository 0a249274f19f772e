"""Run names: a command that names no run gets a new, readable one (`pretrain-mpt-tiny-20261126-175501`).

Design note: `conf/train.yaml` sets `run_name: ${foundry.run_name:${task}}`. The resolver returns `$RUN_NAME`
when set, else a fresh name made of the task, the model option and the time (`-2`, `-3`, ... when
`outputs/<name>` is taken), so every unnamed command starts a new run and autoresume only ever continues a run
the user named (Composer's behaviour). It is registered with `use_cache=True`: OmegaConf then resolves it once
per config, and Hydra copies that cache into the task's config and into every sweep job's, so the run
directory, the task and all jobs of a sweep see one name. Processes that must agree on a name without talking
cannot use the clock: under torchrun the name ends with the rendezvous id (the same on every rank and restart;
`--standalone` draws a fresh one per launch), and several ranks without one are refused. Supervisors fix the
name once and pass `run_name=` to every (re)start: `python -m foundry.launch` (via `foundry.launch.compose`),
the Slurm launcher and `python -m foundry.launch.k8s`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from foundry.errors import ConfigError
from stackbase.names import check_name

__all__ = [
    "RUN_DIR_RESOLVER",
    "RUN_NAME_RESOLVER",
    "default_run_name",
    "fresh_run_name",
    "register_run_name_resolver",
    "run_name_given",
]

RUN_NAME_RESOLVER = "foundry.run_name"
RUN_DIR_RESOLVER = "foundry.run_dir"
STAMP_FORMAT = "%Y%m%d-%H%M%S"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def fresh_run_name(task: str, model: str | None, *, stamp: str, taken: Callable[[str], bool]) -> str:
    """`<task>-<model>-<stamp>`, with `-2`, `-3`, ... appended while `taken(name)` (pure: no clock, no disk).

    Args:
        task: `pretrain`, `finetune` or `eval`.
        model: The `model=` option (`mpt-tiny`), or None when unknown (left out of the name).
        stamp: What makes the name new: the time (`20261126-175501`) or a job id shared by every rank.
        taken: Whether a name is already used (a run directory exists).
    """
    parts = [task, model, stamp] if model else [task, stamp]
    base = "-".join(_UNSAFE.sub("-", p).strip("-") for p in parts)
    name, n = base, 1
    while taken(name):
        n += 1
        name = f"{base}-{n}"
    return name


def _model_choice() -> str | None:
    """The `model=` option of the config Hydra is composing (None outside a Hydra app or compose with it)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    choice = HydraConfig.get().runtime.choices.get("model")
    return str(choice) if choice else None


def _job_id(environ: Mapping[str, str]) -> str | None:
    """torchrun's rendezvous id (`TORCHELASTIC_RUN_ID`; `none` when it has none), shortened when a uuid."""
    job = environ.get("TORCHELASTIC_RUN_ID", "none")
    if job == "none":
        return None
    return job.replace("-", "")[:8] if re.fullmatch(r"[0-9a-f-]{32,36}", job) else job


def _stamp() -> str:
    """The local time, to the second (`20261126-175501`)."""
    return time.strftime(STAMP_FORMAT)


def _taken(name: str, root: Path = Path("outputs")) -> bool:
    """A run directory (or a sweep directory) of that name exists
    (Hydra's `outputs/`, relative to the cwd)."""
    return (root / name).exists() or (root / "multirun" / name).exists()


def default_run_name(task: str, *, environ: Mapping[str, str] | None = None) -> str:
    """The `${foundry.run_name:${task}}` resolver: `$RUN_NAME`, else a fresh name (module note).

    Raises:
        ConfigError: Several torchrun ranks without a rendezvous id (each would pick its own name).
    """
    env = os.environ if environ is None else environ
    if env.get("RUN_NAME"):
        return env["RUN_NAME"]
    model = _model_choice()
    job = _job_id(env)
    # the same on every rank and every restart of this torchrun launch
    if job is not None:
        return fresh_run_name(task, model, stamp=job, taken=lambda name: False)
    if int(env.get("WORLD_SIZE", "1") or 1) > 1:
        raise ConfigError(
            f"run_name: {env.get('WORLD_SIZE')} ranks without a rendezvous id cannot agree on a new run "
            "name: pass run_name=<name> (the same on every rank), or start torchrun "
            "with --standalone or --rdzv-id"
        )
    return fresh_run_name(task, model, stamp=_stamp(), taken=_taken)


def register_run_name_resolver() -> None:
    """Registers `${foundry.run_name:<task>}` (cached per config: one name per run, see the module note) and
    `${foundry.run_dir:<name>}`, the run name checked as one path component (`stackbase.names`) where Hydra
    makes the run directory from it: `run_name=..` (or `RUN_NAME=..`, or an llm-foundry YAML's) is refused
    before any folder is created, instead of making `outputs/..` the run directory."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver(
        RUN_NAME_RESOLVER, lambda task: default_run_name(str(task)), replace=True, use_cache=True
    )
    OmegaConf.register_new_resolver(RUN_DIR_RESOLVER, _run_dir_name, replace=True)


def _run_dir_name(name: object) -> str:
    return check_name(name if isinstance(name, str) else str(name), field="run_name")


def run_name_given(overrides: Iterable[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether the user named the run: a `run_name=` override (also `+`/`++`) or `$RUN_NAME`."""
    env = os.environ if environ is None else environ
    return bool(env.get("RUN_NAME")) or any(o.lstrip("+").startswith("run_name=") for o in overrides)
