"""The `peft` group's schema, `model.peft_config`: typed LoRA settings (validated at compose time; no `peft`
import here).

Design note: llm-foundry passes `peft_config` as a free-form mapping to `peft.LoraConfig`, so a typo in a
key surfaces late, inside peft. Here it is a dataclass field of every model schema: unknown keys fail when
Hydra composes the config, and bad values fail in `__post_init__` naming the field. Only LoRA is offered
(the one adapter llm-foundry supports); `to_peft_kwargs` is the exact mapping handed to `peft.LoraConfig`.
Kept free of the `peft` import so that importing a model schema stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["MPT_LORA_TARGETS", "PeftConfig"]

MPT_LORA_TARGETS = ["Wqkv", "out_proj", "up_proj", "down_proj"]
"""Default LoRA targets for our MPT: the fused QKV projection, the attention output and the FFN up/down."""

_BIASES = ("none", "all", "lora_only")


@dataclass(kw_only=True)
class PeftConfig:
    """LoRA adapters (through the `peft` library) on a model's Linear layers; the base stays frozen."""

    peft_type: str = "LORA"
    """Adapter kind: only `LORA`."""
    task_type: str = "CAUSAL_LM"
    """Only `CAUSAL_LM` (kept for llm-foundry yaml compatibility)."""
    r: int = 8
    """LoRA rank."""
    lora_alpha: float = 16.0
    """Scale numerator: the update is (lora_alpha / r) * B @ A (or / sqrt(r) with `use_rslora`)."""
    lora_dropout: float = 0.05
    """Dropout on the adapter input (training only)."""
    target_modules: list[str] | None = None
    """Module-name suffixes to adapt (e.g. [Wqkv, out_proj]), `all-linear`, or null: our MPT's
    Wqkv/out_proj/up_proj/down_proj, peft's own per-architecture default for a transformers model."""
    bias: str = "none"
    """Also train biases: `none`, `all` or `lora_only`."""
    use_rslora: bool = False
    """Rank-stabilised scaling lora_alpha / sqrt(r)."""
    modules_to_save: list[str] | None = None
    """Extra modules trained in full and saved with the adapter (e.g. [lm_head])."""

    def __post_init__(self) -> None:
        if self.peft_type.upper() != "LORA":
            raise ValueError(f"model.peft_config.peft_type={self.peft_type!r}: only LORA is supported")
        if self.task_type.upper() != "CAUSAL_LM":
            raise ValueError(f"model.peft_config.task_type={self.task_type!r}: only CAUSAL_LM is supported")
        if self.r < 1:
            raise ValueError(f"model.peft_config.r={self.r}: the LoRA rank must be >= 1")
        if self.lora_alpha <= 0:
            raise ValueError(f"model.peft_config.lora_alpha={self.lora_alpha}: must be > 0")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"model.peft_config.lora_dropout={self.lora_dropout}: must be in [0, 1)")
        if self.bias not in _BIASES:
            raise ValueError(f"model.peft_config.bias={self.bias!r}: choose one of {list(_BIASES)}")
        if self.target_modules is not None and not self.target_modules:
            raise ValueError(
                "model.peft_config.target_modules=[]: name at least one module, or null for the default"
            )

    def to_peft_kwargs(self, *, default_targets: list[str] | None) -> dict[str, Any]:
        """Keyword arguments for `peft.LoraConfig` (targets: ours, else `default_targets`)."""
        targets = self.target_modules if self.target_modules is not None else default_targets
        kwargs: dict[str, Any] = {
            "task_type": "CAUSAL_LM",
            "r": self.r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "bias": self.bias,
            "use_rslora": self.use_rslora,
            "modules_to_save": self.modules_to_save,
        }
        if targets is not None:
            kwargs["target_modules"] = "all-linear" if targets == ["all-linear"] else list(targets)
        return kwargs
