"""Shared fixtures: paths to the read-only test data in ../shared/data (never copied into the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The shared test-data root; tests that need it skip with a clear reason when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def neox_tokenizer_path(shared_data: Path) -> Path:
    """The gpt-neox-20b tokenizer.json that MPT uses."""
    return shared_data / "tokenizers" / "gpt-neox-20b" / "tokenizer.json"
