"""Acceptance tests through `train.py`: kill -9 and rerun gives the same run; buckets; torn saves; mismatches."""

from __future__ import annotations

import random
import re
import shutil
import signal
import subprocess
import time

import pytest

from foundry.checkpoint import CheckpointStore, find_latest
from tests.foundry.checkpoint.runs import (
    assert_same_final_state,
    assert_same_run,
    command,
    env_for,
    train,
    train_and_kill,
    train_rows,
)
from tests.streaming.storage.fault_proxy import FaultProxy

STEPS = 30
RUN = [
    "trainer.max_duration=30ba",
    "trainer.eval_interval=0",
    "checkpoint=local",
    "checkpoint.save_interval=3ba",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache):
    """An uninterrupted run: its final checkpoint and metrics."""
    cwd = tmp_path_factory.mktemp("ref")
    train([*RUN, "run_name=ref"], cwd, env_for(cache))
    return cwd / "outputs" / "ref"


@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_kill_9_at_a_random_step_then_rerun_is_the_same_run(tmp_path, cache, reference, seed):
    at = random.Random(seed).randint(4, STEPS - 6)
    args = [*RUN, "run_name=killed"]
    run_dir = tmp_path / "outputs" / "killed"
    killed_at = train_and_kill(args, tmp_path, env_for(cache), metrics=run_dir / "metrics.jsonl", at_step=at)
    assert killed_at < STEPS
    proc = train(args, tmp_path, env_for(cache))
    assert "autoresume: loaded" in proc.stdout
    assert_same_run(run_dir, reference, STEPS)


DROPOUT = ["model.resid_pdrop=0.1", "model.emb_pdrop=0.1", "model.attn_config.attn_pdrop=0.1"]


@pytest.fixture(scope="module")
def reference_dropout(tmp_path_factory, cache):
    """An uninterrupted run with dropout on (every step consumes the global RNG)."""
    cwd = tmp_path_factory.mktemp("ref-dropout")
    train([*RUN, *DROPOUT, "run_name=ref"], cwd, env_for(cache))
    return cwd / "outputs" / "ref"


@pytest.mark.slow
def test_kill_9_then_rerun_with_dropout_is_the_same_run(tmp_path, cache, reference_dropout):
    at = random.Random(3).randint(4, STEPS - 6)
    args = [*RUN, *DROPOUT, "run_name=killed"]
    run_dir = tmp_path / "outputs" / "killed"
    killed_at = train_and_kill(args, tmp_path, env_for(cache), metrics=run_dir / "metrics.jsonl", at_step=at)
    assert killed_at < STEPS
    proc = train(args, tmp_path, env_for(cache))
    assert "autoresume: loaded" in proc.stdout and f"(step {STEPS}," not in proc.stdout
    assert_same_run(run_dir, reference_dropout, STEPS)


@pytest.mark.slow
def test_rerun_of_a_finished_run_trains_nothing_more(tmp_path, cache):
    args = ["trainer.max_duration=4ba", "trainer.eval_interval=0", "checkpoint=local", "run_name=done"]
    train(args, tmp_path, env_for(cache))
    proc = train(args, tmp_path, env_for(cache))
    assert "autoresume: loaded" in proc.stdout and "(step 4," in proc.stdout
    assert [r["step"] for r in train_rows(tmp_path / "outputs" / "done" / "metrics.jsonl")] == [1, 2, 3, 4]


@pytest.mark.slow
def test_changed_model_config_fails_naming_the_field(tmp_path, cache):
    args = ["trainer.max_duration=2ba", "trainer.eval_interval=0", "checkpoint=local", "run_name=cfg"]
    train(args, tmp_path, env_for(cache))
    proc = train([*args, "trainer.max_duration=4ba", "model.n_layers=3"], tmp_path, env_for(cache), ok=False)
    assert proc.returncode != 0
    assert "model.n_layers: checkpoint 2, config 3" in proc.stderr


@pytest.mark.slow
def test_save_to_s3_delete_local_run_dir_autoresume_from_bucket(
    tmp_path, cache, reference, s3_bucket, s3_env
):
    env = env_for(cache)  # s3_env put the loopback endpoint and credentials in os.environ
    args = [*RUN, "run_name=ref", f"checkpoint.save_folder={s3_bucket}/ckpts"]
    run_dir = tmp_path / "outputs" / "ref"
    train_and_kill(args, tmp_path, env, metrics=run_dir / "metrics.jsonl", at_step=STEPS // 2)
    saved = find_latest(CheckpointStore(f"{s3_bucket}/ckpts"), scratch=str(tmp_path / "scratch"))
    assert saved is not None and saved.manifest.step >= 3
    shutil.rmtree(run_dir)
    proc = train(args, tmp_path, env)
    assert f"autoresume: loaded {s3_bucket}/ckpts/ep0-ba{saved.manifest.step}" in proc.stdout
    latest = find_latest(CheckpointStore(f"{s3_bucket}/ckpts"), scratch=str(tmp_path / "scratch"))
    assert latest is not None and latest.manifest.step == STEPS
    local = tmp_path / "final"
    for rel in latest.manifest.files:
        latest.store.get(f"{latest.name}/{rel}", str(local / rel))
    assert_same_final_state(local, reference, STEPS)


def test_kill_during_upload_leaves_no_checkpoint_autoresume_would_pick(tmp_path, cache, s3_bucket, s3_env):
    # model.pt is up, state.pt hangs: a torn checkpoint. Which checkpoint uploads second depends on timing
    # (saves queue behind a slow upload and only the newest waits), so every one after ep0-ba3 stalls.
    torn = re.compile(r"/ckpts/(ep0-ba(?!3/)\d+)/state\.pt")

    def stall(n, method, path):  # the second checkpoint's uploads hang until the process is killed
        return 120.0 if method == "PUT" and torn.search(path) else None

    with FaultProxy(s3_env, stall) as proxy:
        env = env_for(cache, S3_ENDPOINT_URL=proxy.url)
        args = [*RUN, "run_name=torn", f"checkpoint.save_folder={s3_bucket}/ckpts"]
        proc = subprocess.Popen(
            command(args), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 300
            while not any(torn.search(p) for _, _, p, _ in proxy.injected) and time.monotonic() < deadline:
                assert proc.poll() is None, "training ended before its upload stalled"
                time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    store = CheckpointStore(f"{s3_bucket}/ckpts")
    names = {rel.split("/")[0] for rel in store.list()}
    stalled = next(m.group(1) for _, _, p, _ in proxy.injected if (m := torn.search(p)))
    assert stalled in names, "the torn checkpoint's first files did reach the bucket"
    latest = find_latest(store, scratch=str(tmp_path / "scratch"))
    assert latest is not None and latest.name == "ep0-ba3"
