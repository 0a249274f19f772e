"""Capture and restore of every random generator a run uses (Python, numpy, torch CPU and CUDA).

Design note: the state is shared by two components that must not depend on each other: the trainer's
`state_dict()` and the checkpoint saver/resumer both call `rng_state()`/`set_rng_state()`, so the functions
live here, below both, rather than in `foundry.train`. Seeding and deterministic kernels stay with the
run's setup in `foundry.train.state`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["rng_state", "set_rng_state"]


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
