"""How each piece of a Composer checkpoint maps onto ours: pure functions over the plain data the reader made.

Design note: our MPT already uses llm-foundry's parameter names (`transformer.blocks.0.attn.Wqkv.weight`), so
model and optimizer tensors only lose the `model.` that `ComposerMPTCausalLM` (a `HuggingFaceModel` holding
the MPT as `.model`) puts in front. The rest is counters and one off-by-one: Composer steps its `LambdaLR`
*before* it advances the timestamp its schedule reads, so optimizer step k (1-based) runs at the multiplier
α(max(k-2, 0)) where ours runs at α(k-1); a checkpoint after k steps therefore continues here at schedule
position k-1, and the next steps' learning rates are Composer's exactly. `MAPPING` lists every rule (the
the table in docs/guides/from-llm-foundry.md is generated from it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

__all__ = [
    "MAPPING",
    "map_model",
    "map_optimizer",
    "map_rng",
    "map_scheduler",
    "map_timestamp",
    "mpt_model_config",
]

MAPPING: list[tuple[str, str]] = [
    ("state.model: `model.<name>` (ComposerMPTCausalLM)", "model weights `<name>` (same llm-foundry names)"),
    (
        "state.optimizers.DecoupledAdamW: state `model.<name>` {step, exp_avg, exp_avg_sq}, param_groups",
        "optimizer state `<name>` (same tensors); "
        "param_groups kept (lr, initial_lr, betas, eps, weight_decay)",
    ),
    (
        "state.schedulers.LambdaLR: last_epoch k (k optimizer steps)",
        "scheduler position k-1 (Composer's schedule lags one step; the next LRs are Composer's)",
    ),
    (
        "state.timestamp: batch, epoch, batch_in_epoch, sample, token",
        "counters: step, epoch, step_in_epoch, samples, tokens",
    ),
    (
        "state.dataset_state.train (mosaicml-streaming state dict)",
        "the train loader's position (continues at the sample upstream would yield next)",
    ),
    ("rng[rank]: python, numpy, torch, cuda", "per-rank RNG state (python, numpy, torch, cuda)"),
    (
        "state.integrations.huggingface.model.config (llm-foundry MPTConfig)",
        "the model config of the checkpoint (model.* fields); options this MPT lacks are refused by name",
    ),
    ("state.metadata: world_size, train_dataloader_batch_size", "global_train_batch_size"),
    (
        "state.algorithms, callbacks, scaler, train/eval metrics, run_name",
        "not carried over (run config here)",
    ),
]
"""`(Composer checkpoint, here)` rows: the table of docs/guides/from-llm-foundry.md ("Composer checkpoints"; a
test keeps the two equal)."""


_PREFIX = "model."
_GROUP_KEYS = ("lr", "initial_lr", "betas", "eps", "weight_decay", "amsgrad", "foreach", "name")
"""Param-group keys of our `DecoupledAdamW` (torch's extra flags: maximize, capturable, fused... are dropped,
all False/None in Composer's `DecoupledAdamW`, which has no such modes)."""

# llm-foundry MPTConfig keys with no field here:
# dropped when they hold the value that means "off", else refused
_NEUTRAL: dict[str, Any] = {
    "block_overrides": None,
    "head_dim": None,
    "use_pad_tok_in_ffn": True,
    "fc_type": {"name": "torch"},
    # HF alias of `not no_bias` (checked below)
    "attention_bias": None,
}
_NEUTRAL_ATTN: dict[str, Any] = {
    "attn_logit_softcapping": None,
    "kv_dim": None,
    "nope": False,
    "attn_temperature_tuning": None,
}
_HF_KEYS = {
    "_attn_implementation_autoset",
    "_name_or_path",
    "architectures",
    "auto_map",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "model_type",
    "torch_dtype",
    "transformers_version",
    "return_dict",
    "output_hidden_states",
    "output_attentions",
    "is_decoder",
    "init_device",
}
"""Transformers bookkeeping and run settings (`init_device`), not part of the architecture."""


def _strip(name: str) -> str:
    return name[len(_PREFIX) :] if name.startswith(_PREFIX) else name


def map_model(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Composer's model state dict -> ours: tensors keep their names minus the wrapper's `model.`."""
    return {_strip(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def map_optimizer(optimizers: Any, *, param_names: list[str]) -> tuple[str, dict[str, Any]]:
    """Composer's `{"DecoupledAdamW": optimizer state dict}` -> (class name, our name-keyed state dict).

    Args:
        param_names: Our parameter names in model order, for state dicts of old Composer versions that key
            parameters by position.

    Raises:
        ValueError: Not exactly one optimizer, or a state that is not a torch optimizer state dict.
    """
    if not isinstance(optimizers, dict) or len(optimizers) != 1:
        raise ValueError(f"expected one optimizer in state.optimizers, found {sorted(optimizers or {})}")
    ((name, sd),) = optimizers.items()
    if not isinstance(sd, dict) or not isinstance(sd.get("param_groups"), list) or "state" not in sd:
        raise ValueError(f"state.optimizers.{name} is not an optimizer state dict")

    def key(p: Any) -> str:
        # old Composer: optimizer.state_dict() keyed by position
        if isinstance(p, int):
            return param_names[p]
        return _strip(str(p))

    groups = []
    for group in sd["param_groups"]:
        g = {k: v for k, v in group.items() if k in _GROUP_KEYS}
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
        g.setdefault("initial_lr", g.get("lr"))
        groups.append({**g, "params": [key(p) for p in group["params"]]})
    if len(groups) == 1:
        # what our `build_optimizer` calls its one default group
        groups[0].setdefault("name", "decay")
    state = {key(p): dict(s) for p, s in sd["state"].items()}
    return str(name), {"state": state, "param_groups": groups}


def map_scheduler(schedulers: Any) -> dict[str, Any] | None:
    """Composer's `{"LambdaLR": state}` -> our `LambdaLR` state at the position that continues its LRs.

    Raises:
        ValueError: More than one scheduler, or one that is not Composer's compiled `LambdaLR`.
    """
    if not schedulers:
        return None
    if not isinstance(schedulers, dict) or len(schedulers) != 1 or "LambdaLR" not in schedulers:
        raise ValueError(
            f"state.schedulers holds {sorted(schedulers) if isinstance(schedulers, dict) else schedulers!r}: "
            "only one Composer scheduler (compiled to LambdaLR) can continue here"
        )
    sd = dict(schedulers["LambdaLR"])
    steps = int(sd.get("last_epoch", 0))
    sd["last_epoch"] = max(steps - 1, 0)
    sd["_step_count"] = sd["last_epoch"] + 1
    sd["lr_lambdas"] = [None] * len(sd.get("base_lrs", [None]))
    return sd


def map_timestamp(timestamp: Any) -> dict[str, int]:
    """Composer's timestamp (`{"Timestamp": {...}}` or a rebuilt `Timestamp`) -> our `TrainState` counters."""
    found = timestamp.get("Timestamp", timestamp) if isinstance(timestamp, dict) else None
    if not isinstance(found, dict) or "batch" not in found:
        raise ValueError(f"state.timestamp is not a Composer timestamp: {type(timestamp).__name__}")
    ts: dict[str, Any] = found
    return {
        "step": int(ts["batch"]),
        "epoch": int(ts.get("epoch", 0)),
        "step_in_epoch": int(ts.get("batch_in_epoch", ts["batch"])),
        "samples": int(ts.get("sample", 0)),
        "tokens": int(ts.get("token", 0)),
    }


def map_rng(rng: Any) -> dict[str, Any]:
    """One rank's Composer RNG state -> `foundry.rng` format (numpy key as plain ints, cuda as a list)."""
    python = rng["python"]
    out: dict[str, Any] = {
        "python": (int(python[0]), tuple(int(x) for x in python[1]), python[2]),
        "torch": rng["torch"],
    }
    name, keys, pos, has_gauss, gauss = rng["numpy"]
    out["numpy"] = (
        str(name),
        [int(k) for k in np.asarray(keys).tolist()],
        int(pos),
        int(has_gauss),
        float(gauss),
    )
    if rng.get("cuda") is not None:
        cuda = rng["cuda"]
        out["cuda"] = list(cuda) if isinstance(cuda, list | tuple) else [cuda]
    return out


def _neutral(where: str, key: str, value: Any, table: dict[str, Any]) -> None:
    if key not in table:
        raise ValueError(
            f"{where}.{key}={value!r}: this MPT has no such option; the checkpoint cannot load here"
        )
    off = table[key]
    if key == "attn_temperature_tuning":
        if isinstance(value, dict) and not value.get("attn_scale"):
            return
    elif value == off or (key == "attention_bias"):
        return
    raise ValueError(
        f"{where}.{key}={value!r}: not implemented here (only {off!r}); the checkpoint's model cannot load"
    )


def mpt_model_config(content: dict[str, Any]) -> dict[str, Any]:
    """llm-foundry's `MPTConfig` (as Composer stores it in `state.integrations`) -> our `model` fields.

    Raises:
        ValueError: An option this MPT does not implement, named (`model.attn_config.kv_dim=64: ...`).
    """
    # local: `foundry.models` imports transformers
    from foundry.models.config import AttnConfig, FFNConfig, InitConfig, MPTModelConfig

    fields = set(MPTModelConfig.__dataclass_fields__) - {"peft_config", "init_device"}
    nested = {
        "attn_config": set(AttnConfig.__dataclass_fields__),
        "ffn_config": set(FFNConfig.__dataclass_fields__),
        "init_config": set(InitConfig.__dataclass_fields__),
    }
    out: dict[str, Any] = {}
    for key, value in content.items():
        if key in _HF_KEYS:
            continue
        if key in nested and isinstance(value, dict):
            sub = {}
            for k, v in value.items():
                if k in nested[key]:
                    sub[k] = v
                elif key == "attn_config":
                    _neutral("model.attn_config", k, v, _NEUTRAL_ATTN)
                elif key == "ffn_config" and k == "fc_type":
                    _neutral("model.ffn_config", k, v, {"fc_type": {"name": "torch"}})
                else:
                    raise ValueError(f"model.{key}.{k}={v!r}: this MPT has no such option")
            out[key] = sub
        elif key in fields:
            out[key] = value
        else:
            _neutral("model", key, value, _NEUTRAL)
    attn = out.get("attn_config", {})
    # triton: a kernel choice, not the weights
    if attn.get("attn_impl") not in (None, "torch", "flash"):
        attn["attn_impl"] = "torch"
    if isinstance(out.get("expansion_ratio"), float) and math.isclose(out["expansion_ratio"] % 1, 0):
        out["expansion_ratio"] = int(out["expansion_ratio"])
    return out
