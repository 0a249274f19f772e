"""``streaming.base.format`` (mosaicml-streaming's path): the writers and ``get_index_basename``."""

from streaming.format.index import INDEX_FILENAME
from streaming.writers.mds import MDSWriter
from streaming.writers.text import CSVWriter, JSONWriter, TSVWriter, XSVWriter

__all__ = ["CSVWriter", "JSONWriter", "MDSWriter", "TSVWriter", "XSVWriter", "get_index_basename"]


def get_index_basename() -> str:
    """``"index.json"``."""
    return INDEX_FILENAME
