"""Loading a model + tokenizer for the lm-eval adapter from `--model_args` strings.

Design note: lm-eval hands us `key=value` strings, so this module turns the three ways users name a model
into a (model, tokenizer) pair and nothing else:

* `pretrained=<dir>`: an HF folder (`scripts/export_hf.py` output, a `save_pretrained` folder of our
  `foundry_mpt`, or any transformers causal LM) loaded with `foundry.models.load_pretrained`;
* `checkpoint=<dir>` that holds a `config.json`: the same;
* `checkpoint=<foundry checkpoint>` (a directory with `manifest.json`, or a save folder: its newest
  complete checkpoint; local or URL): the model is built from the config its manifest records and the
  weights loaded with `foundry.checkpoint.load_weights`;
* `config=<model yaml path | conf/model name>` (+ `checkpoint=<weights file or foundry checkpoint>`): the
  model is built from that schema; a weights file (.pt/.bin/.safetensors) is read as a state dict.

The tokenizer is `tokenizer=` when given, else the model folder's own, else the one recorded in the
`run.json` of the training run a local checkpoint sits in (`outputs/<run>/checkpoints/...`), else the
config default (gpt-neox-20b from the local HF cache); offline failures name the argument to pass.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from foundry.checkpoint import load_weights, open_checkpoint
from foundry.models import build_model_on, load_pretrained, model_schema_from_dict
from foundry.models.export import load_state_dict_file
from foundry.tokenizers import TokenizerConfig, build_tokenizer, run_tokenizer_config

__all__ = ["DTYPES", "load_model_and_tokenizer", "model_schema"]

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_REPO = Path(__file__).resolve().parents[3]


def _is_hf_dir(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _has_tokenizer(path: Path) -> bool:
    return path.is_dir() and any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json"))


def model_schema(config: str) -> Any:
    """The typed model schema (`MPTModelConfig` or `HFCausalLMConfig`) from a yaml path or a
    `conf/model/<name>.yaml` name (e.g. `mpt-tiny`)."""
    import yaml

    path = Path(config).expanduser()
    if not path.is_file():
        named = _REPO / "conf" / "model" / f"{config}.yaml"
        if not named.is_file():
            names = sorted(p.stem for p in (_REPO / "conf" / "model").glob("*.yaml"))
            raise ValueError(f"config={config!r}: not a yaml file nor a model name; names: {names}")
        path = named
    body = yaml.safe_load(path.read_text()) or {}
    defaults = body.pop("defaults", None) or []
    return model_schema_from_dict(body, hf="_hf_causal_lm" in defaults)


def _load_state_file(model: nn.Module, path: Path) -> None:
    """A plain weights file (.pt/.bin/.safetensors; `{'model': ...}` wrappers and `model.` prefixes
    accepted)."""
    missing, unexpected = model.load_state_dict(load_state_dict_file(path), strict=False)
    # lm_head.weight is absent where the embeddings are tied
    missing = [k for k in missing if not k.endswith("lm_head.weight")]
    if missing or unexpected:
        raise ValueError(
            f"checkpoint={str(path)!r} does not match the model: missing={missing} unexpected={unexpected}"
        )


def _manifest_model_config(checkpoint: str) -> dict[str, Any]:
    """The model config recorded in a foundry checkpoint's manifest
    (directory or save folder, local or URL)."""
    with tempfile.TemporaryDirectory() as scratch:
        info = open_checkpoint(checkpoint, scratch=scratch)
    if not info.manifest.model_config:
        raise ValueError(
            f"checkpoint={checkpoint!r} records no model config: pass config=<model yaml or name>"
        )
    return dict(info.manifest.model_config)


def _load_weights(model: nn.Module, checkpoint: str) -> None:
    path = Path(checkpoint).expanduser()
    if path.is_file():
        _load_state_file(model, path)
        return
    with tempfile.TemporaryDirectory() as cache:
        load_weights(model, checkpoint, cache_root=cache)


def _build_from_config(config: str | None, checkpoint: str | None, dtype: torch.dtype) -> nn.Module:
    if config is None:
        assert checkpoint is not None
        cfg = model_schema_from_dict(_manifest_model_config(checkpoint))
    else:
        cfg = model_schema(config)
    # fp32 on the CPU (an MPT created on meta: weights are loaded next); cast once loaded at full precision
    model = build_model_on(cfg, device="cpu", init_device="meta")
    if checkpoint:
        _load_weights(model, checkpoint)
    else:
        log.warning("config=%s without checkpoint=: evaluating randomly initialised weights", config)
    return model.to(dtype)


def _tokenizer(name: str | None, model_dir: Path | None, checkpoint: str | None) -> Any:
    if name is None and model_dir is not None and _has_tokenizer(model_dir):
        name = str(model_dir)
    from_run = run_tokenizer_config(checkpoint) if checkpoint else None
    cfg = TokenizerConfig(name=name) if name is not None else from_run or TokenizerConfig()
    try:
        return build_tokenizer(cfg)
    except ValueError as err:
        raise ValueError(
            f"{err} (lm-eval: pass it as --model_args ...,tokenizer=/path/to/tokenizer.json)"
        ) from err


def load_model_and_tokenizer(
    *,
    pretrained: str | None = None,
    config: str | None = None,
    checkpoint: str | None = None,
    tokenizer: str | None = None,
    dtype: str = "float32",
    device: str | torch.device = "cpu",
) -> tuple[nn.Module, Any]:
    """(model in eval mode on `device`, tokenizer) from the adapter's model arguments (see module doc).

    Raises:
        ValueError: naming the argument to fix when the combination is incomplete or a path is wrong.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r}: choose one of {sorted(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    model_dir: Path | None = None
    if pretrained is not None:
        model_dir = Path(pretrained).expanduser()
        if not _is_hf_dir(model_dir):
            raise ValueError(f"pretrained={pretrained!r}: not a folder with config.json (an HF export)")
    elif checkpoint is not None and config is None and _is_hf_dir(Path(checkpoint).expanduser()):
        model_dir = Path(checkpoint).expanduser()
    if model_dir is not None:
        if config is not None:
            raise ValueError(
                "give either pretrained=<HF folder> or config=<model yaml> (+ checkpoint=), not both"
            )
        model = load_pretrained(model_dir, dtype=torch_dtype)
    elif config is not None or checkpoint is not None:
        if config is None and checkpoint is not None and Path(checkpoint).expanduser().is_file():
            raise ValueError(
                f"checkpoint={checkpoint!r} is a weights file: pass config=<model yaml or name> too"
            )
        model = _build_from_config(config, checkpoint, torch_dtype)
    else:
        raise ValueError(
            "name a model: pretrained=<HF folder>, checkpoint=<HF folder or foundry checkpoint>, or "
            "config=<model yaml or conf/model name> with checkpoint=<weights file>"
        )
    tok = _tokenizer(tokenizer, model_dir, checkpoint)
    return model.to(device).eval(), tok
