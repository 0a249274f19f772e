"""Every option of every config group composes and converts to typed dataclasses; bad keys fail early;
multirun summaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from foundry.config import TrainConfig, to_train_config
from foundry.data.quickstart import quickstart_tokenizer_path
from foundry.errors import ConfigError
from foundry.tasks import run_task
from foundry.tasks.summary import MultirunSummary

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
    # the tokenizer's own keyed folder in the quick-start cache (built there on first use, then never changed)
    assert obj.tokenizer.name == quickstart_tokenizer_path(
        obj.data.local, obj.data.corpus_mb, obj.data.vocab_size
    )
    assert obj.tokenizer.name.startswith(f"{obj.data.local}/tokenizer-")
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
        ("trainer.precision=fp4", "trainer.precision"),
        ("trainer.device_train_microbatch_size=0", "device_train_microbatch_size"),
        ("trainer.max_duration=12parsecs", "trainer.max_duration"),
        ("task=finetune", "task"),
        ("parallelism.strategy=zero3", "parallelism.strategy"),
    ],
)
def test_invalid_values_fail_before_anything_is_built(conf, override, needle):
    with pytest.raises(Exception) as info:
        to_train_config(_compose([override]))
    assert needle in str(info.value)


def test_missing_mandatory_value_names_the_key(conf):
    with pytest.raises(Exception, match="local"):
        to_train_config(_compose(["data=local-mds"]))


def test_c4_uses_the_neox_tokenizer_and_recipe_durations_parse(conf):
    obj = to_train_config(_compose(["experiment=mpt-125m-c4"]))
    assert obj.tokenizer.name == "EleutherAI/gpt-neox-20b"
    assert obj.trainer.max_duration == "4800ba"
    assert obj.trainer.global_train_batch_size == 256
    assert obj.optimizer.lr == pytest.approx(6e-4)


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("+modle=mpt-125m", ["unknown config key 'modle'", "did you mean 'model'? (e.g. model=mpt-125m)"]),
        ("+train_loader.name=finetuning", ["unknown config key 'train_loader'", "data.train_split"]),
        ("+model.d_modle=5", ["unknown config key 'model.d_modle'", "did you mean 'model.d_model'?"]),
        ("+trainer.max_duraton=5ba", ["'trainer.max_duraton'", "did you mean 'trainer.max_duration'?"]),
        ("+eval.icl_taks=[]", ["'eval.icl_taks'", "did you mean 'eval.icl_tasks'?"]),
        ("+experimnt=mpt-125m-c4", ["'experimnt'", "did you mean 'experiment'?"]),
    ],
)
def test_keys_added_with_plus_that_no_schema_declares_are_rejected(conf, override, needles):
    cfg = _compose([override])  # Hydra's `+` opens the struct, so composing accepts them...
    with pytest.raises(ConfigError) as info:
        to_train_config(cfg)  # ...and validation, before anything is written or built, rejects them
    assert all(n in str(info.value) for n in needles), str(info.value)


def test_variables_stay_a_free_namespace(conf):
    obj = to_train_config(_compose(["+variables.x=3", "+variables.nested.y=a"]))
    assert obj.variables == {"x": 3, "nested": {"y": "a"}}


def test_a_rejected_config_writes_nothing_to_the_run_dir(conf, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside a Hydra job run_task uses ./outputs/dev
    run_dir = tmp_path / "outputs" / "dev"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("running: job\n")
    for bad in (["task=finetune"], ["+modle=mpt-125m"], ["trainer.precision=fp4"]):
        with pytest.raises(ConfigError):
            run_task(_compose(bad))
        assert (run_dir / "config.yaml").read_text() == "running: job\n", bad
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml"]


def _job(tmp_path: Path, num: int, overrides: list[str], metrics: dict | None) -> JobReturn:
    out = tmp_path / "sweep" / str(num)
    out.mkdir(parents=True, exist_ok=True)
    ret = JobReturn(
        overrides=overrides, hydra_cfg=OmegaConf.create({"hydra": {"runtime": {"output_dir": str(out)}}})
    )
    if metrics is None:
        ret.status, ret.return_value = JobStatus.FAILED, ConfigError("task='x': choose one of | pretrain")
    else:
        (out / "final_metrics.json").write_text(json.dumps(metrics))
        ret.status, ret.return_value = JobStatus.COMPLETED, metrics["train/loss"]
    return ret


def test_multirun_summaries_of_sweeps_sharing_a_run_name_are_kept_and_failed_jobs_get_a_row(tmp_path, capsys):
    sweep = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path / "sweep")}}})
    first, second = MultirunSummary(), MultirunSummary()
    first.on_multirun_start(sweep)
    second.on_multirun_start(sweep)  # a second sweep with the same run_name (same sweep dir)
    first.on_job_end(sweep, _job(tmp_path, 0, ["optimizer.lr=0.1"], {"train/loss": 1.5}))
    first.on_job_end(sweep, _job(tmp_path, 1, ["optimizer.lr=0.2"], None))
    second.on_job_end(sweep, _job(tmp_path, 0, ["optimizer.lr=0.3"], {"train/loss": 2.5}))
    assert first.path != second.path and first.path.parent == second.path.parent
    text = first.path.read_text()  # written after every job, before the sweep ends
    assert "| optimizer.lr=0.1 | 1.5000 | - | ok |" in text
    assert "| optimizer.lr=0.2 | - | - | failed: ConfigError: task='x': choose one of / pretrain |" in text
    assert "optimizer.lr=0.3" in second.path.read_text() and "optimizer.lr=0.3" not in text
    first._print()  # what on_multirun_end, or the exit hook after a failed job, prints
    out = capsys.readouterr().out
    assert "multirun summary (2 jobs, 1 failed)" in out and "failed: ConfigError" in out
    second.on_multirun_end(sweep)
