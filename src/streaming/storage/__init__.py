"""Object storage: one URL grammar per backend for reading and writing, with retries and atomic downloads
(`transfer`, for shards and checkpoints), and `open_url` for files read or written whole (`whole_file`)."""

from streaming.storage.transfer import RetryPolicy, download_file, list_files, upload_file
from streaming.storage.url import is_remote, join_url, redact
from streaming.storage.whole_file import open_url

__all__ = [
    "RetryPolicy",
    "download_file",
    "is_remote",
    "join_url",
    "list_files",
    "open_url",
    "redact",
    "upload_file",
]
