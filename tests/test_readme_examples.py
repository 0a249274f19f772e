"""The documentation's `train.py` examples (README.md and the pages under docs/) pasted in order after
`make train` (each scaled down with overrides): none of them tries to resume the quick start, each starts its own
run, and rerunning `make train` still only re-evaluates the finished quick start. Commands whose data does not
exist offline (C4) stop with the data error (exit 2), touching nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train_py import run_train_py

REPO = Path(__file__).resolve().parents[1]
README = "\n\n".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))])
"""README.md and every page of the documentation site: the commands this test runs are shown in one of them."""
TINY = ["data.corpus_mb=0.15", "data.vocab_size=300"]  # the quick-start data, small
SHORT = ["trainer.max_duration=2ba", "trainer.eval_subset_num_batches=1", "trainer.progress_bar=false"]
QUICK = [*TINY, *SHORT, "trainer.global_train_batch_size=4"]
# the README's finetuning recipe with the quick start's small tokenizer, for two steps
FINETUNE = [
    "tokenizer.name='${quickstart_tokenizer:${data.quickstart_local},0.15,300}'",
    "model.vocab_size=512",
    "trainer.max_duration=2ba",
    "trainer.eval_first=false",
    "trainer.eval_interval=0",
    "trainer.progress_bar=false",
]


def _readme_has(command: str) -> None:
    assert command in README, f"neither README.md nor docs/ shows {command!r} any more: update this test"


def _run(command: str, scale: list[str], cwd: Path, *, ok: bool = True) -> subprocess.CompletedProcess:
    """`command` (a README line, `python train.py ...`) with `scale` appended, in `cwd`."""
    _readme_has(command)
    args = command.removeprefix("python train.py").split()
    proc = run_train_py([*args, *scale], cwd, ok=ok, full_error=False)
    text = proc.stdout + proc.stderr
    assert "resume" not in text.replace("autoresume: no complete checkpoint", ""), text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    return proc


def _runs(cwd: Path) -> set[str]:
    return {p.name for p in (cwd / "outputs").iterdir() if p.is_dir() and p.name != "multirun"}


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_readme_examples_run_in_order_after_make_train(tmp_path):
    _readme_has("make train     # = python train.py run_name=quickstart")
    run_train_py(["run_name=quickstart", *QUICK], tmp_path)  # make train
    quickstart = tmp_path / "outputs" / "quickstart"
    before = _files(quickstart)

    _run("python train.py experiment=smoke-cpu", TINY, tmp_path)
    _run("python train.py debug=overfit-batch", [*QUICK, "trainer.eval_interval=0"], tmp_path)
    made = _runs(tmp_path)
    proc = _run("python train.py model=mpt-125m data=c4", [], tmp_path, ok=False)  # no C4 offline
    assert proc.returncode == 2 and "error: dataset split 'train_small' not found" in proc.stderr
    proc = _run("python train.py experiment=mpt-125m-c4", [], tmp_path, ok=False)  # a GPU recipe, on CPU
    assert proc.returncode == 2 and proc.stderr.count("error:") == 1
    assert _runs(tmp_path) == made, "a refused command leaves no run folder"
    mix = tmp_path / "mix"
    subprocess.run(
        [sys.executable, str(REPO / "scripts/data_prep/make_standin_mix.py"), "--out", str(mix)], check=True
    )
    mixture = (
        "python train.py data=mpt-7b-mix data.local_root=/tmp/mix data.remote_root=null model=mpt-tiny "
        "tokenizer=none \\\n  trainer=cpu trainer.max_duration=20ba"
    )
    _readme_has(mixture)
    scaled = mixture.replace("/tmp/mix", str(mix)).replace("\\\n", "").replace("20ba", "2ba")
    proc = run_train_py([*scaled.split()[2:], "trainer.progress_bar=false"], tmp_path, full_error=False)
    assert "resume" not in (proc.stdout + proc.stderr).replace("autoresume: no complete checkpoint", "")

    # make finetune, then the LoRA example
    make_finetune = (
        "experiment=finetune-cpu run_name=finetune-cpu checkpoint.load_path=outputs/quickstart/checkpoints"
    )
    run_train_py([*make_finetune.split(), *FINETUNE], tmp_path, full_error=False)
    lora = "python train.py experiment=finetune-cpu checkpoint.load_path=outputs/quickstart/checkpoints \\\n"
    _readme_has(lora + "  +peft=lora model.peft_config.r=16")
    _run(lora.removesuffix(" \\\n"), ["+peft=lora", "model.peft_config.r=16", *FINETUNE], tmp_path)

    runs = _runs(tmp_path)
    assert {"quickstart", "finetune-cpu"} <= runs and len(runs) == 2 + 4  # smoke, overfit, mixture, LoRA
    assert _files(quickstart) == before, "no command touched the quick start"
    for name in runs - {"quickstart", "finetune-cpu"}:
        assert name.startswith(("pretrain-mpt-tiny-", "finetune-mpt-tiny-")), name
        assert json.loads((tmp_path / "outputs" / name / "final_metrics.json").read_text())

    proc = run_train_py(["run_name=quickstart", *QUICK], tmp_path)  # make train, again
    assert "run 'quickstart' already finished" in proc.stdout
