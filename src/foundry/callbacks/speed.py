"""Speed monitor: samples/s, tokens/s and model FLOPs utilisation (MFU) over a sliding window.

Design note: MFU follows llm-foundry's convention (`flops_per_token` of the model: 6N plus the S x S
attention term, no causal halving) divided by the device's dense peak for the run's precision, looked up
by GPU name as Composer does; on CPU or an unknown GPU no MFU is reported rather than a made-up one.
`amp_fp8` runs are measured against the FP8 dense peak (twice bf16 on Hopper, as Composer's table): their MFU
is not comparable with a bf16 run's; compare tokens/s.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from foundry.callbacks.base import Callback
from foundry.callbacks.config import SpeedMonitorConfig

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["SpeedMonitor", "peak_flops"]

# Dense peak FLOP/s per device: (name substrings, {precision: flops}); first match wins (order matters).
_PEAKS: list[tuple[tuple[str, ...], dict[str, float]]] = [
    (("h200",), {"amp_fp8": 1979e12, "amp_bf16": 989.5e12, "amp_fp16": 989.5e12, "fp32": 494.5e12}),
    (("h100", "pcie"), {"amp_fp8": 1513e12, "amp_bf16": 756.5e12, "amp_fp16": 756.5e12, "fp32": 378e12}),
    (("h100", "hbm2e"), {"amp_fp8": 1513e12, "amp_bf16": 756.5e12, "amp_fp16": 756.5e12, "fp32": 378e12}),
    (("h100",), {"amp_fp8": 1979e12, "amp_bf16": 989.5e12, "amp_fp16": 989.5e12, "fp32": 494.5e12}),
    (("a100",), {"amp_bf16": 312e12, "amp_fp16": 312e12, "fp32": 156e12}),
    (("a10",), {"amp_bf16": 125e12, "amp_fp16": 125e12, "fp32": 31.2e12}),
    (("v100",), {"amp_fp16": 125e12, "fp32": 15.7e12}),
    (("t4",), {"amp_fp16": 65e12, "fp32": 8.1e12}),
]


def peak_flops(device_name: str, precision: str) -> float | None:
    """Dense peak FLOP/s of a GPU (by `torch.cuda.get_device_name()`) at `precision` (fp32 means TF32)."""
    name = device_name.lower()
    for keys, table in _PEAKS:
        if all(k in name for k in keys):
            return table.get(precision)
    return None


class SpeedMonitor(Callback):
    """Logs `throughput/{samples,tokens}_per_sec`, `throughput/device/mfu` (when the peak is known).

    Args:
        cfg: Window size and optional peak override.
        world_size: Ranks running each step (every rank runs the same steps): global throughput is this
            rank's times it.
    """

    def __init__(self, cfg: SpeedMonitorConfig, *, world_size: int) -> None:
        if world_size < 1:
            raise ValueError(f"world_size={world_size} must be >= 1")
        self.cfg = cfg
        self.world_size = world_size
        self._window: deque[tuple[float, int, int]] = deque(maxlen=cfg.window_size)
        self._peak: float | None = cfg.peak_flops
        self._flops_per_token: float | None = None

    def on_fit_start(self, trainer: Trainer) -> None:
        """Looks up the device peak and the model's FLOPs per token."""
        import torch

        if self._peak is None and trainer.device.type == "cuda":
            self._peak = peak_flops(torch.cuda.get_device_name(trainer.device), trainer.cfg.precision)
        # DDP wraps; FSDP2 keeps the class's methods
        model = getattr(trainer.model, "module", trainer.model)
        fpt = getattr(model, "flops_per_token", None)
        self._flops_per_token = fpt(trainer.max_seq_len) if callable(fpt) else None

    def on_step_end(self, trainer: Trainer, *, step_seconds: float) -> dict[str, float]:
        """Window throughput after this step."""
        plan = trainer.plan
        self._window.append(
            (step_seconds, plan.device_batch_size, plan.device_batch_size * trainer.max_seq_len)
        )
        secs = sum(w[0] for w in self._window)
        if secs <= 0:
            return {}
        samples = sum(w[1] for w in self._window) / secs
        tokens = sum(w[2] for w in self._window) / secs
        out = {
            "throughput/samples_per_sec": samples * self.world_size,
            "throughput/tokens_per_sec": tokens * self.world_size,
            "throughput/device/tokens_per_sec": tokens,
        }
        if self._flops_per_token is not None:
            flops = self._flops_per_token * tokens
            out["throughput/device/flops_per_sec"] = flops
            if self._peak:
                out["throughput/device/mfu"] = flops / self._peak
        return out
