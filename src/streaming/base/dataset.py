"""``streaming.base.dataset`` (mosaicml-streaming's path): ``StreamingDataset``."""

from streaming.reader.dataset import StreamingDataset

__all__ = ["StreamingDataset"]
