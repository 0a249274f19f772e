"""``MDSWriter``: the writer of MDS shards, the format mosaicml-streaming reads.

Only the format-specific part lives here: compiling the column schema into a sample encoder, the per-shard
config embedded in every shard, and the byte overheads used to cut shards at ``size_limit``. Buffering,
compression, hashing, atomic writes and the index are the shared ``streaming.writers.base.Writer``; the shard
layout itself is ``streaming.format.mds``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streaming.format.mds import MDSSchema, build_mds_shard, mds_config
from streaming.writers.base import Writer

__all__ = ["MDSWriter"]


class MDSWriter(Writer):
    """Writes MDS shards (any column encoding; see ``streaming.format.encodings``)."""

    format = "mds"

    def _init_columns(self, columns: dict[str, str]) -> None:
        self._schema = MDSSchema.from_columns(columns)
        self._encode = self._schema.encoder()
        self._config = mds_config(
            schema=self._schema, compression=self.compression, hashes=self.hashes, size_limit=self.size_limit
        )
        self._config_len = len(json.dumps(self._config, sort_keys=True).encode("utf-8"))

    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        return self._encode(sample)

    def get_config(self) -> dict[str, Any]:
        return dict(self._config)

    def _shard_overhead(self) -> int:
        # sample count word, offsets[0], embedded config
        return 8 + self._config_len

    def _sample_overhead(self) -> int:
        # its offset entry
        return 4

    def _shard_files(self, samples: list[bytes], basename: str) -> list[tuple[str, bytes]]:
        return [(basename, build_mds_shard(self._config, samples))]
