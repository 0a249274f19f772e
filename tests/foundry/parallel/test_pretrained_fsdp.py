"""`init_device: meta` + `pretrained: true` under FSDP2 (torchrun, 2 ranks, gloo on CPU): each rank reads
only its shards of the safetensors checkpoint; the gathered full state dict, the buffers (rotary
`inv_freq`, MPT's ALiBi slopes), the tied embeddings and the logits equal a plain `from_pretrained` load
exactly, and training steps run. Before this feature the schema refused the combination."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.dist_launch import run_ranks
from tests.foundry.models._tiny_checkpoints import save_tiny_llama, save_tiny_mpt

pytestmark = [pytest.mark.dist, pytest.mark.slow]
WORKER = Path(__file__).with_name("_pretrained_ranks.py")
REPO = Path(__file__).resolve().parents[3]
KINDS = {
    "mpt-export": save_tiny_mpt,
    "llama": save_tiny_llama,
    "llama-tied": lambda folder: save_tiny_llama(folder, tied=True),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sharded_load_equals_plain_load_and_trains(tmp_path, kind):
    folder = KINDS[kind](tmp_path / kind)
    out = tmp_path / "result.json"
    proc = run_ranks(WORKER, folder, out, "3", nproc=2, env={"PYTHONPATH": str(REPO)}, cwd=REPO, timeout=600)
    result = json.loads(out.read_text())
    assert result["mismatched"] == []
    assert result["tied"] == (kind == "llama-tied")
    # each rank read its half, not the whole model (the tied head is read once)
    assert all(0 < read < 0.6 * result["full_bytes"] for read in result["read_bytes"])
    assert "[foundry] pretrained load (rank 1)" in proc.stdout
    losses = result["losses"]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_train_py_meta_pretrained_fsdp_matches_one_process_plain_load(tmp_path):
    """The real path: `torchrun train.py model=hf-causal-lm model.init_device=meta model.pretrained=true
    parallelism=fsdp` follows the loss curve of one process that loads the same weights with from_pretrained."""
    from tests.foundry.parallel.test_torchrun import _train

    folder = save_tiny_llama(tmp_path / "llama", vocab=320)  # the quick-start data's 300 ids fit
    hf = [
        "model=hf-causal-lm",
        f"model.pretrained_model_name_or_path={folder}",
        "model.pretrained=true",
        "data.max_seq_len=32",
    ]
    one = _train(tmp_path / "cache", tmp_path, [*hf, "model.init_device=cpu"])
    two = _train(tmp_path / "cache", tmp_path, [*hf, "model.init_device=meta", "parallelism=fsdp"], nproc=2)
    assert two == pytest.approx(one, abs=1e-5, rel=0)
