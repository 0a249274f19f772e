"""Error classes shared by the storage backends: transient (retry) vs permanent (fail at once)."""

from __future__ import annotations

__all__ = ["TransientStorageError", "missing_extra"]


class TransientStorageError(OSError):
    """A failure worth retrying: connection reset, timeout, HTTP 5xx/429, throttling."""


def missing_extra(package: str, extra: str, scheme: str) -> ImportError:
    """The ImportError to raise when a backend's SDK is not installed."""
    return ImportError(f"{scheme}:// URLs need the '{package}' package: pip install 'foundry-stack[{extra}]'")
