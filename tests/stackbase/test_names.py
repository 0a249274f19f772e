"""`stackbase.names`: one rule for every name that becomes a path component (issue 39: `run_name=..` wrote a
run's files into the caller's folder)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stackbase.names import MAX_NAME_BYTES, NameError_, check_name, child_path, name_problem

BAD = ["", " ", ".", "..", "a/b", "/abs", "a\\b", "..\\x", "a\x00b", "tab\there", "new\nline", "\x7f",
       "x" * (MAX_NAME_BYTES + 1), "é" * 128]  # fmt: skip
GOOD = ["dev", "my-run_1", "pretrain-mpt-tiny-20261126-175501", "a.b", "...", ".hidden", "x" * MAX_NAME_BYTES]


@pytest.mark.parametrize("name", BAD)
def test_names_that_are_not_one_component_are_refused_naming_the_field(name):
    assert name_problem(name) is not None
    with pytest.raises(NameError_, match=r"^run_name=.* use a plain name such as my-run-1"):
        check_name(name, field="run_name")


@pytest.mark.parametrize("name", GOOD)
def test_plain_names_pass_unchanged(name):
    assert check_name(name, field="run_name") == name


def test_a_non_string_is_refused():
    with pytest.raises(NameError_, match="is a int, not a name"):
        check_name(3, field="run_name")


@given(st.text(min_size=0, max_size=300))
def test_an_accepted_name_is_always_exactly_one_child_of_its_parent(tmp_path_factory, name):
    root = tmp_path_factory.getbasetemp() / "root"
    if name_problem(name) is None:
        path = child_path(root, name, field="run_name")
        assert path.parent == root and path.name == name
    else:
        with pytest.raises(NameError_):
            child_path(root, name, field="run_name")
