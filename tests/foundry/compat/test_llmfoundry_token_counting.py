"""The llm-foundry translator counts tokens as Composer does (`trainer.token_counting=non_pad`), except for a
`tok` max_duration, which converts to steps from batch x row length (`padded`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.compat.llmfoundry import translate_file
from foundry.compat.llmfoundry.render import overrides
from tests.foundry.compat.llmfoundry_yaml import MINIMAL, compose_train, write_yaml


@pytest.mark.parametrize(
    ("duration", "counting"), [("20ba", "non_pad"), ("2ep", "non_pad"), ("1e6tok", "padded")]
)
def test_translated_run_counts_tokens_like_composer(
    conf, tmp_path: Path, duration: str, counting: str
) -> None:
    path = write_yaml(tmp_path, MINIMAL.replace("max_duration: 20ba", f"max_duration: {duration}"))
    cfg = compose_train(overrides(translate_file(path)))
    assert cfg.trainer.token_counting == counting
