"""Real Composer checkpoints (llm-foundry 0.22 + Composer 0.32, written by `composer_reference.py` in
llm-foundry's venv) load here: the same logits, DecoupledAdamW state, schedule, counters and data position, and
the next steps continue with llm-foundry's learning rates, batches and losses. Also "and back": our HF export
of those weights loads in that venv with plain `transformers`. Skipped without the venv
(`bash ../shared/bench/setup_llmfoundry.sh`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from foundry.checkpoint.convert import load_model, to_hf
from foundry.checkpoint.state import load_full
from foundry.compat.composer import load_pt, read_composer_checkpoint, to_foundry
from foundry.optim.decoupled import DecoupledAdamW
from foundry.optim.schedulers import CosineWithWarmupConfig, build_scheduler
from streaming import StreamingDataset

REF_PYTHON = Path(os.environ.get("LLMFOUNDRY_REFERENCE_PYTHON", "/tmp/ref/venv-llmfoundry/bin/python"))
SCRIPT = Path(__file__).with_name("composer_reference.py")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (REF_PYTHON.parent.parent / ".setup-complete").exists(),
        reason=f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)",
    ),
]
FP32 = 1e-5
"""fp32 tolerance: both sides run fp32 CPU kernels, but not the same op order (attention, layer norm), so
logits of magnitude ~7 differ by a few ulps (observed 4.4e-6) and so does the first loss (observed 1.9e-6)."""


def _generate(out: Path, *extra: str) -> Path:
    subprocess.run(
        [str(REF_PYTHON), str(SCRIPT), str(out), *extra], check=True, timeout=600, capture_output=True
    )
    return out


@pytest.fixture(scope="module")
def ref_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate(tmp_path_factory.mktemp("composer-ref"))


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _generate(tmp_path_factory.mktemp("composer-ref-sharded"), "--sharded")


def _reference(directory: Path, name: str = "reference.pt") -> dict[str, Any]:
    return torch.load(directory / name, weights_only=True)


def _logit_diff(ckpt: Path, tmp: Path, ref: dict[str, Any], step: int) -> float:
    where, _ = to_foundry(str(ckpt), str(tmp / f"ours-{step}"))
    model, _ = load_model(where)
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"]).logits
    return (logits - ref[f"logits_ba{step}"]).abs().max().item()


@pytest.mark.parametrize("step", [3, 6])
def test_pt_weights_give_llmfoundrys_logits(ref_dir: Path, tmp_path: Path, step: int) -> None:
    ref = _reference(ref_dir)
    assert _logit_diff(ref_dir / "ckpt" / f"ep0-ba{step}-rank0.pt", tmp_path, ref, step) < FP32


@pytest.mark.parametrize("step", [3, 6])
def test_sharded_weights_give_llmfoundrys_logits(sharded_dir: Path, tmp_path: Path, step: int) -> None:
    ref = _reference(sharded_dir, "reference-sharded.pt")
    assert _logit_diff(sharded_dir / "sharded" / f"ep0-ba{step}", tmp_path, ref, step) < FP32


def test_training_state_comes_across(ref_dir: Path, sharded_dir: Path) -> None:
    path = ref_dir / "ckpt" / "ep0-ba3-rank0.pt"
    trusted = torch.load(path, weights_only=False)  # written by the fixture above, so safe to unpickle here
    composer_opt = trusted["state"]["optimizers"]["DecoupledAdamW"]
    for source in (path, sharded_dir / "sharded" / "ep0-ba3"):
        ckpt = read_composer_checkpoint(str(source))
        assert ckpt.counters == {"step": 3, "epoch": 0, "step_in_epoch": 3, "samples": 12, "tokens": 384}
        assert ckpt.dataset_state == {
            "epoch": 0, "sample_in_epoch": 12, "num_canonical_nodes": 1, "shuffle_seed": 17, "initial_physical_nodes": 1,
        }  # fmt: skip
        assert ckpt.scheduler is not None and ckpt.scheduler["last_epoch"] == 2 and ckpt.optimizer is not None
        assert ckpt.global_batch_size == 4 and ckpt.rng is not None and ckpt.model_config["d_model"] == 32
        weights = read_composer_checkpoint(str(source), weights_only=True)
        assert (
            weights.counters["step"] == 3
            and weights.optimizer is None
            and weights.model.keys() == ckpt.model.keys()
        )
        if source == path:  # the sharded run is another (FSDP2) run: same layout, other numbers
            for name, st in composer_opt["state"].items():
                ours = ckpt.optimizer["state"][name.removeprefix("model.")]
                assert all(torch.equal(st[k], ours[k]) for k in ("step", "exp_avg", "exp_avg_sq")), name
            assert ckpt.rng[0]["numpy"][1] == trusted["rng"][0]["numpy"][1].tolist()


def test_composer_objects_become_plain_data(ref_dir: Path) -> None:
    got = load_pt(str(ref_dir / "objects.pt"))
    assert got["time"] == {"value": 3, "unit": "ba"} and got["unit"] == "ep" and got["precision"] == "fp32"
    assert got["timestamp"]["batch"] == 6 and got["timestamp"]["sample"] == 24
    assert isinstance(got["timestamp"]["total_wct"], float)


def test_the_next_steps_continue_llmfoundrys(ref_dir: Path, tmp_path: Path) -> None:
    """From ep0-ba3: steps 4-6 here see llm-foundry's batches and learning rates and give its losses."""
    ref = _reference(ref_dir)
    cfg = ref["config"]
    where, _ = to_foundry(str(ref_dir / "ckpt" / "ep0-ba3-rank0.pt"), str(tmp_path / "ours"))
    model, _ = load_model(where)
    model.train()
    opt = DecoupledAdamW(model.parameters(), lr=5.0, betas=(0.5, 0.5), weight_decay=0.0)  # all from the file
    opt.param_groups[0]["name"] = "decay"
    sched_cfg = CosineWithWarmupConfig(t_warmup=cfg["sched"]["t_warmup"], alpha_f=cfg["sched"]["alpha_f"])
    sched = build_scheduler(sched_cfg, optimizer=opt, max_steps=cfg["steps"])
    out = load_full(where, model, opt, strict=True, allow_pickle=False, rank=0)
    assert out is not None
    sched.load_state_dict(out["run"]["scheduler"])
    data = StreamingDataset(
        local=str(ref_dir / "mds" / "train"), shuffle=True, shuffle_seed=cfg["seed"], batch_size=cfg["batch"]
    )
    data.load_state_dict(out["run"]["dataloader"])
    rows = iter(data)
    losses, lrs = [], []
    for step in range(3, cfg["steps"]):
        batch = torch.stack(
            [torch.from_numpy(np.frombuffer(next(rows)["tokens"], np.int64).copy()) for _ in range(4)]
        )
        assert torch.equal(batch, ref["batches"][step]), f"step {step + 1}: another batch than llm-foundry's"
        lrs.append(opt.param_groups[0]["lr"])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # Composer's GradientClipping(norm, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    assert lrs == pytest.approx(ref["lr"][3:].tolist(), rel=1e-12)
    assert ref["loss_resumed"].tolist() == ref["loss"][3:].tolist()  # llm-foundry's own resume: bitwise
    assert losses == pytest.approx(ref["loss_resumed"].tolist(), abs=FP32)


def test_our_hf_export_loads_in_llmfoundrys_transformers(ref_dir: Path, tmp_path: Path) -> None:
    """Issue 29 item 4 ("and back"): `export_hf` of the imported weights, read by plain transformers there."""
    where, _ = to_foundry(
        str(ref_dir / "ckpt" / "ep0-ba6-rank0.pt"), str(tmp_path / "ours"), weights_only=True
    )
    to_hf(where, str(tmp_path / "hf"))
    code = (
        "import sys, torch, transformers\n"
        "m = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        "ref = torch.load(sys.argv[2], weights_only=True)\n"
        "with torch.no_grad(): lg = m(input_ids=ref['input_ids']).logits\n"
        "print((lg - ref['logits_ba6']).abs().max().item())\n"
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
    }
    proc = subprocess.run(
        [str(REF_PYTHON), "-c", code, str(tmp_path / "hf"), str(ref_dir / "reference.pt")],
        capture_output=True, text=True, timeout=600, env=env, check=True,
    )  # fmt: skip
    assert float(proc.stdout.strip().splitlines()[-1]) < FP32


def test_train_py_continues_a_composer_run(ref_dir: Path, tmp_path: Path) -> None:
    """`train.py checkpoint.load_path=<Composer .pt>` with the run's settings: steps 4-6 log llm-foundry's losses."""
    import json
    import sys

    ref = _reference(ref_dir)
    repo = Path(__file__).resolve().parents[3]
    out = tmp_path / "run"
    args = [
        "data=local-mds", f"data.local={ref_dir / 'mds'}", "data.eval_split=null", "data.shuffle_seed=17",
        "data.num_canonical_nodes=1", "model=mpt-tiny", "model.d_model=32", "model.max_seq_len=32",
        "model.vocab_size=50368", "trainer=cpu", "trainer.max_duration=6ba", "trainer.global_train_batch_size=4",
        "trainer.device_train_microbatch_size=4", "trainer.grad_clip_norm=1.0", "optimizer=decoupled-adamw",
        "optimizer.lr=1e-3", "optimizer.weight_decay=1e-4", "scheduler=cosine-warmup", "scheduler.t_warmup=2ba",
        "scheduler.alpha_f=0.1", f"checkpoint.load_path={ref_dir / 'ckpt' / 'ep0-ba3-rank0.pt'}", "run_name=e2e",
        f"hydra.run.dir={out}",
    ]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(repo / "train.py"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "read the Composer checkpoint" in proc.stdout and "step 3, epoch 0" in proc.stdout
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    assert losses == pytest.approx(ref["loss_resumed"].tolist(), abs=FP32)


TINY_YAML = """
variables: {{data_local: {data}, max_seq_len: 32, global_seed: 17}}
max_seq_len: ${{variables.max_seq_len}}
run_name: tiny_composer_continue
model:
  name: mpt_causal_lm
  init_device: cpu
  d_model: 32
  n_heads: 4
  n_layers: 2
  expansion_ratio: 4
  max_seq_len: ${{variables.max_seq_len}}
  vocab_size: 50368
  attn_config: {{attn_impl: torch}}
  loss_fn: torch_crossentropy
tokenizer: {{name: {tokenizer}, kwargs: {{model_max_length: 32}}}}
train_loader:
  name: text
  dataset:
    local: ${{variables.data_local}}
    split: train
    shuffle: true
    max_seq_len: ${{variables.max_seq_len}}
    shuffle_seed: ${{variables.global_seed}}
    num_canonical_nodes: 1
  drop_last: true
  num_workers: 0
scheduler: {{name: cosine_with_warmup, t_warmup: 2ba, alpha_f: 0.1}}
optimizer: {{name: decoupled_adamw, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1.0e-8, weight_decay: 1.0e-4}}
algorithms: {{gradient_clipping: {{clipping_type: norm, clipping_threshold: 1.0}}}}
max_duration: 6ba
eval_interval: 100ba
global_train_batch_size: 4
device_train_microbatch_size: 4
seed: 17
precision: fp32
load_path: {load_path}
"""


def test_llmfoundry_yaml_with_a_composer_load_path_continues_the_run(ref_dir: Path, tmp_path: Path) -> None:
    """The run's own llm-foundry YAML (`python -m foundry.compat.llmfoundry YAML --run`) + `load_path`."""
    import json
    import sys

    ref = _reference(ref_dir)
    shared = Path(__file__).resolve().parents[4] / "shared"
    tokenizer = shared / "data" / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
    yaml = tmp_path / "tiny.yaml"
    ckpt = ref_dir / "ckpt" / "ep0-ba3-rank0.pt"
    yaml.write_text(TINY_YAML.format(data=ref_dir / "mds", tokenizer=tokenizer, load_path=ckpt))
    proc = subprocess.run(
        [sys.executable, "-m", "foundry.compat.llmfoundry", str(yaml), "--run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = next(tmp_path.glob("outputs/*/metrics.jsonl"))
    losses = [r["train/loss"] for r in map(json.loads, metrics.read_text().splitlines()) if "train/loss" in r]
    assert losses == pytest.approx(ref["loss_resumed"].tolist(), abs=FP32)
