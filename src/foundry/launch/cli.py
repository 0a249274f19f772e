"""`python -m foundry.launch [launcher and torchrun options] -- train.py <overrides>`:
parse, start, supervise.

Design note: the launcher's own options are parsed with `parse_known_args`; everything else before `--`
goes to torchrun unchanged (`--nproc-per-node`, `--standalone`, `--nnodes`, rendezvous), so torchrun's
documentation stays the reference for those. The run directory is Hydra's `outputs/<run_name>`; a command
without `run_name=` (or `$RUN_NAME`) gets its new name chosen here, once (`foundry.run_name`: composed from
the script's `conf/` as `train.py` would, e.g. `pretrain-mpt-tiny-20261126-175501`), and passed as `run_name=`
to every rank of every restart, so restarts resume that run and a second launch of the command starts a new
one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from foundry.errors import ConfigError
from foundry.events import append_event
from foundry.launch.agent import Supervisor
from foundry.launch.compose import compose_run_name
from foundry.launch.nodes import NODE_EXCLUDED_EXIT, NodeGuard, check_node, elastic_nodes, exclude_node
from foundry.launch.watchdog import Progress
from foundry.launch.worker import LAUNCH_ENV, WorkerSettings
from foundry.loggers.mlflow import publish_launch_events
from foundry.loggers.wandb import publish_launch_summary
from foundry.rundir import layout
from foundry.rundir.layout import RunDir
from stackbase.process import claim

__all__ = ["build_parser", "main", "split_command"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m foundry.launch",
        usage="python -m foundry.launch [options] [torchrun options] -- train.py <overrides>",
        description="Runs train.py under torchrun's elastic agent with health checks, a hang watchdog "
        "and events.jsonl in the run directory. Unknown options before `--` go to torchrun.",
    )
    p.add_argument("--max-restarts", type=int, default=3, help="group restarts torchrun may do (default 3)")
    p.add_argument("--hang-k", type=float, default=10.0, help="hang after K x median step time (default 10)")
    p.add_argument("--hang-floor", type=float, default=120.0, help="...but never under this many seconds")
    p.add_argument("--startup-timeout", type=float, default=1800.0, help="s from an attempt's start to fit")
    p.add_argument("--min-free-gb", type=float, default=1.0, help="free disk the run dir needs (default 1)")
    p.add_argument("--check-url", action="append", default=[], help="a store to list before each start")
    p.add_argument("--cuda", action="store_true", help="health: each rank's GPU must be visible and usable")
    p.add_argument("--health-timeout", type=float, default=60.0, help="all-reduce smoke test timeout (s)")
    p.add_argument("--no-all-reduce-check", action="store_true", help="skip the gloo all-reduce smoke test")
    p.add_argument("--poll", type=float, default=0.05, help="seconds between looks at the heartbeats")
    return p


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """(options before `--`, the training command after it).

    Raises:
        ConfigError: `--` or the script after it is missing, or the script is not a file.
    """
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise ConfigError(
            "no training command: end the options with `-- train.py <overrides>` "
            "(usage: python -m foundry.launch [options] [torchrun options] -- train.py <overrides>)"
        )
    i = argv.index("--")
    job = argv[i + 1 :]
    if job[0].endswith(".py") and not Path(job[0]).is_file():
        raise ConfigError(f"{job[0]}: no such script (the command after `--` starts with train.py's path)")
    return argv[:i], job


def run_name_of(overrides: list[str], *, generate: Callable[[list[str]], str]) -> tuple[str, list[str]]:
    """The `run_name=` override (or $RUN_NAME); else `generate(overrides)`, appended as `run_name=<name>`."""
    for o in reversed(overrides):
        if o.lstrip("+").startswith("run_name="):
            return o.split("=", 1)[1], overrides
    if os.environ.get("RUN_NAME"):
        return os.environ["RUN_NAME"], overrides
    name = generate(overrides)
    return name, [*overrides, f"run_name={name}"]


def new_run_name(script: str) -> Callable[[list[str]], str]:
    """Names a new run as `train.py` would (its `conf/train.yaml` composed with the overrides); a script
    without one beside it gets `launch-<time>`."""
    conf = Path(script).resolve().parent / "conf"
    if not (conf / "train.yaml").is_file():
        return lambda overrides: time.strftime("launch-%Y%m%d-%H%M%S")
    return lambda overrides: compose_run_name(overrides, conf)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv[: argv.index("--")] if "--" in argv else argv):
        # every option; the ones it does not know go to torchrun
        build_parser().print_help()
        return 0
    before, job = split_command(argv)
    args, torchrun_opts = build_parser().parse_known_args(before)
    run_name, overrides = run_name_of(job[1:], generate=new_run_name(job[0]))
    run_dir = RunDir.named(run_name, outputs=Path.cwd() / layout.OUTPUTS).root
    launch_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    settings = WorkerSettings(
        run_dir=str(run_dir), launch_id=launch_id, cuda=args.cuda, min_free_gb=args.min_free_gb,
        check_urls=args.check_url, health_timeout_s=args.health_timeout,
        all_reduce=not args.no_all_reduce_check,
    )  # fmt: skip
    # a previous launch's beats (attempts restart at 0)
    for stale in RunDir(run_dir).heartbeat.glob("rank*.json"):
        stale.unlink()
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--max-restarts={args.max_restarts}", *torchrun_opts,
        "-m", "foundry.launch.worker", job[0], *overrides,
    ]  # fmt: skip
    # what `runs stop` checks before it signals this process
    ident = claim(run_dir, "launcher")
    append_event(run_dir, "start", launch_id=launch_id, run_name=run_name, max_restarts=args.max_restarts,
                 torchrun_options=torchrun_opts, script=job[0], pid=os.getpid(), host=socket.gethostname(),
                 token=ident.token, proof=ident.proof)  # fmt: skip
    # --nnodes=MIN:MAX: a node failing a node-local check leaves
    elastic = elastic_nodes(torchrun_opts)
    if elastic and (bad := check_node(settings)) is not None:
        exclude_node(run_dir, launch_id, check=bad.check, detail=bad.detail, when="before_join")
        return NODE_EXCLUDED_EXIT
    started = time.time()
    progress = Progress(k=args.hang_k, floor=args.hang_floor, startup=args.startup_timeout)
    sup = Supervisor(
        run_dir,
        launch_id,
        progress,
        poll_s=args.poll,
        health_defer_s=15.0 if elastic else 0.0,
        max_restarts=args.max_restarts,
    )
    # a fresh store per rendezvous round: all nodes agree on its keys (health)
    env = {**os.environ, LAUNCH_ENV: json.dumps(asdict(settings)), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    proc = sup.start(cmd, env=env)
    # with --nnodes=MIN:MAX, a node failing a node-local check also leaves after it has joined
    guard = NodeGuard(run_dir, launch_id, proc, enabled=elastic).start()
    rc = sup.watch(proc)
    guard.stop()
    rc = NODE_EXCLUDED_EXIT if guard.excluded else rc
    _drop_empty_dumps(RunDir(run_dir).stacks)
    append_event(
        run_dir, "summary", ok=rc == 0, exit_code=rc, failures=sup.failures, restarts=sup.progress.attempt,
        final_step=sup.final_step, time_lost_s=round(sup.time_lost_s, 3),
        wall_s=round(time.time() - started, 3), cause=sup.stop_cause,
    )  # fmt: skip
    # the same events into the run's W&B run and into its MLflow run, each when the run logged there
    publish_launch_summary(run_dir)
    publish_launch_events(run_dir)
    return rc


def _drop_empty_dumps(folder: Path) -> None:
    for path in folder.glob("*.txt"):
        if path.stat().st_size == 0:
            path.unlink()
