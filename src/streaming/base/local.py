"""``streaming.base.local`` (mosaicml-streaming's path): ``LocalDataset``."""

from streaming.local import LocalDataset

__all__ = ["LocalDataset"]
