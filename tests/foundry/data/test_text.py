"""Text batches from MDS: the collator, the StreamingDataset-backed loader, and the missing-data error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.data.collate import TextCollator
from foundry.data.text import TextDataConfig, build_text_dataloader
from foundry.tasks.pretrain import build_data
from streaming import MDSWriter
from streaming.reader.world import World

CONF = Path(__file__).resolve().parents[3] / "conf"


class _Tok:
    pad_token_id = None
    eos_token_id = 0


def _write(root, split, n, seq=8):
    with MDSWriter(out=str(root / split), columns={"tokens": "ndarray:uint16"}) as w:
        for i in range(n):
            w.write({"tokens": np.arange(i * seq, (i + 1) * seq, dtype=np.uint16)})


def test_collator_truncates_casts_and_pads_with_ignored_labels():
    c = TextCollator(max_seq_len=4, pad_token_id=0)
    out = c(
        [
            {"tokens": np.array([5, 6, 7, 8, 9], dtype=np.uint16)},
            {"tokens": np.array([1, 2], dtype=np.uint16)},
        ]
    )
    assert out["input_ids"].dtype == torch.int64
    assert out["input_ids"].tolist() == [[5, 6, 7, 8], [1, 2, 0, 0]]
    assert out["labels"].tolist() == [[5, 6, 7, 8], [1, 2, -100, -100]]
    assert out["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]


def test_collator_full_rows_have_no_mask_and_keep_eos_labels():
    c = TextCollator(max_seq_len=3, pad_token_id=0)
    out = c([{"tokens": np.array([0, 1, 0], dtype=np.uint8)}])
    assert set(out) == {"input_ids", "labels"}
    assert out["labels"].tolist() == [[0, 1, 0]]


def test_collator_reads_legacy_bytes_columns():
    c = TextCollator(max_seq_len=3, pad_token_id=0, token_encoding_type="int32")
    out = c([{"tokens": np.array([3, 4, 5], dtype=np.int32).tobytes()}])
    assert out["input_ids"].tolist() == [[3, 4, 5]]


def test_loader_yields_every_sample_once_per_epoch_and_resumes(tmp_path):
    _write(tmp_path, "train", 20)
    cfg = TextDataConfig(local=str(tmp_path))
    kw = {"tokenizer": _Tok(), "device_batch_size": 4, "world": World(), "split": "train", "max_seq_len": 8}
    loader = build_text_dataloader(cfg, seed=3, **kw)
    assert len(loader) == 5
    firsts = sorted(int(b["input_ids"][i, 0]) for b in loader for i in range(4))
    assert firsts == [i * 8 for i in range(20)]
    # resume after two batches: the rest matches the uninterrupted epoch
    a = build_text_dataloader(cfg, seed=3, **kw)
    it = iter(a)
    seen = [next(it)["input_ids"] for _ in range(2)]
    state = a.state_dict()
    rest = [b["input_ids"] for b in it]
    b = build_text_dataloader(cfg, seed=3, **kw)
    b.load_state_dict(state)
    resumed = [x["input_ids"] for x in b]
    assert len(seen) + len(resumed) == 5
    for x, y in zip(rest, resumed):
        assert torch.equal(x, y)


def test_missing_local_split_says_how_to_create_it(tmp_path):
    cfg = TextDataConfig(
        local=str(tmp_path / "c4"), create_hint="python scripts/data_prep/convert_dataset_hf.py X"
    )
    with pytest.raises(FileNotFoundError) as info:
        build_text_dataloader(
            cfg,
            tokenizer=_Tok(),
            device_batch_size=2,
            world=World(),
            split="train_small",
            max_seq_len=8,
            seed=0,
        )
    msg = str(info.value)
    assert "train_small" in msg and "convert_dataset_hf.py X" in msg and "data.local" in msg


def test_config_needs_a_location():
    with pytest.raises(ValueError, match="data.local and data.remote"):
        TextDataConfig()


def test_loader_streams_from_a_remote_into_the_local_cache(tmp_path):
    _write(tmp_path / "remote", "train", 12)
    cfg = TextDataConfig(remote=f"file://{tmp_path / 'remote'}", local=str(tmp_path / "cache"))
    loader = build_text_dataloader(
        cfg, tokenizer=_Tok(), device_batch_size=4, world=World(), split="train", max_seq_len=8, seed=0
    )
    assert sum(b["input_ids"].shape[0] for b in loader) == 12
    assert (tmp_path / "cache" / "train" / "index.json").is_file()


def test_loader_with_worker_processes_yields_every_sample(tmp_path):
    _write(tmp_path, "train", 16)
    cfg = TextDataConfig(local=str(tmp_path), num_workers=2)
    loader = build_text_dataloader(
        cfg, tokenizer=_Tok(), device_batch_size=4, world=World(), split="train", max_seq_len=8, seed=1
    )
    firsts = sorted(int(x) for b in loader for x in b["input_ids"][:, 0])
    assert firsts == [i * 8 for i in range(16)]
    assert all(b["input_ids"].dtype == torch.int64 for b in loader)


@pytest.mark.parametrize(
    ("setting", "device_type", "pinned"),
    [(None, "cuda", True), (None, "cpu", False), (False, "cuda", False), (True, "cpu", True)],
)
def test_pin_memory_reaches_the_dataloader(tmp_path, setting, device_type, pinned):
    _write(tmp_path, "train", 8)
    cfg = TextDataConfig(local=str(tmp_path), pin_memory=setting)
    kw = {"tokenizer": _Tok(), "device_batch_size": 4, "world": World(), "split": "train", "max_seq_len": 8}
    for evaluate in (False, True):
        loader = build_text_dataloader(cfg, seed=0, device_type=device_type, evaluate=evaluate, **kw)
        assert loader.pin_memory is pinned


def test_train_py_passes_its_device_to_the_pin_memory_default(tmp_path):
    _write(tmp_path, "train", 8)
    register_configs()
    overrides = ["data=c4", f"data.local={tmp_path}", "data.train_split=train", "data.eval_split=null"]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        assert to_train_config(compose("train", overrides=overrides)).data.pin_memory is None
        cfg = to_train_config(
            compose("train", overrides=[*overrides, "tokenizer=none", "trainer.device=cpu"])
        )
        assert build_data(cfg, world=World(), is_main=True).train.pin_memory is False
        pinned = to_train_config(
            compose("train", overrides=[*overrides, "tokenizer=none", "data.pin_memory=true"])
        )
        assert build_data(pinned, world=World(), is_main=True).train.pin_memory is True
