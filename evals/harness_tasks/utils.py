"""Loads the local jsonl files behind the lm-eval tasks in this folder (lm-eval `custom_dataset` hook).

The files live under the ICL data root (evals/README.md): `--metadata '{"data_root": "/path"}'`, else the
environment variable EVAL_DATA, else `evals/data`. Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]


def _root(data_root: str | None) -> Path:
    root = Path(data_root or os.environ.get("EVAL_DATA") or _REPO / "evals" / "data").expanduser()
    if not root.is_absolute() and not root.is_dir():
        root = _REPO / root
    return root


def load_jsonl(
    file: str, data_root: str | None = None, limit: int | None = None, **unused: Any
) -> dict[str, Any]:
    """`{"test": Dataset}` of the jsonl `file` (relative to the data root), first `limit` rows if given."""
    import datasets

    path = _root(data_root) / file
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: set EVAL_DATA (or --metadata '{{\"data_root\": ...}}') to the ICL data root "
            "that holds llm-foundry's local_data layout (e.g. ../shared/data/icl)"
        )
    rows = []
    with path.open() as fh:
        for line in fh:
            if line.strip():
                rows.append(json.loads(line))
            if limit is not None and len(rows) >= int(limit):
                break
    return {"test": datasets.Dataset.from_list(rows)}


def load_text(
    file: str, data_root: str | None = None, limit: int | None = None, **unused: Any
) -> dict[str, Any]:
    """`{"test": Dataset}` of `{"text": paragraph}` rows: a text file split at blank lines."""
    import datasets

    path = _root(data_root) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: set EVAL_DATA (or --metadata data_root) to the data root")
    paras = [p.strip() for p in re.split(r"\n\s*\n", path.read_text()) if p.strip()]
    if limit is not None:
        paras = paras[: int(limit)]
    return {"test": datasets.Dataset.from_list([{"text": p} for p in paras])}
