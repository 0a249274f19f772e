"""The spike guard and checkpoints: a rollback past a saved step saves that step again with the new state."""

from __future__ import annotations

import pytest
import torch

from foundry.checkpoint.callback import attach_checkpointing
from foundry.checkpoint.config import CheckpointConfig
from foundry.models import MPTModelConfig
from foundry.train.spike_guard import SpikeGuardConfig
from tests.foundry.checkpoint.runs import assert_bitwise_equal, env_for, final_state, train, train_and_kill
from tests.foundry.train.test_spike_guard import _clean, _poisoned, _run


def _with_checkpoints(folder):
    def attach(trainer):
        cfg = CheckpointConfig(save_folder=str(folder), save_format="full", async_upload=False)
        model_config = MPTModelConfig(d_model=32, n_heads=2, n_layers=2, max_seq_len=16, vocab_size=64)
        attach_checkpointing(
            trainer,
            cfg,
            run_name="sg",
            run_dir=str(folder.parent),
            save_every_steps=5,
            model_config=model_config,
            global_batch_size=8,
        )

    return attach


def test_a_checkpoint_inside_the_rolled_back_span_is_saved_again(tmp_path, capsys):
    batches = _clean(9)
    guard = SpikeGuardConfig(enabled=True, snapshot_interval=4, min_history=2, window=4)
    # snapshot after step 4; step 5 (batch 4) saved; step 6 (batch 5) spikes -> back to 4, skip batches 4, 5
    guarded = _run(
        _poisoned(batches, 5), steps=6, guard=guard, setup=_with_checkpoints(tmp_path / "g" / "ck")
    )
    assert guarded.guard is not None and guarded.guard.skipped == [4, 5]
    assert capsys.readouterr().out.count("ep0-ba5 complete") == 2
    _run(
        batches[:4] + batches[6:],
        steps=6,
        guard=SpikeGuardConfig(),
        setup=_with_checkpoints(tmp_path / "r" / "ck"),
    )
    for step in (5, 6):
        model, optim = final_state(tmp_path / "g" / "ck" / f"ep0-ba{step}")
        ref_model, ref_optim = final_state(tmp_path / "r" / "ck" / f"ep0-ba{step}")
        assert_bitwise_equal(model, ref_model, f"model@{step}")
        assert_bitwise_equal(optim, ref_optim, f"optimizer@{step}")
    assert torch.equal(
        guarded.model.state_dict()["inner.transformer.wte.weight"],
        final_state(tmp_path / "g" / "ck" / "ep0-ba6")[0]["inner.transformer.wte.weight"],
    )


GUARDED = [
    "trainer.max_duration=14ba",
    "trainer.eval_interval=0",
    "trainer.spike_guard.enabled=true",
    "trainer.spike_guard.snapshot_interval=2",
    "trainer.spike_guard.min_history=2",
    "checkpoint=local",
    "checkpoint.save_interval=4ba",
]


@pytest.mark.slow
def test_train_py_with_the_guard_killed_and_rerun_is_the_same_run(tmp_path):
    """The guard's state rides in the checkpoint (loaded with weights_only) and the rerun is exact."""
    cache = tmp_path / "cache"
    (tmp_path / "ref").mkdir()
    train([*GUARDED, "run_name=ref"], tmp_path / "ref", env_for(cache))
    args = [*GUARDED, "run_name=k"]
    run_dir = tmp_path / "outputs" / "k"
    assert train_and_kill(args, tmp_path, env_for(cache), metrics=run_dir / "metrics.jsonl", at_step=6) < 14
    assert "autoresume: loaded" in train(args, tmp_path, env_for(cache)).stdout
    model, optim = final_state(run_dir / "checkpoints" / "ep0-ba14")
    ref_model, ref_optim = final_state(tmp_path / "ref" / "outputs" / "ref" / "checkpoints" / "ep0-ba14")
    assert_bitwise_equal(model, ref_model, "model")
    assert_bitwise_equal(optim, ref_optim, "optimizer")
    state = torch.load(run_dir / "checkpoints" / "ep0-ba14" / "state.pt", weights_only=True)
    assert state["run"]["spike_guard"]["drawn"] == 14
