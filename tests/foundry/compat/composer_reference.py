"""Writes real Composer checkpoints of a tiny llm-foundry MPT, for `test_composer_*.py` (llm-foundry's venv).

    /tmp/ref/venv-llmfoundry/bin/python composer_reference.py OUT_DIR [--sharded | --data-only]

Trains a tiny `ComposerMPTCausalLM` (CPU, fp32, torch attention) with Composer's `DecoupledAdamW`, the
cosine-with-warmup schedule and gradient clipping on a small local MDS set of pre-tokenised rows (shuffled,
so the dataset state is non-trivial) for 6 batches, saving `ep0-ba3-rank0.pt` and `ep0-ba6-rank0.pt`
(with `--sharded`: torch.distributed.checkpoint folders `ep0-ba3/`, under FSDP on every gloo rank it is launched
with; `--data-only` writes the MDS set and stops, so that ranks never write it at once). A rank still running after
`COMPOSER_REF_WATCHDOG_S` seconds (default 420) prints every thread's stack to stderr and exits. Writes
`OUT_DIR/reference.pt` (plain tensors and numbers; readable with `torch.load(weights_only=True)`):

- `input_ids` (1, S) and `logits_ba3`/`logits_ba6` (1, S, V): the model's logits at each checkpoint;
- `loss` (6,), `lr` (6,): the loss and learning rate of each step; `batches` (6, B, S): the input ids;
- `loss_resumed` (3,): steps 4-6 of llm-foundry resuming from `ep0-ba3-rank0.pt` itself (not with --sharded);
- `config`: the model and run settings used (so the tests build the same model here).

and `OUT_DIR/objects.pt`: Composer's `Timestamp`, `Time`, `TimeUnit` and `Precision` objects pickled as such.
"""

import faulthandler
import os
import sys
import tempfile
from pathlib import Path

from llmfoundry_ref import NEOX_TOKENIZER, mds_loader, neox_tokenizer, offline, tiny_mpt

faulthandler.dump_traceback_later(float(os.environ.get("COMPOSER_REF_WATCHDOG_S", "420")), exit=True)
OUT = Path(sys.argv[1]).resolve()
SHARDED = "--sharded" in sys.argv
DATA_ONLY = "--data-only" in sys.argv
if SHARDED:
    os.environ["FSDP_VERSION"] = (
        "2"  # Composer's FSDP1 path needs CUDA; FSDP2 (fully_shard) runs on CPU + gloo
    )
OUT.mkdir(parents=True, exist_ok=True)
TMP = offline("composer-ref-", parent=OUT)
os.environ["TMPDIR"] = str(TMP)
tempfile.tempdir = str(TMP)
os.chdir(TMP)  # Composer writes signal files into the cwd

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from composer import Trainer  # noqa: E402
from composer.algorithms import GradientClipping  # noqa: E402
from composer.core import Callback  # noqa: E402
from composer.optim import CosineAnnealingWithWarmupScheduler, DecoupledAdamW  # noqa: E402

from streaming import MDSWriter  # noqa: E402

TOKENIZER = Path(os.environ.get("COMPOSER_REF_TOKENIZER", NEOX_TOKENIZER))
SEQ, VOCAB, ROWS, BATCH, STEPS, SEED = 32, 50368, 96, 4, 6, 17  # vocab >= len(tokenizer)
MODEL = {
    "d_model": 32,
    "n_heads": 4,
    "n_layers": 2,
    "expansion_ratio": 4,
    "max_seq_len": SEQ,
    "vocab_size": VOCAB,
}
OPTIM = {"lr": 1e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 1e-4}
SCHED = {"t_warmup": "2ba", "alpha_f": 0.1}

data = OUT / "mds"
if not (data / "train" / "index.json").exists():
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every rank would write the same files at once
        sys.exit(f"{data} is not written: run this script with --data-only first")
    rng = np.random.default_rng(0)
    with MDSWriter(out=str(data / "train"), columns={"tokens": "bytes"}, size_limit=1 << 12) as w:
        for _ in range(ROWS):
            w.write({"tokens": rng.integers(1, VOCAB, SEQ, dtype=np.int64).tobytes()})
if DATA_ONLY:
    sys.exit(0)

if SHARDED:
    # as llm-foundry's train.py: the process group first, then the loaders. mosaicml-streaming sets up its
    # shared memory (the prefix, the barrier's counters) with a dist barrier only when one is initialized;
    # without it the ranks race there, and 1 run in 4 hung both ranks in its SharedBarrier at the first batch.
    from composer.utils import dist, get_device

    dist.initialize_dist(get_device("cpu"), timeout=120)
    dist.barrier()

tok = neox_tokenizer(TOKENIZER)
input_ids = torch.randint(1, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))
logits: dict[str, torch.Tensor] = {}


class Record(Callback):
    def __init__(self) -> None:
        self.loss: list[float] = []
        self.lr: list[float] = []
        self.batches: list[torch.Tensor] = []

    def after_forward(self, state, logger):
        self.batches.append(state.batch["input_ids"].clone())
        self.lr.append(state.optimizers[0].param_groups[0]["lr"])

    def batch_end(self, state, logger):
        self.loss.append(float(state.loss))
        step = int(state.timestamp.batch)
        if step in (3, 6) and f"logits_ba{step}" not in logits:
            inner = state.model.module if hasattr(state.model, "module") else state.model
            was = inner.training
            inner.eval()
            with torch.no_grad():
                logits[f"logits_ba{step}"] = inner.model(input_ids=input_ids).logits.detach().clone()
            inner.train(was)


def run(record: Record, *, load_path: str | None = None) -> Trainer:
    """Trains (or, from `load_path`, resumes) the tiny MPT to STEPS batches, saving every 3 unless resuming."""
    model = tiny_mpt(tok, seed=SEED, **MODEL)
    loader = mds_loader(tok, data, batch=BATCH, seq=SEQ, seed=SEED, shuffle=True)
    kwargs: dict = {}
    if SHARDED:
        kwargs["parallelism_config"] = {
            "fsdp": {"state_dict_type": "sharded", "sharding_strategy": "FULL_SHARD"}
        }
    if load_path is None:
        kwargs.update(
            save_folder=str(OUT / ("sharded" if SHARDED else "ckpt")),
            save_interval="3ba",
            save_filename="ep{epoch}-ba{batch}-rank{rank}.pt",
            save_overwrite=True,
        )
    else:
        kwargs["load_path"] = load_path
    trainer = Trainer(
        model=model,
        train_dataloader=loader,
        optimizers=DecoupledAdamW(model.parameters(), **OPTIM),
        schedulers=CosineAnnealingWithWarmupScheduler(**SCHED),
        algorithms=[GradientClipping(clipping_type="norm", clipping_threshold=1.0)],
        max_duration=f"{STEPS}ba",
        device="cpu",
        precision="fp32",
        seed=SEED,
        callbacks=[record],
        progress_bar=False,
        log_to_console=False,
        **kwargs,
    )
    trainer.fit()
    return trainer


record = Record()
trainer = run(record)
trainer.close()
resumed = Record()  # llm-foundry continuing from ep0-ba3 itself (Composer's own resume)
if not SHARDED:
    run(resumed, load_path=str(OUT / "ckpt" / "ep0-ba3-rank0.pt")).close()
ref = {
    "input_ids": input_ids,
    **logits,
    "loss": torch.tensor(record.loss, dtype=torch.float64),
    "lr": torch.tensor(record.lr, dtype=torch.float64),
    "batches": torch.stack(record.batches),
    "loss_resumed": torch.tensor(resumed.loss, dtype=torch.float64),
    "config": {
        "model": MODEL,
        "optim": {**OPTIM, "betas": list(OPTIM["betas"])},
        "sched": SCHED,
        "seq": SEQ,
        "batch": BATCH,
        "steps": STEPS,
        "seed": SEED,
        "rows": ROWS,
    },
}
torch.save(ref, OUT / ("reference-sharded.pt" if SHARDED else "reference.pt"))
if not SHARDED:  # Composer's own objects as pickle writes them (older checkpoints and callbacks hold them)
    from composer.core.time import Time, TimeUnit

    objects = {"timestamp": trainer.state.timestamp, "time": Time(3, TimeUnit.BATCH), "unit": TimeUnit.EPOCH}
    torch.save({**objects, "precision": trainer.state.precision}, OUT / "objects.pt")
print("wrote", sorted(p.name for p in OUT.rglob("*") if p.suffix in (".pt", ".distcp", ".metadata")))
