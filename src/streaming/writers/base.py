"""The machinery every shard writer shares: ``Writer`` (``MDSWriter`` is in ``streaming.writers.mds``, the
line formats in ``streaming.writers.text``).

Samples are encoded as they arrive and buffered per shard (a shard is at most ``size_limit`` bytes); a full
shard is handed to a thread pool that assembles, compresses, hashes and writes it under a temporary name
before an atomic rename, so encoding the next shard overlaps with compressing the last one and no reader ever
sees a half-written file. ``index.json`` is written (atomically) only when the writer finishes cleanly: a
``with`` block that raises publishes nothing new. Appending continues the shard numbering of an existing
dataset. Remote outputs plug in through ``streaming.writers.output`` (the storage layer), which receives each
finished file and the index, in that order.
"""

from __future__ import annotations

import os
import shutil
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from tqdm import tqdm

from streaming.format.compression import get_compression
from streaming.format.hashing import check_hashes, hash_bytes
from streaming.format.index import (
    INDEX_FILENAME,
    DatasetIndex,
    FileInfo,
    ShardInfo,
    load_index,
    write_index,
)
from streaming.format.mds import MAX_SHARD_BYTES
from streaming.storage.url import redact
from streaming.util.sizes import parse_bytes
from streaming.writers.output import Output, resolve_output

__all__ = ["DEFAULT_SIZE_LIMIT", "Writer", "WriterArgumentError", "shard_basename"]

DEFAULT_SIZE_LIMIT = 1 << 26


def shard_basename(index: int, fmt: str) -> str:
    """``shard.<index:05>.<fmt>`` (the number simply grows past 99999)."""
    return f"shard.{index:05}.{fmt}"


class WriterArgumentError(TypeError, ValueError):
    """A writer argument that does not exist (a ``ValueError`` as in mosaicml-streaming, a ``TypeError`` as
    Python reports unknown keywords)."""


class Writer(ABC):
    """Common writer machinery. Subclasses define the sample encoding and the shard file layout.

    Args:
        out: Output location: a local directory, a remote URL, or ``(local_dir, remote_url)``.
        columns: Column name to encoding.
        compression: ``None`` or a compression string such as ``"zstd"``, ``"zstd:7"``, ``"gz:9"``.
        hashes: Sorted list of hash algorithms recorded for every file (e.g. ``["sha1", "xxh64"]``).
        size_limit: Shard size cap in bytes or a string like ``"64mb"`` (binary units); ``None``/0 means
            unlimited (still below the 4 GiB the uint32 offsets can address).
        keep_local: With a remote output, keep the local copies after upload.
        exist_ok: If the local directory exists, delete it first (mosaicml-streaming semantics).
        append: Add shards to an existing dataset at ``out``: numbering continues after its last shard and
            ``index.json`` is rewritten atomically when this writer finishes.
        progress_bar: Show a progress bar of samples written.
        max_workers: Threads that compress, hash, write (and upload) finished shards.
        retry: Extra attempts for each upload (remote outputs).
    """

    format: str = ""

    def __init__(
        self,
        *,
        out: str | tuple[str, str],
        columns: Mapping[str, str],
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = DEFAULT_SIZE_LIMIT,
        keep_local: bool = False,
        exist_ok: bool = False,
        append: bool = False,
        progress_bar: bool = False,
        max_workers: int | None = None,
        retry: int = 2,
        **unknown: object,
    ) -> None:
        if unknown:
            raise WriterArgumentError(
                f"Invalid Writer argument(s): {type(self).__name__} got unknown argument(s) "
                f"{sorted(unknown)}; valid: out, columns, compression, hashes, size_limit, keep_local, "
                "exist_ok, append, progress_bar, max_workers, retry"
            )
        self._compression = get_compression(compression) if compression else None
        self.compression = compression
        self.hashes = list(hashes or [])
        check_hashes(self.hashes)
        limit = parse_bytes(size_limit, name="size_limit") if size_limit is not None else 0
        if limit > MAX_SHARD_BYTES:
            raise ValueError(
                f"`size_limit` must be less than {MAX_SHARD_BYTES} bytes: size_limit={size_limit!r} is "
                f"{limit} bytes; shards must stay below 4 GiB because shard offsets "
                "are uint32: use e.g. '64mb' (the default) up to '4095mb'"
            )
        self.size_limit = limit or None
        if exist_ok and append:
            raise ValueError(
                "exist_ok=True deletes the existing dataset and append=True extends it: pick one"
            )
        self._output: Output = resolve_output(
            out, keep_local=keep_local, retry=retry, max_workers=max_workers
        )
        self.local = self._output.local
        self._prepare_directory(exist_ok=exist_ok, append=append)
        self._columns = dict(columns)
        self._init_columns(self._columns)
        self._existing: list[ShardInfo] = self._load_existing() if append else []
        self._next_shard = self._next_shard_index(self._existing)
        self._samples: list[bytes] = []
        self._shard_bytes = self._shard_overhead()
        self._pending: deque[Future[ShardInfo]] = deque()
        self._done: list[ShardInfo] = []
        self._pool = ThreadPoolExecutor(max_workers=max_workers or min(8, (os.cpu_count() or 1) + 2))
        # bound the memory held by queued shards
        self._max_pending = max(2, self._pool._max_workers)
        self._progress = tqdm(desc=f"writing {self.local}", unit=" samples", disable=not progress_bar)
        self._finished = False

    # ------------------------------------------------------------------ subclass hooks

    @abstractmethod
    def _init_columns(self, columns: dict[str, str]) -> None:
        """Validate the columns and compile the sample encoder."""

    @abstractmethod
    def encode_sample(self, sample: Mapping[str, Any]) -> bytes:
        """Encode one sample to the bytes stored in the shard."""

    @abstractmethod
    def get_config(self) -> dict[str, Any]:
        """The writer config stored in each shard object."""

    @abstractmethod
    def _shard_files(self, samples: list[bytes], basename: str) -> list[tuple[str, bytes]]:
        """The raw files of one shard: ``[(basename, bytes)]``, data first, then ``.meta`` if split."""

    def _shard_overhead(self) -> int:
        return 0

    def _sample_overhead(self) -> int:
        return 0

    # ------------------------------------------------------------------ public API

    def write(self, sample: Mapping[str, Any]) -> None:
        """Encode and buffer one sample, starting a new shard first if it would not fit.

        Raises:
            EncodingError: If a value does not fit its column (the message names the column).
            ValueError: If the shard would reach the 4 GiB format limit.
        """
        if self._finished:
            raise RuntimeError("this writer is finished; create a new writer (append=True) to add samples")
        self._raise_failed_upload()
        data = self.encode_sample(sample)
        size = len(data) + self._sample_overhead()
        if self._samples and self.size_limit and self.size_limit < self._shard_bytes + size:
            self.flush_shard()
        if self._shard_bytes + size > MAX_SHARD_BYTES:
            if self._samples:
                self.flush_shard()
            if self._shard_bytes + size > MAX_SHARD_BYTES:
                raise ValueError(
                    f"a sample of {len(data)} bytes cannot fit in a shard below the 4 GiB format limit"
                )
        self._samples.append(data)
        self._shard_bytes += size
        self._progress.update(1)

    def flush_shard(self) -> None:
        """Close the current shard (if it has samples) and queue it for writing."""
        if not self._samples:
            return
        samples, index = self._samples, self._next_shard
        self._samples, self._shard_bytes = [], self._shard_overhead()
        self._next_shard += 1
        self._pending.append(self._pool.submit(self._write_shard, samples, index))
        while len(self._pending) > self._max_pending:
            self._done.append(self._pending.popleft().result())

    def finish(self) -> None:
        """Flush the last shard, wait for every file, then publish ``index.json`` (local, then remote)."""
        if self._finished:
            return
        self._finished = True
        try:
            self.flush_shard()
            while self._pending:
                self._done.append(self._pending.popleft().result())
            index = DatasetIndex(
                path=os.path.join(self.local, INDEX_FILENAME), shards=self._existing + self._done
            )
            write_index(index, index.path)
            self._output.publish_index(INDEX_FILENAME)
        finally:
            self._pool.shutdown(wait=True)
            self._progress.close()
        self._output.close()

    def abort(self) -> None:
        """Stop without publishing: the index is left as it was (shards already written stay on disk)."""
        self._finished = True
        for fut in self._pending:
            fut.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._progress.close()
        self._output.abort()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()

    # ------------------------------------------------------------------ internals

    def _raise_failed_upload(self) -> None:
        for fut in self._pending:
            if fut.done() and fut.exception() is not None:
                self.abort()
                raise RuntimeError(f"writing a shard failed: {fut.exception()}") from fut.exception()

    def _prepare_directory(self, *, exist_ok: bool, append: bool) -> None:
        local = self.local
        if os.path.isdir(local) and os.listdir(local) and not append:
            if not exist_ok:
                raise FileExistsError(
                    f"Directory is not empty: {local}; pass exist_ok=True to replace it or "
                    "append=True to add shards to the dataset there"
                )
            shutil.rmtree(local)
        os.makedirs(local, exist_ok=True)
        remote = getattr(self._output, "remote", None)
        if remote is not None and not exist_ok and self._output.fetch_index(INDEX_FILENAME) and not append:
            os.remove(os.path.join(local, INDEX_FILENAME))
            raise FileExistsError(
                f"a dataset already exists at {redact(remote)}: pass exist_ok=True to overwrite it or "
                "append=True to add shards to it"
            )

    def _load_existing(self) -> list[ShardInfo]:
        if not os.path.exists(os.path.join(self.local, INDEX_FILENAME)):
            return []
        shards = load_index(self.local).shards
        for i, shard in enumerate(shards):
            if shard.format != self.format:
                raise ValueError(
                    f"cannot append {self.format} shards to {self.local}: its shard {i} is {shard.format}"
                )
            existing = dict(zip(shard.column_names, shard.column_encodings))
            if existing != self._columns:
                raise ValueError(
                    f"cannot append to {self.local}: its columns are {existing}, "
                    f"this writer's are {self._columns}"
                )
        return shards

    def _next_shard_index(self, shards: list[ShardInfo]) -> int:
        numbers = [-1]
        for shard in shards:
            parts = os.path.basename(shard.raw_data.basename).split(".")
            if len(parts) >= 3 and parts[0] == "shard" and parts[1].isdigit():
                numbers.append(int(parts[1]))
        return max(numbers) + 1 if shards else 0

    def _file_info(self, basename: str, data: bytes | memoryview) -> FileInfo:
        return FileInfo(
            basename=basename, bytes=len(data), hashes={algo: hash_bytes(algo, data) for algo in self.hashes}
        )

    def _store(self, basename: str, data: bytes) -> None:
        path = os.path.join(self.local, basename)
        tmp = os.path.join(self.local, f".{basename}.tmp-{os.getpid()}")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        self._output.publish_file(basename)

    def _write_shard(self, samples: list[bytes], index: int) -> ShardInfo:
        raw_name = shard_basename(index, self.format)
        files = self._shard_files(samples, raw_name)
        infos: list[tuple[FileInfo, FileInfo | None]] = []
        for basename, data in files:
            raw_info = self._file_info(basename, data)
            if self._compression is None:
                self._store(basename, data)
                infos.append((raw_info, None))
            else:
                packed = self._compression.compress(data)
                zip_name = f"{basename}.{self._compression.extension}"
                self._store(zip_name, packed)
                infos.append((raw_info, self._file_info(zip_name, packed)))
        (raw_data, zip_data), *meta = infos
        return ShardInfo(
            format=self.format,
            samples=len(samples),
            raw_data=raw_data,
            zip_data=zip_data,
            config=self.get_config(),
            raw_meta=meta[0][0] if meta else None,
            zip_meta=meta[0][1] if meta else None,
        )
