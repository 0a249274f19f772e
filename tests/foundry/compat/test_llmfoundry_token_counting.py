"""The llm-foundry translator counts tokens as Composer does (`trainer.token_counting=non_pad`), except for a
`tok` max_duration, which converts to steps from batch x row length (`padded`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from foundry.compat.llmfoundry import translate_file
from foundry.compat.llmfoundry.render import overrides
from foundry.config import register_configs, to_train_config
from tests.foundry.compat.test_llmfoundry_translate import MINIMAL

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("duration", "counting"), [("20ba", "non_pad"), ("2ep", "non_pad"), ("1e6tok", "padded")]
)
def test_translated_run_counts_tokens_like_composer(tmp_path: Path, duration: str, counting: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(MINIMAL.replace("max_duration: 20ba", f"max_duration: {duration}"))
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(REPO / "conf")):
        cfg = to_train_config(compose("train", overrides=overrides(translate_file(path))))
    assert cfg.trainer.token_counting == counting
