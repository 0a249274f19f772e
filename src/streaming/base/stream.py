"""``streaming.base.stream`` (mosaicml-streaming's path): ``Stream``."""

from streaming.stream import Stream

__all__ = ["Stream"]
