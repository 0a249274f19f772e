"""Line-oriented shard writers: ``JSONWriter`` (JSONL) and ``XSVWriter`` / ``CSVWriter`` / ``TSVWriter``.

Each shard is a data file of lines plus a ``.meta`` file (``uint32 N``, ``uint32 offsets[N+1]``, the config
JSON), so any sample is one slice of the data file. Values are checked against the three text encodings
(``str``, ``int``, ``float``) at write time; separated-value formats have no quoting, so a value containing
the separator or newline is refused with a pointer to the formats that can hold it.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from streaming.format.encodings import EncodingError, check_text_encoding, text_value_ok
from streaming.writers.base import Writer

__all__ = ["CSVWriter", "JSONWriter", "TSVWriter", "XSVWriter"]

_U32 = struct.Struct("<I")


class _SplitWriter(Writer):
    """Line-oriented formats: a data file of lines plus a ``.meta`` file of uint32 offsets and the config."""

    newline: str = "\n"

    def _meta(self, samples: list[bytes], *, start: int) -> bytes:
        import numpy as np

        offsets = np.empty(len(samples) + 1, dtype=np.int64)
        offsets[0] = start
        np.cumsum(np.fromiter(map(len, samples), dtype=np.int64, count=len(samples)), out=offsets[1:])
        offsets[1:] += start
        config = json.dumps(self.get_config(), sort_keys=True).encode("utf-8")
        return _U32.pack(len(samples)) + offsets.astype("<u4").tobytes() + config


class JSONWriter(_SplitWriter):
    """Writes JSONL shards: one ``json.dumps(sample, sort_keys=True)`` line per sample
    (str/int/float columns)."""

    format = "json"

    def __init__(self, *, newline: str = "\n", **kwargs: Any) -> None:
        self.newline = newline
        super().__init__(**kwargs)

    def _init_columns(self, columns: dict[str, str]) -> None:
        if not columns:
            raise ValueError("columns must name at least one column, e.g. {'text': 'str'}")
        for enc in columns.values():
            check_text_encoding(enc)
        self._names = sorted(columns)

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        obj = {}
        for name in self._names:
            if name not in sample:
                raise EncodingError(f"sample is missing column {name!r} (columns: {', '.join(self._names)})")
            value, enc = sample[name], self._columns[name]
            if not text_value_ok(enc, value):
                raise EncodingError(f"column {name!r} ({enc}): {value!r} is not a {enc}")
            obj[name] = value
        return (json.dumps(obj, sort_keys=True) + self.newline).encode("utf-8")

    def get_config(self) -> dict[str, Any]:
        return {
            "columns": dict(self._columns),
            "compression": self.compression,
            "format": self.format,
            "hashes": list(self.hashes),
            "newline": self.newline,
            "size_limit": self.size_limit,
            "version": 2,
        }

    def _shard_files(self, samples: list[bytes], basename: str) -> list[tuple[str, bytes]]:
        return [(basename, b"".join(samples)), (f"{basename}.meta", self._meta(samples, start=0))]


class XSVWriter(_SplitWriter):
    """Writes separated-value shards with a header line; values may not contain the separator or newline."""

    format = "xsv"

    def __init__(self, *, separator: str, newline: str = "\n", **kwargs: Any) -> None:
        if not separator:
            raise ValueError("separator must be a non-empty string")
        self.separator = separator
        self.newline = newline
        super().__init__(**kwargs)

    def _init_columns(self, columns: dict[str, str]) -> None:
        if not columns:
            raise ValueError("columns must name at least one column, e.g. {'text': 'str'}")
        for name, enc in columns.items():
            check_text_encoding(enc)
            self._check_text(name, f"column name {name!r}")
        self._names = sorted(columns)
        self._encodings = [columns[n] for n in self._names]
        self._header = (self.separator.join(self._names) + self.newline).encode("utf-8")

    def _check_text(self, text: str, what: str) -> None:
        if self.separator in text or self.newline in text:
            raise EncodingError(
                f"{what} contains the separator {self.separator!r} or the newline; this format "
                "has no quoting: use JSONWriter or MDSWriter for such text"
            )

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        values = []
        for name, enc in zip(self._names, self._encodings):
            if name not in sample:
                raise EncodingError(f"sample is missing column {name!r} (columns: {', '.join(self._names)})")
            value = sample[name]
            if not text_value_ok(enc, value):
                raise EncodingError(f"column {name!r} ({enc}): {value!r} is not a {enc}")
            text = str(value)
            self._check_text(text, f"column {name!r} value {text!r}")
            values.append(text)
        return (self.separator.join(values) + self.newline).encode("utf-8")

    def get_config(self) -> dict[str, Any]:
        config = {
            "column_encodings": list(self._encodings),
            "column_names": list(self._names),
            "compression": self.compression,
            "format": self.format,
            "hashes": list(self.hashes),
            "newline": self.newline,
            "size_limit": self.size_limit,
            "version": 2,
        }
        if self.format == "xsv":
            config["separator"] = self.separator
        return config

    def _shard_files(self, samples: list[bytes], basename: str) -> list[tuple[str, bytes]]:
        data = self._header + b"".join(samples)
        return [(basename, data), (f"{basename}.meta", self._meta(samples, start=len(self._header)))]


class CSVWriter(XSVWriter):
    """Comma-separated shards (format ``csv``)."""

    format = "csv"

    def __init__(self, *, newline: str = "\n", **kwargs: Any) -> None:
        super().__init__(separator=",", newline=newline, **kwargs)


class TSVWriter(XSVWriter):
    """Tab-separated shards (format ``tsv``)."""

    format = "tsv"

    def __init__(self, *, newline: str = "\n", **kwargs: Any) -> None:
        super().__init__(separator="\t", newline=newline, **kwargs)
