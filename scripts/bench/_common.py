"""Shared helpers for the benchmark scripts (run as ``python scripts/bench/<name>.py``)."""

from __future__ import annotations

import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    """The facts a benchmark line must carry to be comparable: host, CPU, cores, library versions."""
    import numpy as np
    import torch

    info: dict[str, Any] = {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info
