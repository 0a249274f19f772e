"""Storage backends: the official SDK of each store behind one small interface.

Each backend maps its SDK's failures to three outcomes: ``FileNotFoundError`` / ``PermissionError``
(permanent, never retried, the URL in the message), ``TransientStorageError`` (retried by
``streaming.storage.transfer``) and anything else (a bug: propagated). SDK-internal retries are turned off
where the SDK allows it, so one policy (ours) decides, and every retry is logged.
SDKs are imported lazily; a missing one names the extra to install.

The clients (``S3Backend.client``, ``GCSBackend.client``, ``AzureBackend.service``) and the error mapping
(``Backend.sdk_errors``) are public so that ``streaming.storage.whole_file`` opens whole objects through
smart_open with the same endpoint, credentials and error messages as shard transfer.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from streaming.storage.errors import TransientStorageError, missing_extra
from streaming.storage.profiles import ENV_VAR as PROFILES_ENV_VAR
from streaming.storage.profiles import StorageProfile, profile_for
from streaming.storage.url import redact, scheme_of, split_bucket

__all__ = ["Backend", "get_backend"]

_TRANSIENT_HTTP = {408, 429, 500, 502, 503, 504}


class Backend(ABC):
    """Copy single objects between a URL and a local file; list a prefix."""

    @abstractmethod
    def download(self, url: str, path: str, *, timeout: float) -> None:
        """Write the object at ``url`` to ``path`` (the caller handles temp names and renames)."""

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        raise PermissionError(f"{redact(url)}: this backend is read-only")

    def list(self, url: str) -> list[str]:
        """Full URLs of the objects under the prefix ``url``."""
        raise NotImplementedError(f"{redact(url)}: listing is not supported for {scheme_of(url)}://")

    def delete(self, url: str) -> None:
        raise PermissionError(f"{redact(url)}: this backend is read-only")

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        """Inside the block, the SDK's failures become ``FileNotFoundError`` / ``PermissionError`` /
        ``TransientStorageError`` naming ``redact(url)``; anything else propagates unchanged."""
        yield

    def _call(self, url: str, fn: Callable[[], Any]) -> Any:
        with self.sdk_errors(url):
            return fn()


class LocalBackend(Backend):
    """Plain paths and ``file://`` URLs."""

    @staticmethod
    def _path(url: str) -> str:
        return url[len("file://") :] if url.startswith("file://") else url

    def download(self, url: str, path: str, *, timeout: float) -> None:
        src = self._path(url)
        if not os.path.exists(src):
            raise FileNotFoundError(f"{src}: no such file")
        shutil.copyfile(src, path)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        dst = self._path(url)
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = f"{dst}.tmp-{os.getpid()}"
        shutil.copyfile(path, tmp)
        os.replace(tmp, dst)

    def list(self, url: str) -> list[str]:
        root = self._path(url)
        return sorted(os.path.join(d, f) for d, _, files in os.walk(root) for f in files)

    def delete(self, url: str) -> None:
        os.remove(self._path(url))


class S3Backend(Backend):
    """AWS S3 and S3-compatible stores (R2, B2, CoreWeave, MinIO, ...) through boto3.

    Endpoint, region, credentials and addressing style per URL: ``streaming.storage.profiles.profile_for``
    (``STREAMING_STORAGE_PROFILES``, else ``S3_ENDPOINT_URL`` or boto3's own ``AWS_ENDPOINT_URL*``, and the
    standard AWS chain). ``S3_UNSIGNED=1`` (or no credentials at all) uses unsigned requests for public buckets.
    """

    def __init__(self) -> None:
        try:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config
        except ImportError:
            raise missing_extra("boto3", "s3", "s3") from None
        self._boto3, self._unsigned, self._config = boto3, UNSIGNED, Config
        self._clients: dict[tuple[Any, ...], Any] = {}

    def client(
        self,
        timeout: float = 60.0,
        *,
        write: bool = False,
        credentials: tuple[str, str] | None = None,
        url: str = "",
    ) -> Any:  # a boto3 S3 client
        """The boto3 client for ``url``'s store (``streaming.storage.profiles.profile_for``), for reading
        (unsigned for a public store) or writing (signed when credentials exist); ``credentials`` =
        ``(access key id, secret)`` replaces the profile's for this client."""
        return self._client(url, timeout, write=write, credentials=credentials)

    def _client(
        self, url: str, timeout: float, *, write: bool, credentials: tuple[str, str] | None = None
    ) -> Any:
        profile = profile_for(url)
        secrets = (*credentials, None) if credentials else profile.credentials()
        unsigned = not write and profile.unsigned
        key = (timeout, unsigned, profile, secrets)
        if key not in self._clients:
            self._clients[key] = self._build(profile, secrets, timeout, unsigned)
        return self._clients[key]

    def _build(
        self,
        profile: StorageProfile,
        secrets: tuple[str, str, str | None] | None,
        timeout: float,
        unsigned: bool,
    ) -> Any:
        from botocore.exceptions import ProfileNotFound

        try:
            session = self._boto3.session.Session(
                *(secrets or ()), region_name=profile.region, profile_name=profile.aws_profile
            )
        except ProfileNotFound:
            raise PermissionError(
                f"storage profile {profile.prefix!r}: AWS profile {profile.aws_profile!r} is not in "
                "~/.aws/config or ~/.aws/credentials (AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE)"
            ) from None
        if not unsigned and session.get_credentials() is None:
            unsigned = True  # no credentials at all: a public bucket
        config = self._config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"total_max_attempts": 1},
            signature_version=self._unsigned if unsigned else None,
            s3={"addressing_style": profile.addressing_style} if profile.addressing_style else None,
        )
        return session.client("s3", endpoint_url=profile.endpoint_url, config=config)

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except ClientError as err:
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            code = str(err.response.get("Error", {}).get("Code", ""))
            if status == 404 or code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
                raise FileNotFoundError(f"{redact(url)}: not found ({code or status})") from None
            if status == 403 or code in ("403", "AccessDenied"):
                raise PermissionError(
                    f"{redact(url)}: access denied; check the credentials for this bucket"
                ) from None
            if status in _TRANSIENT_HTTP or code in (
                "SlowDown",
                "Throttling",
                "RequestTimeout",
                "InternalError",
            ):
                raise TransientStorageError(f"{redact(url)}: {code or status}") from None
            raise
        except NoCredentialsError:
            raise PermissionError(
                f"{redact(url)}: no AWS credentials found (set S3_UNSIGNED=1 for public buckets)"
            ) from None
        except BotoCoreError as err:  # connection resets, timeouts, truncated bodies
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None

    def download(self, url: str, path: str, *, timeout: float) -> None:
        bucket, key = split_bucket(url)
        client = self._client(url, timeout, write=False)

        def get() -> None:
            obj = client.get_object(Bucket=bucket, Key=key)
            with open(path, "wb") as f:
                for chunk in obj["Body"].iter_chunks(1 << 20):
                    f.write(chunk)
            if obj.get("ContentLength") is not None and os.path.getsize(path) != obj["ContentLength"]:
                raise TransientStorageError(f"{redact(url)}: body shorter than Content-Length")

        self._call(url, get)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        bucket, key = split_bucket(url)
        client = self._client(url, timeout, write=True)
        self._call(url, lambda: client.upload_file(path, bucket, key))

    def list(self, url: str) -> list[str]:
        bucket, prefix = split_bucket(url)
        client = self._client(url, 60.0, write=False)
        keys: list[str] = []

        def run() -> None:
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", []))

        self._call(url, run)
        return [f"s3://{bucket}/{k}" for k in sorted(keys)]

    def delete(self, url: str) -> None:
        bucket, key = split_bucket(url)
        client = self._client(url, 60.0, write=True)
        self._call(url, lambda: client.delete_object(Bucket=bucket, Key=key))


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

    def download(self, url: str, path: str, *, timeout: float) -> None:
        bucket, key = split_bucket(url)
        blob = self.client.bucket(bucket).blob(key)
        self._call(url, lambda: blob.download_to_filename(path, timeout=timeout, retry=None))

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
            if err.status_code in _TRANSIENT_HTTP:
                raise TransientStorageError(f"{redact(url)}: HTTP {err.status_code}") from None
            raise

    def download(self, url: str, path: str, *, timeout: float) -> None:
        container, blob = split_bucket(url)
        client = self.service.get_blob_client(container, blob)

        def get() -> None:
            with open(path, "wb") as f:
                # the stubs say int; the SDK serializes the server timeout with int(), so float is fine
                client.download_blob(timeout=timeout).readinto(f)  # type: ignore[call-overload]

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


class HFBackend(Backend):
    """Hugging Face Hub datasets: ``hf://datasets/<org>/<repo>/<path>`` (``HF_TOKEN`` for private repos)."""

    def __init__(self) -> None:
        try:
            import huggingface_hub
        except ImportError:
            raise missing_extra("huggingface_hub", "hf", "hf") from None
        self._hub = huggingface_hub

    @staticmethod
    def _parse(url: str) -> tuple[str, str]:
        parts = url[len("hf://") :].split("/")
        if len(parts) < 4 or parts[0] != "datasets":
            raise ValueError(f"{redact(url)}: expected hf://datasets/<org>/<repo>/<path>")
        return f"{parts[1]}/{parts[2]}", "/".join(parts[3:])

    def download(self, url: str, path: str, *, timeout: float) -> None:
        repo, filename = self._parse(url)
        try:
            cached = self._hub.hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset")
        except self._hub.errors.EntryNotFoundError:
            raise FileNotFoundError(f"{redact(url)}: not found") from None
        except (self._hub.errors.LocalEntryNotFoundError, ConnectionError, TimeoutError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
        shutil.copyfile(cached, path)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        repo, filename = self._parse(url)
        self._hub.HfApi().upload_file(
            path_or_fileobj=path, path_in_repo=filename, repo_id=repo, repo_type="dataset"
        )


class HTTPBackend(Backend):
    """Plain HTTP(S) downloads (read only)."""

    def download(self, url: str, path: str, *, timeout: float) -> None:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp, open(path, "wb") as f:
                shutil.copyfileobj(resp, f, 1 << 20)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise FileNotFoundError(f"{redact(url)}: HTTP 404") from None
            if err.code in (401, 403):
                raise PermissionError(f"{redact(url)}: HTTP {err.code}") from None
            if err.code in _TRANSIENT_HTTP:
                raise TransientStorageError(f"{redact(url)}: HTTP {err.code}") from None
            raise
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None


_BACKENDS: dict[str, type[Backend]] = {
    "": LocalBackend,
    "file": LocalBackend,
    "s3": S3Backend,
    "gs": GCSBackend,
    "azure": AzureBackend,
    "hf": HFBackend,
    "http": HTTPBackend,
    "https": HTTPBackend,
}


@cache
def _backend(scheme: str, env_key: tuple[str, ...], pid: int) -> Backend:
    # env_key and pid are cache keys only: a changed endpoint/credential env builds a new client, and a forked
    # DataLoader worker never shares the parent's pooled sockets (responses would cross between processes).
    del env_key, pid
    return _BACKENDS[scheme]()


def get_backend(url: str) -> Backend:
    """The backend for ``url``'s scheme (clients are cached per scheme and relevant environment).

    Raises:
        ValueError: For an unsupported scheme, listing the supported ones.
    """
    scheme = scheme_of(url)
    if scheme not in _BACKENDS:
        raise ValueError(
            f"{redact(url)}: unsupported URL scheme {scheme!r}; use one of s3://, gs://, azure://, "
            "hf://datasets/..., http(s)://, file:// or a local path"
        )
    keys = (
        "S3_ENDPOINT_URL",
        "S3_UNSIGNED",
        PROFILES_ENV_VAR,
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "STORAGE_EMULATOR_HOST",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_ACCOUNT_NAME",
    )
    return _backend(scheme, tuple(os.environ.get(k, "") for k in keys), os.getpid())
