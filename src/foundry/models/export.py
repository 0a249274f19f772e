"""Export of our MPT models to transformers' built-in `mpt` format, or to `foundry_mpt` with its code.

Design note: transformers' own `MptForCausalLM` implements a narrow slice of MPT (ALiBi with bias max 8,
no biases, LayerNorm, GELU MLP x4, MHA). Our parameter names already match it, so export is "check the
options map, build transformers' model, copy the state dict, `save_pretrained`" - loading the weights into
the real target class is the validation. Configurations outside that slice export in our `foundry_mpt`
format with the modelling code beside the weights (`foundry.models.remote_code`, `auto_map` in config.json):
plain transformers loads it with `trust_remote_code=True`, and `AutoModelForCausalLM` loads it without
after `register_auto_classes()`. `describe_export` says which format a folder holds and why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from foundry.models.build import load_pretrained
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.remote_code import write_remote_code
from foundry.serialization import load_file

__all__ = [
    "describe_export",
    "export_checkpoint",
    "export_hf",
    "hf_mpt_incompatibilities",
    "is_trainer_checkpoint",
    "load_state_dict_file",
    "to_hf_mpt_config",
]

FORMATS = ("auto", "hf_mpt", "foundry")
# what marks a checkpoint written by the trainer (foundry.checkpoint)
_MANIFEST = "manifest.json"


def is_trainer_checkpoint(src: str | Path) -> bool:
    """Whether `src` is a trainer checkpoint (a folder with `manifest.json`) or a save folder holding some
    (`ep*-ba*/manifest.json`); a URL counts as one (only the checkpoint code reads object stores)."""
    text = str(src)
    if "://" in text:
        return True
    path = Path(text).expanduser()
    if path.name == _MANIFEST:
        path = path.parent
    if not path.is_dir():
        return False
    return (path / _MANIFEST).is_file() or any((c / _MANIFEST).is_file() for c in path.glob("ep*-ba*"))


def hf_mpt_incompatibilities(config: MPTConfig) -> list[str]:
    """Why `config` cannot be expressed as transformers' `MptConfig` (empty list: it can)."""
    attn, ffn = config.attn, config.ffn
    checks = [
        (attn.alibi, "attn_config.alibi must be true (transformers' MPT always uses ALiBi)"),
        (attn.alibi_bias_max == 8, "attn_config.alibi_bias_max must be 8"),
        (not config.learned_pos_emb, "learned_pos_emb must be false"),
        (config.no_bias, "no_bias must be true (transformers' MPT has no Linear/LayerNorm biases)"),
        (config.norm_type in ("layernorm", "low_precision_layernorm"), "norm_type must be a layernorm"),
        (ffn.ffn_type == "mptmlp", "ffn_config.ffn_type must be mptmlp"),
        (
            ffn.ffn_act_fn.get("name") == "gelu" and ffn.ffn_act_fn.get("approximate", "none") == "none",
            "ffn_config.ffn_act_fn must be exact gelu",
        ),
        (config.ffn_hidden_size == 4 * config.d_model, "the FFN width must be 4 * d_model"),
        (config.kv_n_heads == config.n_heads, "attention must be multihead (no GQA/MQA)"),
        (not (attn.qk_ln or attn.qk_gn), "qk_ln / qk_gn must be off"),
        (attn.sliding_window_size == -1, "attn_config.sliding_window_size must be -1"),
        (config.logit_scale is None, "logit_scale must be null"),
        (config.final_logit_softcapping is None, "final_logit_softcapping must be null"),
    ]
    return [why for ok, why in checks if not ok]


def to_hf_mpt_config(config: MPTConfig) -> Any:
    """Our config as transformers' `MptConfig`.

    Raises:
        ValueError: listing every option that does not map.
    """
    from transformers import MptConfig

    problems = hf_mpt_incompatibilities(config)
    if problems:
        raise ValueError(
            "cannot export to transformers' MPT format (fmt=hf_mpt): "
            + "; ".join(problems)
            + "; use the format auto or foundry instead "
            "(export_hf.py --format, convert_checkpoint.py --hf-format)"
        )
    attn = config.attn
    pdrop = attn.attn_pdrop
    return MptConfig(
        d_model=config.d_model,
        n_heads=config.n_heads,
        n_layers=config.n_layers,
        expansion_ratio=4,
        max_seq_len=config.max_seq_len,
        vocab_size=config.vocab_size,
        layer_norm_epsilon=config.norm_eps,
        learned_pos_emb=False,
        no_bias=True,
        attn_config={
            "attn_pdrop": int(pdrop) if float(pdrop).is_integer() else pdrop,
            "clip_qkv": attn.clip_qkv,
            "softmax_scale": attn.softmax_scale,
            "alibi": True,
            "alibi_bias_max": 8,
        },
        tie_word_embeddings=config.tie_word_embeddings,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
    )


def _state_dict_fp(model: nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {k: v.detach().to(dtype) for k, v in model.state_dict().items()}


def export_hf(
    model: MPTForCausalLM,
    out_dir: str | Path,
    *,
    # a transformers tokenizer
    tokenizer: Any | None = None,
    fmt: str = "auto",
    dtype: torch.dtype = torch.float32,
) -> str:
    """Writes an HF folder (config.json, model.safetensors, tokenizer files) for `model`.

    Args:
        model: our MPT. out_dir: output folder. tokenizer: saved alongside when given.
        fmt: `hf_mpt` (transformers' built-in MptForCausalLM; fails if options do not map), `foundry`
            (our model_type `foundry_mpt`, with its modelling code and `auto_map`: loads in plain transformers
            with `trust_remote_code=True`) or `auto` (hf_mpt when possible, else foundry).
        dtype: weight dtype on disk.

    A model with LoRA adapters (`model.peft_config`) is merged in place first (pass a copy to keep training
    it): the folder holds a plain model of the base architecture, with the logits of base + adapter.

    Returns:
        The format written (`hf_mpt` or `foundry`).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt={fmt!r}: choose one of {list(FORMATS)}")
    if any(".lora_A." in name for name, _ in model.named_parameters()):
        # local: `peft` is an optional dependency, needed only for a model that has adapters
        from foundry.models.peft.inject import merge_adapters_

        merge_adapters_(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "auto":
        fmt = "foundry" if hf_mpt_incompatibilities(model.config) else "hf_mpt"
    if fmt == "foundry":
        model.save_pretrained(out, state_dict=_state_dict_fp(model, dtype))
        # (a transformers model of another kind has its class there)
        if isinstance(model, MPTForCausalLM):
            write_remote_code(out)
    else:
        from transformers import MptForCausalLM

        hf_config = to_hf_mpt_config(model.config)
        with torch.device("meta"):
            hf_model = MptForCausalLM(hf_config)
        missing, unexpected = hf_model.load_state_dict(
            _state_dict_fp(model, dtype), strict=False, assign=True
        )
        expected_missing = {"lm_head.weight"} if hf_config.tie_word_embeddings else set()
        if set(missing) != expected_missing or unexpected:
            raise RuntimeError(f"weight mapping failed: missing={missing} unexpected={unexpected}")
        hf_model.tie_weights()
        hf_model.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
        _standard_tokenizer_class(out)
    return fmt


def _standard_tokenizer_class(out: Path) -> None:
    """Names the tokenizer `PreTrainedTokenizerFast` in `tokenizer_config.json` (issue 40): transformers 5
    writes its internal `TokenizersBackend`, which transformers 4 cannot load; the `tokenizer.json` beside it
    is the standard form both read."""
    path = out / "tokenizer_config.json"
    if not (out / "tokenizer.json").is_file() or not path.is_file():
        return
    config = json.loads(path.read_text())
    if config.get("tokenizer_class") in (None, "TokenizersBackend"):
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def describe_export(out_dir: str | Path, *, requested: str = "auto") -> str:
    """One line: which format the export folder `out_dir` holds, how to load it, and why it was chosen.

    Args:
        out_dir: A folder `export_hf` wrote. requested: the `fmt` it was asked for.
    """
    out = Path(out_dir)
    config = json.loads((out / "config.json").read_text())
    model_type = config.get("model_type")
    if model_type == "mpt":
        why = (
            "asked for (--format hf_mpt)"
            if requested == "hf_mpt"
            else "every option of this model maps onto it"
        )
        return (
            f"hf_mpt, transformers' own MptForCausalLM: AutoModelForCausalLM.from_pretrained('{out}') loads "
            f"it with no extra code ({why})"
        )
    if "auto_map" not in config:
        return f"a transformers {model_type} model (its class is part of transformers; no code written)"
    problems = hf_mpt_incompatibilities(MPTConfig.from_json_file(str(out / "config.json")))
    if requested == "foundry":
        why = "asked for (--format foundry)"
    else:
        why = "transformers' own MPT cannot hold this model: " + "; ".join(problems)
    return (
        "foundry_mpt with its modelling code beside the weights (modeling_foundry_mpt.py and helpers, "
        f"auto_map in config.json): AutoModelForCausalLM.from_pretrained('{out}', trust_remote_code=True) "
        f"loads it with only torch and transformers installed ({why})"
    )


def load_state_dict_file(path: Path) -> dict[str, torch.Tensor]:
    """Weights from a .pt/.bin (raw, {'model': ...} or {'state': {'model': ...}}) or .safetensors file."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file as load_safetensors

        return load_safetensors(str(path))
    obj: Any = load_file(
        str(path),
        allow_pickle=False,
        opt_in="re-save its tensors as .safetensors (or a weights-only .pt) first",
    )
    for key in ("state", "model"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if isinstance(obj, dict) and isinstance(obj.get("model"), dict):
        obj = obj["model"]
    prefix = "model."
    if obj and all(k.startswith(prefix) for k in obj):
        obj = {k[len(prefix) :]: v for k, v in obj.items()}
    return obj


def export_checkpoint(
    src: str | Path,
    out_dir: str | Path,
    *,
    config: str | Path | None = None,
    tokenizer: Any | None = None,
    fmt: str = "auto",
    dtype: torch.dtype = torch.float32,
) -> str:
    """Loads our model from `src` and writes an HF folder with `export_hf`.

    Args:
        src: a folder written by `save_pretrained` (foundry_mpt), or a weights file (.pt/.bin/.safetensors;
            a `{'model': state_dict}` wrapper and a leading `model.` key prefix are accepted).
        out_dir: output folder. config: the MPTConfig config.json to use with a weights file.
        tokenizer: a transformers tokenizer to save alongside. fmt/dtype: see `export_hf`.

    Returns:
        The format written.
    """
    src = Path(src)
    if is_trainer_checkpoint(src):
        raise ValueError(
            f"{src} is a checkpoint written by the trainer (it has {_MANIFEST}): export it with "
            "foundry.checkpoint.convert.to_hf (what scripts/export_hf.py and "
            "convert_checkpoint.py --to hf use)"
        )
    if src.is_dir():
        model = load_pretrained(src)
    else:
        if config is None:
            raise ValueError(f"{src} is a weights file: pass the model's config.json too (--config)")
        cfg = MPTConfig.from_json_file(str(config))
        with torch.device("meta"):
            model = MPTForCausalLM(cfg)
        model.load_state_dict(load_state_dict_file(src), strict=True, assign=True)
        model.transformer.pos.to_empty(device="cpu")
        model.transformer.pos.reset_buffers()
    if not isinstance(model, MPTForCausalLM):
        raise ValueError(f"{src} holds a {type(model).__name__}, not our MPTForCausalLM; nothing to convert")
    return export_hf(model.eval(), out_dir, tokenizer=tokenizer, fmt=fmt, dtype=dtype)
