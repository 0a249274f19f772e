"""Automatic microbatching: recognise an out-of-memory error and pick the next microbatch size (pure).

Design note: Composer retries the *same* device batch after halving the microbatch, so no sample is lost
or counted twice; the trainer does the same (it zeroes gradients and only advances counters after a step
succeeds), and this module only decides *whether* an error is an OOM and *what* size comes next, which is
what the tests exercise with a fake OOM on CPU.
"""

from __future__ import annotations

__all__ = ["is_oom", "next_microbatch_size"]

_OOM_MESSAGES = ("CUDA out of memory", "CUDA error: out of memory", "out of memory")


def is_oom(err: BaseException) -> bool:
    """True for CUDA (or other accelerator) out-of-memory errors, by type or message."""
    import torch

    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err) for m in _OOM_MESSAGES)


def next_microbatch_size(current: int) -> int:
    """Half the current size (rounded down).

    Raises:
        RuntimeError: When the size is already 1 (nothing smaller to try).
    """
    if current <= 1:
        raise RuntimeError(
            "out of memory with device_train_microbatch_size=1: lower max_seq_len, the model size, or "
            "use more devices / activation checkpointing"
        )
    return max(current // 2, 1)
