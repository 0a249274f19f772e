"""The one entry point: `python train.py [group=option ...] [key=value ...]` (Hydra; `-m` for sweeps).

`python train.py llmfoundry=PATH [overrides]` runs an llm-foundry training YAML: the argument is replaced by its
translation (`foundry.compat.llmfoundry`; ignored and refused keys are listed on stderr) and the other overrides
apply after it.

A mistake in the command line or the config (unknown key, bad value, missing data or tokenizer) prints
`error: <message>` and exits 2; `HYDRA_FULL_ERROR=1` adds the traceback (see `foundry.cli`). A single run's
failure is raised after Hydra returns, so Hydra's "Error executing job with overrides" line (which repeats the
whole command) does not precede every refusal, nor the error of a rank stopped by its peer's failure; in a
sweep (`-m`) that line stays: it names the job that failed.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))
from stackbase.venv import use_project_venv

use_project_venv(__file__)  # a fresh shell's `python` lacks the packages: run in the checkout's .venv
from foundry.quick_check import exit_on_mistake

# typos, unknown options and mistyped numbers are answered before torch and transformers load
exit_on_mistake(sys.argv[1:], conf=Path(__file__).resolve().parent / "conf")

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from foundry.cli import run_cli
from foundry.compat.llmfoundry import expand_train_args
from foundry.config import register_configs
from foundry.tasks import run_task

register_configs()


def cli() -> float | None:
    sys.argv[1:] = expand_train_args(sys.argv[1:])  # `llmfoundry=PATH` -> that YAML's translated overrides
    failed: list[Exception] = []

    @hydra.main(version_base="1.3", config_path="conf", config_name="train")
    def main(cfg: DictConfig) -> float | None:
        try:
            return run_task(cfg)
        except Exception as e:
            if HydraConfig.get().mode == RunMode.MULTIRUN:
                raise
            failed.append(e)
            return None

    result = main()
    if failed:
        raise failed[0]
    return result


if __name__ == "__main__":
    sys.exit(run_cli(cli))
