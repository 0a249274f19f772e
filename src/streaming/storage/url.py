"""The URL grammar, shared by readers and writers, and credential redaction for anything we print.

``s3://bucket/key``, ``gs://bucket/key``, ``azure://container/blob`` (the account comes from the environment,
the same form in both directions), ``hf://datasets/org/repo/path``, ``http(s)://host/path`` (read only),
``file:///path`` and plain paths.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

__all__ = ["SCHEMES", "is_remote", "join_url", "redact", "scheme_of", "split_bucket"]

SCHEMES = ("s3", "gs", "azure", "hf", "http", "https", "file")
_SECRET_QUERY = re.compile(r"(?i)(sig|signature|x-amz-[a-z-]*|token|key|secret|credential|se|sp|sv)=[^&]*")


def scheme_of(url: str) -> str:
    """The URL scheme (``""`` for a plain local path; Windows drive letters are not schemes)."""
    scheme = urlsplit(url).scheme
    return scheme.lower() if len(scheme) > 1 else ""


def is_remote(url: str | None) -> bool:
    """True for URLs that need a storage backend (anything but a plain path or ``file://``)."""
    return bool(url) and scheme_of(url) not in ("", "file")  # type: ignore[arg-type]


def join_url(base: str, *parts: str | None) -> str:
    """Join path parts onto a URL or path with ``/`` (empty or None parts are skipped)."""
    out = base
    for part in parts:
        if part:
            out = out.rstrip("/") + "/" + part.lstrip("/")
    return out


def split_bucket(url: str) -> tuple[str, str]:
    """``scheme://bucket/key/parts`` -> ``("bucket", "key/parts")``.

    Raises:
        ValueError: If the URL has no bucket (or container) name.
    """
    parts = urlsplit(url)
    if not parts.netloc:
        raise ValueError(f"{redact(url)}: expected {parts.scheme}://<bucket>/<key>")
    return parts.netloc, parts.path.lstrip("/")


def redact(url: str) -> str:
    """The URL with user info and secret-looking query parameters removed, safe for logs and errors."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.hostname or ""
    if parts.port:
        netloc += f":{parts.port}"
    if parts.username or parts.password:
        netloc = "***@" + netloc
    query = _SECRET_QUERY.sub(lambda m: f"{m.group(1)}=***", parts.query)
    return urlunsplit((parts.scheme, netloc if parts.scheme else parts.netloc, parts.path, query, ""))
