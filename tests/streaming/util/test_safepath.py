"""The path-safety rule for untrusted names (index.json basenames, manifests, listings)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.util.safepath import UnsafePathError, is_safe_relpath, safe_join, safe_relpath

BAD = [
    "",
    "../x.mds",
    "../../x.mds",
    "a/../../x.mds",
    "a/../b",
    "/etc/passwd",
    "//server/share/x",
    "C:x.mds",
    "c:/windows/x",
    "a\\..\\x",
    "..\\x",
    "a/\x00b",
    "s3://bucket/x",
    ".",
    "./",
    "..",
]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_naming_file_field_and_value(name):
    with pytest.raises(UnsafePathError) as err:
        safe_relpath(name, source="/data/index.json", field="shards[0].raw_data.basename")
    msg = str(err.value)
    assert "/data/index.json" in msg and "shards[0].raw_data.basename" in msg and repr(name) in msg


@pytest.mark.parametrize("name", [None, 3, b"x"])
def test_non_strings_are_refused(name):
    assert not is_safe_relpath(name)


@pytest.mark.parametrize(
    ("name", "norm"),
    [
        ("shard.00000.mds", "shard.00000.mds"),
        ("a/b.mds", "a/b.mds"),
        ("./a//b.mds", "a/b.mds"),
        ("a..b", "a..b"),
    ],
)
def test_good_names_are_normalised(name, norm):
    assert safe_relpath(name, source="f", field="x") == norm


def test_safe_join_stays_under_root(tmp_path):
    assert safe_join(tmp_path, "a/b", source="f", field="x") == os.path.join(tmp_path, "a/b")
    with pytest.raises(UnsafePathError):
        safe_join(tmp_path, "../x", source="f", field="x")


@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "/", "\\", "C:", "x.mds"]), max_size=6))
def test_whatever_is_accepted_stays_under_root(parts):
    name = "/".join(parts)
    root = "/srv/cache/root"
    try:
        path = safe_join(root, name, source="f", field="x")
    except UnsafePathError:
        return
    assert os.path.commonpath([root, os.path.abspath(path)]) == root
    assert os.path.abspath(path) != root


def test_private_dir_creates_0700_and_refuses_what_others_could_plant_into(tmp_path):
    import stat

    from streaming.util.safepath import UnsafeFolderError, private_dir

    made = private_dir(tmp_path / "a" / "b", what="cache folder", fix="pass local=")
    assert stat.S_IMODE(os.stat(made).st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(
        UnsafeFolderError, match=r"cache folder .*shared is writable by group or other users.*Pass"
    ):
        private_dir(shared, what="cache folder", fix="pass local=")
    link = tmp_path / "link"
    link.symlink_to(made)
    with pytest.raises(UnsafeFolderError, match="not a plain directory"):
        private_dir(link, what="cache folder", fix="pass local=")
    assert private_dir(tmp_path / "absent", what="x", fix="y", create=False) == str(tmp_path / "absent")


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("a" * 256, "a component is longer than 255 bytes"),  # the fuzz suite's: ENAMETOOLONG when opened
        ("sub/" + "é" * 128, "a component is longer than 255 bytes"),
        ("x\ud800.mds", "not valid Unicode"),  # JSON's "\ud800": UnicodeEncodeError when opened
    ],
)
def test_names_the_file_system_cannot_hold_are_refused(name, problem):
    with pytest.raises(UnsafePathError, match=problem) as err:
        safe_relpath(name, source="/data/index.json", field="shards[0].raw_data.basename")
    assert len(str(err.value)) < 700  # the value is cut in the message
    assert safe_relpath("a" * 255, source="f", field="x") == "a" * 255
