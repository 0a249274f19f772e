"""`compose_run_name`: the run name `train.py` would use for some overrides, chosen here, once,
for a supervisor.

Design note: a supervisor that restarts `train.py` (`python -m foundry.launch`,
`python -m foundry.launch.k8s`) must pass every (re)start the same `run_name=`; composing the config as
`train.py` does gives the name it would generate (`foundry.run_name`, with the model option) and fails early
on the errors `train.py` would report. It lives apart from `foundry.run_name` because it imports the whole
config (`foundry.config` imports that).
"""

from __future__ import annotations

from pathlib import Path

from foundry.errors import ConfigError

__all__ = ["compose_run_name"]


def compose_run_name(overrides: list[str], conf_dir: Path) -> str:
    """Composes `train.yaml` in `conf_dir` as `train.py` would and returns its run_name (generated once, here,
    when the overrides name none). Unknown keys and bad values fail here, as in `train.py`.

    Raises:
        ConfigError: The overrides do not compose (the message `train.py` would print).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    from foundry.cli import user_message
    from foundry.config import register_configs

    register_configs()
    hydra_config = HydraConfig.instance()
    before = hydra_config.cfg
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides, return_hydra_config=True)
            # the model option goes into the name, as under train.py
            hydra_config.set_config(cfg)
            return str(cfg.run_name)
    except (CompactHydraException, OmegaConfBaseException) as err:
        # as train.py reports them
        raise ConfigError(user_message(err)) from err
    finally:
        # as Hydra's run_job leaves it: no trace of this compose
        hydra_config.cfg = before
