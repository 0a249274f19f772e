"""`task=finetune` under `torchrun --nproc_per_node=2` (gloo): DDP trains and resumes mid-epoch with packing to
the same losses and weights as the uninterrupted run; full finetuning under FSDP2 gives one process's losses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from foundry.data.finetune.instruct import write_instruct_dataset
from foundry.data.quickstart import quickstart_corpus, train_bpe_tokenizer
from tests.dist_launch import run_ranks

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.dist


def _torchrun(cwd: Path, args: list[str], *, nproc: int = 2) -> None:
    env = {"HYDRA_FULL_ERROR": "1", "FOUNDRY_CACHE": str(cwd / "cache")}
    run_ranks(REPO / "train.py", *args, nproc=nproc, env=env, cwd=cwd, timeout=600)


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train/loss"] for r in rows if "train/loss" in r}


def _weights(ck: Path, step: int) -> dict[str, torch.Tensor]:
    (folder,) = ck.glob(f"*-ba{step}")
    state = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)
    return state.get("model", state)


def test_ddp_finetune_resumes_mid_epoch_with_packing(tmp_path):
    write_instruct_dataset(tmp_path / "instruct", additions=200)
    train_bpe_tokenizer(quickstart_corpus(150_000), vocab_size=300, path=tmp_path / "tokenizer.json")
    args = [
        "experiment=finetune-cpu", "parallelism=ddp", f"data.hf_name={tmp_path / 'instruct'}",
        "data.quickstart_local=null", f"tokenizer.name={tmp_path / 'tokenizer.json'}", "data.packing_ratio=2.5",
        "trainer.max_duration=6ba", "trainer.global_train_batch_size=8", "trainer.device_train_microbatch_size=2",
        "trainer.eval_interval=0", "trainer.eval_first=false", "trainer.eval_subset_num_batches=2",
        "trainer.log_interval=1", "scheduler.t_warmup=0ba", "checkpoint=local", "checkpoint.save_interval=1ba",
        "checkpoint.save_num_checkpoints_to_keep=-1", "checkpoint.async_upload=false", "from_scratch=true",
    ]  # fmt: skip
    _torchrun(tmp_path, [*args, "run_name=straight", f"checkpoint.save_folder={tmp_path / 'straight'}"])
    straight = _losses(tmp_path / "outputs" / "straight")
    assert sorted(straight) == [1, 2, 3, 4, 5, 6]
    expected = _weights(tmp_path / "straight", 6)
    for step in (4, 5, 6):  # a crash after step 3
        shutil.rmtree(next((tmp_path / "straight").glob(f"*-ba{step}")))
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    _torchrun(tmp_path, [*args, "run_name=resumed", f"checkpoint.save_folder={tmp_path / 'resumed'}"])
    resumed = _losses(tmp_path / "outputs" / "resumed")
    assert resumed == {s: straight[s] for s in (4, 5, 6)}
    got = _weights(tmp_path / "resumed", 6)
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)


def test_fsdp2_full_finetuning_gives_one_process_losses(tmp_path):
    """Padded rows: rank r takes examples r, r+2, ... of the epoch order, so each global batch holds the
    examples one process's batch holds, and the token-weighted losses agree."""
    write_instruct_dataset(tmp_path / "instruct", additions=200)
    train_bpe_tokenizer(quickstart_corpus(150_000), vocab_size=300, path=tmp_path / "tokenizer.json")
    args = [
        "experiment=finetune-cpu", f"data.hf_name={tmp_path / 'instruct'}", "data.quickstart_local=null",
        f"tokenizer.name={tmp_path / 'tokenizer.json'}", "data.packing_ratio=null", "from_scratch=true",
        "trainer.max_duration=3ba", "trainer.global_train_batch_size=8", "trainer.device_train_microbatch_size=2",
        "trainer.eval_interval=0", "trainer.eval_first=false", "trainer.log_interval=1", "scheduler.t_warmup=0ba",
        "checkpoint=none", "trainer.progress_bar=false",
    ]  # fmt: skip
    _torchrun(tmp_path, [*args, "run_name=one", "parallelism=none"], nproc=1)
    _torchrun(tmp_path, [*args, "run_name=fsdp", "parallelism=fsdp"])
    one, fsdp = _losses(tmp_path / "outputs" / "one"), _losses(tmp_path / "outputs" / "fsdp")
    assert sorted(one) == sorted(fsdp) == [1, 2, 3]
    assert all(abs(one[s] - fsdp[s]) < 1e-5 for s in one), (one, fsdp)
    assert one[3] != one[1]  # the steps trained


def test_ddp_mds_finetuning_with_dropped_rows_stays_in_lockstep_and_resumes(tmp_path):
    """MDS rows where every third has no loss token within max_seq_len: each rank drops a different number,
    yet both take full batches for the same number of steps (past the stream's epoch end), and a resume
    mid-run (refill carry in the checkpoint) gives the same losses and weights."""
    from streaming import MDSWriter

    train_bpe_tokenizer(quickstart_corpus(150_000), vocab_size=300, path=tmp_path / "tokenizer.json")
    with MDSWriter(out=str(tmp_path / "mds" / "train"), columns={"prompt": "str", "response": "str"}) as w:
        for i in range(48):
            w.write(
                {"prompt": "word " * 100 if i % 3 == 1 else f"What is {i} plus {i}?", "response": f"{2 * i}"}
            )
    args = [
        "task=finetune", "model=mpt-tiny", "data=finetune/local-mds", f"data.local={tmp_path / 'mds'}",
        "data.max_seq_len=64", f"tokenizer.name={tmp_path / 'tokenizer.json'}", "from_scratch=true",
        "parallelism=ddp", "trainer=cpu", "trainer.max_duration=16ba", "trainer.global_train_batch_size=4",
        "trainer.device_train_microbatch_size=2", "trainer.eval_interval=0", "trainer.eval_first=false",
        "trainer.log_interval=1", "trainer.progress_bar=false", "checkpoint=local", "checkpoint.save_interval=1ba",
        "checkpoint.save_num_checkpoints_to_keep=-1", "checkpoint.async_upload=false",
    ]  # fmt: skip
    _torchrun(tmp_path, [*args, "run_name=straight", f"checkpoint.save_folder={tmp_path / 'straight'}"])
    straight = _losses(tmp_path / "outputs" / "straight")
    assert sorted(straight) == list(range(1, 17))  # 12 steps per epoch: the second epoch ran too
    expected = _weights(tmp_path / "straight", 16)
    for step in range(11, 17):  # a crash after step 10
        shutil.rmtree(next((tmp_path / "straight").glob(f"*-ba{step}")))
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    _torchrun(tmp_path, [*args, "run_name=resumed", f"checkpoint.save_folder={tmp_path / 'resumed'}"])
    resumed = _losses(tmp_path / "outputs" / "resumed")
    assert resumed == {s: straight[s] for s in range(11, 17)}
    got = _weights(tmp_path / "resumed", 16)
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in got)
