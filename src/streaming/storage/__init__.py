"""Object storage: one URL grammar per backend for reading and writing, with retries and atomic downloads."""

from streaming.storage.transfer import RetryPolicy, download_file, list_files, upload_file
from streaming.storage.url import is_remote, join_url, redact

__all__ = ["RetryPolicy", "download_file", "is_remote", "join_url", "list_files", "redact", "upload_file"]
