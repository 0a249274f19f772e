"""Local checkpoints are digest-checked on load (issue 39: one flipped bit in `model.pt` resumed silently):
autoresume skips a damaged checkpoint with a warning naming the file and falls back to the one before it;
`load_path` naming a damaged one is refused with one error line."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.foundry.checkpoint.runs import env_for, train

RUN = ["trainer.eval_interval=0", "checkpoint=local", "checkpoint.save_interval=3ba"]


def _flip_a_bit(ckpt) -> str:
    """Flips one bit in the middle of the checkpoint's largest file; its name."""
    target = max((p for p in ckpt.iterdir() if p.name != "manifest.json"), key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    return target.name


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A 6-step run (checkpoints at steps 3 and 6) whose newest checkpoint then had one bit flipped."""
    cwd = tmp_path_factory.mktemp("digests")
    env = env_for(tmp_path_factory.mktemp("cache"))
    train([*RUN, "trainer.max_duration=6ba", "run_name=bits"], cwd, env)
    ckpts = cwd / "outputs" / "bits" / "checkpoints"
    name = _flip_a_bit(ckpts / "ep0-ba6")
    copy = tmp_path_factory.mktemp("copy") / "ep0-ba6"  # for load_path: the fallback run saves step 6 again
    shutil.copytree(ckpts / "ep0-ba6", copy)
    return cwd, env, copy, name


def test_autoresume_skips_a_damaged_local_checkpoint_and_falls_back(damaged):
    cwd, env, _copy, name = damaged
    proc = train([*RUN, "trainer.max_duration=9ba", "run_name=bits"], cwd, env)
    warning = [line for line in proc.stderr.splitlines() if "autoresume skips" in line]
    assert len(warning) == 1 and "ep0-ba6" in warning[0] and name in warning[0], proc.stderr[-2000:]
    assert "does not match" in warning[0] and "sha256" in warning[0]
    rows = [json.loads(x) for x in (cwd / "outputs" / "bits" / "metrics.jsonl").read_text().splitlines() if x]
    steps = [r["step"] for r in rows if "train/loss" in r]
    assert steps[-6:] == [4, 5, 6, 7, 8, 9]  # resumed from step 3, the intact one


def test_load_path_to_a_damaged_local_checkpoint_is_one_error_line(damaged, tmp_path):
    _cwd, env, bad, name = damaged
    proc = train([*RUN, "trainer.max_duration=9ba", "run_name=other", f"checkpoint.load_path={bad}",
                  "checkpoint.save_folder=null"], tmp_path, {**env, "HYDRA_FULL_ERROR": ""}, ok=False)  # fmt: skip
    err = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2 and err[-1].startswith("error:"), proc.stderr[-2000:]
    assert name in err[-1] and "does not match" in err[-1] and "Traceback" not in proc.stderr
