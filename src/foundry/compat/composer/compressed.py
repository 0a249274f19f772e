"""Composer's compressed checkpoints (`.pt.zst`, `.pt.lz4`) decompressed with a bound,
and remote ones fetched.

Design note: Composer compresses a checkpoint by piping `torch.save`'s bytes through the `zstd` or `lz4`
command line tool, so the file is one zstd or lz4 *frame* stream around an ordinary zip-format `.pt`. It is
recognised by its frame magic (not its name) and inflated in 1 MiB chunks into an anonymous temporary file (a
checkpoint is too large for RAM), never past `ZIP_RATIO` times its compressed size (`FOUNDRY_MAX_ZIP_RATIO`):
a crafted stream that would expand further is refused as a bomb, naming the file, before the disk fills. zstd
is read with the `zstandard` package (a dependency); lz4 with the `lz4` package when installed, else the error
names the package to install. The result goes through the same allow-list unpickler as a plain `.pt`.

Remote Composer checkpoints (`s3://...` or any object-store URL the storage layer takes) are downloaded
through `foundry.checkpoint.store.CheckpointStore` (its credentials, retries and key-name checks) into a
scratch folder: one file, or every file of a sharded folder.
"""

from __future__ import annotations

import os
import tempfile
from typing import IO

from stackbase.bounded import TooLarge
from stackbase.limits import hint, limit

__all__ = ["COMPOSER_SUFFIXES", "compression_of", "decompressed", "fetch_remote"]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
LZ4_MAGIC = b"\x04\x22\x4d\x18"
COMPOSER_SUFFIXES = (".pt", ".pt.zst", ".pt.lz4", ".tar")
"""Names of Composer checkpoint files (a remote URL with one of them is read as a Composer checkpoint)."""
_CHUNK = 1 << 20


def compression_of(head: bytes) -> str | None:
    """`zstd` or `lz4` when a file starting with `head` is such a frame stream, else None."""
    if head[:4] == ZSTD_MAGIC:
        return "zstd"
    if head[:4] == LZ4_MAGIC:
        return "lz4"
    return None


def _reader(kind: str, src: IO[bytes], path: str) -> IO[bytes]:
    if kind == "zstd":
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
    try:
        # optional: not a dependency
        import lz4.frame
    except ImportError:
        raise ValueError(
            f"{path}: an lz4-compressed Composer checkpoint; install the lz4 package to read it "
            "(pip install lz4), or decompress it first (lz4 -d FILE.pt.lz4 FILE.pt)"
        ) from None
    return lz4.frame.open(src, "rb")


def decompressed(path: str, kind: str) -> IO[bytes]:
    """The decompressed bytes of the `kind` (`zstd`/`lz4`) stream at `path`, in an anonymous temporary file
    (removed when closed; the caller closes it).

    Raises:
        TooLarge: The stream inflates past `ZIP_RATIO` times the file's size (nothing more is written).
        ValueError: A damaged stream, or lz4 without the `lz4` package.
    """
    size = os.path.getsize(path)
    bound = limit("ZIP_RATIO") * max(size, 1)
    out = tempfile.TemporaryFile()
    try:
        with open(path, "rb") as src, _reader(kind, src, path) as stream:
            total = 0
            while chunk := stream.read(_CHUNK):
                total += len(chunk)
                if total > bound:
                    raise TooLarge(
                        f"{path}: this {kind} stream of {size} bytes inflates past {bound} bytes (over "
                        f"{limit('ZIP_RATIO')}x): a decompression bomb, not a checkpoint; "
                        + hint("ZIP_RATIO")
                    )
                out.write(chunk)
    except TooLarge:
        out.close()
        raise
    except Exception as err:
        # zstandard.ZstdError, lz4's RuntimeError, a truncated stream's EOFError/OSError
        out.close()
        if isinstance(err, ValueError) and str(err).startswith(path):
            # lz4 missing: its own message
            raise
        raise ValueError(f"{path}: a damaged {kind} stream ({type(err).__name__}: {err})") from None
    out.seek(0)
    return out


def fetch_remote(url: str, scratch: str) -> str:
    """Downloads the Composer checkpoint at `url` (a file, or a sharded folder with `.metadata`) into
    `scratch` through the checkpoint store; returns the local file or folder.

    Raises:
        ValueError: Nothing is at `url`, or a folder without a `.metadata`
            (not a sharded Composer checkpoint).
    """
    # local: imports the storage layer
    from foundry.checkpoint.store import CheckpointStore

    url = url.rstrip("/")
    folder = CheckpointStore(url)
    files = folder.list()
    if files:
        if ".metadata" not in files:
            raise ValueError(f"{url}: a folder without .metadata: not a sharded Composer checkpoint")
        local = os.path.join(scratch, "composer-sharded")
        for rel in files:
            os.makedirs(os.path.dirname(os.path.join(local, rel)), exist_ok=True)
            folder.get(rel, os.path.join(local, rel))
        return local
    parent, _, name = url.rpartition("/")
    if "://" not in parent or not name:
        raise ValueError(f"{url}: not a Composer checkpoint URL (a .pt file or a sharded folder)")
    store = CheckpointStore(parent)
    local = os.path.join(scratch, name)
    try:
        store.get(name, local)
    except FileNotFoundError:
        raise ValueError(f"{url}: no such file or folder") from None
    return local
