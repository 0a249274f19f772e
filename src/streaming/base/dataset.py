"""``streaming.base.dataset`` (mosaicml-streaming's path): ``StreamingDataset``."""

from streaming.dataset import StreamingDataset

__all__ = ["StreamingDataset"]
