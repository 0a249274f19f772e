"""In-context-learning evaluation: llm-foundry's four ICL task types, scored fast and exactly.

`run_icl_eval(cfg, model=, tokenizer=, device=)` runs the tasks of an `EvalConfig` (the `eval` config group)
and returns flat metrics; `load_tasks` / `evaluate_task` are the pieces. Nothing is registered at import:
`register_eval_configs(cs)` stores the schema for Hydra.
"""

from foundry.eval.config import EvalConfig, ICLTaskConfig, load_task_configs, register_eval_configs
from foundry.eval.runner import ICLTask, TaskResult, evaluate_task, flat_metrics, load_tasks, run_icl_eval

__all__ = [
    "EvalConfig",
    "ICLTask",
    "ICLTaskConfig",
    "TaskResult",
    "evaluate_task",
    "flat_metrics",
    "load_task_configs",
    "load_tasks",
    "register_eval_configs",
    "run_icl_eval",
]
