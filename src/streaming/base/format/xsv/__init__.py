"""``streaming.base.format.xsv`` (mosaicml-streaming's path): the CSV/TSV/XSV writers."""

from streaming.writers.text import CSVWriter, TSVWriter, XSVWriter

__all__ = ["CSVWriter", "TSVWriter", "XSVWriter"]
