"""A sharded Composer checkpoint written by 2 ranks (llm-foundry 0.22 / Composer 0.32, FSDP2 on CPU with gloo,
launched with Composer's own `composer -n 2`) converts here in one process: the weights give the logits
llm-foundry's 2-rank model gave at that step, and the counters are the 2-rank run's. Slow; skipped without
the llm-foundry venv."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from foundry.checkpoint.convert import load_model
from foundry.compat.composer import read_composer_checkpoint, to_foundry

REF_PYTHON = Path(os.environ.get("LLMFOUNDRY_REFERENCE_PYTHON", "/tmp/ref/venv-llmfoundry/bin/python"))
LAUNCHER = REF_PYTHON.with_name("composer")
SCRIPT = Path(__file__).with_name("composer_reference.py")
FP32 = 1e-5  # as test_composer_reference.py
pytestmark = [
    pytest.mark.slow,
    pytest.mark.dist,
    pytest.mark.skipif(
        not (REF_PYTHON.parent.parent / ".setup-complete").exists() or not LAUNCHER.exists(),
        reason=f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)",
    ),
]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else ["(none)"]
    return "\n".join(text[-lines:])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Runs the reference script under `composer -n 2` (the MDS set written first, by one process). Each rank logs to
    its own file; a rank still running after 420 s dumps its threads' stacks there and exits (the script's
    watchdog), so a hang fails here, inside pytest-timeout's 600 s, with both ranks' logs in the message."""
    out = tmp_path_factory.mktemp("composer-2ranks")
    subprocess.run(
        [str(REF_PYTHON), str(SCRIPT), str(out / "out"), "--data-only"], cwd=out, check=True, timeout=300
    )
    logs = [out / f"rank{{rank}}.{stream}.txt" for stream in ("stdout", "stderr")]
    command = [str(LAUNCHER), "-n", "2", "--master_port", str(_port()), "--stdout", str(logs[0])]
    command += ["--stderr", str(logs[1]), str(SCRIPT), str(out / "out"), "--sharded"]
    env = {"COMPOSER_REF_WATCHDOG_S": "420", **os.environ}
    with subprocess.Popen(command, cwd=out, env=env, start_new_session=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as launcher:  # fmt: skip
        try:
            printed, _ = launcher.communicate(timeout=540)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            printed, _ = launcher.communicate()
    if launcher.returncode != 0:
        ranks = "\n".join(
            f"--- rank {rank} {stream} ---\n{_tail(out / f'rank{rank}.{stream}.txt')}"
            for rank in (0, 1)
            for stream in ("stdout", "stderr")
        )
        pytest.fail(f"composer -n 2 exited {launcher.returncode}\n{printed[-4000:]}\n{ranks}")
    return out / "out"


@pytest.mark.parametrize("step", [3, 6])
def test_two_rank_sharded_checkpoint_gives_llmfoundrys_logits(
    two_ranks: Path, tmp_path: Path, step: int
) -> None:
    folder = two_ranks / "sharded" / f"ep0-ba{step}"
    assert sorted(p.name for p in folder.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    ref = torch.load(two_ranks / "reference-sharded.pt", weights_only=True)
    where, what = to_foundry(str(folder), str(tmp_path / "ours"))
    assert what.startswith(f"step {step}, epoch 0; model, DecoupledAdamW")
    model, manifest = load_model(where)
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"]).logits
    assert (logits - ref[f"logits_ba{step}"]).abs().max().item() < FP32
    ckpt = read_composer_checkpoint(str(folder))
    assert ckpt.counters["samples"] == step * 8 and ckpt.global_batch_size == 8  # 2 ranks x 4
    assert ckpt.rng is not None and len(ckpt.rng) == 2 and manifest.world_size == 2
