"""``streaming.base.util``'s size/count helpers follow mosaicml-streaming 0.13.0's rules (issue 41)."""

from __future__ import annotations

import pytest

from streaming.base.util import bytes_to_int, number_abbrev_to_int


@pytest.mark.parametrize(
    ("value", "expected"),
    [("50B", 50), (" 100 kb", 102400), ("1.39gb", int(1.39 * 1024**3)), ("1.11eb", int(1.11 * 1024**6)),
     ("2.0yb", 2 * 1024**8), (35.78, 35), (0.5 * 1024, 512), ("1234", 1234)],
)  # fmt: skip
def test_bytes_to_int_truncates_and_knows_big_suffixes(value: object, expected: int) -> None:
    assert bytes_to_int(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"), [("1.39B", 1_390_000_000), ("3 T", 3 * 10**12), (" 100 k", 100_000), (35.78, 35)]
)
def test_number_abbrev_to_int_truncates(value: object, expected: int) -> None:
    assert number_abbrev_to_int(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["", "12kbb", "27mxb", "79kkb"])
def test_bytes_to_int_bad_value(value: str) -> None:
    with pytest.raises(ValueError, match="^Unsupported value/suffix"):
        bytes_to_int(value)


@pytest.mark.parametrize("value", ["", "79bk", "79bb", "79 b    m", "p 64", "64p"])
def test_number_abbrev_to_int_bad_value(value: str) -> None:
    with pytest.raises(ValueError, match="^Unsupported value/suffix"):
        number_abbrev_to_int(value)
