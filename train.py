"""The one entry point: `python train.py [group=option ...] [key=value ...]` (Hydra; `-m` for sweeps).

`python train.py llmfoundry=PATH [overrides]` runs an llm-foundry training YAML: the argument is replaced by its
translation (`foundry.compat.llmfoundry`; ignored and refused keys are listed on stderr) and the other overrides
apply after it.

A mistake in the command line or the config (unknown key, bad value, missing data or tokenizer) prints
`error: <message>` and exits 2; `HYDRA_FULL_ERROR=1` adds the traceback (see `foundry.cli`).
"""

import sys

import hydra
from omegaconf import DictConfig

from foundry.cli import run_cli
from foundry.compat.llmfoundry import expand_train_args
from foundry.config import register_configs
from foundry.tasks import run_task

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run_task(cfg)


def cli() -> float | None:
    sys.argv[1:] = expand_train_args(sys.argv[1:])  # `llmfoundry=PATH` -> that YAML's translated overrides
    return main()


if __name__ == "__main__":
    sys.exit(run_cli(cli))
