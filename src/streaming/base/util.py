"""``streaming.base.util`` (mosaicml-streaming's path): the helpers user code calls.

``bytes_to_int`` and ``number_abbrev_to_int`` follow mosaicml-streaming's rules, which are looser than this
library's own parsers (``streaming.util.sizes``): a float or a fractional size is truncated to an int, and
byte suffixes go up to ``yb``. An unreadable value raises ``ValueError`` starting with upstream's
``Unsupported value/suffix`` wording.

``clean_stale_shared_memory`` is a no-op: this library keeps no shared memory between runs (caches coordinate
through file locks, which the kernel drops with their holder), so there is never any to clean.
"""

from __future__ import annotations

import re

from streaming.writers.merge import merge_index

__all__ = ["bytes_to_int", "clean_stale_shared_memory", "get_list_arg", "merge_index", "number_abbrev_to_int"]

_BYTE_SUFFIXES = {s: 1024 ** (i + 1) for i, s in enumerate(("kb", "mb", "gb", "tb", "pb", "eb", "zb", "yb"))}
_COUNT_SUFFIXES = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def get_list_arg(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; empty text -> ``[]``."""
    return text.split(",") if text else []


def _abbrev_to_int(value: int | float | str, suffixes: dict[str, int], plain_b: bool) -> int:
    """A number with an optional suffix (``suffixes``), truncated to an int; ``plain_b`` accepts ``"50b"``."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    text = str(value).strip().lower()
    if re.fullmatch(r"\d+", text):
        return int(text)
    if plain_b and re.fullmatch(r"\d+b", text):
        return int(text[:-1])
    for suffix, unit in suffixes.items():
        head = text.removesuffix(suffix)
        if head != text and re.fullmatch(r"\s*(\d+(\.\d*)?|\.\d+)\s*", head):
            return int(float(head) * unit)
    allowed = (["b"] if plain_b else []) + list(suffixes)
    example = "64mb" if plain_b else "100k"
    raise ValueError(
        f"Unsupported value/suffix {text}. Supported suffix are {allowed}. "
        f"(got {value!r}: write a number, optionally followed by one of these suffixes, e.g. {example!r})"
    )


def bytes_to_int(bytes_str: int | float | str) -> int:
    """A byte size (``"64mb"``, ``"1.5gb"``, ``1234``) in bytes, 1024-based, truncated to an int."""
    return _abbrev_to_int(bytes_str, _BYTE_SUFFIXES, plain_b=True)


def number_abbrev_to_int(abbrev_str: int | float | str) -> int:
    """A count (``"100k"``, ``"1.5m"``, ``1234``) as an int, 1000-based, truncated."""
    return _abbrev_to_int(abbrev_str, _COUNT_SUFFIXES, plain_b=False)


def clean_stale_shared_memory() -> None:
    """Nothing to do: no shared memory outlives a run here."""
