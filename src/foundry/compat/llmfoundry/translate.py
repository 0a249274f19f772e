"""An llm-foundry training config (a resolved mapping) -> `train.py` group choices and key values, plus notes.

Design note: one pure function, `translate`, walks every top-level key of the resolved YAML and hands it to
its section (`sections.py` for model, tokenizer, loaders and callbacks; the rest here). Each key ends in
exactly one place: a value in `Translation.values`, a group choice, or a `Note` (ignored or refused, with the
reason from `keys.py`); a key no table knows is refused by name, and a value the run cannot do without
raises `ConfigError` naming the key and the fix. Group choices pick the bare schema nodes (`model=_mpt`,
`trainer=_trainer`, ...) so every value the YAML leaves out is the schema default, and where our default
differs from llm-foundry's (attention `flash`, no clipping, autoresume off, text data unshuffled) the
llm-foundry default is written out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from foundry.compat.llmfoundry import keys, sections
from foundry.compat.llmfoundry.evaluation import eval_section, is_eval_yaml, translate_eval
from foundry.compat.llmfoundry.keys import TRANSLATED
from foundry.compat.llmfoundry.result import Note, Out, Translation, duration
from foundry.optim import OPTIMIZER_SCHEMAS, SCHEDULER_SCHEMAS

__all__ = ["Note", "Out", "Translation", "duration", "translate"]


def _schema_fields(schema: type) -> set[str]:
    return {f.name for f in fields(schema)} - {"name"}


def _named(out: Out, key: str, body: Any, table: dict[str, str], schemas: Mapping[str, type]) -> None:
    """`optimizer:` or `scheduler:`: the name picks our group option, every other key copies by name."""
    if not isinstance(body, Mapping) or body.get("name") not in table:
        name = body.get("name") if isinstance(body, Mapping) else body
        raise out.fail(f"{key}.name", f"{name!r} is not supported here; use one of {sorted(table)}")
    option = table[body["name"]]
    out.choose(key, option)
    allowed = _schema_fields(schemas[option])
    for k, v in body.items():
        if k == "name":
            continue
        if k not in allowed:
            raise out.fail(f"{key}.{k}", f"{body['name']} here has no {k!r}; its keys: {sorted(allowed)}")
        out.set(f"{key}.{k}", v)


def _algorithms(out: Out, body: Any) -> None:
    # llm-foundry clips only with the gradient_clipping algorithm
    out.set("trainer.grad_clip_norm", None)
    for name, kwargs in (body or {}).items():
        if name != "gradient_clipping":
            out.refuse(
                f"algorithms.{name}", "Composer algorithm not implemented here; the run goes on without it"
            )
            continue
        kind = (kwargs or {}).get("clipping_type", "norm")
        if kind != "norm":
            out.refuse(
                "algorithms.gradient_clipping.clipping_type",
                f"{kind!r}: only norm clipping here (none applied)",
            )
            continue
        out.set("trainer.grad_clip_norm", (kwargs or {}).get("clipping_threshold"))


def _fsdp(out: Out, body: Any) -> None:
    if body is None:
        # Composer wraps in DDP when several ranks run without fsdp_config
        out.choose("parallelism", "ddp")
        return
    out.choose("parallelism", "fsdp")
    for k, v in body.items():
        rule = keys.FSDP.get(k)
        where = f"fsdp_config.{k}"
        if rule is None:
            out.refuse(where, "not supported by FSDP2 here; the run goes on without it")
        elif k == "sharding_strategy" and v == "NO_SHARD":
            out.choose("parallelism", "ddp")
        elif k == "state_dict_type":
            out.set("checkpoint.save_format", "full" if v == "full" else "sharded")
        elif k == "activation_cpu_offload" and not v:
            continue
        elif k == "activation_checkpointing_reentrant" and v:
            out.ignore(where, "true: checkpointing here is non-reentrant (same values, less memory)")
        elif rule.status == TRANSLATED:
            if isinstance(v, Mapping):
                raise out.fail(where, "a mapping is not supported; use FULL, DEFAULT or PURE")
            out.set(rule.here, v)
        else:
            out.note(where, rule)


def _interval_steps(out: Out, key: str, value: Any) -> int | None:
    text = duration(out, key, value)
    if not text.endswith("ba"):
        out.refuse(key, f"{value!r}: here this counts optimizer steps (`Nba`); 1 kept")
        return None
    return int(text[:-2])


def _trainer_defaults(out: Out) -> None:
    """llm-foundry's defaults for trainer keys the YAML leaves out (set before the YAML's own values)."""
    out.choose("trainer", "_trainer")
    for key, value in (
        ("eval_interval", "1ep"),
        ("eval_first", False),
        ("eval_subset_num_batches", -1),
        ("precision", "amp_bf16"),
        ("device_train_microbatch_size", "auto"),
        ("grad_clip_norm", None),
        ("log_interval", 1),
        ("progress_bar", False),
        # Composer counts attention_mask ones (tok durations: padded, below)
        ("token_counting", "non_pad"),
    ):
        out.set(f"trainer.{key}", value)
    out.choose("checkpoint", "_checkpoint")
    out.set("checkpoint.autoresume", False)


_TRAINER = (
    "eval_first",
    "eval_subset_num_batches",
    "global_train_batch_size",
    "device_eval_batch_size",
    "progress_bar",
    "accumulate_train_batch_on_tokens",
    "train_subset_num_batches",
)
_CHECKPOINT = (
    "save_folder",
    "save_num_checkpoints_to_keep",
    "save_weights_only",
    "load_path",
    "load_weights_only",
    "autoresume",
)


def _scalar(out: Out, key: str, value: Any, cfg: Mapping[str, Any]) -> bool:
    """Top-level keys that map to one value; False when `key` is not one of them."""
    if key in _TRAINER:
        out.set(f"trainer.{key}", value)
    elif key in _CHECKPOINT:
        out.set(f"checkpoint.{key}", value)
    elif key in ("max_duration", "eval_interval"):
        out.set(f"trainer.{key}", duration(out, key, value))
        if key == "max_duration" and out.tr.values[f"trainer.{key}"].endswith("tok"):
            # a tok duration is converted to steps from B x S
            out.set("trainer.token_counting", "padded")
    elif key == "save_interval":
        out.set("checkpoint.save_interval", duration(out, key, value))
    elif key == "load_strict_model_weights":
        out.set("checkpoint.load_strict", value)
    elif key == "device_train_microbatch_size":
        if value != "auto" and (isinstance(value, bool) or not isinstance(value, int)):
            raise out.fail(
                key, f"{value!r}: use a positive int or auto (fractional microbatches are not supported)"
            )
        out.set("trainer.device_train_microbatch_size", value)
    elif key == "precision":
        if value not in keys.PRECISIONS:
            raise out.fail(key, f"{value!r} is not supported here; use one of {list(keys.PRECISIONS)}")
        out.set("trainer.precision", value)
    elif key == "console_log_interval":
        steps = _interval_steps(out, key, value)
        if steps is not None:
            out.set("trainer.log_interval", steps)
    elif key == "seed":
        out.set("seed", value)
    elif key == "run_name":
        if value is not None:
            out.set("run_name", value)
    elif key == "compile_config":
        out.set("trainer.compile", value is not None)
    elif key == "max_seq_len":
        if cfg.get("icl_tasks") is not None and cfg.get("icl_seq_len") is None:
            out.set("eval.max_seq_len", value)
    elif key == "icl_seq_len":
        out.set("eval.max_seq_len", value)
    else:
        return False
    return True


def _loggers(out: Out, body: Any) -> None:
    chosen = ["console"]
    renames = {"experiment_name": "experiment"}
    allowed = {
        "wandb": ("project", "entity", "group", "tags"),
        "mlflow": ("tracking_uri", "experiment_name", "tags"),
        "tensorboard": ("log_dir",),
    }
    for name, kwargs in (body or {}).items():
        if name not in keys.LOGGERS:
            out.refuse(
                f"loggers.{name}", f"no {name} logger here (console, jsonl, wandb, mlflow, tensorboard)"
            )
            continue
        chosen.append(name)
        for k, v in (kwargs or {}).items():
            if k not in allowed[name]:
                out.refuse(f"loggers.{name}.{k}", f"not supported by logger.{name} here")
            else:
                out.set(f"logger.{name}.{renames.get(k, k)}", v)
    out.choose("logger", chosen if len(chosen) > 1 else "console")


def translate(cfg: Mapping[str, Any], *, source: str = "YAML") -> Translation:
    """Translates a resolved llm-foundry training config.

    Args:
        cfg: The YAML as plain data, its `${variables.x}` interpolations resolved (`load.load_yaml`).
        source: How errors name the file.

    Returns:
        The group choices, values and notes (every key of `cfg` is in exactly one of them).

    Raises:
        ConfigError: A key or value the run cannot do without (an unknown model option, an optimizer or
            scheduler we lack, a missing mandatory key), naming it and the fix.
    """
    # a YAML for llm-foundry's eval entry (`models:`) -> task=eval
    if is_eval_yaml(cfg):
        try:
            return translate_eval(cfg, source=source)
        except (AttributeError, TypeError, KeyError, IndexError, ArithmeticError) as err:
            raise Out(source).fail(
                "config",
                "holds a value of a type llm-foundry does not take here "
                f"({type(err).__name__}: {str(err)[:200]})",
            ) from None
    out = Out(source)
    for required in (
        "model",
        "train_loader",
        "max_duration",
        "global_train_batch_size",
        "optimizer",
        "scheduler",
    ):
        if cfg.get(required) is None:
            raise out.fail(required, "missing: llm-foundry requires it (and so does the translation)")
    for section in ("model", "train_loader", "optimizer", "scheduler"):
        if not isinstance(cfg[section], Mapping):
            raise out.fail(
                section, f"must be a mapping of llm-foundry keys, got {type(cfg[section]).__name__}"
            )
    where = ["config"]
    try:
        _translate(out, cfg, where)
    except (
        AttributeError,
        TypeError,
        KeyError,
        IndexError,
        ArithmeticError,
    ) as err:
        # a value no table expects
        raise out.fail(
            where[0],
            "holds a value of a type llm-foundry does not take here "
            f"({type(err).__name__}: {str(err)[:200]})",
        ) from None
    return out.tr


def _translate(out: Out, cfg: Mapping[str, Any], where: list[str]) -> None:
    """`translate`'s walk over the keys; `where[0]` is the key being translated (for the error of a crash)."""
    _trainer_defaults(out)
    out.set("task", "finetune" if cfg["train_loader"].get("name") == "finetuning" else "pretrain")
    if "fsdp_config" not in cfg:
        _fsdp(out, None)
    if "algorithms" not in cfg:
        _algorithms(out, None)
    if "callbacks" not in cfg:
        sections.callbacks(out, None)
    if "loggers" not in cfg:
        _loggers(out, None)
    for key, value in cfg.items():
        where[0] = key
        rule = keys.TOP.get(key)
        if key == "model":
            sections.model(out, value)
        elif key == "tokenizer":
            sections.tokenizer(out, value)
        elif key == "train_loader":
            sections.loaders(out, value, cfg.get("eval_loader"))
        elif key in ("eval_loader", "variables", "icl_tasks", "eval_gauntlet"):
            # with train_loader; resolved; in _eval
            continue
        elif key in ("optimizer", "scheduler"):
            table, schemas = (
                (keys.OPTIMIZERS, OPTIMIZER_SCHEMAS)
                if key == "optimizer"
                else (keys.SCHEDULERS, SCHEDULER_SCHEMAS)
            )
            _named(out, key, value, table, schemas)
        elif key == "algorithms":
            _algorithms(out, value)
        elif key == "fsdp_config":
            _fsdp(out, value)
        elif key == "loggers":
            _loggers(out, value)
        elif key == "callbacks":
            sections.callbacks(out, value)
        elif _scalar(out, key, value, cfg):
            continue
        elif rule is not None:
            out.note(key, rule)
        else:
            out.refuse(
                key, "not an llm-foundry 0.22 training key (llm-foundry refuses it as an unused parameter)"
            )
    where[0] = "icl_tasks"
    eval_section(out, cfg)
