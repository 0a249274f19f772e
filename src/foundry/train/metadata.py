"""The self-describing run directory: `run.json` with the config, git revision, versions, device,
derived values.

Design note: everything needed to reproduce or compare a run sits beside its metrics, written once at
startup by rank 0 (Hydra's `.hydra/` holds the composed YAML; this adds what Hydra cannot know). Credentials
in the config (signed URLs, tokens, known credential keys) are masked in the file; the caller's config is not
changed.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from foundry.rundir import layout
from stackbase.secrets import redact_value

__all__ = ["git_info", "package_versions", "write_run_metadata"]

_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "numpy",
    "hydra-core",
    "omegaconf",
    "foundry-stack",
    "wandb",
)


def git_info(path: Path | None = None) -> dict[str, Any]:
    """`{"sha": ..., "dirty": bool}` of the repository containing `path` (empty when not a git checkout)."""
    cwd = str(path or Path(__file__).resolve().parent)
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"sha": sha, "dirty": bool(dirty)}


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that affect a run (absent ones are skipped)."""
    out = {"python": sys.version.split()[0]}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _device_info(device: torch.device) -> dict[str, Any]:
    info: dict[str, Any] = {"device": str(device), "platform": platform.platform()}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_count"] = torch.cuda.device_count()
    else:
        info["cpu_threads"] = torch.get_num_threads()
    return info


def write_run_metadata(run_dir: Path, *, config: Any, derived: dict[str, Any], device: torch.device) -> dict:
    """Writes `<run_dir>/run.json` and returns its content.

    Args:
        run_dir: The run directory (created if needed).
        config: The root config dataclass (or a dict); written with its credentials masked.
        derived: Derived quantities (tokens per step, steps, microbatches per step, ...).
        device: The training device.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    content = {
        "config": redact_value(config),
        "derived": redact_value(derived),
        "git": git_info(),
        "packages": package_versions(),
        "device": _device_info(device),
    }
    (run_dir / layout.RUN).write_text(json.dumps(content, indent=2, default=str))
    return content
