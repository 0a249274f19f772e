"""Fuzz (issue 39): every value the llm-foundry translator renders reads back unchanged through Hydra's
override parser and OmegaConf: backslashes are not doubled (`C:\\data\\x`) and an escaped `${...}` stays text."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from foundry.compat.llmfoundry.render import experiment_yaml, format_value

PARSER = OverridesParser.create()
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=40) | st.sampled_from(
    [
        "C:\\data\\x",
        "a\\",
        '"',
        "\\\\${x}",
        "${x}",
        "${oc.env:HOME}",
        "\\",
        'say "hi" \\',
        "a b",
        "null",
        "1e3",
    ]
)
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**9), 10**9) | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner, max_size=4)
    ),
    max_leaves=12,
)


def _read_back(rendered: str):
    value = PARSER.parse_override(f"key={rendered}").value()
    return OmegaConf.to_container(OmegaConf.create({"key": value}), resolve=True)["key"]


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("C:\\data\\x", '"C:\\data\\x"'),
        ("${not_an_interpolation}", '"\\${not_an_interpolation}"'),
        ("a\\", '"a\\\\"'),
    ],
)
def test_the_reproductions(value, rendered):
    assert format_value(value) == rendered
    assert _read_back(rendered) == value


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_every_rendered_value_reads_back_unchanged(value):
    assert _read_back(format_value(value)) == value


@settings(max_examples=100, deadline=None)
@given(TEXT)
def test_the_experiment_file_keeps_literal_text_literal(text):
    class _Tr:  # the fields experiment_yaml reads
        choices: dict = {}
        values = {"variables.note": text}
        notes: list = []
        passthrough: list = []
        from_env: dict = {}

    cfg = OmegaConf.create(experiment_yaml(_Tr(), source="x.yaml").split("\n", 3)[-1])
    assert OmegaConf.to_container(cfg, resolve=True)["variables"]["note"] == text
