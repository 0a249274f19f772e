"""Counter-based random values: element ``i`` of a keyed random stream in O(1), for arrays of ``i`` at once.

Design note: the block shuffles need the random value of one position (a sample's key offset, a span's drawn
block size, which sample a layout slot holds) without drawing every value before it, so that any window of an
epoch's order is computable in isolation for a few vector operations per position, instead of one seeded
generator per span (~30 us each: the 500k-shard cold start created ~50k of them before its first sample).

- ``derive_key(*ints)``: a 64-bit key from (seed, epoch, tag, ...), by chaining the mix below.
- ``hash64(key, i)``: SplitMix64's output for counter ``i`` of stream ``key``: ``mix(key + (i + 1) * golden)``
  with the splitmix64 finalizer as ``mix`` (the generator's own state sequence, a well-tested 64-bit mixer).
- ``uniform(key, i)``: its top 53 bits as a float64 in ``[0, 1)``.
- ``permute(keys, x, n)``: a keyed bijection of ``[0, n)`` evaluated at ``x``, each element with its own
  ``n`` and key (a span's permutation, evaluated only at the slots a window needs): a 4-round balanced Feistel
  network over the smallest even number of bits holding ``n``, cycle-walked back into ``[0, n)``. Not a
  uniformly drawn permutation (4 rounds of a keyed mix), but one with no visible structure, which is what a
  within-shard shuffle asks for.
"""

from __future__ import annotations

import numpy as np

__all__ = ["derive_key", "hash64", "mix64", "permute", "uniform"]

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1 = 0xBF58476D1CE4E5B9
_C2 = 0x94D049BB133111EB
_ROUNDS = 4


def _mix_int(z: int) -> int:
    z &= _M64
    z = ((z ^ (z >> 30)) * _C1) & _M64
    z = ((z ^ (z >> 27)) * _C2) & _M64
    return z ^ (z >> 31)


def derive_key(*ints: int) -> int:
    """A 64-bit stream key from non-negative ints (seed, epoch, tag, ...);
    distinct tuples give unrelated keys."""
    z = 0
    for v in ints:
        z = _mix_int(z + (int(v) + 1) * _GOLDEN)
    return z


def mix64(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer, elementwise on uint64 (wrapping arithmetic; ``z`` is overwritten)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_C1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_C2)
    z ^= z >> np.uint64(31)
    return z


def hash64(key: int | np.ndarray, i: np.ndarray) -> np.ndarray:
    """Element ``i`` of stream ``key`` (a scalar key, or one key per element) as uint64."""
    z = np.asarray(i, dtype=np.int64).astype(np.uint64)
    z += np.uint64(1)
    z *= np.uint64(_GOLDEN)
    z += np.asarray(key, dtype=np.uint64) if isinstance(key, np.ndarray) else np.uint64(key & _M64)
    return mix64(z)


def uniform(key: int, i: np.ndarray) -> np.ndarray:
    """Element ``i`` of stream ``key`` as float64 in ``[0, 1)`` (53 random bits)."""
    return (hash64(key, i) >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _bit_length(v: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each element of a non-negative int64 array below 2**53."""
    return np.frexp(v.astype(np.float64))[1].astype(np.int64)


def _encrypt(x: np.ndarray, round_keys: np.ndarray, group: np.ndarray, half: np.ndarray) -> np.ndarray:
    """One pass of the Feistel network over ``2 * half`` bits (per element)."""
    mask = (np.uint64(1) << half) - np.uint64(1)
    left, right = x >> half, x & mask
    for r in range(_ROUNDS):
        f = right + round_keys[r][group]
        left, right = right, left ^ (mix64(f) & mask)
    return (left << half) | right


def permute(x: np.ndarray, group: np.ndarray, keys: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``pi_g(x)`` for each element, ``g = group[...]``, where ``pi_g`` is a bijection of ``[0, sizes[g])``
    keyed by ``keys[g]`` (``x < sizes[g]``): elements of one group with distinct ``x`` get distinct results.

    Args:
        x: Positions (int64, ``0 <= x < sizes[group]``).
        group: Index of each element's group into ``keys`` and ``sizes``.
        keys: One 64-bit key (uint64) per group.
        sizes: One domain size (>= 1) per group.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    sizes = np.asarray(sizes, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    round_keys = np.stack([hash64(keys, np.full(len(keys), r, dtype=np.int64)) for r in range(_ROUNDS)])
    half_g = ((np.maximum(_bit_length(sizes - 1), 2) + 1) // 2).astype(np.uint64)
    half, n = half_g[group], sizes.astype(np.uint64)[group]
    y = _encrypt(np.asarray(x, dtype=np.int64).astype(np.uint64), round_keys, group, half)
    todo = np.flatnonzero(y >= n)
    # cycle walking: the domain is < 4n, so each step lands inside with probability > 1/4
    while len(todo):
        y[todo] = _encrypt(y[todo], round_keys, group[todo], half[todo])
        todo = todo[y[todo] >= n[todo]]
    return y.astype(np.int64)
