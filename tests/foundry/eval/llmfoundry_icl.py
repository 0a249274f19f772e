"""Run in the llm-foundry venv: llm-foundry's ICL evaluators on a Hugging Face model folder, write JSON.

    /tmp/ref/venv-llmfoundry/bin/python llmfoundry_icl.py SPEC.json OUT.json

SPEC.json: {"model": HF folder, "tokenizer": tokenizer.json, "icl_tasks": [llm-foundry task dicts],
"max_seq_len": int, "batch_size": int, "gauntlet": an `eval_gauntlet` mapping}. The model is loaded as llm-foundry's `hf_causal_lm`
(ComposerHFCausalLM), the tasks are built by `build_icl_evaluators` (as llm-foundry's eval entry does), and a
Composer `Trainer(...).eval()` on the CPU in fp32 runs them, and llm-foundry's `EvalGauntlet` callback
aggregates them. OUT.json: {"metrics": evaluator label -> {metric name: value}, "gauntlet": the callback's
`eval_after_all` scores}. Used by test_llmfoundry_parity.py.
"""

import copy
import json
import os
import sys
import tempfile

TMP = tempfile.mkdtemp(prefix="lf-icl-")
os.environ.update({
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "HF_HOME": os.path.join(TMP, "hf"), "TOKENIZERS_PARALLELISM": "false",
})  # fmt: skip
os.chdir(TMP)  # composer / llm-foundry write files into the cwd

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from composer import Trainer  # noqa: E402
from llmfoundry.callbacks import EvalGauntlet  # noqa: E402
from llmfoundry.models.hf import ComposerHFCausalLM  # noqa: E402
from llmfoundry.utils.builders import build_icl_evaluators  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    torch.manual_seed(0)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=spec["tokenizer"],
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    model = ComposerHFCausalLM(
        tokenizer=tok, pretrained_model_name_or_path=spec["model"], pretrained=True, trust_remote_code=False
    )
    evaluators, logger_keys = build_icl_evaluators(
        spec["icl_tasks"], tok, spec["max_seq_len"], spec["batch_size"], destination_dir=TMP
    )
    trainer = Trainer(
        model=model, eval_dataloader=evaluators, device="cpu", precision="fp32",
        progress_bar=False, log_to_console=False, save_folder=None, seed=0,
    )  # fmt: skip
    trainer.eval()
    out: dict[str, dict[str, float]] = {}
    for label, metrics in trainer.state.eval_metrics.items():
        out[label] = {name: float(m.compute()) for name, m in metrics.items()}
    g = copy.deepcopy(spec["gauntlet"])
    # benchmark_sizes: llm-foundry's builder always passes them (its EQUAL check compares a str to an enum)
    sizes = {label: 1 for label in out}
    gauntlet = EvalGauntlet(logger_keys, g.pop("categories"), benchmark_sizes=sizes, **g).eval_after_all(
        trainer.state, None
    )
    trainer.close()
    json.dump({"metrics": out, "gauntlet": gauntlet}, open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
