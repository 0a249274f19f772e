"""Run in the llm-foundry venv: tokenize rows the way llm-foundry's finetuning path does, write JSON.

    /tmp/ref/venv-llmfoundry/bin/python llmfoundry_masks.py ROWS.json TOKENIZER.json OUT.json

For every row and every (target_prompts, target_responses, max_seq_len) setting in ROWS.json it records
llm-foundry's `is_valid_ift_example` and, for valid rows, the collator's stitched, truncated `input_ids` and
`labels` (`stitch_turns_decoder_only` with the tokenizer's EOS). Used by test_llmfoundry_parity.py.
"""

import json
import os
import sys

os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})

from llmfoundry.data.finetuning.collator import stitch_turns_decoder_only
from llmfoundry.data.finetuning.tasks import is_valid_ift_example, tokenize_formatted_example
from transformers import PreTrainedTokenizerFast


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    tok = PreTrainedTokenizerFast(
        tokenizer_file=sys.argv[2],
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    out = []
    for row in spec["rows"]:
        example = tokenize_formatted_example(row, tok)
        turns = example["turns"]
        per_setting = []
        for prompts, responses, max_len in spec["settings"]:
            valid = is_valid_ift_example(max_len, prompts, responses, True, example)
            ids, labels = stitch_turns_decoder_only(turns, prompts, responses, eos_token_id=tok.eos_token_id)
            per_setting.append({"valid": valid, "input_ids": ids[:max_len], "labels": labels[:max_len]})
        out.append(per_setting)
    json.dump(out, open(sys.argv[3], "w"))


if __name__ == "__main__":
    main()
