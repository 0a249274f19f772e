"""The URL grammar, shared by readers and writers, and credential redaction for anything we print.

``s3://bucket/key``, ``gs://bucket/key``, ``azure://container/blob`` (the account comes from the environment,
the same form in both directions), ``hf://datasets/org/repo/path``, ``http(s)://host/path`` (read only),
``file:///path`` and plain paths.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from stackbase.secrets import redact_text, redact_url

__all__ = ["SCHEMES", "is_remote", "join_url", "redact", "scheme_of", "split_bucket"]

SCHEMES = ("s3", "gs", "azure", "hf", "http", "https", "file")


def scheme_of(url: str) -> str:
    """The URL scheme (``""`` for a plain local path; Windows drive letters are not schemes)."""
    scheme = urlsplit(url).scheme
    return scheme.lower() if len(scheme) > 1 else ""


def is_remote(url: str | None) -> bool:
    """True for URLs that need a storage backend (anything but a plain path or ``file://``)."""
    return bool(url) and scheme_of(url) not in ("", "file")  # type: ignore[arg-type]


def join_url(base: str, *parts: str | None) -> str:
    """Join path parts onto a URL or path with ``/`` (empty or None parts are skipped).

    The parts go into the path of a remote URL; its query and fragment stay at the end
    (``https://host/a?sig=x`` + ``b`` -> ``https://host/a/b?sig=x``). Plain paths and ``file://`` URLs are
    paths, so a ``?`` or ``#`` in them is part of a file name.
    """
    head, tail = base, ""
    if is_remote(base):
        cut = [i for i in (base.find("?"), base.find("#")) if i >= 0]
        if cut:
            head, tail = base[: min(cut)], base[min(cut) :]
    for part in parts:
        if part:
            head = head.rstrip("/") + "/" + part.lstrip("/")
    return head + tail


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
    """The URL with user info and secret-looking query parameters masked, and the value of any credential
    environment variable anywhere in it (a `${oc.env:...}` secret in a save folder's path: issue 39), safe for
    logs and errors (`stackbase.secrets`; `redact_text` / `redact_value` cover text and config trees)."""
    return redact_text(redact_url(url))
