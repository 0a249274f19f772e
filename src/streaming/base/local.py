"""``streaming.base.local`` (mosaicml-streaming's path): ``LocalDataset``."""

from streaming.reader.local import LocalDataset

__all__ = ["LocalDataset"]
