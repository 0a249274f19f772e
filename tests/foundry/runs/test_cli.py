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

from foundry.live import LIVE_FILE
from foundry.runs.cli import main
from foundry.runs.show import config_diff, default_config
from foundry.sync import sync
from stackbase.process import start_token
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


def test_a_mistyped_run_name_gets_a_suggestion(sweep_dir: Path, capsys) -> None:
    """Issue 40 item 6: `runs show quickstrat` listed every run without naming the one meant."""
    root = str(sweep_dir.parents[1])
    assert main(["--root", root, "show", "multirun/sweep/1_optimizer.lr=0.3"]) == 2
    err = capsys.readouterr().err
    assert (
        err.strip().endswith("did you mean 'multirun/sweep/1_optimizer.lr=0.03'?")
        and len(err.splitlines()) == 1
    )


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


_FAKE_RANK0 = (
    "import json, signal, sys, time\n"
    "from stackbase.process import claim\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
    "c = claim(sys.argv[1], 'rank0')\n"
    "print(json.dumps({'token': c.token, 'proof': c.proof}), flush=True)\n"
    "time.sleep(60)\n"
)


def _fake_rank0(run: Path) -> tuple[subprocess.Popen, dict]:
    """A real process standing in for rank 0: it claims `run` (as the Liveness callback does) and exits 75 on
    SIGTERM, as the trainer's preemption path does. Returns it and its claim."""
    proc = subprocess.Popen([sys.executable, "-c", _FAKE_RANK0, str(run)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _write_live(run: Path, pid: int, **fields) -> None:
    live = {"pid": pid, "host": socket.gethostname(), "step": 3, "max_steps": 30, "phase": "step",
            "time": time.time(), "started": time.time() - 5, **fields}  # fmt: skip
    (run / LIVE_FILE).write_text(json.dumps(live))


def test_stop_signals_rank0_of_a_run_without_launcher(sweep_dir: Path, capsys) -> None:
    run = sweep_dir / "0_optimizer.lr=0.01"
    (run / "final_metrics.json").unlink()
    proc, claimed = _fake_rank0(run)
    try:
        _write_live(run, proc.pid, **claimed)
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
    "record",
    ["no proof", "start token only", "another host", "launcher, no proof", "another run's proof",
     "copied into another folder", "another user's registry"],
)  # fmt: skip
def test_stop_never_signals_a_process_the_run_did_not_record(
    sweep_dir: Path, tmp_path: Path, capsys, monkeypatch, record: str
) -> None:
    """Issues 27 and 39: `runs stop` signalled whatever pid a folder named; then whatever pid matched the boot id
    and start time the folder recorded, both world-readable in /proc, so a forged folder (a shared `outputs/`, a
    synced bucket) got SIGTERM sent to any process its reader may signal. The process must prove it claimed
    this folder through the user's private registry (`stackbase.process`)."""
    run = sweep_dir / "0_optimizer.lr=0.01"
    (run / "final_metrics.json").unlink()
    other = sweep_dir / "1_optimizer.lr=0.03"
    bystander, claimed = _fake_rank0(other)  # one of our own runs, in another folder
    try:
        fields = {
            "no proof": {"token": start_token(bystander.pid)},
            "start token only": {"token": start_token(bystander.pid), "proof": None},
            "another host": {**claimed, "host": "elsewhere"},
            "launcher, no proof": {"token": start_token(bystander.pid)},
            "another run's proof": {"token": claimed["token"], "proof": "0" * 64},
            "copied into another folder": claimed,
            "another user's registry": claimed,
        }[record]
        _write_live(run, bystander.pid, **fields)
        if record.startswith("launcher"):
            with open(run / "events.jsonl", "a") as f:
                f.write(json.dumps({"event": "start", "time": time.time(), "pid": bystander.pid,
                                    "host": socket.gethostname(), "token": start_token(bystander.pid)}) + "\n")  # fmt: skip
        if record == "another user's registry":  # the bystander's claim is not in the reader's registry
            (tmp_path / "mine").mkdir(mode=0o700)
            monkeypatch.setenv("FOUNDRY_PROC_DIR", str(tmp_path / "mine"))
        assert main(["stop", str(run)]) == 2
        err = capsys.readouterr().err
        assert ("host 'elsewhere'" in err) if record == "another host" else ("not running here" in err), err
        assert len(err.splitlines()) == 1, err
        time.sleep(0.2)
        assert bystander.poll() is None, "an unrelated process was signalled"
    finally:
        bystander.kill()
        bystander.wait()


def test_stop_refuses_a_registry_others_can_write(
    sweep_dir: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """The registry is the one thing trusted: a folder or entry anyone else could write proves nothing."""
    run = sweep_dir / "0_optimizer.lr=0.01"
    (run / "final_metrics.json").unlink()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("FOUNDRY_PROC_DIR", str(shared))
    proc, claimed = _fake_rank0(run)  # the child cannot register in a shared folder: its claim is unbacked
    try:
        _write_live(run, proc.pid, **claimed)
        assert main(["stop", str(run)]) == 2 and "never claimed" in capsys.readouterr().err
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_show_is_fast_and_light_without_diff(sweep_dir: Path, tmp_path: Path) -> None:
    """Issue 26 item 13: `runs show` took ~11 s (it composed conf/, importing torch and transformers); it now
    prints the recorded overrides and composes only with --diff."""
    run = sweep_dir / "1_optimizer.lr=0.03"
    (run / ".hydra" / "rank0").mkdir(parents=True, exist_ok=True)
    (run / ".hydra" / "rank0" / "overrides.yaml").write_text("- optimizer.lr=0.03\n- run_name=sweep\n")
    code = (
        "import sys, runpy; sys.argv = ['foundry.runs', 'show', sys.argv[1]]\n"
        "try:\n    runpy.run_module('foundry.runs', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "overrides (2; the full config diff: runs show --diff):" in proc.stdout
    assert "  optimizer.lr=0.03" in proc.stdout and proc.stdout.strip().endswith("NO-TORCH"), proc.stdout
