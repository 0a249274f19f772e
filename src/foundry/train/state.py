"""Training counters, seeding and RNG capture: the run state the next issue's checkpoints will save.

Design note: every counter the loop advances lives in one `TrainState` dataclass, and every random
generator is captured by `rng_state()`; together with the model/optimizer/scheduler/dataloader
`state_dict()`s (collected by `Trainer.state_dict`) that is the whole resumable state, with no hidden
counters inside callbacks or loggers.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["TrainState", "rng_state", "seed_all", "set_deterministic", "set_rng_state"]


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


def _numpy_state() -> tuple[str, list[int], int, int, float]:
    """numpy's legacy global state with plain ints (so `torch.load(weights_only=True)` accepts it)."""
    name, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return str(name), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)


def rng_state() -> dict[str, Any]:
    """The state of every random generator the run uses."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": _numpy_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what `rng_state` captured."""
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
