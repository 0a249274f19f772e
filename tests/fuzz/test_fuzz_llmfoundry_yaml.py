"""Fuzz (issue 39), entry point 5: llm-foundry training YAMLs through the translator
(`python -m foundry.compat.llmfoundry YAML [key=value ...] [--experiment OUT]`, and `train.py llmfoundry=YAML`).

Each input is a valid llm-foundry YAML (a minimal one, and llm-foundry's own recipes from
../shared/data/llmfoundry_yamls when present) with one hostile change: a value, key or section replaced (odd
types for known keys, huge numbers, deep nesting), its text edited at the byte level, a YAML snippet added
(anchor/alias bombs, `!!python/object` tags, `${oc.env:...}` of a credential, self-referencing
interpolations, non-string keys, several documents), or hostile `key=value` overrides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from tests.fuzz import hostile
from tests.fuzz.harness import REPO, SECRET_ENV, fuzz

ENTRY = "llm-foundry YAMLs (the translator)"
ALLOWED = (ValueError, OSError)  # foundry.errors.run_tool's one-line errors
NAMES = ("yaml", "YAML", "override", "variables", "run.yaml")
SHORT_EXAMPLES = 25
SHARED = REPO.parent / "shared" / "data" / "llmfoundry_yamls"
RECIPES = [
    "pretrain/mpt-small-cpu.yaml",
    "pretrain/mpt-125m.yaml",
    "finetune/gpt2-arc-easy-cpu-streaming-dataset.yaml",
]
MINIMAL = """
variables: {run_name: fuzz, data: /data/c4}
run_name: ${variables.run_name}
model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, max_seq_len: 128, vocab_size: 512}
tokenizer: {name: EleutherAI/gpt-neox-20b}
train_loader: {name: text, dataset: {local: "${variables.data}", split: train, max_seq_len: 128}}
optimizer: {name: decoupled_adamw, lr: 1.0e-3}
scheduler: {name: cosine_with_warmup, t_warmup: 10ba}
max_duration: 20ba
global_train_batch_size: 8
"""


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


SNIPPETS = [
    _bomb(9),
    _bomb(5),
    "deep: " + "[" * 10_000 + "]" * 10_000,
    "deep: " + "[" * 90 + "]" * 90,
    "x: " + "{a: " * 3000 + "1" + "}" * 3000,
    "run_name: !!python/object/apply:os.system ['touch PWNED']",
    "run_name: !!python/name:os.system",
    "model: !!binary aGVsbG8=",
    "run_name: ${oc.env:" + SECRET_ENV + "}",
    "loggers: {wandb: {project: '${oc.env:" + SECRET_ENV + "}'}}",
    "run_name: ${variables.loop}\nvariables: {loop: ${run_name}}",
    "run_name: ${oc.decode:'[1, 2'}",
    "run_name: ${oc.create:{a: 1}}",
    "run_name: ${undefined.key}",
    "? [a, b]\n: 1",
    "1: 2",
    "null: 3",
    "---\nmodel: 1\n---\nx: 2",
    "max_duration: 1e999ba",
    "max_duration: -5ba",
    "max_duration: 0ep",
    "global_train_batch_size: 0",
    "global_train_batch_size: 100000000000000000000",
    "run_name: ..",
    "run_name: ../../x",
    "run_name: '/abs/x'",
    "save_folder: ../../../../x",
    "model: {name: hf_causal_lm, pretrained_model_name_or_path: ../../x}",
    "<<: *nothing",
    "a: &x {b: *x}",
    "x: 'a" + "b" * 200_000 + "'",
    "\t- bad",
    "icl_tasks: ../../../../etc/passwd",
    "eval_gauntlet: {weighting: EQUAL, subtract_random_baseline: 7, categories: 3}",
    "fsdp_config: [1, 2]",
    "callbacks: {speed_monitor: [1]}",
    "algorithms: {gradient_clipping: 'x'}",
    "scheduler: null",
    "optimizer: {name: ../../x}",
]
OVERRIDES = [
    "variables.data=${oc.env:" + SECRET_ENV + "}",
    "run_name=..",
    "max_duration=",
    "=1",
    "a..b=1",
    "+x=y",
    "~model",
    "model.d_model=-1",
    "model=5",
    "trainer.device=cpu",
    "parallelism=none",
    "model.n_layers=1e9",
    "variables={}",
    "x=[" * 50,
    "hydra.run.dir=/tmp/x",
]


def prepare(work: Path) -> list[str]:
    import foundry.compat.llmfoundry.__main__  # noqa: F401 - imported before the memory limit is set

    bases = [MINIMAL]
    for rel in RECIPES:
        if (SHARED / rel).is_file():
            bases.append((SHARED / rel).read_text())
    return bases


def cases() -> st.SearchStrategy[dict[str, Any]]:
    edit = st.one_of(
        st.tuples(st.just("edit"), hostile.json_edits()),
        st.tuples(st.just("bytes"), hostile.byte_edits()),
        st.tuples(st.just("snippet"), st.sampled_from(SNIPPETS), st.booleans()),
    )
    overrides = st.lists(
        st.sampled_from(OVERRIDES)
        | st.builds(
            lambda k, v: f"{k}={v}",
            st.sampled_from(["variables.data", "model.d_model", "max_duration", "run_name", "optimizer.lr"]),
            hostile.strings(),
        ),
        max_size=2,
    )
    return st.fixed_dictionaries(
        {
            "base": st.integers(0, len(RECIPES)),
            "edit": edit,
            "overrides": st.just([]) | overrides,
            "mode": st.sampled_from(["command", "experiment", "train.py"]),
        }
    )


def EXAMPLES() -> list[dict[str, Any]]:
    valid = [
        {"base": i, "edit": ("edit", hostile.NO_EDIT), "overrides": [], "mode": "command", "check": True}
        for i in range(4)
    ]
    bombs = [
        {"base": 0, "edit": ("snippet", SNIPPETS[0], True), "overrides": [], "mode": "command"},
        {"base": 0, "edit": ("snippet", SNIPPETS[5], True), "overrides": [], "mode": "command"},
        {"base": 0, "edit": ("snippet", SNIPPETS[8], False), "overrides": [], "mode": "experiment"},
    ]
    return valid + bombs


def write_roots(folder: Path) -> list[Path]:
    return [folder / "conf"]


def build(case: dict[str, Any], folder: Path, bases: list[str]) -> dict[str, Any]:
    import yaml

    text = bases[case["base"] % len(bases)]
    kind, *args = case["edit"]
    if kind == "edit":
        data = hostile.edit_value(yaml.safe_load(text), args[0])
        if args[0][0] in ("text", "replace"):
            raw = hostile.apply_json_edit("{}", args[0]) if args[0][0] == "replace" else None
            out = raw if raw is not None else hostile.apply_bytes(text.encode(), args[0][1])
        else:
            out = hostile.dumps(data).encode("utf-8", "surrogatepass")
    elif kind == "bytes":
        out = hostile.apply_bytes(text.encode(), args[0])
    else:
        snippet = args[0].replace("PWNED", str(folder / "PWNED"))
        out = (snippet + "\n" + text if args[1] else text + "\n" + snippet + "\n").encode()
    path = folder / "run.yaml"
    path.write_bytes(out)
    return {**case, "path": path}


def attempt(built: dict[str, Any], folder: Path) -> None:
    from foundry.compat.llmfoundry import expand_train_args
    from foundry.compat.llmfoundry.__main__ import main

    path, extra = str(built["path"]), list(built["overrides"])
    if built["mode"] == "train.py":
        args = expand_train_args([f"llmfoundry={path}", *extra])
        assert args and all(isinstance(a, str) for a in args)
        return
    argv = [path, *extra]
    if built["mode"] == "experiment":
        argv += ["--experiment", str(folder / "conf" / "experiment" / "fuzz.yaml")]
    assert main(argv) == 0
    if built.get("check") and built["mode"] == "experiment":
        assert (folder / "conf" / "experiment" / "fuzz.yaml").is_file()


def test_short(tmp_path):
    fuzz(__file__, tmp_path)


@pytest.mark.slow
def test_long(tmp_path):
    fuzz(__file__, tmp_path, long=True)
