"""convert_finetuning_dataset (raw and tokenized MDS, local and S3), sources, the instruct generator, conf files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from foundry.data.finetune import FinetuneDataConfig, build_finetune_dataloader
from foundry.data.finetune.convert import convert_finetuning_dataset
from foundry.data.finetune.instruct import write_instruct_dataset
from foundry.data.finetune.offline import OfflineInstructDataConfig
from foundry.data.finetune.sources import load_rows
from streaming import StreamingDataset
from streaming.reader.world import World

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "scripts" / "data_prep" / "convert_finetuning_dataset.py"
ROWS = [
    {"prompt": "Say one", "response": " one"},
    {"prompt": "Say two", "completion": " two"},
    {"prompt": "word " * 50, "response": " cut"},
]


def _mds_rows(path: str) -> list[dict]:
    ds = StreamingDataset(local=path, batch_size=1)
    return [ds[i] for i in range(ds.size)]


def test_sources_read_every_file_type(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"prompt": "a", "response": "b"}, {"prompt": "c", "response": "d"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "val.json").write_text(json.dumps(rows))
    (tmp_path / "test.csv").write_text("prompt,response\na,b\nc,d\n")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "extra.parquet")
    for split in ("train", "val", "test", "extra"):
        assert load_rows(str(tmp_path), split=split) == rows
    assert load_rows(str(tmp_path / "val.json"), split="anything") == rows
    with pytest.raises(FileNotFoundError, match="found splits \\['extra', 'test', 'train', 'val'\\]"):
        load_rows(str(tmp_path), split="dev")


def test_hf_saved_dataset_folder(tmp_path):
    import datasets

    rows = [{"prompt": "a", "response": "b"}]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "saved"))
    assert load_rows(str(tmp_path / "saved"), split="train") == rows


def test_convert_raw_and_tokenized(tmp_path, neox):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    raw = convert_finetuning_dataset(
        str(tmp_path), splits=["train"], out=str(tmp_path / "raw"), progress=False
    )
    assert raw.written == {"train": 3} and raw.dropped == {"train": 0}
    assert _mds_rows(str(tmp_path / "raw" / "train"))[1] == {"prompt": "Say two", "response": " two"}
    tok = convert_finetuning_dataset(
        str(tmp_path),
        splits=["train"],
        out=str(tmp_path / "tok"),
        tokenizer=neox,
        max_seq_len=16,
        progress=False,
    )
    assert tok.written == {"train": 2} and tok.dropped == {"train": 1}  # the long prompt leaves no loss token
    first = _mds_rows(str(tmp_path / "tok" / "train"))[0]
    assert first["turns"] == [
        {"input_ids": neox("Say one")["input_ids"], "labels": neox(" one")["input_ids"]}
    ]
    # raw and tokenized MDS give the same batches
    batches = []
    for sub in ("raw", "tok"):
        cfg = FinetuneDataConfig(local=str(tmp_path / sub), shuffle=False)
        loader = build_finetune_dataloader(
            cfg, tokenizer=neox, device_batch_size=2, world=World(), split="train", max_seq_len=16, seed=0
        )
        batches.append(next(iter(loader)))
    assert all((batches[0][k] == batches[1][k]).all() for k in batches[0])


def test_convert_chat_script_and_errors(tmp_path):
    chat = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
    (tmp_path / "train.jsonl").write_text(json.dumps(chat) + "\n")
    spec = importlib.util.spec_from_file_location("convert_finetuning_dataset", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.main(["--dataset", str(tmp_path), "--out", str(tmp_path / "mds"), "--no_progress"])
    assert out["written"] == {"train": 1}
    assert _mds_rows(str(tmp_path / "mds" / "train")) == [chat]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "train.jsonl").write_text(json.dumps({"messages": chat["messages"][:1]}) + "\n")
    with pytest.raises(ValueError, match="row 0: a chat needs at least 2 messages"):
        module.main(["--dataset", str(tmp_path / "bad"), "--out", str(tmp_path / "x"), "--no_progress"])


def test_convert_from_and_to_s3(s3_bucket, tmp_path, neox):
    from streaming.storage import open_url

    with open_url(f"{s3_bucket}/src/train.jsonl", "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in ROWS))
    summary = convert_finetuning_dataset(
        f"{s3_bucket}/src", splits=["train"], out=f"{s3_bucket}/mds", progress=False
    )
    assert summary.written == {"train": 3}
    cfg = FinetuneDataConfig(remote=f"{s3_bucket}/mds", local=str(tmp_path / "cache"), shuffle=False)
    loader = build_finetune_dataloader(
        cfg, tokenizer=neox, device_batch_size=3, world=World(), split="train", max_seq_len=64, seed=0
    )
    assert next(iter(loader))["input_ids"].shape == (3, 64)


def test_instruct_dataset_is_deterministic_and_loads(tmp_path, neox):
    counts = write_instruct_dataset(tmp_path / "a", additions=50, max_modules=10)
    write_instruct_dataset(tmp_path / "b", additions=50, max_modules=10)
    assert counts["train"] > 60 and counts["val"] > 3
    assert (tmp_path / "a" / "train.jsonl").read_bytes() == (tmp_path / "b" / "train.jsonl").read_bytes()
    cfg = FinetuneDataConfig(hf_name=str(tmp_path / "a"), packing_ratio=2.0)
    loader = build_finetune_dataloader(
        cfg, tokenizer=neox, device_batch_size=4, world=World(), split="val", max_seq_len=128, seed=0
    )
    assert loader.dropped_examples == 0 and next(iter(loader))["sequence_id"].shape == (4, 128)
    write_instruct_dataset(tmp_path / "c", additions=5, max_modules=2, chat=True)
    rows = load_rows(str(tmp_path / "c"), split="train")
    assert rows and all(set(r) == {"messages"} for r in rows)


@pytest.mark.parametrize(
    "path", sorted((REPO / "conf" / "data" / "finetune").glob("*.yaml")), ids=lambda p: p.name
)
def test_conf_files_fit_the_schema(path):
    node = yaml.safe_load(path.read_text())
    node.pop("defaults")
    node = {k: ("/tmp/x" if v == "???" else v) for k, v in node.items()}
    if isinstance(node.get("hf_name"), str) and "${" in node["hf_name"]:
        node["hf_name"] = "/tmp/x"
    # a file declares its schema through its defaults (`_finetune_instruct`: the offline-generated variant)
    schema = OfflineInstructDataConfig if "quickstart_local" in node else FinetuneDataConfig
    cfg = OmegaConf.merge(OmegaConf.structured(schema(hf_name="-")), node)
    if node.get("local") is not None:
        cfg.hf_name = None
    assert isinstance(OmegaConf.to_object(cfg), schema)
