"""Azure Blob Storage as a backend: ``azure://<container>/<blob>``, through azure-storage-blob.

Design note: one ``BlobServiceClient`` per backend, from a connection string or an account name with a key
(else ``DefaultAzureCredential``); ``service`` is public so that ``streaming.storage.whole_file`` reads
through smart_open with the same client. The SDK's HTTP errors are mapped with the shared ``TRANSIENT_HTTP``
statuses.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streaming.storage.backends.base import TRANSIENT_HTTP, Backend, BoundedWriter, check_stated_size
from streaming.storage.errors import TransientStorageError, missing_extra
from streaming.storage.url import redact, split_bucket

__all__ = ["AzureBackend"]


class AzureBackend(Backend):
    """Azure Blob Storage: ``azure://<container>/<blob>`` for both directions.

    The account comes from ``AZURE_STORAGE_CONNECTION_STRING``, or ``AZURE_ACCOUNT_NAME`` with
    ``AZURE_ACCOUNT_ACCESS_KEY`` (else ``DefaultAzureCredential``).
    """

    def __init__(self) -> None:
        try:
            from azure.storage.blob import BlobServiceClient
        except ImportError:
            raise missing_extra("azure-storage-blob", "azure", "azure") from None
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        if conn:
            self.service = BlobServiceClient.from_connection_string(conn)
        else:
            account = os.environ.get("AZURE_ACCOUNT_NAME")
            if not account:
                raise PermissionError("azure:// needs AZURE_STORAGE_CONNECTION_STRING or AZURE_ACCOUNT_NAME")
            credential: Any = os.environ.get("AZURE_ACCOUNT_ACCESS_KEY")
            if credential is None:
                from azure.identity import DefaultAzureCredential

                credential = DefaultAzureCredential()
            self.service = BlobServiceClient(
                f"https://{account}.blob.core.windows.net", credential=credential
            )

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        from azure.core import exceptions as aexc

        try:
            yield
        except aexc.ResourceNotFoundError:
            raise FileNotFoundError(f"{redact(url)}: not found") from None
        except aexc.ClientAuthenticationError:
            raise PermissionError(f"{redact(url)}: access denied") from None
        except (aexc.ServiceRequestError, aexc.ServiceResponseError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
        except aexc.HttpResponseError as err:
            if err.status_code in TRANSIENT_HTTP:
                raise TransientStorageError(f"{redact(url)}: HTTP {err.status_code}") from None
            raise

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        container, blob = split_bucket(url)
        client = self.service.get_blob_client(container, blob)

        def get() -> None:
            # the stubs say int; the SDK serializes the server timeout with int(), so float is fine
            stream = client.download_blob(timeout=timeout)  # type: ignore[call-overload]
            check_stated_size(url, stream.size, max_bytes)
            with open(path, "wb") as f:
                stream.readinto(BoundedWriter(f, max_bytes, url))

        self._call(url, get)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        container, blob = split_bucket(url)
        client = self.service.get_blob_client(container, blob)

        def put() -> None:
            with open(path, "rb") as f:
                client.upload_blob(f, overwrite=True, timeout=timeout)  # type: ignore[arg-type]  # as above

        self._call(url, put)

    def list(self, url: str) -> list[str]:
        container, prefix = split_bucket(url)
        names = self._call(
            url,
            lambda: [
                b.name
                for b in self.service.get_container_client(container).list_blobs(name_starts_with=prefix)
            ],
        )
        return [f"azure://{container}/{n}" for n in sorted(names)]

    def delete(self, url: str) -> None:
        container, blob = split_bucket(url)
        self._call(url, lambda: self.service.get_blob_client(container, blob).delete_blob())
