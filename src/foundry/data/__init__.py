"""Data for the trainer: tokenized-text batches from MDS, dataset preparation,
the offline quick-start corpus."""

from foundry.data.collate import TextCollator
from foundry.data.config import QuickstartDataConfig, TextDataConfig
from foundry.data.prep import ConvertStats, convert_texts, smallest_uint_dtype
from foundry.data.quickstart import prepare_quickstart
from foundry.data.text import build_text_dataloader

__all__ = [
    "ConvertStats",
    "QuickstartDataConfig",
    "TextCollator",
    "TextDataConfig",
    "build_text_dataloader",
    "convert_texts",
    "prepare_quickstart",
    "smallest_uint_dtype",
]
