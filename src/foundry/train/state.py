"""Training counters and seeding: the run state a checkpoint saves, and how a run starts reproducibly.

Design note: every counter the loop advances lives in one `TrainState` dataclass, and every random
generator is captured by `foundry.rng.rng_state()` (a module of its own because the checkpoint package
restores it too and must not import the trainer); together with the model/optimizer/scheduler/dataloader
`state_dict()`s (collected by `Trainer.state_dict`) that is the whole resumable state, with no hidden
counters inside callbacks or loggers.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass

import numpy as np
import torch

__all__ = ["TrainState", "seed_all", "set_deterministic"]


@dataclass
class TrainState:
    """Progress counters (all per run, over all ranks)."""

    step: int = 0
    """Optimizer steps taken."""
    epoch: int = 0
    """Completed passes over the train split."""
    step_in_epoch: int = 0
    """Optimizer steps taken in the current epoch."""
    samples: int = 0
    """Training samples consumed."""
    tokens: int = 0
    """Training tokens consumed (B x S, padding included)."""
    microbatch_size: int = 0
    """The current microbatch size (remembered after `auto` lowers it)."""

    def state_dict(self) -> dict[str, int]:
        """The counters as a plain dict."""
        return asdict(self)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Restores the counters."""
        for key, value in state.items():
            setattr(self, key, int(value))


def seed_all(seed: int) -> None:
    """Seeds Python's `random`, numpy's global generator and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def set_deterministic() -> None:
    """Deterministic kernels only (errors on ops without one), as Composer's `deterministic_mode`."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
