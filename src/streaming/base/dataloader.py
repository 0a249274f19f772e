"""``streaming.base.dataloader`` (mosaicml-streaming's path): ``StreamingDataLoader``."""

from streaming.loader.dataloader import StreamingDataLoader

__all__ = ["StreamingDataLoader"]
