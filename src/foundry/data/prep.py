"""Tokenize documents and pack them into fixed-length MDS rows (the engine of `convert_dataset_hf.py`).

Design note: llm-foundry grows a Python list with `buffer = buffer + ids` per document, which is O(buffer)
per append. Here packing is a pure generator over a numpy buffer with a read offset, so each token is
copied a bounded number of times; tokenization (the real cost) runs in a process pool over batches of
documents, and the packing stays in the parent so row order is deterministic whatever the worker count.
Rows are stored as `ndarray:<smallest unsigned dtype that holds the vocabulary>` (`uint16` for a
50k vocabulary halves the bytes of llm-foundry's int32).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any

import numpy as np

__all__ = ["ConvertStats", "concat_rows", "convert_texts", "smallest_uint_dtype"]


def smallest_uint_dtype(vocab_size: int) -> str:
    """The narrowest unsigned numpy dtype whose range holds ids `0 .. vocab_size - 1`."""
    for name in ("uint8", "uint16", "uint32"):
        if vocab_size - 1 <= np.iinfo(name).max:
            return name
    return "uint64"


def concat_rows(
    docs: Iterable[list[int] | np.ndarray],
    *,
    max_seq_len: int,
    bos: list[int] | None = None,
    eos: list[int] | None = None,
    wrap: bool = True,
) -> Iterator[np.ndarray]:
    """Concatenate `bos + doc + eos` for every document and cut the stream into rows of `max_seq_len`.

    Args:
        docs: Token ids per document.
        max_seq_len: Row length.
        bos: Ids put before each document.
        eos: Ids put after each document.
        wrap: Carry a document's remainder into the next row (True) or drop it at each document end
            (False, llm-foundry's `--no_wrap`).

    Yields:
        int64 arrays of exactly `max_seq_len` ids; a final partial row is dropped.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len={max_seq_len} must be >= 1")
    pre = np.asarray(bos or [], dtype=np.int64)
    post = np.asarray(eos or [], dtype=np.int64)
    buf = np.empty(0, dtype=np.int64)
    for doc in docs:
        ids = np.concatenate([pre, np.asarray(doc, dtype=np.int64), post])
        buf = np.concatenate([buf, ids]) if len(buf) else ids
        n_rows = len(buf) // max_seq_len
        for i in range(n_rows):
            yield buf[i * max_seq_len : (i + 1) * max_seq_len]
        buf = buf[n_rows * max_seq_len :] if wrap else buf[:0]


@dataclass
class ConvertStats:
    """What a conversion did."""

    documents: int = 0
    tokens: int = 0
    """Tokens written (rows x max_seq_len)."""
    rows: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        """Written tokens per wall-clock second."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


_WORKER_TOKENIZER: Any = None


def _init_worker(tokenizer: Any) -> None:  # noqa: ANN401 - a transformers tokenizer
    global _WORKER_TOKENIZER  # one tokenizer per pool process (process-local, set once)
    _WORKER_TOKENIZER = tokenizer


def _encode(texts: list[str], tokenizer: Any = None) -> list[list[int]]:  # noqa: ANN401
    tok = tokenizer if tokenizer is not None else _WORKER_TOKENIZER
    return tok(texts, add_special_tokens=False, truncation=False)["input_ids"]


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(islice(it, size)):
        yield batch


def _encoded_docs(
    texts: Iterable[str],
    *,
    tokenizer: Any,  # noqa: ANN401
    num_workers: int,
    batch_docs: int,
) -> Iterator[list[int]]:
    if num_workers <= 1:
        for batch in _batches(texts, batch_docs):
            yield from _encode(batch, tokenizer)
        return
    with ProcessPoolExecutor(num_workers, initializer=_init_worker, initargs=(tokenizer,)) as pool:
        pending = []
        for batch in _batches(texts, batch_docs):
            pending.append(pool.submit(_encode, batch))
            if len(pending) >= 2 * num_workers:
                yield from pending.pop(0).result()
        for fut in pending:
            yield from fut.result()


def convert_texts(
    texts: Iterable[str],
    *,
    tokenizer: Any,  # noqa: ANN401 - a transformers tokenizer
    out: str,
    max_seq_len: int,
    bos_text: str = "",
    eos_text: str = "",
    wrap: bool = True,
    compression: str | None = None,
    num_workers: int = 1,
    batch_docs: int = 256,
    progress: Any = None,  # noqa: ANN401 - a tqdm bar (updated with documents) or None
) -> ConvertStats:
    """Tokenize `texts`, pack them into rows and write an MDS dataset with one `tokens` column.

    Args:
        texts: The documents.
        tokenizer: A transformers tokenizer (special tokens are not added; use `bos_text` / `eos_text`).
        out: Output directory or object-store URL.
        max_seq_len: Row length.
        bos_text: Text whose ids precede every document (e.g. `<|endoftext|>`); "" for none.
        eos_text: Text whose ids follow every document.
        wrap: See :func:`concat_rows`.
        compression: MDS compression (`zstd`, ...), or None.
        num_workers: Tokenizer processes (1 = in this process).
        batch_docs: Documents per tokenizer call.
        progress: Optional tqdm-like bar, advanced by documents.

    Returns:
        Counts and timing.

    Raises:
        ValueError: Neither `bos_text` nor `eos_text` is given (documents would run together unseparated).
    """
    from streaming import MDSWriter

    if not bos_text and not eos_text:
        raise ValueError(
            "give --bos_text and/or --eos_text (e.g. --eos_text '<|endoftext|>'): without a separator the "
            "packed documents run together"
        )
    bos = tokenizer(bos_text, add_special_tokens=False)["input_ids"] if bos_text else []
    eos = tokenizer(eos_text, add_special_tokens=False)["input_ids"] if eos_text else []
    dtype = smallest_uint_dtype(len(tokenizer))
    stats = ConvertStats()
    start = time.perf_counter()

    def counted(docs: Iterator[list[int]]) -> Iterator[list[int]]:
        for doc in docs:
            stats.documents += 1
            if progress is not None:
                progress.update(1)
            yield doc

    docs = counted(_encoded_docs(texts, tokenizer=tokenizer, num_workers=num_workers, batch_docs=batch_docs))
    with MDSWriter(
        out=out, columns={"tokens": f"ndarray:{dtype}"}, compression=compression, exist_ok=True
    ) as w:
        for row in concat_rows(docs, max_seq_len=max_seq_len, bos=bos, eos=eos, wrap=wrap):
            w.write({"tokens": row.astype(dtype)})
            stats.rows += 1
    stats.tokens = stats.rows * max_seq_len
    stats.seconds = time.perf_counter() - start
    return stats
