"""`join_url` keeps a query and fragment at the end; `redact` masks credentials in error messages."""

from __future__ import annotations

import pytest

from streaming.storage.url import join_url, redact


@pytest.mark.parametrize(
    ("base", "parts", "expected"),
    [
        ("https://host/a?sig=x", ("b",), "https://host/a/b?sig=x"),
        ("https://host/a/?sig=x&se=1", ("b", "c"), "https://host/a/b/c?sig=x&se=1"),
        ("https://host/a?sig=x#frag", ("b",), "https://host/a/b?sig=x#frag"),
        ("https://host/a#frag", ("b",), "https://host/a/b#frag"),
        ("https://host?sig=x", ("b",), "https://host/b?sig=x"),
        (
            "azure://container/dir?sv=2024&sig=abc",
            ("index.json",),
            "azure://container/dir/index.json?sv=2024&sig=abc",
        ),
    ],
)
def test_join_url_puts_parts_in_the_path_and_keeps_the_query_last(base, parts, expected):
    assert join_url(base, *parts) == expected


@pytest.mark.parametrize(
    ("base", "parts", "expected"),
    [
        ("s3://bucket", ("key",), "s3://bucket/key"),
        ("s3://bucket/prefix/", ("/split", "index.json"), "s3://bucket/prefix/split/index.json"),
        ("s3://bucket/p", (None, "", "x"), "s3://bucket/p/x"),
        ("/data/mds", ("train",), "/data/mds/train"),
        ("relative/dir/", ("a", "b"), "relative/dir/a/b"),
        ("/data/odd#name?", ("x",), "/data/odd#name?/x"),  # local file names may hold ? and #
        ("file:///tmp/odd?name", ("x",), "file:///tmp/odd?name/x"),
        ("hf://datasets/org/repo", ("train",), "hf://datasets/org/repo/train"),
    ],
)
def test_join_url_paths_and_plain_urls_unchanged(base, parts, expected):
    assert join_url(base, *parts) == expected


def test_redact_masks_user_info_and_signed_query_parameters():
    url = "https://user:tok3n@host:8443/a/b?sig=SECRET&X-Amz-Signature=S2&versionId=7&se=2030#frag"
    out = redact(url)
    assert out == "https://***@host:8443/a/b?sig=***&X-Amz-Signature=***&versionId=7&se=***"
    assert "tok3n" not in out and "SECRET" not in out and "S2" not in out


def test_redact_leaves_clean_urls_and_paths_alone():
    assert redact("s3://bucket/key/file.mds") == "s3://bucket/key/file.mds"
    assert redact("/local/path") == "/local/path"
