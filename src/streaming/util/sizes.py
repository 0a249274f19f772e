"""Human-readable sizes and counts: ``"64mb"`` (binary bytes) and ``"100k"`` (decimal counts).

Byte sizes use 1024-based suffixes (``kb``, ``mb``, ``gb``, ``tb``, ``pb``), as mosaicml-streaming's
``size_limit`` and ``cache_limit`` do; sample counts (``epoch_size``) use decimal suffixes
(``k``, ``m``, ``b``, ``t``). Both accept plain integers and digit strings.
"""

from __future__ import annotations

import re

__all__ = ["SizeLimitExceeded", "format_bytes", "parse_bytes", "parse_count"]


class SizeLimitExceeded(ValueError):
    """Bytes written (a download, a decompression) went past the size they were allowed: the writer stopped at
    once, before writing more than ``limit`` bytes. Permanent: retrying gets the same bytes.

    Attributes:
        limit: The bytes allowed (what index.json declares, or the cache limit).
        what: What was being written (a URL, a compressed file).
    """

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what}: more than {limit} bytes (stopped there)")
        self.what = what
        self.limit = limit


_BYTE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40, "pb": 1 << 50}
_COUNT_UNITS = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?"


def parse_bytes(value: int | str, *, name: str = "size") -> int:
    """Parse a byte size: an int, digits, or a number with a binary suffix (``"64mb"`` == 64 * 2**20).

    Args:
        value: The size.
        name: The argument name, used in error messages.

    Returns:
        The size in bytes.

    Raises:
        ValueError: If the value is negative, not integral, or has an unknown suffix.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or a size string like '64mb', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an int or a size string like '64mb', got {value!r}")
    match = re.fullmatch(_NUMBER + r"\s*([kmgtp]?b?)", value.strip().lower())
    if match is None:
        raise ValueError(
            f"{name}={value!r} is not a size: use bytes (e.g. 1048576) or a number with one of the suffixes "
            f"{', '.join(_BYTE_UNITS)} (e.g. '64mb')"
        )
    number, exp, unit = match.groups()
    unit = unit if unit.endswith("b") or not unit else unit + "b"
    unit = unit or "b"
    total = float(number) * (10 ** int(exp) if exp else 1) * _BYTE_UNITS[unit]
    if total != int(total):
        raise ValueError(f"{name}={value!r} is not a whole number of bytes")
    return int(total)


def parse_count(value: int | str, *, name: str = "count") -> int:
    """Parse a sample count: an int, digits, or a decimal suffix (``"100k"`` == 100_000, ``"2b"`` == 2e9).

    Raises:
        ValueError: If the value is negative, fractional, or has an unknown suffix.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or a count string like '100k', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        return value
    if not isinstance(value, str):
        raise ValueError(f"{name} must be an int or a count string like '100k', got {value!r}")
    match = re.fullmatch(_NUMBER + r"\s*([kmbt]?)", value.strip().lower())
    if match is None:
        raise ValueError(
            f"{name}={value!r} is not a count: use an integer or a number with a "
            "suffix k, m, b or t (e.g. '100k')"
        )
    number, exp, unit = match.groups()
    total = float(number) * (10 ** int(exp) if exp else 1) * _COUNT_UNITS[unit]
    if total != int(total):
        raise ValueError(f"{name}={value!r} is not a whole number")
    return int(total)


def format_bytes(num: int) -> str:
    """Format a byte count for humans with binary units, e.g. ``format_bytes(3 << 20) == '3.0 MiB'``."""
    size = float(num)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} PiB"
