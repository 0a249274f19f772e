"""The finetuning loader: padded and packed batches, per-rank shares, mid-epoch resume (memory and MDS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from foundry.data.finetune import FinetuneDataConfig, build_finetune_dataloader
from foundry.data.finetune.masks import IGNORE_INDEX
from streaming.reader.world import World

N = 60


def _rows(n: int = N) -> list[dict]:
    rows: list[dict] = []
    for i in range(n):
        if i % 7 == 3:
            msgs = [{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": f"hello {i}"}]
            rows.append({"messages": msgs})
        else:
            rows.append(
                {"prompt": f"Question {i}: what is {i} plus {i}? " * (1 + i % 4), "response": f" {2 * i}"}
            )
    return rows


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    with open(tmp_path / "train.jsonl", "w") as f:
        for row in _rows():
            f.write(json.dumps(row) + "\n")
    return tmp_path


def _loader(cfg: FinetuneDataConfig, tok, *, world: World | None = None, batch: int = 4, seq: int = 64):
    return build_finetune_dataloader(
        cfg,
        tokenizer=tok,
        device_batch_size=batch,
        world=world or World(),
        split="train",
        max_seq_len=seq,
        seed=3,
    )


def _same(a: list[dict], b: list[dict]) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a, b)
    )


def test_padded_batches(data_dir, neox):
    loader = _loader(FinetuneDataConfig(hf_name=str(data_dir)), neox)
    batches = list(loader)
    assert len(batches) == N // 4
    b = batches[0]
    assert set(b) == {"input_ids", "labels", "attention_mask"}
    assert all(v.shape == (4, 64) and v.dtype == torch.int64 for v in b.values())
    pad = b["attention_mask"] == 0
    assert (b["labels"][pad] == IGNORE_INDEX).all() and (b["input_ids"][pad] == neox.eos_token_id).all()
    for row in range(4):  # every row ends its response with EOS and trains on it
        n = int(b["attention_mask"][row].sum())
        assert b["input_ids"][row, n - 1] == neox.eos_token_id == b["labels"][row, n - 1]


def test_packed_rows_keep_examples_apart(data_dir, neox):
    loader = _loader(FinetuneDataConfig(hf_name=str(data_dir), packing_ratio=3), neox, seq=128)
    batches = list(loader)
    assert batches and all(
        set(b) == {"input_ids", "labels", "attention_mask", "sequence_id"} for b in batches
    )
    examples = 0
    for b in batches:
        seq = b["sequence_id"]
        assert ((seq == -1) == (b["attention_mask"] == 0)).all()
        for row in range(seq.shape[0]):
            ids = seq[row][seq[row] >= 0]
            assert (ids.diff() >= 0).all()
            starts = torch.nonzero(torch.diff(seq[row], prepend=torch.tensor([-2])) > 0).flatten()
            starts = [int(s) for s in starts if seq[row, s] > 0]
            assert all(b["labels"][row, s] == IGNORE_INDEX for s in starts)  # no label across examples
            examples += int(ids.max()) + 1 if len(ids) else 0
    assert examples > len(batches) * 4  # more than one example per row on average
    assert loader.packing_ratio == 3.0


def test_ranks_get_disjoint_equal_shares(data_dir, neox):
    cfg = FinetuneDataConfig(hf_name=str(data_dir))
    shares = [_loader(cfg, neox, world=World(ranks_per_node=2, rank=r)).source.shard(0) for r in range(2)]
    assert len(shares[0]) == len(shares[1]) == N // 2
    assert not set(shares[0].tolist()) & set(shares[1].tolist())


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("packing", [None, 2.5])
def test_resume_mid_epoch_matches_uninterrupted(data_dir, neox, ranks, packing):
    cfg = FinetuneDataConfig(hf_name=str(data_dir), packing_ratio=packing, max_leftover_bins_to_keep=None)
    for rank in range(ranks):
        world = World(ranks_per_node=ranks, rank=rank)
        full = _loader(cfg, neox, world=world, batch=2)
        ref = list(full) + list(full)  # two epochs
        first = _loader(cfg, neox, world=world, batch=2)
        it = iter(first)
        head = [next(it) for _ in range(3)]
        state = json.loads(json.dumps(first.state_dict()))  # the state is JSON-able
        resumed = _loader(cfg, neox, world=world, batch=2)
        resumed.load_state_dict(state)
        tail = list(resumed) + list(resumed)
        assert _same(head + tail, ref)


def test_auto_packing_ratio(data_dir, neox):
    loader = _loader(FinetuneDataConfig(hf_name=str(data_dir), packing_ratio="auto"), neox, batch=2, seq=256)
    assert loader.packing_ratio is not None and loader.packing_ratio >= 1.0
    assert next(iter(loader))["input_ids"].shape == (2, 256)


def test_rows_without_loss_tokens_are_dropped_and_counted(tmp_path, neox):
    rows = [{"prompt": "word " * 100, "response": "x"}] * 3 + [{"prompt": "q", "response": "a"}] * 5
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    loader = _loader(FinetuneDataConfig(hf_name=str(tmp_path)), neox, batch=1, seq=32)
    assert loader.dropped_examples == 3 and len(list(loader)) == 5


def test_bad_row_fails_at_build_naming_it(tmp_path, neox):
    rows = [{"prompt": "q", "response": "a"}, {"messages": [{"role": "user", "content": "x"}]}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match="row 1: a chat needs at least 2 messages"):
        _loader(FinetuneDataConfig(hf_name=str(tmp_path)), neox)


def _write_mds(root: Path, rows: list[dict]) -> None:
    from streaming import MDSWriter

    with MDSWriter(
        out=str(root / "train"), columns={"prompt": "str", "response": "str"}, size_limit=2000
    ) as w:
        for row in rows:
            w.write(row)


@pytest.mark.parametrize("packing", [None, 2.0])
def test_mds_source_resumes(tmp_path, neox, packing):
    rows = [r for r in _rows() if "prompt" in r]
    _write_mds(tmp_path / "mds", rows)
    cfg = FinetuneDataConfig(local=str(tmp_path / "mds"), packing_ratio=packing)
    ref = list(_loader(cfg, neox, batch=2))
    assert len(ref) >= 10 and ref[0]["input_ids"].shape == (2, 64)
    first = _loader(cfg, neox, batch=2)
    it = iter(first)
    head = [next(it) for _ in range(4)]
    state = first.state_dict()
    resumed = _loader(cfg, neox, batch=2)
    resumed.load_state_dict(state)
    assert _same(head + list(resumed), ref)


def test_config_errors_name_fields():
    with pytest.raises(ValueError, match="exactly one source"):
        FinetuneDataConfig()
    with pytest.raises(ValueError, match="not both"):
        FinetuneDataConfig(hf_name="x", local="y")
    with pytest.raises(ValueError, match="data.packing_ratio="):
        FinetuneDataConfig(hf_name="x", packing_ratio=0.5)
    with pytest.raises(ValueError, match="data.packing_ratio="):
        FinetuneDataConfig(hf_name="x", packing_ratio="max")
    with pytest.raises(ValueError, match="data.target_prompts="):
        FinetuneDataConfig(hf_name="x", target_prompts="some")
    assert FinetuneDataConfig(hf_name="x", packing_ratio="2").packing_ratio == 2.0


def _mds_with_dropped_rows(root: Path) -> list[dict]:
    """MDS rows where every third one has no loss token within 32 tokens (its prompt fills the row)."""
    rows = [{"prompt": ("word " * 60 if i % 3 == 1 else f"q{i}"), "response": f" a{i}"} for i in range(40)]
    _write_mds(root, rows)
    return rows


@pytest.mark.parametrize("packing", [None, 2.0])
@pytest.mark.parametrize("ranks", [1, 2])
def test_mds_dropped_rows_are_refilled_and_resumable(tmp_path, neox, ranks, packing):
    _mds_with_dropped_rows(tmp_path / "mds")
    cfg = FinetuneDataConfig(
        local=str(tmp_path / "mds"), packing_ratio=packing, max_leftover_bins_to_keep=None
    )
    steps = []
    for rank in range(ranks):
        world = World(ranks_per_node=ranks, rank=rank)
        full = _loader(cfg, neox, world=world, batch=2, seq=32)
        ref = [list(full) for _ in range(3)]  # 3 epochs: the 1/3 dropped rows make ranks read ahead
        assert all(len(epoch) == len(full) for epoch in ref)  # every epoch: exactly len() steps
        assert full.dropped_examples > 0
        for batch in (b for epoch in ref for b in epoch):  # every row of every batch trains on something
            assert batch["input_ids"].shape == (2, 32)
            assert bool((batch["labels"] != IGNORE_INDEX).any(dim=1).all())
        steps.append(len(full))
        flat = [b for epoch in ref for b in epoch]
        for cut in (3, len(full) + 1):  # mid-epoch, and after the stream wrapped into its next epoch
            first = _loader(cfg, neox, world=world, batch=2, seq=32)
            it = (b for _ in range(3) for b in first)  # epochs back to back, as the trainer reads them
            head = [next(it) for _ in range(cut)]
            state = json.loads(json.dumps(first.state_dict()))
            resumed = _loader(cfg, neox, world=world, batch=2, seq=32)
            resumed.load_state_dict(state)
            tail = list(resumed) + list(resumed) + list(resumed)
            assert _same(head + tail[: len(flat) - cut], flat)
    assert len(set(steps)) == 1  # ranks in lockstep


def test_mds_refill_keeps_stream_order(tmp_path, neox):
    """Padded, unshuffled: batches hold the kept rows in stored order, each dropped row replaced by the next."""
    rows = _mds_with_dropped_rows(tmp_path / "mds")
    cfg = FinetuneDataConfig(local=str(tmp_path / "mds"), shuffle=False)
    loader = _loader(cfg, neox, batch=2, seq=32)
    got = [
        neox.decode(ids[mask.bool()])
        for b in loader
        for ids, mask in zip(b["input_ids"], b["attention_mask"])
    ]
    kept = [r for r in rows if len(r["prompt"]) < 10]  # 27 of 40: the epoch's 20 steps read on into the next
    assert len(got) == 2 * len(loader) == 40 and loader.dropped_examples == 20
    for text, row in zip(got, kept + kept, strict=False):
        assert text.startswith(row["prompt"]) and row["response"].strip() in text
