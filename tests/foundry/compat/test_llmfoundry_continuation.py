"""Issue 29 item 3: switch from llm-foundry mid-run with the unmodified `pretrain/mpt-small-cpu.yaml`.

llm-foundry 0.22 itself (`train_from_yaml`, in its venv, through `llmfoundry_fixture_run.py`) trains the fixture
YAML for N steps on a small local MDS set with a `text` column, saving a Composer checkpoint at step N. Then
(a) llm-foundry continues from that checkpoint for M steps, and (b) this stack continues from the same file with
the translated YAML (`python -m foundry.compat.llmfoundry YAML overrides... load_path=CKPT --run`) for M steps.
Both get the same `key=value` overrides in llm-foundry's style (the YAML file is only read); each step must
train on the same samples (a digest per row of its real tokens, so tokenization, truncation, padding and the
streaming position all count) and give the same loss within fp32 tolerance.

The data: short rows (padded to max_seq_len) and rows longer than max_seq_len (truncated). llm-foundry needs a
pad token to tokenize `text` on the fly and gpt-neox-20b has none, so `tokenizer.kwargs.pad_token` is set
(to eos, as our tokenizer defaults); `tokenizer.name` is a local folder (the shared tokenizer.json plus a
tokenizer_config.json with gpt-neox-20b's roles), which both stacks load, so nothing reaches the hub.
Skipped without llm-foundry's venv (`bash ../shared/bench/setup_llmfoundry.sh`).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streaming import MDSWriter

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared"
YAML = SHARED / "data" / "llmfoundry_yamls" / "pretrain" / "mpt-small-cpu.yaml"
TOKENIZER = SHARED / "data" / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
REF_PYTHON = Path(os.environ.get("LLMFOUNDRY_REFERENCE_PYTHON", "/tmp/ref/venv-llmfoundry/bin/python"))
HELPER = Path(__file__).with_name("llmfoundry_fixture_run.py")

no_llmfoundry = pytest.mark.skipif(
    not (REF_PYTHON.parent.parent / ".setup-complete").exists(),
    reason=f"llm-foundry venv not found at {REF_PYTHON} (../shared/bench/setup_llmfoundry.sh)",
)
no_fixtures = pytest.mark.skipif(
    not (YAML.is_file() and TOKENIZER.is_file()), reason="../shared/data fixtures not found"
)

N, M = 4, 4
"""Steps before the checkpoint, and after it."""
FP32 = 1e-5
"""Loss tolerance. Both stacks run the same fp32 math on CPU kernels (torch attention, fp32 throughout), but
not in the same op order (attention, layer norm, the loss reduction), so a loss of ~11.8 differs by a few ulps
of fp32 (1 ulp = 9.5e-7 there); the learning rates are tiny (warmup of 100 steps), so M steps add little. An
optimizer or schedule mismatch, a different sample or a different tokenization moves the loss by far more."""

# the words of test_llmfoundry_cpu_run's data; rows of 4-60 words (padded) or 150-260 words (> 128 tokens)
WORDS = (
    "the quick brown fox jumps over a lazy dog while seven wizards judge boxing matches near rivers".split()
)


def _text_mds(root: Path) -> None:
    rng = random.Random(0)
    for split, rows in (("train", 96), ("val", 16)):
        with MDSWriter(out=str(root / split), columns={"text": "str"}) as writer:
            for _ in range(rows):
                n = rng.randint(150, 260) if rng.random() < 0.15 else rng.randint(4, 60)
                writer.write({"text": " ".join(rng.choice(WORDS) for _ in range(n))})


def _tokenizer_folder(root: Path) -> Path:
    """A local stand-in for the hub's EleutherAI/gpt-neox-20b: its tokenizer.json and roles (no pad token)."""
    root.mkdir(parents=True)
    (root / "tokenizer.json").symlink_to(TOKENIZER)
    roles = dict.fromkeys(("bos_token", "eos_token", "unk_token"), "<|endoftext|>")
    (root / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "add_prefix_space": False, **roles})
    )
    return root


# Ours: log each train_step's batch as the helper does on llm-foundry's side (sitecustomize runs in train.py,
# the subprocess `--run` starts; the translator process imports it too, harmlessly).
SITECUSTOMIZE = """
import hashlib, json, os
if os.environ.get("CONTINUATION_BATCH_LOG"):
    import foundry.train.loop as loop
    _step = loop.Trainer.train_step

    def train_step(self, batch):
        ids, mask = batch["input_ids"].cpu(), batch.get("attention_mask")
        real = [ids[i] if mask is None else ids[i][mask[i].cpu().bool()] for i in range(ids.shape[0])]
        rows = [hashlib.sha256(r.numpy().astype("int64").tobytes()).hexdigest()[:16] for r in real]
        lr = self.optimizer.param_groups[0]["lr"]
        out = _step(self, batch)
        record = {"step": self.state.step, "loss": out["train/loss"], "lr": lr, "shape": list(ids.shape),
                  "rows": rows, "lengths": [len(r) for r in real]}
        with open(os.environ["CONTINUATION_BATCH_LOG"], "a") as f:
            f.write(json.dumps(record) + "\\n")
        return out

    loop.Trainer.train_step = train_step
"""


def _llmfoundry(tmp: Path, common: list[str], ckpt: Path) -> dict[str, list[dict[str, Any]]]:
    spec = {
        "yaml": str(YAML),
        "runs": {
            "first": [*common, f"max_duration={N}ba", f"save_folder={ckpt}", f"save_interval={N}ba"],
            "resumed": [*common, f"max_duration={N + M}ba", f"load_path={ckpt / f'ep0-ba{N}-rank0.pt'}"],
        },
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    scratch = tmp / "llmfoundry-cwd"
    scratch.mkdir()
    proc = subprocess.run(
        [str(REF_PYTHON), str(HELPER), str(tmp / "spec.json"), str(tmp / "llmfoundry.json")],
        cwd=scratch, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-5000:]
    return json.loads((tmp / "llmfoundry.json").read_text())


def _here(tmp: Path, common: list[str], ckpt: Path) -> list[dict[str, Any]]:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp / "here.jsonl"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "CONTINUATION_BATCH_LOG": str(log),
        "FOUNDRY_CACHE": str(tmp / "cache"),
        "WANDB_MODE": "offline",
    }
    env.pop("RUN_NAME", None)
    scratch = tmp / "here-cwd"
    scratch.mkdir()
    args = [*common, f"max_duration={N + M}ba", f"load_path={ckpt / f'ep0-ba{N}-rank0.pt'}"]
    proc = subprocess.run(
        [sys.executable, "-m", "foundry.compat.llmfoundry", str(YAML), *args, "--run"],
        cwd=scratch, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "read the Composer checkpoint" in proc.stderr + proc.stdout
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_text_rows_are_padded_to_max_seq_len() -> None:
    """As llm-foundry's text dataset (`padding='max_length'`): a batch of short `text` rows is still (B, S);
    rows of token ids keep padding to the batch's longest row (llm-foundry's collator does the same)."""
    from foundry.data.collate import TextCollator

    class Chars:
        def __call__(self, text: str, truncation: bool, max_length: int) -> dict[str, list[int]]:
            return {"input_ids": [ord(c) - 96 for c in text][:max_length]}

    c = TextCollator(max_seq_len=6, pad_token_id=0, tokenizer=Chars())
    out = c([{"text": "abc"}, {"text": "ab"}])
    assert out["input_ids"].tolist() == [[1, 2, 3, 0, 0, 0], [1, 2, 0, 0, 0, 0]]
    assert out["labels"].tolist() == [[1, 2, 3, -100, -100, -100], [1, 2, -100, -100, -100, -100]]
    assert c([{"text": "abcdefgh"}])["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6]]
    assert c([{"tokens": [1, 2, 3]}, {"tokens": [4]}])["input_ids"].shape == (2, 3)


@pytest.mark.slow
@no_llmfoundry
@no_fixtures
def test_the_fixture_yaml_continues_here_as_in_llmfoundry(tmp_path: Path) -> None:
    _text_mds(tmp_path / "c4")
    common = [
        f"variables.data_local={tmp_path / 'c4'}",
        f"tokenizer.name={_tokenizer_folder(tmp_path / 'gpt-neox-20b')}",
        "tokenizer.kwargs.pad_token=<|endoftext|>",
        "precision=fp32",
        "global_train_batch_size=8",
        "device_train_microbatch_size=8",
        "device_eval_batch_size=8",
        "eval_subset_num_batches=1",
    ]
    ckpt = tmp_path / "ckpt"
    ref = _llmfoundry(tmp_path, common, ckpt)
    here = _here(tmp_path, common, ckpt)

    assert [s["step"] for s in ref["first"]] == list(range(1, N + 1))
    theirs = ref["resumed"]
    assert [s["step"] for s in theirs] == [s["step"] for s in here] == list(range(N + 1, N + M + 1))
    # the data exercises both sides of the row length: some rows padded, some truncated, some batch all padded
    lengths = [n for s in ref["first"] + theirs for n in s["lengths"]]
    assert min(lengths) < 128 and lengths.count(128) > 0
    assert any(max(s["lengths"]) < 128 for s in ref["first"] + theirs)

    print(f"\n{'step':>4} | {'llm-foundry':>12} | {'here':>12} | {'|diff|':>8}")
    for a, b in zip(theirs, here, strict=True):
        print(f"{a['step']:>4} | {a['loss']:12.7f} | {b['loss']:12.7f} | {abs(a['loss'] - b['loss']):8.1e}")
    for a, b in zip(theirs, here, strict=True):
        assert b["rows"] == a["rows"], f"step {a['step']}: other samples than llm-foundry's"
        assert b["shape"] == a["shape"] == [8, 128], f"step {a['step']}: rows not padded to max_seq_len"
        assert b["lr"] == pytest.approx(a["lr"], rel=1e-12)
    assert [b["loss"] for b in here] == pytest.approx([a["loss"] for a in theirs], abs=FP32)
