"""Bounded reading of untrusted files (issue 39): nothing is inflated, expanded or held in memory before its
size is known to be within a limit.

- zip records (`read_zip_member`): the record's declared size is checked against what the caller expects (a
  tensor's bytes from the pickle) and a limit BEFORE anything is inflated, a compressed record may not claim
  more than `MAX_ZIP_RATIO` times its stored size (torch writes its records uncompressed: a 3.2 MB `.pt` whose
  record inflated to 3 GiB took 6.7 GB of RAM before it was refused), and the read stops at the declared size.
- YAML (`check_yaml_expansion`): the node count after alias expansion and the nesting depth are computed on
  the composed node graph (aliases stay references there, counted with memoisation, so 9 anchors x 9 aliases
  cost 81 steps, not 9^9 nodes) and refused above the limits before OmegaConf expands anything.
- text lines (`read_text_lines`): a line longer than the limit is refused naming the file and the line,
  without reading the rest of it into memory.

Each limit is a keyword with a default; a caller exposes it in its config where a user could need more.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "MAX_ZIP_RATIO",
    "TooLarge",
    "check_yaml_expansion",
    "read_text_lines",
    "read_zip_member",
]

MAX_ZIP_RATIO = 200
"""A compressed zip record may declare at most this many times its stored bytes."""
MAX_YAML_NODES = 1_000_000
"""YAML nodes after alias expansion (llm-foundry's largest recipe has a few hundred)."""
MAX_YAML_DEPTH = 64
MAX_LINE_BYTES = 16 * 1024 * 1024
"""One line of a task or data file (an ICL row is a few KB; a 20 MB line stalled tokenisation for minutes)."""
_CHUNK = 1 << 20


class TooLarge(ValueError):
    """An input over a limit; the message names the file, what is too large, the limit and how to raise it."""


def read_zip_member(
    archive: zipfile.ZipFile, name: str, *, source: str, expected: int | None = None, limit: int | None = None
) -> bytes:
    """The bytes of record `name`, checked before inflating: its declared size equals `expected` (when given)
    and is at most `limit` (when given), and a compressed record's declared size is at most `MAX_ZIP_RATIO`
    times its stored size; read in chunks, never past the declared size.

    Raises:
        TooLarge: A check failed (nothing was inflated).
        KeyError: No such record.
    """
    info = archive.getinfo(name)
    size = info.file_size
    if expected is not None and size != expected:
        raise TooLarge(
            f"{source}: record {name} declares {size} bytes, its index says {expected}: a damaged or crafted file"
        )
    if limit is not None and size > limit:
        raise TooLarge(f"{source}: record {name} declares {size} bytes, over the limit of {limit}")
    if info.compress_type != zipfile.ZIP_STORED and size > MAX_ZIP_RATIO * max(1, info.compress_size):
        raise TooLarge(
            f"{source}: record {name} would inflate {info.compress_size} bytes to {size} "
            f"(over {MAX_ZIP_RATIO}x): a zip bomb, not a checkpoint (torch stores its records uncompressed)"
        )
    out = io.BytesIO()
    with archive.open(info) as f:
        while out.tell() < size:
            chunk = f.read(min(_CHUNK, size - out.tell()))
            if not chunk:
                break
            out.write(chunk)
    return out.getvalue()


def check_yaml_expansion(
    text: str, *, source: str, max_nodes: int = MAX_YAML_NODES, max_depth: int = MAX_YAML_DEPTH
) -> None:
    """Refuses YAML whose alias expansion exceeds `max_nodes` nodes or nests deeper than `max_depth`,
    computed on the composed node graph without expanding it. Malformed YAML is left to the loader.

    Raises:
        TooLarge: Over a limit (naming the file and the figures).
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # the real loader reports it, with its own message
    if root is None:
        return
    sizes: dict[int, int] = {}

    def size(node: Any, depth: int) -> int:  # noqa: ANN401 - a yaml node
        if depth > max_depth:
            raise TooLarge(f"{source}: nested deeper than {max_depth} levels: not a training config")
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = 1  # a cycle (recursive alias) counts once, then stops
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(v, depth + 1) for v in node.value)
        sizes[key] = total
        if total > max_nodes:
            raise TooLarge(
                f"{source}: its anchors and aliases expand to over {max_nodes:,} nodes: refused before expanding "
                "(a YAML bomb, not a training config)"
            )
        return total

    size(root, 0)


def read_text_lines(
    path: str | Path, *, max_line_bytes: int = MAX_LINE_BYTES, hint: str = ""
) -> Iterator[str]:
    """The lines of a UTF-8 text file (newlines kept), refusing one longer than `max_line_bytes` without
    reading past the limit.

    Raises:
        TooLarge: A line over the limit (naming the file, the line number and `hint`: how to raise it).
    """
    with open(path, "rb") as f:
        n = 0
        while True:
            line = f.readline(max_line_bytes + 1)
            if not line:
                return
            n += 1
            if len(line) > max_line_bytes and not line.endswith(b"\n"):
                raise TooLarge(
                    f"{path}:{n}: a line longer than {max_line_bytes:,} bytes: not a row of this format"
                    + (f" ({hint})" if hint else "")
                )
            yield line.decode("utf-8")
