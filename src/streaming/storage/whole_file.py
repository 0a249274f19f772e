"""Whole files by URL: ``open_url`` reads or writes one small object in one go (task data, data-prep inputs).

Design note: shard transfer keeps ``streaming.storage.transfer`` (atomic renames, retries with backoff, hash
checks, byte ranges, locks); a file a program simply reads or writes whole goes through smart_open, the
stack's chosen library for that. smart_open gets the clients our backends build (``get_backend``), so both
paths see the same endpoint (the URL's store profile, else ``S3_ENDPOINT_URL``), ``S3_UNSIGNED``, AWS chain,
``STORAGE_EMULATOR_HOST`` and Azure account environment, and its SDK failures go through the backend's
``sdk_errors``: ``FileNotFoundError`` / ``PermissionError`` / ``TransientStorageError`` naming the redacted
URL. A missing SDK names the extra to install, as for shard transfer.

Per scheme:

- ``s3://``, ``gs://``, ``azure://``: smart_open. ``s3://<key id>:<secret>@bucket/key`` (smart_open's
  grammar) signs with those credentials; errors show ``s3://***@bucket/key``.
- plain paths and ``file://``: the builtin ``open``; a write goes to a temporary name renamed into place on
  success (the object-store behaviour: the file appears whole or not at all).
- ``http(s)://`` (read only) and ``hf://datasets/...``: through the streaming backends and a private temporary
  file, because smart_open's HTTP transport needs ``requests`` (not a core dependency; the backend uses the
  standard library) and smart_open has no ``hf://`` transport.

Bytes are passed through as stored: smart_open's decompression by file extension is off, as for local files.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import IO, Any

from streaming.storage.backends import AzureBackend, Backend, GCSBackend, S3Backend, get_backend
from streaming.storage.transfer import RetryPolicy, download_file, upload_file
from streaming.storage.url import redact, scheme_of

__all__ = ["open_url"]

_MODES = ("rb", "r", "wb", "w")
_SMART_OPEN_SCHEMES = ("s3", "gs", "azure")
_counter = itertools.count()


def open_url(
    url: str, mode: str = "rb", *, encoding: str | None = None, timeout: float = 60.0
) -> AbstractContextManager[IO[Any]]:
    """Open the whole file at ``url`` for reading or writing, as ``with open_url(url, "r") as f:``.

    Args:
        url: ``s3://``, ``gs://``, ``azure://``, ``http(s)://`` (read only), ``hf://datasets/...``,
            ``file://`` or a local path.
        mode: ``"rb"``, ``"r"``, ``"wb"`` or ``"w"``. A write is published when the block exits without an
            exception (an object upload, or a rename for local files); an exception leaves nothing behind.
        encoding: Text encoding for ``"r"`` / ``"w"`` (default UTF-8).
        timeout: Seconds for one connect/read of the storage client.

    Raises:
        ValueError: An unsupported mode or URL scheme, or an encoding with a binary mode.
        ImportError: The store's SDK is missing (the message names the extra to install).
        FileNotFoundError: Reading an object that does not exist (the redacted URL in the message).
        PermissionError: Access denied, or a write to a read-only scheme.
        streaming.storage.errors.TransientStorageError: A connection, timeout or throttling failure.
    """
    if mode not in _MODES:
        raise ValueError(f"open_url({redact(url)!r}): mode must be one of {_MODES}, got {mode!r}")
    if encoding is not None and "b" in mode:
        raise ValueError(f"open_url({redact(url)!r}): mode {mode!r} is binary and takes no encoding")
    text_encoding = None if "b" in mode else encoding or "utf-8"
    scheme = scheme_of(url)
    if scheme in ("", "file"):
        path = url.removeprefix("file://")
        if mode[0] == "r":
            return open(path, mode, encoding=text_encoding)  # the caller's `with` closes it
        return _write_local(path, mode, text_encoding)
    if scheme in _SMART_OPEN_SCHEMES:
        return _open_smart(url, mode, text_encoding, timeout)
    if mode[0] == "w" and scheme in ("http", "https"):
        raise PermissionError(
            f"{redact(url)}: http(s):// URLs are read only; write to s3://, gs:// or azure://"
        )
    get_backend(url)  # an unsupported scheme fails here, before a temporary folder is made
    return _via_backend(url, mode, text_encoding, timeout)


@contextmanager
def _write_local(path: str, mode: str, encoding: str | None) -> Iterator[IO[Any]]:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}-{next(_counter)}"
    try:
        with open(tmp, mode, encoding=encoding) as f:
            yield f
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _s3_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``(url without credentials, (key id, secret) or None)`` by smart_open's rule for
    ``s3://[key:secret@]bucket/key`` (a secret may hold ``/``, so ``urlsplit`` cannot find it)."""
    rest = url[len("s3://") :]
    auth, at, tail = rest.partition("@")
    key_id, colon, secret = auth.partition(":")
    if at and colon and "/" not in key_id:
        return f"s3://{tail}", (key_id, secret)
    return url, None


def _transport(backend: Backend, url: str, mode: str, timeout: float) -> tuple[str, str, dict[str, Any]]:
    """``(URL for smart_open, URL for messages, transport_params)`` with the backend's client."""
    if isinstance(backend, S3Backend):
        target, credentials = _s3_credentials(url)
        shown = f"s3://***@{target[len('s3://') :]}" if credentials else url
        client = backend.client(timeout, write=mode[0] == "w", credentials=credentials, url=target)
        return target, shown, {"client": client}
    if isinstance(backend, GCSBackend):
        return url, url, {"client": backend.client}
    if isinstance(backend, AzureBackend):
        return url, url, {"client": backend.service}
    raise AssertionError(f"no smart_open transport for {type(backend).__name__}")


@contextmanager
def _open_smart(url: str, mode: str, encoding: str | None, timeout: float) -> Iterator[IO[Any]]:
    # smart_open takes ~1.5 s to import: imported here so that `import streaming` stays cheap.
    import smart_open

    backend = get_backend(url)
    target, shown, params = _transport(backend, url, mode, timeout)
    opener: Any = smart_open.open  # its overloads want a literal mode
    with backend.sdk_errors(shown):
        try:
            with opener(target, mode, encoding=encoding, compression="disable", transport_params=params) as f:
                yield f
        except OSError as err:
            # smart_open's S3 reader wraps botocore's error
            sdk_error = getattr(err, "backend_error", None)
            if sdk_error is None:
                raise
            raise sdk_error from None


@contextmanager
def _via_backend(url: str, mode: str, encoding: str | None, timeout: float) -> Iterator[IO[Any]]:
    policy = RetryPolicy(timeout=timeout)
    # mode 0700: private to this user
    with tempfile.TemporaryDirectory(prefix="open_url-") as scratch:
        path = os.path.join(scratch, "object")
        if mode[0] == "r":
            download_file(url, path, policy=policy)
        with open(path, mode, encoding=encoding) as f:
            yield f
        if mode[0] == "w":
            upload_file(path, url, policy=policy)
