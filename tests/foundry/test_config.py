"""Every option of every config group composes and converts to typed dataclasses; bad keys fail early."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from foundry.config import TrainConfig, register_configs, to_train_config

CONF = Path(__file__).resolve().parents[2] / "conf"
GROUPS = ["model", "tokenizer", "data", "optimizer", "scheduler", "trainer", "parallelism", "checkpoint",
          "logger", "callbacks", "experiment", "debug", "sweep"]  # fmt: skip
# Options that need values a user must give (the `???` of local datasets).
EXTRA = {"data=local-mds": ["data.local=/tmp/mds"]}


def _options() -> list[str]:
    out = []
    for group in GROUPS:
        for path in sorted((CONF / group).glob("*.yaml")):
            out.append(f"{group}={path.stem}")
    return out


@pytest.fixture(scope="module")
def conf():
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        yield


def _compose(overrides: list[str]):
    return compose("train", overrides=overrides)


@pytest.mark.parametrize("option", _options())
def test_every_group_option_composes_to_dataclasses(conf, option):
    cfg = _compose([option, *EXTRA.get(option, [])])
    obj = to_train_config(cfg)
    assert isinstance(obj, TrainConfig)
    group = option.split("=")[0]
    if group in ("model", "data", "optimizer", "scheduler", "trainer", "logger", "callbacks"):
        assert not OmegaConf.is_config(getattr(obj, group))


def test_defaults_are_the_offline_quickstart(conf):
    obj = to_train_config(_compose([]))
    assert obj.task == "pretrain"
    assert type(obj.data).__name__ == "QuickstartDataConfig"
    assert obj.tokenizer.name == f"{obj.data.local}/tokenizer.json"
    assert obj.model.d_model == 64


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("model.d_modle=5", "model.d_modle"),
        ("trainer.max_duraton=5ba", "trainer.max_duraton"),
        ("optimizer.lr=abc", "optimizer.lr"),
        ("trainer.global_train_batch_size=big", "global_train_batch_size"),
        ("data=nope", "data"),
    ],
)
def test_bad_keys_and_types_fail_at_compose_naming_the_key(conf, override, needle):
    with pytest.raises(ConfigCompositionException) as info:
        _compose([override])
    text = str(info.value) + str(info.value.__cause__)
    assert needle in text


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("trainer.precision=fp8", "trainer.precision"),
        ("trainer.device_train_microbatch_size=0", "device_train_microbatch_size"),
        ("trainer.max_duration=12parsecs", "trainer.max_duration"),
        ("task=finetune", "task"),
        ("parallelism.strategy=zero3", "parallelism.strategy"),
    ],
)
def test_invalid_values_fail_before_anything_is_built(conf, override, needle):
    with pytest.raises(Exception) as info:  # noqa: B017 - OmegaConf wraps the ValueError
        to_train_config(_compose([override]))
    assert needle in str(info.value)


def test_missing_mandatory_value_names_the_key(conf):
    with pytest.raises(Exception, match="local"):  # noqa: B017
        to_train_config(_compose(["data=local-mds"]))


def test_c4_uses_the_neox_tokenizer_and_recipe_durations_parse(conf):
    obj = to_train_config(_compose(["experiment=mpt-125m-c4"]))
    assert obj.tokenizer.name == "EleutherAI/gpt-neox-20b"
    assert obj.trainer.max_duration == "4800ba"
    assert obj.trainer.global_train_batch_size == 256
    assert obj.optimizer.lr == pytest.approx(6e-4)
