"""``streaming.base.format.mds`` (mosaicml-streaming's path): ``MDSWriter``."""

from streaming.writers.mds import MDSWriter

__all__ = ["MDSWriter"]
