"""Finetuning data: prompt/response and chat rows -> loss-masked, padded or packed, resumable batches.

Modules, in the order data flows: `sources` (rows from files / HF datasets), `preprocess` (column mapping),
`examples` (format validation), `chat` (template rendering into turns), `tokenize` (turns of token ids),
`masks` (stitching, loss masks, truncation), `packing` (which example goes in which row), `collate`
(tensors), `loader` / `build` (the resumable loader), `convert` (to MDS), `instruct` (a small offline
instruction dataset). The `data=finetune/<name>` schema, `FinetuneDataConfig`, is in `foundry.data.config`.
"""

from foundry.data.config import FinetuneDataConfig
from foundry.data.finetune.build import build_examples, build_finetune_dataloader
from foundry.data.finetune.examples import ExampleError
from foundry.data.finetune.loader import FinetuneLoader
from foundry.data.finetune.masks import IGNORE_INDEX, Example, TargetPolicy, build_example, stitch_turns
from foundry.data.finetune.packing import choose_packing_ratio, pack_bins
from foundry.data.finetune.preprocess import PREPROCESSORS, resolve_preprocessing_fn
from foundry.data.finetune.tokenize import ExampleBuilder

__all__ = [
    "IGNORE_INDEX",
    "PREPROCESSORS",
    "Example",
    "ExampleBuilder",
    "ExampleError",
    "FinetuneDataConfig",
    "FinetuneLoader",
    "TargetPolicy",
    "build_example",
    "build_examples",
    "build_finetune_dataloader",
    "choose_packing_ratio",
    "pack_bins",
    "resolve_preprocessing_fn",
    "stitch_turns",
]
