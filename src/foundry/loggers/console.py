"""Console logging: a tqdm progress bar with ETA and the key metrics, or one line per log step.

Design note: the bar shows only what a person watches (loss, lr, tokens/s); every metric still goes to
the JSONL file. Eval results are printed as their own line so they survive the bar's redraws; a mixture's
per-stream results (`eval/<stream>/loss`) get one compact second line (loss only, by stream), and its
per-stream train counts (`train/<stream>/samples`) stay out of the console (they are in the JSONL/W&B logs).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from stackbase.secrets import redact_value

__all__ = ["ConsoleLogger"]

_SHOWN = (
    ("train/loss", "loss", "{:.4f}"),
    ("eval/loss", "eval_loss", "{:.4f}"),
    ("lr", "lr", "{:.2e}"),
    ("throughput/tokens_per_sec", "tok/s", "{:,.0f}"),
)


class ConsoleLogger:
    """Progress bar (or plain lines) on a stream.

    Args:
        max_steps: Total optimizer steps (the bar's length).
        progress_bar: Draw a tqdm bar; otherwise print one line per logged step.
        stream: Where to write (stderr by default).
    """

    def __init__(self, *, max_steps: int, progress_bar: bool = True, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.max_steps = max_steps
        self.bar = None
        self._step = 0
        if progress_bar:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=max_steps, file=self.stream, unit="step", dynamic_ncols=True, leave=True)

    def log_hyperparameters(self, params: dict[str, Any]) -> None:
        """Prints the derived quantities (the full config is in the run directory)."""
        derived = redact_value(params.get("derived", {}))
        if derived:
            line = ", ".join(f"{k}={v}" for k, v in derived.items())
            self._write(f"[foundry] {line}")

    def _write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def log_metrics(self, metrics: dict[str, float], *, step: int) -> None:
        """Updates the bar (train metrics) or prints a line (eval metrics / no bar)."""
        lr = next((v for k, v in metrics.items() if k.startswith("lr-")), None)
        shown = dict(metrics)
        if lr is not None:
            shown["lr"] = lr
        parts = {label: fmt.format(shown[key]) for key, label, fmt in _SHOWN if key in shown}
        is_eval = any(k.startswith("eval/") for k in metrics)
        if is_eval:
            self._write_eval(metrics, step=step)
        if self.bar is not None:
            if step > self._step:
                self.bar.update(step - self._step)
                self._step = step
            if parts and not is_eval:
                self.bar.set_postfix(parts, refresh=False)
        elif not is_eval:
            body = " ".join(f"{k}={v}" for k, v in parts.items())
            self._write(f"[train] step {step}/{self.max_steps}: {body}")

    def _write_eval(self, metrics: dict[str, float], *, step: int) -> None:
        """The mixture's eval metrics on one line, then (for a mixture) each stream's loss on a second."""
        evals = {k: v for k, v in metrics.items() if k.startswith("eval/")}
        per_stream = {k: v for k, v in evals.items() if k.count("/") == 2}
        mixture = " ".join(f"{k}={v:.4f}" for k, v in evals.items() if k not in per_stream)
        self._write(f"[eval] step {step}/{self.max_steps}: {mixture}")
        losses = " ".join(f"{k[5:-5]}={v:.4f}" for k, v in per_stream.items() if k.endswith("/loss"))
        if losses:
            self._write(f"[eval] step {step}/{self.max_steps} loss by stream: {losses}")

    def close(self) -> None:
        """Closes the bar."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
