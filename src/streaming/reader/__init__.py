"""The reader: ``StreamingDataset`` and its parts, with ``Stream``, ``LocalDataset`` and ``World``.

Modules: ``dataset`` (``StreamingDataset``), ``stream`` (``Stream``: one source's remote, local folder, mixing
arguments and its index), ``local`` (``LocalDataset``: a local folder, random access, no cache), ``world``
(``World``: nodes, ranks, workers, replication). ``StreamingDataset`` split by concern: ``dataset_args``
(argument checks), ``dataset_index``, ``index_cache`` and ``shard_sequence`` (the streams' shards as arrays; a
binary cache for large indexes; ``ShardInfo`` built on demand), ``epoch_planner`` (world, epoch orders, the
epoch counter), ``shard_access`` (per-process readers, shard preparation and prefetch), ``growing_shard`` (the
first sample read while its shard is still arriving), ``batch_read`` (unread sample refs, a batch's columns
read per shard), ``resume_state`` (the state dict and its checks).

Design note: this package re-exports nothing, so importing one module (a training task's
``streaming.reader.world``) loads only that module, never torch; the public names are re-exported lazily by
``streaming`` (and ``streaming.base``). The reader builds on ``cache``, ``format``, ``plan``, ``storage`` and
``util``, and never imports ``streaming.loader`` (which builds on it).
"""
