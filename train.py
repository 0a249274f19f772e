"""The one entry point: `python train.py [group=option ...] [key=value ...]` (Hydra; `-m` for sweeps)."""

import hydra
from omegaconf import DictConfig

from foundry.config import register_configs, run_task

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    return run_task(cfg)


if __name__ == "__main__":
    main()
