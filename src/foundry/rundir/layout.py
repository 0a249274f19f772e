"""Every file and folder of a run directory, named once (issue 39: each name was typed by hand in 4-5 files).

A run lives in `outputs/<run_name>/` (or a sweep job's folder under `multirun/`):

| name | written by | read by |
| --- | --- | --- |
| `config.yaml` | `run_task` (rank 0, at `RunRecord.open`) | `runs show`, `runs resume` |
| `.hydra/rank<R>/` | `run_task` (config, hydra, overrides: Hydra's own files, masked) | `runs resume` |
| `run.json` | `build_observers` (config, derived, git, packages, device) | `runs`, tokenizer lookup |
| `metrics.jsonl` | the JSONL logger | `runs list/show/report` |
| `final_metrics.json` | `run_task` at the end | `runs`, the sweep summary, MLflow |
| `events.jsonl` | the launcher and the trainer (`foundry.events`) | `runs`, W&B/MLflow publishers |
| `live.json` | `Liveness` (rank 0) | `runs list`, `runs stop` |
| `train.log` | `foundry.run_log` | `runs logs` |
| `icl_results.md` | the ICL report | `runs`, MLflow |
| `.lock` | `RunLock` (rank 0, while the run runs) | a second command on the run |
| `checkpoints/` | the checkpoint saver (default `save_folder`) | autoresume, `runs show` |
| `.checkpoint-scratch/`, `.checkpoint-cache/` | the saver, remote resume | (scratch) |
| `heartbeat/`, `stacks/` | the launcher and its workers | the launcher's watchdog |

Nothing here touches the disk except `create`; the names are plain constants so that modules which must start
fast (`python -m foundry.runs`) import this without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stackbase.names import child_path

__all__ = [
    "CHECKPOINTS",
    "CHECKPOINT_CACHE",
    "CHECKPOINT_SCRATCH",
    "CONFIG",
    "EVENTS",
    "FINAL_METRICS",
    "HEARTBEAT",
    "HYDRA",
    "ICL_RESULTS",
    "LIVE",
    "LOCK",
    "MARKERS",
    "METRICS",
    "OUTPUTS",
    "RUN",
    "RunDir",
    "SCRATCH",
    "STACKS",
    "TRAIN_LOG",
    "UNLISTED",
]

OUTPUTS = "outputs"
CONFIG = "config.yaml"
RUN = "run.json"
METRICS = "metrics.jsonl"
FINAL_METRICS = "final_metrics.json"
EVENTS = "events.jsonl"
LIVE = "live.json"
TRAIN_LOG = "train.log"
ICL_RESULTS = "icl_results.md"
LOCK = ".lock"
HYDRA = ".hydra"
CHECKPOINTS = "checkpoints"
CHECKPOINT_SCRATCH = ".checkpoint-scratch"
CHECKPOINT_CACHE = ".checkpoint-cache"
HEARTBEAT = "heartbeat"
STACKS = "stacks"

MARKERS = (RUN, EVENTS, CONFIG)
"""A folder holding one of these is a run (`python -m foundry.runs` finds runs by them)."""
SCRATCH = (CHECKPOINT_SCRATCH, CHECKPOINT_CACHE)
"""Folders a task may fill before the run is accepted (reading a remote checkpoint)."""
UNLISTED = (CHECKPOINTS, CHECKPOINT_SCRATCH, CHECKPOINT_CACHE, HYDRA, HEARTBEAT, STACKS)
"""A run's own folders: never searched for nested runs."""


@dataclass(frozen=True)
class RunDir:
    """The paths of one run directory."""

    root: Path

    @classmethod
    def named(cls, run_name: object, *, outputs: str | Path = OUTPUTS) -> RunDir:
        """`outputs/<run_name>`, with the name checked (`stackbase.names`: no `.`, `..`, separators)."""
        return cls(child_path(outputs, run_name, field="run_name"))

    def create(self) -> Path:
        """Makes the folder (and its parents); returns it."""
        self.root.mkdir(parents=True, exist_ok=True)
        return self.root

    def __truediv__(self, name: str) -> Path:
        return self.root / name

    @property
    def config(self) -> Path:
        return self.root / CONFIG

    @property
    def run(self) -> Path:
        return self.root / RUN

    @property
    def metrics(self) -> Path:
        return self.root / METRICS

    @property
    def final_metrics(self) -> Path:
        return self.root / FINAL_METRICS

    @property
    def events(self) -> Path:
        return self.root / EVENTS

    @property
    def live(self) -> Path:
        return self.root / LIVE

    @property
    def train_log(self) -> Path:
        return self.root / TRAIN_LOG

    @property
    def icl_results(self) -> Path:
        return self.root / ICL_RESULTS

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    def hydra(self, rank: int) -> Path:
        """`.hydra/rank<R>/`: the job's config, hydra and overrides files as rank R ran them."""
        return self.root / HYDRA / f"rank{rank}"

    @property
    def checkpoints(self) -> Path:
        return self.root / CHECKPOINTS

    @property
    def checkpoint_scratch(self) -> Path:
        return self.root / CHECKPOINT_SCRATCH

    @property
    def checkpoint_cache(self) -> Path:
        return self.root / CHECKPOINT_CACHE

    @property
    def heartbeat(self) -> Path:
        return self.root / HEARTBEAT

    @property
    def stacks(self) -> Path:
        return self.root / STACKS

    def stack_dump(self, launch_id: str, *, attempt: int, rank: int) -> Path:
        """Where a rank's stack dump goes when the watchdog asks for it."""
        return self.stacks / f"{launch_id}-attempt{attempt}-rank{rank}.txt"
