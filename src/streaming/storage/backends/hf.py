"""Hugging Face Hub datasets as a backend: ``hf://datasets/<org>/<repo>/<path>``.

Design note: downloads go through ``huggingface_hub``'s own cache (``HF_TOKEN`` for private repos) and are
copied to the caller's path; the SDK is imported when the backend is built, and a missing one names the extra.
"""

from __future__ import annotations

import os
import shutil

from streaming.storage.backends.base import Backend, check_stated_size
from streaming.storage.errors import TransientStorageError, missing_extra
from streaming.storage.url import redact

__all__ = ["HFBackend"]


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

    def download(self, url: str, path: str, *, timeout: float, max_bytes: int | None = None) -> None:
        repo, filename = self._parse(url)
        try:
            cached = self._hub.hf_hub_download(repo_id=repo, filename=filename, repo_type="dataset")
        except self._hub.errors.EntryNotFoundError:
            raise FileNotFoundError(f"{redact(url)}: not found") from None
        except (self._hub.errors.LocalEntryNotFoundError, ConnectionError, TimeoutError) as err:
            raise TransientStorageError(f"{redact(url)}: {type(err).__name__}") from None
        # the hub's own cache holds it already
        check_stated_size(url, os.path.getsize(cached), max_bytes)
        shutil.copyfile(cached, path)

    def upload(self, path: str, url: str, *, timeout: float) -> None:
        repo, filename = self._parse(url)
        self._hub.HfApi().upload_file(
            path_or_fileobj=path, path_in_repo=filename, repo_id=repo, repo_type="dataset"
        )
