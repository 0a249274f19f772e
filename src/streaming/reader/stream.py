"""``Stream``: one dataset (a local folder, a remote URL or both), its mixing weight, and shard preparation.

Design tradeoff: a Stream owns the one step that turns an index entry into a readable local shard,
``prepare_shard``. For a local-only stream it checks the local files and decompresses a compressed shard to
its raw name (temp file + atomic rename, so racing processes and a ``kill -9`` mid-write leave nothing that
breaks a later start); remote streams go through the dataset's node-level ``streaming.cache.ShardCache``.
Weights (``proportion`` / ``repeat`` / ``choose``) are only validated here; the per-epoch counts are computed
by ``streaming.plan.sampling.stream_choose``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from typing import Any

from streaming.cache import fetch_index
from streaming.format.hashing import check_validate_hash
from streaming.format.index import INDEX_FILENAME, DatasetIndex, ShardInfo, load_index
from streaming.format.reader import decompress_shard
from streaming.reader.index_cache import ShardTable, load_shard_table
from streaming.storage import RetryPolicy
from streaming.storage.transfer import DEFAULT_BUDGET
from streaming.storage.url import is_remote, join_url, redact
from streaming.util.safepath import UnsafeFolderError, private_dir, refuse_links

__all__ = ["Stream", "UnsafeCacheDirError", "default_cache_base", "default_local"]


UnsafeCacheDirError = UnsafeFolderError
"""The default cache folder exists but another user could have put files in it."""


def _is_url(path: str) -> bool:
    return "://" in path


def default_cache_base() -> str:
    """The per-user base of default stream caches.

    ``$STREAMING_CACHE`` if set, else ``$XDG_CACHE_HOME/streaming``, else ``~/.cache/streaming``.
    """
    if os.environ.get("STREAMING_CACHE"):
        return os.environ["STREAMING_CACHE"]
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (
        os.path.join(xdg, "streaming")
        if xdg
        else os.path.join(os.path.expanduser("~"), ".cache", "streaming")
    )


def default_local(remote: str, split: str | None = None) -> str:
    """The default cache folder of a remote stream: ``<default_cache_base()>/<hash of remote and split>``.

    The base is created with mode 0700. An existing base or per-stream folder that is owned by another user,
    or writable by group or others, is refused (files planted in it would be trusted).

    Raises:
        UnsafeCacheDirError: Naming the folder and how to avoid it (pass ``local=``).
    """
    base = default_cache_base()
    digest = hashlib.blake2s(json.dumps([remote, split]).encode(), digest_size=16).hexdigest()
    fix = "pass local= (a folder only you can write), set STREAMING_CACHE, or remove the folder"
    what = f"the default cache folder for remote {redact(remote)}:"
    private_dir(base, what=what, fix=fix)
    local = os.path.join(base, digest)
    private_dir(local, what=what, fix=fix, create=False)
    return local


def index_cache_dir() -> str | None:
    """``<default_cache_base()>/indexes`` (made private), or None (no index cache) when it cannot be used."""
    try:
        base = private_dir(default_cache_base(), what="the stream cache folder", fix="set STREAMING_CACHE")
        return private_dir(
            os.path.join(base, "indexes"), what="the index cache folder", fix="set STREAMING_CACHE"
        )
    except (UnsafeFolderError, OSError):
        return None


class Stream:
    """A dataset directory plus how much of it each epoch uses.

    Args:
        remote: Remote location: ``s3://``, ``gs://``, ``azure://``, ``hf://datasets/...``, ``http(s)://`` or
            a path. Shards are downloaded into ``local`` on demand, once per node. A plain path is read in
            place when ``local`` is unset.
        local: Local directory (holding ``index.json`` or ``<split>/index.json``). Default for a URL
            ``remote``: a per-user cache folder, ``$STREAMING_CACHE`` or ``$XDG_CACHE_HOME/streaming`` or
            ``~/.cache/streaming``, then a hash of ``remote`` and ``split`` (see ``default_local``).
        split: Optional sub-directory.
        proportion: Relative weight (all streams relative, or none).
        repeat: Absolute multiplier of the stream's samples per epoch.
        choose: Absolute number of samples per epoch.
        download_retry: At most this many extra attempts per download, for transient errors (default: as many
            as ``download_budget`` allows).
        download_timeout: Seconds allowed per download attempt (default 60).
        download_budget: Seconds a download keeps retrying transient failures, with capped exponential backoff
            (default 300: object stores have outages of minutes).
        validate_hash: How shard files are verified (one re-download on mismatch, then an error): unset, the
            dataset's setting (by default the fastest digest index.json records, if any); an algorithm name;
            ``False`` or ``"off"``: no check.
        keep_zip: Keep compressed files after decompressing (always true when they are the only copy).
    """

    def __init__(
        self,
        *,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        proportion: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        download_retry: int | None = None,
        download_timeout: float | None = None,
        download_budget: float | None = None,
        validate_hash: str | bool | None = None,
        keep_zip: bool | None = None,
    ) -> None:
        if remote is None and local is None:
            raise ValueError("Stream needs remote or local (a dataset directory)")
        given = [
            n
            for n, v in (("proportion", proportion), ("repeat", repeat), ("choose", choose))
            if v is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"Stream: set at most one of proportion, repeat, choose (got {', '.join(given)})"
            )
        for name, v in (("proportion", proportion), ("repeat", repeat), ("choose", choose)):
            if v is not None and v < 0:
                raise ValueError(f"Stream.{name} must be >= 0, got {v}")
        if choose is not None and int(choose) != choose:
            raise ValueError(f"Stream.choose must be an integer, got {choose}")
        self.remote = remote
        if local is None:
            assert remote is not None
            if _is_url(remote):
                local = default_local(remote, split)
            else:
                local = remote
        self.local = local
        self.split = split
        self.proportion = proportion
        self.repeat = repeat
        self.choose = None if choose is None else int(choose)
        self.weights_given: dict[str, Any] = {
            "proportion": proportion,
            "repeat": repeat,
            "choose": self.choose,
        }
        """The weights as passed: a dataset fills in ``proportion``, ``repeat`` and ``choose`` with the values
        it derives (as mosaicml-streaming does), and reads these."""
        self.download_retry = download_retry
        self.download_timeout = download_timeout
        self.download_budget = download_budget
        self.validate_hash = check_validate_hash(validate_hash, name="Stream.validate_hash")
        self.keep_zip = keep_zip
        self._index: DatasetIndex | None = None
        self._table: ShardTable | None = None
        self._fingerprint: str | None = None  # of the loaded table: it hashes the whole index, once

    def apply_defaults(self, **defaults: object) -> None:
        """Fill attributes left unset (``None``) from the dataset-level defaults."""
        for name, value in defaults.items():
            if getattr(self, name, None) is None:
                setattr(self, name, value)

    @property
    def dirname(self) -> str:
        """Directory holding this stream's ``index.json``."""
        return os.path.join(self.local, self.split) if self.split else self.local

    @property
    def is_remote(self) -> bool:
        """True when shards come from a remote copy (a URL, or a path other than ``local``)."""
        return self.remote is not None and (is_remote(self.remote) or self.remote != self.local)

    @property
    def remote_dirname(self) -> str | None:
        """The remote directory holding this stream's ``index.json`` (None for local-only streams)."""
        return join_url(self.remote, self.split) if self.is_remote else None  # type: ignore[arg-type]

    def retry_policy(self) -> RetryPolicy:
        """Download retries and timeout for this stream (defaults: 2 retries, 60 s)."""
        return RetryPolicy(
            retries=None if self.download_retry is None else int(self.download_retry),
            timeout=60.0 if self.download_timeout is None else float(self.download_timeout),
            budget=DEFAULT_BUDGET if self.download_budget is None else float(self.download_budget),
            setting="download_budget",
        )

    def _index_source(self) -> str | None:
        """What errors call the index: its remote URL (downloaded once per node first) or None (the path)."""
        if not self.is_remote:
            return None
        fetch_index(self.remote_dirname, self.dirname, policy=self.retry_policy())  # type: ignore[arg-type]
        url = join_url(self.remote_dirname, INDEX_FILENAME)  # type: ignore[arg-type]
        return f"{redact(url)} (copy at {os.path.join(self.dirname, INDEX_FILENAME)})"

    def index(self) -> DatasetIndex:
        """The parsed ``index.json`` (loaded once; downloaded once per node from a remote stream)."""
        if self._index is None:
            self._index = load_index(self.local, self.split, source=self._index_source())
        return self._index

    def shard_table(self) -> ShardTable:
        """The shards as arrays plus ``ShardInfo`` on demand (``streaming.reader.index_cache``): a large index
        is parsed once per node into a binary cache in ``<default_cache_base()>/indexes``."""
        if self._table is None:
            if self._index is not None:
                self._table = ShardTable.from_index(self._index)
            else:
                self._table = load_shard_table(
                    self.local,
                    self.split,
                    source=self._index_source(),
                    cache_dir=index_cache_dir,
                )
        return self._table

    def fingerprint(self) -> str:
        """A short hash of this stream's index (shard names, sizes, sample counts, hashes) and weights."""
        # resume states ask for it at every checkpoint; the table never changes
        if self._fingerprint is None:
            weights = self.weights_given
            self._fingerprint = self.shard_table().fingerprint(weights)
        return self._fingerprint

    def prepare_shard(self, info: ShardInfo, *, on_tmp: Callable[[str], None] | None = None) -> None:
        """Make one shard of a local-only stream readable (remote streams go through ``ShardCache``).

        If the raw file is missing but the compressed one is present, decompress it to its raw name (atomic;
        ``on_tmp`` is told the temp name of the raw data file before it is written, front to back); when the
        directory is not writable, readers decompress in memory instead.

        Raises:
            FileNotFoundError: neither the raw nor the compressed file is present.
        """
        raw = os.path.join(self.dirname, info.raw_data.basename)
        if os.path.exists(raw):
            return
        if info.zip_data is not None and os.path.exists(os.path.join(self.dirname, info.zip_data.basename)):
            refuse_links(self.dirname, raw, doing="decompress shard file")
            try:
                decompress_shard(self.dirname, info, on_tmp=on_tmp)
            except PermissionError:
                pass  # read-only dataset directory: open_shard decompresses in memory
            return
        want = info.raw_data.basename + (f" or {info.zip_data.basename}" if info.zip_data else "")
        raise FileNotFoundError(
            f"{self.dirname}: shard file {want} is missing (index.json lists it); restore the file or "
            "rebuild the dataset"
        )

    def __repr__(self) -> str:
        return f"Stream(remote={self.remote!r}, local={self.local!r}, split={self.split!r})"
