"""Your own MDS of token ids trains with `data=local-mds data.local=... model.vocab_size=N` and no tokenizer;
an id outside the model's vocabulary is a clear error naming the fix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from foundry.config import register_configs, to_train_config
from foundry.loggers import read_metrics
from foundry.tasks.pretrain import pretrain

CONF = Path(__file__).resolve().parents[3] / "conf"
SMALL_RUN = [
    "model=mpt-tiny",
    "trainer.device=cpu",
    "trainer.precision=fp32",
    "trainer.max_duration=2ba",
    "trainer.global_train_batch_size=2",
    "trainer.device_train_microbatch_size=1",
    "trainer.device_eval_batch_size=2",
    "trainer.eval_subset_num_batches=1",
    "trainer.progress_bar=false",
    "checkpoint=none",
]


def write_token_mds(root: Path, *, vocab: int, rows: int = 16, seq: int = 128, seed: int = 0) -> Path:
    """MDS splits `train` and `val` of `tokens` rows (ndarray:uint16), what convert_dataset_hf.py writes."""
    from streaming import MDSWriter

    rng = np.random.default_rng(seed)
    for split in ("train", "val"):
        with MDSWriter(out=str(root / split), columns={"tokens": "ndarray:uint16"}) as w:
            for _ in range(rows):
                w.write({"tokens": rng.integers(0, vocab, size=seq, dtype=np.uint16)})
    return root


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        return to_train_config(compose("train", overrides=["data=local-mds", *SMALL_RUN, *overrides]))


def test_token_ids_train_two_steps_without_a_tokenizer(tmp_path):
    data = write_token_mds(tmp_path / "mds", vocab=1000)
    cfg = _cfg(f"data.local={data}", "model.vocab_size=1024")
    assert cfg.tokenizer.name is None  # data=local-mds selects tokenizer=none
    metrics = pretrain(cfg, run_dir=tmp_path / "run")
    assert metrics["train/loss"] > 0 and metrics["eval/loss"] > 0
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "train/loss" in r] == [
        1,
        2,
    ]


def test_an_id_beyond_model_vocab_size_names_the_setting(tmp_path):
    data = write_token_mds(tmp_path / "mds", vocab=1000)
    cfg = _cfg(f"data.local={data}", "model.vocab_size=512")
    with pytest.raises(ValueError, match=r"token id \d+ but model.vocab_size=512.*e\.g\. 1024"):
        pretrain(cfg, run_dir=tmp_path / "run")


def test_with_a_tokenizer_it_is_used_as_before(tmp_path, neox_tokenizer_path):
    if not neox_tokenizer_path.is_file():
        pytest.skip("needs ../shared/data/tokenizers/gpt-neox-20b")
    cfg = _cfg(f"data.local={tmp_path}", f"tokenizer.name={neox_tokenizer_path}")
    assert cfg.tokenizer.name == str(neox_tokenizer_path) and cfg.tokenizer.eos_token == "<|endoftext|>"
    with pytest.raises(ValueError, match="the tokenizer has 50281 tokens but model.vocab_size=512"):
        pretrain(replace_data(cfg, write_token_mds(tmp_path / "mds", vocab=500)), run_dir=tmp_path / "run")


def replace_data(cfg, local: Path):
    from dataclasses import replace

    return replace(cfg, data=replace(cfg.data, local=str(local)))
