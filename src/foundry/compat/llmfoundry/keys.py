"""Where each llm-foundry 0.22 training-YAML key goes here: the tables the translator runs on.

Design note: the translator (`translate.py`) reads these tables for every key it copies, ignores or refuses,
and `--table` prints them as the mapping table of docs/guides/from-llm-foundry.md, so the documentation is
the code's own data and cannot drift. A `Rule` says where the key lands (`here`), how
(`note`) and its `status`:

- `translated`: the value is carried over (copied, or converted as the note says);
- `ignored`: the key has no effect here and the run is the same without it (the note says why);
- `refused`: not supported; the translation goes on without it and prints `refused: <key>: <reason>`, so the
  run differs from llm-foundry's in that respect (a callback, a logger, an algorithm it would have run).

A key whose loss cannot be worked around (an unknown model option, an optimizer we lack) is not in a table as
refused: the translator stops with an `error:` line naming it. Top-level keys reuse `foundry.config`'s
`LLM_FOUNDRY_KEYS` pointers (the ones `train.py` prints for an llm-foundry key given to it).
"""

from __future__ import annotations

from dataclasses import fields
from typing import NamedTuple

from foundry.config import LLM_FOUNDRY_FINETUNE_KEYS, LLM_FOUNDRY_KEYS
from foundry.data.config import FinetuneDataConfig, StreamConfig, TextDataConfig
from foundry.models.config import MPTModelConfig

__all__ = [
    "ALGORITHMS",
    "CALLBACKS",
    "FINETUNE_DATASET",
    "FSDP",
    "HF_MODEL",
    "IGNORED",
    "LOADER",
    "LOGGERS",
    "MPT_MODEL",
    "OPTIMIZERS",
    "PRECISIONS",
    "REFUSED",
    "Rule",
    "SCHEDULERS",
    "TEXT_DATASET",
    "TOKENIZER",
    "TOP",
    "TRANSLATED",
    "markdown_table",
]

TRANSLATED, IGNORED, REFUSED = "translated", "ignored", "refused"


class Rule(NamedTuple):
    """Where one llm-foundry key goes (`here`), how or why not (`note`), and whether it is carried over."""

    here: str
    note: str = ""
    status: str = TRANSLATED


def _top(key: str, note: str = "", status: str = TRANSLATED, here: str | None = None) -> Rule:
    """A top-level rule whose destination is `foundry.config.LLM_FOUNDRY_KEYS`'s pointer when it has one."""
    return Rule(here or LLM_FOUNDRY_KEYS[key], note, status)


_NO_EFFECT = "no effect here"
TOP: dict[str, Rule] = {
    "variables": Rule("(resolved)", "`${variables.x}` interpolations are resolved before translating"),
    "model": Rule("model=_mpt / model=_hf_causal_lm", "see the model rows"),
    "tokenizer": Rule("tokenizer=_tokenizer", "see the tokenizer rows"),
    "train_loader": _top(
        "train_loader", "name `text` -> data=_text, `finetuning` -> data=_finetune + task=finetune"
    ),
    "eval_loader": _top(
        "eval_loader", "its split becomes data.eval_split; other keys must match train_loader's"
    ),
    "optimizer": Rule("optimizer=_<name>", "see the optimizer rows"),
    "scheduler": Rule("scheduler=_<name>", "see the scheduler rows"),
    "algorithms": Rule("trainer.grad_clip_norm", "see the algorithm rows; absent: null (no clipping)"),
    "fsdp_config": _top(
        "fsdp_config", "see the fsdp_config rows; absent: parallelism=ddp (Composer's default)"
    ),
    "precision": _top(
        "precision", "fp32, amp_bf16, amp_fp16, amp_fp8 (llm-foundry's default amp_bf16 when absent)"
    ),
    "max_duration": _top("max_duration", "a bare integer means epochs (Composer): 2 -> 2ep"),
    "eval_interval": _top("eval_interval", "a bare integer means epochs (Composer's default 1 -> 1ep)"),
    "eval_first": _top("eval_first"),
    "eval_subset_num_batches": _top("eval_subset_num_batches"),
    "global_train_batch_size": _top("global_train_batch_size"),
    "device_train_microbatch_size": _top("device_train_microbatch_size", "an int or `auto`"),
    "device_eval_batch_size": _top("device_eval_batch_size", "also eval.batch_size with icl_tasks"),
    "seed": Rule("seed"),
    "run_name": Rule("run_name", "null or absent: $RUN_NAME, else a fresh name (as llm-foundry)"),
    "max_seq_len": Rule(
        "eval.max_seq_len (with icl_tasks)", "the model's length is model.max_seq_len; otherwise no effect"
    ),
    "save_folder": _top(
        "save_folder", "`{run_name}` expands; absent or null: no checkpoints (checkpoint=_checkpoint)"
    ),
    "save_interval": _top("save_interval", "a bare integer means epochs"),
    "save_num_checkpoints_to_keep": _top("save_num_checkpoints_to_keep"),
    "save_weights_only": _top("save_weights_only"),
    "save_overwrite": Rule(
        "", "new checkpoints go to new step folders; an existing save_folder autoresumes", IGNORED
    ),
    "save_filename": Rule("", "checkpoint names are fixed here (step folders with a manifest)", IGNORED),
    "save_latest_filename": Rule("", "the newest complete checkpoint is found from the manifests", IGNORED),
    "load_path": _top(
        "load_path", "a Composer `.pt`, `.tar` or sharded folder is read by `foundry.compat.composer`"
    ),
    "load_weights_only": _top("load_weights_only"),
    "load_strict_model_weights": _top("load_strict_model_weights"),
    "load_ignore_keys": Rule(
        "",
        "not supported: a checkpoint loads whole (checkpoint.load_strict=false skips mismatched names)",
        REFUSED,
    ),
    "autoresume": _top(
        "autoresume", "llm-foundry's default false is written out (ours is on with a save_folder)"
    ),
    "loggers": _top("loggers", "see the logger rows"),
    "callbacks": Rule("callbacks.*", "see the callback rows; absent: none"),
    "icl_tasks": _top("icl_tasks", "a path -> eval.icl_tasks_file, a list -> eval.icl_tasks"),
    "eval_gauntlet": _top("eval_gauntlet", "a path or the mapping"),
    "icl_seq_len": _top("icl_seq_len"),
    "icl_subset_num_batches": Rule(
        "", "not supported: eval.limit caps examples per task, not batches", REFUSED
    ),
    "console_log_interval": _top("console_log_interval", "`Nba` or N steps"),
    "progress_bar": _top("progress_bar"),
    "log_to_console": Rule("", "the console logger is always on here (logger.console)", IGNORED),
    "python_log_level": Rule("", "log levels come from Hydra's job_logging (conf/hydra/)", IGNORED),
    "log_config": Rule("", "the resolved config is always recorded (run.json, config.yaml)", IGNORED),
    "dist_timeout": Rule("", "the collective timeout is not configurable here", IGNORED),
    "expandable_segments": Rule(
        "", "a CUDA allocator setting: export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", IGNORED
    ),
    "accumulate_train_batch_on_tokens": _top("accumulate_train_batch_on_tokens"),
    "train_subset_num_batches": _top("train_subset_num_batches"),
    "compile_config": Rule("trainer.compile", "any mapping -> true (torch.compile with default options)"),
    "dataset": Rule(
        "",
        "not an llm-foundry key (it refuses it as an unused parameter): a holder for a YAML anchor, whose "
        "values reach the loaders through `<<:`",
        IGNORED,
    ),
    "code_paths": Rule(
        "", "not supported: import your code with preprocessing_fn `module:function`", REFUSED
    ),
    "profiler": Rule("", "not supported: use torch.profiler outside the trainer", REFUSED),
    "tp_config": Rule("", "tensor parallelism is not supported", REFUSED),
    "metadata": Rule("", "not recorded here", IGNORED),
    "spin_dataloaders": Rule("", "no effect here (data order is resumed from the loader state)", IGNORED),
}
"""Top-level keys of an llm-foundry training YAML."""

# loss_fn: values differ
_MPT_FIELDS = {f.name for f in fields(MPTModelConfig)} - {"peft_config", "loss_fn"}
MPT_MODEL: dict[str, Rule] = {
    **{k: Rule(f"model.{k}") for k in sorted(_MPT_FIELDS)},
    "name": Rule("model=_mpt", "mpt_causal_lm"),
    "loss_fn": Rule(
        "",
        "the same value as torch_ and fused_crossentropy; `model.loss_fn=chunked_crossentropy` here also "
        "skips the logits' memory",
        IGNORED,
    ),
    "fc_type": Rule("", "`torch` only (the default); `te` is an error", IGNORED),
    "use_pad_tok_in_ffn": Rule("", "true only (the default); false is an error", IGNORED),
    "fuse_norm_attn_norm": Rule("", "an activation-checkpointing granularity; the math is the same", IGNORED),
    "activation_checkpointing_target": Rule(
        "", "parallelism.activation_checkpointing wraps each block", IGNORED
    ),
    "use_train_metrics": Rule("", "the train loss is always logged", IGNORED),
    "additional_train_metrics": Rule("", "metrics are the loss and perplexity here", REFUSED),
    "additional_eval_metrics": Rule("", "metrics are the loss and perplexity here", REFUSED),
}
"""`model:` keys of `name: mpt_causal_lm` (every `MPTModelConfig` field copies; `attn_config`, `ffn_config`
and `init_config` key by key, an unknown one is an error)."""

HF_MODEL: dict[str, Rule] = {
    "name": Rule("model=_hf_causal_lm", "hf_causal_lm"),
    "pretrained_model_name_or_path": Rule(
        "model.pretrained_model_name_or_path", "offline: a cached hub name or a folder"
    ),
    "pretrained": Rule("model.pretrained", "llm-foundry's default true is written out"),
    "trust_remote_code": Rule("model.trust_remote_code", "MPT is built in and needs none"),
    "init_device": Rule("model.init_device", "`mixed` -> meta"),
    "config_overrides": Rule("model.config_overrides"),
    "attn_implementation": Rule("model.attn_implementation"),
    "use_flash_attention_2": Rule("model.attn_implementation", "true -> flash_attention_2"),
    "use_auth_token": Rule("", "models load offline (HF cache or a folder); no hub token is read", IGNORED),
    "use_train_metrics": MPT_MODEL["use_train_metrics"],
    "peft_config": Rule(
        "", "add +peft=lora and model.peft_config.* overrides (conf/peft/lora.yaml)", REFUSED
    ),
    "additional_train_metrics": MPT_MODEL["additional_train_metrics"],
    "additional_eval_metrics": MPT_MODEL["additional_eval_metrics"],
}
"""`model:` keys of `name: hf_causal_lm` (any other is an error)."""

TOKENIZER: dict[str, Rule] = {
    "name": Rule("tokenizer.name", "a hub name must be in the HF cache; or a tokenizer.json / folder"),
    "kwargs.model_max_length": Rule("tokenizer.model_max_length"),
    "kwargs.padding_side": Rule("tokenizer.padding_side"),
    **{f"kwargs.{k}": Rule(f"tokenizer.{k}") for k in ("eos_token", "bos_token", "unk_token", "pad_token")},
    "kwargs.trust_remote_code": Rule("", "tokenizers load from tokenizer.json or a saved folder", IGNORED),
}
"""`tokenizer:` keys (any other `kwargs` key is an error)."""

LOADER: dict[str, Rule] = {
    "name": Rule("data=_text / data=_finetune", "text or finetuning"),
    "dataset": Rule("data.*", "see the dataset rows"),
    "num_workers": Rule("data.num_workers"),
    "drop_last": Rule("", LLM_FOUNDRY_FINETUNE_KEYS["drop_last"], IGNORED),
    "pin_memory": Rule(
        "data.pin_memory", "text data; finetuning: " + LLM_FOUNDRY_FINETUNE_KEYS["pin_memory"]
    ),
    "prefetch_factor": Rule("", LLM_FOUNDRY_FINETUNE_KEYS["prefetch_factor"], IGNORED),
    "persistent_workers": Rule("", LLM_FOUNDRY_FINETUNE_KEYS["persistent_workers"], IGNORED),
    "timeout": Rule("", LLM_FOUNDRY_FINETUNE_KEYS["timeout"], IGNORED),
}
"""`train_loader:` / `eval_loader:` keys around `dataset`."""

_TEXT_OURS = {
    "train_split",
    "eval_split",
    "streams",
    "local_root",
    "remote_root",
    "create_hint",
    "on_mixture_change",
}
TEXT_DATASET: dict[str, Rule] = {
    **{k: Rule(f"data.{k}") for k in sorted({f.name for f in fields(TextDataConfig)} - _TEXT_OURS)},
    "split": Rule("data.train_split", "the eval_loader's split -> data.eval_split"),
    "streams": Rule(
        "data.streams.<name>.*",
        "remote, local, split (eval split from the eval_loader), proportion, repeat, choose",
    ),
    "eos_token_id": Rule("", "rows are read as stored; documents are split at the tokenizer's eos", IGNORED),
    "bos_token_id": Rule("", "rows are read as stored", IGNORED),
}
"""`train_loader.dataset` keys of `name: text`."""

STREAM_FIELDS = tuple(f.name for f in fields(StreamConfig) if f.name not in ("path", "eval_split"))
"""Stream keys copied as they are (`split` is the training split; the eval loader's stream split ->
eval_split)."""

_FT_OURS = {"train_split", "eval_split"}
FINETUNE_DATASET: dict[str, Rule] = {
    **{k: Rule(f"data.{k}") for k in sorted({f.name for f in fields(FinetuneDataConfig)} - _FT_OURS)},
    "split": Rule("data.train_split", LLM_FOUNDRY_FINETUNE_KEYS["split"]),
    "streams": Rule("data.local / data.remote", "one stream only; " + LLM_FOUNDRY_FINETUNE_KEYS["streams"]),
    "decoder_only_format": Rule("", "true: models here are decoder-only (false is an error)", IGNORED),
    "allow_pad_trimming": Rule(
        "",
        "false: rows keep max_seq_len here too (true: "
        + LLM_FOUNDRY_FINETUNE_KEYS["allow_pad_trimming"]
        + ")",
        IGNORED,
    ),
    "safe_load": Rule("", "local files are read as data (no remote code)", IGNORED),
}
"""`train_loader.dataset` keys of `name: finetuning`."""

OPTIMIZERS: dict[str, str] = {
    "decoupled_adamw": "_decoupled_adamw",
    "adamw": "_adamw",
    "decoupled_lionw": "_decoupled_lionw",
}
"""llm-foundry optimizer name -> our `optimizer` group option (its fields copy by name)."""

SCHEDULERS: dict[str, str] = {
    "cosine_with_warmup": "_cosine_warmup",
    "linear_decay_with_warmup": "_linear_warmup",
    "constant_with_warmup": "_constant_warmup",
    "inv_sqrt_with_warmup": "_inv_sqrt_warmup",
    "warmup_stable_decay": "_wsd",
}
"""llm-foundry scheduler name -> our `scheduler` group option (its fields copy by name)."""

# amp_fp8: torchao here, TransformerEngine there
PRECISIONS = ("fp32", "amp_bf16", "amp_fp16", "amp_fp8")

FSDP: dict[str, Rule] = {
    "sharding_strategy": Rule("parallelism.sharding_strategy", "NO_SHARD -> parallelism=ddp"),
    "mixed_precision": Rule("parallelism.mixed_precision", "FULL, DEFAULT or PURE"),
    "activation_checkpointing": Rule("parallelism.activation_checkpointing"),
    "cpu_offload": Rule("parallelism.cpu_offload"),
    "state_dict_type": Rule("checkpoint.save_format", "full -> full; sharded, local -> sharded"),
    "activation_checkpointing_reentrant": Rule("", "checkpointing is always non-reentrant", IGNORED),
    "limit_all_gathers": Rule("", "an FSDP1 rate limiter; FSDP2 needs none", IGNORED),
    "backward_prefetch": Rule("", "FSDP2 prefetches the next block itself", IGNORED),
    "forward_prefetch": Rule("", "FSDP2 prefetches the next block itself", IGNORED),
    "sync_module_states": Rule("", "every rank initialises from the same seed", IGNORED),
    "use_orig_params": Rule("", "FSDP2 always keeps the original parameters", IGNORED),
    "verbose": Rule("", _NO_EFFECT, IGNORED),
    "activation_cpu_offload": Rule("", "not supported (false only): activations stay on the device", REFUSED),
    "load_monolith_rank0_only": Rule("", "checkpoints load on every rank", IGNORED),
}
"""`fsdp_config:` keys (FSDP1's; FSDP2 here)."""

CALLBACKS: dict[str, Rule] = {
    "speed_monitor": Rule("callbacks.speed_monitor", "window_size; gpu_flops_available -> peak_flops"),
    "lr_monitor": Rule("callbacks.lr_monitor"),
    "memory_monitor": Rule("callbacks.memory_monitor"),
    "runtime_estimator": Rule("callbacks.runtime_estimator", "skip_batches -> skip_steps"),
    "hf_checkpointer": Rule(
        "+hf_export=default callbacks.hf_export.*",
        "save_folder; save_interval (`Nba`) -> every_n_steps; precision -> dtype",
    ),
}
"""`callbacks:` entries carried over; every other callback is refused by name (the run goes on without it)."""

LOGGERS: dict[str, Rule] = {
    "wandb": Rule(
        "logger=wandb logger.wandb.*", "project, entity, group, tags; name: run_name names the run"
    ),
    "mlflow": Rule("logger=mlflow logger.mlflow.*", "tracking_uri, experiment_name -> experiment, tags"),
    "tensorboard": Rule("logger=tensorboard logger.tensorboard.log_dir", "log_dir"),
}
"""`loggers:` entries carried over; every other logger is refused by name."""

ALGORITHMS: dict[str, Rule] = {
    "gradient_clipping": Rule("trainer.grad_clip_norm", "clipping_type norm only; clipping_threshold"),
}
"""`algorithms:` carried over; every other Composer algorithm is refused by name
(the run goes on without it)."""


def markdown_table() -> str:
    """The key mapping as a markdown table (what `python -m foundry.compat.llmfoundry --table` prints)."""
    rows: list[tuple[str, Rule]] = [(k, r) for k, r in TOP.items()]
    rows += [(f"model.{k}", r) for k, r in MPT_MODEL.items() if k not in _MPT_FIELDS]
    rows.append(("model.<MPT field>", Rule("model.<same>", ", ".join(sorted(_MPT_FIELDS)))))
    rows += [(f"model.{k} (hf_causal_lm)", r) for k, r in HF_MODEL.items()]
    rows += [(f"tokenizer.{k}", r) for k, r in TOKENIZER.items()]
    rows += [(f"train_loader.{k}", r) for k, r in LOADER.items()]
    rows += [(f"train_loader.dataset.{k} (text)", r) for k, r in TEXT_DATASET.items()]
    rows += [(f"train_loader.dataset.{k} (finetuning)", r) for k, r in FINETUNE_DATASET.items()]
    rows += [
        (f"optimizer.name: {k}", Rule(f"optimizer={v}", "lr, betas, eps, weight_decay, ... by name"))
        for k, v in OPTIMIZERS.items()
    ]
    rows += [
        (f"scheduler.name: {k}", Rule(f"scheduler={v}", "t_warmup, alpha_f, ... by name"))
        for k, v in SCHEDULERS.items()
    ]
    rows += [(f"algorithms.{k}", r) for k, r in ALGORITHMS.items()]
    rows += [(f"fsdp_config.{k}", r) for k, r in FSDP.items()]
    rows += [(f"callbacks.{k}", r) for k, r in CALLBACKS.items()]
    rows += [(f"loggers.{k}", r) for k, r in LOGGERS.items()]
    lines = ["| llm-foundry key | here | status | note |", "|---|---|---|---|"]
    for key, rule in rows:
        here = f"`{rule.here}`" if rule.here else ""
        lines.append(f"| `{key}` | {here} | {rule.status} | {rule.note.replace('|', '/')} |")
    return "\n".join(lines)
