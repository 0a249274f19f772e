"""The larger sections of an llm-foundry YAML: `model`, `tokenizer`,
`train_loader`/`eval_loader`, `callbacks`.

Design note: each function writes into the `Out` of `translate.py` and follows the tables of `keys.py`. The
model is checked by building our schema from the translated values (`model_schema_from_dict`), so a value
the model cannot take fails here, naming the key, instead of at `train.py` time. The eval loader has no
section of its own: here the eval split shares the train loader's settings, so only its split (and its
streams' splits) carry over and any other difference is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from foundry.compat.llmfoundry import keys
from foundry.compat.llmfoundry.keys import TRANSLATED
from foundry.compat.llmfoundry.result import Out, duration
from foundry.config import LLM_FOUNDRY_FINETUNE_KEYS
from foundry.models.config import AttnConfig, FFNConfig, InitConfig
from foundry.models.registry import model_schema_from_dict

__all__ = ["callbacks", "loaders", "model", "tokenizer"]

_NESTED = {"attn_config": AttnConfig, "ffn_config": FFNConfig, "init_config": InitConfig}
_MPT_DEFAULTS = {"d_model": 2048, "n_heads": 16, "n_layers": 24}
"""llm-foundry's MPTConfig defaults for the fields our schema requires."""


def model(out: Out, body: Mapping[str, Any]) -> None:
    name = body.get("name")
    if name == "mpt_causal_lm":
        values = _mpt(out, body)
        hf = False
    elif name == "hf_causal_lm":
        values = _hf(out, body)
        hf = True
    else:
        raise out.fail("model.name", f"{name!r} is not supported here; use mpt_causal_lm or hf_causal_lm")
    try:
        model_schema_from_dict(_nest(values), hf=hf)
    except (ValueError, TypeError) as err:
        raise out.fail("model", " ".join(str(err).split())) from None
    out.choose("model", "_hf_causal_lm" if hf else "_mpt")
    for k, v in values.items():
        out.set(f"model.{k}", v)


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, tail = key.partition(".")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[head] = value
    return nested


def _mpt(out: Out, body: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {k: v for k, v in _MPT_DEFAULTS.items() if k not in body}
    # llm-foundry's default (ours is torch); the YAML's wins below
    values["attn_config.attn_impl"] = "flash"
    for key, value in body.items():
        where = f"model.{key}"
        rule = keys.MPT_MODEL.get(key)
        if key == "name":
            continue
        if key in _NESTED:
            allowed = {f.name for f in fields(_NESTED[key])}
            for sub, v in (value or {}).items():
                if sub not in allowed:
                    raise out.fail(f"{where}.{sub}", f"not supported by our MPT; its keys: {sorted(allowed)}")
                values[f"{key}.{sub}"] = v
        elif key == "init_device" and value == "mixed":
            out.ignore(where, "mixed -> meta: every rank builds on meta and materialises the same weights")
            values[key] = "meta"
        elif key == "fc_type" and value not in ("torch", {"name": "torch"}):
            raise out.fail(where, f"{value!r}: only torch Linear layers here; remove it")
        elif key == "use_pad_tok_in_ffn" and value is not True:
            raise out.fail(where, "false (unpadding before the FFN) is not implemented; remove it")
        elif rule is None:
            raise out.fail(
                where, "not supported by our MPT (see `python -m foundry.compat.llmfoundry --table`)"
            )
        elif rule.status == TRANSLATED:
            values[key] = value
        else:
            out.note(where, rule)
    return values


def _hf(out: Out, body: Mapping[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in body.items():
        where = f"model.{key}"
        rule = keys.HF_MODEL.get(key)
        if key == "name":
            continue
        if rule is None:
            raise out.fail(where, "not supported by model=hf-causal-lm here; remove it")
        if key == "use_flash_attention_2":
            if value:
                values["attn_implementation"] = "flash_attention_2"
        elif key == "init_device" and value == "mixed":
            values[key] = "meta"
        elif rule.status == TRANSLATED:
            values[key] = value
        else:
            out.note(where, rule)
    return values


def tokenizer(out: Out, body: Mapping[str, Any]) -> None:
    out.choose("tokenizer", "_tokenizer")
    flat = {k: v for k, v in body.items() if k != "kwargs"} | {
        f"kwargs.{k}": v for k, v in (body.get("kwargs") or {}).items()
    }
    for key, value in flat.items():
        rule = keys.TOKENIZER.get(key)
        if rule is None:
            raise out.fail(
                f"tokenizer.{key}",
                "not supported here; remove it (tokenizer.name, kwargs.model_max_length, "
                "padding_side and the special tokens carry over)",
            )
        if rule.status == TRANSLATED:
            out.set(rule.here, value)
        else:
            out.note(f"tokenizer.{key}", rule)


def loaders(out: Out, train: Mapping[str, Any], evaluation: Mapping[str, Any] | None) -> None:
    name = train.get("name")
    if name not in ("text", "finetuning"):
        raise out.fail("train_loader.name", f"{name!r} is not supported here; use text or finetuning")
    text = name == "text"
    out.choose("data", "_text" if text else "_finetune")
    table = keys.TEXT_DATASET if text else keys.FINETUNE_DATASET
    if text:
        # llm-foundry's text dataset default
        out.set("data.shuffle", False)
        # streaming's default seed
        out.set("data.shuffle_seed", 9176)
    for key, value in train.items():
        where = f"train_loader.{key}"
        if key == "dataset":
            _dataset(out, value or {}, table, text=text)
        elif key == "name":
            continue
        elif key == "pin_memory":
            if text:
                out.set("data.pin_memory", value)
            else:
                out.ignore(where, LLM_FOUNDRY_FINETUNE_KEYS["pin_memory"])
        elif key == "num_workers":
            out.set("data.num_workers", value)
        elif key == "drop_last" and not value:
            out.refuse(where, "false: training here always drops a final partial batch")
        elif key in keys.LOADER:
            out.note(where, keys.LOADER[key])
        else:
            raise out.fail(where, f"not a loader key here; known: {sorted(keys.LOADER)}")
    _eval_loader(out, train, evaluation, text=text)


def _dataset(out: Out, body: Mapping[str, Any], table: dict[str, keys.Rule], *, text: bool) -> None:
    for key, value in body.items():
        where = f"train_loader.dataset.{key}"
        rule = table.get(key)
        if rule is None:
            raise out.fail(where, "not supported here (see `python -m foundry.compat.llmfoundry --table`)")
        if key == "split":
            out.set("data.train_split", value)
        elif key == "streams":
            _streams(out, value or {}, text=text)
        elif key == "decoder_only_format" and value is not True:
            raise out.fail(
                where, "false (encoder-decoder rows) is not supported: models here are decoder-only"
            )
        elif key == "allow_pad_trimming" and value:
            out.ignore(where, "true: " + LLM_FOUNDRY_FINETUNE_KEYS["allow_pad_trimming"])
        elif rule.status == TRANSLATED:
            out.set(rule.here, value)
        else:
            out.note(where, rule)


def _streams(out: Out, streams: Mapping[str, Any], *, text: bool) -> None:
    if not text:
        if len(streams) != 1:
            raise out.fail("train_loader.dataset.streams", LLM_FOUNDRY_FINETUNE_KEYS["streams"])
        ((stream_name, body),) = streams.items()
        for k, v in (body or {}).items():
            if k not in ("local", "remote", "split"):
                raise out.fail(
                    f"train_loader.dataset.streams.{stream_name}.{k}",
                    "one finetuning source: local, remote and split only",
                )
            out.set("data.train_split" if k == "split" else f"data.{k}", v)
        return
    for stream_name, body in streams.items():
        # creates the node; every field is set below
        out.choose(f"+data/streams@data.streams.{stream_name}", "c4")
        prefix = f"data.streams.{stream_name}"
        out.set(f"{prefix}.path", None)
        out.set(f"{prefix}.eval_split", None)
        for k in keys.STREAM_FIELDS:
            out.set(f"{prefix}.{k}", (body or {}).get(k))
        for k in body or {}:
            if k not in keys.STREAM_FIELDS:
                raise out.fail(
                    f"train_loader.dataset.streams.{stream_name}.{k}",
                    f"streams here take {list(keys.STREAM_FIELDS)}",
                )
    out.set("data.local", None)
    out.set("data.eval_split", None)


def _eval_loader(
    out: Out, train: Mapping[str, Any], evaluation: Mapping[str, Any] | None, *, text: bool
) -> None:
    if evaluation is None:
        out.set("data.eval_split", None)
        return
    if evaluation.get("name") != train.get("name"):
        out.refuse(
            "eval_loader.name", f"{evaluation.get('name')!r}: the eval split is read like the train data here"
        )
    dataset, train_dataset = evaluation.get("dataset") or {}, train.get("dataset") or {}
    same_anyway = {"split", "shuffle", "shuffle_seed", "streams", "drop_last", "num_workers"}
    for key, value in dataset.items():
        if key == "split":
            if dataset.get("streams") is None:
                out.set("data.eval_split", value)
        elif key == "streams":
            for stream_name, body in (value or {}).items():
                if text and stream_name in (train_dataset.get("streams") or {}):
                    out.set(f"data.streams.{stream_name}.eval_split", (body or {}).get("split"))
                else:
                    out.refuse(
                        f"eval_loader.dataset.streams.{stream_name}", "no train stream of that name here"
                    )
        elif key not in same_anyway and value != train_dataset.get(key):
            out.refuse(
                f"eval_loader.dataset.{key}",
                f"{value!r} differs from train_loader's; the eval split shares "
                "the train data's settings here",
            )


def callbacks(out: Out, body: Mapping[str, Any] | None) -> None:
    body = body or {}
    basic = ("speed_monitor", "lr_monitor", "memory_monitor", "runtime_estimator")
    out.choose("callbacks", "default" if any(k in body for k in basic) else "_callbacks")
    if any(k in body for k in basic):
        for k in basic:
            if k not in body:
                out.set(f"callbacks.{k}", False if k.endswith("_monitor") and k != "speed_monitor" else None)
    params = {
        "speed_monitor": {"window_size": "window_size", "gpu_flops_available": "peak_flops"},
        "runtime_estimator": {"skip_batches": "skip_steps"},
        "lr_monitor": {},
        "memory_monitor": {},
    }
    for name, kwargs in body.items():
        if name == "hf_checkpointer":
            _hf_checkpointer(out, kwargs or {})
            continue
        if name not in params:
            out.refuse(f"callbacks.{name}", "no such callback here; the run goes on without it")
            continue
        for k, v in (kwargs or {}).items():
            if k == "time_unit":
                out.ignore(f"callbacks.{name}.{k}", "times are logged in seconds here")
            elif k in params[name]:
                out.set(f"callbacks.{name}.{params[name][k]}", v)
            else:
                out.refuse(f"callbacks.{name}.{k}", f"callbacks.{name} here has no such option")


def _hf_checkpointer(out: Out, kwargs: Mapping[str, Any]) -> None:
    out.choose("+hf_export", "default")
    for k, v in kwargs.items():
        where = f"callbacks.hf_checkpointer.{k}"
        if k == "save_folder":
            out.set("callbacks.hf_export.save_folder", v)
        elif k == "save_interval":
            text = duration(out, where, v)
            if text.endswith("ba"):
                out.set("callbacks.hf_export.every_n_steps", int(text[:-2]))
            else:
                out.refuse(
                    where, f"{v!r}: exports are every N steps here (`Nba`); only the final one is written"
                )
        elif k == "precision":
            out.set(
                "callbacks.hf_export.dtype",
                {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}.get(v, v),
            )
        else:
            out.refuse(where, "not supported by callbacks.hf_export")
