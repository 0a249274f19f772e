"""`python -m foundry.runs` subcommands on local run folders and on buckets (real moto S3 / GCS emulator servers)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from foundry.live import LIVE_FILE, process_token
from foundry.runs.cli import main
from foundry.runs.show import config_diff, default_config
from foundry.sync import sync
from tests.foundry.runs.dom import check_against_metrics


def test_list(sweep_dir: Path, capsys) -> None:
    assert main(["list", str(sweep_dir.parents[1])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "RUN",
        "TASK",
        "STATE",
        "STEP",
        "LOSS",
        "TOK/S",
        "STARTED",
        "DURATION",
        "RESTARTS",
    ]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:]}
    job1 = rows["multirun/sweep/1_optimizer.lr=0.03"]
    assert job1[1:4] == ["pretrain", "finished", "30/30"] and job1[-1] == "1" and job1[-2] == "1m00s"


def test_show_diff_checkpoints_evals_events(sweep_dir: Path, capsys) -> None:
    assert main(["show", "--diff", str(sweep_dir / "1_optimizer.lr=0.03")]) == 0
    out = capsys.readouterr().out
    assert "optimizer.lr: 0.0006 -> 0.03" in out  # the conf default is 6e-4
    assert "ep0-ba30  step 30  1000 B" in out
    assert "eval results at step 30:" in out and "icl/piqa/acc: 0.55" in out
    assert "restart" in out and "resumed" in out


def test_config_diff_of_the_defaults_is_empty() -> None:
    defaults = default_config()
    assert config_diff(defaults, defaults) == []
    changed = json.loads(json.dumps(defaults))
    changed["trainer"]["max_duration"] = "7ba"
    assert config_diff(changed, defaults) == [
        ("trainer.max_duration", defaults["trainer"]["max_duration"], "7ba")
    ]


def test_logs_and_unknown_run(sweep_dir: Path, capsys) -> None:
    root = str(sweep_dir.parents[1])
    assert main(["--root", root, "logs", "multirun/sweep/0_optimizer.lr=0.01"]) == 0
    assert capsys.readouterr().out == "[foundry] step 1\n[foundry] step 2\n"
    assert main(["--root", root, "logs", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err


def test_resume_command(sweep_dir: Path, capsys) -> None:
    run = sweep_dir / "1_optimizer.lr=0.03"
    (run / ".hydra" / "rank0").mkdir(parents=True)
    (run / ".hydra" / "rank0" / "overrides.yaml").write_text("- optimizer.lr=0.03\n- run_name=sweep\n")
    assert main(["resume", str(run), "--nproc", "4", "--store", "s3://b/ck"]) == 0
    cmd = shlex.split(capsys.readouterr().out)
    assert cmd[:4] == ["python", "-m", "foundry.launch", "--max-restarts=3"]
    assert cmd[4:6] == ["--nproc-per-node=4", "--"]
    assert cmd[6:10] == [
        "train.py",
        "optimizer.lr=0.03",
        "run_name=sweep",
        "checkpoint.save_folder=s3://b/ck",
    ]
    # a sweep job's folder is not outputs/<run_name>; its name has `=` (quoted for Hydra's override grammar)
    assert cmd[10] == f'hydra.run.dir="{run.resolve()}"'


def test_stop_signals_rank0_of_a_run_without_launcher(sweep_dir: Path, capsys) -> None:
    """A real process stands in for rank 0: it exits 75 on SIGTERM, as the trainer's preemption path does."""
    run = sweep_dir / "0_optimizer.lr=0.01"
    (run / "final_metrics.json").unlink()
    code = "import signal,sys,time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(75)); print('ok', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ok\n"
        live = {"pid": proc.pid, "host": socket.gethostname(), "step": 3, "max_steps": 30, "phase": "step",
                "time": time.time(), "started": time.time() - 5, "token": process_token(proc.pid)}  # fmt: skip
        (run / LIVE_FILE).write_text(json.dumps(live))
        assert main(["list", str(run)]) == 0 and " running " in capsys.readouterr().out
        assert main(["stop", str(run)]) == 0
        assert f"rank 0 (pid {proc.pid})" in capsys.readouterr().out
        assert proc.wait(timeout=10) == 75
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    assert main(["list", str(run)]) == 0 and " failed " in capsys.readouterr().out  # its pid is gone
    assert main(["stop", str(run)]) == 2 and "not running" in capsys.readouterr().err
    events = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "stop" and events[-1]["pid"] == proc.pid


@pytest.fixture(params=["s3", "gcs"])
def bucket(request) -> str:
    """A fresh bucket on a loopback server: moto (S3) or gcp-storage-emulator (GCS)."""
    module, fixture = {"s3": ("boto3", "s3_bucket"), "gcs": ("google.cloud.storage", "gcs_bucket")}[
        request.param
    ]
    pytest.importorskip(module)
    return str(request.getfixturevalue(fixture))


def test_runs_on_a_bucket(sweep_dir: Path, bucket: str, tmp_path: Path, capsys) -> None:
    """Run folders synced to a bucket (foundry.sync) list, show and report like local ones."""
    for job in sweep_dir.iterdir():
        sync(str(job), f"{bucket}/runs/sweep/{job.name}", progress=False)
    root = f"{bucket}/runs"
    assert main(["list", root]) == 0
    out = capsys.readouterr().out
    assert "sweep/0_optimizer.lr=0.01" in out and "sweep/1_optimizer.lr=0.03" in out and "finished" in out
    assert main(["--root", root, "show", "--diff", "sweep/1_optimizer.lr=0.03"]) == 0
    out = capsys.readouterr().out
    assert "ep0-ba30  step 30  1000 B" in out and "optimizer.lr: 0.0006 -> 0.03" in out
    report = tmp_path / "s3.html"
    assert main(["--root", root, "report", "sweep", "-o", str(report)]) == 0
    runs = {f"sweep/{p.name}": p for p in sweep_dir.iterdir()}
    assert check_against_metrics(report.read_text(), runs) == 2 * (30 + 3 + 30 + 30 + 30) - 1
    assert main(["stop", f"{root}/sweep/0_optimizer.lr=0.01"]) == 2
    assert "local folder" in capsys.readouterr().err


@pytest.mark.skipif(os.name != "posix", reason="signals")
def test_module_entry_point(sweep_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "foundry.runs", "list", str(sweep_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "1_optimizer.lr=0.03" in proc.stdout


def test_logs_follow_prints_appended_lines(sweep_dir: Path) -> None:
    run = sweep_dir / "0_optimizer.lr=0.01"
    cmd = [sys.executable, "-m", "foundry.runs", "logs", str(run), "-f"]
    # Ctrl-C's default, also when the tests run as a background job (which starts children with SIGINT ignored)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline(), proc.stdout.readline()] == [
            "[foundry] step 1\n",
            "[foundry] step 2\n",
        ]
        with (run / "train.log").open("a") as f:
            f.write("[foundry] step 3\n")
        assert proc.stdout.readline() == "[foundry] step 3\n"
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    assert proc.returncode == 130


@pytest.mark.parametrize("argv", [["list", "{tmp}/nope"], ["--root", "{tmp}/nope", "list"]])
def test_list_of_a_folder_that_does_not_exist_is_an_error(tmp_path: Path, capsys, argv) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'nope'}: no such folder") and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "record", ["no token", "another process", "another host", "launcher, another process"]
)
def test_stop_never_signals_a_process_the_run_did_not_record(sweep_dir: Path, capsys, record: str) -> None:
    """Issue 27: `runs stop` signalled whatever pid a folder named (a folder synced from a bucket, a pid reused
    after a crash): it killed an unrelated process. Host, pid and process start time must all match."""
    run = sweep_dir / "0_optimizer.lr=0.01"
    (run / "final_metrics.json").unlink()
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        token = {"no token": None, "another host": process_token(bystander.pid)}.get(record, "boot:12345")
        host = "elsewhere" if record == "another host" else socket.gethostname()
        live = {"pid": bystander.pid, "host": host, "step": 3, "max_steps": 30, "phase": "step",
                "time": time.time(), "started": time.time() - 5, "token": token}  # fmt: skip
        (run / LIVE_FILE).write_text(json.dumps(live))
        if record.startswith("launcher"):
            with open(run / "events.jsonl", "a") as f:
                f.write(json.dumps({"event": "start", "time": time.time(), "pid": bystander.pid,
                                    "host": socket.gethostname(), "token": "boot:1"}) + "\n")  # fmt: skip
        assert main(["stop", str(run)]) == 2
        err = capsys.readouterr().err
        assert ("host 'elsewhere'" in err) if record == "another host" else ("not running here" in err), err
        time.sleep(0.2)
        assert bystander.poll() is None, "an unrelated process was signalled"
    finally:
        bystander.kill()
        bystander.wait()


def test_show_is_fast_and_light_without_diff(sweep_dir: Path, tmp_path: Path) -> None:
    """Issue 26 item 13: `runs show` took ~11 s (it composed conf/, importing torch and transformers); it now
    prints the recorded overrides and composes only with --diff."""
    import time

    run = sweep_dir / "1_optimizer.lr=0.03"
    (run / ".hydra" / "rank0").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "rank0" / "overrides.yaml").write_text("- optimizer.lr=0.03\n- run_name=sweep\n")
    code = (
        "import sys, runpy; sys.argv = ['foundry.runs', 'show', sys.argv[1]]\n"
        "try:\n    runpy.run_module('foundry.runs', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    assert "overrides (2; the full config diff: runs show --diff):" in proc.stdout
    assert "  optimizer.lr=0.03" in proc.stdout and proc.stdout.strip().endswith("NO-TORCH"), proc.stdout
    assert took < 10  # generous on a loaded CI machine; ~0.4 s here (the import of torch alone is ~2 s)
