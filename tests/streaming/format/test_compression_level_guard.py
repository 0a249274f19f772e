"""A `Compression` built by hand without a level fails with a message naming the fix (not a TypeError)."""

from __future__ import annotations

import pytest

from streaming.format.compression import Compression, get_compression


@pytest.mark.parametrize("family", ["zstd", "gz", "bz2"])
def test_levelled_family_without_level_names_get_compression(family):
    comp = Compression(spec=family, family=family, level=None, extension=family)
    with pytest.raises(ValueError, match="get_compression"):
        comp.compress(b"abc")


@pytest.mark.parametrize("spec", ["zstd", "gz:1", "bz2:9"])
def test_parsed_compressions_round_trip(spec):
    comp = get_compression(spec)
    assert comp.decompress(comp.compress(b"abc" * 100)) == b"abc" * 100
