"""Tokenize documents and pack them into fixed-length MDS rows (the engine of `convert_dataset_hf.py`).

Design note: llm-foundry grows a Python list with `buffer = buffer + ids` per document, which is O(buffer)
per append. Here packing is a pure generator over a numpy buffer with a read offset, so each token is
copied a bounded number of times; tokenization (the real cost) runs in a process pool over batches of
documents, and the packing stays in the parent so row order is deterministic whatever the worker count.
Rows are stored as `ndarray:<smallest unsigned dtype that holds the vocabulary>` (`uint16` for a
50k vocabulary halves the bytes of llm-foundry's int32). With `record_documents` each row also stores the
lengths of the documents it holds (`document_lengths`, see `foundry.data.documents`): exact document
boundaries for document masking, whatever tokens the documents contain.

Input files (`.txt`, `.json`, `.jsonl`) may be local paths or object-store URLs: `input_files` finds a split's
files (a folder is listed through the streaming backends) and `read_documents` reads each one whole with
`streaming.storage.open_url` (smart_open).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from foundry.data.documents import DOCUMENT_LENGTHS_COLUMN
from streaming.storage import is_remote, list_files, open_url, redact

__all__ = [
    "TEXT_SUFFIXES",
    "ConvertStats",
    "concat_documents",
    "convert_texts",
    "input_files",
    "read_documents",
    "smallest_uint_dtype",
]

TEXT_SUFFIXES = (".txt", ".json", ".jsonl")


def smallest_uint_dtype(vocab_size: int) -> str:
    """The narrowest unsigned numpy dtype whose range holds ids `0 .. vocab_size - 1`."""
    for name in ("uint8", "uint16", "uint32"):
        if vocab_size - 1 <= np.iinfo(name).max:
            return name
    return "uint64"


def concat_documents(
    docs: Iterable[list[int] | np.ndarray],
    *,
    max_seq_len: int,
    bos: list[int] | None = None,
    eos: list[int] | None = None,
    wrap: bool = True,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Concatenate `bos + doc + eos` for every document and cut the stream into rows of `max_seq_len`,
    saying where each row's documents are.

    Args:
        docs: Token ids per document.
        max_seq_len: Row length.
        bos: Ids put before each document.
        eos: Ids put after each document.
        wrap: Carry a document's remainder into the next row (True) or drop it at each document end
            (False, llm-foundry's `--no_wrap`).

    Yields:
        `(row, lengths)`: the row, an int64 array of exactly `max_seq_len` ids (a final partial row is
        dropped), and the lengths of the pieces of `bos + doc + eos` it holds, in order (int64, positive,
        summing to `max_seq_len`; a document cut by a row end counts in both rows). This is the
        `document_lengths` column of `--record_documents`.
    """
    if max_seq_len < 1:
        raise ValueError(f"max_seq_len={max_seq_len} must be >= 1")
    pre = np.asarray(bos or [], dtype=np.int64)
    post = np.asarray(eos or [], dtype=np.int64)
    buf = np.empty(0, dtype=np.int64)
    # end offset (in buf) of every piece that still has tokens in buf
    ends = np.empty(0, dtype=np.int64)
    for doc in docs:
        ids = np.concatenate([pre, np.asarray(doc, dtype=np.int64), post])
        if not len(ids):
            continue
        buf = np.concatenate([buf, ids]) if len(buf) else ids
        ends = np.append(ends, len(buf))
        n_rows = len(buf) // max_seq_len
        for i in range(n_rows):
            a, b = i * max_seq_len, (i + 1) * max_seq_len
            cuts = ends[(ends > a) & (ends < b)]
            yield buf[a:b], np.diff(np.concatenate([[a], cuts, [b]]))
        consumed = n_rows * max_seq_len if wrap else len(buf)
        buf = buf[consumed:]
        ends = ends[ends > consumed] - consumed


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


# `tokenizer`: a transformers tokenizer
def _init_worker(tokenizer: Any) -> None:
    # one tokenizer per pool process (process-local, set once)
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = tokenizer


def _encode(texts: list[str], tokenizer: Any = None) -> list[list[int]]:
    tok = tokenizer if tokenizer is not None else _WORKER_TOKENIZER
    return tok(texts, add_special_tokens=False, truncation=False)["input_ids"]


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(islice(it, size)):
        yield batch


def _encoded_docs(
    texts: Iterable[str],
    *,
    tokenizer: Any,
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
    tokenizer: Any,
    out: str,
    max_seq_len: int,
    bos_text: str = "",
    eos_text: str = "",
    wrap: bool = True,
    compression: str | None = None,
    num_workers: int = 1,
    batch_docs: int = 256,
    progress: Any = None,
    record_documents: bool = False,
) -> ConvertStats:
    """Tokenize `texts`, pack them into rows and write an MDS dataset with one `tokens` column.

    Args:
        texts: The documents.
        tokenizer: A transformers tokenizer (special tokens are not added; use `bos_text` / `eos_text`).
        out: Output directory or object-store URL.
        max_seq_len: Row length.
        bos_text: Text whose ids precede every document (e.g. `<|endoftext|>`); "" for none.
        eos_text: Text whose ids follow every document.
        wrap: See :func:`concat_documents`.
        compression: MDS compression (`zstd`, ...), or None.
        num_workers: Tokenizer processes (1 = in this process).
        batch_docs: Documents per tokenizer call.
        progress: Optional tqdm-like bar, advanced by documents.
        record_documents: Also write each row's document lengths (`document_lengths` column, see
            :func:`concat_documents`), so document masking needs no separator token.

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
    columns = {"tokens": f"ndarray:{dtype}"}
    len_dtype = smallest_uint_dtype(max_seq_len + 1)
    if record_documents:
        columns[DOCUMENT_LENGTHS_COLUMN] = f"ndarray:{len_dtype}"
    with MDSWriter(out=out, columns=columns, compression=compression, exist_ok=True) as w:
        for row, lengths in concat_documents(docs, max_seq_len=max_seq_len, bos=bos, eos=eos, wrap=wrap):
            sample = {"tokens": row.astype(dtype)}
            if record_documents:
                sample[DOCUMENT_LENGTHS_COLUMN] = lengths.astype(len_dtype)
            w.write(sample)
            stats.rows += 1
    stats.tokens = stats.rows * max_seq_len
    stats.seconds = time.perf_counter() - start
    return stats


def _name(url: str) -> tuple[str, str]:
    """`(stem, suffix)` of the last path component of a path or URL (a URL's query is not part of it)."""
    return os.path.splitext(url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])


def _children(folder: str) -> list[str]:
    """The files directly in `folder` (a local folder, or an object-store prefix listed by its backend)."""
    if is_remote(folder):
        prefix = folder.rstrip("/") + "/"
        return [u for u in list_files(prefix) if "/" not in u[len(prefix) :]]
    path = Path(folder.removeprefix("file://"))
    return [str(p) for p in path.glob("*") if p.is_file()] if path.is_dir() else []


def input_files(dataset: str, split: str) -> list[str]:
    """The `.txt` / `.json` / `.jsonl` files of `split`: `dataset` itself when it is one file, else the files
    in `<dataset>/<split>/`, else those in `<dataset>/` whose name starts with `split`; sorted.

    `dataset` is a local path or an object-store URL (a URL ending in one of `TEXT_SUFFIXES` is one file).

    Raises:
        FileNotFoundError: No such file for the split.
    """
    if is_remote(dataset):
        one_file = _name(dataset)[1] in TEXT_SUFFIXES
    else:
        one_file = Path(dataset.removeprefix("file://")).is_file()
    if one_file:
        return [dataset]
    root = dataset.rstrip("/")
    for base, named in ((f"{root}/{split}", False), (root, True)):
        files = sorted(
            u
            for u in _children(base)
            if _name(u)[1] in TEXT_SUFFIXES and (not named or _name(u)[0].startswith(split))
        )
        if files:
            return files
    raise FileNotFoundError(f"no {'/'.join(TEXT_SUFFIXES)} files for split {split!r} under {redact(dataset)}")


def read_documents(files: Iterable[str], *, txt_docs: str = "file") -> Iterator[str]:
    """The documents in `files` (paths or URLs, each read whole through `open_url`, UTF-8).

    Args:
        files: `.txt` files (one document per file, or per non-blank line with `txt_docs="line"`), `.jsonl`
            (one object per non-blank line) and `.json` (an object or a list of them); objects need `text`.
        txt_docs: `"file"` or `"line"`.
    """
    for url in files:
        suffix = _name(url)[1]
        with open_url(url, "r") as f:
            if suffix == ".txt" and txt_docs == "file":
                yield f.read()
            elif suffix == ".txt":
                yield from (line for line in f if line.strip())
            elif suffix == ".jsonl":
                for line in f:
                    if line.strip():
                        yield json.loads(line)["text"]
            else:
                data = json.load(f)
                for row in data if isinstance(data, list) else [data]:
                    yield row["text"]
