"""Google Cloud Storage as a backend, through google-cloud-storage.

Design note: the SDK's retries are off (``retry=None``) so that ``streaming.storage.transfer`` decides; with
``STORAGE_EMULATOR_HOST`` set the client is anonymous (fake-gcs-server and similar emulators). ``client`` is
public so that ``streaming.storage.whole_file`` reads through smart_open with the same client.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from streaming.storage.backends.base import Backend, BoundedWriter
from streaming.storage.errors import TransientStorageError, missing_extra
from streaming.storage.url import redact, split_bucket

__all__ = ["GCSBackend"]


class GCSBackend(Backend):
    """Google Cloud Storage through google-cloud-storage (``STORAGE_EMULATOR_HOST`` for emulators)."""

    def __init__(self) -> None:
        try:
            from google.cloud import storage
        except ImportError:
            raise missing_extra("google-cloud-storage", "gcs", "gs") from None
        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            self.client = storage.Client(project="emulator", credentials=AnonymousCredentials())
        else:
            self.client = storage.Client()

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        from google.api_core import exceptions as gexc

        try:
            yield
        except gexc.NotFound:
            raise FileNotFoundError(f"{redact(url)}: not found") from None
        except gexc.Forbidden:
            raise PermissionError(f"{redact(url)}: access denied") from None
        except (gexc.ServerError, gexc.TooManyRequests, ConnectionError, TimeoutError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        bucket, key = split_bucket(url)
        blob = self.client.bucket(bucket).blob(key)

        def get() -> None:
            with open(path, "wb") as f:
                out = BoundedWriter(f, max_bytes, url)
                blob.download_to_file(out, timeout=timeout, retry=None)

        self._call(url, get)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        bucket, key = split_bucket(url)
        blob = self.client.bucket(bucket).blob(key)
        self._call(url, lambda: blob.upload_from_filename(path, timeout=timeout, retry=None))

    def list(self, url: str) -> list[str]:
        bucket, prefix = split_bucket(url)
        names = self._call(url, lambda: [b.name for b in self.client.list_blobs(bucket, prefix=prefix)])
        return [f"gs://{bucket}/{n}" for n in sorted(names)]

    def delete(self, url: str) -> None:
        bucket, key = split_bucket(url)
        self._call(url, lambda: self.client.bucket(bucket).blob(key).delete())
