"""In-process checkpoint tests: full and sharded round trips, async vs sync, retention, torn saves, safety."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict

import pytest
import torch

from foundry.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    CheckpointStore,
    config_differences,
    find_checkpoints,
    find_latest,
    load_into,
    load_weights,
    resolve_start,
)
from foundry.errors import ConfigError
from foundry.models import MPTModelConfig, build_model
from foundry.optim import AdamWConfig, build_optimizer
from foundry.train.loop import Trainer
from tests.foundry.checkpoint.runs import assert_bitwise_equal
from tests.foundry.checkpoint.trainers import MODEL, cpu_trainer, random_batches


def _trainer(max_steps: int, *, seed: int = 0, loader=None) -> Trainer:
    torch.manual_seed(seed)
    model = build_model(MODEL)
    optimizer = build_optimizer(AdamWConfig(lr=1e-3), model=model)
    batches = random_batches(max_steps) if loader is None else loader
    return cpu_trainer(model, optimizer, batches, max_steps=max_steps)


def _save(tmp_path, trainer, *, fmt="full", keep=-1, asynchronous=True, weights_only=False) -> Checkpointer:
    cfg = CheckpointConfig(
        save_folder=str(tmp_path / "ckpts"),
        save_num_checkpoints_to_keep=keep,
        async_upload=asynchronous,
        save_weights_only=weights_only,
    )
    return Checkpointer(
        cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
    )


def _resume_and_finish(tmp_path, reference: Trainer, *, fmt: str, steps: int = 4, at: int = 2) -> None:
    batches = random_batches(steps)
    first = _trainer(at, loader=batches)
    first.fit()
    ckpt = _save(tmp_path, first, fmt=fmt)
    ckpt.save(first, fmt=fmt)
    ckpt.close()
    second = _trainer(steps, seed=9, loader=batches[at:])
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"))
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path / "scratch"))
    assert start is not None and start.source == "autoresume" and start.info.manifest.step == at
    load_into(second, start, cfg=cfg, cache_root=str(tmp_path / "cache"), model_config=asdict(MODEL))
    assert second.state.step == at
    second.fit()
    assert_bitwise_equal(second.model.state_dict(), reference.model.state_dict(), "model")
    assert_bitwise_equal(
        second.optimizer.state_dict()["state"], reference.optimizer.state_dict()["state"], "optim"
    )


def _one_checkpoint(tmp_path, *, fmt: str = "full", **save_kw) -> Trainer:
    """Trains one step and saves it as `ckpts/ep0-ba1`."""
    tr = _trainer(1)
    tr.fit()
    ckpt = _save(tmp_path, tr, **save_kw)
    ckpt.save(tr, fmt=fmt)
    ckpt.close()
    return tr


@pytest.fixture(scope="module")
def reference() -> Trainer:
    ref = _trainer(4)
    ref.fit()
    return ref


@pytest.mark.parametrize("fmt", ["full", "sharded"])
def test_resume_continues_bitwise_identically(tmp_path, reference, fmt):
    _resume_and_finish(tmp_path, reference, fmt=fmt)


@pytest.mark.parametrize("asynchronous", [True, False])
def test_manifest_lists_every_file_with_size_and_digest(tmp_path, asynchronous):
    _one_checkpoint(tmp_path, asynchronous=asynchronous)
    folder = tmp_path / "ckpts"
    manifest = json.loads((folder / "ep0-ba1" / "manifest.json").read_text())
    assert set(manifest["files"]) == {"model.pt", "state.pt"}
    for name, meta in manifest["files"].items():
        assert os.path.getsize(folder / "ep0-ba1" / name) == meta["bytes"] and len(meta["sha256"]) == 64
    assert manifest["model_config"]["d_model"] == 32 and manifest["step"] == 1
    assert (folder / "latest").read_text().strip() == "ep0-ba1"


def test_async_save_holds_the_state_of_its_step_while_training_goes_on(tmp_path):
    tr = _trainer(3)
    tr.fit()
    before = {k: v.clone() for k, v in tr.model.state_dict().items()}
    ckpt = _save(tmp_path, tr)
    ckpt.save(tr, fmt="full")
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(1.0)  # training moves on while the thread writes
    ckpt.close()
    saved = torch.load(tmp_path / "ckpts" / "ep0-ba3" / "model.pt", weights_only=True)
    assert_bitwise_equal(dict(saved), before)


def test_retention_keeps_the_newest_and_removes_torn_directories(tmp_path):
    tr = _trainer(5)
    torn = tmp_path / "ckpts" / "ep0-ba1"
    torn.mkdir(parents=True)
    (torn / "model.pt").write_bytes(b"partial")
    ckpt = _save(tmp_path, tr, keep=2)
    for _ in range(4):
        tr.train_step(tr._next_batch())
        ckpt.save(tr, fmt="full")
    ckpt.close()
    names = [
        c.name for c in find_checkpoints(CheckpointStore(str(tmp_path / "ckpts")), scratch=str(tmp_path))
    ]
    assert names == ["ep0-ba3", "ep0-ba4"]
    assert sorted(os.listdir(tmp_path / "ckpts")) == ["ep0-ba3", "ep0-ba4", "latest"]


def test_torn_checkpoints_are_skipped_with_a_warning(tmp_path, caplog):
    tr = _trainer(2)
    ckpt = _save(tmp_path, tr)
    tr.train_step(tr._next_batch())
    ckpt.save(tr, fmt="full")
    tr.train_step(tr._next_batch())
    ckpt.save(tr, fmt="full")
    ckpt.close()
    folder = tmp_path / "ckpts"
    (folder / "ep0-ba2" / "state.pt").write_bytes(b"truncated")  # wrong size: torn after the manifest?
    os.makedirs(folder / "ep0-ba3")
    (folder / "ep0-ba3" / "model.pt").write_bytes(b"no manifest")
    latest = find_latest(CheckpointStore(str(folder)), scratch=str(tmp_path))
    assert latest is not None and latest.name == "ep0-ba1"
    assert "ep0-ba3: no manifest.json" in caplog.text and "wrong size ['state.pt']" in caplog.text


def test_weights_only_save_and_load_weights(tmp_path):
    tr = _one_checkpoint(tmp_path, weights_only=True)
    assert sorted(os.listdir(tmp_path / "ckpts" / "ep0-ba1")) == ["manifest.json", "model.pt"]
    model = build_model(MODEL)
    info = load_weights(model, str(tmp_path / "ckpts"), cache_root=str(tmp_path / "c"))
    assert info.manifest.weights_only and info.manifest.step == 1
    assert_bitwise_equal(model.state_dict(), tr.model.state_dict())


def test_sharded_weights_load_into_a_plain_model(tmp_path):
    tr = _one_checkpoint(tmp_path, fmt="sharded")
    files = sorted(os.listdir(tmp_path / "ckpts" / "ep0-ba1"))
    assert ".metadata" in files and "__0_0.distcp" in files and "common.pt" in files
    model = build_model(MODEL)
    load_weights(model, str(tmp_path / "ckpts" / "ep0-ba1"), cache_root=str(tmp_path / "c"))
    assert_bitwise_equal(model.state_dict(), tr.model.state_dict())


def test_strict_load_names_the_mismatch(tmp_path):
    _one_checkpoint(tmp_path)
    bigger = build_model(MPTModelConfig(d_model=32, n_heads=2, n_layers=3, max_seq_len=16, vocab_size=64))
    with pytest.raises(ConfigError, match="blocks.2"):  # one error line (it was WeightMismatch's traceback)
        load_weights(bigger, str(tmp_path / "ckpts"))
    load_weights(bigger, str(tmp_path / "ckpts"), strict=False)  # non-strict: the shared layers load


def test_pickled_objects_are_refused_unless_allowed(tmp_path):
    _one_checkpoint(tmp_path)
    model_pt = tmp_path / "ckpts" / "ep0-ba1" / "model.pt"
    weights = torch.load(model_pt, weights_only=True)
    torch.save({**weights, "evil": Exploit()}, model_pt)
    manifest = tmp_path / "ckpts" / "ep0-ba1" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["files"]["model.pt"]["bytes"] = os.path.getsize(model_pt)
    m["files"]["model.pt"]["sha256"] = hashlib.sha256(model_pt.read_bytes()).hexdigest()  # a crafted manifest
    manifest.write_text(json.dumps(m))
    model = build_model(MODEL)
    with pytest.raises(ValueError, match="allow_pickle"):
        load_weights(model, str(tmp_path / "ckpts"))
    load_weights(model, str(tmp_path / "ckpts"), strict=False, allow_pickle=True)


class Exploit:
    """Stands for any pickled object (a real attack would run code in `__reduce__`)."""


def test_config_differences_name_every_field():
    saved = {"d_model": 64, "attn_config": {"alibi": True, "clip_qkv": None}, "n_layers": 2}
    current = {"d_model": 128, "attn_config": {"alibi": False, "clip_qkv": None}, "n_layers": 2}
    assert config_differences(saved, current) == [
        "model.attn_config.alibi: checkpoint True, config False",
        "model.d_model: checkpoint 64, config 128",
    ]


def test_a_checkpoint_that_does_not_fit_names_only_the_values_that_shape_weights(tmp_path):
    """Issue 40 item 6: the error listed the packing flag `attn_uses_sequence_id`, which changes no tensor."""
    from foundry.checkpoint.resume import StartPoint, load_into, resolve_start

    _one_checkpoint(tmp_path)
    start = resolve_start(
        CheckpointConfig(load_path=str(tmp_path / "ckpts")), run_name="t", scratch=str(tmp_path)
    )
    assert isinstance(start, StartPoint)
    bigger = MPTModelConfig(d_model=32, n_heads=2, n_layers=3, max_seq_len=16, vocab_size=64)
    saved = dict(start.info.manifest.model_config)
    current = {**saved, "n_layers": 3, "attn_config": {**saved["attn_config"], "attn_uses_sequence_id": True}}
    trainer = _trainer(1)
    trainer.model = build_model(bigger)
    with pytest.raises(ConfigError) as info:
        load_into(
            trainer, start, cfg=CheckpointConfig(), cache_root=str(tmp_path / "c"), model_config=current
        )
    assert "model.n_layers: checkpoint 2, config 3" in str(info.value)
    assert "attn_uses_sequence_id" not in str(info.value)


def test_autoresume_with_another_model_config_fails(tmp_path):
    _one_checkpoint(tmp_path)
    cfg = CheckpointConfig(save_folder=str(tmp_path / "ckpts"))
    start = resolve_start(cfg, run_name="t", scratch=str(tmp_path))
    changed = {**asdict(MODEL), "n_layers": 3}
    with pytest.raises(ValueError, match=r"model\.n_layers: checkpoint 2, config 3"):
        load_into(_trainer(2), start, cfg=cfg, cache_root=str(tmp_path / "c"), model_config=changed)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="checkpoint.save_format"):
        CheckpointConfig(save_format="zip")
    with pytest.raises(ValueError, match="save_num_checkpoints_to_keep"):
        CheckpointConfig(save_num_checkpoints_to_keep=0)
    assert CheckpointConfig(save_folder="x").resume_enabled
    assert not CheckpointConfig(save_folder="x", autoresume=False).resume_enabled


def test_remote_save_retention_and_resume_through_s3(tmp_path, s3_bucket, reference):
    batches = random_batches(4)
    tr = _trainer(4, loader=batches)
    cfg = CheckpointConfig(save_folder=f"{s3_bucket}/run", save_num_checkpoints_to_keep=2)
    ckpt = Checkpointer(
        cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
    )
    for _ in range(2):  # each upload finishes before the next save (else only the newest waiting one is kept)
        tr.train_step(tr._next_batch())
        ckpt.save(tr, fmt="full")
        ckpt.wait()
        tr.train_step(tr._next_batch())
        ckpt.save(tr, fmt="sharded")
        ckpt.wait()
    ckpt.close()
    store = CheckpointStore(f"{s3_bucket}/run")
    assert sorted({rel.split("/")[0] for rel in store.list()}) == ["ep0-ba3", "ep0-ba4", "latest"]
    assert not os.listdir(tmp_path / "run" / ".checkpoint-staging"), "staged files are removed once uploaded"
    resumed = _trainer(4, seed=5, loader=batches)
    start = resolve_start(
        CheckpointConfig(save_folder=f"{s3_bucket}/run"), run_name="t", scratch=str(tmp_path / "s")
    )
    assert start is not None and start.info.name == "ep0-ba4" and start.info.manifest.format == "sharded"
    load_into(resumed, start, cfg=cfg, cache_root=str(tmp_path / "c"), model_config=asdict(MODEL))
    assert_bitwise_equal(resumed.model.state_dict(), reference.model.state_dict())


@pytest.mark.parametrize("fmt", ["full", "sharded"])
def test_a_save_folder_on_another_filesystem_publishes_and_resumes(tmp_path, reference, fmt):
    """Issue 27: a save folder on a mounted volume failed every save with EXDEV (the manifest was renamed from
    the run folder's scratch); publishing now writes and renames under the destination."""
    import shutil
    import tempfile

    other = "/dev/shm"
    if not os.path.isdir(other) or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to save to (/dev/shm)")
    folder = tempfile.mkdtemp(dir=other, prefix="foundry-exdev-")
    try:
        (tmp_path / "ckpts").symlink_to(folder)
        _resume_and_finish(tmp_path, reference, fmt=fmt)
        assert not [n for n in os.listdir(os.path.join(folder, "ep0-ba2")) if ".tmp-" in n]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_store_outage_during_a_save_is_waited_out_within_the_budget(
    tmp_path, s3_bucket, s3_env, monkeypatch
):
    """Issue 27: a 25 s outage used up 3 attempts in ~1.3 s and the run died with an empty bucket. Uploads now
    retry for `checkpoint.transfer_budget` seconds; a spent budget names the field."""
    import time

    from tests.streaming.storage.fault_proxy import FaultProxy

    tr = _trainer(1)
    tr.fit()
    until = time.monotonic() + 3.0
    with FaultProxy(s3_env, lambda n, m, p: 503 if time.monotonic() < until else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        cfg = CheckpointConfig(save_folder=f"{s3_bucket}/run", async_upload=False, transfer_budget=60)
        ckpt = Checkpointer(
            cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
        )
        ckpt.save(tr, fmt="full")
        ckpt.close()
        assert proxy.injected, "the save met the outage"
    store = CheckpointStore(f"{s3_bucket}/run")
    assert "ep0-ba1/manifest.json" in store.list()

    with FaultProxy(s3_env, lambda n, m, p: 503) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        cfg = CheckpointConfig(save_folder=f"{s3_bucket}/run2", async_upload=False, transfer_budget=1)
        ckpt = Checkpointer(
            cfg, run_name="t", run_dir=str(tmp_path / "run2"), every_steps=1, model_config=asdict(MODEL)
        )
        with pytest.raises(OSError, match=r"checkpoint.transfer_budget=1 s spent"):
            ckpt.save(tr, fmt="full")
        ckpt.close()


def test_training_goes_on_while_an_upload_waits_out_an_outage(
    tmp_path, s3_bucket, s3_env, monkeypatch, reference
):
    """Issue 27: `save` waited for the previous upload, so a store outage stopped training. Now saves queue:
    one upload in flight, only the newest waits (older waiting ones are dropped), and after the outage the
    newest state is published and resumes bitwise."""
    import time

    from tests.streaming.storage.fault_proxy import FaultProxy

    batches = random_batches(4)
    tr = _trainer(4, loader=batches)
    outage = {"until": 0.0}
    with FaultProxy(s3_env, lambda n, m, p: 503 if time.monotonic() < outage["until"] else None) as proxy:
        monkeypatch.setenv("S3_ENDPOINT_URL", proxy.url)
        cfg = CheckpointConfig(save_folder=f"{s3_bucket}/run", transfer_budget=120)
        ckpt = Checkpointer(
            cfg, run_name="t", run_dir=str(tmp_path / "run"), every_steps=1, model_config=asdict(MODEL)
        )
        blocked = []
        for step in range(4):
            tr.train_step(tr._next_batch())
            if (
                step == 0
            ):  # the outage starts before the first save (which lists the store, in the background)
                outage["until"] = time.monotonic() + 6.0
            t0 = time.monotonic()
            ckpt.save(tr, fmt="full")
            blocked.append(time.monotonic() - t0)
        assert time.monotonic() < outage["until"], "the four saves returned during the outage"
        ckpt.close()
        assert proxy.injected, "the uploads met the outage"
    assert max(blocked) < 3.0, blocked
    assert ckpt.dropped == 2  # ba2 and ba3 waited behind ba1 and were replaced
    store = CheckpointStore(f"{s3_bucket}/run")
    published = sorted({rel.split("/")[0] for rel in store.list() if rel.endswith("/manifest.json")})
    assert published == ["ep0-ba1", "ep0-ba4"]
    assert store.read_text("latest", scratch=str(tmp_path / "s")).strip() == "ep0-ba4"
    resumed = _trainer(4, seed=5, loader=batches)
    start = resolve_start(
        CheckpointConfig(save_folder=f"{s3_bucket}/run"), run_name="t", scratch=str(tmp_path / "s")
    )
    assert start is not None and start.info.name == "ep0-ba4"
    load_into(resumed, start, cfg=cfg, cache_root=str(tmp_path / "c"), model_config=asdict(MODEL))
    assert_bitwise_equal(resumed.model.state_dict(), reference.model.state_dict())


def test_rank_zero_abandons_a_sharded_checkpoint_another_rank_dropped(tmp_path):
    """A rank that drops a waiting multi-rank sharded checkpoint says so with a marker; rank 0 then stops
    waiting for its files (it would otherwise wait an hour) and leaves the torn folder to retention."""
    ckpt = _save(tmp_path, _trainer(1))
    ckpt.world = 2
    folder = tmp_path / "ckpts" / "ep0-ba2"
    folder.mkdir(parents=True)
    (folder / ".done-rank0.json").write_text("{}")
    (folder / ".dropped-rank1.json").write_text("{}")
    assert ckpt._await_markers("ep0-ba2", timeout=5) is None
    ckpt.close()
