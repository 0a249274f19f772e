"""The way back (`scripts/convert_checkpoint.py --to composer`): a run trained here continues in llm-foundry.

Fast tests check the file against Composer 0.32's format (read back by our own Composer reader, and with plain
`torch.load`); the slow one trains 3 steps here with `train.py`, converts, resumes with Composer's Trainer
(`load_path`) in llm-foundry's venv (`composer_resume.py`) and compares its next 3 losses with ours continuing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foundry.compat.composer import read_composer_checkpoint
from foundry.compat.composer.export import to_composer
from foundry.errors import run_tool
from tests.foundry.compat.test_composer_sources import _script

REPO = Path(__file__).resolve().parents[3]
REF_PYTHON = Path(os.environ.get("LLMFOUNDRY_REFERENCE_PYTHON", "/tmp/ref/venv-llmfoundry/bin/python"))
FP32 = 1e-5  # the tolerance of test_composer_reference.py (fp32 CPU kernels in another op order)
SEQ, ROWS = 32, 96
TRAIN = [
    "data=local-mds", "data.eval_split=null", "data.shuffle=false", "data.shuffle_seed=17", "data.num_canonical_nodes=1",
    "model=mpt-tiny", "model.d_model=32", "model.max_seq_len=32", "model.vocab_size=50368", "trainer=cpu",
    "trainer.global_train_batch_size=4", "trainer.device_train_microbatch_size=4", "trainer.grad_clip_norm=1.0",
    "optimizer=decoupled-adamw", "optimizer.lr=1e-3", "optimizer.weight_decay=1e-4", "scheduler=constant-warmup",
    "scheduler.t_warmup=2ba", "checkpoint=local", "checkpoint.save_interval=3ba", "checkpoint.save_format=full",
    "seed=17",
]  # fmt: skip


def _mds(root: Path) -> Path:
    from streaming import MDSWriter

    rng = np.random.default_rng(0)
    with MDSWriter(out=str(root / "train"), columns={"tokens": "bytes"}, size_limit=1 << 12) as w:
        for _ in range(ROWS):
            w.write({"tokens": rng.integers(1, 50368, SEQ, dtype=np.int64).tobytes()})
    return root


def _train(tmp: Path, data: Path, name: str, steps: int) -> Path:
    out = tmp / name
    args = [*TRAIN, f"data.local={data}", f"trainer.max_duration={steps}ba", f"run_name={name}"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args, f"hydra.run.dir={out}"],
        cwd=tmp, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[float]]:
    """(run dir, data, losses of steps 4-6) of a 6-step run here, checkpointed at step 3."""
    tmp = tmp_path_factory.mktemp("ours")
    data = _mds(tmp / "mds")
    run = _train(tmp, data, "six", 6)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert len(losses) == 6
    return run, data, losses[3:]


def _checkpoint(run: Path, step: int) -> Path:
    found = sorted(p for p in (run / "checkpoints").iterdir() if p.name.endswith(f"ba{step}"))
    assert found, sorted(p.name for p in (run / "checkpoints").iterdir())
    return found[0]


@pytest.mark.slow
def test_export_has_composers_layout(trained, tmp_path: Path) -> None:
    run, _, _ = trained
    out = tmp_path / "ep0-ba3-rank0.pt"
    what = to_composer(str(_checkpoint(run, 3)), str(out))
    assert what == "step 3; model, DecoupledAdamW, scheduler, counters, RNG of 1 rank(s), data position"
    raw: dict[str, Any] = torch.load(out, weights_only=False)  # we wrote it: plain containers
    state = raw["state"]
    assert state["timestamp"]["Timestamp"]["batch"] == 3 and state["timestamp"]["Timestamp"]["sample"] == 12
    assert state["schedulers"]["LambdaLR"]["last_epoch"] == 4  # ours at 3: Composer counts one ahead
    group = state["optimizers"]["DecoupledAdamW"]["param_groups"][0]
    assert group["decoupled_weight_decay"] is True and all(p.startswith("model.") for p in group["params"])
    assert all(k.startswith("model.") for k in state["model"]) and isinstance(
        raw["rng"][0]["numpy"][1], np.ndarray
    )
    # and back: our Composer reader gives the same checkpoint (weights, optimizer, counters, data position)
    back = read_composer_checkpoint(str(out))
    assert back.counters["step"] == 3 and back.scheduler is not None and back.scheduler["last_epoch"] == 3
    assert back.dataset_state is not None and back.dataset_state["sample_in_epoch"] == 12
    assert back.model_config["d_model"] == 32


def test_convert_script_refuses_a_url_out_in_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "ck").mkdir()
    code = run_tool(
        lambda: _script().main(["--src", str(tmp_path / "ck"), "--to", "composer", "--out", "s3://b/x.pt"])
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "local .pt" in err[0]


@pytest.mark.slow
@pytest.mark.skipif(
    not (REF_PYTHON.parent.parent / ".setup-complete").exists(),
    reason=f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)",
)
def test_llmfoundry_resumes_our_checkpoint_with_our_losses(trained, tmp_path: Path) -> None:
    run, data, ours = trained
    out = tmp_path / "ep0-ba3-rank0.pt"
    script = _script()
    assert (
        run_tool(
            lambda: script.main(["--src", str(_checkpoint(run, 3)), "--to", "composer", "--out", str(out)])
        )
        == 0
    )
    result = tmp_path / "resumed.json"
    proc = subprocess.run(
        [str(REF_PYTHON), str(Path(__file__).with_name("composer_resume.py")), str(out), str(data), "6", str(result)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(result.read_text())
    assert got["start"] == {"batch": 3, "sample": 12, "token": 384}
    assert [s["step"] for s in got["steps"]] == [4, 5, 6]
    assert [s["lr"] for s in got["steps"]] == pytest.approx([1e-3] * 3, rel=1e-12)
    assert [s["loss"] for s in got["steps"]] == pytest.approx(ours, abs=FP32)


def test_composer_file_round_trips_through_ours(tmp_path: Path) -> None:
    """Composer -> ours (`to_foundry`) -> Composer (`to_composer`): the same weights, optimizer state, schedule
    counter (Composer's last_epoch 5 again), timestamp and data position."""
    from foundry.compat.composer import to_foundry
    from tests.foundry.compat.test_composer_checkpoint import _model_and_optimizer, composer_state

    model, opt = _model_and_optimizer()
    torch.save(composer_state(model, opt), tmp_path / "in.pt")
    where, _ = to_foundry(str(tmp_path / "in.pt"), str(tmp_path / "ours"))
    what = to_composer(where, str(tmp_path / "out.pt"))
    assert "note:" not in what
    a, b = (
        read_composer_checkpoint(str(tmp_path / "in.pt")),
        read_composer_checkpoint(str(tmp_path / "out.pt")),
    )
    assert a.model.keys() == b.model.keys() and all(torch.equal(a.model[k], b.model[k]) for k in a.model)
    assert a.counters == b.counters and a.dataset_state == b.dataset_state
    assert all(
        b.model_config[k] == v for k, v in a.model_config.items() if not isinstance(v, dict)
    )  # +defaults
    assert a.scheduler is not None and b.scheduler is not None
    assert a.scheduler["last_epoch"] == b.scheduler["last_epoch"] == 4
    assert a.optimizer is not None and b.optimizer is not None
    for name, st in a.optimizer["state"].items():
        assert all(
            torch.equal(st[k], b.optimizer["state"][name][k]) for k in ("step", "exp_avg", "exp_avg_sq")
        )
    raw = torch.load(tmp_path / "out.pt", weights_only=False)
    assert raw["state"]["schedulers"]["LambdaLR"]["last_epoch"] == 5
    assert a.rng is not None and b.rng is not None and a.rng[0]["numpy"][1] == b.rng[0]["numpy"][1]


def test_a_mid_epoch_shuffled_run_says_its_order_differs() -> None:
    from foundry.compat.composer.export import _dataset_state, _other_order

    ours = {"shuffle": True, "sample_in_epoch": 12, "plan_version": 2, "epoch": 0, "num_canonical_nodes": 1,
            "shuffle_seed": 17, "initial_physical_nodes": 1, "streams": []}  # fmt: skip
    assert _other_order(ours) and not _other_order({**ours, "order": "mosaicml-streaming"})
    assert not _other_order({**ours, "sample_in_epoch": 0}) and not _other_order({**ours, "shuffle": False})
    assert _dataset_state(ours) == {"epoch": 0, "sample_in_epoch": 12, "num_canonical_nodes": 1,
                                    "shuffle_seed": 17, "initial_physical_nodes": 1}  # fmt: skip


def test_docs_way_back_table_is_the_codes() -> None:
    from foundry.compat.composer.export import CARRIED

    table = ["| Here | Composer checkpoint |", "|---|---|", *(f"| {a} | {b} |" for a, b in CARRIED)]
    page = (REPO / "docs" / "guides" / "from-llm-foundry.md").read_text()
    assert "\n".join(table) in page[page.index("### The way back") :]
