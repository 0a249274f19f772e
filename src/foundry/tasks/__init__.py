"""What `train.py task=...` runs, one module per task, plus the atomic writer for the files of a run.

`foundry.config.run_task` validates the composed config and dispatches here: `task=pretrain` is
`foundry.train.run.pretrain`, `task=eval` is `foundry.tasks.eval.eval_task`.
"""

from foundry.tasks.run_files import write_text_atomic

__all__ = ["write_text_atomic"]
