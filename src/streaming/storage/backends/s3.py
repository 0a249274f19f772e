"""AWS S3 and S3-compatible stores (R2, B2, CoreWeave, MinIO, ...) as a backend, through boto3.

Design note: one boto3 client per (timeout, signed or not, storage profile, credentials), built on first use
and cached on the backend, so each store a run touches keeps its own endpoint and connection pool. boto3's own
retries are off (``total_max_attempts=1``): ``streaming.storage.transfer`` decides and logs every retry.
``client`` is public so that ``streaming.storage.whole_file`` reads through smart_open with the same client.

``quick_reader`` reads small ranges (a batch's samples read before their shards arrive) through a presigned
URL on a plain urllib3 pool: ~1.4 ms of CPU a request where botocore's request, signing and response parsing
take ~3.4 ms, which at 8 DataLoader workers on 2 cores was most of the CPU before the first batch. It is best
effort (any failure: None, and the caller reads the downloaded shard), and is not used where a proxy is set in
the environment (botocore would route through it). A presigned URL (SigV4) is made once per object and reused
for ``_PRESIGN_REUSE_S`` (it is valid twice as long); it carries a signature, so it is never logged.

``download`` (a whole object: a shard, an index) takes the same path first (``_quick_download``: 1.9 ms of CPU
for a 31 KB shard where botocore's took 3.9 ms, which a small ``cache_limit`` pays on every re-download). It
answers like botocore's request for what it can tell: 404 is ``FileNotFoundError``, a transient status or a
connection refused, reset, timed out or cut short is ``TransientStorageError`` (retried by
``streaming.storage.transfer``, one request an attempt), the stated size is checked before the body and the
body is written as stored. Anything else (a denied or refused presigned request, a TLS failure, a proxy, no
credentials) runs botocore's request instead, which names the error; after such an answer the bucket's
downloads go through botocore for the backend's life.

Every client's session shares one botocore data loader (``_data_loader``: the parsed service model, endpoint
rules and partitions, read-only once loaded). Building a client from a fresh session parses them again (~0.1 s
of CPU); a forked DataLoader worker inherits the parent's loaded copy, so its clients cost ~0.02 s each.
``warm`` builds the parent's client before its workers fork (``StreamingDataLoader``), even where the parent
itself reads nothing remote (an index already cached): measured 0.12 -> 0.024 s of CPU for a worker's first
presigned read, which a limited cache pays in every worker of every epoch (its first batch is read remotely).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from streaming.storage.backends.base import TRANSIENT_HTTP, Backend, BoundedWriter, check_stated_size
from streaming.storage.errors import TransientStorageError, missing_extra
from streaming.storage.profiles import StorageProfile, profile_for
from streaming.storage.url import redact, split_bucket

__all__ = ["S3Backend"]

_POOL = 64
"""Pooled connections per client: shard prefetches x ranges in flight per shard
(``streaming.storage.ranged``), all kept open for reuse."""


@cache
def _data_loader() -> Any:  # a botocore.loaders.Loader
    """The botocore data loader every client's session shares (a cache of read-only files)."""
    from botocore.loaders import create_loader

    return create_loader()


_PRESIGN_REUSE_S = 300.0
"""Seconds one presigned URL is reused by ``quick_reader`` (it is made valid for twice as long)."""

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


class S3Backend(Backend):
    """AWS S3 and S3-compatible stores (R2, B2, CoreWeave, MinIO, ...) through boto3.

    Endpoint, region, credentials and addressing style per URL: ``streaming.storage.profiles.profile_for``
    (``STREAMING_STORAGE_PROFILES``, else ``S3_ENDPOINT_URL`` or boto3's own ``AWS_ENDPOINT_URL*``, and the
    standard AWS chain). ``S3_UNSIGNED=1`` (or no credentials at all) uses unsigned requests for public
    buckets.
    """

    ranged_reads = True

    def __init__(self) -> None:
        try:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config
        except ImportError:
            raise missing_extra("boto3", "s3", "s3") from None
        self._boto3, self._unsigned, self._config = boto3, UNSIGNED, Config
        self._clients: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()  # one build per key when parallel range reads ask at once
        self._presigned: dict[tuple[str, float, StorageProfile], tuple[str, float]] = {}
        self._http: Any = None  # the urllib3 pool of quick_reader and downloads, built on first use
        self._quick_refused: set[str] = set()  # buckets whose downloads go through botocore (_quick_download)

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
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                if key not in self._clients:
                    self._clients[key] = self._build(profile, secrets, timeout, unsigned)
                client = self._clients[key]
        return client

    def _build(
        self,
        profile: StorageProfile,
        secrets: tuple[str, str, str | None] | None,
        timeout: float,
        unsigned: bool,
    ) -> Any:
        import botocore.session
        from botocore.exceptions import ProfileNotFound

        core = botocore.session.Session()
        core.register_component("data_loader", _data_loader())
        try:
            session = self._boto3.session.Session(
                *(secrets or ()),
                region_name=profile.region,
                profile_name=profile.aws_profile,
                botocore_session=core,
            )
            core.get_scoped_config()  # reads the profile: an unknown one shows here, not at the first request
            credentials = None if unsigned else session.get_credentials()
        except ProfileNotFound:
            raise PermissionError(
                f"storage profile {profile.prefix!r}: AWS profile "
                f"{profile.aws_profile or os.environ.get('AWS_PROFILE')!r} is not in "
                "~/.aws/config or ~/.aws/credentials (AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE)"
            ) from None
        if not unsigned and credentials is None:
            unsigned = True  # no credentials at all: a public bucket
        config = self._config(
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"total_max_attempts": 1},
            max_pool_connections=_POOL,
            signature_version=self._unsigned if unsigned else "s3v4",  # presigned URLs too (not SigV2)
            s3={"addressing_style": profile.addressing_style} if profile.addressing_style else None,
        )
        paths = _data_loader().search_paths  # each boto3 session appends its data folder: keep it once
        paths[:] = dict.fromkeys(paths)
        return session.client("s3", endpoint_url=profile.endpoint_url, config=config)

    @contextmanager
    def sdk_errors(self, url: str) -> Iterator[None]:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        try:
            yield
        except ClientError as err:
            raise _client_error(err, url) from None
        except S3UploadFailedError as err:  # upload_file's wrapper around the ClientError of a failed part
            cause = err.__cause__ or err.__context__
            if isinstance(cause, ClientError):
                raise _client_error(cause, url) from None
            raise TransientStorageError(f"{redact(url)}: {err}") from None
        except NoCredentialsError:
            raise PermissionError(
                f"{redact(url)}: no AWS credentials found (set S3_UNSIGNED=1 for public buckets)"
            ) from None
        except BotoCoreError as err:  # connection resets, timeouts, truncated bodies
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        if self._quick_download(url, path, timeout=timeout, max_bytes=max_bytes):
            return
        bucket, key = split_bucket(url)
        client = self._client(url, timeout, write=False)

        def get() -> None:
            obj = client.get_object(Bucket=bucket, Key=key)
            try:
                _write_body(url, path, obj["Body"].iter_chunks(1 << 20), obj.get("ContentLength"), max_bytes)
            finally:
                obj["Body"].close()  # a refused body is not read to its end

        self._call(url, get)

    def _quick_download(self, url: str, path: str, *, timeout: float, max_bytes: int | None) -> bool:
        """Download ``url`` whole through its presigned URL on the plain pool (see the module note); True once
        ``path`` holds it. False, having written nothing, where botocore's request must run instead: a proxy
        in the environment, no presigned URL, a TLS failure or an answer that is not 200, 404 or a transient
        status (botocore's own request then names the error: denied, a bad request...), and from then on
        for the bucket (this backend's life). 404 raises ``FileNotFoundError``; a transient status, a
        connection refused, reset or timed out, or a body cut short, ``TransientStorageError``
        (``streaming.storage.transfer`` retries).
        The bytes are written as stored (no content decoding), as botocore does."""
        bucket = split_bucket(url)[0]
        if bucket in self._quick_refused or _proxy_set():
            return False
        try:
            presigned, http = self._presign(url, timeout), self._pool()
        except Exception:  # no credentials, a bad profile...: botocore's request names it
            return False
        import urllib3

        try:
            resp = http.request(
                "GET", presigned, preload_content=False, retries=False, timeout=timeout, decode_content=False
            )
        except urllib3.exceptions.SSLError:  # botocore may trust other certificates (a profile's ca_bundle)
            self._quick_refused.add(bucket)
            return False
        except urllib3.exceptions.HTTPError as err:  # refused, reset, timed out: as botocore's would be
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
        whole = False
        try:
            if resp.status in TRANSIENT_HTTP:
                raise TransientStorageError(f"{redact(url)}: HTTP {resp.status}")
            if resp.status == 404:
                code = re.search(rb"<Code>([A-Za-z]{1,64})</Code>", resp.read(4096, decode_content=False))
                raise FileNotFoundError(f"{redact(url)}: not found ({code[1].decode() if code else 404})")
            if resp.status != 200:
                self._quick_refused.add(bucket)
                return False
            stated = resp.headers.get("Content-Length")
            size = int(stated) if stated is not None and stated.isdigit() else None
            try:
                _write_body(url, path, resp.stream(1 << 20, decode_content=False), size, max_bytes)
            except urllib3.exceptions.HTTPError as err:  # reset, timed out or cut short mid-body
                raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
            whole = True
        finally:
            if whole:
                resp.release_conn()
            else:  # an error answer or a body not read to its end: the connection is not reused
                resp.close()
        return True

    def read_range(
        self, url: str, start: int, end: int, *, timeout: float
    ) -> tuple[bytes, int | None] | None:
        from botocore.exceptions import ClientError

        bucket, key = split_bucket(url)
        client = self._client(url, timeout, write=False)

        def get() -> tuple[bytes, int | None]:
            try:
                obj = client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}")
            except ClientError as err:
                if err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 416:
                    return b"", None  # past the end: the object is smaller than asked
                raise
            body = obj["Body"]
            try:
                stated = str(obj.get("ContentRange") or "")
                total = stated.rpartition("/")[2]
                if not stated or not total.isdigit():
                    return b"", None  # the store sent the whole object: not read here
                return body.read(end - start + 1), int(total)  # one byte over: a long body shows
            finally:
                body.close()

        result: tuple[bytes, int | None] = self._call(url, get)
        return result

    def quick_reader(self, url: str, *, timeout: float) -> Callable[[int, int], bytes | None] | None:
        if _proxy_set():
            return None
        try:
            presigned, http = self._presign(url, timeout), self._pool()
        except Exception:  # no credentials, a bad profile...: the caller uses read_range
            return None

        def read(start: int, end: int) -> bytes | None:
            try:
                resp = http.request(
                    "GET",
                    presigned,
                    headers={"Range": f"bytes={start}-{end - 1}"},
                    retries=False,
                    timeout=timeout,
                )
            except Exception:
                return None
            return resp.data if resp.status == 206 and len(resp.data) == end - start else None

        return read

    def warm(self, url: str) -> None:
        try:
            self._client(url, 60.0, write=False)  # parses the models into the shared loader
        except Exception:  # a bad profile, no botocore data...: the first real request names it
            pass

    def _presign(self, url: str, timeout: float) -> str:
        # the profile too: a URL's endpoint or credentials may change (STREAMING_STORAGE_PROFILES, the env)
        key, now = (url, timeout, profile_for(url)), time.monotonic()
        with self._lock:
            got = self._presigned.get(key)
        if got is not None and now - got[1] < _PRESIGN_REUSE_S:
            return got[0]
        bucket, name = split_bucket(url)
        presigned = self._client(url, timeout, write=False).generate_presigned_url(
            "get_object", Params={"Bucket": bucket, "Key": name}, ExpiresIn=int(2 * _PRESIGN_REUSE_S)
        )
        with self._lock:
            self._presigned[key] = (presigned, now)
        return str(presigned)

    def _pool(self) -> Any:  # a urllib3.PoolManager
        with self._lock:
            if self._http is None:
                import urllib3

                self._http = urllib3.PoolManager(maxsize=_POOL, ca_certs=os.environ.get("AWS_CA_BUNDLE"))
            return self._http

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


def _proxy_set() -> bool:
    """Whether the environment names an HTTP proxy (botocore routes through it; the plain pool would not)."""
    return any(os.environ.get(k) for k in _PROXY_VARS)


def _write_body(
    url: str, path: str, chunks: Iterable[bytes], size: int | None, max_bytes: int | None
) -> None:
    """Write a whole object's body (``chunks``, read lazily; ``size``: its stated length, None if unstated) to
    ``path``: refused before any byte where ``size`` is past ``max_bytes``, and at the first byte past it
    otherwise; ``TransientStorageError`` when the body ends short of ``size``."""
    check_stated_size(url, size, max_bytes)
    with open(path, "wb") as f:
        out = BoundedWriter(f, max_bytes, url)
        for chunk in chunks:
            out.write(chunk)
    if size is not None and os.path.getsize(path) != size:
        raise TransientStorageError(f"{redact(url)}: body shorter than Content-Length")


def _client_error(err: Any, url: str) -> Exception:
    """What a botocore ``ClientError`` means here: not found, access denied, transient, or itself."""
    status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    code = str(err.response.get("Error", {}).get("Code", ""))
    if status == 404 or code in ("404", "NoSuchKey", "NotFound", "NoSuchBucket"):
        return FileNotFoundError(f"{redact(url)}: not found ({code or status})")
    if status == 403 or code in ("403", "AccessDenied"):
        return PermissionError(f"{redact(url)}: access denied; check the credentials for this bucket")
    if status in TRANSIENT_HTTP or code in (
        "SlowDown",
        "Throttling",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    ):
        return TransientStorageError(f"{redact(url)}: {code or status}")
    return err
