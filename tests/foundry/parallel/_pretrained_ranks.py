"""Worker for `test_pretrained_fsdp.py`: `init_device: meta` + `pretrained: true` under FSDP2.

Usage: `python -m torch.distributed.run --nproc_per_node=W _pretrained_ranks.py FOLDER OUT [STEPS]`.
Each rank builds the model of FOLDER (a safetensors checkpoint) on meta, `wrap_model` shards it and loads
only its shards; the full state dict is gathered and, on rank 0, compared exactly with a plain
`from_pretrained` load (parameters, buffers, tied weights, logits); then STEPS AdamW steps run on fixed rows.
Rank 0 writes {"equal": [...mismatching keys], "losses": [...], "read_bytes": [per rank], "full_bytes": n,
"tied": bool} to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

import foundry.parallel.pretrained_load as loader
from foundry.models import build_model_on
from foundry.models.hf_causal_lm import HFCausalLMConfig
from foundry.parallel import ParallelismConfig, init_distributed, teardown, wrap_model


def main(folder: Path, out: Path, steps: int) -> None:
    pc = ParallelismConfig(strategy="fsdp")
    ctx = init_distributed(pc, device=torch.device("cpu"))
    meta_cfg = HFCausalLMConfig(pretrained_model_name_or_path=str(folder), init_device="meta")
    model = build_model_on(meta_cfg, device=ctx.device, defer_init=True)
    assert all(p.is_meta for p in model.parameters())
    reads: list[int] = []
    original = loader.load_pretrained_local_

    def counting(*args, **kwargs):
        report = original(*args, **kwargs)
        reads.append(report.bytes_read)
        return report

    loader.load_pretrained_local_ = counting
    try:
        model = wrap_model(model, cfg=pc, ctx=ctx, precision="fp32")
    finally:
        loader.load_pretrained_local_ = original
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    ids = (torch.arange(16)[None, :] * 3 + torch.arange(4)[:, None] * 5) % 90
    logits = model(ids).logits.detach()
    gathered: list[int] = [0] * ctx.world_size
    dist.all_gather_object(gathered, reads[0])
    losses = []
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mine = ids[ctx.rank :: ctx.world_size]
    for _ in range(steps):
        loss = model(mine, labels=mine).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / ctx.world_size)
    if ctx.rank == 0:
        plain_cfg = HFCausalLMConfig(pretrained_model_name_or_path=str(folder))
        plain = build_model_on(plain_cfg, device="cpu")
        ref = plain.state_dict()
        bad = sorted(k for k in ref if k not in full or not torch.equal(ref[k], full[k]))
        bad += sorted(k for k in full if k not in ref)
        bad += sorted(n for n, b in plain.named_buffers() if not torch.equal(b, buffers[n]))
        if not torch.equal(plain(ids).logits, logits):
            bad.append("logits")
        head = model.get_output_embeddings()
        tied = head is not None and head.weight is model.get_input_embeddings().weight
        result = {
            "mismatched": bad,
            "losses": losses,
            "read_bytes": gathered,
            "full_bytes": sum(t.numel() * t.element_size() for t in ref.values()),
            "tied": tied,
        }
        out.write_text(json.dumps(result))
    teardown(ctx)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 3)
