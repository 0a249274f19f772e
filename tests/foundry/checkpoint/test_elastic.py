"""Elastic resume through `train.py`: save with N ranks, resume with M (same global batch), same run.

The first launch trains 6 steps and saves; the second (another world size, another parallelism) autoresumes
and trains to 12. Steps 7..12 must match an uninterrupted one-process run within 1e-5: the model, optimizer
and the data order (the relaxed partition over fixed canonical nodes) all continue exactly. A constant
schedule keeps the learning rate independent of `max_duration`.
"""

from __future__ import annotations

import pytest

from tests.foundry.checkpoint.runs import env_for, train, train_rows

pytestmark = pytest.mark.dist

COMMON = [
    "trainer.global_train_batch_size=8",
    "trainer.device_train_microbatch_size=2",
    "trainer.eval_interval=0",
    "data.num_canonical_nodes=1",
    "scheduler=constant-warmup",
    "scheduler.t_warmup=2ba",
    "checkpoint=local",
    "checkpoint.save_interval=6ba",
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache) -> list[float]:
    cwd = tmp_path_factory.mktemp("ref")
    train([*COMMON, "trainer.max_duration=12ba", "run_name=ref"], cwd, env_for(cache, OMP_NUM_THREADS="1"))
    return [r["train/loss"] for r in train_rows(cwd / "outputs" / "ref" / "metrics.jsonl")]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((2, ["parallelism=ddp"]), (1, [])),
        ((2, ["parallelism=fsdp", "checkpoint.save_format=sharded"]), (1, [])),
        ((1, ["checkpoint.save_format=sharded"]), (2, ["parallelism=fsdp"])),
        ((1, []), (2, ["parallelism=ddp"])),
    ],
    ids=["ddp2-full-to-1", "fsdp2-sharded-to-1", "1-sharded-to-fsdp2", "1-full-to-ddp2"],
)
def test_resume_on_another_world_size_continues_the_same_run(tmp_path, cache, reference, first, second):
    env = env_for(cache, OMP_NUM_THREADS="1")
    (n1, args1), (n2, args2) = first, second
    train(
        [*COMMON, *args1, "trainer.max_duration=6ba", "run_name=el"],
        tmp_path,
        env,
        torchrun=n1 if n1 > 1 else 0,
    )
    proc = train(
        [*COMMON, *args2, "trainer.max_duration=12ba", "run_name=el"],
        tmp_path,
        env,
        torchrun=n2 if n2 > 1 else 0,
    )
    assert f"saved by {n1} rank(s), now {n2}" in proc.stdout
    rows = train_rows(tmp_path / "outputs" / "el" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["train/loss"] for r in rows] == pytest.approx(reference, abs=1e-5, rel=0)
