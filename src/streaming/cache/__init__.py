"""The node-level shard cache of remote streams: ``ShardCache`` and the pieces it coordinates through.

- ``shards``: ``ShardCache`` (download, verify, decompress, pin, evict), ``CachedShard``, ``fetch_index``.
- ``locks``: ``fcntl`` file locks in the cache folder's lock folder (a hidden sibling, ``locks.lock_dir``)
  (released by the kernel when a process dies).
- ``pins``: the pins one process holds on shards (counted; released with the last view of a mapped file).
- ``demand``: each reader's upcoming shards, published for the others' evictions (cross-job next use).
- ``space``: disk accounting (files on disk plus reservations, both read from the disk) and eviction targets.
- ``verify``: hash checks of cached files, the verdict remembered on disk.

Design note: every piece of shared state is a file in the cache folder, so processes and jobs sharing it need
no shared memory and a ``kill -9`` leaves nothing to clean up. The names readers use are re-exported here.
"""

from streaming.cache.shards import CachedShard, ShardCache, fetch_index, minimum_cache_bytes
from streaming.cache.space import CacheTooSmallError

__all__ = ["CacheTooSmallError", "CachedShard", "ShardCache", "fetch_index", "minimum_cache_bytes"]
