"""Duration strings: Composer grammar, canonical round trips and conversion to optimizer steps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from foundry.time import Duration, TimeUnit, parse_duration, to_steps


@pytest.mark.parametrize(
    ("text", "value", "unit"),
    [
        ("4800ba", 4800, TimeUnit.BATCH),
        ("1ep", 1, TimeUnit.EPOCH),
        ("2.5e9tok", 2_500_000_000, TimeUnit.TOKEN),
        ("100000000tok", 100_000_000, TimeUnit.TOKEN),
        ("0.01dur", 0.01, TimeUnit.DURATION),
        ("1dur", 1.0, TimeUnit.DURATION),
        ("3e4tok", 30_000, TimeUnit.TOKEN),
        ("512sp", 512, TimeUnit.SAMPLE),
        ("100BA", 100, TimeUnit.BATCH),
        ("  7Ep ", 7, TimeUnit.EPOCH),
        ("2.0ba", 2, TimeUnit.BATCH),
        ("0ba", 0, TimeUnit.BATCH),
        ("100", 100, TimeUnit.BATCH),
        (100, 100, TimeUnit.BATCH),
        (3.0, 3, TimeUnit.BATCH),
    ],
)
def test_parse_valid(text, value, unit):
    d = parse_duration(text)
    assert d == Duration(value, unit)
    assert d.unit is unit


def test_bare_numbers_take_default_unit():
    assert parse_duration(2, TimeUnit.EPOCH) == Duration(2, TimeUnit.EPOCH)
    assert parse_duration("0.5", TimeUnit.DURATION) == Duration(0.5, TimeUnit.DURATION)
    assert parse_duration(Duration(3, TimeUnit.TOKEN)) == Duration(3, TimeUnit.TOKEN)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "expected <number><unit>"),
        ("ba", "expected <number><unit>"),
        ("10sec", "ba, ep, sp, tok, dur"),
        ("10iter", "ba, ep, sp, tok, dur"),
        ("10 steps", "ba, ep, sp, tok, dur"),
        ("1.5ba", "whole number"),
        ("2.5ep", "whole number"),
        ("1e-3tok", "whole number"),
        ("-1ba", ">= 0"),
        ("-0.5dur", ">= 0"),
        ("infba", "finite"),
        ("nandur", "finite"),
        ("xba", "not a number"),
        (1.5, "whole number"),
    ],
)
def test_parse_invalid_names_string_and_units(text, fragment):
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    message = str(info.value)
    assert fragment in message
    assert repr(text) in message


def test_parse_rejects_non_numbers():
    for bad in (True, None, [1]):
        with pytest.raises(ValueError, match="cannot parse duration"):
            parse_duration(bad)


_UNITS = st.sampled_from([u for u in TimeUnit if u is not TimeUnit.DURATION])
_WHOLE = st.integers(min_value=0, max_value=2**53 - 1)
_FRACTION = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(value=_WHOLE, unit=_UNITS, upper=st.booleans())
def test_round_trip_whole_units(value, unit, upper):
    d = Duration(value, unit)
    text = str(d)
    assert text == f"{value}{unit.value}"
    assert parse_duration(text.upper() if upper else text) == d


@given(value=_FRACTION)
def test_round_trip_dur(value):
    d = Duration(value, TimeUnit.DURATION)
    assert parse_duration(str(d)) == d


@given(value=_WHOLE, unit=_UNITS)
def test_scientific_notation_parses_to_same_value(value, unit):
    text = f"{float(value):e}{unit.value}"
    parsed_value = float(f"{float(value):e}")
    if parsed_value.is_integer():
        assert parse_duration(text).value == parsed_value


def test_to_steps_each_unit():
    facts = {"max_steps": 1000, "steps_per_epoch": 250, "samples_per_step": 64, "tokens_per_step": 64 * 2048}
    assert to_steps(parse_duration("4800ba"), **facts) == 4800
    assert to_steps(parse_duration("2ep"), **facts) == 500
    assert to_steps(parse_duration("640sp"), **facts) == 10
    assert (
        to_steps(parse_duration("641sp"), **facts) == 11
    )  # rounds up: never stop short of the data asked for
    assert to_steps(parse_duration("2.5e9tok"), **facts) == math.ceil(2.5e9 / (64 * 2048))
    assert to_steps(parse_duration("0.01dur"), **facts) == 10
    assert to_steps(parse_duration("1dur"), **facts) == 1000
    assert to_steps(parse_duration("0.29dur"), max_steps=100) == 29  # float noise (28.999...) forgiven
    assert to_steps(parse_duration("0.015dur"), max_steps=100) == 1  # otherwise floor, like Composer's int()


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("1ep", "steps_per_epoch"),
        ("10sp", "samples_per_step"),
        ("10tok", "tokens_per_step"),
        ("0.5dur", "max_steps"),
    ],
)
def test_to_steps_names_missing_fact(text, missing):
    with pytest.raises(ValueError, match=f"'{text}'.*{missing} is unknown"):
        to_steps(parse_duration(text))
    assert to_steps(parse_duration("7ba")) == 7  # batches need no facts


def test_to_steps_rejects_zero_divisor():
    with pytest.raises(ValueError, match="samples_per_step must be > 0"):
        to_steps(parse_duration("10sp"), samples_per_step=0)


@given(
    samples=st.integers(min_value=0, max_value=10**12),
    per_step=st.integers(min_value=1, max_value=10**6),
)
def test_sample_steps_are_smallest_cover(samples, per_step):
    steps = to_steps(Duration(samples, TimeUnit.SAMPLE), samples_per_step=per_step)
    assert steps * per_step >= samples
    assert steps == 0 or (steps - 1) * per_step < samples


@given(
    fraction=st.floats(min_value=0, max_value=4, allow_nan=False),
    max_steps=st.integers(min_value=0, max_value=10**9),
)
def test_dur_steps_within_one_of_exact(fraction, max_steps):
    steps = to_steps(Duration(fraction, TimeUnit.DURATION), max_steps=max_steps)
    exact = fraction * max_steps
    assert exact - 1 < steps <= exact + 1e-6 * max(1.0, exact)
