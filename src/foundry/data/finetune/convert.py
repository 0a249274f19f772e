"""Finetuning data -> MDS: raw rows (`prompt`/`response` or `messages`) or pre-tokenized rows (`turns`).

Design note: reads any in-memory source (`sources.load_rows`), applies the preprocessing function, validates
every row (a bad row stops the conversion naming it), and writes one MDS split per `split` through
`streaming.MDSWriter` (a local folder or a store URL). Raw output keeps the dataset tokenizer-free; tokenized
output stores llm-foundry's `turns` format (per turn `input_ids` and `labels` = the response ids) as JSON
and drops rows that would have no loss token at `max_seq_len` under the given target settings (counted), as
llm-foundry's converter does. The loader re-applies masks and truncation at training time either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from foundry.data.finetune.examples import CHAT, example_format, prompt_response, validate_messages
from foundry.data.finetune.masks import TargetPolicy, build_example
from foundry.data.finetune.preprocess import resolve_preprocessing_fn
from foundry.data.finetune.sources import load_rows
from foundry.data.finetune.tokenize import ExampleBuilder

__all__ = ["ConvertSummary", "convert_finetuning_dataset"]


@dataclass
class ConvertSummary:
    """Rows written and dropped, per split."""

    written: dict[str, int]
    dropped: dict[str, int]


# `row`: a decoded row
def _raw_record(row: Any, index: int) -> tuple[dict[str, Any], dict[str, str]]:
    if example_format(row, index) == CHAT:
        return {"messages": list(validate_messages(row, index))}, {"messages": "json"}
    prompt, response = prompt_response(row, index)
    return {"prompt": prompt, "response": response}, {"prompt": "str", "response": "str"}


def convert_finetuning_dataset(
    dataset: str,
    *,
    splits: Sequence[str],
    out: str,
    preprocessing_fn: str | None = None,
    hf_kwargs: dict[str, Any] | None = None,
    tokenizer: Any = None,
    max_seq_len: int = 2048,
    target_prompts: str = "none",
    target_responses: str = "last",
    compression: str | None = None,
    progress: bool = True,
) -> ConvertSummary:
    """Converts `splits` of `dataset` into `<out>/<split>` MDS folders.

    Args:
        dataset: A file, a folder of `{split}.*` files (local or store URL), a saved HF dataset,
            or a hub name.
        splits: Splits to convert.
        out: Output root (local folder or store URL).
        preprocessing_fn: A registered name or `module:function`.
        hf_kwargs: Extra `datasets.load_dataset` arguments.
        tokenizer: A transformers tokenizer. When given, rows are tokenized into `turns` (llm-foundry's
            pre-tokenized format); None writes raw rows.
        max_seq_len, target_prompts, target_responses: Tokenized output only: rows with no loss token within
            `max_seq_len` under these settings are dropped.
        compression: MDS shard compression (e.g. `zstd`).
        progress: Show a progress bar per split.
    """
    # keeps `import foundry.data.finetune` free of the writers
    from streaming import MDSWriter

    policy = TargetPolicy.parse(target_prompts, target_responses)
    preprocess = resolve_preprocessing_fn(preprocessing_fn, dataset=dataset)
    builder = ExampleBuilder(
        tokenizer=tokenizer, policy=policy, max_seq_len=max_seq_len, preprocess=preprocess
    )
    summary = ConvertSummary(written={}, dropped={})
    for split in splits:
        rows = load_rows(dataset, split=split, hf_kwargs=hf_kwargs)
        records: list[dict[str, Any]] = []
        columns: dict[str, str] | None = None
        for i, row in enumerate(tqdm(rows, desc=f"{split}: validating", disable=not progress, unit="row")):
            if tokenizer is None:
                record, cols = _raw_record(preprocess(row) if preprocess else row, i)
                if columns is not None and cols != columns:
                    raise ValueError(
                        f"split {split!r} row {i}: mixes chat and prompt/response rows; one MDS split holds "
                        "one format (convert with --tokenizer to store both as tokenized turns)"
                    )
                columns = cols
                records.append(record)
                continue
            turns = builder.turns(row, i)
            if build_example(
                turns, policy=policy, eos_token_id=builder.eos_token_id, max_seq_len=max_seq_len
            ):
                records.append({"turns": [{"input_ids": list(p), "labels": list(r)} for p, r in turns]})
        columns = columns or {"turns": "json"}
        with MDSWriter(out=f"{out.rstrip('/')}/{split}", columns=columns, compression=compression) as writer:
            for record in tqdm(records, desc=f"{split}: writing", disable=not progress, unit="row"):
                writer.write(record)
        summary.written[split] = len(records)
        summary.dropped[split] = len(rows) - len(records)
    return summary
