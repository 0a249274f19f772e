"""Training durations written as Composer/llm-foundry time strings
(``4800ba``, ``1ep``, ``2.5e9tok``, ``0.01dur``).

Design note: the trainer counts exactly one thing, optimizer steps. A :class:`Duration` is only a parsed
string; :func:`to_steps` turns it into a step count once, from the run's facts (max steps, steps per epoch,
samples and tokens per step). Schedules and intervals then work purely in integer steps, which keeps them
pure functions and makes mixed units legal (a ``100ba`` warmup under a ``2.5e9tok`` run is fine here, while
Composer rejects it). The price is that sample/token durations are rounded *up* to whole steps, so a run
never stops before it has seen the requested amount of data.

Grammar (Composer's, minus ``iter`` and ``sec``): ``^(<number>)(ba|ep|sp|tok|dur)$``, case-insensitive,
surrounding whitespace ignored. The number is parsed as a float (``3e4tok`` works) and must be a finite,
non-negative whole number for every unit except ``dur`` (a fraction of the run's total length).

Bare numbers (``100``, ``"100"``) mean **optimizer steps** (``ba``) by default, unlike Composer, where a bare
integer means epochs: in this repo every count without a unit is a step count (``max_steps``,
``eval_interval_steps``). Callers porting a Composer field whose bare integers meant epochs pass
``default_unit=TimeUnit.EPOCH``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["Duration", "TimeUnit", "parse_duration", "to_steps"]


class TimeUnit(str, Enum):
    """Units a :class:`Duration` can be written in; the value is the suffix used in time strings."""

    BATCH = "ba"
    """Optimizer steps (Composer's "batches")."""
    EPOCH = "ep"
    """Passes over the training set; needs ``steps_per_epoch`` to convert."""
    SAMPLE = "sp"
    """Training samples (rows); needs ``samples_per_step`` to convert."""
    TOKEN = "tok"
    """Training tokens; needs ``tokens_per_step`` to convert."""
    DURATION = "dur"
    """Fraction of the whole run (``1dur`` = ``max_steps``); needs ``max_steps`` to convert."""


_VALID_UNITS = ", ".join(u.value for u in TimeUnit)
_PATTERN = re.compile(r"^(.+?)(ba|ep|sp|tok|dur)$", re.IGNORECASE)


@dataclass(frozen=True)
class Duration:
    """A length of training time: a non-negative ``value`` in a :class:`TimeUnit`.

    Args:
        value: The amount. Must be finite and non-negative, and a whole number unless ``unit`` is ``dur``.
        unit: The unit of ``value``.

    Raises:
        ValueError: If ``value`` is negative, not finite, or fractional for a unit other than ``dur``.
    """

    value: float
    unit: TimeUnit

    def __post_init__(self) -> None:
        unit = TimeUnit(self.unit)
        object.__setattr__(self, "unit", unit)
        value = float(self.value)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"duration value must be a finite number >= 0, got {self.value!r}{unit.value}")
        if unit is not TimeUnit.DURATION and not value.is_integer():
            raise ValueError(
                f"duration {self.value!r}{unit.value} must be a whole number of {unit.value}; "
                "only 'dur' (fraction of the run) takes fractional values"
            )
        object.__setattr__(self, "value", value)

    def __str__(self) -> str:
        """The canonical time string, e.g. ``100ba``, ``2500000000tok``, ``0.01dur``;
        parses back to ``self``."""
        if self.value.is_integer() and abs(self.value) < 2**53:
            return f"{int(self.value)}{self.unit.value}"
        return f"{self.value!r}{self.unit.value}"


def parse_duration(s: str | int | float | Duration, default_unit: TimeUnit = TimeUnit.BATCH) -> Duration:
    """Parse a Composer-style time string into a :class:`Duration`.

    Args:
        s: A time string such as ``"4800ba"``, ``"1ep"``, ``"2.5e9tok"``, ``"0.01dur"`` (case-insensitive), or
            a bare number (int, float or numeric string) meaning ``default_unit``. A ``Duration`` passes
            through.
        default_unit: Unit of bare numbers; optimizer steps unless the caller says otherwise (Composer
            used epochs, see the module docstring).

    Returns:
        The parsed duration.

    Raises:
        ValueError: If the string has no valid unit or number; the message names the string and the units.
    """
    if isinstance(s, Duration):
        return s
    if isinstance(s, bool) or not isinstance(s, (str, int, float)):
        raise ValueError(f"cannot parse duration from {s!r} (a {type(s).__name__}); {_hint()}")
    if isinstance(s, (int, float)):
        return _make(s, TimeUnit(default_unit), original=s)
    text = s.strip()
    match = _PATTERN.match(text)
    if match is None:
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"invalid duration {s!r}: {_hint()}") from None
        return _make(number, TimeUnit(default_unit), original=s)
    number_text, unit_text = match.groups()
    try:
        number = float(number_text)
    except ValueError:
        raise ValueError(f"invalid duration {s!r}: {number_text!r} is not a number; {_hint()}") from None
    return _make(number, TimeUnit(unit_text.lower()), original=s)


def _make(number: float, unit: TimeUnit, *, original: object) -> Duration:
    try:
        return Duration(number, unit)
    except ValueError as e:
        raise ValueError(f"invalid duration {original!r}: {e}") from None


def _hint() -> str:
    return (
        f"expected <number><unit> with unit one of {_VALID_UNITS} "
        "(e.g. '4800ba', '1ep', '2.5e9tok', '0.01dur'), or a bare number of optimizer steps"
    )


def to_steps(
    d: Duration,
    *,
    max_steps: int | None = None,
    steps_per_epoch: int | None = None,
    samples_per_step: int | None = None,
    tokens_per_step: int | None = None,
) -> int:
    """Convert a duration into a number of optimizer steps.

    Rounding: ``sp`` and ``tok`` round up (the smallest step count that covers the amount); ``dur`` rounds
    down like Composer's ``int(value * max_duration)``, forgiving float noise
    (``0.29dur`` of 100 steps is 29).

    Args:
        d: The duration.
        max_steps: Total optimizer steps of the run; needed for ``dur``.
        steps_per_epoch: Optimizer steps in one epoch; needed for ``ep``.
        samples_per_step: Samples consumed per optimizer step (global batch size); needed for ``sp``.
        tokens_per_step: Tokens consumed per optimizer step; needed for ``tok``.

    Returns:
        The step count (>= 0).

    Raises:
        ValueError: If the fact the unit needs is missing or not positive; the message names it.
    """
    unit = d.unit
    if unit is TimeUnit.BATCH:
        return int(d.value)
    if unit is TimeUnit.EPOCH:
        return int(d.value) * _need(steps_per_epoch, "steps_per_epoch", d, allow_zero=False)
    if unit is TimeUnit.SAMPLE:
        return _ceil_div(int(d.value), _need(samples_per_step, "samples_per_step", d, allow_zero=False))
    if unit is TimeUnit.TOKEN:
        return _ceil_div(int(d.value), _need(tokens_per_step, "tokens_per_step", d, allow_zero=False))
    total = _need(max_steps, "max_steps", d, allow_zero=True)
    exact = d.value * total
    nearest = round(exact)
    if abs(exact - nearest) <= 1e-9 * max(1.0, exact):
        return int(nearest)
    return math.floor(exact)


def _need(fact: int | None, name: str, d: Duration, *, allow_zero: bool) -> int:
    if fact is None:
        raise ValueError(f"cannot convert duration '{d}' to steps: {name} is unknown for this run")
    if fact < 0 or (fact == 0 and not allow_zero):
        raise ValueError(f"cannot convert duration '{d}' to steps: {name} must be > 0, got {fact}")
    return int(fact)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
