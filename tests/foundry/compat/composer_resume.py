"""Resumes llm-foundry's tiny MPT from a Composer checkpoint and records its next steps (llm-foundry's venv).

    /tmp/ref/venv-llmfoundry/bin/python composer_resume.py LOAD_PATH MDS_DIR STEPS OUT.json

Builds the run `composer_reference.py` trains (a `ComposerMPTCausalLM` d_model 32, 4 heads, 2 layers, seq 32,
vocab 50368; Composer's `DecoupledAdamW` lr 1e-3, betas (0.9, 0.95), weight decay 1e-4; constant LR after a
2-batch warmup; norm gradient clipping at 1.0; batch 4 from the MDS set `MDS_DIR/train` unshuffled, seed 17),
resumes it with Composer's `load_path=LOAD_PATH` (a checkpoint written by `convert_checkpoint.py --to composer`)
and trains to STEPS batches. OUT.json: `{"start": {batch, sample, token}, "steps": [{step, loss, lr}, ...]}`.
"""

import json
import os
import sys
from pathlib import Path

from llmfoundry_ref import mds_loader, neox_tokenizer, offline, tiny_mpt

LOAD, DATA, STEPS, OUT = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
os.chdir(offline("composer-resume-"))  # Composer writes signal files into the cwd

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

from composer import Trainer  # noqa: E402
from composer.algorithms import GradientClipping  # noqa: E402
from composer.core import Callback  # noqa: E402
from composer.optim import ConstantWithWarmupScheduler, DecoupledAdamW  # noqa: E402

SEQ, SEED = 32, 17
tok = neox_tokenizer()


class Record(Callback):
    def __init__(self) -> None:
        self.steps: list[dict] = []
        self.start: dict = {}

    def fit_start(self, state, logger):
        ts = state.timestamp
        self.start = {"batch": int(ts.batch), "sample": int(ts.sample), "token": int(ts.token)}

    def after_forward(self, state, logger):
        self.steps.append({"lr": state.optimizers[0].param_groups[0]["lr"]})

    def batch_end(self, state, logger):
        self.steps[-1].update(step=int(state.timestamp.batch), loss=float(state.loss))


model = tiny_mpt(
    tok, seed=SEED, d_model=32, n_heads=4, n_layers=2, expansion_ratio=4, max_seq_len=SEQ, vocab_size=50368
)
# upstream and this library read an unshuffled set in one order
loader = mds_loader(tok, DATA, batch=4, seq=SEQ, seed=SEED, shuffle=False)
record = Record()
trainer = Trainer(
    model=model,
    train_dataloader=loader,
    optimizers=DecoupledAdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=1e-4),
    schedulers=ConstantWithWarmupScheduler(t_warmup="2ba"),
    algorithms=[GradientClipping(clipping_type="norm", clipping_threshold=1.0)],
    max_duration=f"{STEPS}ba",
    device="cpu",
    precision="fp32",
    seed=SEED,
    callbacks=[record],
    progress_bar=False,
    log_to_console=False,
    load_path=LOAD,
)
trainer.fit()
trainer.close()
OUT.write_text(json.dumps({"start": record.start, "steps": record.steps}, indent=1))
print("steps", record.steps, flush=True)
