"""LoRA under FSDP2 on CPU/gloo (torchrun, 2 ranks): the frozen base is sharded, the adapters train, the
losses match one process, and both the sharded checkpoint and an adapters-only one are usable."""

from __future__ import annotations

import pytest
import torch

from foundry.checkpoint.adapters import is_adapter_key
from tests.foundry.parallel.test_torchrun import _train

pytestmark = pytest.mark.dist

LORA = [
    "+peft=lora",
    "model.peft_config.lora_dropout=0",
    "model.peft_config.r=4",
    "optimizer.lr=0.01",
    "model.init_device=meta",
]


def test_lora_fsdp2_matches_one_process_and_saves(tmp_path):
    cache = tmp_path / "cache"
    one = _train(cache, tmp_path, LORA)
    two = _train(cache, tmp_path, [*LORA, "parallelism=fsdp", "checkpoint=local"], nproc=2)
    assert two == pytest.approx(one, abs=1e-5, rel=0)
    assert two[-1] < two[0]  # the adapters learn
    from foundry.checkpoint.convert import load_model

    sharded = tmp_path / "outputs" / "r1" / "checkpoints"
    model, manifest = load_model(str(sharded))
    assert manifest.format == "sharded" and manifest.world_size == 2
    assert any(".lora_B." in n and p.abs().sum() > 0 for n, p in model.named_parameters())
    _train(
        cache,
        tmp_path,
        [*LORA, "parallelism=fsdp", "checkpoint=local", "checkpoint.save_adapters_only=true"],
        nproc=2,
    )
    saved = torch.load(
        next((tmp_path / "outputs" / "r2" / "checkpoints").glob("ep*/model.pt")), weights_only=True
    )
    assert saved and all(is_adapter_key(k) for k in saved)
    assert {k: v.shape for k, v in saved.items()} == {
        k: v.shape for k, v in model.state_dict().items() if is_adapter_key(k)
    }
