"""`python -m foundry.compat.llmfoundry`: llm-foundry's own training YAMLs translate, compose and keep their values.

The fixtures are the unmodified llm-foundry YAMLs in ../shared/data/llmfoundry_yamls (read there, never
copied). Every translation is composed with Hydra against `conf/` and converted to the typed `TrainConfig`,
so a translated key that our schema would reject fails here, not in a user's run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from foundry.compat.llmfoundry import expand_train_args, keys, translate_file
from foundry.compat.llmfoundry.__main__ import main, parse_args
from foundry.compat.llmfoundry.render import experiment_yaml, format_value, load_yaml, overrides
from foundry.errors import run_tool
from tests.foundry.compat.llmfoundry_yaml import MINIMAL, compose_train, write_yaml

REPO = Path(__file__).resolve().parents[3]
YAMLS = REPO.parent / "shared" / "data" / "llmfoundry_yamls"
FIXTURES = sorted(YAMLS.glob("*/*.yaml")) if YAMLS.is_dir() else []
needs_yamls = pytest.mark.skipif(not FIXTURES, reason=f"llm-foundry YAML fixtures not found at {YAMLS}")


@needs_yamls
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_translates_composes_and_accounts_for_every_key(conf, path):
    tr = translate_file(path)
    cfg = compose_train(overrides(tr))
    resolved, _, _ = load_yaml(path)
    noted = {n.key.split(".")[0] for n in tr.notes}
    assert all(k in keys.TOP or k in noted for k in resolved), set(resolved) - set(keys.TOP) - noted
    assert cfg.task == ("finetune" if resolved["train_loader"]["name"] == "finetuning" else "pretrain")
    assert cfg.optimizer.lr == resolved["optimizer"]["lr"]
    assert cfg.trainer.global_train_batch_size == resolved["global_train_batch_size"]
    assert cfg.trainer.grad_clip_norm == resolved["algorithms"]["gradient_clipping"]["clipping_threshold"]


@needs_yamls
def test_mpt_125m_keeps_llm_foundry_values_and_defaults(conf):
    cfg = compose_train(overrides(translate_file(YAMLS / "pretrain" / "mpt-125m.yaml")))
    m = cfg.model
    assert (m.d_model, m.n_heads, m.n_layers, m.max_seq_len, m.vocab_size) == (768, 12, 12, 2048, 50368)
    assert (m.attn_config.attn_impl, m.init_device) == ("flash", "meta")
    assert (cfg.scheduler.name, cfg.scheduler.t_warmup, cfg.scheduler.alpha_f) == (
        "cosine_with_warmup",
        "100ba",
        0.1,
    )
    assert (cfg.optimizer.name, cfg.optimizer.betas, cfg.optimizer.weight_decay) == (
        "decoupled_adamw",
        [0.9, 0.95],
        0.0,
    )
    t = cfg.trainer
    assert (t.max_duration, t.eval_interval, t.precision, t.device_train_microbatch_size) == (
        "4800ba",
        "500ba",
        "amp_bf16",
        16,
    )
    assert (t.eval_first, t.eval_subset_num_batches, t.progress_bar, t.log_interval) == (False, -1, False, 1)
    assert (cfg.parallelism.strategy, cfg.parallelism.mixed_precision) == ("fsdp", "PURE")
    d = cfg.data
    assert (d.local, d.remote, d.train_split, d.eval_split, d.shuffle, d.shuffle_seed) == (
        "./my-copy-c4",
        None,
        "train",
        "val",
        True,
        17,
    )
    assert cfg.checkpoint.save_folder is None and cfg.checkpoint.autoresume is False
    assert cfg.callbacks.speed_monitor.window_size == 10 and cfg.callbacks.lr_monitor
    assert cfg.tokenizer.name == "EleutherAI/gpt-neox-20b" and cfg.tokenizer.model_max_length == 2048


@needs_yamls
def test_dolly_sft_is_a_finetuning_run_of_the_hf_model_with_integer_epochs(conf):
    tr = translate_file(YAMLS / "finetune" / "mpt-7b_dolly_sft.yaml")
    cfg = compose_train(overrides(tr))
    assert cfg.task == "finetune" and cfg.model.pretrained_model_name_or_path == "mosaicml/mpt-7b"
    assert cfg.model.config_overrides["attn_config"]["attn_impl"] == "flash"
    assert (cfg.data.hf_name, cfg.data.train_split, cfg.data.eval_split) == (
        "mosaicml/dolly_hhrlhf",
        "train",
        "test",
    )
    assert (cfg.scheduler.name, cfg.scheduler.t_warmup, cfg.scheduler.alpha_f) == (
        "linear_decay_with_warmup",
        "50ba",
        0.0,
    )
    assert (cfg.trainer.max_duration, cfg.trainer.eval_interval, cfg.trainer.eval_first) == (
        "2ep",
        "1ep",
        True,
    )
    assert "ignored: model.use_auth_token" in "\n".join(n.line() for n in tr.notes)
    arc = compose_train(
        overrides(translate_file(YAMLS / "finetune" / "gpt2-arc-easy-cpu-streaming-dataset.yaml"))
    )
    assert arc.trainer.eval_interval == "1ep"  # `eval_interval: 1` is one epoch in Composer
    assert (arc.data.local, arc.data.remote, arc.data.train_split) == ("./my_data", None, "train")


@needs_yamls
def test_overrides_edit_the_yaml_and_train_py_keys_pass_through_last(conf):
    path = YAMLS / "pretrain" / "mpt-small-cpu.yaml"
    tr = translate_file(path, ["variables.data_local=/data/c4", "max_duration=3ba", "trainer.device=cpu"])
    args = overrides(tr)
    assert args[-1] == "trainer.device=cpu"
    cfg = compose_train(args)
    assert (cfg.data.local, cfg.trainer.max_duration, cfg.trainer.device) == ("/data/c4", "3ba", "cpu")
    assert expand_train_args(["seed=3", f"llmfoundry={path}"]) == overrides(translate_file(path)) + ["seed=3"]
    assert expand_train_args(["seed=3"]) == ["seed=3"]


def test_refused_keys_are_named_and_the_translation_goes_on(conf, tmp_path):
    extra = """
algorithms: {gradient_clipping: {clipping_type: value, clipping_threshold: 1.0}, alibi: {}}
callbacks: {generate_callback: {prompts: [hi]}, speed_monitor: {window_size: 5, time_unit: hours}}
loggers: {inmemory: {}, wandb: {project: p, init_kwargs: {x: 1}}}
fsdp_config: {sharding_strategy: SHARD_GRAD_OP, activation_cpu_offload: true}
icl_subset_num_batches: 3
bogus_key: 1
"""
    tr = translate_file(write_yaml(tmp_path, MINIMAL + extra))
    lines = {n.line().split(": ")[1]: n.status for n in tr.notes}
    for key in (
        "algorithms.gradient_clipping.clipping_type",
        "algorithms.alibi",
        "callbacks.generate_callback",
        "loggers.inmemory",
        "loggers.wandb.init_kwargs",
        "fsdp_config.activation_cpu_offload",
        "icl_subset_num_batches",
        "bogus_key",
    ):
        assert lines.get(key) == "refused", (key, lines)
    assert lines["callbacks.speed_monitor.time_unit"] == "ignored"
    cfg = compose_train(overrides(tr))
    assert cfg.trainer.grad_clip_norm is None and cfg.logger.wandb.project == "p"
    assert (
        cfg.parallelism.sharding_strategy == "SHARD_GRAD_OP" and cfg.callbacks.speed_monitor.window_size == 5
    )
    assert not cfg.callbacks.lr_monitor and cfg.callbacks.runtime_estimator is None


def test_streams_icl_tasks_and_checkpoints_carry_over(conf, tmp_path):
    text = (
        MINIMAL.replace(
            "dataset: {local: /data/c4, split: train, max_seq_len: 128}",
            "dataset: {streams: {a: {local: /d/a, split: train, proportion: 0.25}, b: {local: /d/b, proportion: 0.75}}}",
        )
        + """
eval_loader: {name: text, dataset: {streams: {a: {local: /d/a, split: val}}}}
icl_tasks: evals/tasks_light.yaml
max_seq_len: 128
save_folder: ./{run_name}/checkpoints
save_interval: 2
loggers: {mlflow: {experiment_name: e}}
callbacks: {hf_checkpointer: {save_folder: /tmp/hf, save_interval: 10ba, precision: bfloat16}}
"""
    )
    cfg = compose_train(overrides(translate_file(write_yaml(tmp_path, text))))
    a, b = cfg.data.streams["a"], cfg.data.streams["b"]
    assert (a.local, a.split, a.eval_split, a.proportion, a.path) == ("/d/a", "train", "val", 0.25, None)
    assert (b.local, b.eval_split, b.proportion) == ("/d/b", None, 0.75)
    assert cfg.eval.icl_tasks_file == "evals/tasks_light.yaml" and cfg.eval.max_seq_len == 128
    assert (cfg.checkpoint.save_folder, cfg.checkpoint.save_interval) == ("./{run_name}/checkpoints", "2ep")
    assert cfg.logger.mlflow.experiment == "e" and cfg.callbacks.hf_export.every_n_steps == 10


def test_the_experiment_file_composes_to_the_same_config(conf, tmp_path):
    tr = translate_file(write_yaml(tmp_path, MINIMAL + "fsdp_config: {mixed_precision: DEFAULT}\n"))
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "lf.yaml").write_text(experiment_yaml(tr, source="run.yaml"))
    from_file = compose_train([f"hydra.searchpath=[file://{tmp_path}]", "experiment=lf", "run_name=x"])
    from_args = compose_train([*overrides(tr), "run_name=x"])
    assert from_file == from_args


@pytest.mark.parametrize(
    "argv",
    [["run.yaml", "--run", "max_duration=5ba", "trainer.device=cpu"], ["--run", "run.yaml", "max_duration=5ba",
     "trainer.device=cpu"], ["run.yaml", "max_duration=5ba", "--run", "trainer.device=cpu"]],
)  # fmt: skip
def test_options_and_overrides_come_in_any_order(argv):
    """Issue 40 item 3: `YAML --run key=value` was refused by argparse (`unrecognized arguments`)."""
    args = parse_args(argv)
    assert args.run and str(args.yaml) == "run.yaml"
    assert args.overrides == ["max_duration=5ba", "trainer.device=cpu"]


def test_an_experiment_before_the_overrides_is_written_with_them(tmp_path, capsys):
    out = tmp_path / "experiment" / "x.yaml"
    assert main([str(write_yaml(tmp_path, MINIMAL)), "--experiment", str(out), "max_duration=5ba"]) == 0
    assert "max_duration: 5ba" in out.read_text()


def test_values_from_the_environment_are_printed_as_interpolations(conf, tmp_path, monkeypatch, capsys):
    """Issue 39 item 3: the translator printed resolved `${oc.env:...}` values in the command and the
    experiment file; they stay interpolations, which `train.py` resolves when it runs."""
    monkeypatch.setenv("DATA_ROOT", "/mnt/corp-Zq81x")
    monkeypatch.setenv("RUN_TAG", "tag-Q7")
    text = (
        MINIMAL.replace("local: /data/c4", "local: '${oc.env:DATA_ROOT}/c4'")
        + "run_name: ${oc.env:RUN_TAG}\n"
    )
    path = write_yaml(tmp_path, text)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "corp-Zq81x" not in out and "tag-Q7" not in out, out
    assert "${oc.env:DATA_ROOT}/c4" in out and "${oc.env:RUN_TAG}" in out
    tr = translate_file(path)
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "lf.yaml").write_text(experiment_yaml(tr, source="run.yaml"))
    assert "corp-Zq81x" not in (tmp_path / "experiment" / "lf.yaml").read_text()
    from_file = compose_train([f"hydra.searchpath=[file://{tmp_path}]", "experiment=lf"])
    from_args = compose_train(overrides(tr))
    assert from_file == from_args and from_args.run_name == "tag-Q7"
    assert from_args.data.local == "/mnt/corp-Zq81x/c4"  # resolved when train.py runs


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (
            "model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, block_overrides: {}}",
            "model.block_overrides",
        ),
        (
            "model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, ffn_config: {ffn_type: torch_dmoe}}",
            "torch_dmoe",
        ),
        ("model: {name: mpt_causal_lm, d_model: 64, n_heads: 5, n_layers: 2}", "divisible by n_heads"),
        (
            "model: {name: mpt_causal_lm, d_model: 64, n_heads: 4, n_layers: 2, attn_config: {nope: true}}",
            "attn_config.nope",
        ),
        ("optimizer: {name: adalr_lion, lr: 1.0}", "optimizer.name: 'adalr_lion'"),
        ("precision: bf16", "precision: 'bf16'"),
        ("max_duration: 10sec", "max_duration"),
        ("train_loader: {name: text, dataset: {local: x, tokenizer: y}}", "train_loader.dataset.tokenizer"),
        ("x: ${variables.missing}", "variables.missing"),
    ],
)
def test_mistakes_are_one_error_line_naming_the_key(tmp_path, capsys, body, needle):
    key = body.split(":")[0]
    text = (
        "\n".join(line for line in MINIMAL.splitlines() if not line.startswith(f"{key}:"))
        + "\n"
        + body
        + "\n"
    )
    assert run_tool(lambda: main([str(write_yaml(tmp_path, text))])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err


def test_missing_files_bad_overrides_and_misplaced_experiments_are_errors(tmp_path, capsys):
    good = str(write_yaml(tmp_path, MINIMAL))
    for argv, needle in (
        ([str(tmp_path / "nope.yaml")], "no such file"),
        ([good, "max_duration"], "not key=value"),
        ([good, "--experiment", str(tmp_path / "x.yaml")], "folder named experiment"),
        ([], "give an llm-foundry training YAML"),
    ):
        assert run_tool(lambda argv=argv: main(argv)) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and needle in err and err.count("\n") == 1, err


def test_values_are_written_in_hydra_override_grammar():
    assert [
        format_value(v) for v in (None, True, 6e-4, "10ba", "1e5", "null", "./{run_name}/c", [0.9, 0.95])
    ] == ["null", "true", "0.0006", "10ba", '"1e5"', '"null"', '"./{run_name}/c"', "[0.9,0.95]"]
    assert format_value({"a": 1, "b": "x y"}) == '{a:1,b:"x y"}'


def test_the_docs_hold_the_generated_table(capsys):
    assert main(["--table"]) == 0
    table = capsys.readouterr().out.strip()
    assert table == keys.markdown_table()
    page = (REPO / "docs" / "guides" / "from-llm-foundry.md").read_text()
    section = page.split("## llm-foundry YAMLs", 1)[1].split("\n## ", 1)[0]
    assert table in section, (
        "docs/guides/from-llm-foundry.md's llm-foundry table is stale: paste "
        "`python -m foundry.compat.llmfoundry --table`"
    )


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [  # inputs the fuzz suite (tests/fuzz/test_fuzz_llmfoundry_yaml.py, issue 39) found ending in a traceback
        (
            MINIMAL.replace("tokenizer: {name: EleutherAI/gpt-neox-20b}", "tokenizer: [[1, 2]]"),
            "tokenizer: holds a value of a type llm-foundry does not take",  # was AttributeError (sections.py)
        ),
        (
            MINIMAL.replace("n_heads: 4", "n_heads: 0"),
            "model.n_heads=0 must be a whole number > 0",
        ),  # was ZeroDivisionError
        (
            MINIMAL.replace("train_loader: {", "train_loader: [").replace("128}}", "128}]"),
            "train_loader: must be",
        ),
        (MINIMAL + "a: &x {b: *x}\n", "an anchor contains an alias of itself"),  # RecursionError in OmegaConf
        ("a: " + "{b: " * 1100 + "1" + "}" * 1100 + "\n" + MINIMAL, "nested deeper than 64 levels"),
        (MINIMAL + _bomb(5), "expand to over 10,000 nodes"),  # 9^5 nodes: OmegaConf was busy for minutes
        (
            MINIMAL + "deep: " + "[" * 100_000 + "]" * 100_000 + "\n",
            "nested deeper than 64",
        ),  # minutes in PyYAML
    ],
)
def test_hostile_yamls_are_one_error_line(tmp_path, capsys, text, needle):
    assert run_tool(lambda: main([str(write_yaml(tmp_path, text))])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err, err


def test_a_yaml_that_is_not_utf8_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_bytes(MINIMAL.encode() + b"\nx: \x8f\n")  # was UnicodeDecodeError from OmegaConf.load
    assert run_tool(lambda: main([str(path)])) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "run.yaml: not UTF-8 text" in err, err


def test_printed_paths_holding_a_credential_are_masked(tmp_path, capsys, monkeypatch):
    """The experiment file's path held the value of a credential variable and was printed as is."""
    monkeypatch.setenv("FUZZ_API_TOKEN", "s3cr3t-value-9012")
    out = tmp_path / "s3cr3t-value-9012" / "conf" / "experiment" / "x.yaml"
    assert main([str(write_yaml(tmp_path, MINIMAL)), "--experiment", str(out)]) == 0
    printed = capsys.readouterr()
    assert out.is_file() and "wrote" in printed.out and "s3cr3t-value-9012" not in printed.out + printed.err


def test_a_value_with_a_lone_surrogate_prints(tmp_path, capsys):
    """A YAML `"\\udc80"` escape made printing the command fail with UnicodeEncodeError (the fuzz suite's)."""
    assert main([str(write_yaml(tmp_path, MINIMAL.replace("/data/c4", '"/data/\\udc80"')))]) == 0
    assert "\\udc80" in capsys.readouterr().out
