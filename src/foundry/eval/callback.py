"""`ICLEvalCallback`: run the ICL tasks (and the gauntlet) at every evaluation during training.

Design note: the callback returns the flat metrics from `on_eval_end`, so the trainer logs them with the
eval loss in one line (console, JSONL, W&B); results files for each evaluation go to
`<output_dir>/step_<N>/` when an output directory is given.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from foundry.callbacks.base import Callback
from foundry.eval.config import EvalConfig, load_task_configs
from foundry.eval.progress import print_line
from foundry.eval.runner import run_icl_eval
from foundry.parallel.dist import rank

if TYPE_CHECKING:
    from foundry.train.loop import Trainer

__all__ = ["ICLEvalCallback", "icl_callbacks"]


class ICLEvalCallback(Callback):
    """Evaluates `cfg`'s ICL tasks on the trainer's model after each evaluation.

    Args:
        cfg: the eval config. tokenizer: the model's tokenizer.
        output_dir: where per-evaluation results go (`step_<N>/`); None writes nothing.
    """

    def __init__(self, cfg: EvalConfig, *, tokenizer: Any, output_dir: str | Path | None = None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.output_dir = None if output_dir is None else Path(output_dir)

    def on_eval_end(self, trainer: Trainer, *, eval_seconds: float) -> dict[str, float]:
        """Runs the tasks; returns `icl/...` metrics, gauntlet entries and `icl/seconds`."""
        start = time.perf_counter()
        model = getattr(trainer.model, "module", trainer.model)
        out = None if self.output_dir is None else self.output_dir / f"step_{trainer.state.step}"
        results = run_icl_eval(
            self.cfg, model=model, tokenizer=self.tokenizer, device=trainer.device, output_dir=out,
            emit=print_line if rank() == 0 else None,
        )  # fmt: skip
        metrics = {k: float(v) for k, v in results.items() if isinstance(v, int | float)}
        metrics["icl/seconds"] = time.perf_counter() - start
        return metrics


def icl_callbacks(cfg: EvalConfig | None, *, tokenizer: Any, run_dir: str | Path) -> list[Callback]:
    """`[ICLEvalCallback]` writing under `<run_dir>/icl` (or `cfg.output_dir`) when `cfg` has tasks,
    else []."""
    if cfg is None or not load_task_configs(cfg):
        return []
    return [ICLEvalCallback(cfg, tokenizer=tokenizer, output_dir=cfg.output_dir or Path(run_dir) / "icl")]
