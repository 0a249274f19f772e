"""The `checkpoint` config group: where checkpoints go, how often, in which format, what to load.

Design note: defaults follow llm-foundry where it is safe and fix its traps: autoresume is *on* whenever
`save_folder` is set (llm-foundry's default silently regressed to off), `save_format: auto` picks sharded
under FSDP and a single file otherwise, and pickled objects are refused unless `allow_pickle` opts in.
"""

from __future__ import annotations

from dataclasses import dataclass

from foundry.time import parse_duration

__all__ = ["CheckpointConfig", "SAVE_FORMATS"]

SAVE_FORMATS = ("auto", "full", "sharded")


@dataclass(kw_only=True)
class CheckpointConfig:
    """Checkpoint saving, loading and autoresume (`checkpoint` group)."""

    save_folder: str | None = None
    """Local directory or object-store URL (`s3://`, `gs://`, `az://`, `file://`); `{run_name}` and
    `{run_dir}` (the run's folder) expand. Null: no checkpoints."""
    save_interval: str = "1000ba"
    """How often to save (`500ba`, `1ep`, `1e9tok`); the end of training always saves."""
    save_num_checkpoints_to_keep: int = -1
    """Keep the newest N complete checkpoints (locally or in the bucket); -1 keeps all."""
    save_format: str = "auto"
    """`full` (one weights file + one state file, written by rank 0), `sharded` (torch.distributed.checkpoint,
    one file per rank, reshards on load), or `auto` (sharded under FSDP, full otherwise)."""
    save_weights_only: bool = False
    """Save the model weights only (no optimizer/scheduler/RNG/data state: cannot resume training)."""
    save_adapters_only: bool = False
    """With `model.peft_config`: save only the trainable weights (the LoRA adapters) with the model config
    (which holds the LoRA config), always in the `full` format. A run still resumes: the optimizer state is
    kept, and the frozen base is reloaded from `load_path`
    (or an `hf-causal-lm` model's pretrained weights)."""
    transfer_budget: float = 300.0
    """Seconds an upload or download of a remote `save_folder`/`load_path` keeps retrying transient store
    failures (an outage) before the save or load fails, naming the store and this field."""
    async_upload: bool = True
    """Write and upload in a background thread; training is blocked only while the state is copied."""
    staging_folder: str | None = None
    """Local scratch for checkpoints of a remote `save_folder` (default `<run_dir>/.checkpoint-staging`)."""
    load_path: str | None = None
    """A checkpoint directory (local or URL; its `manifest.json` is read) to start from when autoresume finds
    nothing."""
    load_weights_only: bool = False
    """From `load_path`, load the model weights only (fine-tuning);
    counters, optimizer and data start fresh."""
    load_strict: bool = True
    """Fail when the checkpoint's weights and the model's parameters differ in names or shapes."""
    autoresume: bool | None = None
    """Resume from the newest complete checkpoint in `save_folder`;
    null = on whenever `save_folder` is set."""
    allow_pickle: bool = False
    """Load checkpoints with full pickle (arbitrary code on load): only for files you trust."""

    def __post_init__(self) -> None:
        try:
            parse_duration(self.save_interval)
        except ValueError as e:
            raise ValueError(f"checkpoint.save_interval: {e}") from None
        if self.save_format not in SAVE_FORMATS:
            raise ValueError(
                f"checkpoint.save_format={self.save_format!r}: choose one of {list(SAVE_FORMATS)}"
            )
        if self.save_num_checkpoints_to_keep == 0 or self.save_num_checkpoints_to_keep < -1:
            raise ValueError(
                f"checkpoint.save_num_checkpoints_to_keep={self.save_num_checkpoints_to_keep}: use -1 (keep "
                "all) or a positive count"
            )
        if self.save_adapters_only and self.save_format == "sharded":
            raise ValueError(
                "checkpoint.save_adapters_only=true writes the (small) adapters in one file: set "
                "checkpoint.save_format=full or auto"
            )
        if self.save_adapters_only and self.save_weights_only:
            raise ValueError(
                "checkpoint.save_adapters_only and save_weights_only are exclusive (adapters-only "
                "checkpoints keep the optimizer state to resume); set one of them"
            )
        if self.autoresume and not self.save_folder:
            raise ValueError("checkpoint.autoresume=true needs checkpoint.save_folder (where to look)")

    @property
    def resume_enabled(self) -> bool:
        """Whether autoresume is on (explicitly, or by default because `save_folder` is set)."""
        return bool(self.save_folder) and self.autoresume is not False
