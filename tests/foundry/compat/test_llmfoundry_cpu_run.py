"""llm-foundry's `pretrain/mpt-small-cpu.yaml`, unmodified, trains here end to end on a local MDS text folder.

The YAML's train_loader reads `${variables.data_local}` (c4 in MDS); the test writes a tiny MDS dataset with a
`text` column there and points the tokenizer at the shared gpt-neox-20b `tokenizer.json`, scaled down to three
steps with llm-foundry-style overrides. No hub, no network.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from streaming import MDSWriter

REPO = Path(__file__).resolve().parents[3]
YAML = REPO.parent / "shared" / "data" / "llmfoundry_yamls" / "pretrain" / "mpt-small-cpu.yaml"
TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (YAML.is_file() and TOKENIZER.is_file()), reason="../shared/data fixtures not found"
    ),
]


def _text_mds(root: Path) -> None:
    words = "the quick brown fox jumps over a lazy dog while seven wizards judge boxing matches near rivers".split()
    rng = random.Random(0)
    for split, rows in (("train", 48), ("val", 16)):
        with MDSWriter(out=str(root / split), columns={"text": "str"}) as writer:
            for _ in range(rows):
                writer.write({"text": " ".join(rng.choice(words) for _ in range(200))})


def test_mpt_small_cpu_yaml_trains_on_local_data(tmp_path):
    _text_mds(tmp_path / "c4")
    args = [
        f"variables.data_local={tmp_path / 'c4'}",
        f"tokenizer.name={TOKENIZER}",
        "max_duration=3ba",
        "global_train_batch_size=8",
        "device_train_microbatch_size=8",
        "device_eval_batch_size=8",
        "eval_interval=2ba",
        "eval_subset_num_batches=1",
        "train_loader.num_workers=0",
        "eval_loader.num_workers=0",
        "trainer.device=cpu",
    ]
    env = {**os.environ, "FOUNDRY_CACHE": str(tmp_path / "cache"), "WANDB_MODE": "offline"}
    env.pop("RUN_NAME", None)
    proc = subprocess.run(
        [sys.executable, "-m", "foundry.compat.llmfoundry", str(YAML), *args, "--run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "ignored: log_to_console" in proc.stderr and "refused" not in proc.stderr
    run_dir = tmp_path / "outputs" / "mpt_causal_lm_cpu"  # the YAML's run_name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert any("eval/loss" in r for r in rows)
    assert 10.0 < train[0]["train/loss"] < 13.0, train  # about ln(50368) = 10.8 at random init
