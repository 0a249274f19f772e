"""The `callbacks` config group's schema: which callbacks run (`CallbacksConfig`) and each one's settings.

Design note: every callback is a nullable field (or a flag), so an option file turns on only what it names;
`callbacks.hf_export` is filled by its own group (`+hf_export=default`, `conf/hf_export/`, `@package
callbacks.hf_export`), whose schema is therefore here too. The callbacks themselves are `foundry.callbacks`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CallbacksConfig", "HFExportConfig", "RuntimeEstimatorConfig", "SpeedMonitorConfig"]


@dataclass(kw_only=True)
class SpeedMonitorConfig:
    """Throughput and MFU over a sliding window of steps."""

    window_size: int = 100
    """Steps in the averaging window."""
    peak_flops: float | None = None
    """Per-device peak FLOP/s; null -> looked up from the GPU name and precision (no MFU when unknown)."""

    def __post_init__(self) -> None:
        if self.window_size < 1:
            raise ValueError(f"callbacks.speed_monitor.window_size={self.window_size} must be >= 1")


@dataclass(kw_only=True)
class RuntimeEstimatorConfig:
    """Remaining-time estimate."""

    skip_steps: int = 1
    """Steps ignored before timing starts (compilation, warm-up)."""


_EXPORT_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(kw_only=True)
class HFExportConfig:
    """`callbacks.hf_export`: write a transformers folder periodically (enable with `+hf_export=default`)."""

    save_folder: str | None = None
    """Local folder or object-store URL (`s3://...`); each export goes to `<save_folder>/ba<step>/`. Null:
    `<run_dir>/hf`."""
    every_n_steps: int = 0
    """Export every N optimizer steps (0: only at the end); the end of training always exports."""
    dtype: str = "bfloat16"
    """Weight dtype on disk: float32, bfloat16 or float16."""
    format: str = "auto"
    """MPT: `hf_mpt` (transformers' built-in MPT), `foundry` (our model_type) or `auto`; other models save as
    themselves."""
    merge_adapters: bool = True
    """LoRA runs: write the merged model (true) or only the PEFT adapter folder (false)."""

    def __post_init__(self) -> None:
        if self.every_n_steps < 0:
            raise ValueError(
                f"callbacks.hf_export.every_n_steps={self.every_n_steps}: use 0 (end only) or N > 0"
            )
        if self.dtype not in _EXPORT_DTYPES:
            raise ValueError(
                f"callbacks.hf_export.dtype={self.dtype!r}: choose one of {list(_EXPORT_DTYPES)}"
            )
        if self.format not in ("auto", "hf_mpt", "foundry"):
            raise ValueError(f"callbacks.hf_export.format={self.format!r}: choose auto, hf_mpt or foundry")


@dataclass(kw_only=True)
class CallbacksConfig:
    """Which callbacks run (the `callbacks` group); null disables one."""

    speed_monitor: SpeedMonitorConfig | None = None
    lr_monitor: bool = False
    memory_monitor: bool = False
    runtime_estimator: RuntimeEstimatorConfig | None = None
    hf_export: HFExportConfig | None = None
    """A Hugging Face folder every N steps and at the end
    (`+hf_export=default`; see `callbacks/hf_export.py`)."""
