"""Packing documents into fixed-length rows, dtype choice, and the converter script on wikitext-2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry.data.prep import concat_documents, convert_texts, smallest_uint_dtype

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "data_prep" / "convert_dataset_hf.py"

docs_st = st.lists(st.lists(st.integers(0, 999), max_size=40), max_size=30)


@settings(deadline=None, max_examples=60)
@given(docs=docs_st, seq=st.integers(1, 17), eos=st.lists(st.integers(1000, 1001), max_size=2))
def test_wrap_rows_are_the_stream_cut_in_pieces(docs, seq, eos):
    stream = [t for d in docs for t in (*d, *eos)]
    rows = [row for row, _ in concat_documents(docs, max_seq_len=seq, eos=eos)]
    assert all(len(r) == seq for r in rows)
    flat = [int(t) for r in rows for t in r]
    assert flat == stream[: len(stream) // seq * seq]


@settings(deadline=None, max_examples=60)
@given(docs=docs_st, seq=st.integers(1, 17))
def test_no_wrap_rows_never_span_documents(docs, seq):
    rows = [row for row, _ in concat_documents(docs, max_seq_len=seq, bos=[7777], wrap=False)]
    expected = []
    for d in docs:
        ids = [7777, *d]
        expected += [ids[i : i + seq] for i in range(0, len(ids) - seq + 1, seq)]
    assert [list(map(int, r)) for r in rows] == expected


@pytest.mark.parametrize(("vocab", "dtype"), [(256, "uint8"), (257, "uint16"), (50277, "uint16"), (65536, "uint16"),
                                               (65537, "uint32"), (2**32 + 1, "uint64")])  # fmt: skip
def test_smallest_uint_dtype(vocab, dtype):
    assert smallest_uint_dtype(vocab) == dtype


def test_convert_requires_a_separator(tmp_path):
    with pytest.raises(ValueError, match="eos_text"):
        convert_texts(["a"], tokenizer=None, out=str(tmp_path), max_seq_len=4)


def _script():
    spec = importlib.util.spec_from_file_location("convert_dataset_hf", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_converter_on_wikitext2_with_neox(shared_data, neox_tokenizer_path, tmp_path):
    from foundry.tokenizers import TokenizerConfig, build_tokenizer
    from streaming import LocalDataset

    wt2 = shared_data / "text" / "wikitext-2"
    report = _script().main(
        ["--dataset", str(wt2), "--splits", "valid", "--out", str(tmp_path / "mds"), "--tokenizer",
         str(neox_tokenizer_path), "--concat_tokens", "256", "--eos_text", "<|endoftext|>", "--txt_docs", "line",
         "--num_workers", "2", "--compression", "zstd", "--no_progress"]
    )  # fmt: skip
    assert report["valid"]["rows"] > 900
    ds = LocalDataset(str(tmp_path / "mds"), "valid")
    assert len(ds) == report["valid"]["rows"]
    row = ds[0]["tokens"]
    assert row.dtype == np.uint16 and row.shape == (256,)
    tok = build_tokenizer(TokenizerConfig(name=str(neox_tokenizer_path)))
    first_line = next(
        line for line in (wt2 / "valid.txt").read_text().splitlines(keepends=True) if line.strip()
    )
    expected = tok(first_line, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert row[: len(expected)].tolist() == expected[:256]
    # rows are the concatenated stream: the whole split decodes back to its lines
    text = tok.decode(np.concatenate([ds[i]["tokens"] for i in range(3)]).tolist())
    assert text.startswith(first_line)


def _put(bucket_url: str, endpoint: str, key: str, text: str) -> None:
    import boto3

    boto3.client("s3", endpoint_url=endpoint).put_object(Bucket=bucket_url[5:], Key=key, Body=text.encode())


def test_input_files_and_documents_from_an_object_store(s3_bucket, s3_env, tmp_path):
    """The local folder rules hold for a prefix: `<split>/*` first, else `<split>*` beside it; files read whole."""
    from foundry.data.prep import input_files, read_documents

    _put(s3_bucket, s3_env, "c/train/b.jsonl", '{"text": "two"}\n\n{"text": "three"}\n')
    _put(s3_bucket, s3_env, "c/train/a.txt", "one\n")
    _put(s3_bucket, s3_env, "c/train/deeper/x.txt", "not a child\n")
    _put(s3_bucket, s3_env, "c/valid.json", '[{"text": "v1"}, {"text": "v2"}]')
    _put(s3_bucket, s3_env, "c/notes.md", "ignored")
    train = input_files(f"{s3_bucket}/c", "train")
    assert train == [f"{s3_bucket}/c/train/a.txt", f"{s3_bucket}/c/train/b.jsonl"]
    assert list(read_documents(train)) == ["one\n", "two", "three"]
    assert list(read_documents(input_files(f"{s3_bucket}/c/", "valid"))) == ["v1", "v2"]
    assert input_files(f"{s3_bucket}/c/valid.json", "anything") == [f"{s3_bucket}/c/valid.json"]
    with pytest.raises(FileNotFoundError, match=f"split 'test' under {s3_bucket}/c"):
        input_files(f"{s3_bucket}/c", "test")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        list(read_documents([f"{s3_bucket}/c/missing.jsonl"]))


def test_converter_reads_a_jsonl_url_like_the_local_file(s3_bucket, s3_env, neox_tokenizer_path, tmp_path):
    from streaming import LocalDataset

    lines = "".join(f'{{"text": "document {i} says hello to the packer"}}\n' for i in range(200))
    (tmp_path / "x.jsonl").write_text(lines)
    _put(s3_bucket, s3_env, "in/x.jsonl", lines)
    common = ["--splits", "train", "--tokenizer", str(neox_tokenizer_path), "--concat_tokens", "32",
              "--eos_text", "<|endoftext|>", "--no_progress"]  # fmt: skip
    remote = _script().main(["--dataset", f"{s3_bucket}/in/x.jsonl", "--out", str(tmp_path / "r"), *common])
    local = _script().main(["--dataset", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "l"), *common])
    assert remote["train"]["documents"] == local["train"]["documents"] == 200
    assert remote["train"]["rows"] == local["train"]["rows"] > 0
    got, want = LocalDataset(str(tmp_path / "r"), "train"), LocalDataset(str(tmp_path / "l"), "train")
    assert all((got[i]["tokens"] == want[i]["tokens"]).all() for i in range(len(want)))
