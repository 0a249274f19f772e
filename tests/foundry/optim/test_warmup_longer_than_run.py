"""A warmup longer than the run (short runs, sweeps, smoke tests with the default `t_warmup: 100ba`) is
accepted with one warning line, as Composer does: the LR is still ramping up when the run ends."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from foundry.optim import build_scheduler
from foundry.optim.schedulers import (
    ConstantWithWarmupConfig,
    CosineWithWarmupConfig,
    InvSqrtWithWarmupConfig,
    LinearDecayWithWarmupConfig,
    WarmupStableDecayConfig,
    build_lr_lambda,
)

CONFIGS = [
    ConstantWithWarmupConfig(t_warmup="100ba"),
    CosineWithWarmupConfig(t_warmup="100ba", alpha_f=0.1),
    LinearDecayWithWarmupConfig(t_warmup="100ba"),
    InvSqrtWithWarmupConfig(t_warmup="100ba", t_scale="10ba", t_cooldown="5ba"),
    WarmupStableDecayConfig(t_warmup="100ba", t_decay="0.2dur"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_a_20_step_run_with_a_100_step_warmup_warms_up_all_along(cfg, caplog):
    with caplog.at_level(logging.WARNING, logger="foundry.optim.schedulers"):
        fn = build_lr_lambda(cfg, max_steps=20)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    msg = warnings[0].getMessage()
    assert "scheduler.t_warmup='100ba'" in msg and "100 steps" in msg and "20 steps" in msg
    assert [fn(s) for s in range(21)] == pytest.approx([s / 100 for s in range(21)])


def test_the_scheduler_drives_the_optimizer_through_the_partial_warmup():
    param = nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=1.0)
    sched = build_scheduler(CosineWithWarmupConfig(t_warmup="100ba"), optimizer=opt, max_steps=20)
    for _ in range(20):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2)


def test_a_warmup_within_the_run_warns_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="foundry.optim.schedulers"):
        build_lr_lambda(CosineWithWarmupConfig(t_warmup="20ba"), max_steps=20)
        build_lr_lambda(CosineWithWarmupConfig(t_warmup="5ba"), max_steps=20)
    assert not caplog.records
