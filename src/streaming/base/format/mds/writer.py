"""``streaming.base.format.mds.writer`` (mosaicml-streaming's path): ``MDSWriter``."""

from streaming.writers.mds import MDSWriter

__all__ = ["MDSWriter"]
