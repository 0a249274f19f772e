"""Offline stand-ins for the streams of a mixture: small MDS splits of random token ids, in the stream layout.

Design note: a mixture config (`data=mpt-7b-mix`) names sources that take days to download and tokenize; to
train it end to end offline (tests, a first run, benchmarks) each stream's layout path gets a small tokenized
split of the same shape as the real ones (`tokens` rows of `seq_len` ids), written in seconds. The layout
comes from the stream option files themselves (`conf/data/streams/*.yaml`: `path`, `split`, `eval_split`), so
stand-ins and configs cannot drift apart. Rows are random ids in `[1, vocab_size)` with an EOS id 0 closing a
document every `doc_len` tokens, drawn from a generator keyed by (seed, stream path, split): the same files
every time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

__all__ = ["StandinLayout", "read_stream_layouts", "write_standin_streams"]


@dataclass(frozen=True)
class StandinLayout:
    """Where one stream's splits live under the local root: `<root>/<path>/<split>`."""

    path: str
    splits: tuple[str, ...]


def read_stream_layouts(conf_dir: Path, *, train_split: str = "train") -> dict[str, StandinLayout]:
    """The layout of every stream option file in `conf_dir` (`conf/data/streams`): name -> path and splits.

    A stream whose `split` is null uses `train_split` (as `data.train_split` does).

    Raises:
        FileNotFoundError: `conf_dir` has no `*.yaml` stream files.
        ValueError: A stream file without a `path`.
    """
    files = sorted(conf_dir.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"no stream option files (*.yaml) in {conf_dir}")
    out = {}
    for f in files:
        node = OmegaConf.load(f)
        if not isinstance(node, DictConfig):
            raise ValueError(f"{f}: a stream option file is a mapping (path, split, eval_split, ...)")
        path = node.get("path")
        if not path:
            raise ValueError(f"{f}: no `path` (the stream's layout path under data.local_root)")
        splits = [node.get("split") or train_split, node.get("eval_split")]
        out[f.stem] = StandinLayout(path=str(path), splits=tuple(s for s in splits if s))
    return out


def _rows(key: str, *, samples: int, seq_len: int, vocab_size: int, doc_len: int, seed: int) -> np.ndarray:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    # (N, S)
    rows = rng.integers(1, vocab_size, size=(samples, seq_len), dtype=np.int64)
    # EOS closes each document
    rows[:, doc_len - 1 :: doc_len] = 0
    return rows.astype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def write_standin_streams(
    out: Path,
    *,
    layouts: Mapping[str, StandinLayout],
    samples: int | Sequence[int] = 256,
    eval_samples: int = 32,
    seq_len: int = 128,
    vocab_size: int = 512,
    doc_len: int = 32,
    seed: int = 0,
) -> list[Path]:
    """Writes an MDS split of random token rows for every split of every layout; returns the split folders.

    Args:
        out: The local root (what `data.local_root` then points at).
        layouts: Stream name -> layout (`read_stream_layouts`).
        samples: Rows per training split: one count for all streams, or one per stream (in `layouts` order).
        eval_samples: Rows per eval split (every split after a layout's first).
        seq_len: Tokens per row.
        vocab_size: Ids are drawn from `[1, vocab_size)`; 0 is EOS.
        doc_len: An EOS every `doc_len` tokens.
        seed: Fixes the rows.

    Raises:
        ValueError: A non-positive size, or `samples` with the wrong number of entries.
    """
    # the writer stack only when writing (the module is imported by tests)
    from streaming import MDSWriter

    counts = [samples] * len(layouts) if isinstance(samples, int) else list(samples)
    if len(counts) != len(layouts):
        raise ValueError(f"samples has {len(counts)} entries for {len(layouts)} streams")
    if min([*counts, eval_samples, seq_len, doc_len, vocab_size - 1]) < 1:
        raise ValueError("samples, eval_samples, seq_len and doc_len must be >= 1 and vocab_size >= 2")
    written = []
    for (_, layout), n in zip(layouts.items(), counts):
        for i, split in enumerate(layout.splits):
            folder = out / layout.path / split
            rows = _rows(
                f"{layout.path}/{split}",
                samples=n if i == 0 else eval_samples,
                seq_len=seq_len,
                vocab_size=vocab_size,
                doc_len=doc_len,
                seed=seed,
            )
            with MDSWriter(
                out=str(folder), columns={"tokens": f"ndarray:{rows.dtype.name}"}, exist_ok=True
            ) as w:
                for row in rows:
                    w.write({"tokens": row})
            written.append(folder)
    return written
