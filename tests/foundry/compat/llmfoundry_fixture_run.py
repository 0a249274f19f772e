"""Runs an llm-foundry training YAML with llm-foundry's own entry point, recording each step (llm-foundry's venv).

    /tmp/ref/venv-llmfoundry/bin/python llmfoundry_fixture_run.py SPEC.json OUT.json

SPEC.json: `{"yaml": PATH, "runs": {NAME: [key=value, ...], ...}}`. Each run is
`llmfoundry.command_utils.train_from_yaml(yaml, overrides)` (what `composer scripts/train/train.py YAML
key=value ...` calls in llm-foundry 0.22), in order, in this one process; the YAML file is only read. A
Composer callback, added to the Trainer that llm-foundry builds, records per optimizer step the loss, the
learning rate, the batch's shape, and per row a digest of its real tokens (`row_digests`: the tokens where
`attention_mask` is 1) and their count, so another trainer's batches can be compared sample by sample.
OUT.json: `{NAME: [{"step", "loss", "lr", "shape", "rows", "lengths"}, ...], ...}`.

Offline: HF caches go to a temp folder, the hub is never asked (`tokenizer.name` must be a local folder).
Composer writes signal files into the cwd: run it from a scratch folder.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

from llmfoundry_ref import offline

SPEC, OUT = Path(sys.argv[1]), Path(sys.argv[2])
offline("llmfoundry-run-")
os.environ.pop("RUN_NAME", None)

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from composer import Trainer  # noqa: E402
from composer.core import Callback  # noqa: E402
from llmfoundry.command_utils import train_from_yaml  # noqa: E402

train_module = sys.modules["llmfoundry.command_utils.train"]  # the package's `train` is the function


def row_digests(batch: dict) -> list[str]:
    """sha256 (16 hex digits) of each row's real tokens as int64 bytes."""
    ids = batch["input_ids"].to(torch.int64)
    mask = batch.get("attention_mask")
    out = []
    for i in range(ids.shape[0]):
        row = ids[i] if mask is None else ids[i][mask[i].bool()]
        out.append(hashlib.sha256(row.numpy().tobytes()).hexdigest()[:16])
    return out


def row_lengths(batch: dict) -> list[int]:
    """Real tokens per row (all of them without an `attention_mask`)."""
    mask = batch.get("attention_mask")
    if mask is None:
        return [batch["input_ids"].shape[1]] * batch["input_ids"].shape[0]
    return mask.sum(dim=1).tolist()


class Record(Callback):
    def __init__(self) -> None:
        self.steps: list[dict] = []

    def after_dataloader(self, state, logger):
        self.steps.append(
            {
                "lr": state.optimizers[0].param_groups[0]["lr"],
                "shape": list(state.batch["input_ids"].shape),
                "rows": row_digests(state.batch),
                "lengths": row_lengths(state.batch),
            }
        )

    def batch_end(self, state, logger):
        self.steps[-1].update(step=int(state.timestamp.batch), loss=float(state.loss))


class RecordingTrainer(Trainer):
    """Composer's Trainer with `Record` appended to the callbacks llm-foundry built from the YAML."""

    current: Record | None = None

    def __init__(self, *args, callbacks=None, **kwargs):
        RecordingTrainer.current = Record()
        super().__init__(*args, callbacks=[*(callbacks or []), RecordingTrainer.current], **kwargs)


train_module.Trainer = RecordingTrainer  # train() looks the name up in its module at call time
spec = json.loads(SPEC.read_text())
results = {}
for name, overrides in spec["runs"].items():
    train_from_yaml(spec["yaml"], list(overrides)).close()
    assert RecordingTrainer.current is not None
    results[name] = RecordingTrainer.current.steps
    print(name, [round(s["loss"], 7) for s in results[name]], flush=True)
OUT.write_text(json.dumps(results, indent=1))
