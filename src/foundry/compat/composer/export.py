"""The way back: one of our checkpoints written as a Composer checkpoint that llm-foundry resumes from.

Design note: the output is the reverse of `foundry.compat.composer.mapping`, written with plain `torch.save`
of plain containers (dicts, lists, tuples, tensors, numbers and one numpy array for numpy's RNG key), which
Composer 0.32's `load_checkpoint` accepts as it accepts its own file: `State.load_state_dict` reads
`state.model` (`model.<name>`, `ComposerMPTCausalLM`), `state.optimizers` (`{"DecoupledAdamW": torch's
optimizer state dict keyed by those names}`, through `set_optimizer_state_dict`), `state.schedulers`
(`{"LambdaLR": ...}`), `state.timestamp` (`{"Timestamp": counters}`) and `state.dataset_state["train"]` (the
streaming dataset's `load_state_dict`); the top-level `rng` list goes to `reproducibility.load_rng_state`.
`state.integrations.huggingface.model.config` records the MPT config (what `--from composer` reads back) and
`state.metadata` the world size and batch size. Not written: algorithms, callbacks, grad scaler, metrics,
`run_name` and `rank_zero_seed` (the resuming run's own YAML decides them).

The schedule: Composer steps its `LambdaLR` before it advances the batch counter its schedule reads, so its
step k runs at the multiplier α(k-2) where ours runs α(k-1). The first step after the resume runs at the
learning rate stored in the optimizer state (ours: the next LR of this run); after it Composer's own rule
applies, so a run trained here from scratch continues in Composer with its LR one step behind ours (identical
on a constant stretch of the schedule); a run that started from a Composer checkpoint keeps Composer's rule
throughout, and its export continues exactly.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import torch

from foundry.checkpoint.layout import Manifest, open_checkpoint
from foundry.checkpoint.resume import fetch
from foundry.checkpoint.state import MODEL_FILE, STATE_FILE, read_state_file

__all__ = ["CARRIED", "to_composer"]

CARRIED: list[tuple[str, str]] = [
    ("model weights `<name>`", "state.model `model.<name>` (ComposerMPTCausalLM)"),
    (
        "DecoupledAdamW state and param groups",
        "state.optimizers.DecoupledAdamW (torch's state dict keyed `model.<name>`; one param group)",
    ),
    ("scheduler position p", "state.schedulers.LambdaLR last_epoch p+1 (Composer's counting)"),
    (
        "counters: step, epoch, step_in_epoch, samples, tokens",
        "state.timestamp: batch, epoch, batch_in_epoch, sample, token (+ the in-epoch counts)",
    ),
    ("the train loader's streaming state", "state.dataset_state.train"),
    ("per-rank RNG (python, numpy, torch, cuda)", "rng[rank]"),
    ("the manifest's model config", "state.integrations.huggingface.model.config (MPTConfig content)"),
    (
        "not carried",
        "algorithms, callbacks, grad scaler, metrics, run_name, rank_zero_seed, wall-clock times",
    ),
]
"""`(here, Composer checkpoint)` rows: the table of docs/guides/from-llm-foundry.md ("The way back"; a test
keeps the two equal)."""


_PREFIX = "model."
# Composer 0.32's DecoupledAdamW group (torch AdamW's flags, all off)
_GROUP_DEFAULTS: dict[str, Any] = {
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": None,
    "decoupled_weight_decay": True,
}
_HYPER = ("lr", "initial_lr", "betas", "eps", "weight_decay", "amsgrad")


def _optimizer(sd: dict[str, Any]) -> dict[str, Any]:
    """Our name-keyed DecoupledAdamW state dict -> Composer's (one param group, `model.` names)."""
    groups = sd.get("param_groups") or []
    if not groups:
        raise ValueError("the checkpoint's optimizer state has no param groups")
    first = {k: groups[0].get(k) for k in _HYPER}
    for g in groups[1:]:
        other = {k: g.get(k) for k in _HYPER}
        if other != first:
            raise ValueError(
                f"the optimizer has param groups with different settings ({groups[0].get('name')}: {first}; "
                f"{g.get('name')}: {other}); llm-foundry's DecoupledAdamW has one group: train with one "
                "(e.g. the same weight_decay for every parameter) to continue in Composer"
            )
    params = [_PREFIX + str(p) for g in groups for p in g["params"]]
    group = {**_GROUP_DEFAULTS, **{k: v for k, v in groups[0].items() if k not in ("params", "name")}}
    group.setdefault("initial_lr", group.get("lr"))
    if isinstance(group.get("betas"), list):
        group["betas"] = tuple(group["betas"])
    state = {_PREFIX + str(k): dict(v) for k, v in sd.get("state", {}).items()}
    return {"DecoupledAdamW": {"state": state, "param_groups": [{**group, "params": params}]}}


def _scheduler(sd: dict[str, Any] | None, lrs: list[float]) -> dict[str, Any] | None:
    """Our `LambdaLR` state at position p -> Composer's (its counter is one ahead: see the module note)."""
    if sd is None:
        return None
    last = int(sd.get("last_epoch", 0)) + 1
    return {
        "LambdaLR": {
            "base_lrs": list(sd.get("base_lrs", lrs)),
            "last_epoch": last,
            "_step_count": last + 1,
            "_is_initial": False,
            "_get_lr_called_within_step": False,
            "_last_lr": list(lrs),
            "lr_lambdas": [None] * len(sd.get("base_lrs", lrs)),
        }
    }


def _timestamp(counters: dict[str, Any]) -> dict[str, Any]:
    step, epoch = int(counters.get("step", 0)), int(counters.get("epoch", 0))
    in_epoch = int(counters.get("step_in_epoch", step))
    samples, tokens = int(counters.get("samples", 0)), int(counters.get("tokens", 0))
    # per-epoch samples and tokens are not kept here: exact in epoch 0, else pro rata of the steps
    sample_in_epoch = samples if epoch == 0 or not step else samples * in_epoch // step
    token_in_epoch = tokens if epoch == 0 or not step else tokens * in_epoch // step
    return {
        "Timestamp": {
            "iteration": 0,
            "epoch": epoch,
            "batch": step,
            "sample": samples,
            "token": tokens,
            "epoch_in_iteration": epoch,
            "token_in_iteration": tokens,
            "batch_in_epoch": in_epoch,
            "sample_in_epoch": sample_in_epoch,
            "token_in_epoch": token_in_epoch,
        }
    }


_UPSTREAM_DATA_KEYS = (
    "epoch",
    "sample_in_epoch",
    "num_canonical_nodes",
    "shuffle_seed",
    "initial_physical_nodes",
)


def _dataset_state(state: dict[str, Any]) -> dict[str, Any]:
    """Our streaming state -> mosaicml-streaming's (its five position keys; the rest is this library's)."""
    return {k: state[k] for k in _UPSTREAM_DATA_KEYS if k in state}


def _other_order(state: dict[str, Any]) -> bool:
    """Whether mosaicml-streaming would continue this mid-epoch state in another sample order."""
    return (
        bool(state.get("shuffle"))
        and int(state.get("sample_in_epoch") or 0) > 0
        and int(state.get("plan_version", 1)) != 1
        # streaming.reader.resume_state.UPSTREAM_ORDER
        and state.get("order") != "mosaicml-streaming"
    )


def _rng(rng: dict[str, Any]) -> dict[str, Any]:
    """`foundry.rng` format -> Composer's (`np.random.get_state()` tuple with an array key, one cuda
    state)."""
    name, keys, pos, has_gauss, gauss = rng["numpy"]
    out: dict[str, Any] = {
        "python": rng["python"],
        "numpy": (str(name), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(gauss)),
        "torch": rng["torch"],
    }
    cuda = rng.get("cuda")
    # ours: one state per visible device; Composer: the rank's own device
    if cuda:
        out["cuda"] = cuda[0] if isinstance(cuda, list | tuple) else cuda
    return out


def _hf_config(manifest: Manifest) -> dict[str, Any]:
    mc = manifest.model_config or {}
    if not mc or "d_model" not in mc:
        return {}
    # local: imports transformers
    from foundry.models.config import MPTModelConfig

    fields = set(MPTModelConfig.__dataclass_fields__) - {"peft_config"}
    content = {k: v for k, v in mc.items() if k in fields}
    content["model_type"] = "mpt"
    return {
        "huggingface": {
            "model": {
                "config": {
                    "file_extension": ".json",
                    "class": "llmfoundry.models.mpt.modeling_mpt.MPTForCausalLM",
                    "content": content,
                }
            }
        }
    }


def _read_ours(src: str, tmp: str) -> tuple[Manifest, dict[str, Any], dict[str, Any] | None]:
    """(manifest, weights, state file) of our checkpoint `src`
    (local or URL; a sharded one made full first)."""
    info = open_checkpoint(src, scratch=tmp)
    if info.manifest.format != "full":
        # local: the sharded -> full path
        from foundry.checkpoint.convert import convert_checkpoint

        src = convert_checkpoint(src, os.path.join(tmp, "full"), to="full", work_dir=tmp)
        info = open_checkpoint(src, scratch=tmp)
    local = fetch(info, cache_root=os.path.join(tmp, "download"))
    model = read_state_file(os.path.join(local, MODEL_FILE), allow_pickle=False)
    if info.manifest.weights_only or info.manifest.adapters_only:
        return info.manifest, model, None
    state = read_state_file(
        os.path.join(local, STATE_FILE), allow_pickle=False, keys=("optimizer", "run", "rng")
    )
    return info.manifest, model, state


def to_composer(src: str, out: str, *, work_dir: str | None = None) -> str:
    """Writes our checkpoint `src` (folder or save folder, local or URL) as the Composer checkpoint file `out`
    (a local `.pt`), which llm-foundry's `load_path` resumes from (see the module note for what is carried).

    Returns:
        A one-line description of what was written.

    Raises:
        ValueError: A checkpoint Composer cannot continue (LoRA adapters only, several optimizer groups).
    """
    with tempfile.TemporaryDirectory(dir=work_dir, prefix="to-composer-") as tmp:
        manifest, model, state = _read_ours(src, tmp)
        if manifest.adapters_only:
            raise ValueError(f"{src}: holds LoRA adapters only; merge them first (scripts/export_hf.py)")
        composer: dict[str, Any] = {
            "model": {_PREFIX + k: v for k, v in model.items() if isinstance(v, torch.Tensor)},
            "timestamp": _timestamp(
                {
                    "step": manifest.step,
                    "epoch": manifest.epoch,
                    "samples": manifest.samples,
                    "tokens": manifest.tokens,
                }
            ),
            "integrations": _hf_config(manifest),
            "metadata": {
                "world_size": manifest.world_size,
                "train_dataloader_batch_size": (manifest.extra or {}).get("global_train_batch_size"),
                "exported_by": "foundry (scripts/convert_checkpoint.py --to composer)",
            },
        }
        rngs: list[dict[str, Any]] = []
        what = ["model"]
        if state is not None:
            run = state["run"] or {}
            composer["optimizers"] = _optimizer(state["optimizer"])
            lrs = [g["lr"] for g in composer["optimizers"]["DecoupledAdamW"]["param_groups"]]
            schedulers = _scheduler(run.get("scheduler"), lrs)
            if schedulers is not None:
                composer["schedulers"] = schedulers
            composer["timestamp"] = _timestamp(run.get("state") or {})
            data = run.get("dataloader")
            if isinstance(data, dict):
                composer["dataset_state"] = {"train": _dataset_state(data), "eval": {}}
            rngs = [_rng(r) for r in state.get("rng") or [] if isinstance(r, dict)]
            what += [
                "DecoupledAdamW",
                "scheduler" if schedulers else "no scheduler",
                "counters",
                f"RNG of {len(rngs)} rank(s)" if rngs else "no RNG",
                "data position" if "dataset_state" in composer else "no data position",
            ]
            if isinstance(data, dict) and _other_order(data):
                what.append(
                    "note: this run shuffles in this library's order (plan_version 2) and stopped mid-epoch; "
                    "mosaicml-streaming continues the epoch in its own order (other samples)"
                )
        parent = os.path.dirname(os.path.abspath(out))
        os.makedirs(parent, exist_ok=True)
        partial = out + ".partial"
        torch.save({"state": composer, "rng": rngs}, partial)
        # a crash leaves no half-written checkpoint under the final name
        os.replace(partial, out)
    step = composer["timestamp"]["Timestamp"]["batch"]
    return f"step {step}; " + ", ".join(what)
