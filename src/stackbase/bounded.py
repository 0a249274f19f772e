"""Bounded reading of untrusted files (issue 39): nothing is inflated, expanded or held in memory before its
size is known to be within a limit.

- zip records (`read_zip_member`): the record's declared size is checked against what the caller expects (a
  tensor's bytes from the pickle) and a limit BEFORE anything is inflated, a compressed record may not claim
  more than `MAX_ZIP_RATIO` times its stored size (torch writes its records uncompressed: a 3.2 MB `.pt` whose
  record inflated to 3 GiB took 6.7 GB of RAM before it was refused), and the read stops at the declared size.
- YAML (`check_yaml_expansion`): the node count after alias expansion and the nesting depth are computed on
  the composed node graph (aliases stay references there, counted with memoisation, so 9 anchors x 9 aliases
  cost 81 steps, not 9^9 nodes) and refused above the limits before OmegaConf expands anything; so is an
  anchor holding an alias of itself (`a: &x {b: *x}`), which OmegaConf expands until the stack overflows.
- text lines (`read_text_lines`): a line longer than the limit is refused naming the file and the line,
  without reading the rest of it into memory.
- JSON (`read_json`, `parse_json`): the file's size is checked before it is read, its text must be UTF-8, and
  the nesting of arrays and objects is measured on the text before it is parsed (C-speed byte operations,
  ~5 ms per MB), so a value nested 100,000 deep is one error line, not a `RecursionError` from the parser
  or from the first code that walks the value. Every failure is a `ValueError` naming the file.

Each limit defaults to `stackbase.limits` (`FOUNDRY_MAX_<NAME>` raises it, and a refusal names the variable);
a keyword argument sets it for one call.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import reprlib
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stackbase.limits import LIMITS, hint
from stackbase.limits import limit as limit_of

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "MAX_ZIP_RATIO",
    "NotJSON",
    "TooLarge",
    "check_yaml_expansion",
    "json_depth",
    "json_max_bytes",
    "parse_json",
    "read_capped",
    "read_json",
    "read_text_lines",
    "read_zip_member",
    "short_repr",
]

MAX_ZIP_RATIO = LIMITS["ZIP_RATIO"][0]
"""A compressed zip record may declare at most this many times its stored bytes (`FOUNDRY_MAX_ZIP_RATIO`)."""
MAX_YAML_NODES = LIMITS["YAML_NODES"][0]
"""YAML nodes after alias expansion: llm-foundry's largest recipe has 229, and OmegaConf spends ~0.2 ms per
node (a 9^5-alias bomb of 59,049 nodes, under the earlier limit of a million, kept the translator busy for
minutes), so this bounds a translation to about 2 s."""
MAX_YAML_DEPTH = LIMITS["YAML_DEPTH"][0]
MAX_LINE_BYTES = LIMITS["LINE_MB"][0] << 20
"""One line of a task or data file (an ICL row is a few KB; a 20 MB line stalled tokenisation for minutes)."""
MAX_JSON_DEPTH = LIMITS["JSON_DEPTH"][0]
"""Nesting of JSON arrays and objects (an index.json or a manifest nests under 10 levels; Python's parser
gives up near 1,000, and recursive code walking a value that deep fails before it)."""
_CHUNK = 1 << 20


class TooLarge(ValueError):
    """An input over a limit; the message names the file, what is too large, the limit and how to raise it."""


class NotJSON(ValueError):
    """A file that is not UTF-8 JSON; the message names it and where it breaks (`__cause__`: the parser's
    `json.JSONDecodeError`, when it was one)."""


def read_zip_member(
    archive: zipfile.ZipFile, name: str, *, source: str, expected: int | None = None, limit: int | None = None
) -> bytes:
    """The bytes of record `name`, checked before inflating: its declared size equals `expected` (when given)
    and is at most `limit` (when given), and a compressed record's declared size is at most `MAX_ZIP_RATIO`
    times its stored size; read in chunks, never past the declared size.

    Raises:
        TooLarge: A check failed (nothing was inflated).
        ValueError: The record is damaged (a bad CRC, a broken header or deflate stream).
        KeyError: No such record.
    """
    info = archive.getinfo(name)
    size = info.file_size
    if expected is not None and size != expected:
        raise TooLarge(
            f"{source}: record {name} declares {size} bytes, its index says "
            f"{expected}: a damaged or crafted file"
        )
    if limit is not None and size > limit:
        raise TooLarge(
            f"{source}: record {name} declares {size} bytes, over the limit of {limit} (the pickle's limit "
            "is FOUNDRY_MAX_PICKLE_MB, if the file is trusted)"
        )
    ratio = limit_of("ZIP_RATIO")
    if info.compress_type != zipfile.ZIP_STORED and size > ratio * max(1, info.compress_size):
        raise TooLarge(
            f"{source}: record {name} would inflate {info.compress_size} bytes to {size} "
            f"(over {ratio}x): a zip bomb, not a checkpoint (torch stores its records uncompressed); "
            + hint("ZIP_RATIO")
        )
    out = io.BytesIO()
    try:
        with archive.open(info) as f:
            while out.tell() < size:
                chunk = f.read(min(_CHUNK, size - out.tell()))
                if not chunk:
                    break
                out.write(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError, OverflowError) as err:
        # a bad CRC or deflate stream, a local header whose name or offsets the central directory contradicts
        raise ValueError(f"{source}: record {name} is damaged ({type(err).__name__}: {err})") from None
    return out.getvalue()


def check_yaml_expansion(
    text: str, *, source: str, max_nodes: int | None = None, max_depth: int | None = None
) -> None:
    """Refuses YAML whose alias expansion exceeds `max_nodes` nodes or nests deeper than `max_depth`,
    computed on the composed node graph without expanding it. Malformed YAML is left to the loader. The limits
    default to `FOUNDRY_MAX_YAML_NODES` / `FOUNDRY_MAX_YAML_DEPTH` (`stackbase.limits`).

    Raises:
        TooLarge: Over a limit (naming the file and the figures).
    """
    import yaml

    max_nodes = limit_of("YAML_NODES") if max_nodes is None else max_nodes
    max_depth = limit_of("YAML_DEPTH") if max_depth is None else max_depth
    # PyYAML's scanner is quadratic in the nesting of flow collections (`[[[[...`: 10,000 levels took 4 s, so
    # 100,000 would take minutes): brackets are counted first, strings and comments included (an overcount
    # that matters only past 4x the depth limit)
    flow = (1 if c in b"[{" else -1 for c in text.encode("utf-8", "surrogatepass").translate(None, _NOT_FLOW))
    if max(itertools.accumulate(flow), default=0) > 4 * max_depth:
        raise TooLarge(f"{source}: nested deeper than {max_depth} levels: not a training config")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        # the real loader reports it, with its own message
        return
    except RecursionError:
        # the composer recurses once per level
        raise TooLarge(f"{source}: nested deeper than {max_depth} levels: not a training config") from None
    if root is None:
        return
    sizes: dict[int, int] = {}
    # the nodes being counted: meeting one again is an alias inside itself
    open_: set[int] = set()

    # `node`: a yaml node
    def size(node: Any, depth: int) -> int:
        if depth > max_depth:
            raise TooLarge(f"{source}: nested deeper than {max_depth} levels: not a training config")
        key = id(node)
        if key in open_:
            raise TooLarge(
                f"{source}: an anchor contains an alias of itself (line {node.start_mark.line + 1}): it "
                "would expand forever"
            )
        if key in sizes:
            return sizes[key]
        open_.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total += sum(size(v, depth + 1) for v in node.value)
        sizes[key] = total
        open_.discard(key)
        if total > max_nodes:
            raise TooLarge(
                f"{source}: its anchors and aliases expand to over {max_nodes:,} nodes: refused before "
                f"expanding (a YAML bomb, not a training config; {hint('YAML_NODES')})"
            )
        return total

    size(root, 0)


def read_text_lines(path: str | Path, *, max_line_bytes: int | None = None) -> Iterator[str]:
    """The lines of a UTF-8 text file (newlines kept), refusing one longer than `max_line_bytes` (default
    `FOUNDRY_MAX_LINE_MB` MiB, `stackbase.limits`) without reading past the limit.

    Raises:
        TooLarge: A line over the limit (naming the file, the line number and how to raise the limit).
        ValueError: A line that is not UTF-8 (naming the file and the line).
    """
    raise_with = hint("LINE_MB") if max_line_bytes is None else ""
    max_line_bytes = limit_of("LINE_MB") << 20 if max_line_bytes is None else max_line_bytes
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
                    + (f" ({raise_with})" if raise_with else "")
                )
            try:
                yield line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise NotJSON(f"{path}:{n}: not UTF-8 text (byte {err.start} of the line)") from None


_NOT_FLOW = bytes(c for c in range(256) if c not in b"[]{}")
_BRACKETS = bytes(range(256)).replace(b"{", b"[").replace(b"}", b"]")
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"')
_STRING = re.compile(rb'"[^"]*"')


def json_depth(text: bytes, *, limit: int) -> int:
    """How deeply the arrays and objects of JSON `text` nest (a scalar: 0), counting at most to `limit + 1`;
    -1 when the brackets do not balance (the parser then says where).

    Computed without parsing: escapes and everything but brackets and quotes are dropped, then strings
    (adjacent quote pairs; a string holding brackets by pattern), then one level of innermost `[]` per pass.
    """
    if b"\\" in text:
        text = text.replace(b"\\\\", b"")
    if b"\\" in text:
        text = text.replace(b'\\"', b"")
    text = text.translate(_BRACKETS, _NOT_STRUCTURE)
    while b'""' in text:
        text = text.replace(b'""', b"")
    if b'"' in text:
        text = _STRING.sub(b"", text)
    depth = 0
    while text and depth <= limit:
        # every innermost pair, once: one level per pass
        inner = text.replace(b"[]", b"")
        if inner == text:
            return -1
        text, depth = inner, depth + 1
    return limit + 1 if text else depth


def parse_json(text: str | bytes, *, source: str, max_depth: int | None = None) -> Any:
    """The value of JSON `text` from `source` (a file's path or URL, for messages), its nesting checked first
    (at most `max_depth` levels; default `FOUNDRY_MAX_JSON_DEPTH`, `stackbase.limits`).

    Raises:
        TooLarge: Nested deeper than `max_depth`.
        NotJSON: Not UTF-8, or not JSON (the message names `source` and the line and column).
    """
    if isinstance(text, str):
        raw = text.encode("utf-8", "surrogatepass")
    else:
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise NotJSON(f"{source}: not UTF-8 text (byte {err.start}): not a JSON file") from None
    raise_with = f"; {hint('JSON_DEPTH')}" if max_depth is None else ""
    max_depth = limit_of("JSON_DEPTH") if max_depth is None else max_depth
    if json_depth(raw, limit=max_depth) > max_depth:
        raise TooLarge(
            f"{source}: JSON nested too deeply (over {max_depth} levels): refused before parsing{raise_with}"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise NotJSON(f"{source}: not valid JSON ({err.msg}: line {err.lineno} column {err.colno})") from err
    except RecursionError:
        raise TooLarge(f"{source}: JSON nested too deeply to parse") from None
    except ValueError as err:
        # an integer of over 4,300 digits
        raise NotJSON(f"{source}: not valid JSON ({err})") from None


def json_max_bytes() -> int:
    """The most bytes one JSON file may have (`FOUNDRY_MAX_JSON_MB`, `stackbase.limits`)."""
    return int(limit_of("JSON_MB")) << 20


def read_capped(path: str | os.PathLike[str], *, max_bytes: int | None = None, source: str = "") -> bytes:
    """The bytes of the file at `path`, at most `max_bytes` of them (default `json_max_bytes`); `source` names
    it in messages (default: the path).

    Raises:
        TooLarge: It is larger (nothing beyond `max_bytes` + 1 bytes is read).
        OSError: It cannot be read (FileNotFoundError when absent).
    """
    source = source or os.fspath(path)
    raise_with = f"; {hint('JSON_MB')}" if max_bytes is None else ""
    max_bytes = json_max_bytes() if max_bytes is None else max_bytes
    with open(path, "rb") as f:
        raw = f.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise TooLarge(f"{source}: over {max_bytes:,} bytes: not a file of this kind{raise_with}")
    return raw


def read_json(
    path: str | os.PathLike[str],
    *,
    max_depth: int | None = None,
    max_bytes: int | None = None,
    source: str = "",
) -> Any:
    """The value of the JSON file at `path`, bounded: at most `max_bytes` read (default `FOUNDRY_MAX_JSON_MB`
    MiB), nesting at most `max_depth` (see `parse_json`); `source` names it in messages (default: the path).

    Raises:
        TooLarge: Over a limit (nothing beyond `max_bytes` is read).
        NotJSON: Not UTF-8 JSON (naming the file, the line and column).
        OSError: It cannot be read (FileNotFoundError when absent).
    """
    source = source or os.fspath(path)
    return parse_json(
        read_capped(path, max_bytes=max_bytes, source=source), source=source, max_depth=max_depth
    )


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict = 2, 60, 60, 4, 4


def short_repr(value: Any) -> str:
    """A `repr` bounded in length and depth, for messages about a value from an untrusted file (a crafted
    one can nest a value 100,000 deep, which the builtin `repr` cannot print)."""
    return _SHORT.repr(value)
