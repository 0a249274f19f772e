"""``streaming.base.stream`` (mosaicml-streaming's path): ``Stream``."""

from streaming.reader.stream import Stream

__all__ = ["Stream"]
