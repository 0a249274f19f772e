"""What a translation produces (`Translation`, `Note`) and the builder the sections write into (`Out`).

Design note: kept apart from `translate.py` and `sections.py` so both can use it without importing each
other. `duration` is here because both convert Composer times (a bare integer means epochs there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from foundry.compat.llmfoundry.keys import IGNORED, REFUSED, TRANSLATED, Rule
from foundry.errors import ConfigError
from foundry.time import TimeUnit, parse_duration

__all__ = ["Note", "Out", "Translation", "duration"]


@dataclass(frozen=True)
class Note:
    """A key that is not carried over: `ignored` (no effect here) or `refused`
    (the run goes on without it)."""

    key: str
    status: str
    reason: str

    def line(self) -> str:
        return f"{self.status}: {self.key}: {self.reason}"


@dataclass
class Translation:
    """What an llm-foundry YAML becomes: Hydra group choices, then dotted key values, then the user's own."""

    choices: dict[str, Any] = field(default_factory=dict)
    """Group -> option (`model` -> `_mpt`; a list for several loggers); keys starting `+` add a group."""
    values: dict[str, Any] = field(default_factory=dict)
    """Dotted key -> plain value, in the order the YAML gave them."""
    notes: list[Note] = field(default_factory=list)
    passthrough: list[str] = field(default_factory=list)
    """`train.py` overrides given by the user after the YAML (applied last, so they win)."""
    from_env: dict[str, str] = field(default_factory=dict)
    """String values the YAML took from the environment -> their `${oc.env:...}` text (printed instead)."""


class Out:
    """The translation being built: the sections write into it."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tr = Translation()

    # `option`: an option name or a list of them
    def choose(self, group: str, option: Any) -> None:
        self.tr.choices[group] = option

    # `value`: any plain YAML value
    def set(self, key: str, value: Any) -> None:
        self.tr.values[key] = value

    def note(self, key: str, rule: Rule) -> None:
        """Records an ignored or refused key with the table's reason (a translated rule is a caller's bug)."""
        if rule.status == TRANSLATED:
            raise AssertionError(f"{key} is translated ({rule.here}), not a note")
        self.tr.notes.append(Note(key, rule.status, rule.note))

    def refuse(self, key: str, reason: str) -> None:
        self.tr.notes.append(Note(key, REFUSED, reason))

    def ignore(self, key: str, reason: str) -> None:
        self.tr.notes.append(Note(key, IGNORED, reason))

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.source}: {key}: {message}")


def duration(out: Out, key: str, value: Any) -> str:
    """A Composer time (`4800ba`, `1ep`, or a bare int meaning epochs) as our duration string."""
    try:
        d = parse_duration(value, default_unit=TimeUnit.EPOCH)
    except ValueError as err:
        raise out.fail(key, f"{err} (units here: ba, ep, sp, tok, dur)") from None
    number = int(d.value) if float(d.value).is_integer() else d.value
    return f"{number}{d.unit.value}"
