"""A Composer-shaped checkpoint (built here, as Composer 0.32 lays it out) becomes one of ours: weights, optimizer
state, schedule position, counters, RNG and data position; as `checkpoint.load_path` and through
`scripts/convert_checkpoint.py --from composer`. The real Composer file is tested in
`test_composer_reference.py` (llm-foundry's venv)."""

from __future__ import annotations

import copy
import datetime
import enum
import importlib.util
import os
import random
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foundry.checkpoint.config import CheckpointConfig
from foundry.checkpoint.resume import resolve_start
from foundry.checkpoint.state import load_full
from foundry.compat.composer import (
    as_foundry_start,
    is_composer_checkpoint,
    read_composer_checkpoint,
    to_foundry,
)
from foundry.errors import run_tool
from foundry.models import build_model_on
from foundry.models.registry import model_schema_from_dict
from foundry.optim.decoupled import DecoupledAdamW

REPO = Path(__file__).resolve().parents[3]
MODEL = {"d_model": 16, "n_heads": 2, "n_layers": 1, "max_seq_len": 8, "vocab_size": 64}
CONTENT = {  # llm-foundry's MPTConfig as Composer's integrations store it (trimmed to what varies)
    **MODEL,
    "_attn_implementation_autoset": True,
    "attention_bias": True,
    "attn_config": {"attn_impl": "triton", "kv_dim": None, "nope": False, "attn_logit_softcapping": None},
    "block_overrides": None,
    "expansion_ratio": 4,
    "fc_type": {"name": "torch"},
    "ffn_config": {"fc_type": {"name": "torch"}, "ffn_type": "mptmlp"},
    "head_dim": None,
    "init_device": "meta",
    "model_type": "mpt",
    "transformers_version": "4.51.3",
    "use_pad_tok_in_ffn": True,
}


def _model_and_optimizer() -> tuple[torch.nn.Module, DecoupledAdamW]:
    torch.manual_seed(0)
    model = build_model_on(model_schema_from_dict(MODEL), device="cpu")
    opt = DecoupledAdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    ids = torch.randint(0, 64, (2, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    return model, opt


def composer_state(model: torch.nn.Module, opt: DecoupledAdamW, *, timestamp: Any = None) -> dict[str, Any]:
    names = [n for n, _ in model.named_parameters()]
    by_param = {p: n for n, p in model.named_parameters()}
    group = {k: v for k, v in opt.param_groups[0].items() if k != "params"}
    group.update(
        maximize=False, capturable=False, differentiable=False, fused=None, decoupled_weight_decay=True
    )
    wct = datetime.timedelta(seconds=2, microseconds=5)
    ts = {"epoch": 0, "batch": 5, "sample": 10, "token": 80, "batch_in_epoch": 5, "sample_in_epoch": 10}
    return {
        "state": {
            "model": {f"model.{k}": v for k, v in model.state_dict().items()},
            "optimizers": {
                "DecoupledAdamW": {
                    "state": {f"model.{by_param[p]}": s for p, s in opt.state.items()},
                    "param_groups": [{**group, "params": [f"model.{n}" for n in names]}],
                }
            },
            "schedulers": {
                "LambdaLR": {"base_lrs": [1e-3], "last_epoch": 5, "_step_count": 6, "lr_lambdas": [None]}
            },
            "timestamp": timestamp if timestamp is not None else {"Timestamp": {**ts, "total_wct": wct}},
            "dataset_state": {
                "train": {"epoch": 0, "sample_in_epoch": 10, "num_canonical_nodes": 1, "shuffle_seed": 17},
                "eval": {},
            },
            "algorithms": [("GradientClipping", {"repr": "<GradientClipping>"})],
            "rank_zero_seed": 17,
            "integrations": {
                "huggingface": {
                    "model": {
                        "config": {
                            "class": "llmfoundry.models.mpt.modeling_mpt.MPTForCausalLM",
                            "content": copy.deepcopy(CONTENT),
                        }
                    }
                }
            },
            "metadata": {
                "world_size": 1,
                "train_dataloader_batch_size": 2,
                "torch_version": torch.__version__,
            },
        },
        "rng": [
            {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        ],
    }


@pytest.fixture(scope="module")
def composer_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module, DecoupledAdamW]:
    model, opt = _model_and_optimizer()
    path = tmp_path_factory.mktemp("composer") / "ep0-ba5-rank0.pt"
    torch.save(composer_state(model, opt), path)
    return path, model, opt


def test_composer_file_becomes_our_checkpoint(composer_file, tmp_path: Path) -> None:
    path, model, opt = composer_file
    assert is_composer_checkpoint(str(path))
    where, what = to_foundry(str(path), str(tmp_path / "ep0-ba5"))
    assert what == "step 5, epoch 0; model, DecoupledAdamW, scheduler, counters, RNG, data position"
    ours, _ = _model_and_optimizer()
    ours.zero_grad(set_to_none=True)  # as a trainer's model is when a checkpoint loads
    ours_opt = DecoupledAdamW(ours.parameters(), lr=0.5, weight_decay=0.0)
    ours_opt.param_groups[0]["name"] = "decay"
    out = load_full(where, ours, ours_opt, strict=True, allow_pickle=False, rank=0)
    for (name, a), b in zip(model.state_dict().items(), ours.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    for p, q in zip(model.parameters(), ours.parameters(), strict=True):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(opt.state[p][key], ours_opt.state[q][key])
    group = ours_opt.param_groups[0]
    assert (group["lr"], group["initial_lr"], group["weight_decay"]) == (1e-3, 1e-3, 1e-4)
    assert tuple(group["betas"]) == (0.9, 0.95)
    run = out["run"]
    assert run["scheduler"]["last_epoch"] == 4  # Composer's schedule lags one step behind its counter
    assert run["state"] == {"step": 5, "epoch": 0, "step_in_epoch": 5, "samples": 10, "tokens": 80}
    assert run["dataloader"]["sample_in_epoch"] == 10 and run["scaler"] is None
    assert out["rng"]["numpy"][0] == "MT19937" and isinstance(out["rng"]["numpy"][1], list)


def test_manifest_records_the_model_config_and_the_source(composer_file, tmp_path: Path) -> None:
    from foundry.checkpoint.layout import open_checkpoint

    path, _, _ = composer_file
    where, _ = to_foundry(str(path), str(tmp_path / "ck"))
    m = open_checkpoint(where, scratch=str(tmp_path / "s")).manifest
    assert (m.step, m.samples, m.tokens, m.format, m.weights_only) == (5, 10, 80, "full", False)
    assert m.model_config["d_model"] == 16 and m.model_config["attn_config"]["attn_impl"] == "torch"  # triton
    assert m.extra["global_train_batch_size"] == 2 and m.extra["composer"]["optimizer"] == "DecoupledAdamW"


def test_an_option_this_mpt_lacks_is_refused_by_name(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer()
    state = composer_state(model, opt)
    content = state["state"]["integrations"]["huggingface"]["model"]["config"]["content"]
    content["attn_config"] = {**content["attn_config"], "kv_dim": 8}
    torch.save(state, tmp_path / "c.pt")
    with pytest.raises(ValueError, match=r"model\.attn_config\.kv_dim=8: not implemented here"):
        read_composer_checkpoint(str(tmp_path / "c.pt"))


def _fake_composer_time() -> types.ModuleType:
    """Composer's `Time`/`Timestamp`/`TimeUnit` as pickle sees them (module `composer.core.time`)."""
    mod = types.ModuleType("composer.core.time")

    class TimeUnit(enum.Enum):
        BATCH = "ba"
        EPOCH = "ep"

    class Time:
        def __init__(self, value: int, unit: TimeUnit) -> None:
            self._value, self._unit = value, unit

    class Timestamp:
        def __init__(self, **counts: int) -> None:
            for key, value in counts.items():
                setattr(self, f"_{key}", Time(value, TimeUnit.EPOCH if key == "epoch" else TimeUnit.BATCH))
            self._total_wct = datetime.timedelta(seconds=1)

    for cls in (TimeUnit, Time, Timestamp):
        cls.__module__, cls.__qualname__ = mod.__name__, cls.__name__
        setattr(mod, cls.__name__, cls)
    return mod


def test_pickled_composer_time_objects_become_numbers(monkeypatch, tmp_path: Path) -> None:
    mod = _fake_composer_time()
    for name in ("composer", "composer.core"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "composer.core.time", mod)
    model, opt = _model_and_optimizer()
    stamp = mod.Timestamp(epoch=1, batch=7, batch_in_epoch=2, sample=14, token=112)
    torch.save(composer_state(model, opt, timestamp=stamp), tmp_path / "c.pt")
    monkeypatch.delitem(sys.modules, "composer.core.time")  # reading needs no Composer
    ckpt = read_composer_checkpoint(str(tmp_path / "c.pt"))
    assert ckpt.counters == {"step": 7, "epoch": 1, "step_in_epoch": 2, "samples": 14, "tokens": 112}


def test_load_path_takes_a_composer_file(composer_file, tmp_path: Path) -> None:
    path, _, _ = composer_file
    for weights_only in (False, True):
        cfg = CheckpointConfig(load_path=str(path), load_weights_only=weights_only)
        start = resolve_start(
            cfg,
            run_name="r",
            scratch=str(tmp_path / f"scratch{weights_only}"),
            adapt_load_path=as_foundry_start,
        )
        assert start is not None and start.source == "load_path" and start.weights_only == weights_only
        assert start.info.manifest.step == 5 and start.info.manifest.weights_only == weights_only


def _script() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "convert_script", REPO / "scripts" / "convert_checkpoint.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_convert_script_from_composer(composer_file, tmp_path: Path, capsys) -> None:
    path, _, _ = composer_file
    mod = _script()
    assert run_tool(lambda: mod.main(["--from", "composer", str(path), str(tmp_path / "ours")])) == 0
    assert "wrote a full checkpoint" in capsys.readouterr().out
    assert (tmp_path / "ours" / "manifest.json").is_file()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_convert_script_refuses_a_hostile_file_in_one_line(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    marker = tmp_path / "pwned"
    torch.save({"state": {"model": {}, "timestamp": _Payload(marker)}}, tmp_path / "ep0-ba1-rank0.pt")
    mod = _script()
    code = run_tool(
        lambda: mod.main(["--from", "composer", str(tmp_path / "ep0-ba1-rank0.pt"), str(tmp_path / "o")])
    )
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ") and "refused to unpickle the global posix.system" in err
    assert not marker.exists() and not (tmp_path / "o").exists()


def test_docs_mapping_table_is_the_codes() -> None:
    from foundry.compat.composer.mapping import MAPPING

    table = ["| Composer checkpoint | Here |", "|---|---|", *(f"| {a} | {b} |" for a, b in MAPPING)]
    page = (REPO / "docs" / "guides" / "from-llm-foundry.md").read_text()
    section = page[page.index("## Composer checkpoints") :]
    assert "\n".join(table) in section.split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [  # inputs the fuzz suite (tests/fuzz/test_fuzz_composer.py, issue 39) found ending in AttributeError
        ("integrations", [[], {}], None),  # not a dict: no model config, not a crash
        ("dataset_state", [1, "null"], None),
        ("param_groups", [[{}]], r"cannot read its training state \(AttributeError"),
        ("attn_config", "true", r"content is not an MPT config \(AttributeError"),
    ],
)
def test_state_parts_of_the_wrong_type_are_one_error(tmp_path: Path, key, value, message) -> None:
    from tests.fuzz.hostile import replace_under

    model, opt = _model_and_optimizer()
    path = tmp_path / "ep0-ba5-rank0.pt"
    torch.save(replace_under(composer_state(model, opt), key, value), path)
    if message is None:
        assert read_composer_checkpoint(str(path)).model
        return
    with pytest.raises(ValueError, match=message) as err:
        read_composer_checkpoint(str(path))
    assert "ep0-ba5-rank0.pt" in str(err.value)
