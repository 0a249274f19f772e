"""Exports in our `foundry_mpt` format carry their modelling code (`auto_map`, as llm-foundry's exports do), so
plain transformers loads them with `trust_remote_code=True`: checked in a Python that cannot import this project,
on the quick-start model (`model=mpt-tiny`) and on RoPE + GQA + GLU options transformers' MPT lacks."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from foundry.models.export import describe_export, export_hf
from foundry.models.mpt import MPTConfig, MPTForCausalLM
from foundry.models.remote_code import AUTO_MAP, MODULES, _flatten

REPO = Path(__file__).resolve().parents[3]
CONF = REPO / "conf"


def _quickstart_model() -> MPTForCausalLM:
    """The quick start's model: `model=mpt-tiny` as train.py composes it."""
    from hydra import compose, initialize_config_dir

    from foundry.config import register_configs, to_train_config
    from foundry.models import build_model_on

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF)):
        cfg = to_train_config(compose("train", overrides=["model=mpt-tiny"]))
    torch.manual_seed(0)
    model = build_model_on(cfg.model, device="cpu")
    assert isinstance(model, MPTForCausalLM)
    return model.eval()


def _rope_gqa_model() -> MPTForCausalLM:
    torch.manual_seed(0)
    cfg = MPTConfig(
        d_model=64,
        n_heads=4,
        n_layers=2,
        vocab_size=512,
        max_seq_len=64,
        learned_pos_emb=False,
        norm_type="rmsnorm",
        attn_config={"rope": True, "attn_type": "grouped_query_attention", "kv_n_heads": 2, "qk_ln": True},
        ffn_config={"ffn_type": "mptglu", "ffn_act_fn": {"name": "silu"}},
    )
    return MPTForCausalLM(cfg).eval()


def test_the_export_carries_self_contained_code_and_an_auto_map(tmp_path):
    from transformers.dynamic_module_utils import get_imports, get_relative_import_files

    assert export_hf(_quickstart_model(), tmp_path) == "foundry"
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"] == AUTO_MAP and config["model_type"] == "foundry_mpt"
    entry = [tmp_path / f"{ref.split('.')[0]}.py" for ref in AUTO_MAP.values()]
    needed = {Path(f).name for e in entry for f in [e, *get_relative_import_files(str(e))]}
    assert needed == {f"{name}.py" for name in MODULES.values()}  # every file the loader needs, no more
    imports = set().union(*(get_imports(str(tmp_path / name)) for name in needed))
    assert imports <= {"torch", "transformers"} | set(sys.stdlib_module_names), imports
    for name in needed:  # not even inside a function or under TYPE_CHECKING
        assert not re.search(r"^\s*(from|import)\s+foundry\b", (tmp_path / name).read_text(), flags=re.M), (
            name
        )
    line = describe_export(tmp_path)
    assert "trust_remote_code=True" in line and "learned_pos_emb must be false" in line


def test_an_unlisted_foundry_import_fails_the_export_naming_the_fix():
    assert (
        _flatten("from foundry.models.documents import x\n", module="m")
        == "from .foundry_documents import x\n"
    )
    with pytest.raises(RuntimeError, match="foundry.models.remote_code.MODULES"):
        _flatten("import torch\n\ndef f():\n    from foundry.parallel import dist\n", module="m")


def test_transformers_own_mpt_needs_no_code(tmp_path):
    torch.manual_seed(0)
    cfg = MPTConfig(d_model=32, n_heads=2, n_layers=1, vocab_size=64, max_seq_len=16, no_bias=True,
                    attn_config={"alibi": True})  # fmt: skip
    assert export_hf(MPTForCausalLM(cfg).eval(), tmp_path) == "hf_mpt"
    assert not list(tmp_path.glob("*.py")) and "auto_map" not in json.loads(
        (tmp_path / "config.json").read_text()
    )
    assert describe_export(tmp_path).startswith("hf_mpt, transformers' own MptForCausalLM")


# Runs with `python -I` (no PYTHONPATH, no user site) and drops this checkout from sys.path (the editable install
# adds its src/ there), so `foundry` and `streaming` cannot be imported: only torch and transformers.
LOADER = """
import sys
sys.path[:] = [p for p in sys.path if not (p.startswith(sys.argv[1]) and not p.startswith(sys.prefix))]
for name in ("foundry", "streaming"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} is importable: the check would not be isolated")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

export, ref = sys.argv[2], torch.load(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(export, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    logits = model(ref["ids"]).logits
    generated = model.generate(ref["ids"][:1, :5], max_new_tokens=8, do_sample=False, pad_token_id=0)
# transformers 5 reads the model's config before the tokenizer's: the flag that the model needs, nothing else
tokens = AutoTokenizer.from_pretrained(export, trust_remote_code=True)("def main():", add_special_tokens=False)["input_ids"]
assert PreTrainedTokenizerFast.from_pretrained(export)("def main():", add_special_tokens=False)["input_ids"] == tokens
torch.save({"logits": logits, "generated": generated, "tokens": tokens}, sys.argv[4])
"""


@pytest.mark.slow  # ~10 s each: a fresh interpreter imports torch and transformers
@pytest.mark.parametrize(
    "build", [_quickstart_model, _rope_gqa_model], ids=["quickstart-mpt-tiny", "rope-gqa-glu"]
)
def test_plain_transformers_without_this_project_loads_the_export(tmp_path, build, capsys):
    import importlib.util

    from foundry.data.quickstart import quickstart_corpus, train_bpe_tokenizer
    from foundry.tokenizers import TokenizerConfig, build_tokenizer

    ours = build()
    ours.save_pretrained(tmp_path / "ckpt")
    train_bpe_tokenizer(quickstart_corpus(100_000), vocab_size=300, path=tmp_path / "tokenizer.json")
    spec = importlib.util.spec_from_file_location("export_hf_script", REPO / "scripts" / "export_hf.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.main(["--src", str(tmp_path / "ckpt"), "--out", str(tmp_path / "exp"), "--tokenizer", str(tmp_path / "tokenizer.json")])  # fmt: skip
    out = capsys.readouterr().out
    assert "wrote foundry checkpoint" in out and "format: foundry_mpt with its modelling code" in out, out
    assert "trust_remote_code=True" in out and "transformers' own MPT cannot hold this model" in out, out
    export = tmp_path / "elsewhere" / "quickstart-export"  # a copy, away from the checkout
    shutil.copytree(tmp_path / "exp", export)
    torch.manual_seed(1)
    ids = torch.randint(0, ours.config.vocab_size, (2, 24))
    with torch.no_grad():
        expected = ours(ids).logits
        generated = ours.generate(ids[:1, :5], max_new_tokens=8, do_sample=False, pad_token_id=0)
    torch.save({"ids": ids}, tmp_path / "ref.pt")
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", LOADER, str(REPO), str(export), str(tmp_path / "ref.pt"), str(tmp_path / "got.pt")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Do you wish to run the custom code" not in proc.stdout + proc.stderr  # issue 40: it asked
    assert "to instantiate a model of type" not in proc.stdout + proc.stderr
    assert (
        json.loads((export / "tokenizer_config.json").read_text())["tokenizer_class"]
        == "PreTrainedTokenizerFast"
    )
    got = torch.load(tmp_path / "got.pt")
    torch.testing.assert_close(got["logits"], expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(got["generated"], generated)
    tok = build_tokenizer(TokenizerConfig(name=str(tmp_path / "tokenizer.json")))
    assert got["tokens"] == tok("def main():", add_special_tokens=False)["input_ids"]
