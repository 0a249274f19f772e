"""``streaming.base.dataloader`` (mosaicml-streaming's path): ``StreamingDataLoader``."""

from streaming.dataloader import StreamingDataLoader

__all__ = ["StreamingDataLoader"]
