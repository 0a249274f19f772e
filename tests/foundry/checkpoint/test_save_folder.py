"""`fill_save_folder`: the one place `checkpoint.save_folder`'s `{run_name}` and `{run_dir}` are filled."""

from __future__ import annotations

from pathlib import Path

from foundry.checkpoint.layout import fill_save_folder


def test_each_placeholder_is_filled_only_when_its_value_is_given():
    folder = "s3://b/{run_name}/x/{run_dir}/{run_name}"
    assert fill_save_folder(folder, run_name="r1") == "s3://b/r1/x/{run_dir}/r1"
    assert fill_save_folder(folder, run_dir=Path("/runs/7")) == "s3://b/{run_name}/x//runs/7/{run_name}"
    assert fill_save_folder(folder, run_name="r1", run_dir="/d") == "s3://b/r1/x//d/r1"
    assert fill_save_folder(folder) == folder
    assert fill_save_folder("./ckpts", run_name="r1", run_dir="/d") == "./ckpts"


def test_the_saver_and_autoresume_use_the_filled_folder(tmp_path, capsys):
    from foundry.checkpoint.config import CheckpointConfig
    from foundry.checkpoint.resume import resolve_start
    from foundry.checkpoint.saver import Checkpointer

    cfg = CheckpointConfig(save_folder=str(tmp_path / "{run_name}"), async_upload=False)
    saver = Checkpointer(cfg, run_name="abc", run_dir=str(tmp_path / "run"), every_steps=1, model_config={})
    saver.close()
    assert saver.store.root == str(tmp_path / "abc")
    assert resolve_start(cfg, run_name="abc", scratch=str(tmp_path / "scratch")) is None
    assert f"no complete checkpoint in {tmp_path / 'abc'};" in capsys.readouterr().out
