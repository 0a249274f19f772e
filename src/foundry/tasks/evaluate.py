"""`task=eval`: ICL evaluation of `model` (random init, or `checkpoint.load_path` weights) on the `eval`
tasks.

Writes `eval_results.json` and `icl_results.md` to the run directory and prints the results table.
"""

from __future__ import annotations

import json
from pathlib import Path

from foundry.checkpoint import load_weights
from foundry.config import TrainConfig
from foundry.data.config import QuickstartDataConfig
from foundry.data.quickstart import prepare_quickstart_tokenizer, quickstart_tokenizer_path
from foundry.errors import ConfigError
from foundry.eval import load_task_configs, run_icl_eval
from foundry.eval.data import check_task_data
from foundry.eval.progress import print_line
from foundry.models.build import build_model_on
from foundry.parallel.dist import resolve_device
from foundry.rundir import layout
from foundry.rundir.files import write_text_atomic
from foundry.rundir.record import RunRecord
from foundry.tokenizers import build_tokenizer
from streaming.storage import redact

__all__ = ["eval_task"]


def eval_task(cfg: TrainConfig, run_dir: Path, *, record: RunRecord | None = None) -> dict[str, float]:
    """Evaluates the model `cfg` describes on the ICL tasks of `cfg.eval`.

    Args:
        cfg: The validated root `TrainConfig`.
        run_dir: The run directory (results go here; a remote `load_path` is cached under it).
        record: Opened once the model and its weights are loaded
            (before that the run directory is not written).

    Returns:
        The numeric results (flat `metrics/...` keys).

    Raises:
        ConfigError: When `cfg.eval` has no ICL tasks, or no data for any of them (`check_task_data`).
    """
    if cfg.eval is None or not load_task_configs(cfg.eval):
        raise ConfigError(
            "task=eval has no ICL tasks: pick an eval group, e.g. eval=offline or eval=gauntlet-v0.3"
        )
    # every task's file absent: one error, before a model is built or a file written
    check_task_data(cfg.eval)
    data = cfg.data
    if isinstance(data, QuickstartDataConfig) and cfg.tokenizer.name == quickstart_tokenizer_path(
        data.local, data.corpus_mb, data.vocab_size
    ):
        # the quick-start tokenizer: built once, then reused
        prepare_quickstart_tokenizer(data)
    device = resolve_device(cfg.trainer.device)
    tokenizer = build_tokenizer(cfg.tokenizer)
    model = build_model_on(cfg.model, device=device, tokenizer=tokenizer)
    if cfg.checkpoint.load_path:
        info = load_weights(
            model,
            cfg.checkpoint.load_path,
            strict=cfg.checkpoint.load_strict,
            allow_pickle=cfg.checkpoint.allow_pickle,
            cache_root=str(run_dir / layout.CHECKPOINT_CACHE),
        )
        print(f"[foundry] evaluating checkpoint {redact(info.url)} (step {info.manifest.step})", flush=True)
    else:
        print("[foundry] evaluating a randomly initialised model (no checkpoint.load_path)", flush=True)
    (record or RunRecord(run_dir)).open()
    results = run_icl_eval(
        cfg.eval, model=model, tokenizer=tokenizer, device=device, output_dir=run_dir, emit=print_line
    )
    write_text_atomic(run_dir / "eval_results.json", json.dumps(results, indent=2, default=str))
    print(
        (run_dir / layout.ICL_RESULTS).read_text() + f"\n[foundry] ICL results in {run_dir.resolve()}",
        flush=True,
    )
    return {k: float(v) for k, v in results.items() if isinstance(v, int | float)}
