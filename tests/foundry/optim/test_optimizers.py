"""Optimizers against reference formulas, param groups, state_dict round trips, and conf/optimizer composition."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from torch import nn

from foundry.optim import (
    AdamWConfig,
    DecoupledAdamW,
    DecoupledAdamWConfig,
    DecoupledLionW,
    DecoupledLionWConfig,
    OptimizerConfig,
    ParamGroupConfig,
    build_optimizer,
    build_param_groups,
    register_optim_configs,
)

CONF = Path(__file__).resolve().parents[3] / "conf"
LRS = [1e-2, 5e-3, 2e-2, 0.0, 1e-3, 7e-3]  # a changing (schedule-like) lr, including a zero


class RMSNorm(nn.Module):
    """A norm that is not an nn.LayerNorm: detected by its class name."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Tiny(nn.Module):
    def __init__(self, vocab: int = 11, d: int = 8) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, d)
        self.norm_f = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm_f(self.fc(self.ln(self.wte(ids)))))


def _fake_grads(params: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + step)
    return [torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype) for p in params]


def _ref_decoupled_adamw(p, grads, lrs, *, initial_lr, betas, eps, wd, amsgrad=False):
    """Composer's rule written out: decay by (lr/initial_lr)*wd, then bias-corrected Adam."""
    b1, b2 = betas
    m, v, vmax = torch.zeros_like(p), torch.zeros_like(p), torch.zeros_like(p)
    p = p.clone()
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        p = p * (1 - lr / initial_lr * wd)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vmax = torch.maximum(vmax, v)
        m_hat = m / (1 - b1**t)
        v_hat = (vmax if amsgrad else v) / (1 - b2**t)
        p = p - lr * m_hat / (v_hat.sqrt() + eps)
    return p


def _ref_decoupled_lionw(p, grads, lrs, *, initial_lr, betas, wd):
    """llm-foundry's rule: decay, p -= lr * sign(b1*m + (1-b1)*g), then m = b2*m + (1-b2)*g."""
    b1, b2 = betas
    m = torch.zeros_like(p)
    p = p.clone()
    for g, lr in zip(grads, lrs):
        p = p * (1 - lr / initial_lr * wd)
        p = p - lr * torch.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
    return p


def _run(opt: torch.optim.Optimizer, params: list[torch.Tensor], lrs: list[float], start: int = 0) -> None:
    for i, lr in enumerate(lrs):
        for group in opt.param_groups:
            group["lr"] = lr
        for p, g in zip(params, _fake_grads(params, start + i)):
            p.grad = g
        opt.step()


def _params(dtype: torch.dtype) -> list[nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (7,), (2, 3, 4)]
    return [nn.Parameter(torch.randn(s, generator=gen, dtype=torch.float64).to(dtype)) for s in shapes]


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
def test_decoupled_adamw_matches_reference(foreach, amsgrad):
    params = _params(torch.float64)
    start = [p.detach().clone() for p in params]
    kw = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 1e-4}
    opt = DecoupledAdamW(params, lr=LRS[0], amsgrad=amsgrad, foreach=foreach, **kw)
    _run(opt, params, LRS)
    for i, (p, p0) in enumerate(zip(params, start)):
        grads = [_fake_grads(start, s)[i] for s in range(len(LRS))]
        ref = _ref_decoupled_adamw(p0, grads, LRS, initial_lr=LRS[0], wd=kw["weight_decay"], betas=kw["betas"],
                                   eps=kw["eps"], amsgrad=amsgrad)  # fmt: skip
        torch.testing.assert_close(p.detach(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("foreach", [False, True])
def test_decoupled_lionw_matches_reference(foreach):
    params = _params(torch.float64)
    start = [p.detach().clone() for p in params]
    opt = DecoupledLionW(params, lr=LRS[0], betas=(0.9, 0.99), weight_decay=1e-2, foreach=foreach)
    _run(opt, params, LRS)
    for i, (p, p0) in enumerate(zip(params, start)):
        grads = [_fake_grads(start, s)[i] for s in range(len(LRS))]
        ref = _ref_decoupled_lionw(p0, grads, LRS, initial_lr=LRS[0], betas=(0.9, 0.99), wd=1e-2)
        torch.testing.assert_close(p.detach(), ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [DecoupledAdamW, DecoupledLionW])
def test_foreach_path_equals_loop_in_fp32(cls):
    a, b = _params(torch.float32), _params(torch.float32)
    opt_a = cls(a, lr=1e-2, weight_decay=1e-4, foreach=False)
    opt_b = cls(b, lr=1e-2, weight_decay=1e-4, foreach=True)
    _run(opt_a, a, LRS)
    _run(opt_b, b, LRS)
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pa, pb, rtol=0, atol=1e-6)


def test_decay_is_not_multiplied_by_lr():
    # With a zero gradient Adam's update is 0, so one step is pure decay: p * (1 - (lr/initial_lr) * wd).
    p = nn.Parameter(torch.full((3,), 2.0, dtype=torch.float64))
    opt = DecoupledAdamW([p], lr=1e-3, weight_decay=1e-4)
    opt.param_groups[0]["lr"] = 5e-4  # schedule at 0.5
    p.grad = torch.zeros_like(p)
    opt.step()
    torch.testing.assert_close(p.detach(), torch.full((3,), 2.0 * (1 - 0.5 * 1e-4), dtype=torch.float64))


def test_large_decoupled_weight_decay_warns():
    with pytest.warns(UserWarning, match="not multiplied by lr"):
        DecoupledAdamW([nn.Parameter(torch.zeros(2))], lr=1e-3, weight_decay=0.1)


def test_adamw_wrapper_equals_torch_adamw_stepwise():
    torch.manual_seed(0)
    model = Tiny()
    ref_model = copy.deepcopy(model)
    cfg = AdamWConfig(lr=LRS[0], betas=[0.9, 0.95], weight_decay=0.1, weight_decay_exclude=["norm", "bias"])
    opt = build_optimizer(cfg, model=model)
    ref_groups = build_param_groups(ref_model, weight_decay=0.1, exclude=["norm", "bias"])
    ref = torch.optim.AdamW(ref_groups, lr=LRS[0], betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    params, ref_params = list(model.parameters()), list(ref_model.parameters())
    for step, lr in enumerate(LRS):
        _run(opt, params, [lr], start=step)
        _run(ref, ref_params, [lr], start=step)
        for p, q in zip(params, ref_params):
            torch.testing.assert_close(p, q, rtol=0, atol=1e-7)


def test_weight_decay_exclusion_groups():
    model = Tiny()
    opt = build_optimizer(
        DecoupledAdamWConfig(lr=1e-3, weight_decay=1e-5, weight_decay_exclude=["norm", "bias", "embedding"]),
        model=model,
    )
    names = {id(p): n for n, p in model.named_parameters()}
    groups = {g["name"]: sorted(names[id(p)] for p in g["params"]) for g in opt.param_groups}
    assert groups == {
        "decay": ["fc.weight"],
        "no_decay": sorted(["wte.weight", "ln.weight", "ln.bias", "fc.bias", "norm_f.weight"]),
    }
    assert [g["weight_decay"] for g in opt.param_groups] == [1e-5, 0.0]
    assert all(g["initial_lr"] == 1e-3 for g in opt.param_groups)


@pytest.mark.parametrize(
    ("exclude", "no_decay"),
    [
        ([], []),
        (["norm"], ["ln.bias", "ln.weight", "norm_f.weight"]),
        (["bias"], ["fc.bias", "ln.bias", "ln.weight", "norm_f.weight"]),  # every 1-D parameter
        (["embedding"], ["wte.weight"]),  # the tied head weight is the same tensor
    ],
)
def test_each_exclusion_category(exclude, no_decay):
    model = Tiny()
    names = {id(p): n for n, p in model.named_parameters()}
    groups = build_param_groups(model, weight_decay=0.1, exclude=exclude)
    got = {g["name"]: sorted(names[id(p)] for p in g["params"]) for g in groups}
    assert got.get("no_decay", []) == sorted(no_decay)
    assert sum(len(g["params"]) for g in groups) == len(names)  # each tensor exactly once


def test_disable_grad_freezes_and_drops_params():
    model = Tiny()
    opt = build_optimizer(DecoupledLionWConfig(disable_grad=["wte", r"^ln\."]), model=model)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen == {"wte.weight", "ln.weight", "ln.bias"}
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert all(id(p) not in in_opt for n, p in model.named_parameters() if n in frozen)


def test_param_groups_override_and_split_by_decay_category():
    model = Tiny()
    cfg = DecoupledAdamWConfig(
        lr=1e-3,
        weight_decay=1e-5,
        weight_decay_exclude=["bias"],
        param_groups=[
            ParamGroupConfig(param_str_match="fc", lr=1e-2, weight_decay=1e-4, betas=[0.8, 0.9]),
            ParamGroupConfig(param_str_match=r"fc|ln", lr=5e-3),  # fc.* already taken: first match wins
        ],
    )
    opt = build_optimizer(cfg, model=model)
    names = {id(p): n for n, p in model.named_parameters()}
    got = {
        g["name"]: (sorted(names[id(p)] for p in g["params"]), g["lr"], g["weight_decay"], g["initial_lr"])
        for g in opt.param_groups
    }
    assert got == {
        "decay": (["wte.weight"], 1e-3, 1e-5, 1e-3),
        "no_decay": (["norm_f.weight"], 1e-3, 0.0, 1e-3),
        "param_groups[0].decay": (["fc.weight"], 1e-2, 1e-4, 1e-2),
        "param_groups[0].no_decay": (["fc.bias"], 1e-2, 0.0, 1e-2),
        "param_groups[1].no_decay": (["ln.bias", "ln.weight"], 5e-3, 0.0, 5e-3),
    }
    assert [g["betas"] for g in opt.param_groups] == [
        (0.9, 0.95),
        (0.9, 0.95),
        (0.8, 0.9),
        (0.8, 0.9),
        (0.9, 0.95),
    ]


def test_param_group_matching_nothing_is_an_error():
    cfg = DecoupledAdamWConfig(param_groups=[ParamGroupConfig(param_str_match="attn", lr=1.0)])
    with pytest.raises(ValueError, match=r"param_groups\[0\].param_str_match='attn' matches no trainable"):
        build_optimizer(cfg, model=Tiny())


def test_param_group_validation():
    with pytest.raises(ValueError, match=r"param_groups\[0\].eps"):
        DecoupledLionWConfig(param_groups=[ParamGroupConfig(param_str_match="fc", eps=1e-6)])
    with pytest.raises(ValueError, match=r"param_groups\[0\].lr"):
        DecoupledAdamWConfig(param_groups=[ParamGroupConfig(param_str_match="fc", lr=-1.0)])
    with pytest.raises(ValueError, match=r"param_groups\[0\].param_str_match"):
        DecoupledAdamWConfig(param_groups=[ParamGroupConfig(param_str_match="[")])


def test_nothing_left_to_train_is_a_clear_error():
    with pytest.raises(ValueError, match="no trainable parameters.*disable_grad"):
        build_optimizer(DecoupledAdamWConfig(disable_grad=[""]), model=Tiny())


@pytest.mark.parametrize(
    "cfg",
    [
        DecoupledAdamWConfig(lr=1e-3, weight_decay=1e-5, amsgrad=True),
        DecoupledLionWConfig(lr=1e-3, weight_decay=1e-2),
        AdamWConfig(lr=1e-3),
    ],
    ids=lambda c: type(c).__name__,
)
def test_state_dict_round_trip_resumes_identically(cfg):
    torch.manual_seed(0)
    model = Tiny()
    opt = build_optimizer(cfg, model=model)
    _run(opt, list(model.parameters()), LRS[:3])
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(opt.state_dict())
    _run(opt, list(model.parameters()), LRS[3:], start=3)

    resumed = Tiny()
    resumed.load_state_dict(saved_model)
    opt2 = build_optimizer(cfg, model=resumed)
    opt2.load_state_dict(saved_opt)
    _run(opt2, list(resumed.parameters()), LRS[3:], start=3)
    for p, q in zip(model.parameters(), resumed.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    if isinstance(opt2, (DecoupledAdamW, DecoupledLionW)):
        assert opt2.param_groups[0]["initial_lr"] == cfg.lr


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"name": "decoupled_lionw"}, "optimizer.name"),
        ({"weight_decay_exclude": ["norms"]}, "weight_decay_exclude"),
        ({"betas": [0.9]}, "optimizer.betas"),
        ({"betas": [0.9, 1.0]}, "optimizer.betas"),
        ({"lr": -1.0}, "optimizer.lr"),
        ({"eps": -1.0}, "optimizer.eps"),
        ({"weight_decay": -1.0}, "optimizer.weight_decay"),
        ({"disable_grad": ["("]}, "disable_grad"),
    ],
)
def test_config_validation_names_field(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        DecoupledAdamWConfig(**kwargs)


# ------------------------------------------------------------------------------------------ conf composition
@pytest.fixture
def hydra_conf():
    register_optim_configs(ConfigStore.instance())
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


OPTION_FILES = sorted(p.stem for p in (CONF / "optimizer").glob("*.yaml"))


def test_option_files_exist():
    assert OPTION_FILES == ["adamw", "decoupled-adamw", "decoupled-lionw"]


@pytest.mark.parametrize("option", OPTION_FILES)
def test_conf_optimizer_composes_to_schema(hydra_conf, option):
    cfg = compose(overrides=[f"+optimizer={option}"])
    obj = OmegaConf.to_object(cfg.optimizer)
    assert isinstance(obj, OptimizerConfig)
    assert obj.name == option.replace("-", "_")
    build_optimizer(obj, model=Tiny())


def test_decoupled_adamw_conf_has_mpt_defaults(hydra_conf):
    obj = OmegaConf.to_object(compose(overrides=["+optimizer=decoupled-adamw"]).optimizer)
    assert obj == DecoupledAdamWConfig(lr=6e-4, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.0)


def test_conf_optimizer_typo_fails_naming_key(hydra_conf):
    with pytest.raises(ConfigCompositionException) as info:
        compose(overrides=["+optimizer=adamw", "optimizer.lrr=1"])
    assert "lrr" in str(info.value) + str(info.value.__cause__)


def test_conf_optimizer_wrong_type_fails(hydra_conf):
    with pytest.raises(ConfigCompositionException) as info:
        compose(overrides=["+optimizer=decoupled-lionw", "optimizer.lr=abc"])
    assert "lr" in str(info.value) + str(info.value.__cause__)


def test_pasted_llm_foundry_block_validates(hydra_conf):
    cfg = compose(overrides=["+optimizer=decoupled-adamw", "optimizer.name=decoupled_adamw"])
    assert isinstance(OmegaConf.to_object(cfg.optimizer), DecoupledAdamWConfig)
    bad = compose(overrides=["+optimizer=decoupled-adamw", "optimizer.name=decoupled_lionw"])
    with pytest.raises(ValueError, match="optimizer.name"):
        OmegaConf.to_object(bad.optimizer)


def test_conf_param_groups_from_command_line(hydra_conf):
    cfg = compose(
        overrides=["+optimizer=decoupled-adamw", "optimizer.param_groups=[{param_str_match: fc, lr: 0.01}]"]
    )
    obj = OmegaConf.to_object(cfg.optimizer)
    assert obj.param_groups == [ParamGroupConfig(param_str_match="fc", lr=0.01)]
    opt = build_optimizer(obj, model=Tiny())
    assert [g["name"] for g in opt.param_groups] == ["decay", "param_groups[0].decay"]


def test_training_reduces_loss_with_each_optimizer():
    # A smoke check that the update direction is right (descends), not only that it matches the formula.
    for cfg in (AdamWConfig(lr=1e-2), DecoupledAdamWConfig(lr=1e-2), DecoupledLionWConfig(lr=1e-3)):
        torch.manual_seed(0)
        model = Tiny()
        opt = build_optimizer(cfg, model=model)
        ids = torch.randint(0, 11, (4, 6))
        losses = []
        for _ in range(30):
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[-1] < losses[0] - 0.1, (type(cfg).__name__, losses[0], losses[-1])
        assert all(math.isfinite(x) for x in losses)
