"""LoRA adapters for our MPT and any transformers causal LM, through the `peft` library.

`config.PeftConfig` is the `model.peft_config` schema (the `peft` group); `inject` puts adapters into a built
model (frozen base, LoRA-aware init, merge); `folder` writes and reads PEFT adapter folders
(`adapter_config.json` + `adapter_model.safetensors`, loadable by `peft.PeftModel.from_pretrained`). Only the
schema is imported here, so that the model schemas (which name it) do not pull in `peft`.
"""

from foundry.models.peft.config import MPT_LORA_TARGETS, PeftConfig

__all__ = ["MPT_LORA_TARGETS", "PeftConfig"]
