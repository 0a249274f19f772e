"""`hydra/launcher=slurm` and `slurm-local`: hydra-submitit-launcher running foundry's launcher on each node.

Design note: Hydra only accepts launcher classes defined under `hydra_plugins`, and it imports every module
there at each start, so this module stays thin and cheap: the classes subclass the stock submitit launcher
and delegate to `foundry.launch.slurm` (imported inside the methods: it pulls in torch). Without the `slurm`
extra installed, the classes only raise an error that says how to install it.
"""

from __future__ import annotations

import sys
from typing import Any

try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
except ImportError:  # the `slurm` extra is not installed
    BaseSubmititLauncher = None

_MISSING = "hydra/launcher=slurm needs hydra-submitit-launcher: pip install 'foundry-stack[slurm]'"

if BaseSubmititLauncher is None:
    from hydra.plugins.launcher import Launcher

    class SlurmLauncher(Launcher):
        """Stands in for the real launcher when the `slurm` extra is missing."""

        def __init__(self, **params: Any) -> None:
            raise ImportError(_MISSING)

        def setup(self, **kwargs: Any) -> None:
            raise ImportError(_MISSING)

        def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
            raise ImportError(_MISSING)

    LocalLauncher = SlurmLauncher
else:

    class _NodeLauncher(BaseSubmititLauncher):
        """One submitit task per node runs `foundry.launch.slurm.NodeRunner` (see that module's note)."""

        def __init__(self, **params: Any) -> None:
            from foundry.launch.slurm import NodeRunner, prepare_params

            submitit_params, node = prepare_params(self._EXECUTOR, params)
            super().__init__(**submitit_params)
            gpus = int(submitit_params.get("gpus_per_node") or 0)
            self.runner = NodeRunner(node=node, local=self._EXECUTOR == "local", gpus_per_node=gpus)

        def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:  # Hydra's types
            """Submitter side: binds the working directory, script and run names, then submits and waits."""
            assert self.config is not None
            overrides = [list(o) for o in job_overrides]
            cwd = str(self.config.hydra.runtime.cwd)
            self.runner.bind(cwd, sys.argv[0], overrides, str(self.config.run_name), initial_job_idx)
            return super().launch(job_overrides, initial_job_idx)

        def __call__(
            self,
            sweep_overrides: list[str],
            job_dir_key: str,
            job_num: int,
            job_id: str,
            singleton_state: Any,
        ) -> Any:  # a hydra JobReturn
            """Node side: the submitit task runs foundry's launcher instead of the task function."""
            import submitit

            return self.runner.run(list(sweep_overrides), job_num, submitit.JobEnvironment().global_rank)

        def checkpoint(self, *args: Any, **kwargs: Any) -> Any:  # submitit's signature
            """submitit's signal handler: let the launcher save its checkpoint, then resubmit unchanged."""
            self.runner.stop_for_requeue()
            return super().checkpoint(*args, **kwargs)

    class SlurmLauncher(_NodeLauncher):  # type: ignore[no-redef]
        """sbatch through submitit: nodes x one task, each running the launcher."""

        _EXECUTOR = "slurm"

    class LocalLauncher(_NodeLauncher):  # type: ignore[no-redef]
        """submitit's local executor (one node): the same per-node command and requeue path, for tests."""

        _EXECUTOR = "local"
