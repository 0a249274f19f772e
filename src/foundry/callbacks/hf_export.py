"""`HFExport`: a Hugging Face folder (config, weights, tokenizer) every N steps and at the end of training.

Design note: llm-foundry's `hf_checkpointer`, on our pieces. The full weights are gathered on every rank
(a collective under FSDP; only trainable ones for an adapters-only export), then rank 0 alone builds a
fresh CPU model from the `model` schema with those tensors (`build_model_on(state_dict=...)`), so the live
training model is never touched; `export_hf` writes it (LoRA adapters merged, or, with `merge_adapters:
false`, a PEFT adapter folder instead). The files go to the save folder (any local path or object-store
URL) as the checkpoint store publishes (uploads, or atomic copies), but through `streaming.storage`
directly: `foundry.checkpoint` imports this package, so this package does not import it. Each export has
its own `ba<step>/` folder, published by a last `export.json`. An export blocks training while it runs:
pick an interval that makes that rare.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from foundry.callbacks.base import Callback
from foundry.callbacks.config import HFExportConfig
from foundry.parallel.dist import barrier, rank
from streaming.storage import is_remote, join_url, redact, upload_file

if TYPE_CHECKING:
    from foundry.models import ModelConfig
    from foundry.train.loop import Trainer

__all__ = ["DONE_FILE", "HFExport", "HFExportConfig"]

DONE_FILE = "export.json"
"""Written last into each export folder: its step, format and file list (a folder without it is torn)."""
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class HFExport(Callback):
    """Exports the model being trained as a Hugging Face folder.

    Args:
        cfg: The `callbacks.hf_export` config.
        model_config: The run's `model` schema (the exported model is rebuilt from it).
        tokenizer: Saved into every folder (None: no tokenizer files).
        run_dir: The run directory (the default save folder is `<run_dir>/hf`).
    """

    def __init__(
        self,
        cfg: HFExportConfig,
        *,
        model_config: ModelConfig,
        # a transformers tokenizer or None
        tokenizer: Any,
        run_dir: str | Path,
    ) -> None:
        self.cfg = cfg
        self.model_config = model_config
        self.tokenizer = tokenizer
        self.root = cfg.save_folder or os.path.join(str(run_dir), "hf")
        self.last_step = -1
        self.exported: list[str] = []
        """Where each export went (rank 0)."""

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """Exports at every `every_n_steps` multiple."""
        step = trainer.state.step
        if self.cfg.every_n_steps and step % self.cfg.every_n_steps == 0:
            self.export(trainer)
        return {}

    def on_fit_end(self, trainer: Trainer) -> None:
        """Exports the final model (unless this step was just exported)."""
        self.export(trainer)

    def export(self, trainer: Trainer) -> None:
        """Gathers the weights (every rank), writes and publishes the folder (rank 0), then a barrier."""
        # local: torch.distributed.checkpoint is imported only when an export happens
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        step = trainer.state.step
        if step == self.last_step:
            return
        self.last_step = step
        adapters = self.model_config.peft_config is not None and not self.cfg.merge_adapters
        options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=adapters)
        weights = get_model_state_dict(trainer.model, options=options)
        if rank() == 0:
            self.exported.append(self._write(weights, step=step, adapters=adapters))
        barrier()

    def _write(self, weights: dict[str, Any], *, step: int, adapters: bool) -> str:
        url = _join(self.root, f"ba{step}")
        with tempfile.TemporaryDirectory(prefix="hf-export-") as tmp:
            fmt = _save(
                self.model_config, weights, tmp, tokenizer=self.tokenizer, cfg=self.cfg, adapters=adapters
            )
            files = sorted(os.listdir(tmp))
            Path(tmp, DONE_FILE).write_text(
                json.dumps({"step": step, "format": fmt, "files": files}, indent=2)
            )
            # the marker last: a folder without it is torn
            for f in [*files, DONE_FILE]:
                _put(os.path.join(tmp, f), _join(url, f))
        print(f"[foundry] hf export: {redact(url)} ({fmt}, step {step})", flush=True)
        return url


def _join(root: str, rel: str) -> str:
    return join_url(root, rel) if is_remote(root) else os.path.join(root, rel)


def _put(path: str, dst: str) -> None:
    """Publishes a local file at `dst` (an upload, or an atomic copy into place),
    as the checkpoint store does."""
    if is_remote(dst):
        upload_file(path, dst)
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = f"{dst}.tmp-{os.getpid()}"
    shutil.copyfile(path, tmp)
    os.replace(tmp, dst)


def _save(
    model_config: ModelConfig,
    weights: dict[str, Any],
    out: str,
    *,
    tokenizer: Any,
    cfg: HFExportConfig,
    adapters: bool,
) -> str:
    """Writes the folder into `out`; returns its format (`hf_mpt`, `foundry`, `transformers` or `peft`)."""
    # local: the model stack (transformers, and peft for adapters) loads only when an export happens
    from foundry.models import build_model_on
    from foundry.models.export import export_hf

    # `adapters` implies a peft_config
    if adapters and model_config.peft_config is not None:
        from foundry.models.peft.folder import save_adapter

        # the base stays on meta: only the (assigned) adapter tensors are read
        shell = build_model_on(model_config, device="cpu", init_device="meta", defer_init=True)
        shell.load_state_dict(weights, strict=False, assign=True)
        save_adapter(shell, model_config.peft_config, out)
        if tokenizer is not None:
            tokenizer.save_pretrained(out)
        return "peft"
    # Any: export_hf takes any causal LM
    model: Any = build_model_on(model_config, device="cpu", state_dict=weights).eval()
    mpt = getattr(model.config, "model_type", None) == "foundry_mpt"
    fmt = export_hf(
        model, out, tokenizer=tokenizer, fmt=cfg.format if mpt else "foundry", dtype=_DTYPES[cfg.dtype]
    )
    return fmt if mpt else "transformers"
