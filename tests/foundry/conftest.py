"""Fixtures for the foundry tests: Hydra initialized on the repository's `conf/` (the structured configs
registered), for the tests that compose `train` configs; a data cache for a module's `train.py` runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import initialize_config_dir

from foundry.config import register_configs

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(scope="module")
def conf() -> Iterator[None]:
    """Inside it `hydra.compose("train", overrides=...)` composes against `conf/`."""
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        yield


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `FOUNDRY_CACHE` folder shared by one test module's `train.py` runs (the quick-start data is made once).

    It stands in for pytest's own `cache` fixture (the cross-session store) under tests/foundry, which no
    foundry test uses."""
    return tmp_path_factory.mktemp("foundry-cache")
