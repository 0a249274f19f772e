"""`task=eval`: ICL evaluation of `model` (random init, or `checkpoint.load_path` weights) on the `eval` tasks.

Writes `eval_results.json` and `icl_results.md` to the run directory and prints the results table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from foundry.errors import ConfigError
from foundry.tasks.run_files import write_text_atomic

__all__ = ["eval_task"]


def eval_task(cfg: Any, run_dir: Path) -> dict[str, float]:  # noqa: ANN401 - foundry.config.TrainConfig
    """Evaluates the model `cfg` describes on the ICL tasks of `cfg.eval`.

    Args:
        cfg: The validated root `TrainConfig`.
        run_dir: The run directory (results go here; a remote `load_path` is cached under it).

    Returns:
        The numeric results (flat `metrics/...` keys).

    Raises:
        ConfigError: When `cfg.eval` has no ICL tasks.
    """
    from foundry.data.quickstart import QuickstartDataConfig, prepare_quickstart
    from foundry.eval import load_task_configs, run_icl_eval
    from foundry.models.build import build_model_for
    from foundry.tokenizers import build_tokenizer
    from foundry.train.run import resolve_device

    if cfg.eval is None or not load_task_configs(cfg.eval):
        raise ConfigError(
            "task=eval has no ICL tasks: pick an eval group, e.g. eval=offline or eval=gauntlet-v0.3"
        )
    if isinstance(cfg.data, QuickstartDataConfig) and not Path(cfg.tokenizer.name).expanduser().exists():
        # the quick-start tokenizer is built with its data (same arguments as pretrain)
        max_seq_len = cfg.data.max_seq_len or int(getattr(cfg.model, "max_seq_len", 2048))
        prepare_quickstart(cfg.data, max_seq_len=max_seq_len)
    device = resolve_device(cfg.trainer.device)
    tokenizer = build_tokenizer(cfg.tokenizer)
    model = build_model_for(cfg.model, tokenizer, device=device)
    if cfg.checkpoint.load_path:
        from foundry.checkpoint import load_weights
        from streaming.storage import redact

        info = load_weights(
            model,
            cfg.checkpoint.load_path,
            strict=cfg.checkpoint.load_strict,
            allow_pickle=cfg.checkpoint.allow_pickle,
            cache_root=str(run_dir / ".checkpoint-cache"),
        )
        print(f"[foundry] evaluating checkpoint {redact(info.url)} (step {info.manifest.step})", flush=True)
    else:
        print("[foundry] evaluating a randomly initialised model (no checkpoint.load_path)", flush=True)
    results = run_icl_eval(cfg.eval, model=model, tokenizer=tokenizer, device=device, output_dir=run_dir)
    write_text_atomic(run_dir / "eval_results.json", json.dumps(results, indent=2, default=str))
    print(
        (run_dir / "icl_results.md").read_text() + f"\n[foundry] ICL results in {run_dir.resolve()}",
        flush=True,
    )
    return {k: float(v) for k, v in results.items() if isinstance(v, int | float)}
