"""Storage backends: the official SDK of each store behind one small interface, chosen by URL scheme.

Design note: one module per backend family (``local``, ``s3``, ``gcs``, ``azure``, ``hf``, ``http``), the
shared interface and error contract in ``base``; this module only maps a URL's scheme to its backend and
caches one instance per scheme, relevant environment and process. Each backend maps its SDK's failures to
``FileNotFoundError`` / ``PermissionError`` (permanent, never retried, the URL in the message),
``TransientStorageError`` (retried by ``streaming.storage.transfer``) and anything else (a bug: propagated).
SDK-internal retries are turned off where the SDK allows it, so one policy (ours) decides, and every retry is
logged. SDKs are imported when a backend is built (``import streaming`` stays cheap); a missing one names the
extra to install.

The clients (``S3Backend.client``, ``GCSBackend.client``, ``AzureBackend.service``) and the error mapping
(``Backend.sdk_errors``) are public so that ``streaming.storage.whole_file`` opens whole objects through
smart_open with the same endpoint, credentials and error messages as shard transfer. The backend classes are
re-exported here, so ``from streaming.storage.backends import S3Backend`` keeps working.
"""

from __future__ import annotations

import os
from functools import cache

from streaming.storage.backends.azure import AzureBackend
from streaming.storage.backends.base import Backend
from streaming.storage.backends.gcs import GCSBackend
from streaming.storage.backends.hf import HFBackend
from streaming.storage.backends.http import HTTPBackend
from streaming.storage.backends.local import LocalBackend
from streaming.storage.backends.s3 import S3Backend
from streaming.storage.profiles import ENV_VAR as PROFILES_ENV_VAR
from streaming.storage.url import redact, scheme_of

__all__ = [
    "AzureBackend",
    "Backend",
    "GCSBackend",
    "HFBackend",
    "HTTPBackend",
    "LocalBackend",
    "S3Backend",
    "get_backend",
]


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
