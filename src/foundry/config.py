"""The root `TrainConfig`, schema registration, and validation of a composed config.

Design note: `conf/train.yaml` composes onto the typed root schema `train_schema` (`TrainConfig`); each
config group's schema lives in one module, the `config.py` of the component that reads it
(`foundry/data/config.py` for `conf/data/`, `foundry/optim/config.py` for `optimizer` and `scheduler`, ...;
the schema import block below is the index, `tests/foundry/test_config_homes.py` the check), and is
registered here explicitly (`register_configs()`, never at import), so composing type-checks every value
before anything is built. Hydra lets `+key=value` add keys a schema does not declare (it opens the struct),
so `to_train_config` first rejects every undeclared key (`unknown_keys`, naming the closest declared one),
then converts the composed `DictConfig` to dataclasses with `OmegaConf.to_object` (running every
`__post_init__` check); both raise `foundry.errors.ConfigError`. The library only ever sees dataclasses.
The dispatcher `train.py` calls (`run_task`), the tasks and the sweep summary callback live in
`foundry.tasks`.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import TYPE_CHECKING, Any

from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from foundry.data.quickstart import quickstart_tokenizer_path
from foundry.errors import ConfigError
from foundry.eval import register_eval_configs
from foundry.models import register_model_configs
from foundry.optim import register_optim_configs
from foundry.run_name import register_run_name_resolver
from foundry.tokenizers import register_tokenizer_configs
from stackbase.names import check_name
from stackbase.secrets import redact_text

# isort: split
# Every config group's schema, each from its one home: the classes typing `conf/<group>/` are defined in the
# `config.py` of the component package that reads them, one module per group (`optimizer` and `scheduler`
# share `foundry/optim/config.py`; the groups that fill a node of another are homed with their component:
# `peft` in `foundry/models/peft/config.py`, `hf_export` in `foundry/callbacks/config.py`). `k8s` is the one
# group not imported here (`foundry.launch.config.K8sConfig`, read by `python -m foundry.launch.k8s`, which
# composes through this module). tests/foundry/test_config_homes.py checks the rule.
from foundry.callbacks.config import CallbacksConfig
from foundry.checkpoint.config import CheckpointConfig
from foundry.data.config import (
    FinetuneDataConfig,
    OfflineInstructDataConfig,
    QuickstartDataConfig,
    TextDataConfig,
)
from foundry.eval.config import EvalConfig
from foundry.loggers.config import LoggerConfig
from foundry.models.config import ModelConfig
from foundry.optim.config import OptimizerConfig, SchedulerConfig
from foundry.parallel.config import ParallelismConfig
from foundry.storage.config import StorageConfig
from foundry.tokenizers.config import TokenizerConfig
from foundry.train.config import TrainerConfig

__all__ = [
    "TASKS",
    "TrainConfig",
    "check_group_choices",
    "group_option_message",
    "register_configs",
    "to_train_config",
    "unknown_key_message",
    "unknown_keys",
]

TASKS = ("pretrain", "finetune", "eval")
GROUP_ONLY_KEYS = ("experiment", "debug", "sweep", "local")
"""Config groups of `conf/train.yaml` that pick files but are not `TrainConfig` fields (for suggestions)."""
LLM_FOUNDRY_KEYS = {
    "train_loader": "data=... and data.* (data.train_split)",
    "eval_loader": "data.eval_split",
    "icl_tasks": "eval=... (conf/eval/)",
    "fsdp_config": "parallelism=fsdp and parallelism.*",
    "loggers": "logger=...",
    "max_seq_len": "model.max_seq_len (data.max_seq_len follows it)",
    "max_duration": "trainer.max_duration",
    "eval_interval": "trainer.eval_interval",
    "global_train_batch_size": "trainer.global_train_batch_size",
    "device_train_microbatch_size": "trainer.device_train_microbatch_size",
    "precision": "trainer.precision",
    "save_folder": "checkpoint.save_folder",
    "load_path": "checkpoint.load_path",
    "autoresume": "checkpoint.autoresume",
    "load_weights_only": (
        "checkpoint.load_weights_only (task=finetune loads checkpoint.load_path's weights only)"
    ),
    "load_strict_model_weights": "checkpoint.load_strict",
    "save_interval": "checkpoint.save_interval",
    "save_num_checkpoints_to_keep": "checkpoint.save_num_checkpoints_to_keep",
    "save_weights_only": "checkpoint.save_weights_only",
    "eval_first": "trainer.eval_first",
    "eval_subset_num_batches": "trainer.eval_subset_num_batches",
    "device_eval_batch_size": "trainer.device_eval_batch_size",
    "algorithms": "trainer.grad_clip_norm (gradient_clipping); other Composer algorithms are not supported",
    "console_log_interval": "trainer.log_interval",
    "progress_bar": "trainer.progress_bar",
    "log_to_console": "logger=console",
    "eval_gauntlet": "eval.gauntlet",
    "icl_seq_len": "eval.max_seq_len",
    "accumulate_train_batch_on_tokens": "trainer.accumulate_train_batch_on_tokens",
    "train_subset_num_batches": "trainer.train_subset_num_batches",
}
"""Top-level keys of llm-foundry YAMLs and where they live here (`python -m foundry.compat.llmfoundry`
translates a whole YAML; its table, `foundry.compat.llmfoundry.keys.TOP`, starts from these)."""
LLM_FOUNDRY_FINETUNE_KEYS = {
    "name": "data=finetune/<name> picks finetuning data (llm-foundry's `name: finetuning`)",
    "dataset": "the data.* keys are llm-foundry's train_loader.dataset keys, flattened (data.hf_name=...)",
    "split": "data.train_split (and data.eval_split for the eval loader)",
    "decoder_only_format": "always true here (decoder-only models); remove it",
    "allow_pad_trimming": (
        "not supported: rows keep max_seq_len (fixed shapes); data.packing_ratio cuts padding"
    ),
    "drop_last": "not configurable: training drops a final partial batch, eval keeps every example",
    "streams": "not supported for finetuning data: one source per run (data.hf_name or data.local/remote)",
    "pin_memory": "not configurable (in-memory rows have no workers; MDS: data.num_workers)",
    "prefetch_factor": "not configurable (in-memory rows have no workers; MDS: data.num_workers)",
    "persistent_workers": "not configurable (MDS workers persist when data.num_workers > 0)",
    "timeout": "not configurable",
}
"""llm-foundry `train_loader`/`train_loader.dataset` keys of finetuning YAMLs, for `data=finetune/...`."""
if TYPE_CHECKING:
    DataConfig = TextDataConfig | FinetuneDataConfig
else:
    # OmegaConf 2.3 has no unions: the composed node keeps its own schema (checked below)
    DataConfig = Any
KEY_RULE = (
    "Every key must be declared by its schema: `key=value` sets one, and `+key=value` cannot add new ones "
    "(free-form values go under `+variables.<name>=value`)."
)


@dataclass(kw_only=True)
class TrainConfig:
    """The root of `conf/train.yaml`: one field per config group plus run-level keys."""

    task: str = "pretrain"
    """What `train.py` runs: `pretrain`, `finetune` (on `data=finetune/<name>`), or `eval`
    (ICL evaluation)."""
    run_name: str = "dev"
    """Names the run directory (`outputs/<run_name>`) and the W&B run; a named run autoresumes. `train.yaml`
    generates a fresh one (`pretrain-mpt-tiny-20261126-175501`, `foundry.run_name`) unless given."""
    seed: int = 17
    """Seeds Python, numpy and torch; the data shuffle seed when `data.shuffle_seed` is null."""
    model: ModelConfig
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig
    """Text (`data=quickstart|c4|...`, `TextDataConfig`) or finetuning rows (`data=finetune/<name>`)."""
    optimizer: OptimizerConfig
    scheduler: SchedulerConfig
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    """Per-store S3 settings by URL prefix (`conf/storage/`, `foundry.storage`)."""
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    eval: EvalConfig | None = None
    """The ICL evaluation config (`eval` group); null when no ICL eval is configured."""
    tags: list[str] = field(default_factory=list)
    """Free-form labels (logged to W&B)."""
    from_scratch: bool = False
    """`task=finetune` from random weights on purpose: without `checkpoint.load_path` (or pretrained
    `hf-causal-lm` weights) a finetuning run is refused unless this is true."""
    variables: dict[str, Any] = field(default_factory=dict)
    """A free namespace for `${variables.x}` interpolation; ignored otherwise."""

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task={self.task!r}: choose one of {list(TASKS)}")
        check_name(self.run_name, field="run_name")
        if redact_text(self.run_name) != self.run_name:
            raise ValueError(
                f"run_name={redact_text(self.run_name)!r} holds a credential (the value of a secret "
                "environment variable, or a key=value secret): it would name the run folder, the W&B run and "
                "every record in plain text; choose another run_name"
            )
        finetune_data = isinstance(self.data, FinetuneDataConfig)
        if self.task == "finetune" and not finetune_data:
            raise ValueError(
                f"task=finetune trains on prompt/response or chat rows, not {type(self.data).__name__}: pick "
                "data=finetune/<name> (conf/data/finetune/: instruct-cpu, dolly_hhrlhf, local-mds), or run "
                "experiment=finetune-cpu"
            )
        if self.task == "pretrain" and finetune_data:
            raise ValueError(
                "data=finetune/... holds finetuning rows (prompt/response or chat): add task=finetune"
            )


def register_configs() -> None:
    """Stores every schema node in Hydra's `ConfigStore` and registers the config's resolvers (idempotent;
    call before composing)."""
    # `${quickstart_tokenizer:<cache>,<corpus_mb>,<vocab_size>}`: the keyed tokenizer path
    # (conf/data/quickstart.yaml)
    OmegaConf.register_new_resolver("quickstart_tokenizer", quickstart_tokenizer_path, replace=True)
    # `${foundry.run_name:${task}}`: a fresh name unless the run is named
    register_run_name_resolver()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    register_model_configs(cs)
    register_optim_configs(cs)
    register_tokenizer_configs(cs)
    cs.store(group="data", name="_text", node=TextDataConfig)
    cs.store(group="data", name="_quickstart", node=QuickstartDataConfig)
    cs.store(group="data", name="_finetune", node=FinetuneDataConfig)
    cs.store(group="data", name="_finetune_instruct", node=OfflineInstructDataConfig)
    cs.store(group="trainer", name="_trainer", node=TrainerConfig)
    cs.store(group="parallelism", name="_parallelism", node=ParallelismConfig)
    cs.store(group="checkpoint", name="_checkpoint", node=CheckpointConfig)
    cs.store(group="logger", name="_logger", node=LoggerConfig)
    cs.store(group="callbacks", name="_callbacks", node=CallbacksConfig)
    cs.store(group="storage", name="_storage", node=StorageConfig)
    register_eval_configs(cs)


def unknown_keys(cfg: DictConfig) -> list[tuple[str, type, Any]]:
    """Every key of `cfg` that its node's schema (a dataclass) does not declare: `(full key, schema, value)`.

    Free-form nodes (`dict` fields such as `variables`) may hold any key; their children are still checked.
    """
    found: list[tuple[str, type, Any]] = []
    _collect_unknown(cfg, "", found)
    return found


def _collect_unknown(node: Any, path: str, found: list[tuple[str, type, Any]]) -> None:
    if not isinstance(node, DictConfig | ListConfig):
        return
    if node._is_none() or node._is_missing() or node._is_interpolation():
        return
    if isinstance(node, ListConfig):
        for i in range(len(node)):
            _collect_unknown(node._get_node(i), f"{path}[{i}]", found)
        return
    schema = OmegaConf.get_type(node)
    declared = {f.name for f in fields(schema)} if isinstance(schema, type) and is_dataclass(schema) else None
    for key in node.keys():
        full = f"{path}.{key!s}" if path else str(key)
        child = node._get_node(key)
        if declared is not None and schema is not None and key not in declared:
            value = None if child is None or isinstance(child, DictConfig | ListConfig) else child._value()
            found.append((full, schema, value))
        else:
            _collect_unknown(child, full, found)


def unknown_key_message(full_key: str, schema: type, value: Any = None) -> str:
    """One line about `full_key`, which `schema` does not declare: the llm-foundry equivalent or closest key.

    Args:
        full_key: The dotted key, e.g. `modle` or `model.d_modle`.
        schema: The dataclass of the node holding it.
        value: The value given, used in the suggestion (`model=mpt-125m`) when it is a plain value.
    """
    parent, _, key = full_key.rpartition(".")
    prefix = f"{parent}." if parent else ""
    names = [f.name for f in fields(schema)]
    head = f"unknown config key '{full_key}' ({schema.__name__} has no field '{key}')"
    if not parent and key in LLM_FOUNDRY_KEYS:
        return f"{head}: that is an llm-foundry key; here it is {LLM_FOUNDRY_KEYS[key]}"
    if issubclass(schema, FinetuneDataConfig) and key in LLM_FOUNDRY_FINETUNE_KEYS:
        return f"{head}: that is an llm-foundry finetuning key; {LLM_FOUNDRY_FINETUNE_KEYS[key]}"
    close = difflib.get_close_matches(key, names + (list(GROUP_ONLY_KEYS) if not parent else []), n=1)
    if not close:
        return f"{head}; valid keys: {', '.join(names)}"
    example = f" (e.g. {prefix}{close[0]}={value})" if isinstance(value, str | int | float) else ""
    return f"{head}: did you mean '{prefix}{close[0]}'?{example}"


def group_option_message(group: str, choice: str, options: Sequence[str]) -> str:
    """One line about `group=choice`, an option `conf/` does not have: the closest option and the list.

    Options starting with `_` (schema nodes and internal bases such as `model/_mpt`) are never shown.

    Args:
        group: The config group, e.g. `model`.
        choice: The option given (`mpt-tinny`, or `finetune/instruct-cpuu` in a subfolder of the group).
        options: The options to choose from, as `choice` spells them (Hydra's list, internal ones included).
    """
    public = [o for o in options if not o.rpartition("/")[2].startswith("_")]
    close = difflib.get_close_matches(choice, public, n=1)
    head = f"Could not find '{group}/{choice}'"
    hint = f": did you mean {group}={close[0]}?" if close else f": {group} has no option '{choice}'"
    return f"{head}{hint} (options: {', '.join(public) or 'none'})"


def check_group_choices() -> None:
    """Rejects a `group=option` override naming an option that does not exist.

    Hydra itself rejects that for a required group (`model=mpt-tinny`) but skips a missing option of an
    `optional` group (`experiment`, `debug`, `sweep`, `eval`) without a word, so `experiment=finetune-cpuu`
    would run the quick start instead. A no-op outside a Hydra job.

    Raises:
        ConfigError: Naming the override and the closest option (`group_option_message`).
    """
    if not HydraConfig.initialized() or not GlobalHydra.instance().is_initialized():
        return
    hc = HydraConfig.get()
    given = {o.lstrip("+~").split("=", 1)[0].split("@", 1)[0] for o in hc.overrides.task}
    loader = GlobalHydra.instance().config_loader()
    for group, choice in hc.runtime.choices.items():
        if group not in given or not isinstance(choice, str):
            continue
        # data=finetune/instruct-cpu: conf/data/finetune/
        folder, _, name = choice.rpartition("/")
        options = loader.get_group_options(f"{group}/{folder}" if folder else group)
        if name not in options:
            prefix = f"{folder}/" if folder else ""
            raise ConfigError(group_option_message(group, choice, [prefix + o for o in options]))


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """Validates the composed config and converts it to dataclasses.

    Rejects keys no schema declares (Hydra's `+key=value` adds them silently), then runs `OmegaConf.to_object`
    (resolving interpolations and running every schema's `__post_init__` check).

    Raises:
        ConfigError: Naming every undeclared key (and the closest declared one),
            or the value a schema rejects.
    """
    unknown = unknown_keys(cfg)
    if unknown:
        lines = [unknown_key_message(key, schema, value) for key, schema, value in unknown]
        raise ConfigError("\n".join([*lines, KEY_RULE]))
    try:
        obj = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except (ValueError, OmegaConfBaseException) as err:
        # a schema check, or an unresolvable interpolation
        raise ConfigError(str(err)) from err
    if not isinstance(obj, TrainConfig):
        raise TypeError(
            f"the composed config is a {type(obj).__name__}, not TrainConfig: is train_schema first?"
        )
    return obj
