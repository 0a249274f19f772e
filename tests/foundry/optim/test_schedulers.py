"""LR schedules against independent closed forms (hypothesis), shape properties, LambdaLR wiring, conf composition."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from torch import nn

from foundry.optim import (
    ConstantWithWarmupConfig,
    CosineWithWarmupConfig,
    DecoupledAdamW,
    InvSqrtWithWarmupConfig,
    LinearDecayWithWarmupConfig,
    SchedulerConfig,
    WarmupStableDecayConfig,
    build_lr_lambda,
    build_scheduler,
    register_optim_configs,
)
from foundry.optim.schedulers import (
    constant_with_warmup,
    cosine_with_warmup,
    inv_sqrt_with_warmup,
    linear_decay_with_warmup,
    warmup_stable_decay,
)

CONF = Path(__file__).resolve().parents[3] / "conf"
ALPHA = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
NO_DEADLINE = settings(deadline=None)  # up to ~5k python calls per example; keep a loaded CI box from flaking


@st.composite
def warmup_and_max(draw: st.DrawFn) -> tuple[int, int]:
    t_max = draw(st.integers(min_value=1, max_value=5000))
    t_warmup = draw(st.integers(min_value=0, max_value=t_max))
    return t_warmup, t_max


def _steps(t_max: int) -> np.ndarray:
    return np.arange(0, t_max + 3)  # a little past the end, where the schedule must hold its final value


def _warmup_ref(t: np.ndarray, t_warmup: int, peak: float) -> np.ndarray:
    return peak * t / max(t_warmup, 1)


def _check(fn, ref: np.ndarray, steps: np.ndarray, **kw) -> np.ndarray:
    got = np.array([fn(int(s), **kw) for s in steps])
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
    return got


def _assert_monotone(values: np.ndarray, *, increasing: bool) -> None:
    diffs = np.diff(values)
    assert (diffs >= -1e-12).all() if increasing else (diffs <= 1e-12).all()


# ------------------------------------------------------------------------------------------------ closed forms
@NO_DEADLINE
@given(wm=warmup_and_max(), alpha=ALPHA)
def test_constant_with_warmup(wm, alpha):
    t_warmup, t_max = wm
    t = _steps(t_max)
    ref = np.where(t < t_warmup, _warmup_ref(t, t_warmup, alpha), alpha)
    got = _check(constant_with_warmup, ref, t, t_warmup=t_warmup, alpha=alpha)
    assert got[0] == (0.0 if t_warmup > 0 else alpha)
    _assert_monotone(got, increasing=True)


@NO_DEADLINE
@given(wm=warmup_and_max(), alpha_i=ALPHA, alpha_f=ALPHA)
def test_linear_decay_with_warmup(wm, alpha_i, alpha_f):
    t_warmup, t_max = wm
    t = _steps(t_max)
    # Piecewise-linear through the knots (0, 0) -> (t_warmup, alpha_i) -> (t_max, alpha_f), then flat.
    if t_warmup > 0:
        ref = np.interp(t, [0, t_warmup, t_max], [0.0, alpha_i, alpha_f if t_max > t_warmup else alpha_i])
    else:
        ref = np.interp(t, [0, t_max], [alpha_i, alpha_f])
    got = _check(
        linear_decay_with_warmup, ref, t, t_warmup=t_warmup, t_max=t_max, alpha_i=alpha_i, alpha_f=alpha_f
    )
    _assert_monotone(got[: t_warmup + 1], increasing=True)
    _assert_monotone(got[t_warmup:], increasing=alpha_f >= alpha_i)


@NO_DEADLINE
@given(wm=warmup_and_max(), alpha_f=ALPHA)
def test_cosine_with_warmup(wm, alpha_f):
    t_warmup, t_max = wm
    t = _steps(t_max)
    tau = np.clip((t - t_warmup) / max(t_max - t_warmup, 1), 0, 1) if t_max > t_warmup else np.zeros(len(t))
    after = alpha_f + (1 - alpha_f) * np.cos(np.pi * tau / 2) ** 2  # (1 + cos x)/2 == cos^2(x/2)
    ref = np.where(t < t_warmup, _warmup_ref(t, t_warmup, 1.0), after)
    got = _check(cosine_with_warmup, ref, t, t_warmup=t_warmup, t_max=t_max, alpha_f=alpha_f)
    _assert_monotone(got[: t_warmup + 1], increasing=True)
    _assert_monotone(got[t_warmup:], increasing=False)
    if t_max > t_warmup:
        assert got[t_warmup] == pytest.approx(1.0) and got[-1] == pytest.approx(alpha_f)


@NO_DEADLINE
@given(
    wm=warmup_and_max(),
    t_scale=st.integers(min_value=1, max_value=2000),
    cooldown_frac=st.floats(min_value=0, max_value=1),
    alphas=st.tuples(ALPHA, ALPHA).map(sorted),
)
def test_inv_sqrt_with_warmup(wm, t_scale, cooldown_frac, alphas):
    t_warmup, t_max = wm
    alpha_f_cooldown, alpha_f_decay = alphas
    t_cooldown = int(cooldown_frac * (t_max - t_warmup))
    t = _steps(t_max)
    decay = alpha_f_decay + (1 - alpha_f_decay) * np.sqrt(t_scale / (t - t_warmup + t_scale).clip(min=1e-9))
    start = t_max - t_cooldown
    if t_cooldown > 0:
        at_start = alpha_f_decay + (1 - alpha_f_decay) * math.sqrt(t_scale / (start - t_warmup + t_scale))
        cool = np.interp(t, [start, t_max], [at_start, alpha_f_cooldown])
        after = np.where(t < start, decay, cool)
    else:
        after = decay
    ref = np.where(t < t_warmup, _warmup_ref(t, t_warmup, 1.0), after)
    kw = {"t_warmup": t_warmup, "t_scale": t_scale, "t_cooldown": t_cooldown, "t_max": t_max}
    got = _check(
        inv_sqrt_with_warmup, ref, t, alpha_f_decay=alpha_f_decay, alpha_f_cooldown=alpha_f_cooldown, **kw
    )
    _assert_monotone(got[t_warmup:], increasing=False)
    if t_cooldown > 0:
        assert got[t_max] == pytest.approx(alpha_f_cooldown)


@NO_DEADLINE
@given(
    wm=warmup_and_max(),
    decay_frac=st.floats(min_value=0, max_value=1),
    alpha_f=ALPHA,
    shape=st.sampled_from(["linear", "cosine", "1-sqrt"]),
)
def test_warmup_stable_decay(wm, decay_frac, alpha_f, shape):
    t_warmup, t_max = wm
    t_decay = int(decay_frac * (t_max - t_warmup))
    t = _steps(t_max)
    start = t_max - t_decay
    tau = np.clip((t - start) / max(t_decay, 1), 0, 1)
    falloff = {"linear": 1 - tau, "cosine": np.cos(np.pi * tau / 2) ** 2, "1-sqrt": 1 - np.sqrt(tau)}[shape]
    after = alpha_f + (1 - alpha_f) * falloff if t_decay > 0 else np.where(t < t_max, 1.0, alpha_f)
    ref = np.where(t < t_warmup, _warmup_ref(t, t_warmup, 1.0), np.where(t < start, 1.0, after))
    kw = {"t_warmup": t_warmup, "t_decay": t_decay, "t_max": t_max}
    got = _check(warmup_stable_decay, ref, t, alpha_f=alpha_f, decay_shape=shape, **kw)
    _assert_monotone(got[t_warmup:], increasing=False)
    assert got[t_max] == pytest.approx(alpha_f)
    assert (got[t_warmup:start] == 1.0).all()


def test_warmup_starts_at_zero_and_is_linear():
    assert [cosine_with_warmup(s, t_warmup=4, t_max=10) for s in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert [linear_decay_with_warmup(s, t_warmup=2, t_max=4, alpha_i=0.5) for s in range(3)] == [
        0.0,
        0.25,
        0.5,
    ]


# ------------------------------------------------------------------------------------- durations -> steps
def test_build_lr_lambda_converts_durations():
    cfg = CosineWithWarmupConfig(t_warmup="0.1dur", alpha_f=0.1)
    fn = build_lr_lambda(cfg, max_steps=1000)
    assert fn.keywords == {"t_warmup": 100, "t_max": 1000, "alpha_f": 0.1}
    cfg = LinearDecayWithWarmupConfig(t_warmup="1048576tok", t_max="2ep")
    fn = build_lr_lambda(cfg, max_steps=400, steps_per_epoch=200, tokens_per_step=8 * 1024)
    assert fn.keywords["t_warmup"] == 128 and fn.keywords["t_max"] == 400  # mixed units are fine here
    cfg = WarmupStableDecayConfig(t_warmup="64sp", t_decay="0.25dur")
    assert build_lr_lambda(cfg, max_steps=100, samples_per_step=16).keywords["t_decay"] == 25


def test_scale_schedule_ratio():
    cfg = CosineWithWarmupConfig(t_warmup="100ba", t_max="1000ba")
    fn = build_lr_lambda(cfg, max_steps=500, scale_schedule_ratio=0.5)
    assert (fn.keywords["t_warmup"], fn.keywords["t_max"]) == (100, 500)  # warmup unscaled by default
    cfg = CosineWithWarmupConfig(t_warmup="100ba", t_max="1000ba", scale_warmup=True)
    fn = build_lr_lambda(cfg, max_steps=500, scale_schedule_ratio=0.5)
    assert (fn.keywords["t_warmup"], fn.keywords["t_max"]) == (50, 500)
    fn = build_lr_lambda(CosineWithWarmupConfig(t_warmup="0.1dur"), max_steps=500, scale_schedule_ratio=0.5)
    assert fn.keywords["t_warmup"] == 50  # dur is a fraction of the already-scaled run


@pytest.mark.parametrize(
    "cfg",
    [
        ConstantWithWarmupConfig(t_warmup="10ba", alpha=0.5),
        CosineWithWarmupConfig(t_warmup="10ba", alpha_f=0.1),
        LinearDecayWithWarmupConfig(t_warmup="0.1dur", alpha_i=0.9, alpha_f=0.2),
        InvSqrtWithWarmupConfig(t_warmup="10ba", t_scale="20ba", t_cooldown="30ba", alpha_f_decay=0.1),
        WarmupStableDecayConfig(t_warmup="10ba", t_decay="0.3dur", decay_shape="cosine"),
    ],
    ids=lambda c: type(c).__name__,
)
def test_lambda_lr_applies_multiplier_per_optimizer_step(cfg):
    base_lr, max_steps = 3e-3, 100
    param = nn.Parameter(torch.zeros(2))
    opt = DecoupledAdamW([param], lr=base_lr, weight_decay=0.0)
    sched = build_scheduler(cfg, optimizer=opt, max_steps=max_steps)
    fn = build_lr_lambda(cfg, max_steps=max_steps)
    seen = []
    for _ in range(max_steps):
        seen.append(opt.param_groups[0]["lr"])  # the lr this optimizer step uses
        param.grad = torch.ones(2)
        opt.step()
        sched.step()
    assert seen == pytest.approx([base_lr * fn(k) for k in range(max_steps)], rel=1e-12, abs=1e-15)
    assert opt.param_groups[0]["initial_lr"] == base_lr  # untouched: decoupled decay follows the multiplier

    # Resume: a fresh scheduler loaded from the state dict continues the same sequence.
    state = sched.state_dict()
    opt2 = DecoupledAdamW([nn.Parameter(torch.zeros(2))], lr=base_lr, weight_decay=0.0)
    sched2 = build_scheduler(cfg, optimizer=opt2, max_steps=max_steps)
    sched2.load_state_dict(state)
    assert sched2.get_last_lr() == sched.get_last_lr()


# ------------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("cfg", "facts", "fragment"),
    [
        (CosineWithWarmupConfig(t_warmup="0.5dur", t_max="50ba"), {"max_steps": 100}, "scheduler.t_max="),
        (CosineWithWarmupConfig(t_warmup="1ep"), {"max_steps": 100}, "scheduler.t_warmup.*steps_per_epoch"),
        (LinearDecayWithWarmupConfig(t_warmup="10tok"), {"max_steps": 100}, "tokens_per_step"),
        (
            InvSqrtWithWarmupConfig(t_warmup="10ba", t_scale="0ba", t_cooldown="0ba"),
            {"max_steps": 100},
            "scheduler.t_scale",
        ),
        (
            InvSqrtWithWarmupConfig(t_warmup="50ba", t_scale="10ba", t_cooldown="60ba"),
            {"max_steps": 100},
            "scheduler.t_cooldown",
        ),
        (
            WarmupStableDecayConfig(t_warmup="0.5dur", t_decay="0.6dur"),
            {"max_steps": 100},
            "scheduler.t_decay",
        ),
    ],
)
def test_inconsistent_times_name_the_field(cfg, facts, fragment):
    with pytest.raises(ValueError, match=fragment):
        build_lr_lambda(cfg, **facts)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: CosineWithWarmupConfig(t_warmup="100 steps"), "scheduler.t_warmup"),
        (lambda: CosineWithWarmupConfig(t_warmup="1ba", t_max="1.5ep"), "scheduler.t_max"),
        (lambda: CosineWithWarmupConfig(t_warmup="1ba", name="linear_decay_with_warmup"), "scheduler.name"),
        (
            lambda: InvSqrtWithWarmupConfig(t_warmup="0.1dur", t_scale="1ba", t_cooldown="1ba"),
            "t_warmup.*'dur'",
        ),
        (
            lambda: InvSqrtWithWarmupConfig(t_warmup="1ba", t_scale="0.1dur", t_cooldown="1ba"),
            "t_scale.*'dur'",
        ),
        (
            lambda: InvSqrtWithWarmupConfig(
                t_warmup="1ba", t_scale="1ba", t_cooldown="1ba", alpha_f_cooldown=0.5
            ),
            "alpha_f_decay",
        ),
        (lambda: WarmupStableDecayConfig(t_warmup="1ba", decay_shape="exp"), "scheduler.decay_shape"),
        (lambda: WarmupStableDecayConfig(t_warmup="1ba", t_decay="-1ba"), "scheduler.t_decay"),
    ],
)
def test_schema_validation_names_the_field(make, fragment):
    with pytest.raises(ValueError, match=fragment):
        make()


# ------------------------------------------------------------------------------------------ conf composition
@pytest.fixture
def hydra_conf():
    register_optim_configs(ConfigStore.instance())
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


OPTION_FILES = sorted(p.stem for p in (CONF / "scheduler").glob("*.yaml"))


def test_option_files_exist():
    assert OPTION_FILES == ["constant-warmup", "cosine-warmup", "inv-sqrt-warmup", "linear-warmup", "wsd"]


@pytest.mark.parametrize("option", OPTION_FILES)
def test_conf_scheduler_composes_and_builds(hydra_conf, option):
    obj = OmegaConf.to_object(compose(overrides=[f"+scheduler={option}"]).scheduler)
    assert isinstance(obj, SchedulerConfig)
    fn = build_lr_lambda(obj, max_steps=10_000)
    values = [fn(s) for s in range(0, 10_001, 50)]
    assert values[0] == 0.0 and max(values) == pytest.approx(1.0)


def test_cosine_warmup_conf_has_mpt_defaults(hydra_conf):
    obj = OmegaConf.to_object(compose(overrides=["+scheduler=cosine-warmup"]).scheduler)
    assert obj == CosineWithWarmupConfig(t_warmup="100ba", alpha_f=0.1, t_max="1dur")


def test_conf_scheduler_typo_fails_naming_key(hydra_conf):
    with pytest.raises(ConfigCompositionException) as info:
        compose(overrides=["+scheduler=cosine-warmup", "scheduler.alpha_ff=0.1"])
    assert "alpha_ff" in str(info.value) + str(info.value.__cause__)


def test_conf_scheduler_bare_int_warmup_is_steps(hydra_conf):
    obj = OmegaConf.to_object(
        compose(overrides=["+scheduler=linear-warmup", "scheduler.t_warmup=50"]).scheduler
    )
    assert build_lr_lambda(obj, max_steps=1000).keywords["t_warmup"] == 50


@settings(max_examples=50)
@given(max_steps=st.integers(min_value=1, max_value=10**6), frac=st.floats(min_value=0, max_value=1))
def test_dur_warmup_never_exceeds_run(max_steps, frac):
    fn = build_lr_lambda(CosineWithWarmupConfig(t_warmup=f"{frac!r}dur"), max_steps=max_steps)
    assert 0 <= fn.keywords["t_warmup"] <= max_steps
