"""The fuzz runner itself (issue 39): an entry point that misbehaves in every way the contract names is caught
each time, so a suite that passes has checked something (a broken guard would pass everything)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import strategies as st

from tests.fuzz.harness import SECRET_ENV, fuzz

ENTRY = "the runner's own check"
ALLOWED = (ValueError, FileNotFoundError)
SHORT_EXAMPLES = 1
PER_EXAMPLE_S = 3
MEMORY_MB = 256
BEHAVIOURS = [
    "ok",
    "refuse",
    "refuse-unnamed",
    "write-outside",
    "run-code",
    "print-secret",
    "print-traceback",
    "key-error",
    "memory",
    "hang",  # last: a hang ends the loop
]


def prepare(work: Path) -> None:
    return None


def cases() -> st.SearchStrategy[str]:
    return st.just("ok")


def EXAMPLES() -> list[str]:
    return BEHAVIOURS


def build(case: str, folder: Path, base: None) -> str:
    return case


def attempt(case: str, folder: Path) -> None:
    import time

    if case == "refuse":
        raise ValueError(f"{folder}/x.json: not valid")
    if case == "refuse-unnamed":
        raise ValueError("something is wrong")
    if case == "write-outside":
        (folder.parent / "escaped.txt").write_text("x")
    if case == "run-code":
        os.system("true")
    if case == "print-secret":
        print(f"the token is {os.environ[SECRET_ENV]}")
    if case == "print-traceback":
        print("Traceback (most recent call last):\n  oops", file=sys.stderr)
    if case == "key-error":
        raise KeyError("shards")
    if case == "memory":
        bytearray(4 << 30)
    if case == "hang":
        time.sleep(60)


def test_every_kind_of_finding_is_caught(tmp_path):
    with pytest.raises(AssertionError) as err:
        fuzz(__file__, tmp_path)
    text = str(err.value)
    # accepted: ok, and the four that misbehave without raising (their findings come from the guard and output)
    assert "10 inputs (5 accepted, 1 refused with one line), 8 findings" in text, text
    for needle in (
        "error naming no file or field: ValueError",
        f"escaped its folder or ran code: - at wrote (1x)\n  message: wrote {tmp_path}/work/in-",
        "escaped its folder or ran code: - at os.system (1x)\n  message: os.system",
        "printed the secret",
        "printed a traceback",
        "raw traceback: KeyError",
        "raw traceback: MemoryError",
        "hang: Hang",
    ):
        assert needle in text, (needle, text)
    assert not any(p.name == "escaped.txt" for p in (tmp_path / "work").glob("*")), (
        "only recorded, not prevented"
    )
