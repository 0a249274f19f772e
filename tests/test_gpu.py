"""CUDA checks (`make test-gpu` on a GPU machine; skipped without one): the model's numerics on the GPU against
the CPU, bf16 training through `train.py`, pinned batches from the pretraining loader, and per-document masks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from foundry.data.collate import TextCollator
from foundry.data.documents import DocumentRule
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from streaming import MDSWriter, StreamingDataLoader, StreamingDataset
from tests.train_py import run_train_py

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

V = 512


def _tiny(**attn: object) -> MPTForCausalLM:
    torch.manual_seed(0)
    cfg = MPTConfig(d_model=128, n_heads=4, n_layers=2, vocab_size=V, max_seq_len=128, attn_config=attn)
    return MPTForCausalLM(cfg).eval()


@pytest.mark.parametrize("attn", [{"alibi": True}, {"rope": True}, {}], ids=["alibi", "rope", "learned"])
def test_mpt_on_cuda_matches_cpu(attn: dict) -> None:
    model = _tiny(**attn)
    ids = torch.randint(0, V, (2, 96), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        model.cuda()
        fp32 = model(input_ids=ids.cuda()).logits.float().cpu()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = model(input_ids=ids.cuda()).logits.float().cpu()
    torch.testing.assert_close(fp32, ref, atol=2e-4, rtol=2e-4)
    assert (bf16 - ref).abs().max().item() < 0.1


def test_packed_row_losses_equal_documents_alone_on_cuda() -> None:
    model = _tiny(alibi=True, attn_uses_sequence_id=True).cuda()
    docs = [torch.randint(1, V, (n,), generator=torch.Generator().manual_seed(n)) for n in (40, 25, 31)]
    row = torch.cat(docs)[None].cuda()
    seq = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)])[None].cuda()
    with torch.no_grad():
        packed = model(input_ids=row, sequence_id=seq).logits[0]
        start = 0
        for d in docs:
            alone = model(input_ids=d[None].cuda()).logits[0]
            torch.testing.assert_close(packed[start : start + len(d)], alone, atol=1e-4, rtol=1e-4)
            start += len(d)


@pytest.mark.parametrize("workers", [0, 2])
def test_pretraining_batches_are_pinned(tmp_path: Path, workers: int) -> None:
    rng = np.random.default_rng(0)
    with MDSWriter(out=str(tmp_path / "d"), columns={"tokens": "ndarray:int32:64"}) as w:
        for row in rng.integers(0, V, size=(256, 64), dtype=np.int32):
            w.write({"tokens": row})
    ds = StreamingDataset(local=str(tmp_path / "d"), batch_size=8, shuffle=True)
    collate = TextCollator(max_seq_len=64, pad_token_id=0, documents=DocumentRule(eos_id=0))
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers, pin_memory=True, collate_fn=collate)
    batches = [b for _, b in zip(range(4), loader, strict=False)]
    assert batches and all(v.is_pinned() for b in batches for v in b.values())
    on_gpu = {k: v.to("cuda", non_blocking=True) for k, v in batches[0].items()}
    torch.cuda.synchronize()
    assert all(torch.equal(on_gpu[k].cpu(), v) for k, v in batches[0].items())


@pytest.mark.slow
def test_train_py_bf16_on_cuda(tmp_path: Path) -> None:
    run_train_py(
        ["model=mpt-tiny", "trainer=gpu", "trainer.max_duration=6ba", "trainer.global_train_batch_size=8",
         "trainer.eval_interval=3ba", "trainer.eval_subset_num_batches=2", "checkpoint=none", "run_name=gpu"],
        tmp_path,
    )  # fmt: skip
    metrics = json.loads((tmp_path / "outputs" / "gpu" / "final_metrics.json").read_text())
    assert np.isfinite(metrics["train/loss"]) and np.isfinite(metrics["eval/loss"])
    assert metrics["train/loss"] < 8.0  # ~ln(vocab) at init: finite and not diverging
