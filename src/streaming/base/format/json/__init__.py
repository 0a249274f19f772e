"""``streaming.base.format.json`` (mosaicml-streaming's path): ``JSONWriter``."""

from streaming.writers.text import JSONWriter

__all__ = ["JSONWriter"]
