"""A mixture's per-stream metrics reach the JSONL file, a W&B offline run (read back from its records) and,
compactly, the console."""

from __future__ import annotations

import io
import json
import struct
import time
from pathlib import Path

import pytest

from foundry.loggers import ConsoleLogger, JsonlLogger, WandbConfig, read_metrics
from tests.foundry.train.stream_helpers import make_trainer, mixture_batches, tiny_model

_BLOCK = 32 * 1024
_HEADER = 7  # W&B's leveldb-style log: a 7-byte file header, then 7-byte record headers within 32 KiB blocks


def _wandb_records(path: Path) -> list[bytes]:
    """The protobuf payloads of a `.wandb` file (leveldb log format: FULL=1, FIRST=2, MIDDLE=3, LAST=4)."""
    data = path.read_bytes()
    out: list[bytes] = []
    pos, parts = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        if (kind == 0 and length == 0) or pos + _HEADER + length > len(data):  # end, or still being written
            break
        parts += data[pos + _HEADER : pos + _HEADER + length]
        pos += _HEADER + length
        if kind in (1, 4):
            out.append(parts)
            parts = b""
    return out


def _wandb_history(run_dir: Path, *, timeout: float = 60.0) -> list[dict[str, object]]:
    """The history rows of the offline run, once its file holds the final `exit` record (W&B's service
    process may still be writing when `finish()` returns)."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + timeout
    while True:
        records = []
        for run_file in run_dir.glob("wandb/offline-run-*/run-*.wandb"):
            for payload in _wandb_records(run_file):
                record = pb.Record()
                record.ParseFromString(payload)
                records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    rows = []
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = record.history.item  # wandb 0.31 fills `nested_key` (one element for a flat key)
            rows.append(
                {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in items}
            )
    return rows


_KEYS = ("eval/c4/loss", "eval/arxiv/perplexity", "train/c4/samples", "train/arxiv/tokens")


def _fit(loggers: list) -> dict[str, float]:
    tr = make_trainer(
        tiny_model(), loader=mixture_batches(2), max_steps=2, eval_loader=mixture_batches(1, seed=5),
        loggers=loggers,
    )  # fmt: skip
    final = tr.fit()
    for logger in loggers:
        logger.close()
    return final


def test_jsonl_carries_per_stream_metrics(tmp_path):
    final = _fit([JsonlLogger(tmp_path / "metrics.jsonl")])
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows if "train/c4/samples" in r] == [1, 2]
    for key in _KEYS:
        assert any(row.get(key) == final[key] for row in rows), key


@pytest.mark.slow  # a W&B offline run takes ~8 s to start and finish on 2 busy cores
def test_wandb_offline_run_carries_per_stream_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from foundry.loggers.wandb import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    final = _fit([WandbLogger(WandbConfig(project="test"), run_name="mix", run_dir=tmp_path)])
    history = _wandb_history(tmp_path)
    assert [r["_step"] for r in history if "train/c4/samples" in r] == [1, 2]
    for key in _KEYS:
        assert any(row.get(key) == pytest.approx(final[key], rel=1e-12) for row in history), key


def test_console_prints_stream_losses_on_one_compact_eval_line():
    out = io.StringIO()
    log = ConsoleLogger(max_steps=10, progress_bar=False, stream=out)
    metrics = {"eval/loss": 2.0, "eval/perplexity": 7.389, "eval/c4/loss": 1.5, "eval/c4/perplexity": 4.48}
    log.log_metrics({**metrics, "eval/arxiv/loss": 2.5, "eval/arxiv/perplexity": 12.18}, step=4)
    log.log_metrics({"train/loss": 2.0, "train/c4/samples": 40.0, "train/c4/tokens": 520.0}, step=5)
    lines = out.getvalue().splitlines()
    assert lines == [
        "[eval] step 4/10: eval/loss=2.0000 eval/perplexity=7.3890",
        "[eval] step 4/10 loss by stream: c4=1.5000 arxiv=2.5000",
        "[train] step 5/10: loss=2.0000",
    ]
