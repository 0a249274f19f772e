"""The loader: ``StreamingDataLoader`` (``dataloader``) and how worker batches reach the rank.

``batch_groups``: each DataLoader worker reads whole batches (through ``streaming.reader.batch_read``) and the
global batch order is restored however they are grouped and arrive; ``shared_batches``: the batches' arrays
cross in reusable shared-memory slots, one arena per worker (the pipe when no slot is free).

Design note: the loader builds on ``streaming.reader`` (it drives a ``StreamingDataset``'s epochs and unread
sample refs); the reader never imports the loader. Nothing is re-exported here (``streaming`` does that,
lazily).
"""
