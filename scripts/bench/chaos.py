"""Chaos run: many faults injected into one supervised training run; the final state must be bitwise that of
an uninterrupted run, and no fault may need a human.

The CPU smoke model trains under `python -m foundry.launch` (2 ranks, DDP on gloo) and checkpoints to a
loopback S3 server (moto) through a fault proxy. At seeded random steps the bench injects, in a seeded order:

- `kill`: `kill -9` of a random rank (the launcher restarts the group, which resumes from the last checkpoint);
- `hang`: `SIGSTOP` of a random rank (the launcher's hang watchdog, `--hang-floor`, kills and restarts);
- `preempt`: SIGTERM to the launcher (it saves, waits for the upload and exits 75), then the same command again;
- `outage`: every store request answers 503 for a random 5-120 s (`--outage`); training goes on meanwhile,
  and later faults may come during it (a restart then waits for the store within its budget);
- `reset_up` / `reset_down`: the next 1-4 uploads (PUT/POST) or reads (GET) have their connection reset.

First an uninterrupted run of the same command (no faults) gives the reference final checkpoint and the step
time. Output: one JSON line per fault (`lost_s`: injection -> the run is past the step it had reached, minus
the time those steps take; for a fault that stops the ranks, detection + restart + the steps redone) and a
summary line: faults injected, median and max time lost per fault, effective training time (the reference's
step time x steps / the chaos run's wall time; the uninterrupted run's own ratio beside it), whether the final
weights and optimizer state are bitwise equal, and the launcher's exit codes.

    python scripts/bench/chaos.py                       # 20 faults, ~15 min on 2 CPU cores
    python scripts/bench/chaos.py --faults 5 --steps 1500 --outage 2 6   # the slow test's version
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import machine

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from tests.streaming.storage.fault_proxy import FaultProxy  # noqa: E402 - after the path

TINY = ["experiment=smoke-cpu", "data.corpus_mb=0.15", "data.vocab_size=300", "trainer.progress_bar=false"]
KINDS = ("kill", "hang", "preempt", "outage", "reset_up", "reset_down")
SHARE = {"kill": 5, "hang": 3, "preempt": 3, "outage": 5, "reset_up": 2, "reset_down": 2}  # of 20


@dataclass
class Fault:
    """One injected fault and what it cost."""

    kind: str
    at_step: int
    injected: float = 0.0
    step_then: int = 0
    detail: dict[str, Any] = field(default_factory=dict)
    recovered: float | None = None
    lost_s: float | None = None


class StoreFaults:
    """The proxy's fault function: an outage window and counters of connection resets to hand out."""

    def __init__(self) -> None:
        self.outage_until = 0.0
        self.resets = {"up": 0, "down": 0}

    def __call__(self, n: int, method: str, path: str) -> object:
        if time.monotonic() < self.outage_until:
            return 503
        way = "down" if method in ("GET", "HEAD") else "up"
        if self.resets[way] > 0:
            self.resets[way] -= 1
            return "reset"
        return None


def schedule(n: int, steps: int, seed: int) -> list[Fault]:
    """`n` faults at distinct random steps in 5-90% of the run, kinds in the `SHARE` proportions, shuffled."""
    rng = random.Random(seed)
    # the i-th fault of kind k sits at (i + 0.5) / SHARE[k] on [0, 1]: the first n of that order keep the shares
    spread = sorted(
        (((i + 0.5) / SHARE[k]) % 1 + i // SHARE[k], KINDS.index(k), k) for k in KINDS for i in range(n)
    )
    kinds = [k for *_, k in spread[:n]]
    rng.shuffle(kinds)
    at = sorted(rng.sample(range(steps // 20, steps * 9 // 10), n))
    return [Fault(k, s) for k, s in zip(kinds, at, strict=True)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_s3(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    log = (work / "moto.log").open("w")
    proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto_server did not start")


class Run:
    """One supervised run (a launcher process at a time; a preemption reruns the same command)."""

    def __init__(self, work: Path, name: str, args: argparse.Namespace, endpoint: str) -> None:
        self.work, self.name, self.run_dir = work, name, work / "outputs" / name
        train = [
            *TINY, f"trainer.max_duration={args.steps}ba", "trainer.eval_interval=0",
            f"checkpoint.save_folder=s3://chaos/{name}", f"checkpoint.save_interval={args.every}ba",
            "checkpoint.save_num_checkpoints_to_keep=2", "parallelism=ddp", f"run_name={name}",
        ]  # fmt: skip
        self.cmd = [
            sys.executable, "-m", "foundry.launch", "--max-restarts=1000", f"--hang-floor={args.hang_floor}",
            "--hang-k=5", "--standalone", "--nproc-per-node=2", "--", str(REPO / "train.py"), *train,
        ]  # fmt: skip
        self.env = {
            **os.environ, "FOUNDRY_CACHE": str(work / "cache"), "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1",
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
            "S3_ENDPOINT_URL": endpoint,
        }  # fmt: skip
        self.exits: list[int] = []
        self.step_seconds: list[float] = []
        self._last_step = -1
        self.started = time.time()
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.launched = time.time()
        log = (self.work / f"{self.name}.log").open("a")
        return subprocess.Popen(self.cmd, cwd=self.work, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def rerun(self) -> None:
        self.proc = self._start()

    def beats(self) -> dict[int, dict[str, Any]]:
        out = {}
        for rank in (0, 1):
            try:
                out[rank] = json.loads((self.run_dir / "heartbeat" / f"rank{rank}.json").read_text())
            except (OSError, ValueError):
                pass
        return out

    def step(self) -> int:
        """The step both ranks of the current attempt of this launch have reached; -1 while (re)starting.

        Also collects rank 0's step times."""
        beats = [b for b in self.beats().values() if b.get("time", 0) >= self.launched]
        if len(beats) < 2 or len({b["attempt"] for b in beats}) > 1:
            return -1
        if not all(b.get("phase") in ("step", "done") for b in beats):
            return -1
        step = min(b["step"] for b in beats)
        if step != self._last_step and beats[0].get("step_seconds", 0) > 0:
            self.step_seconds.append(float(beats[0]["step_seconds"]))
        self._last_step = step
        return step

    def wait(self, timeout: float) -> None:
        """Watches the run (collecting step times) until its launcher exits."""
        deadline = time.time() + timeout
        while self.proc.poll() is None:
            if time.time() > deadline:
                self.proc.kill()
                raise RuntimeError(f"run {self.name} did not finish in {timeout} s")
            self.step()
            time.sleep(0.005)
        self.exits.append(self.proc.returncode)


def inject(
    f: Fault, step: int, run: Run, faults: StoreFaults, rng: random.Random, args: argparse.Namespace
) -> None:
    """Injects `f` now (the run is at `step`)."""
    f.injected, f.step_then = time.time(), step
    if f.kind in ("kill", "hang"):
        rank = rng.randrange(2)
        pid = run.beats()[rank]["pid"]
        os.kill(pid, signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP)
        f.detail = {"rank": rank}
    elif f.kind == "preempt":
        run.proc.send_signal(signal.SIGTERM)
        code = run.proc.wait(timeout=900)
        run.exits.append(code)
        f.detail = {"launcher_exit": code, "stop_s": round(time.time() - f.injected, 3)}
        run.rerun()
    elif f.kind == "outage":
        seconds = rng.uniform(*args.outage)
        faults.outage_until = max(faults.outage_until, time.monotonic() + seconds)
        f.detail = {"seconds": round(seconds, 1)}
    else:
        n = rng.randint(1, 4)
        faults.resets["up" if f.kind == "reset_up" else "down"] += n
        f.detail = {"connections": n}


def chaos(run: Run, plan: list[Fault], faults: StoreFaults, args: argparse.Namespace, step_s: float) -> None:
    """Injects `plan` in order as the run reaches each fault's step; records when each is recovered."""
    rng = random.Random(args.seed + 1)
    pending = list(plan)
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        if run.proc.poll() is not None:
            run.exits.append(run.proc.returncode)
            break
        step = run.step()
        for f in plan:
            # a rank may finish the step it was in when the fault came: recovered means two steps past it
            if f.injected and f.recovered is None and step > f.step_then + 1:
                f.recovered = time.time()
                f.lost_s = round(max(f.recovered - f.injected - (step - f.step_then) * step_s, 0.0), 3)
        # the next fault waits for the run to recover from the last one; an outage overlaps what follows
        ready = all(f.recovered is not None for f in plan if f.injected)
        if pending and ready and step >= pending[0].at_step:
            inject(pending.pop(0), step, run, faults, rng, args)
        time.sleep(0.02)
    else:
        run.proc.kill()
        raise RuntimeError(f"the chaos run did not finish in {args.timeout} s")


def s3_client(endpoint: str) -> Any:  # a boto3 client
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
        region_name="us-east-1",
    )  # fmt: skip


def final_state(endpoint: str, prefix: str) -> tuple[str, Any, Any]:
    """The `latest` checkpoint of `s3://chaos/<prefix>`: its name, weights and optimizer state."""
    import io

    import torch

    s3 = s3_client(endpoint)
    name = s3.get_object(Bucket="chaos", Key=f"{prefix}/latest")["Body"].read().decode().strip()

    def load(f: str) -> Any:
        body = s3.get_object(Bucket="chaos", Key=f"{prefix}/{name}/{f}")["Body"].read()
        return torch.load(io.BytesIO(body), weights_only=True)

    return name, load("model.pt"), load("state.pt")["optimizer"]


def bitwise_equal(a: object, b: object) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(bitwise_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(bitwise_equal, a, b))
    return a == b


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--faults", type=int, default=20)
    p.add_argument("--steps", type=int, default=6000, help="training steps of the run")
    p.add_argument("--every", type=int, default=100, help="checkpoint interval (steps)")
    p.add_argument("--outage", type=float, nargs=2, default=(5.0, 120.0), help="outage seconds: min max")
    p.add_argument("--hang-floor", type=float, default=6.0, help="the launcher's hang deadline floor (s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="give up on the chaos run after this")
    p.add_argument("--keep", action="store_true", help="keep the work folder (logs, events) and print it")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    s3, endpoint = start_s3(work)
    try:
        s3_client(endpoint).create_bucket(Bucket="chaos")
        ref = Run(work, "reference", args, endpoint)
        ref.wait(args.timeout)
        ref_wall = time.time() - ref.started
        if ref.exits != [0] or not ref.step_seconds:
            raise RuntimeError(f"the uninterrupted run failed (exit {ref.exits}): see {work}/reference.log")
        step_s = statistics.median(ref.step_seconds)
        plan = schedule(args.faults, args.steps, args.seed)
        faults = StoreFaults()
        with FaultProxy(endpoint, faults, max_requests=10**9) as proxy:
            proxy._server.handle_error = lambda *a: None  # type: ignore[method-assign]  # resets are expected
            run = Run(work, "chaos", args, proxy.url)
            chaos(run, plan, faults, args, step_s)
            wall = time.time() - run.started
        ref_name, ref_model, ref_optim = final_state(endpoint, "reference")
        name, model, optim = final_state(endpoint, "chaos")
        lost = [f.lost_s for f in plan if f.lost_s is not None]
        info = machine()
        for f in plan:
            print(json.dumps({"bench": "chaos", "fault": asdict(f) | {"injected": round(f.injected, 3)}}))
        out = {
            "bench": "chaos", "model": "mpt-tiny (smoke-cpu)", "ranks": 2, "steps": args.steps,
            "checkpoint_every": args.every, "faults_planned": len(plan),
            "faults_injected": sum(1 for f in plan if f.injected),
            "by_kind": {k: sum(1 for f in plan if f.kind == k and f.injected) for k in KINDS},
            "lost_s_median": round(statistics.median(lost), 3) if lost else None,
            "lost_s_max": max(lost) if lost else None,
            "lost_s_by_kind": {
                k: round(statistics.median(v), 3)
                for k in KINDS if (v := [f.lost_s for f in plan if f.kind == k and f.lost_s is not None])
            },
            "median_step_s": round(step_s, 4), "wall_s": round(wall, 1), "reference_wall_s": round(ref_wall, 1),
            "effective_training_time": round(args.steps * step_s / wall, 3),
            "reference_effective_training_time": round(args.steps * step_s / ref_wall, 3),
            "final_checkpoint": name, "reference_checkpoint": ref_name,
            "bitwise_equal": name == ref_name and bitwise_equal(model, ref_model) and bitwise_equal(optim, ref_optim),
            "launcher_exits": run.exits, "needed_a_human": run.exits[-1:] != [0],
            "requests_faulted": len(proxy.injected), **info,
        }  # fmt: skip
        print(json.dumps(out), flush=True)
        return out
    finally:
        s3.kill()
        s3.wait()
        if args.keep:
            print(f"work folder: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
